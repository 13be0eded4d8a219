/* fuzz-tokenizer.c: libFuzzer target for the tokenizer.json loader and the encoder.
 *
 * The input is split at its first NUL byte: what comes before is a tokenizer.json for
 * amk_tokenizer_new_from_json_data(), which must either return a tokenizer or fail
 * with an AMK_TOKENIZER_ERROR (never crash, leak, hang or log a critical). A tokenizer that
 * loads encodes what comes after the NUL (or, without one, a fixed sample) with and
 * without special tokens: valid UTF-8 must encode to ids inside the vocabulary that
 * decode without error, and re-encoding the decoded text must not fail; invalid UTF-8
 * must fail with AMK_TOKENIZER_ERROR_INVALID_TEXT.
 *
 * Seeds: tests/data/smollm2-tokenizer.json is too big for a fast seed; small
 * tokenizer.json files like those in tests/unit/test-tokenizer.c are better.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amk-glib/amk-glib.h>

#define FUZZ_TARGET "fuzz-tokenizer"
#include "fuzz-common.h"

static const char *sample_texts[] = {
  "Hello world! It's 2024: <|im_start|>user\n  x = [1, 2]\t\tñ 日本 😀\n",
  "<s></s>  \n\n abc ab ca",
};

static void
check_text (AmkTokenizer *tok,
            const char   *text,
            gboolean      add_special)
{
  g_autoptr(GError) error = NULL;
  g_autofree gint32 *ids = NULL;
  g_autofree char *decoded = NULL;
  g_autofree gint32 *again = NULL;
  gsize n = 0, n_again = 0;
  guint vocab_size = amk_tokenizer_get_vocab_size (tok);

  ids = amk_tokenizer_encode (tok, text, add_special, &n, &error);
  if (!g_utf8_validate (text, -1, NULL))
    {
      if (ids != NULL || !g_error_matches (error, AMK_TOKENIZER_ERROR,
                                           AMK_TOKENIZER_ERROR_INVALID_TEXT))
        fail ("invalid UTF-8 did not fail with AMK_TOKENIZER_ERROR_INVALID_TEXT", error);
      return;
    }
  if (ids == NULL)
    {
      /* a pathological regex may run out of PCRE2's match limit */
      if (!g_error_matches (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_PATTERN_FAILED))
        fail ("encode failed", error);
      return;
    }
  for (gsize i = 0; i < n; i++)
    if (ids[i] < 0 || (guint) ids[i] >= vocab_size ||
        amk_tokenizer_id_to_token (tok, ids[i]) == NULL)
      fail ("encode gave an id outside the vocabulary", NULL);

  decoded = amk_tokenizer_decode (tok, ids, n, &error);
  if (decoded == NULL)
    fail ("decode of encoded ids failed", error);
  if (!g_utf8_validate (decoded, -1, NULL))
    fail ("decode gave invalid UTF-8", NULL);
  again = amk_tokenizer_encode (tok, decoded, FALSE, &n_again, &error);
  if (again == NULL && !g_error_matches (error, AMK_TOKENIZER_ERROR,
                                         AMK_TOKENIZER_ERROR_PATTERN_FAILED))
    fail ("re-encoding decoded text failed", error);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkTokenizer) tok = NULL;
  const uint8_t *nul = memchr (data, '\0', size);
  size_t json_len = nul != NULL ? (size_t) (nul - data) : size;

  tok = amk_tokenizer_new_from_json_data ((const char *) data, (gssize) json_len, &error);
  if (tok == NULL)
    {
      if (error == NULL || error->domain != AMK_TOKENIZER_ERROR)
        fail ("load failed without an AMK_TOKENIZER_ERROR", error);
      return 0;
    }
  if (error != NULL)
    fail ("load succeeded and set an error", error);

  if (nul != NULL)
    {
      g_autofree char *text = g_strndup ((const char *) nul + 1, size - json_len - 1);

      check_text (tok, text, FALSE);
      check_text (tok, text, TRUE);
    }
  else
    for (guint i = 0; i < G_N_ELEMENTS (sample_texts); i++)
      check_text (tok, sample_texts[i], i == 1);
  return 0;
}
