/* amk-cpu-ops-vector.c: reference implementations of the vector ops (RMSNORM, SILU_MUL,
 * EMBED, ARGMAX_PARTIAL, ARGMAX_FINAL; their contract is in kernels/amk-abi.h). Obviously
 * correct before fast: one element at a time, fp32 arithmetic, round-to-nearest-even
 * stores. The instruction was verified: every range lies inside its buffer.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "amk-cpu-ops-private.h"
#include "amk-dtype-private.h"

static float
load (const AmkCpuBuffer *b, guint64 i)
{
  return amk_dtype_load (b->info->dtype, b->data, i);
}

static void
store (AmkCpuBuffer *b, guint64 i, float v)
{
  amk_dtype_store (b->info->dtype, b->data, i, v);
}

static gint32
load_i32 (const AmkCpuBuffer *b, guint64 i)
{
  gint32 v;
  memcpy (&v, b->data + i * 4, 4);
  return v;
}

static void
store_i32 (AmkCpuBuffer *b, guint64 i, gint32 v)
{
  memcpy (b->data + i * 4, &v, 4);
}

/* out[v n + c] = x[v n + c] / sqrt(mean_c x[v n + c]^2 + eps) * w[c], v = i1 .. i1 + i2.
 * The sum of squares is taken before any element of the vector is written, so out may be
 * x itself. Same arithmetic as MATVEC's fused norm: scale = 1 / sqrtf (sum / n + eps),
 * then x * scale * w. */
static void
op_rmsnorm (const amk_instruction_t *ins, AmkCpuBuffer *b)
{
  const gint32 n = ins->params.i[0], v0 = ins->params.i[1], nv = ins->params.i[2];
  const float eps = ins->params.f[3];
  AmkCpuBuffer *out = &b[ins->buffers[0]], *x = &b[ins->buffers[1]], *w = &b[ins->buffers[2]];

  for (gint64 v = v0; v < (gint64) v0 + nv; v++)
    {
      const guint64 base = (guint64) v * (guint64) n;
      float sum = 0.0f, scale;

      for (gint32 c = 0; c < n; c++)
        {
          float e = load (x, base + c);
          sum += e * e;
        }
      scale = 1.0f / sqrtf (sum / (float) n + eps);
      for (gint32 c = 0; c < n; c++)
        store (out, base + c, load (x, base + c) * scale * load (w, c));
    }
}

/* out[i0 + k] = silu(gate[i0 + k]) * up[i0 + k], silu(g) = g / (1 + e^-g). */
static void
op_silu_mul (const amk_instruction_t *ins, AmkCpuBuffer *b)
{
  const guint64 off = (guint64) ins->params.i[0];
  AmkCpuBuffer *out = &b[ins->buffers[0]], *gate = &b[ins->buffers[1]], *up = &b[ins->buffers[2]];

  for (gint32 k = 0; k < ins->params.i[1]; k++)
    {
      float g = load (gate, off + k);
      store (out, off + k, g / (1.0f + expf (-g)) * load (up, off + k));
    }
}

/* out[i1 + c] = table[t i3 + i1 + c], c < i2, t = tokens[i0]; a token outside
 * [0, vocab) aborts with CHECK, detail = the tokens' buffer index. Equal dtypes copy the
 * bits (what the GPU does); otherwise load as fp32 and round. */
static AmkAbortCode
op_embed (const amk_instruction_t *ins, AmkCpuBuffer *b, gint *detail)
{
  const gint32 col = ins->params.i[1], count = ins->params.i[2], row_len = ins->params.i[3];
  AmkCpuBuffer *out = &b[ins->buffers[0]], *table = &b[ins->buffers[1]], *tokens = &b[ins->buffers[2]];
  const guint64 vocab = table->info->n_elements / (guint64) row_len;
  const gint32 t = load_i32 (tokens, (guint64) ins->params.i[0]);
  guint64 src;

  if (t < 0 || (guint64) t >= vocab)
    {
      *detail = ins->buffers[2];
      return AMK_ABORT_CODE_CHECK;
    }
  src = (guint64) t * (guint64) row_len + (guint64) col;
  if (out->info->dtype == table->info->dtype)
    {
      guint es = amk_dtype_size (out->info->dtype);
      memcpy (out->data + (guint64) col * es, table->data + src * es, (gsize) count * es);
    }
  else
    for (gint32 c = 0; c < count; c++)
      store (out, (guint64) col + c, load (table, src + c));
  return AMK_ABORT_CODE_NONE;
}

/* (a, ia) beats (b, ib): the larger value; NaN is smaller than everything (also -inf);
 * equal values (+0 and -0 too) and two NaNs go to the lower index. */
static gboolean
beats (float a, gint64 ia, float b, gint64 ib)
{
  if (isnan (a))
    return isnan (b) && ia < ib;
  if (isnan (b))
    return TRUE;
  if (a != b)
    return a > b;
  return ia < ib;
}

/* val[i2], idx[i2] = the largest x[i0 + k], k < i1, and its index i0 + k. */
static void
op_argmax_partial (const amk_instruction_t *ins, AmkCpuBuffer *b)
{
  const gint32 off = ins->params.i[0], count = ins->params.i[1], slot = ins->params.i[2];
  AmkCpuBuffer *val = &b[ins->buffers[0]], *idx = &b[ins->buffers[1]], *x = &b[ins->buffers[2]];
  float best = load (x, (guint64) off);
  gint64 best_i = off;

  for (gint64 i = (gint64) off + 1; i < (gint64) off + count; i++)
    {
      float e = load (x, (guint64) i);
      if (beats (e, i, best, best_i))
        best = e, best_i = i;
    }
  store (val, (guint64) slot, best);
  store_i32 (idx, (guint64) slot, (gint32) best_i);
}

/* out[i1] = idx[j] of the largest val[j], j < i0, the lowest j on ties. */
static void
op_argmax_final (const amk_instruction_t *ins, AmkCpuBuffer *b)
{
  const gint32 count = ins->params.i[0];
  AmkCpuBuffer *out = &b[ins->buffers[0]], *val = &b[ins->buffers[1]], *idx = &b[ins->buffers[2]];
  float best = load (val, 0);
  gint64 best_j = 0;

  for (gint64 j = 1; j < count; j++)
    {
      float e = load (val, (guint64) j);
      if (beats (e, j, best, best_j))
        best = e, best_j = j;
    }
  store_i32 (out, (guint64) ins->params.i[1], load_i32 (idx, (guint64) best_j));
}

AmkAbortCode
amk_cpu_vector_op (const amk_instruction_t *ins,
                   AmkCpuBuffer            *buffers,
                   gint                    *detail)
{
  switch (ins->opcode)
    {
    case AMK_ABI_OP_RMSNORM:
      op_rmsnorm (ins, buffers);
      return AMK_ABORT_CODE_NONE;
    case AMK_ABI_OP_SILU_MUL:
      op_silu_mul (ins, buffers);
      return AMK_ABORT_CODE_NONE;
    case AMK_ABI_OP_EMBED:
      return op_embed (ins, buffers, detail);
    case AMK_ABI_OP_ARGMAX_PARTIAL:
      op_argmax_partial (ins, buffers);
      return AMK_ABORT_CODE_NONE;
    case AMK_ABI_OP_ARGMAX_FINAL:
      op_argmax_final (ins, buffers);
      return AMK_ABORT_CODE_NONE;
    default:
      *detail = ins->opcode;
      return AMK_ABORT_CODE_BAD_OPCODE;
    }
}
