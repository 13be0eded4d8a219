/* amk-gguf-convert.c: a Hugging Face checkpoint in llama.cpp's GGUF conventions (see
 * amk-gguf-convert-private.h), the inverse of what amk-gguf-model.c reads.
 *
 * The tokenizer is taken from the AmkTokenizer that tokenizer.json made (its tokens,
 * special flags and merges), not from the file again; a GGUF file only names its
 * pre-tokenizer, so each name amk's GGUF tokenizer knows is tried on a sample text, and
 * of those that encode it as tokenizer.json does, the one with the same pre-tokenizer
 * steps is written (with a small vocabulary two rules may agree on any sample).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-glib.h"
#include "amk-gguf-convert-private.h"
#include "amk-model-spec-private.h"
#include "amk-json-private.h"
#include "amk-rope-private.h"
#include "amk-tokenizer-private.h"

#define MAX_JSON_SIZE   (64u * 1024 * 1024)
#define MAX_JSON_DEPTH  64

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type) */
enum {
  TOKEN_NORMAL = 1,
  TOKEN_CONTROL = 3,
  TOKEN_USER_DEFINED = 4,
  TOKEN_UNUSED = 5,
};

/* The pre-tokenizer names amk_tokenizer_new_from_vocab() knows, one per splitting rule. */
static const char * const pre_names[] = { "smollm", "llama-bpe", "qwen2", "gpt2" };

/* Text on which those rules split differently: digit runs, contractions in both cases,
 * punctuation before letters, runs of spaces and newlines, non-ASCII letters. */
static const char probe_text[] =
  "Hello, world! It's 12345 o'clock; I'M SURE they'LL see 3.14159 and 2024-06-01.\n\n"
  "  Indented\tline:\tx=y+z*(a-b) //comment\r\n"
  "def run(self):\n\treturn self.items.append(\"x\") or [i for i in range(10)]\n"
  "Déjà vu, naïve façade — «quoted» ¿qué? Straße ÆØÅ 東京 🙂!!\n   \n"
  "snake_case CamelCase $100 #tag @user ...end";

static void
set_key_u32 (AmkGgufWriter *w, const char *arch, const char *key, guint32 value)
{
  g_autofree char *full = g_strdup_printf ("%s.%s", arch, key);

  amk_gguf_writer_set_u32 (w, full, value);
}

static void
set_key_f32 (AmkGgufWriter *w, const char *arch, const char *key, float value)
{
  g_autofree char *full = g_strdup_printf ("%s.%s", arch, key);

  amk_gguf_writer_set_f32 (w, full, value);
}

void
amk_gguf_convert_params (AmkGgufWriter        *w,
                         const AmkModelParams *hp,
                         guint                 context)
{
  const char *arch;

  g_return_if_fail (w != NULL && hp != NULL && hp->architecture != NULL);

  arch = hp->architecture;
  amk_gguf_writer_set_string (w, "general.architecture", arch, strlen (arch));
  set_key_u32 (w, arch, "block_count", hp->n_layers);
  if (context > 0)
    set_key_u32 (w, arch, "context_length", context);
  set_key_u32 (w, arch, "embedding_length", hp->hidden);
  set_key_u32 (w, arch, "feed_forward_length", hp->ffn);
  set_key_u32 (w, arch, "attention.head_count", hp->n_heads);
  set_key_u32 (w, arch, "attention.head_count_kv", hp->n_kv_heads);
  set_key_u32 (w, arch, "attention.key_length", hp->head_dim);
  set_key_u32 (w, arch, "attention.value_length", hp->head_dim);
  set_key_f32 (w, arch, "attention.layer_norm_rms_epsilon", hp->eps);
  set_key_f32 (w, arch, "rope.freq_base", hp->rope_theta);
  set_key_u32 (w, arch, "rope.dimension_count", hp->head_dim);
  set_key_u32 (w, arch, "vocab_size", (guint32) MIN (hp->vocab, G_MAXUINT32));
}

gboolean
amk_gguf_convert_read_context (const char  *dir,
                               guint       *context,
                               GError     **error)
{
  g_auto(AmkJsonFile) config = { 0 };
  guint64 value = 0;

  g_return_val_if_fail (dir != NULL && context != NULL, FALSE);

  if (!amk_json_file_load (&config, dir, "config.json", TRUE, MAX_JSON_SIZE, MAX_JSON_DEPTH,
                           error) ||
      !amk_json_get_uint (amk_json_file_object (&config), "max_position_embeddings", NULL,
                          FALSE, 1, G_MAXINT32, &value, config.file, error))
    return FALSE;
  *context = (guint) value;
  return TRUE;
}

float *
amk_gguf_convert_rope_freqs (AmkGgufWriter         *w,
                             const AmkModelParams  *hp,
                             gsize                 *n,
                             GError               **error)
{
  g_autofree float *divisors = NULL;
  g_autofree char *factor_key = NULL, *context_key = NULL;

  g_return_val_if_fail (w != NULL && hp != NULL && n != NULL, NULL);

  *n = 0;
  if (hp->rope_factor <= 0.0f)
    return NULL;
  /* amk-gguf-model.c finds the scaling back from the table with these two factors */
  if (hp->rope_low_freq_factor != 1.0f || hp->rope_high_freq_factor != 4.0f)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE,
                   _("The model “%s” uses Llama 3 RoPE scaling with the frequency factors %g "
                     "and %g, which a GGUF file cannot state for amk (only 1 and 4): run the "
                     "checkpoint folder itself"),
                   hp->source, (double) hp->rope_low_freq_factor,
                   (double) hp->rope_high_freq_factor);
      return NULL;
    }
  divisors = g_new (float, hp->head_dim / 2);
  for (guint c = 0; c < hp->head_dim / 2; c++)
    {
      const float plain = amk_rope_inv_freq ((gint32) c, (gint32) hp->head_dim, hp->rope_theta,
                                             0.0f, 0.0f, 0.0f, 0);
      const float scaled = amk_rope_inv_freq ((gint32) c, (gint32) hp->head_dim, hp->rope_theta,
                                              hp->rope_factor, hp->rope_low_freq_factor,
                                              hp->rope_high_freq_factor,
                                              (gint32) hp->rope_original_context);

      divisors[c] = (float) ((double) plain / (double) scaled);
    }
  factor_key = g_strdup_printf ("%s.rope.scaling.factor", hp->architecture);
  context_key = g_strdup_printf ("%s.rope.scaling.original_context_length", hp->architecture);
  amk_gguf_writer_set_f32 (w, factor_key, hp->rope_factor);
  amk_gguf_writer_set_u32 (w, context_key, hp->rope_original_context);
  *n = hp->head_dim / 2;
  return g_steal_pointer (&divisors);
}

/* Whether the two tokenizers' pre-tokenizer steps are the same: the same kinds, regular
 * expressions and prefix spaces. */
static gboolean
steps_alike (AmkTokenizer *a, AmkTokenizer *b)
{
  if (a->steps->len != b->steps->len)
    return FALSE;
  for (guint i = 0; i < a->steps->len; i++)
    {
      const PreStep *x = g_ptr_array_index (a->steps, i), *y = g_ptr_array_index (b->steps, i);

      if (x->kind != y->kind || x->add_prefix_space != y->add_prefix_space ||
          (x->regex == NULL) != (y->regex == NULL) ||
          (x->regex != NULL && g_strcmp0 (g_regex_get_pattern (x->regex),
                                          g_regex_get_pattern (y->regex)) != 0))
        return FALSE;
    }
  return TRUE;
}

/* Whether `candidate` encodes the probe text as `reference` does. */
static gboolean
encodes_alike (AmkTokenizer *reference, AmkTokenizer *candidate)
{
  g_autofree gint32 *a = NULL, *b = NULL;
  gsize n_a = 0, n_b = 0;

  a = amk_tokenizer_encode (reference, probe_text, FALSE, &n_a, NULL);
  b = amk_tokenizer_encode (candidate, probe_text, FALSE, &n_b, NULL);
  return a != NULL && b != NULL && n_a == n_b && memcmp (a, b, n_a * sizeof (gint32)) == 0;
}

gboolean
amk_gguf_convert_tokenizer (AmkGgufWriter  *w,
                            AmkTokenizer   *tok,
                            const char     *source,
                            GError        **error)
{
  const guint n = amk_tokenizer_get_vocab_size (tok);
  g_autoptr(GPtrArray) tokens = g_ptr_array_new_full (n + 1, g_free);
  g_autoptr(GPtrArray) merges = g_ptr_array_new_full (tok->n_merges + 1, g_free);
  g_autofree gint32 *types = g_new0 (gint32, MAX (n, 1));
  g_autofree guint8 *added = g_new0 (guint8, MAX (n, 1));
  g_autofree gint32 *with_special = NULL;
  const char *pre = NULL, *exact = NULL;
  gsize n_with_special = 0;

  g_return_val_if_fail (w != NULL && AMK_IS_TOKENIZER (tok), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  for (guint i = 0; tok->added != NULL && i < tok->added->len; i++)
    {
      const AddedToken *t = &g_array_index (tok->added, AddedToken, i);

      if (t->id >= 0 && (guint) t->id < n)
        added[t->id] = 1;
    }
  /* ids without a token (an embedding padded past the vocabulary) get unused pads, as
   * llama.cpp's converter writes them: GGUF's token list has no holes */
  for (guint id = 0; id < n; id++)
    {
      const char *text = amk_tokenizer_id_to_token (tok, (gint32) id);

      if (text == NULL)
        {
          g_ptr_array_add (tokens, g_strdup_printf ("[PAD%u]", id));
          types[id] = TOKEN_UNUSED;
          continue;
        }
      g_ptr_array_add (tokens, g_strdup (text));
      types[id] = amk_tokenizer_is_special (tok, (gint32) id) ? TOKEN_CONTROL
                  : added[id] ? TOKEN_USER_DEFINED : TOKEN_NORMAL;
    }
  g_ptr_array_add (tokens, NULL);
  for (gsize i = 0; i < tok->n_merges; i++)
    {
      const Merge *m = &tok->merges[i];

      g_ptr_array_add (merges, g_strdup_printf ("%s %s", tok->id_to_token[m->pair >> 32],
                                                tok->id_to_token[m->pair & 0xffffffffu]));
    }
  g_ptr_array_add (merges, NULL);

  /* a name whose steps are tokenizer.json's own wins; else the first that encodes the
   * probe alike (the same rule spelled another way, such as Qwen's (?i:...) contractions
   * against the GGUF tokenizer's spelled-out cases) */
  for (guint i = 0; i < G_N_ELEMENTS (pre_names) && exact == NULL; i++)
    {
      g_autoptr(GError) local = NULL;
      g_autoptr(AmkTokenizer) candidate =
        amk_tokenizer_new_from_vocab ((const char * const *) tokens->pdata,
                                      (const char * const *) merges->pdata, types, n,
                                      pre_names[i], &local);

      if (candidate == NULL)
        {
          g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE,
                       _("The tokenizer of “%s” cannot be written as GGUF: %s"), source,
                       local->message);
          return FALSE;
        }
      if (!encodes_alike (tok, candidate))
        continue;
      if (steps_alike (tok, candidate))
        exact = pre_names[i];
      else if (pre == NULL)
        pre = pre_names[i];
    }
  if (exact != NULL)
    pre = exact;
  if (pre == NULL)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE,
                   _("The tokenizer of “%s” splits text in a way that none of the GGUF "
                     "pre-tokenizers amk knows (smollm, llama-bpe, qwen2, gpt2) reproduces"),
                   source);
      return FALSE;
    }

  amk_gguf_writer_set_string (w, "tokenizer.ggml.model", "gpt2", 4);
  amk_gguf_writer_set_string (w, "tokenizer.ggml.pre", pre, strlen (pre));
  amk_gguf_writer_set_string_array (w, "tokenizer.ggml.tokens",
                                    (const char * const *) tokens->pdata, n);
  amk_gguf_writer_set_array (w, "tokenizer.ggml.token_type", AMK_GGUF_TYPE_INT32, types, n);
  amk_gguf_writer_set_string_array (w, "tokenizer.ggml.merges",
                                    (const char * const *) merges->pdata, tok->n_merges);
  if (amk_tokenizer_get_bos_id (tok) >= 0)
    amk_gguf_writer_set_u32 (w, "tokenizer.ggml.bos_token_id", (guint32) amk_tokenizer_get_bos_id (tok));
  if (amk_tokenizer_get_eos_id (tok) >= 0)
    amk_gguf_writer_set_u32 (w, "tokenizer.ggml.eos_token_id", (guint32) amk_tokenizer_get_eos_id (tok));
  /* tokenizer.json's post-processor or tokenizer_config.json's add_bos_token: either
   * way, what matters is whether encoding puts the BOS first */
  with_special = amk_tokenizer_encode (tok, "a", TRUE, &n_with_special, NULL);
  amk_gguf_writer_set_bool (w, "tokenizer.ggml.add_bos_token",
                            with_special != NULL && n_with_special > 0 &&
                            amk_tokenizer_get_bos_id (tok) >= 0 &&
                            with_special[0] == amk_tokenizer_get_bos_id (tok));
  if (amk_tokenizer_get_chat_template (tok) != NULL)
    amk_gguf_writer_set_string (w, "tokenizer.chat_template", amk_tokenizer_get_chat_template (tok),
                                strlen (amk_tokenizer_get_chat_template (tok)));
  return TRUE;
}

gboolean
amk_gguf_convert_permute_qk (float   *rows,
                             gsize    n_rows,
                             gsize    n_cols,
                             guint    n_heads,
                             GError **error)
{
  g_return_val_if_fail (rows != NULL || n_rows == 0 || n_cols == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return amk_model_permute_qk_rows ((guint8 *) rows, n_rows, n_cols * sizeof (float), n_heads, TRUE, error);
}
