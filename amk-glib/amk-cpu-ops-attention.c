/* amk-cpu-ops-attention.c: reference implementations of the attention ops (ROPE_KV,
 * ATTN_DECODE with or without RoPE fused, ATTN_REDUCE; their contract is in
 * kernels/amk-abi.h). Obviously correct before fast: one head, one position at a time; sums in double, results stored as fp32
 * (bf16 caches with round-to-nearest-even).
 *
 * The RoPE angle is computed in fp32 step by step like HF transformers (inv_freq and the
 * Llama-3 scaling in amk-rope.c, then pos * inv_freq), with one exception: theta^e is
 * evaluated in double and rounded once, where torch's fp32 pow may be an ulp off. cos and
 * sin of the fp32 angle are the correctly rounded fp32 values. The GPU
 * (kernels/ops-attention.cuh) does the very same operations, so the rotated vectors agree
 * to the bit.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "amk-cpu-ops-private.h"
#include "amk-dtype-private.h"
#include "amk-rope-private.h"

static gint32
load_i32 (const AmkCpuBuffer *b, guint64 index)
{
  gint32 v;
  memcpy (&v, b->data + index * 4, 4);
  return v;
}

static float
load_f32 (const AmkCpuBuffer *b, guint64 index)
{
  return amk_dtype_load (b->info->dtype, b->data, index);
}

static void
store_f32 (AmkCpuBuffer *b, guint64 index, float v)
{
  amk_dtype_store (b->info->dtype, b->data, index, v);
}

/* inv_freq[c] of head dimension d with the ROPE_KV instruction's parameters. */
static float
rope_inv_freq (gint32 c, gint32 d, const amk_params_t *p)
{
  return amk_rope_inv_freq (c, d, p->f[6], p->f[7], p->f[8], p->f[9], p->i[10]);
}

/* The position, or -1 (with *detail) when it is outside [0, max_ctx). */
static gint32
read_pos (const amk_instruction_t *ins, AmkCpuBuffer *buffers, guint slot, gint *detail)
{
  const gint32 pos = load_i32 (&buffers[ins->buffers[slot]], 0);

  if (pos < 0 || pos >= ins->params.i[3])
    {
      *detail = ins->buffers[slot];
      return -1;
    }
  return pos;
}

/* The rotate-half step of one pair (x1, x2) by the angle whose cosine and sine are cs
 * and sn, each fp32 product and sum rounded on its own, as the GPU does. */
static void AMK_NO_CONTRACT
rotate_pair (float x1, float x2, float cs, float sn, float *r1, float *r2)
{
  const float x1c = x1 * cs, x2s = x2 * sn, x2c = x2 * cs, x1s = x1 * sn;

  *r1 = x1c - x2s;
  *r2 = x2c + x1s;
}

static AmkAbortCode AMK_NO_CONTRACT
op_rope_kv (const amk_instruction_t *ins, AmkCpuBuffer *b, gint *detail)
{
  const amk_params_t *p = &ins->params;
  const gint32 d = p->i[0], n_q = p->i[1], n_kv = p->i[2], first = p->i[4], count = p->i[5];
  const gint32 half = d / 2;
  AmkCpuBuffer *q = &b[ins->buffers[0]], *k = &b[ins->buffers[1]], *v = &b[ins->buffers[2]];
  AmkCpuBuffer *kc = &b[ins->buffers[3]], *vc = &b[ins->buffers[4]];
  const gint32 pos = read_pos (ins, b, 5, detail);

  if (pos < 0)
    return AMK_ABORT_CODE_CHECK;

  for (gint32 h = first; h < first + count; h++)
    {
      const gboolean is_key = h >= n_q;
      AmkCpuBuffer *x = is_key ? k : q;
      const guint64 base = (guint64) (is_key ? h - n_q : h) * d;
      const guint64 row = ((guint64) pos * n_kv + (is_key ? h - n_q : 0)) * d;

      for (gint32 c = 0; c < half; c++)
        {
          float cs, sn, r1, r2;

          amk_rope_cos_sin (pos, rope_inv_freq (c, d, p), &cs, &sn);

          rotate_pair (load_f32 (x, base + c), load_f32 (x, base + c + half), cs, sn, &r1, &r2);
          store_f32 (x, base + c, r1);
          store_f32 (x, base + c + half, r2);
          if (is_key)
            {
              store_f32 (kc, row + c, r1);
              store_f32 (kc, row + c + half, r2);
              store_f32 (vc, row + c, load_f32 (v, base + c));
              store_f32 (vc, row + c + half, load_f32 (v, base + c + half));
            }
        }
    }
  return AMK_ABORT_CODE_NONE;
}

/* RoPE fused into ATTN_DECODE (a seventh buffer, the cos and sin of every position's
 * angles): the group's query heads of qkv rotated into qrot, and, when the split holds
 * pos, key head g rotated and value head g appended at row pos of the caches. The fp32
 * steps of op_rope_kv. */
static void
rope_fused (const amk_instruction_t *ins, AmkCpuBuffer *b, gint32 pos, gboolean holds, float *qrot)
{
  const amk_params_t *p = &ins->params;
  const gint32 d = p->i[0], n_q = p->i[1], n_kv = p->i[2], g = p->i[4];
  const gint32 group = n_q / n_kv, half = d / 2;
  AmkCpuBuffer *qkv = &b[ins->buffers[1]], *cos_sin = &b[ins->buffers[6]];
  AmkCpuBuffer *kc = &b[ins->buffers[2]], *vc = &b[ins->buffers[3]];
  const guint64 row = ((guint64) pos * n_kv + g) * d;

  for (gint32 h = 0; h <= group; h++)
    {
      const gboolean is_key = h == group;
      const guint64 base = (guint64) (is_key ? n_q + g : g * group + h) * d;
      const guint64 v_base = (guint64) (n_q + n_kv + g) * d;

      if (is_key && !holds)
        break;
      for (gint32 c = 0; c < half; c++)
        {
          const float cs = load_f32 (cos_sin, ((guint64) pos * half + c) * 2);
          const float sn = load_f32 (cos_sin, ((guint64) pos * half + c) * 2 + 1);
          float r1, r2;

          rotate_pair (load_f32 (qkv, base + c), load_f32 (qkv, base + c + half), cs, sn, &r1, &r2);
          if (!is_key)
            {
              qrot[h * d + c] = r1;
              qrot[h * d + c + half] = r2;
              continue;
            }
          store_f32 (kc, row + c, r1);
          store_f32 (kc, row + c + half, r2);
          store_f32 (vc, row + c, load_f32 (qkv, v_base + c));
          store_f32 (vc, row + c + half, load_f32 (qkv, v_base + c + half));
        }
    }
}

/* Split i5 of i6 of the positions 0 .. pos (chunks of at least i9 positions) for the
 * query heads of key/value head i4. */
static AmkAbortCode
op_attn_decode (const amk_instruction_t *ins, AmkCpuBuffer *b, gint *detail)
{
  const amk_params_t *p = &ins->params;
  const gint32 d = p->i[0], n_q = p->i[1], n_kv = p->i[2];
  const gint32 g = p->i[4], split = p->i[5], n_splits = p->i[6];
  const gint32 group = n_q / n_kv;
  const double scale = p->f[7];
  AmkCpuBuffer *partial = &b[ins->buffers[0]], *q = &b[ins->buffers[1]];
  AmkCpuBuffer *kc = &b[ins->buffers[2]], *vc = &b[ins->buffers[3]];
  const gint32 pos = read_pos (ins, b, 4, detail);
  gint64 n, chunk, start, end;
  g_autofree double *scores = NULL;
  g_autofree double *acc = NULL;
  g_autofree float *qrot = NULL;

  if (pos < 0)
    return AMK_ABORT_CODE_CHECK;
  n = (gint64) pos + 1;
  chunk = MAX ((n + n_splits - 1) / n_splits, (gint64) p->i[9]);
  start = MIN ((gint64) split * chunk, n);
  end = MIN (start + chunk, n);
  scores = g_new (double, MAX (end - start, 1));
  acc = g_new (double, d);
  if (ins->n_buffers >= 7)
    {
      qrot = g_new (float, (gsize) group * d);
      rope_fused (ins, b, pos, start <= pos && pos < end, qrot);
    }

  for (gint32 h = g * group; h < (g + 1) * group; h++)
    {
      const guint64 out = ((guint64) h * n_splits + split) * (d + 2);
      double m = -INFINITY, l = 0.0;

      memset (acc, 0, sizeof (double) * d);
      for (gint64 t = start; t < end; t++)
        {
          const guint64 row = ((guint64) t * n_kv + g) * d;
          double dot = 0.0;
          for (gint32 c = 0; c < d; c++)
            dot += (double) (qrot != NULL ? qrot[(h - g * group) * d + c] : load_f32 (q, (guint64) h * d + c)) *
                   load_f32 (kc, row + c);
          scores[t - start] = scale * dot;
          m = MAX (m, scores[t - start]);
        }
      for (gint64 t = start; t < end; t++)
        {
          const guint64 row = ((guint64) t * n_kv + g) * d;
          const double e = exp (scores[t - start] - m);
          l += e;
          for (gint32 c = 0; c < d; c++)
            acc[c] += e * load_f32 (vc, row + c);
        }
      for (gint32 c = 0; c < d; c++)
        store_f32 (partial, out + c, (float) acc[c]);
      store_f32 (partial, out + d, (float) m); /* -inf for an empty split */
      store_f32 (partial, out + d + 1, (float) l);
    }
  return AMK_ABORT_CODE_NONE;
}

/* out[h] = the n_splits partials of head h merged, for heads first .. first+count. */
static void
merge_heads (gint32 d, gint32 n_splits, AmkCpuBuffer *out, AmkCpuBuffer *partial, gint32 first,
             gint32 count)
{
  for (gint32 h = first; h < first + count; h++)
    {
      const guint64 base = (guint64) h * n_splits * (d + 2);
      double big_m = -INFINITY, den = 0.0;

      for (gint32 s = 0; s < n_splits; s++)
        big_m = MAX (big_m, (double) load_f32 (partial, base + (guint64) s * (d + 2) + d));
      for (gint32 s = 0; s < n_splits; s++)
        {
          const double m = load_f32 (partial, base + (guint64) s * (d + 2) + d);
          if (m != -INFINITY)
            den += exp (m - big_m) * load_f32 (partial, base + (guint64) s * (d + 2) + d + 1);
        }
      for (gint32 c = 0; c < d; c++)
        {
          double num = 0.0;
          for (gint32 s = 0; s < n_splits; s++)
            {
              const double m = load_f32 (partial, base + (guint64) s * (d + 2) + d);
              if (m != -INFINITY)
                num += exp (m - big_m) * load_f32 (partial, base + (guint64) s * (d + 2) + c);
            }
          store_f32 (out, (guint64) h * d + c, (float) (num / den));
        }
    }
}

/* ATTN_REDUCE: the i2 splits of heads i3 .. i3+i4 merged. */
static AmkAbortCode
op_attn_reduce (const amk_instruction_t *ins, AmkCpuBuffer *b)
{
  const amk_params_t *p = &ins->params;

  merge_heads (p->i[0], p->i[2], &b[ins->buffers[0]], &b[ins->buffers[1]], p->i[3], p->i[4]);
  return AMK_ABORT_CODE_NONE;
}

AmkAbortCode
amk_cpu_attention_op (const amk_instruction_t *ins,
                      AmkCpuBuffer            *buffers,
                      guint32                 *counters,
                      gint                    *detail)
{
  const gint32 group = ins->params.i[1] / MAX (ins->params.i[2], 1); /* query heads per kv head */
  AmkAbortCode code;

  switch (ins->opcode)
    {
    case AMK_ABI_OP_ROPE_KV:
      return op_rope_kv (ins, buffers, detail);
    case AMK_ABI_OP_ATTN_DECODE:
      code = op_attn_decode (ins, buffers, detail);
      /* the fused merge: the last split of the key/value head to arrive merges its heads */
      if (code == AMK_ABORT_CODE_NONE && ins->n_buffers >= 6 &&
          ++counters[ins->params.i[8]] == (guint32) ins->params.i[6])
        merge_heads (ins->params.i[0], ins->params.i[6], &buffers[ins->buffers[5]], &buffers[ins->buffers[0]],
                     ins->params.i[4] * group, group);
      return code;
    case AMK_ABI_OP_ATTN_REDUCE:
      return op_attn_reduce (ins, buffers);
    default:
      *detail = ins->opcode;
      return AMK_ABORT_CODE_BAD_OPCODE;
    }
}
