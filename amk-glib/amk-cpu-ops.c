/* amk-cpu-ops.c: reference implementations of the utility ops. Obviously correct
 * before fast: one element at a time, floats through fp32 with round-to-nearest-even
 * stores, integers with wrapping arithmetic, like the GPU.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "amk-cpu-ops-private.h"
#include "amk-dtype-private.h"

static void
op_copy (const amk_instruction_t *ins, AmkCpuBuffer *b)
{
  AmkCpuBuffer *dst = &b[ins->buffers[0]], *src = &b[ins->buffers[1]];
  guint esize = amk_dtype_size (dst->info->dtype);

  memmove (dst->data + (gsize) ins->params.i[0] * esize,
           src->data + (gsize) ins->params.i[1] * esize,
           (gsize) ins->params.i[2] * esize);
}

static void
op_fill (const amk_instruction_t *ins, AmkCpuBuffer *b)
{
  AmkCpuBuffer *dst = &b[ins->buffers[0]];

  for (gint32 k = 0; k < ins->params.i[1]; k++)
    amk_dtype_store (dst->info->dtype, dst->data, (guint64) ins->params.i[0] + k, ins->params.f[2]);
}

static void
op_add (const amk_instruction_t *ins, AmkCpuBuffer *b)
{
  AmkCpuBuffer *dst = &b[ins->buffers[0]], *x = &b[ins->buffers[1]], *y = &b[ins->buffers[2]];
  AmkDType dtype = dst->info->dtype;
  guint64 od = ins->params.i[0], ox = ins->params.i[1], oy = ins->params.i[2];

  for (gint32 k = 0; k < ins->params.i[3]; k++)
    {
      if (dtype == AMK_DTYPE_I32)
        {
          guint32 u, v, w;
          memcpy (&u, x->data + (ox + k) * 4, 4);
          memcpy (&v, y->data + (oy + k) * 4, 4);
          w = u + v;
          memcpy (dst->data + (od + k) * 4, &w, 4);
        }
      else if (dtype == AMK_DTYPE_U8)
        dst->data[od + k] = (guint8) (x->data[ox + k] + y->data[oy + k]);
      else
        amk_dtype_store (dtype, dst->data, od + k,
                         amk_dtype_load (dtype, x->data, ox + k) +
                         amk_dtype_load (dtype, y->data, oy + k));
    }
}

/* y[r0 + r] = W[r0 + r, :] x' (+ bias) (+ residual): one row at a time, fp32 sums in
 * column order; x' is x, x normalised by its RMS and scaled by the norm weight, or
 * silu(x) * up (a fused SILU_MUL, like op_silu_mul). A split-K tile (i5 > 0) sums the
 * columns i4 .. i4 + i5 only and adds that (plus the bias, for the first columns) to y,
 * which is its own residual. */
static void
op_matvec (const amk_instruction_t *ins, AmkCpuBuffer *b)
{
  const gint32 r0 = ins->params.i[0], n = ins->params.i[1], k = ins->params.i[2];
  const gboolean split = ins->params.i[5] > 0;
  const gint32 c0 = split ? ins->params.i[4] : 0, c1 = split ? c0 + ins->params.i[5] : k;
  AmkCpuBuffer *y = &b[ins->buffers[0]], *w = &b[ins->buffers[1]], *x = &b[ins->buffers[2]];
  AmkCpuBuffer *bias = ins->buffers[3] != AMK_NO_BUFFER ? &b[ins->buffers[3]] : NULL;
  AmkCpuBuffer *residual = ins->buffers[4] != AMK_NO_BUFFER ? &b[ins->buffers[4]] : NULL;
  AmkCpuBuffer *norm = ins->buffers[5] != AMK_NO_BUFFER ? &b[ins->buffers[5]] : NULL;
  AmkCpuBuffer *up = ins->n_buffers > 6 && ins->buffers[6] != AMK_NO_BUFFER ? &b[ins->buffers[6]] : NULL;
  g_autofree float *xs = g_new (float, k);
  float scale = 1.0f;

  for (gint32 c = 0; c < k; c++)
    xs[c] = amk_dtype_load (x->info->dtype, x->data, c);
  if (norm != NULL)
    {
      float sum = 0.0f;
      for (gint32 c = 0; c < k; c++)
        sum += xs[c] * xs[c];
      scale = 1.0f / sqrtf (sum / (float) k + ins->params.f[3]);
      for (gint32 c = 0; c < k; c++)
        xs[c] = xs[c] * scale * amk_dtype_load (norm->info->dtype, norm->data, c);
    }
  else if (up != NULL)
    for (gint32 c = 0; c < k; c++)
      xs[c] = xs[c] / (1.0f + expf (-xs[c])) * amk_dtype_load (up->info->dtype, up->data, c);
  for (gint32 r = r0; r < r0 + n; r++)
    {
      float acc = 0.0f;
      for (gint32 c = c0; c < c1; c++)
        acc += amk_dtype_load (w->info->dtype, w->data, (guint64) r * k + c) * xs[c];
      if (bias != NULL && c0 == 0)
        acc += amk_dtype_load (bias->info->dtype, bias->data, r);
      if (residual != NULL)
        acc += amk_dtype_load (residual->info->dtype, residual->data, r);
      amk_dtype_store (y->info->dtype, y->data, r, acc);
    }
}

AmkAbortCode
amk_cpu_op_run (const amk_instruction_t *ins,
                AmkCpuBuffer            *buffers,
                guint32                 *counters,
                gint                    *detail)
{
  switch (ins->opcode)
    {
    case AMK_ABI_OP_NOP:
    case AMK_ABI_OP_GRID_SYNC:
      return AMK_ABORT_CODE_NONE;
    case AMK_ABI_OP_COPY:
      op_copy (ins, buffers);
      return AMK_ABORT_CODE_NONE;
    case AMK_ABI_OP_FILL:
      op_fill (ins, buffers);
      return AMK_ABORT_CODE_NONE;
    case AMK_ABI_OP_ADD:
      op_add (ins, buffers);
      return AMK_ABORT_CODE_NONE;
    case AMK_ABI_OP_MATVEC:
      op_matvec (ins, buffers);
      return AMK_ABORT_CODE_NONE;
    case AMK_ABI_OP_RMSNORM:
    case AMK_ABI_OP_SILU_MUL:
    case AMK_ABI_OP_EMBED:
    case AMK_ABI_OP_ARGMAX_PARTIAL:
    case AMK_ABI_OP_ARGMAX_FINAL:
      return amk_cpu_vector_op (ins, buffers, detail);
    case AMK_ABI_OP_ROPE_KV:
    case AMK_ABI_OP_ATTN_DECODE:
    case AMK_ABI_OP_ATTN_REDUCE:
      return amk_cpu_attention_op (ins, buffers, counters, detail);
    case AMK_ABI_OP_TRAP:
      *detail = ins->params.i[0];
      return AMK_ABORT_CODE_TRAP;
    default:
      *detail = ins->opcode;
      return AMK_ABORT_CODE_BAD_OPCODE;
    }
}
