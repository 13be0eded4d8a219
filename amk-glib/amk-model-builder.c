/* amk-model-builder.c: the decode step of a Llama-family model built with the op API
 * from the neutral description of the model (the layer graph, shared by every reader).
 * AmkGenerator runs it.
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
#include "amk-model-builder-private.h"
#include "amk-program-private.h"

/* The layer graph */

typedef struct {
  AmkProgram    *program;
  AmkModelSpec  *spec;
  AmkModelBuild *build;
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
  const char *name = NULL;
  g_autoptr(GBytes) bytes = NULL;
  gint64 shape[2];
  gsize n_dims;

  bytes = amk_model_spec_load_bf16 (g->spec, weight, layer, rows, cols, &name, error);
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
      g_autoptr(GBytes) part = amk_model_spec_load_bf16 (g->spec, parts[i], layer, rows[i], cols, NULL, error);

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
  g_clear_object (&build->prefill);
  g_clear_object (&build->tokenizer);
  g_free (build->architecture);
  g_free (build->eos_ids);
  g_free (build);
}

/**
 * amk_model_build_graph:
 * @spec: the model: hyperparameters, weights and tokenizer
 * @n_queues: the program's queue count
 * @context: the KV cache length (positions)
 * @error: return location for a #GError
 *
 * Builds one compiled decode step of a Llama-family decoder: the token in element 0 of
 * the tokens buffer at position pos goes in, the greedy next token comes out in the
 * same element and the logits in the logits buffer; the KV caches are STATE buffers.
 * Every layer is
 *
 *     q, k, v = Wqkv n(x)                      (n: RMSNORM fused into the matvec; the
 *                                              three matrices stacked, one matvec)
 *     q, k = qn(q), kn(k) per head            (Qwen3 only)
 *     x += Wo attention(rope(q), cache + rope(k), cache + v)
 *     x += Wd (silu(Wg n2(x)) * Wu n2(x))
 *
 * A model without q/k norm gets RoPE inside the attention
 * (amk_program_op_rope_attention()): one stage less per layer. Otherwise one row of
 * ROPE_ROWS normalises, rotates and appends q and k, and the attention reads q from the
 * front of qkv. The stacked weight is the prefill program's too (amk_model_build_prefill()).
 *
 * Returns: (transfer full) (nullable): the build, free with amk_model_build_free()
 */
AmkModelBuild *
amk_model_build_graph (AmkModelSpec  *spec,
                       guint          n_queues,
                       guint          context,
                       GError       **error)
{
  g_autoptr(AmkModelBuild) build = NULL;
  const AmkModelParams *hp;
  AmkTokenizer *tokenizer;
  guint64 q_dim, kv_dim;
  Graph g;
  AmkProgram *p;
  gint tokens, pos, x, qkv, attn, gate, up, act, logits, table, out_norm, out_w;
  gboolean fuse_rope;
  float scale;

  g_return_val_if_fail (spec != NULL, NULL);
  g_return_val_if_fail (AMK_IS_TOKENIZER (spec->tokenizer), NULL);
  g_return_val_if_fail (n_queues > 0, NULL);
  g_return_val_if_fail (context > 0, NULL);

  hp = &spec->params;
  tokenizer = spec->tokenizer;
  if (!amk_model_params_check (hp, error))
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
  build->n_eos_ids = spec->eos_ids->len;
  build->eos_ids = g_memdup2 (spec->eos_ids->data, spec->eos_ids->len * sizeof (gint32));
  build->program = p = amk_program_new (n_queues);
  /* RoPE inside the attention (one q/k/v projection, one stage less per layer) where
   * nothing runs between the projection and RoPE (Qwen3's q/k norm does) and the shapes
   * allow it */
  fuse_rope = !hp->qk_norm &&
              amk_program_rope_attention_fits (p, hp->head_dim, hp->n_heads, hp->n_kv_heads, context, 0);
  g.program = p;
  g.spec = spec;
  g.build = build;

  if ((tokens = add_buffer (p, "tokens", AMK_DTYPE_I32, 1, 0, AMK_BUFFER_ROLE_STATE, error)) < 0 ||
      (pos = add_buffer (p, "pos", AMK_DTYPE_I32, 1, 0, AMK_BUFFER_ROLE_INPUT, error)) < 0 ||
      (x = add_buffer (p, "x", AMK_DTYPE_F32, hp->hidden, 0, AMK_BUFFER_ROLE_STATE, error)) < 0 ||
      (qkv = add_buffer (p, "qkv", AMK_DTYPE_F32, (gint64) (q_dim + 2 * kv_dim), 0,
                         AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
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
      gint an, wqkv, wo, qn = -1, kn = -1, fn, wg, wu, wd, kc, vc;

      if ((an = add_weight (&g, AMK_MODEL_WEIGHT_ATTN_NORM, i, 0, hp->hidden, error)) < 0 ||
          (wqkv = add_qkv_weight (&g, i, q_dim, kv_dim, hp->hidden, error)) < 0)
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

      if (amk_program_op_matvec (p, qkv, wqkv, x, -1, -1, an, hp->eps, error) < 0)
        return NULL;
      if (fuse_rope)
        {
          if (amk_program_op_rope_attention (p, attn, qkv, kc, vc, pos, hp->head_dim, hp->n_heads,
                                             hp->n_kv_heads, 0, scale, hp->rope_theta, hp->rope_factor,
                                             hp->rope_low_freq_factor, hp->rope_high_freq_factor,
                                             hp->rope_original_context, error) < 0)
            return NULL;
        }
      /* one row of ROPE_ROWS (q/k norm, RoPE, the cache append), then the attention
       * reads the query heads from the front of qkv */
      else if (amk_program_op_rope_rows (p, qkv, kc, vc, pos, -1, qn, kn, hp->head_dim, hp->n_heads,
                                         hp->n_kv_heads, hp->eps, hp->rope_theta, hp->rope_factor,
                                         hp->rope_low_freq_factor, hp->rope_high_freq_factor,
                                         hp->rope_original_context, error) < 0 ||
               amk_program_op_attention (p, attn, qkv, kc, vc, pos, hp->head_dim, hp->n_heads,
                                         hp->n_kv_heads, 0, scale, error) < 0)
        return NULL;
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

/* The prefill chunk */

/* Adds the decode step's buffer `name` to the prefill program with the same dtype, shape
 * and role, and for a constant the same bytes (a reference): amk_executor_load_shared()
 * then gives it the decode step's memory, a weight or a KV cache, with no copy. */
static gint
share_buffer (AmkProgram  *prefill,
              AmkProgram  *decode,
              const char  *name,
              GError     **error)
{
  gint b = amk_program_find_buffer (decode, name);
  const gint64 *shape;
  GBytes *data;
  gsize n_dims;
  gint buf;

  g_return_val_if_fail (b >= 0, -1);

  shape = amk_program_get_buffer_shape (decode, (guint) b, &n_dims);
  buf = amk_program_add_buffer (prefill, name, amk_program_get_buffer_dtype (decode, (guint) b),
                                shape, n_dims, amk_program_get_buffer_role (decode, (guint) b), error);
  if (buf < 0)
    return -1;
  data = amk_program_get_buffer_data (decode, (guint) b);
  if (data != NULL && !amk_program_set_buffer_data (prefill, (guint) buf, data, error))
    return -1;
  return buf;
}

/* share_buffer() of the spec's weight `weight` (of `layer`). */
static gint
share_weight (AmkProgram      *prefill,
              AmkProgram      *decode,
              AmkModelSpec    *spec,
              AmkModelWeight   weight,
              guint            layer,
              GError         **error)
{
  /* named as the decode step named it: as in the file */
  AmkModelTensor *t = amk_model_spec_tensor (spec, weight, layer);

  g_return_val_if_fail (t != NULL, -1);
  return share_buffer (prefill, decode, t->name, error);
}

/**
 * amk_model_build_prefill:
 * @build: a decode step built from @spec by amk_model_build_graph()
 * @spec: the model
 * @chunk: the rows of the chunk, at least 2
 * @activations: the type of the MATMULs' inputs: F32 (the norm fused into the MATMUL),
 *   or BF16 (a RMSNORM into a BF16 buffer first, and SILU_MUL's output in BF16), which
 *   the tensor cores read without a conversion (amk_executor_get_activation_dtype())
 * @error: return location for a #GError
 *
 * Builds the prefill chunk program beside the decode step: `chunk` prompt tokens in
 * "prefill.tokens" at the positions in "prefill.pos" (-1: a padding row) go through
 * the same layers as in the decode step, M rows at a time, and leave their keys and
 * values in the KV caches. Every layer is
 *
 *     qkv = Wqkv n(x)                              (MATMUL, RMSNORM fused or before it)
 *     ROPE_ROWS (qkv): q/k norm (Qwen3), RoPE, the cache append
 *     x += Wo ATTN_ROWS(qkv)
 *     x += Wd (silu(Wg n2(x)) * Wu n2(x))          (MATMULs, SILU_MUL)
 *
 * and the last stops after ROPE_ROWS: a chunk only fills the caches, the decode step
 * computes the logits of the prompt's last token. The weights and the caches have the
 * decode step's names, dtypes and shapes, and the constants hold the decode step's
 * bytes themselves (no second conversion), so that loading the chunk with
 * amk_executor_load_shared() on the decode step's executor shares them.
 *
 * Returns: %TRUE with @build's prefill fields set, or %FALSE with @error set
 */
gboolean
amk_model_prefill_fits (const AmkModelSpec *spec)
{
  const AmkModelParams *hp = &spec->params;

  return hp->hidden % 8 == 0 && ((guint64) hp->n_heads * hp->head_dim) % 8 == 0 && hp->ffn % 8 == 0 &&
         hp->head_dim % 2 == 0 && hp->head_dim <= 256;
}

/* A MATMUL of the chunk whose input is x normalised with `norm`: fused, or through the
 * BF16 buffer xn (xn >= 0). */
static gboolean
normed_matmul (AmkProgram  *p,
               gint         y,
               gint         w,
               gint         x,
               gint         xn,
               gint         norm,
               float        eps,
               GError     **error)
{
  if (xn < 0)
    return amk_program_op_matmul (p, y, w, x, -1, -1, norm, eps, error) >= 0;
  return amk_program_op_matmul (p, y, w, xn, -1, -1, -1, 0.0f, error) >= 0;
}

gboolean
amk_model_build_prefill (AmkModelBuild  *build,
                         AmkModelSpec   *spec,
                         guint           chunk,
                         AmkDType        activations,
                         GError        **error)
{
  g_autoptr(AmkProgram) p = NULL;
  const AmkModelParams *hp;
  AmkProgram *decode;
  guint64 q_dim, kv_dim;
  gint tokens, pos, x, xn = -1, qkv, attn, gate, up, act, table;
  const gboolean bf16 = activations == AMK_DTYPE_BF16;
  float scale;

  g_return_val_if_fail (build != NULL && AMK_IS_PROGRAM (build->program), FALSE);
  g_return_val_if_fail (build->prefill == NULL, FALSE);
  g_return_val_if_fail (spec != NULL, FALSE);
  g_return_val_if_fail (chunk >= 2, FALSE);

  hp = &spec->params;
  decode = build->program;
  q_dim = (guint64) hp->n_heads * hp->head_dim;
  kv_dim = (guint64) hp->n_kv_heads * hp->head_dim;
  scale = 1.0f / sqrtf ((float) hp->head_dim);
  p = amk_program_new (amk_program_get_num_queues (decode));

  if ((tokens = add_buffer (p, "prefill.tokens", AMK_DTYPE_I32, chunk, 0, AMK_BUFFER_ROLE_INPUT, error)) < 0 ||
      (pos = add_buffer (p, "prefill.pos", AMK_DTYPE_I32, chunk, 0, AMK_BUFFER_ROLE_INPUT, error)) < 0 ||
      (x = add_buffer (p, "prefill.x", AMK_DTYPE_F32, chunk, hp->hidden, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (qkv = add_buffer (p, "prefill.qkv", AMK_DTYPE_F32, chunk, (gint64) (q_dim + 2 * kv_dim),
                         AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (attn = add_buffer (p, "prefill.attn", AMK_DTYPE_F32, chunk, (gint64) q_dim, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (gate = add_buffer (p, "prefill.gate", AMK_DTYPE_F32, chunk, hp->ffn, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (up = add_buffer (p, "prefill.up", AMK_DTYPE_F32, chunk, hp->ffn, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (act = add_buffer (p, "prefill.act", bf16 ? AMK_DTYPE_BF16 : AMK_DTYPE_F32, chunk, hp->ffn,
                         AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (bf16 && (xn = add_buffer (p, "prefill.xn", AMK_DTYPE_BF16, chunk, hp->hidden,
                                 AMK_BUFFER_ROLE_SCRATCH, error)) < 0))
    return FALSE;

  if ((table = share_weight (p, decode, spec, AMK_MODEL_WEIGHT_TOKEN_EMBD, 0, error)) < 0 ||
      amk_program_op_embed_rows (p, x, table, tokens, error) < 0)
    return FALSE;

  for (guint i = 0; i < hp->n_layers; i++)
    {
      g_autofree char *n_qkv = g_strdup_printf ("blk.%u.attn_qkv.weight", i);
      g_autofree char *n_kc = g_strdup_printf ("blk.%u.k_cache", i);
      g_autofree char *n_vc = g_strdup_printf ("blk.%u.v_cache", i);
      const gboolean last = i + 1 == hp->n_layers;
      gint an, wqkv, wo, qn = -1, kn = -1, fn, wg, wu, wd, kc, vc;

      if ((an = share_weight (p, decode, spec, AMK_MODEL_WEIGHT_ATTN_NORM, i, error)) < 0 ||
          (wqkv = share_buffer (p, decode, n_qkv, error)) < 0 ||
          (kc = share_buffer (p, decode, n_kc, error)) < 0 ||
          (vc = share_buffer (p, decode, n_vc, error)) < 0)
        return FALSE;
      if (hp->qk_norm &&
          ((qn = share_weight (p, decode, spec, AMK_MODEL_WEIGHT_ATTN_Q_NORM, i, error)) < 0 ||
           (kn = share_weight (p, decode, spec, AMK_MODEL_WEIGHT_ATTN_K_NORM, i, error)) < 0))
        return FALSE;
      if ((xn >= 0 && amk_program_op_rmsnorm (p, xn, x, an, hp->hidden, hp->eps, error) < 0) ||
          !normed_matmul (p, qkv, wqkv, x, xn, an, hp->eps, error) ||
          amk_program_op_rope_rows (p, qkv, kc, vc, pos, -1, qn, kn, hp->head_dim, hp->n_heads,
                                    hp->n_kv_heads, hp->eps, hp->rope_theta, hp->rope_factor,
                                    hp->rope_low_freq_factor, hp->rope_high_freq_factor,
                                    hp->rope_original_context, error) < 0)
        return FALSE;
      if (last)
        break;   /* the caches are all a chunk leaves */
      if ((wo = share_weight (p, decode, spec, AMK_MODEL_WEIGHT_ATTN_OUTPUT, i, error)) < 0 ||
          (fn = share_weight (p, decode, spec, AMK_MODEL_WEIGHT_FFN_NORM, i, error)) < 0 ||
          (wg = share_weight (p, decode, spec, AMK_MODEL_WEIGHT_FFN_GATE, i, error)) < 0 ||
          (wu = share_weight (p, decode, spec, AMK_MODEL_WEIGHT_FFN_UP, i, error)) < 0 ||
          (wd = share_weight (p, decode, spec, AMK_MODEL_WEIGHT_FFN_DOWN, i, error)) < 0)
        return FALSE;
      if (amk_program_op_attention_rows (p, attn, qkv, kc, vc, pos, -1, hp->head_dim, hp->n_heads,
                                         hp->n_kv_heads, scale, error) < 0 ||
          amk_program_op_matmul (p, x, wo, attn, -1, x, -1, 0.0f, error) < 0 ||
          (xn >= 0 && amk_program_op_rmsnorm (p, xn, x, fn, hp->hidden, hp->eps, error) < 0) ||
          !normed_matmul (p, gate, wg, x, xn, fn, hp->eps, error) ||
          !normed_matmul (p, up, wu, x, xn, fn, hp->eps, error) ||
          amk_program_op_silu_mul (p, act, gate, up, error) < 0 ||
          amk_program_op_matmul (p, x, wd, act, -1, x, -1, 0.0f, error) < 0)
        return FALSE;
    }
  if (!amk_program_compile (p, error))
    return FALSE;

  build->prefill = g_steal_pointer (&p);
  build->chunk = chunk;
  build->prefill_tokens = tokens;
  build->prefill_pos = pos;
  return TRUE;
}
