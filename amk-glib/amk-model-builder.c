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
  guint32        keep;   /* the block-quantized types matrices keep (1 << AmkDType) */
} Graph;

/* Where build->weights keeps the decode step's buffer of `weight` (of `layer`). */
static guint
weight_slot (AmkModelWeight weight,
             guint          layer)
{
  const guint per_layer = AMK_MODEL_N_WEIGHTS - AMK_MODEL_WEIGHT_FIRST_LAYER;

  if (weight < AMK_MODEL_WEIGHT_FIRST_LAYER)
    return weight;
  return AMK_MODEL_WEIGHT_FIRST_LAYER + layer * per_layer + (weight - AMK_MODEL_WEIGHT_FIRST_LAYER);
}

/* Adds bytes as a CONSTANT buffer of dtype and counts them as weights. */
static gint
add_constant (Graph          *g,
              const char     *name,
              AmkDType        dtype,
              GBytes         *bytes,
              const gint64   *shape,
              gsize           n_dims,
              GError        **error)
{
  gint buf = amk_program_add_buffer (g->program, name, dtype, shape, n_dims,
                                     AMK_BUFFER_ROLE_CONSTANT, error);

  if (buf < 0 || !amk_program_set_buffer_data (g->program, (guint) buf, bytes, error))
    return -1;
  g->build->weight_bytes += g_bytes_get_size (bytes);
  return buf;
}

/* Adds the weight as a CONSTANT buffer of shape {rows, cols} (or {cols} when rows is 0),
 * named as in the file: bf16, or a matrix's quantized type when g->keep has it. */
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
  AmkDType dtype;
  gint64 shape[2];
  gsize n_dims;
  gint buf;

  bytes = amk_model_spec_load_weight (g->spec, weight, layer, rows, cols, g->keep, &dtype, &name, error);
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
  buf = add_constant (g, name, dtype, bytes, shape, n_dims, error);
  g->build->weights[weight_slot (weight, layer)] = buf;
  return buf;
}

/* Layer `layer`'s q, k and v projections as one [q_dim + 2 kv_dim, hidden] constant
 * (their rows one after the other), for one MATVEC into a qkv vector: in their quantized
 * type when the three share one that g->keep has, else in bf16. */
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
  guint32 keep = g->keep;
  AmkDType dtype = AMK_DTYPE_BF16;
  gint buf;

  for (guint i = 0; i < G_N_ELEMENTS (parts); i++)
    {
      AmkDType part_dtype;
      g_autoptr(GBytes) part = amk_model_spec_load_weight (g->spec, parts[i], layer, rows[i], cols, keep,
                                                           &part_dtype, NULL, error);

      if (part == NULL)
        return -1;
      if (i > 0 && part_dtype != dtype)
        {
          /* types that differ (Q4_K_M files keep v in Q6_K): all three in bf16 */
          g_byte_array_set_size (all, 0);
          keep = 0;
          i = (guint) -1;
          continue;
        }
      dtype = part_dtype;
      g_byte_array_append (all, g_bytes_get_data (part, NULL), g_bytes_get_size (part));
    }
  bytes = g_byte_array_free_to_bytes (g_steal_pointer (&all));
  buf = add_constant (g, name, dtype, bytes, shape, 2, error);
  g->build->weights[weight_slot (AMK_MODEL_WEIGHT_ATTN_Q, layer)] = buf;
  return buf;
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
  g_clear_pointer (&build->prefill, amk_model_rows_free);
  g_clear_object (&build->tokenizer);
  g_free (build->architecture);
  g_free (build->eos_ids);
  g_free (build->weights);
  g_free (build);
}

void
amk_model_rows_free (AmkModelRows *rows)
{
  if (rows == NULL)
    return;
  g_clear_object (&rows->program);
  g_free (rows);
}

void
amk_model_batch_free (AmkModelBatch *batch)
{
  if (batch == NULL)
    return;
  g_clear_pointer (&batch->step, amk_model_rows_free);
  g_clear_pointer (&batch->prefill, amk_model_rows_free);
  g_free (batch);
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
  return amk_model_build_graph_keeping (spec, n_queues, context, 0, error);
}

/* amk_model_build_graph(), with the matrices stored in a block-quantized type whose bit
 * (1 << AmkDType) is in keep left in it (for an executor that runs them). */
AmkModelBuild *
amk_model_build_graph_keeping (AmkModelSpec  *spec,
                               guint          n_queues,
                               guint          context,
                               guint32        keep,
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
  guint n_slots;
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
  build->n_pieces = MIN (build->vocab_size, amk_tokenizer_get_vocab_size (tokenizer));
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
  build->params = *hp;
  build->params.architecture = build->architecture;
  build->params.source = NULL;
  n_slots = weight_slot (AMK_MODEL_N_WEIGHTS - 1, hp->n_layers - 1) + 1;
  build->weights = g_new (gint, n_slots);
  for (guint i = 0; i < n_slots; i++)
    build->weights[i] = -1;
  build->rows_fit = amk_model_prefill_fits (spec);
  build->program = p = amk_program_new (n_queues);
  /* RoPE inside the attention (one q/k/v projection, one stage less per layer) where
   * nothing runs between the projection and RoPE (Qwen3's q/k norm does) and the shapes
   * allow it */
  fuse_rope = !hp->qk_norm &&
              amk_program_rope_attention_fits (p, hp->head_dim, hp->n_heads, hp->n_kv_heads, context, 0);
  g.program = p;
  g.spec = spec;
  g.build = build;
  g.keep = keep;

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
    build->weights[weight_slot (AMK_MODEL_WEIGHT_OUTPUT, 0)] = out_w = table;
  else if ((out_w = add_weight (&g, AMK_MODEL_WEIGHT_OUTPUT, 0, hp->vocab, hp->hidden, error)) < 0)
    return NULL;
  if (amk_program_op_matvec (p, logits, out_w, x, -1, -1, out_norm, hp->eps, error) < 0 ||
      amk_program_op_argmax (p, tokens, 0, logits, error) < 0)
    return NULL;
  if (!amk_program_compile (p, error))
    return NULL;
  return g_steal_pointer (&build);
}

/* The many-row programs: a prefill chunk, a batch step */

/* Adds `from`'s buffer `b` to p with the same name, dtype, shape and role, and for a
 * constant the same bytes (a reference): amk_executor_load_shared() then gives it the
 * memory of `from`'s buffer, a weight or a KV cache, with no copy. */
static gint
share_buffer (AmkProgram  *p,
              AmkProgram  *from,
              gint         b,
              GError     **error)
{
  const gint64 *shape;
  g_autoptr(GBytes) data = NULL;
  gsize n_dims;
  gint buf;

  g_return_val_if_fail (b >= 0, -1);

  shape = amk_program_get_buffer_shape (from, (guint) b, &n_dims);
  buf = amk_program_add_buffer (p, amk_program_get_buffer_name (from, (guint) b),
                                amk_program_get_buffer_dtype (from, (guint) b),
                                shape, n_dims, amk_program_get_buffer_role (from, (guint) b), error);
  if (buf < 0)
    return -1;
  data = amk_program_get_buffer_data (from, (guint) b);
  if (data != NULL && !amk_program_set_buffer_data (p, (guint) buf, data, error))
    return -1;
  return buf;
}

/* share_buffer() of the decode step's weight `weight` (of `layer`). */
static gint
share_weight (AmkProgram           *p,
              const AmkModelBuild  *build,
              AmkModelWeight        weight,
              guint                 layer,
              GError              **error)
{
  return share_buffer (p, build->program, build->weights[weight_slot (weight, layer)], error);
}

/* x normalised with `norm` into the BF16 buffer xn, when there is one (xn >= 0); without
 * one, the norm is fused into each MATMUL (normed_matmul()). */
static gboolean
norm_rows (AmkProgram           *p,
           const AmkModelBuild  *build,
           gint                  xn,
           gint                  x,
           gint                  norm,
           GError              **error)
{
  return xn < 0 || amk_program_op_rmsnorm (p, xn, x, norm, build->params.hidden, build->params.eps, error) >= 0;
}

/* A MATMUL of the rows at positions `pos` whose input is x normalised with `norm`: read
 * from xn (norm_rows() filled it), or with the norm fused. */
static gboolean
normed_matmul (AmkProgram  *p,
               gint         y,
               gint         w,
               gint         x,
               gint         xn,
               gint         norm,
               float        eps,
               gint         pos,
               GError     **error)
{
  if (xn < 0)
    return amk_program_op_matmul_rows (p, y, w, x, -1, -1, norm, eps, pos, error) >= 0;
  return amk_program_op_matmul_rows (p, y, w, xn, -1, -1, -1, 0.0f, pos, error) >= 0;
}

/* What build_rows() builds. */
typedef struct {
  const char *prefix;        /* of the program's own buffers: "prefill.", "batch." */
  guint       rows;
  AmkProgram *caches_from;   /* the program whose KV caches it shares, or NULL: its own */
  const char *cache_prefix;  /* of the caches' names */
  guint       slots;         /* sequences in the caches; 0: one, and no seq buffer */
  gboolean    logits;        /* run to each row's logits and argmax (a batch step) */
  gboolean    head;          /* the rows of head_pos to their logits and argmax (a chunk) */
  AmkDType    activations;   /* BF16: the MATMULs' inputs and the FFN's gate and up in bf16 */
} RowsPlan;

static gint
rows_buffer (AmkProgram     *p,
             const RowsPlan *plan,
             const char     *name,
             AmkDType        dtype,
             guint64         cols,
             AmkBufferRole   role,
             GError        **error)
{
  g_autofree char *full = g_strconcat (plan->prefix, name, NULL);

  return add_buffer (p, full, dtype, plan->rows, (gint64) cols, role, error);
}

/* Layer i's KV cache `which` ("k" or "v"): shared, or a STATE buffer of `slots`
 * sequences of the context's positions. */
static gint
rows_cache (AmkProgram           *p,
            const AmkModelBuild  *build,
            const RowsPlan       *plan,
            guint                 i,
            const char           *which,
            GError              **error)
{
  g_autofree char *name = g_strdup_printf ("%sblk.%u.%s_cache", plan->cache_prefix, i, which);
  gint64 shape[3] = { plan->slots, build->context,
                      (gint64) build->params.n_kv_heads * build->params.head_dim };

  if (plan->caches_from != NULL)
    return share_buffer (p, plan->caches_from, amk_program_find_buffer (plan->caches_from, name), error);
  return amk_program_add_buffer (p, name, AMK_DTYPE_BF16, shape, 3, AMK_BUFFER_ROLE_STATE, error);
}

/* The decode step's layers, `rows` tokens at a time: every layer is
 *
 *     qkv = Wqkv n(x)                              (MATMUL, RMSNORM fused or before it)
 *     ROPE_ROWS (qkv): q/k norm (Qwen3), RoPE, the cache append
 *     x += Wo ATTN_ROWS(qkv)
 *     x += Wd (silu(Wg n2(x)) * Wu n2(x))          (MATMULs, SILU_MUL)
 *
 * then the logits of every row and their argmax into tokens; or, without logits, the
 * last layer stops after ROPE_ROWS: a prompt chunk only fills the caches. */
static AmkModelRows *
build_rows (const AmkModelBuild  *build,
            const RowsPlan       *plan,
            GError              **error)
{
  g_autoptr(AmkModelRows) out = g_new0 (AmkModelRows, 1);
  const AmkModelParams *hp = &build->params;
  const gboolean bf16 = plan->activations == AMK_DTYPE_BF16;
  const guint64 q_dim = (guint64) hp->n_heads * hp->head_dim;
  const guint64 kv_dim = (guint64) hp->n_kv_heads * hp->head_dim;
  const float scale = 1.0f / sqrtf ((float) hp->head_dim);
  AmkProgram *p;
  gint x, xn = -1, qkv, attn, gate, up, act, seq = -1, table;

  out->program = p = amk_program_new (amk_program_get_num_queues (build->program));
  out->rows = plan->rows;
  out->logits = out->head_pos = out->next = -1;
  if ((out->tokens = rows_buffer (p, plan, "tokens", AMK_DTYPE_I32, 0,
                                  plan->logits ? AMK_BUFFER_ROLE_STATE : AMK_BUFFER_ROLE_INPUT, error)) < 0 ||
      (out->pos = rows_buffer (p, plan, "pos", AMK_DTYPE_I32, 0, AMK_BUFFER_ROLE_INPUT, error)) < 0 ||
      (plan->slots > 0 &&
       (seq = rows_buffer (p, plan, "seq", AMK_DTYPE_I32, 0, AMK_BUFFER_ROLE_INPUT, error)) < 0) ||
      (plan->head &&
       ((out->head_pos = rows_buffer (p, plan, "head_pos", AMK_DTYPE_I32, 0, AMK_BUFFER_ROLE_INPUT, error)) < 0 ||
        (out->next = rows_buffer (p, plan, "next", AMK_DTYPE_I32, 0, AMK_BUFFER_ROLE_OUTPUT, error)) < 0)) ||
      (x = rows_buffer (p, plan, "x", AMK_DTYPE_F32, hp->hidden, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (qkv = rows_buffer (p, plan, "qkv", AMK_DTYPE_F32, q_dim + 2 * kv_dim, AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (attn = rows_buffer (p, plan, "attn", bf16 ? AMK_DTYPE_BF16 : AMK_DTYPE_F32, q_dim,
                           AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (gate = rows_buffer (p, plan, "gate", bf16 ? AMK_DTYPE_BF16 : AMK_DTYPE_F32, hp->ffn,
                           AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (up = rows_buffer (p, plan, "up", bf16 ? AMK_DTYPE_BF16 : AMK_DTYPE_F32, hp->ffn,
                         AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (act = rows_buffer (p, plan, "act", bf16 ? AMK_DTYPE_BF16 : AMK_DTYPE_F32, hp->ffn,
                          AMK_BUFFER_ROLE_SCRATCH, error)) < 0 ||
      (bf16 && (xn = rows_buffer (p, plan, "xn", AMK_DTYPE_BF16, hp->hidden, AMK_BUFFER_ROLE_SCRATCH, error)) < 0))
    return NULL;
  out->seq = seq;

  if ((table = share_weight (p, build, AMK_MODEL_WEIGHT_TOKEN_EMBD, 0, error)) < 0 ||
      amk_program_op_embed_rows (p, x, table, out->tokens, error) < 0)
    return NULL;

  for (guint i = 0; i < hp->n_layers; i++)
    {
      const gboolean last = i + 1 == hp->n_layers;
      /* after the caches, the last layer of a head runs only the head's rows */
      const gint rows_pos = last && plan->head ? out->head_pos : out->pos;
      gint an, wqkv, wo, qn = -1, kn = -1, fn, wg, wu, wd, kc, vc;

      if ((an = share_weight (p, build, AMK_MODEL_WEIGHT_ATTN_NORM, i, error)) < 0 ||
          (wqkv = share_weight (p, build, AMK_MODEL_WEIGHT_ATTN_Q, i, error)) < 0 ||
          (kc = rows_cache (p, build, plan, i, "k", error)) < 0 ||
          (vc = rows_cache (p, build, plan, i, "v", error)) < 0)
        return NULL;
      if (hp->qk_norm &&
          ((qn = share_weight (p, build, AMK_MODEL_WEIGHT_ATTN_Q_NORM, i, error)) < 0 ||
           (kn = share_weight (p, build, AMK_MODEL_WEIGHT_ATTN_K_NORM, i, error)) < 0))
        return NULL;
      if (!norm_rows (p, build, xn, x, an, error) ||
          !normed_matmul (p, qkv, wqkv, x, xn, an, hp->eps, out->pos, error) ||
          amk_program_op_rope_rows (p, qkv, kc, vc, out->pos, seq, qn, kn, hp->head_dim, hp->n_heads,
                                    hp->n_kv_heads, hp->eps, hp->rope_theta, hp->rope_factor,
                                    hp->rope_low_freq_factor, hp->rope_high_freq_factor,
                                    hp->rope_original_context, error) < 0)
        return NULL;
      if (last && !plan->logits && !plan->head)
        break;   /* the caches are all a chunk leaves */
      if ((wo = share_weight (p, build, AMK_MODEL_WEIGHT_ATTN_OUTPUT, i, error)) < 0 ||
          (fn = share_weight (p, build, AMK_MODEL_WEIGHT_FFN_NORM, i, error)) < 0 ||
          (wg = share_weight (p, build, AMK_MODEL_WEIGHT_FFN_GATE, i, error)) < 0 ||
          (wu = share_weight (p, build, AMK_MODEL_WEIGHT_FFN_UP, i, error)) < 0 ||
          (wd = share_weight (p, build, AMK_MODEL_WEIGHT_FFN_DOWN, i, error)) < 0)
        return NULL;
      if (amk_program_op_attention_rows (p, attn, qkv, kc, vc, rows_pos, seq, hp->head_dim, hp->n_heads,
                                         hp->n_kv_heads, scale, error) < 0 ||
          amk_program_op_matmul_rows (p, x, wo, attn, -1, x, -1, 0.0f, rows_pos, error) < 0 ||
          !norm_rows (p, build, xn, x, fn, error) ||
          !normed_matmul (p, gate, wg, x, xn, fn, hp->eps, rows_pos, error) ||
          !normed_matmul (p, up, wu, x, xn, fn, hp->eps, rows_pos, error) ||
          amk_program_op_silu_mul (p, act, gate, up, error) < 0 ||
          amk_program_op_matmul_rows (p, x, wd, act, -1, x, -1, 0.0f, rows_pos, error) < 0)
        return NULL;
    }

  if (plan->logits || plan->head)
    {
      const gint rows_pos = plan->head ? out->head_pos : out->pos;
      const gboolean tied = build->weights[weight_slot (AMK_MODEL_WEIGHT_OUTPUT, 0)] ==
                            build->weights[weight_slot (AMK_MODEL_WEIGHT_TOKEN_EMBD, 0)];
      gint out_norm, out_w = table;

      if ((out_norm = share_weight (p, build, AMK_MODEL_WEIGHT_OUTPUT_NORM, 0, error)) < 0 ||
          (!tied && (out_w = share_weight (p, build, AMK_MODEL_WEIGHT_OUTPUT, 0, error)) < 0))
        return NULL;
      if ((out->logits = rows_buffer (p, plan, "logits", AMK_DTYPE_F32, hp->vocab,
                                      AMK_BUFFER_ROLE_OUTPUT, error)) < 0 ||
          !norm_rows (p, build, xn, x, out_norm, error) ||
          !normed_matmul (p, out->logits, out_w, x, xn, out_norm, hp->eps, rows_pos, error) ||
          amk_program_op_argmax_rows (p, plan->head ? out->next : out->tokens, out->logits, error) < 0)
        return NULL;
    }
  if (!amk_program_compile (p, error))
    return NULL;
  return g_steal_pointer (&out);
}

gboolean
amk_model_prefill_fits (const AmkModelSpec *spec)
{
  const AmkModelParams *hp = &spec->params;

  return hp->hidden % 8 == 0 && ((guint64) hp->n_heads * hp->head_dim) % 8 == 0 && hp->ffn % 8 == 0 &&
         hp->head_dim % 2 == 0 && hp->head_dim <= 256;
}

/**
 * amk_model_build_prefill:
 * @build: a decode step built by amk_model_build_graph()
 * @chunk: the rows of the chunk, at least 2
 * @activations: the type of the MATMULs' inputs: F32 (the norm fused into the MATMUL),
 *   or BF16 (a RMSNORM into a BF16 buffer first; the attention output, gate, up and
 *   SILU_MUL's output in BF16), which the tensor cores read without a conversion
 *   (amk_executor_get_activation_dtype())
 * @head: also take the rows that "prefill.head_pos" gives a position (the prompt's last
 *   token) through the rest of the last layer to their logits and argmax, so that no
 *   decode step is needed for the prompt's last token: for an executor that skips the
 *   padding rows of MATMUL (all but those rows there), as the CPU executor does
 * @error: return location for a #GError
 *
 * Builds the prefill chunk program beside the decode step: `chunk` prompt tokens in
 * "prefill.tokens" at the positions in "prefill.pos" (-1: a padding row) go through
 * the decode step's layers (build_rows()) and leave their keys and values in the KV
 * caches; the decode step computes the logits of the prompt's last token. The weights
 * and the caches have the decode step's names, dtypes and shapes, and the constants hold
 * the decode step's bytes themselves (no second conversion), so that loading the chunk
 * with amk_executor_load_shared() on the decode step's executor shares them.
 *
 * Returns: %TRUE with @build's prefill set, or %FALSE with @error set
 */
gboolean
amk_model_build_prefill (AmkModelBuild  *build,
                         guint           chunk,
                         AmkDType        activations,
                         gboolean        head,
                         GError        **error)
{
  RowsPlan plan = { .prefix = "prefill.", .rows = chunk, .caches_from = NULL, .cache_prefix = "",
                    .slots = 0, .logits = FALSE, .head = head, .activations = activations };

  g_return_val_if_fail (build != NULL && AMK_IS_PROGRAM (build->program), FALSE);
  g_return_val_if_fail (build->prefill == NULL, FALSE);
  g_return_val_if_fail (build->rows_fit, FALSE);
  g_return_val_if_fail (chunk >= 2, FALSE);

  plan.caches_from = build->program;
  build->prefill = build_rows (build, &plan, error);
  return build->prefill != NULL;
}

/**
 * amk_model_build_batch:
 * @build: a decode step built by amk_model_build_graph()
 * @slots: the sequences of the batch, at least 1
 * @chunk: the rows of its prefill chunk (0 or 1: none)
 * @activations: the type of the MATMULs' inputs, as for amk_model_build_prefill()
 * @error: return location for a #GError
 *
 * Builds a batch of @slots sequences on the decode step's weights, with KV caches of its
 * own, "batch.blk.N.k_cache" and "batch.blk.N.v_cache" of [slots, context, kv]: the step,
 * which advances row r (sequence slot r as "batch.seq" says, at "batch.pos", -1 an idle
 * row) by one token and leaves its greedy next token in "batch.tokens"; and the prefill
 * chunk, which feeds a prompt's tokens into one sequence's slot ("batch.prefill.seq").
 *
 * Returns: (transfer full) (nullable): the batch, or %NULL with @error set
 */
AmkModelBatch *
amk_model_build_batch (AmkModelBuild  *build,
                       guint           slots,
                       guint           chunk,
                       AmkDType        activations,
                       GError        **error)
{
  g_autoptr(AmkModelBatch) batch = g_new0 (AmkModelBatch, 1);
  RowsPlan step = { .prefix = "batch.", .rows = slots, .caches_from = NULL, .cache_prefix = "batch.",
                    .slots = slots, .logits = TRUE, .activations = activations };
  RowsPlan prefill = { .prefix = "batch.prefill.", .rows = chunk, .caches_from = NULL,
                       .cache_prefix = "batch.", .slots = slots, .logits = FALSE,
                       .activations = activations };

  g_return_val_if_fail (build != NULL && AMK_IS_PROGRAM (build->program), NULL);
  g_return_val_if_fail (build->rows_fit, NULL);
  g_return_val_if_fail (slots >= 1, NULL);

  batch->slots = slots;
  if ((batch->step = build_rows (build, &step, error)) == NULL)
    return NULL;
  prefill.caches_from = batch->step->program;
  if (chunk >= 2 && (batch->prefill = build_rows (build, &prefill, error)) == NULL)
    return NULL;
  return g_steal_pointer (&batch);
}
