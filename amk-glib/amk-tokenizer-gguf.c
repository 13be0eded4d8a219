/* amk-tokenizer-gguf.c: AmkTokenizer from a GGUF file's tokenizer.ggml.* arrays (the
 * tokens by id, their types, the merges by rank) and the pre-tokenizer its
 * tokenizer.ggml.pre names, spelled out as the steps the tokenizer.json of the same
 * model has.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>

#include "amk-tokenizer-private.h"

/* The Split regexes of Llama 3 and Qwen 2 (GPT-2's is ByteLevel's own). */
#define LLAMA3_PATTERN \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" \
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_PATTERN \
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
  "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GGUF tokenizer.ggml.token_type values. */
enum {
  GGUF_TOKEN_NORMAL = 1,
  GGUF_TOKEN_UNKNOWN = 2,
  GGUF_TOKEN_CONTROL = 3,
  GGUF_TOKEN_USER_DEFINED = 4,
  GGUF_TOKEN_UNUSED = 5,
  GGUF_TOKEN_BYTE = 6,
};

/**
 * amk_tokenizer_new_from_vocab:
 * @tokens: (array zero-terminated=1): the tokens by id (`tokenizer.ggml.tokens`)
 * @merges: (array zero-terminated=1): the merges by rank, each "left right"
 *   (`tokenizer.ggml.merges`)
 * @token_types: (array length=n_types) (nullable): the type of each token
 *   (`tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined,
 *   5 unused, 6 byte), or %NULL
 * @n_types: the length of @token_types: 0 or the number of tokens
 * @pre_tokenizer: the pre-tokenizer's name (`tokenizer.ggml.pre`): "gpt2",
 *   "smollm", "starcoder", "refact", "llama-bpe" (also "llama3", "llama-v3"),
 *   or "qwen2"
 * @error: return location for a #GError
 *
 * Makes a byte-level BPE tokenizer (`tokenizer.ggml.model` "gpt2") from the arrays of
 * a GGUF file's metadata. Control tokens (type 3) become special added tokens,
 * user-defined ones (type 4) plain added tokens; both are matched in the text. Set
 * [property@Amk.Tokenizer:bos-id], [property@Amk.Tokenizer:eos-id] and
 * [property@Amk.Tokenizer:add-bos] from the metadata afterwards.
 *
 * Duplicate tokens, a mismatched @n_types or an unknown token type fail with
 * %AMK_TOKENIZER_ERROR_INVALID_VOCAB, merges naming unknown tokens with
 * %AMK_TOKENIZER_ERROR_INVALID_MERGES, an unknown @pre_tokenizer with
 * %AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER.
 *
 * Returns: (transfer full) (nullable): the tokenizer, or %NULL with @error set
 */
AmkTokenizer *
amk_tokenizer_new_from_vocab (const char *const  *tokens,
                              const char *const  *merges,
                              const gint32       *token_types,
                              gsize               n_types,
                              const char         *pre_tokenizer,
                              GError            **error)
{
  g_autoptr(AmkTokenizer) self = NULL;
  const char *source = "GGUF";
  gsize n_tokens, n_merges;

  g_return_val_if_fail (tokens != NULL, NULL);
  g_return_val_if_fail (merges != NULL, NULL);
  g_return_val_if_fail (token_types != NULL || n_types == 0, NULL);
  g_return_val_if_fail (pre_tokenizer != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  n_tokens = g_strv_length ((char **) tokens);
  n_merges = g_strv_length ((char **) merges);
  if (n_tokens == 0 || n_tokens > G_MAXINT32)
    {
      amk_tokenizer_set_field_error (error, AMK_TOKENIZER_ERROR_INVALID_VOCAB, source,
                                     "tokenizer.ggml.tokens", _("is empty or too long"));
      return NULL;
    }
  if (n_types != 0 && n_types != n_tokens)
    {
      g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                   _("Tokenizer “%s”: field “%s” has %zu entries for %zu tokens"),
                   source, "tokenizer.ggml.token_type", (size_t) n_types, (size_t) n_tokens);
      return NULL;
    }

  self = g_object_new (AMK_TYPE_TOKENIZER, NULL);

  if (g_str_equal (pre_tokenizer, "gpt2"))
    {
      if (!amk_tokenizer_add_byte_level_step (self, TRUE, FALSE, error))
        return NULL;
    }
  else if (g_str_equal (pre_tokenizer, "smollm") || g_str_equal (pre_tokenizer, "starcoder") ||
           g_str_equal (pre_tokenizer, "refact"))
    {
      if (!amk_tokenizer_add_split_step (self, "\\p{N}", source, "tokenizer.ggml.pre", error) ||
          !amk_tokenizer_add_byte_level_step (self, TRUE, FALSE, error))
        return NULL;
    }
  else if (g_str_equal (pre_tokenizer, "llama-bpe") || g_str_equal (pre_tokenizer, "llama3") ||
           g_str_equal (pre_tokenizer, "llama-v3"))
    {
      if (!amk_tokenizer_add_split_step (self, LLAMA3_PATTERN, source, "tokenizer.ggml.pre",
                                         error) ||
          !amk_tokenizer_add_byte_level_step (self, FALSE, FALSE, error))
        return NULL;
      self->ignore_merges = TRUE;
    }
  else if (g_str_equal (pre_tokenizer, "qwen2"))
    {
      if (!amk_tokenizer_add_split_step (self, QWEN2_PATTERN, source, "tokenizer.ggml.pre",
                                         error) ||
          !amk_tokenizer_add_byte_level_step (self, FALSE, FALSE, error))
        return NULL;
    }
  else
    {
      amk_tokenizer_set_unsupported_error (error, AMK_TOKENIZER_ERROR_UNSUPPORTED_PRE_TOKENIZER,
                                           source, "tokenizer.ggml.pre", pre_tokenizer);
      return NULL;
    }

  amk_tokenizer_alloc_ids (self, (guint) n_tokens);
  for (gsize i = 0; i < n_tokens; i++)
    {
      if (!g_utf8_validate (tokens[i], -1, NULL))
        {
          g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                       _("Tokenizer “%s”: field “%s”: token %zu is not UTF-8"),
                       source, "tokenizer.ggml.tokens", (size_t) i);
          return NULL;
        }
      if (!amk_tokenizer_set_token (self, tokens[i], (gint64) i, source, "tokenizer.ggml.tokens",
                                    error))
        return NULL;
    }
  for (gsize i = 0; i < n_types; i++)
    {
      if (token_types[i] < GGUF_TOKEN_NORMAL || token_types[i] > GGUF_TOKEN_BYTE)
        {
          g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_VOCAB,
                       _("Tokenizer “%s”: field “%s”: token %zu has the unknown type %d"),
                       source, "tokenizer.ggml.token_type", (size_t) i, (int) token_types[i]);
          return NULL;
        }
      if (token_types[i] == GGUF_TOKEN_UNKNOWN && self->unk_id < 0)
        self->unk_id = (gint32) i;
      if ((token_types[i] == GGUF_TOKEN_CONTROL || token_types[i] == GGUF_TOKEN_USER_DEFINED) &&
          tokens[i][0] != '\0')
        {
          gboolean special = token_types[i] == GGUF_TOKEN_CONTROL;

          if (!amk_tokenizer_add_added_token (self, tokens[i], (gint64) i, special, FALSE, FALSE,
                                              FALSE,
                                              FALSE, source, error))
            return NULL;
        }
    }
  amk_tokenizer_rebuild_added_index (self);

  amk_tokenizer_alloc_merges (self, n_merges);
  for (gsize i = 0; i < n_merges; i++)
    {
      if (!g_utf8_validate (merges[i], -1, NULL))
        {
          g_set_error (error, AMK_TOKENIZER_ERROR, AMK_TOKENIZER_ERROR_INVALID_MERGES,
                       _("Tokenizer “%s”: field “%s”: merge %zu is not UTF-8"),
                       source, "tokenizer.ggml.merges", (size_t) i);
          return NULL;
        }
      if (!amk_tokenizer_add_merge_string (self, merges[i], i, source, error))
        return NULL;
    }
  return g_steal_pointer (&self);
}
