/* amk-tokenizer-added-tokens.c: the added tokens of AmkTokenizer (`<|im_start|>`,
 * GGUF control tokens): their table, and cutting them out of the text before anything
 * else sees it, leftmost-longest, with their lstrip, rstrip and single_word rules.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include "amk-tokenizer-private.h"

void
amk_tokenizer_added_token_clear (gpointer data)
{
  AddedToken *token = data;

  g_free (token->content);
}

gboolean
amk_tokenizer_add_added_token (AmkTokenizer  *self,
                               const char    *content,
                               gint64         id,
                               gboolean       special,
                               gboolean       normalized,
                               gboolean       lstrip,
                               gboolean       rstrip,
                               gboolean       single_word,
                               const char    *source,
                               GError       **error)
{
  AddedToken token = { 0 };

  if (content[0] == '\0' || id < 0 || id >= self->vocab_size)
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                   _("Tokenizer “%s”: field “added_tokens”: token “%s” with id %" PRId64
                     " is empty or its id is outside 0 to %u"),
                   source, content, (int64_t) id, self->vocab_size - 1);
      return FALSE;
    }
  if (g_hash_table_contains (self->added_by_text, content))
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                   _("Tokenizer “%s”: field “added_tokens”: token “%s” appears twice"),
                   source, content);
      return FALSE;
    }
  if (self->id_to_token[id] == NULL)
    {
      if (!amk_tokenizer_set_token (self, content, id, source, "added_tokens", error))
        return FALSE;
    }
  else if (strcmp (self->id_to_token[id], content) != 0)
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                   _("Tokenizer “%s”: field “added_tokens”: token “%s” has id %" PRId64
                     ", which the vocabulary gives to “%s”"),
                   source, content, (int64_t) id, self->id_to_token[id]);
      return FALSE;
    }
  token.content = g_strdup (content);
  token.len = strlen (content);
  token.id = (gint32) id;
  token.special = special;
  token.normalized = normalized;
  token.lstrip = lstrip;
  token.rstrip = rstrip;
  token.single_word = single_word;
  g_array_append_val (self->added, token);
  g_hash_table_insert (self->added_by_text,
                       g_array_index (self->added, AddedToken, self->added->len - 1).content,
                       GUINT_TO_POINTER (self->added->len));
  if (special)
    self->special[id] = 1;
  return TRUE;
}

void
amk_tokenizer_rebuild_added_index (AmkTokenizer *self)
{
  /* the array may have moved while it grew */
  g_hash_table_remove_all (self->added_by_text);
  for (guint i = 0; i < self->added->len; i++)
    g_hash_table_insert (self->added_by_text,
                         g_array_index (self->added, AddedToken, i).content,
                         GUINT_TO_POINTER (i + 1));
}

static gboolean
is_white_space (gunichar c)
{
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

static gboolean
is_word_char (gunichar c)
{
  return g_unichar_isalnum (c);
}

/* Cuts the added tokens of one kind (@normalized) out of the text segments,
 * leftmost-longest, with their lstrip, rstrip and single_word rules. */
void
amk_tokenizer_split_added (AmkTokenizer *self,
                           GArray       *segments,
                           gboolean      normalized)
{
  g_autoptr(GArray) out = g_array_new (FALSE, FALSE, sizeof (Segment));
  gboolean any = FALSE;
  /* the first bytes of the tokens of this kind: a position whose byte starts none of
   * them is passed at once (Llama 3 has 256 added tokens, all starting with '<') */
  gboolean first[256] = { FALSE };

  for (guint t = 0; t < self->added->len; t++)
    {
      const AddedToken *tok = &g_array_index (self->added, AddedToken, t);

      if (tok->normalized == normalized)
        any = first[(guchar) tok->content[0]] = TRUE;
    }
  if (!any)
    return;

  for (guint s = 0; s < segments->len; s++)
    {
      Segment seg = g_array_index (segments, Segment, s);
      const char *text = seg.start;
      gsize len = seg.len, pos = 0, emitted = 0;

      if (seg.id >= 0)
        {
          g_array_append_val (out, seg);
          continue;
        }
      while (pos < len)
        {
          const AddedToken *best = NULL;
          gsize start, stop;

          if (!first[(guchar) text[pos]])
            {
              pos++;
              continue;
            }
          for (guint t = 0; t < self->added->len; t++)
            {
              const AddedToken *tok = &g_array_index (self->added, AddedToken, t);

              if (tok->normalized == normalized && tok->len <= len - pos &&
                  (best == NULL || tok->len > best->len) &&
                  memcmp (text + pos, tok->content, tok->len) == 0)
                best = tok;
            }
          if (best == NULL)
            {
              pos++;
              continue;
            }
          start = pos;
          stop = pos + best->len;
          if (best->single_word)
            {
              gboolean left_ok = start == 0 ||
                !is_word_char (g_utf8_get_char (g_utf8_prev_char (text + start)));
              gboolean right_ok = stop == len || !is_word_char (g_utf8_get_char (text + stop));

              if (!left_ok || !right_ok)
                {
                  pos = stop;
                  continue;
                }
            }
          if (best->lstrip)
            while (start > emitted)
              {
                const char *prev = g_utf8_prev_char (text + start);

                if (!is_white_space (g_utf8_get_char (prev)))
                  break;
                start = prev - text;
              }
          if (best->rstrip)
            while (stop < len && is_white_space (g_utf8_get_char (text + stop)))
              stop = g_utf8_next_char (text + stop) - text;
          if (start > emitted)
            {
              Segment gap = { text + emitted, start - emitted, -1 };
              g_array_append_val (out, gap);
            }
          {
            Segment hit = { text + start, stop - start, best->id };
            g_array_append_val (out, hit);
          }
          emitted = pos = stop;
        }
      if (len > emitted)
        {
          Segment gap = { text + emitted, len - emitted, -1 };
          g_array_append_val (out, gap);
        }
    }
  g_array_set_size (segments, 0);
  g_array_append_vals (segments, out->data, out->len);
}
