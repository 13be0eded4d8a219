/* amk-model-builder.c: the decode step of a Llama-family model built with the op API
 * (the layer graph, shared by every loader), and the GGUF loader. AmkGenerator runs it.
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
#include "amk-model-builder-private.h"
#include "amk-rope-private.h"
#include "amk-program-private.h"

/* The layer graph */

typedef struct {
  AmkProgram           *program;
  AmkModelWeightSource *source;
  AmkModelBuild        *build;
} Graph;

/* Adds bytes as a bf16 CONSTANT buffer and counts them as weights. */
static gint
add_constant (Graph          *g,
              const char     *name,
              GBytes         *bytes,
              const gint64   *shape,
              gsize           n_dims,
              GError        **error)
{
  gint buf = amk_program_add_buffer (g->program, name, AMK_DTYPE_BF16, shape, n_dims,
                                     AMK_BUFFER_ROLE_CONSTANT, error);

  if (buf < 0 || !amk_program_set_buffer_data (g->program, (guint) buf, bytes, error))
    return -1;
  g->build->weight_bytes += g_bytes_get_size (bytes);
  return buf;
}

/* Adds the weight as a bf16 CONSTANT buffer of shape {rows, cols} (or {cols} when rows
 * is 0), named as in the file. */
static gint
add_weight (Graph           *g,
            AmkModelWeight   weight,
            guint            layer,
            guint64          rows,
            guint64          cols,
            GError         **error)
{
  g_autofree char *name = NULL;
  g_autoptr(GBytes) bytes = NULL;
  gint64 shape[2];
  gsize n_dims;

  bytes = g->source->load (g->source, weight, layer, rows, cols, &name, error);
  if (bytes == NULL)
    return -1;
  if (rows > 0)
    {
      shape[0] = (gint64) rows;
      shape[1] = (gint64) cols;
      n_dims = 2;
    }
  else
    {
      shape[0] = (gint64) cols;
      n_dims = 1;
    }
  return add_constant (g, name, bytes, shape, n_dims, error);
}

/* Layer `layer`'s q, k and v projections as one [q_dim + 2 kv_dim, hidden] constant
 * (their rows one after the other), for one MATVEC into a qkv vector. */
static gint
add_qkv_weight (Graph    *g,
                guint     layer,
                guint64   q_dim,
                guint64   kv_dim,
                guint64   cols,
                GError  **error)
{
  const AmkModelWeight parts[3] = { AMK_MODEL_WEIGHT_ATTN_Q, AMK_MODEL_WEIGHT_ATTN_K, AMK_MODEL_WEIGHT_ATTN_V };
  const guint64 rows[3] = { q_dim, kv_dim, kv_dim };
  g_autofree char *name = g_strdup_printf ("blk.%u.attn_qkv.weight", layer);
  g_autoptr(GByteArray) all = g_byte_array_new ();
  g_autoptr(GBytes) bytes = NULL;
  gint64 shape[2] = { (gint64) (q_dim + 2 * kv_dim), (gint64) cols };

  for (guint i = 0; i < G_N_ELEMENTS (parts); i++)
    {
      g_autofree char *part_name = NULL;
      g_autoptr(GBytes) part = g->source->load (g->source, parts[i], layer, rows[i], cols, &part_name, error);

      if (part == NULL)
        return -1;
      g_byte_array_append (all, g_bytes_get_data (part, NULL), g_bytes_get_size (part));
    }
  bytes = g_byte_array_free_to_bytes (g_steal_pointer (&all));
  return add_constant (g, name, bytes, shape, 2, error);
}

static gint
add_buffer (AmkProgram    *p,
            const char    *name,
            AmkDType       dtype,
            gint64         d0,
            gint64         d1,
            AmkBufferRole  role,
            GError       **error)
{
  gint64 shape[2] = { d0, d1 };

  return amk_program_add_buffer (p, name, dtype, shape, d1 > 0 ? 2 : 1, role, error);
}

void
amk_model_build_free (AmkModelBuild *build)
{
  if (build == NULL)
    return;
  g_clear_object (&build->program);
  g_clear_object (&build->tokenizer);
  g_free (build->architecture);
  g_free (build->eos_ids);
  g_free (build);
}

/* Hyperparameters the graph can be built from: every count positive and bounded, the
 * heads grouped evenly and of even length. */
static gboolean
check_params (const AmkModelParams *hp, GError **error)
{
  const guint max = 1u << 20;

  if (hp->n_layers == 0 || hp->n_layers > 65536 || hp->hidden == 0 || hp->hidden > max ||
      hp->n_heads == 0 || hp->n_heads > 65536 || hp->n_kv_heads == 0 ||
      hp->n_heads % hp->n_kv_heads != 0 || hp->head_dim < 2 || hp->head_dim % 2 != 0 ||
      hp->head_dim > 65536 || (guint64) hp->n_heads * hp->head_dim > max ||
      hp->ffn == 0 || hp->ffn > max || hp->vocab == 0 || hp->vocab > G_MAXINT32 ||
      !(hp->eps >= 0.0f && hp->eps < 1.0f))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The hyperparameters of “%s” are inconsistent: %u layers, hidden size %u, "
                     "%u query heads, %u key/value heads of %u elements, MLP size %u, vocabulary "
                     "%" PRIu64 " (the heads must be grouped evenly and of even length)"),
                   hp->source != NULL ? hp->source : "?", hp->n_layers, hp->hidden, hp->n_heads, hp->n_kv_heads, hp->head_dim, hp->ffn,
                   hp->vocab);
      return FALSE;
    }
  return TRUE;
}

/**
 * amk_model_build_graph:
 * @params: the hyperparameters
 * @source: where the weights come from
 * @tokenizer: the model's tokenizer (a reference is taken)
 * @n_queues: the program's queue count
 * @context: the KV cache length (positions)
 * @error: return location for a #GError
 *
 * Builds one compiled decode step of a Llama-family decoder: the token in element 0 of
 * the tokens buffer at position pos goes in, the greedy next token comes out in the
 * same element and the logits in the logits buffer; the KV caches are STATE buffers.
 * Every layer is
 *
 *     q, k, v = Wq n(x), Wk n(x), Wv n(x)     (n: RMSNORM fused into the matvecs)
 *     q, k = qn(q), kn(k) per head            (Qwen3 only)
 *     x += Wo attention(rope(q), cache + rope(k), cache + v)
 *     x += Wd (silu(Wg n2(x)) * Wu n2(x))
 *
 * A model without q/k norm gets q, k and v from one matvec over the three matrices
 * stacked, and RoPE inside the attention (amk_program_op_rope_attention()): one stage
 * less per layer.
 *
 * Returns: (transfer full) (nullable): the build, free with amk_model_build_free()
 */
AmkModelBuild *
amk_model_build_graph (const AmkModelParams  *hp,
                       AmkModelWeightSource  *source,
                       AmkTokenizer          *tokenizer,
                       guint                  n_queues,
                       guint                  context,
                       GError               **error)
{
  g_autoptr(AmkModelBuild) build = NULL;
  guint64 q_dim, kv_dim;
  Graph g;
  AmkProgram *p;
  gint tokens, pos, x, q = -1, k = -1, v = -1, qkv = -1, attn, gate, up, act, logits, table, out_norm, out_w;
  gboolean fuse_rope;
  float scale;

  g_return_val_if_fail (hp != NULL, NULL);
  g_return_val_if_fail (source != NULL && source->load != NULL, NULL);
  g_return_val_if_fail (AMK_IS_TOKENIZER (tokenizer), NULL);
  g_return_val_if_fail (n_queues > 0, NULL);
  g_return_val_if_fail (context > 0, NULL);

  if (!check_params (hp, error))
    return NULL;
  q_dim = (guint64) hp->n_heads * hp->head_dim;
  kv_dim = (guint64) hp->n_kv_heads * hp->head_dim;
  scale = 1.0f / sqrtf ((float) hp->head_dim);

  build = g_new0 (AmkModelBuild, 1);
  build->tokenizer = g_object_ref (tokenizer);
  build->bos_id = amk_tokenizer_get_bos_id (tokenizer);
  build->eos_id = amk_tokenizer_get_eos_id (tokenizer);
  build->vocab_size = (guint) hp->vocab;
  build->context = context;
  build->n_layers = hp->n_layers;
  build->hidden = hp->hidden;
  build->architecture = g_strdup (hp->architecture);
  build->n_heads = hp->n_heads;
  build->n_kv_heads = hp->n_kv_heads;
  build->head_dim = hp->head_dim;
  build->ffn = hp->ffn;
  build->model_context = hp->model_context;
  if (build->eos_id >= 0)
    {
      build->eos_ids = g_new (gint32, 1);
      build->eos_ids[0] = build->eos_id;
      build->n_eos_ids = 1;
    }
  build->program = p = amk_program_new (n_queues);
  /* RoPE inside the attention (one q/k/v projection, one stage less per layer) where
   * nothing runs between the projection and RoPE (Qwen3's q/k norm does) and the shapes
   * allow it */
  fuse_rope = !hp->qk_norm &&
              amk_program_rope_attention_fits (p, hp->head_dim, hp->n_heads, hp->n_kv_heads, context, 0);
  g.program = p;
  g.source = source;
  g.build = build;

  if ((tokens = add_buffer (p, "tokens", AMK_DTYPE_I32, 1, 0, AMK_BUFFER_ROLE_STATE, error)) < 0 ||
      (pos = add_buffer (p, "pos", AMK_DTYPE_I32, 1, 0, AMK_BUFFER_ROLE_INPUT, error)) < 0 ||
      (x = add_buffer (p, "x", AMK_DTYPE_F32, hp->hidden, 0, AMK_BUFFER_ROLE_STATE, error)) < 0 ||
      (fuse_rope ? (qkv = add_buffer (p, "qkv", AMK_DTYPE_F32, (gint64) (q_dim + 2 * kv_dim), 0,
                                      AMK_BUFFER_ROLE_SCRATCH, error)) < 0
                 : ((q = add_buffer (p, "q", AMK_DTYPE_F32, (gint64) q_dim, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
                    (k = add_buffer (p, "k", AMK_DTYPE_F32, (gint64) kv_dim, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
                    (v = add_buffer (p, "v", AMK_DTYPE_F32, (gint64) kv_dim, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0)) ||
      (attn = add_buffer (p, "attn", AMK_DTYPE_F32, (gint64) q_dim, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (gate = add_buffer (p, "gate", AMK_DTYPE_F32, hp->ffn, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (up = add_buffer (p, "up", AMK_DTYPE_F32, hp->ffn, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (act = add_buffer (p, "act", AMK_DTYPE_F32, hp->ffn, 0, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (logits = add_buffer (p, "logits", AMK_DTYPE_F32, (gint64) hp->vocab, 0, AMK_BUFFER_ROLE_OUTPUT, error)) < 0)
    return NULL;
  build->tokens = tokens;
  build->pos = pos;
  build->logits = logits;

  if ((table = add_weight (&g, AMK_MODEL_WEIGHT_TOKEN_EMBD, 0, hp->vocab, hp->hidden, error)) < 0)
    return NULL;
  if (amk_program_op_embed (p, x, table, tokens, 0, error) < 0)
    return NULL;

  for (guint i = 0; i < hp->n_layers; i++)
    {
      g_autofree char *n_kc = g_strdup_printf ("blk.%u.k_cache", i);
      g_autofree char *n_vc = g_strdup_printf ("blk.%u.v_cache", i);
      gint an, wq = -1, wk = -1, wv = -1, wqkv = -1, wo, qn = -1, kn = -1, fn, wg, wu, wd, kc, vc;

      if ((an = add_weight (&g, AMK_MODEL_WEIGHT_ATTN_NORM, i, 0, hp->hidden, error)) < 0)
        return NULL;
      if (fuse_rope ? (wqkv = add_qkv_weight (&g, i, q_dim, kv_dim, hp->hidden, error)) < 0
                    : ((wq = add_weight (&g, AMK_MODEL_WEIGHT_ATTN_Q, i, q_dim, hp->hidden, error)) < 0 ||
                       (wk = add_weight (&g, AMK_MODEL_WEIGHT_ATTN_K, i, kv_dim, hp->hidden, error)) < 0 ||
                       (wv = add_weight (&g, AMK_MODEL_WEIGHT_ATTN_V, i, kv_dim, hp->hidden, error)) < 0))
        return NULL;
      if ((wo = add_weight (&g, AMK_MODEL_WEIGHT_ATTN_OUTPUT, i, hp->hidden, q_dim, error)) < 0)
        return NULL;
      if (hp->qk_norm &&
          ((qn = add_weight (&g, AMK_MODEL_WEIGHT_ATTN_Q_NORM, i, 0, hp->head_dim, error)) < 0 ||
           (kn = add_weight (&g, AMK_MODEL_WEIGHT_ATTN_K_NORM, i, 0, hp->head_dim, error)) < 0))
        return NULL;
      if ((fn = add_weight (&g, AMK_MODEL_WEIGHT_FFN_NORM, i, 0, hp->hidden, error)) < 0 ||
          (wg = add_weight (&g, AMK_MODEL_WEIGHT_FFN_GATE, i, hp->ffn, hp->hidden, error)) < 0 ||
          (wu = add_weight (&g, AMK_MODEL_WEIGHT_FFN_UP, i, hp->ffn, hp->hidden, error)) < 0 ||
          (wd = add_weight (&g, AMK_MODEL_WEIGHT_FFN_DOWN, i, hp->hidden, hp->ffn, error)) < 0 ||
          (kc = add_buffer (p, n_kc, AMK_DTYPE_BF16, context, (gint64) kv_dim, AMK_BUFFER_ROLE_STATE, error)) < 0 ||
          (vc = add_buffer (p, n_vc, AMK_DTYPE_BF16, context, (gint64) kv_dim, AMK_BUFFER_ROLE_STATE, error)) < 0)
        return NULL;

      if (fuse_rope)
        {
          if (amk_program_op_matvec (p, qkv, wqkv, x, -1, -1, an, hp->eps, error) < 0 ||
              amk_program_op_rope_attention (p, attn, qkv, kc, vc, pos, hp->head_dim, hp->n_heads,
                                             hp->n_kv_heads, 0, scale, hp->rope_theta, hp->rope_factor,
                                             hp->rope_low_freq_factor, hp->rope_high_freq_factor,
                                             hp->rope_original_context, error) < 0)
            return NULL;
        }
      else
        {
          if (amk_program_op_matvec (p, q, wq, x, -1, -1, an, hp->eps, error) < 0 ||
              amk_program_op_matvec (p, k, wk, x, -1, -1, an, hp->eps, error) < 0 ||
              amk_program_op_matvec (p, v, wv, x, -1, -1, an, hp->eps, error) < 0)
            return NULL;
          if (hp->qk_norm &&
              (amk_program_op_rmsnorm (p, q, q, qn, hp->head_dim, hp->eps, error) < 0 ||
               amk_program_op_rmsnorm (p, k, k, kn, hp->head_dim, hp->eps, error) < 0))
            return NULL;
          if (amk_program_op_rope_kv (p, q, k, v, kc, vc, pos, hp->head_dim, hp->n_heads, hp->n_kv_heads,
                                      hp->rope_theta, hp->rope_factor, hp->rope_low_freq_factor,
                                      hp->rope_high_freq_factor, hp->rope_original_context, error) < 0 ||
              amk_program_op_attention (p, attn, q, kc, vc, pos, hp->head_dim, hp->n_heads,
                                        hp->n_kv_heads, 0, scale, error) < 0)
            return NULL;
        }
      if (amk_program_op_matvec (p, x, wo, attn, -1, x, -1, 0.0f, error) < 0 ||
          amk_program_op_matvec (p, gate, wg, x, -1, -1, fn, hp->eps, error) < 0 ||
          amk_program_op_matvec (p, up, wu, x, -1, -1, fn, hp->eps, error) < 0 ||
          amk_program_op_silu_mul (p, act, gate, up, error) < 0 ||
          amk_program_op_matvec (p, x, wd, act, -1, x, -1, 0.0f, error) < 0)
        return NULL;
    }

  if ((out_norm = add_weight (&g, AMK_MODEL_WEIGHT_OUTPUT_NORM, 0, 0, hp->hidden, error)) < 0)
    return NULL;
  if (hp->tied_embeddings)
    out_w = table;
  else if ((out_w = add_weight (&g, AMK_MODEL_WEIGHT_OUTPUT, 0, hp->vocab, hp->hidden, error)) < 0)
    return NULL;
  if (amk_program_op_matvec (p, logits, out_w, x, -1, -1, out_norm, hp->eps, error) < 0 ||
      amk_program_op_argmax (p, tokens, 0, logits, error) < 0)
    return NULL;
  if (!amk_program_compile (p, error))
    return NULL;
  return g_steal_pointer (&build);
}

/* The GGUF loader */

typedef struct {
  AmkModelWeightSource  parent;
  AmkGguf              *gguf;
  const char           *file;
  guint                 unpermute_q;   /* heads; 0: the rows are in HF order already */
  guint                 unpermute_k;
} GgufSource;

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

/* The tensor converted to bf16, checked to be {rows, cols} (or {cols} when rows is 0);
 * with unpermute_* undoes the converter's q/k permutation. */
static GBytes *
gguf_load (AmkModelWeightSource  *source,
           AmkModelWeight         weight,
           guint                  layer,
           guint64                rows,
           guint64                cols,
           char                 **name_out,
           GError               **error)
{
  GgufSource *s = (GgufSource *) source;
  g_autofree char *name = NULL;
  const AmkGgufTensor *t;
  g_autofree guint16 *data = NULL;
  guint unpermute = 0;

  g_return_val_if_fail ((guint) weight < G_N_ELEMENTS (gguf_names), NULL);

  name = weight >= AMK_MODEL_WEIGHT_ATTN_NORM
           ? g_strdup_printf ("blk.%u.%s", layer, gguf_names[weight])
           : g_strdup (gguf_names[weight]);
  t = amk_gguf_find_tensor (s->gguf, name);
  if (t == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   _("The model file “%s” has no tensor “%s”"), s->file, name);
      return NULL;
    }
  if (t->dims[0] != cols || (rows > 0 ? t->dims[1] != rows : t->n_dims != 1) ||
      t->n_elements != cols * MAX (rows, 1))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The tensor “%s” of “%s” has the wrong shape (expected %" PRIu64
                     " × %" PRIu64 ")"), name, s->file, rows, cols);
      return NULL;
    }
  data = g_try_new (guint16, t->n_elements);
  if (data == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                   _("Out of memory loading the tensor “%s”"), name);
      return NULL;
    }
  if (!amk_gguf_tensor_to_bf16 (t, data, error))
    return NULL;
  if (weight == AMK_MODEL_WEIGHT_ATTN_Q)
    unpermute = s->unpermute_q;
  else if (weight == AMK_MODEL_WEIGHT_ATTN_K)
    unpermute = s->unpermute_k;
  if (unpermute > 0 && !amk_gguf_unpermute_qk (data, rows, cols, unpermute, error))
    return NULL;
  *name_out = g_steal_pointer (&name);
  return g_bytes_new_take (g_steal_pointer (&data), t->n_elements * sizeof (guint16));
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
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
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
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The tensor “%s” of “%s” is %s: a table of RoPE frequency divisors must "
                     "be F32"), ROPE_FREQS_NAME, file, amk_ggml_type_name (t->type));
      return FALSE;
    }
  if (t->n_elements != n || t->n_bytes != (gsize) n * sizeof (float))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
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
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
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
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
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
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
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
  return g_steal_pointer (&tok);
}

/**
 * amk_model_build_from_gguf:
 * @path: a GGUF file of a "llama" or "qwen3" architecture model
 * @n_queues: the program's queue count
 * @context: the KV cache length (positions)
 * @error: return location for a #GError
 *
 * Reads the hyperparameters and the tokenizer of the file and builds the decode step
 * with amk_model_build_graph(), every weight converted to a bf16 constant. A
 * "rope_freqs.weight" table (Llama 3.x, from llama.cpp's converter) gives the Llama-3
 * RoPE scaling whose frequencies it reproduces, or a %G_IO_ERROR_NOT_SUPPORTED error.
 *
 * Returns: (transfer full) (nullable): the build, free with amk_model_build_free()
 */
AmkModelBuild *
amk_model_build_from_gguf (const char  *path,
                           guint        n_queues,
                           guint        context,
                           GError     **error)
{
  g_autoptr(AmkGguf) gguf = NULL;
  g_autoptr(AmkTokenizer) tokenizer = NULL;
  g_autofree char *file = NULL;
  const char *arch = NULL;
  AmkModelParams hp = { 0 };
  guint32 n_layers, hidden, n_heads, n_kv_heads, ffn, head_dim = 0;
  float theta = 10000.0f, eps = 1e-5f;
  const AmkGgufTensor *embd;
  GgufSource source = { { gguf_load }, NULL, NULL, 0, 0 };
  gboolean qwen3;

  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (n_queues > 0, NULL);
  g_return_val_if_fail (context > 0, NULL);

  file = g_filename_display_name (path);
  gguf = amk_gguf_open (path, error);
  if (gguf == NULL)
    return NULL;
  if (!amk_gguf_get_string (gguf, "general.architecture", &arch, NULL, error))
    return NULL;
  if (!g_str_equal (arch, "llama") && !g_str_equal (arch, "qwen3"))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
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
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                       _("The model “%s” has inconsistent hyperparameters"), file);
          return NULL;
        }
      head_dim = hidden / n_heads;
    }

  embd = amk_gguf_find_tensor (gguf, "token_embd.weight");
  if (embd == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   _("The model file “%s” has no tensor “%s”"), file, "token_embd.weight");
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
  /* (the table's length depends on head_dim: the hyperparameters are checked first) */
  if (amk_gguf_find_tensor (gguf, ROPE_FREQS_NAME) != NULL
      ? !check_params (&hp, error) || !read_rope_freqs (gguf, arch, file, &hp, error)
      : !refuse_other_rope_scaling (gguf, arch, file, error))
    return NULL;

  tokenizer = load_tokenizer (gguf, file, error);
  if (tokenizer == NULL)
    return NULL;
  /* every token id must have a row in the embedding (EMBED would refuse it at run time) */
  if (amk_tokenizer_get_vocab_size (tokenizer) > hp.vocab)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   _("The model file “%s” has %u tokens in “%s” but only %" PRIu64
                     " rows in the tensor “%s”"), file,
                   amk_tokenizer_get_vocab_size (tokenizer), "tokenizer.ggml.tokens",
                   hp.vocab, "token_embd.weight");
      return NULL;
    }
  source.gguf = gguf;
  source.file = file;
  /* llama.cpp permutes llama's q and k rows (for its interleaved RoPE), not qwen3's */
  source.unpermute_q = qwen3 ? 0 : n_heads;
  source.unpermute_k = qwen3 ? 0 : n_kv_heads;
  return amk_model_build_graph (&hp, &source.parent, tokenizer, n_queues, context, error);
}

/**
 * amk_model_build_from_path:
 * @path: a GGUF file, or a Hugging Face checkpoint folder
 * @n_queues: the program's queue count
 * @context: the KV cache length (positions)
 * @error: return location for a #GError
 *
 * Builds the decode step of the model at @path: a folder is read as a Hugging Face
 * checkpoint (amk_model_build_from_hf()), anything else as a GGUF file.
 *
 * Returns: (transfer full) (nullable): the build, free with amk_model_build_free()
 */
AmkModelBuild *
amk_model_build_from_path (const char  *path,
                           guint        n_queues,
                           guint        context,
                           GError     **error)
{
  g_return_val_if_fail (path != NULL, NULL);

  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    return amk_model_build_from_hf (path, n_queues, context, error);
  return amk_model_build_from_gguf (path, n_queues, context, error);
}
