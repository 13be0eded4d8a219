/* amk-gguf-model.c: the GGUF model reader: a GGUF file of a "llama" or "qwen3" model
 * (llama.cpp's names and keys) to the neutral description of the model (AmkModelSpec):
 * the hyperparameters from the "<arch>.*" keys, the Llama 3 RoPE scaling from the
 * rope_freqs table, the tokenizer from the "tokenizer.ggml.*" keys, and where each
 * weight's bytes are in the mapped file.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <glib/gi18n-lib.h>
#include <gio/gio.h>

#include "amk-glib.h"
#include "amk-gguf-private.h"
#include "amk-model-readers-private.h"
#include "amk-rope-private.h"

/* llama.cpp's names; the per-layer ones follow "blk.N." */
static const char * const gguf_names[] = {
  [AMK_MODEL_WEIGHT_TOKEN_EMBD] = "token_embd.weight",
  [AMK_MODEL_WEIGHT_OUTPUT_NORM] = "output_norm.weight",
  [AMK_MODEL_WEIGHT_OUTPUT] = "output.weight",
  [AMK_MODEL_WEIGHT_ATTN_NORM] = "attn_norm.weight",
  [AMK_MODEL_WEIGHT_ATTN_Q] = "attn_q.weight",
  [AMK_MODEL_WEIGHT_ATTN_K] = "attn_k.weight",
  [AMK_MODEL_WEIGHT_ATTN_V] = "attn_v.weight",
  [AMK_MODEL_WEIGHT_ATTN_OUTPUT] = "attn_output.weight",
  [AMK_MODEL_WEIGHT_ATTN_Q_NORM] = "attn_q_norm.weight",
  [AMK_MODEL_WEIGHT_ATTN_K_NORM] = "attn_k_norm.weight",
  [AMK_MODEL_WEIGHT_FFN_NORM] = "ffn_norm.weight",
  [AMK_MODEL_WEIGHT_FFN_GATE] = "ffn_gate.weight",
  [AMK_MODEL_WEIGHT_FFN_UP] = "ffn_up.weight",
  [AMK_MODEL_WEIGHT_FFN_DOWN] = "ffn_down.weight",
};

char *
amk_gguf_model_tensor_name (AmkModelWeight weight,
                            guint          layer)
{
  g_return_val_if_fail ((guint) weight < AMK_MODEL_N_WEIGHTS, NULL);

  if (weight < AMK_MODEL_WEIGHT_FIRST_LAYER)
    return g_strdup (gguf_names[weight]);
  return g_strdup_printf ("blk.%u.%s", layer, gguf_names[weight]);
}

/* Records where every weight the graph may ask for is (one the file lacks is reported
 * when the builder asks for it, as before any conversion); llama.cpp permutes llama's q and k rows
 * for its interleaved RoPE, not qwen3's. */
static void
add_tensors (AmkModelSpec *spec, AmkGguf *gguf, const char *file, gboolean permuted)
{
  const AmkModelParams *hp = &spec->params;

  for (guint w = 0; w < AMK_MODEL_N_WEIGHTS; w++)
    for (guint layer = 0; layer < (w >= AMK_MODEL_WEIGHT_FIRST_LAYER ? hp->n_layers : 1); layer++)
      {
        g_autofree char *name = amk_model_spec_tensor_name (spec, w, layer);
        const AmkGgufTensor *t = amk_gguf_find_tensor (gguf, name);
        AmkModelTensor *mt;

        if (t == NULL)
          continue;
        mt = amk_model_spec_add_tensor (spec, w, layer, file);
        mt->type = amk_ggml_type_to_model (t->type);
        mt->type_name = amk_ggml_type_name (t->type);
        mt->n_dims = t->n_dims;
        for (guint d = 0; d < t->n_dims; d++)   /* ggml order to PyTorch order */
          mt->shape[d] = t->dims[t->n_dims - 1 - d];
        mt->n_elements = t->n_elements;
        mt->data = amk_gguf_tensor_ref_data (gguf, t);
        if (permuted && w == AMK_MODEL_WEIGHT_ATTN_Q)
          mt->unpermute_heads = hp->n_heads;
        else if (permuted && w == AMK_MODEL_WEIGHT_ATTN_K)
          mt->unpermute_heads = hp->n_kv_heads;
      }
}

static gboolean
get_u32 (AmkGguf *gguf, const char *arch, const char *key, guint32 *value, GError **error)
{
  g_autofree char *full = g_strdup_printf ("%s.%s", arch, key);

  return amk_gguf_get_u32 (gguf, full, value, error);
}

/* An optional key: `value` keeps its default when the file lacks it. */
static gboolean
get_opt_u32 (AmkGguf *gguf, const char *arch, const char *key, guint32 *value, GError **error)
{
  g_autofree char *full = g_strdup_printf ("%s.%s", arch, key);

  return !amk_gguf_has_key (gguf, full) || amk_gguf_get_u32 (gguf, full, value, error);
}

static gboolean
get_opt_f32 (AmkGguf *gguf, const char *arch, const char *key, float *value, GError **error)
{
  g_autofree char *full = g_strdup_printf ("%s.%s", arch, key);

  return !amk_gguf_has_key (gguf, full) || amk_gguf_get_f32 (gguf, full, value, error);
}

/* Llama 3.x RoPE scaling. llama.cpp's converter keeps no parameters of it but the
 * tensor "rope_freqs.weight": head_dim / 2 F32 values, the divisor of each inverse
 * frequency. The parameters are found back by trying the sets that models use, the
 * file's own rope.scaling keys first: the first set whose divisors (computed as ROPE_KV
 * computes the frequencies) match the table within ROPE_FREQS_TOLERANCE is taken. */
#define ROPE_FREQS_NAME       "rope_freqs.weight"
#define ROPE_FREQS_TOLERANCE  1e-4

typedef struct {
  float   factor;
  float   low_freq_factor;
  float   high_freq_factor;
  guint32 original_context;
} RopeScaling;

static gboolean
rope_scaling_matches (const AmkModelParams *hp,
                      const RopeScaling    *scaling,
                      const float          *divisors)
{
  for (guint c = 0; c < hp->head_dim / 2; c++)
    {
      const float plain = amk_rope_inv_freq ((gint32) c, (gint32) hp->head_dim, hp->rope_theta,
                                             0.0f, 0.0f, 0.0f, 0);
      const float scaled = amk_rope_inv_freq ((gint32) c, (gint32) hp->head_dim, hp->rope_theta,
                                              scaling->factor, scaling->low_freq_factor,
                                              scaling->high_freq_factor,
                                              (gint32) scaling->original_context);
      const double divisor = (double) plain / (double) scaled;

      if (!(fabs (divisor - divisors[c]) <= ROPE_FREQS_TOLERANCE * divisors[c]))
        return FALSE;
    }
  return TRUE;
}

/* A file without a rope_freqs table that declares another RoPE scaling (linear, yarn,
 * ...) in its metadata: refused, rather than run with plain RoPE. */
static gboolean
refuse_other_rope_scaling (AmkGguf     *gguf,
                           const char  *arch,
                           const char  *file,
                           GError     **error)
{
  g_autofree char *type_key = g_strdup_printf ("%s.rope.scaling.type", arch);
  const char *type = NULL;

  if (!amk_gguf_has_key (gguf, type_key))
    return TRUE;
  if (!amk_gguf_get_string (gguf, type_key, &type, NULL, error))
    return FALSE;
  if (g_str_equal (type, "none"))
    return TRUE;
  g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE,
               _("“%s” declares the RoPE scaling “%s” (%s), which amk does not support: it "
                 "runs plain RoPE and Llama 3 scaling (a rope_freqs.weight table, or a "
                 "Hugging Face checkpoint folder whose config.json states it)"),
               file, type, type_key);
  return FALSE;
}

/* Sets hp's Llama-3 scaling from the file's rope_freqs table, if it has one. */
static gboolean
read_rope_freqs (AmkGguf         *gguf,
                 const char      *arch,
                 const char      *file,
                 AmkModelParams  *hp,
                 GError         **error)
{
  RopeScaling candidates[3] = {
    { 0.0f, 1.0f, 4.0f, 8192 },    /* the file's rope.scaling keys, when it has them */
    { 8.0f, 1.0f, 4.0f, 8192 },    /* Llama 3.1 */
    { 32.0f, 1.0f, 4.0f, 8192 },   /* Llama 3.2 */
  };
  g_autofree float *divisors = NULL;
  g_autofree char *factor_key = g_strdup_printf ("%s.rope.scaling.factor", arch);
  g_autofree char *context_key = g_strdup_printf ("%s.rope.scaling.original_context_length", arch);
  const AmkGgufTensor *t = amk_gguf_find_tensor (gguf, ROPE_FREQS_NAME);
  const guint n = hp->head_dim / 2;

  if (t == NULL)
    return TRUE;
  if (t->type != AMK_GGML_TYPE_F32)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_TENSOR_TYPE,
                   _("The tensor “%s” of “%s” is %s: a table of RoPE frequency divisors must "
                     "be F32"), ROPE_FREQS_NAME, file, amk_ggml_type_name (t->type));
      return FALSE;
    }
  if (t->n_elements != n || t->n_bytes != (gsize) n * sizeof (float))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_TENSOR_SHAPE,
                   _("The tensor “%s” of “%s” has %" PRIu64 " values, not %u: it must hold "
                     "one RoPE frequency divisor per pair of elements of a head of %u"),
                   ROPE_FREQS_NAME, file, t->n_elements, n, hp->head_dim);
      return FALSE;
    }
  divisors = g_new (float, n);
  for (guint c = 0; c < n; c++)
    {
      guint32 bits;

      memcpy (&bits, t->data + (gsize) c * sizeof bits, sizeof bits);
      bits = GUINT32_FROM_LE (bits);
      memcpy (&divisors[c], &bits, sizeof bits);
      if (!isfinite (divisors[c]) || divisors[c] <= 0.0f)
        {
          g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
                       _("The tensor “%s” of “%s” holds %g at index %u: RoPE frequency "
                         "divisors must be finite and positive"),
                       ROPE_FREQS_NAME, file, (double) divisors[c], c);
          return FALSE;
        }
    }

  if (amk_gguf_has_key (gguf, factor_key) || amk_gguf_has_key (gguf, context_key))
    {
      candidates[0].factor = 8.0f;
      if (!get_opt_f32 (gguf, arch, "rope.scaling.factor", &candidates[0].factor, error) ||
          !get_opt_u32 (gguf, arch, "rope.scaling.original_context_length",
                        &candidates[0].original_context, error))
        return FALSE;
    }
  for (guint i = 0; i < G_N_ELEMENTS (candidates); i++)
    {
      const RopeScaling *s = &candidates[i];

      /* (what the ROPE_KV op accepts; the keys' values may be anything) */
      if (!(s->factor > 0.0f && s->factor <= 1e6f) || s->original_context == 0 ||
          s->original_context > G_MAXINT32 || !rope_scaling_matches (hp, s, divisors))
        continue;
      hp->rope_factor = s->factor;
      hp->rope_low_freq_factor = s->low_freq_factor;
      hp->rope_high_freq_factor = s->high_freq_factor;
      hp->rope_original_context = s->original_context;
      return TRUE;
    }
  g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE,
               _("The tensor “%s” of “%s” matches no Llama 3 RoPE scaling that amk supports "
                 "(Llama 3.1’s factor 8 or Llama 3.2’s factor 32 with an original context of "
                 "8192, or the values of the file’s keys “%s” and “%s”; low and high frequency "
                 "factors 1 and 4): load the model’s Hugging Face checkpoint folder instead, "
                 "whose config.json states the scaling"),
               ROPE_FREQS_NAME, file, factor_key, context_key);
  return FALSE;
}

/* A token id from the metadata: it must name a token of the vocabulary. */
static gboolean
get_token_id (AmkGguf      *gguf,
              AmkTokenizer *tok,
              const char   *file,
              const char   *key,
              guint32      *id,
              GError      **error)
{
  if (!amk_gguf_get_u32 (gguf, key, id, error))
    return FALSE;
  if (*id >= amk_tokenizer_get_vocab_size (tok))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
                   _("The metadata key “%s” of the model file “%s” names the token %u, "
                     "outside the vocabulary of %u tokens"),
                   key, file, *id, amk_tokenizer_get_vocab_size (tok));
      return FALSE;
    }
  return TRUE;
}

static AmkTokenizer *
load_tokenizer (AmkGguf *gguf, const char *file, GError **error)
{
  const char * const *tokens;
  const char * const *merges;
  g_autofree gint32 *types = NULL;
  gsize n_tokens = 0, n_merges = 0, n_types = 0;
  const char *pre = "smollm";
  g_autoptr(AmkTokenizer) tok = NULL;
  guint32 id;
  gboolean add_bos;

  tokens = amk_gguf_get_string_array (gguf, "tokenizer.ggml.tokens", &n_tokens, error);
  if (tokens == NULL)
    return NULL;
  merges = amk_gguf_get_string_array (gguf, "tokenizer.ggml.merges", &n_merges, error);
  if (merges == NULL)
    return NULL;
  if (amk_gguf_has_key (gguf, "tokenizer.ggml.token_type"))
    {
      types = amk_gguf_get_i32_array (gguf, "tokenizer.ggml.token_type", &n_types, error);
      if (types == NULL)
        return NULL;
    }
  if (amk_gguf_has_key (gguf, "tokenizer.ggml.pre") &&
      !amk_gguf_get_string (gguf, "tokenizer.ggml.pre", &pre, NULL, error))
    return NULL;
  tok = amk_tokenizer_new_from_vocab (tokens, merges, types, n_types, pre, error);
  if (tok == NULL)
    return NULL;
  if (amk_gguf_has_key (gguf, "tokenizer.ggml.bos_token_id"))
    {
      if (!get_token_id (gguf, tok, file, "tokenizer.ggml.bos_token_id", &id, error))
        return NULL;
      amk_tokenizer_set_bos_id (tok, (gint32) id);
    }
  if (amk_gguf_has_key (gguf, "tokenizer.ggml.eos_token_id"))
    {
      if (!get_token_id (gguf, tok, file, "tokenizer.ggml.eos_token_id", &id, error))
        return NULL;
      amk_tokenizer_set_eos_id (tok, (gint32) id);
    }
  if (amk_gguf_has_key (gguf, "tokenizer.ggml.add_bos_token"))
    {
      if (!amk_gguf_get_bool (gguf, "tokenizer.ggml.add_bos_token", &add_bos, error))
        return NULL;
      amk_tokenizer_set_add_bos (tok, add_bos);
    }
  if (amk_gguf_has_key (gguf, "tokenizer.chat_template"))
    {
      const char *chat_template;

      if (!amk_gguf_get_string (gguf, "tokenizer.chat_template", &chat_template, NULL, error))
        return NULL;
      amk_tokenizer_set_chat_template (tok, chat_template);
    }
  return g_steal_pointer (&tok);
}

/**
 * amk_gguf_model_read:
 * @path: a GGUF file of a "llama" or "qwen3" architecture model
 * @error: return location for a #GError
 *
 * Reads the hyperparameters and the tokenizer of the file, and where each weight is. A
 * "rope_freqs.weight" table (Llama 3.x, from llama.cpp's converter) gives the Llama-3
 * RoPE scaling whose frequencies it reproduces, or an
 * %AMK_MODEL_ERROR_UNSUPPORTED_FEATURE error.
 *
 * Returns: (transfer full) (nullable): the description, free with amk_model_spec_free()
 */
AmkModelSpec *
amk_gguf_model_read (const char  *path,
                     GError     **error)
{
  g_autoptr(AmkGguf) gguf = NULL;
  g_autoptr(AmkTokenizer) tokenizer = NULL;
  g_autoptr(AmkModelSpec) spec = NULL;
  g_autofree char *file = NULL;
  const char *arch = NULL;
  AmkModelParams hp = { 0 };
  guint32 n_layers, hidden, n_heads, n_kv_heads, ffn, head_dim = 0;
  float theta = 10000.0f, eps = 1e-5f;
  const AmkGgufTensor *embd;
  gboolean qwen3;

  g_return_val_if_fail (path != NULL, NULL);

  file = g_filename_display_name (path);
  /* (mapping a folder fails with whatever the system says, such as "No such device") */
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_IS_DIRECTORY,
                   _("“%s” is a folder, not a GGUF file"), file);
      return NULL;
    }
  gguf = amk_gguf_open (path, error);
  if (gguf == NULL)
    return NULL;
  if (!amk_gguf_get_string (gguf, "general.architecture", &arch, NULL, error))
    return NULL;
  if (!g_str_equal (arch, "llama") && !g_str_equal (arch, "qwen3"))
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_ARCHITECTURE,
                   _("The model “%s” has the architecture “%s”; only “llama” and “qwen3” are supported"),
                   file, arch);
      return NULL;
    }
  qwen3 = g_str_equal (arch, "qwen3");
  if (!get_u32 (gguf, arch, "block_count", &n_layers, error) ||
      !get_u32 (gguf, arch, "embedding_length", &hidden, error) ||
      !get_u32 (gguf, arch, "attention.head_count", &n_heads, error) ||
      !get_u32 (gguf, arch, "feed_forward_length", &ffn, error))
    return NULL;
  n_kv_heads = n_heads;
  if (!get_opt_u32 (gguf, arch, "attention.head_count_kv", &n_kv_heads, error) ||
      !get_opt_u32 (gguf, arch, "attention.key_length", &head_dim, error) ||
      !get_opt_f32 (gguf, arch, "rope.freq_base", &theta, error) ||
      !get_opt_f32 (gguf, arch, "attention.layer_norm_rms_epsilon", &eps, error) ||
      !get_opt_u32 (gguf, arch, "context_length", &hp.model_context, error))
    return NULL;
  if (head_dim == 0)
    {
      if (n_heads == 0 || hidden % n_heads != 0)
        {
          g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
                       _("The model “%s” has inconsistent hyperparameters"), file);
          return NULL;
        }
      head_dim = hidden / n_heads;
    }

  embd = amk_gguf_find_tensor (gguf, "token_embd.weight");
  if (embd == NULL)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_MISSING_TENSOR,
                   _("The model “%s” has no tensor “%s”"), file, "token_embd.weight");
      return NULL;
    }

  hp.architecture = arch;
  hp.source = file;
  hp.n_layers = n_layers;
  hp.hidden = hidden;
  hp.n_heads = n_heads;
  hp.n_kv_heads = n_kv_heads;
  hp.head_dim = head_dim;
  hp.ffn = ffn;
  hp.vocab = embd->dims[1];
  hp.eps = eps;
  hp.rope_theta = theta;
  hp.rope_factor = 0.0f;          /* plain RoPE */
  hp.rope_low_freq_factor = 1.0f;
  hp.rope_high_freq_factor = 4.0f;
  hp.rope_original_context = 8192;
  hp.qk_norm = qwen3;
  hp.tied_embeddings = amk_gguf_find_tensor (gguf, "output.weight") == NULL;
  /* the table's length depends on head_dim, and the tensor table is sized by n_layers:
   * the hyperparameters are checked first */
  if (!amk_model_params_check (&hp, error))
    return NULL;
  if (amk_gguf_find_tensor (gguf, ROPE_FREQS_NAME) != NULL
      ? !read_rope_freqs (gguf, arch, file, &hp, error)
      : !refuse_other_rope_scaling (gguf, arch, file, error))
    return NULL;

  tokenizer = load_tokenizer (gguf, file, error);
  if (tokenizer == NULL)
    return NULL;
  /* every token id must have a row in the embedding (EMBED would refuse it at run time) */
  if (amk_tokenizer_get_vocab_size (tokenizer) > hp.vocab)
    {
      g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_INVALID_METADATA,
                   _("The model file “%s” has %u tokens in “%s” but only %" PRIu64
                     " rows in the tensor “%s”"), file,
                   amk_tokenizer_get_vocab_size (tokenizer), "tokenizer.ggml.tokens",
                   hp.vocab, "token_embd.weight");
      return NULL;
    }
  spec = amk_model_spec_new (file, gguf_names, "blk.%u.%s");
  amk_model_spec_set_params (spec, &hp);
  amk_model_spec_set_tokenizer (spec, tokenizer, NULL);
  add_tensors (spec, gguf, file, !qwen3);
  return g_steal_pointer (&spec);
}
