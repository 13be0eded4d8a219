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
  gint tokens, pos, x, q = -1, k = -1, v = -1, qkv = -1, attn, gate, up, act, logits, table, out_norm, out_w;
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
