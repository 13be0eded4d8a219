/* amk-tokenizer-decode.c: ids back to text, as the ByteLevel decoder of tokenizers
 * does it: each token's characters back to GPT-2's bytes, then the bytes as UTF-8 with
 * each invalid stretch replaced by U+FFFD.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>

#include "amk-tokenizer-private.h"
#include "amk-tokenizer-stream-private.h"

/* Appends @bytes as UTF-8, each maximal invalid subpart replaced by U+FFFD (what
 * Rust's String::from_utf8_lossy does). */
static void
append_lossy (GString      *out,
              const guint8 *s,
              gsize         n)
{
  gsize i = 0;

  while (i < n)
    {
      guint8 b = s[i];
      gsize need, k;
      guint8 lo = 0x80, hi = 0xBF;

      if (b < 0x80)
        {
          g_string_append_c (out, (char) b);
          i++;
          continue;
        }
      if (b >= 0xC2 && b <= 0xDF)
        need = 1;
      else if (b >= 0xE0 && b <= 0xEF)
        {
          need = 2;
          if (b == 0xE0)
            lo = 0xA0;
          else if (b == 0xED)
            hi = 0x9F;
        }
      else if (b >= 0xF0 && b <= 0xF4)
        {
          need = 3;
          if (b == 0xF0)
            lo = 0x90;
          else if (b == 0xF4)
            hi = 0x8F;
        }
      else
        {
          g_string_append (out, "\xEF\xBF\xBD");
          i++;
          continue;
        }
      for (k = 1; k <= need; k++)
        {
          guint8 c;

          if (i + k >= n)
            break;
          c = s[i + k];
          if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF))
            break;
        }
      if (k > need)
        g_string_append_len (out, (const char *) s + i, need + 1);
      else
        g_string_append (out, "\xEF\xBF\xBD");
      i += k > need ? need + 1 : k;
    }
}

/**
 * amk_tokenizer_decode:
 * @self: a tokenizer
 * @ids: (array length=n_ids): token ids
 * @n_ids: the number of @ids
 * @error: return location for a #GError
 *
 * Turns tokens back into text, special tokens included (`decode(ids,
 * skip_special_tokens=False)` in the `tokenizers` package). Bytes that do not form
 * UTF-8 (a sequence cut in the middle of a character) become U+FFFD. An id outside the
 * vocabulary fails with %AMK_TOKENIZER_ERROR_UNKNOWN_ID.
 *
 * Returns: (transfer full) (nullable): the text, or %NULL with @error set
 */
char *
amk_tokenizer_decode (AmkTokenizer  *self,
                      const gint32  *ids,
                      gsize          n_ids,
                      GError       **error)
{
  g_autoptr(GByteArray) bytes = g_byte_array_new ();
  GString *out;

  g_return_val_if_fail (AMK_IS_TOKENIZER (self), NULL);
  g_return_val_if_fail (ids != NULL || n_ids == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  for (gsize i = 0; i < n_ids; i++)
    {
      const char *token = amk_tokenizer_id_to_token (self, ids[i]);
      gsize start = bytes->len;
      gboolean mapped = TRUE;

      if (token == NULL)
        {
          g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_UNKNOWN_ID,
                       _("Token id %d (at position %zu) is not in the vocabulary of %u tokens"),
                       (int) ids[i], (size_t) i, self->vocab_size);
          return NULL;
        }
      /* the ByteLevel decoder: characters back to bytes, or the token's own bytes
       * where one character has no byte */
      for (const char *p = token; *p != '\0'; p = g_utf8_next_char (p))
        {
          gunichar c = g_utf8_get_char (p);
          guint8 b;

          if (c >= G_N_ELEMENTS (self->char_to_byte) || self->char_to_byte[c] < 0)
            {
              mapped = FALSE;
              break;
            }
          b = (guint8) self->char_to_byte[c];
          g_byte_array_append (bytes, &b, 1);
        }
      if (!mapped)
        {
          g_byte_array_set_size (bytes, start);
          g_byte_array_append (bytes, (const guint8 *) token, strlen (token));
        }
    }
  out = g_string_sized_new (bytes->len + 1);
  append_lossy (out, bytes->data, bytes->len);
  return g_string_free (out, FALSE);
}

/* A token id whose text is still held back after this many tokens is let out as it is
 * (with U+FFFD): no UTF-8 character takes more than four bytes. */
#define MAX_HELD_TOKENS 4

char *
amk_tokenizer_decode_piece (AmkTokenizer  *self,
                            const gint32  *tokens,
                            guint          n,
                            gboolean       last,
                            guint         *held,
                            GError       **error)
{
  char *piece;

  g_return_val_if_fail (*held <= n, NULL);

  piece = amk_tokenizer_decode (self, tokens + *held, n - *held, error);
  if (piece == NULL)
    return NULL;
  if (!last && g_str_has_suffix (piece, "\xef\xbf\xbd") && n - *held < MAX_HELD_TOKENS)
    piece[0] = '\0';
  else
    *held = n;
  return piece;
}
