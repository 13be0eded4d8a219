/* ops-vector.cuh: the vector ops of the megakernel (see amk-abi.h for their contract):
 *
 *   RMSNORM         out[v n + c] = x[v n + c] / sqrt(mean_c x[v n + c]^2 + eps) * w[c]
 *   SILU_MUL        out[k] = silu(gate[k]) * up[k]
 *   EMBED           out[c] = table[t, c] for the token t = tokens[token_index] read on the device
 *   ARGMAX_PARTIAL  val, idx = the largest element of a tile and its index
 *   ARGMAX_FINAL    out = idx[j] of the largest val[j]
 *
 * fp32 arithmetic, round-to-nearest-even stores; same semantics as the CPU reference
 * (amk-glib/amk-cpu-ops-vector.c).
 *
 * Two halves, like the utility ops:
 *   amk_vector_check(): every thread, before the waits: parameters, dtypes, ranges
 *     (64-bit), alignment and aliasing (the rules of amk-glib/amk-verifier-vector.c);
 *     resolves the operands into an amk_op_ctx. A failure is CHECK with the offending
 *     buffer's index (the output's for aliasing).
 *   amk_vector_exec(): every thread of the block after the waits, also the warps whose
 *     wait failed (run == false): they skip the work but join the block barriers that
 *     RMSNORM (one vector per block), EMBED (the token verdict) and ARGMAX (the block
 *     reduction) have. Its return value is the same in every thread.
 *
 * Work split:
 *  - RMSNORM: a warp per vector (warp w takes vectors w, w + nw, ...) when there are at
 *    least as many vectors as warps or the vectors are short (<= AMK_VEC_WARP_NORM
 *    elements, e.g. Qwen3's heads of 128): the sum of squares is a shuffle reduction, no
 *    barrier. Otherwise (one or a few long vectors, e.g. the hidden state) the whole block
 *    takes one vector after the other with a shared-memory reduction (one barrier per
 *    vector, partial sums double-buffered). Each element is read, normalised and
 *    written by the same thread after the reduction, so out may be x itself.
 *  - SILU_MUL, EMBED: elementwise over the block.
 *  - ARGMAX: every thread scans its elements in increasing index order with a 32-bit
 *    order key (NaN lowest, +0 == -0), keeps the first maximum; warp shuffles and one
 *    shared-memory step reduce (key, ~index) pairs as 64-bit maxima, so ties go to the
 *    lowest index whatever the order of the reduction.
 *
 * 16-byte loads and stores where the operands are 16-byte aligned (8 elements per chunk,
 * two float4 for F32), one element at a time otherwise. Loads of operands that another
 * block may have written are ordinary coherent loads after the warp's acquire, never .nc.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_VECTOR_CUH
#define AMK_OPS_VECTOR_CUH

#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "amk-abi.h"
#include "ops-utility.cuh"
#include "quant-blocks.cuh"

#define AMK_VEC_MASK_VEC   ((1u << AMK_ABI_DTYPE_F32) | (1u << AMK_ABI_DTYPE_BF16))
#define AMK_VEC_MASK_TABLE (AMK_VEC_MASK_VEC | (1u << AMK_ABI_DTYPE_F16))
#define AMK_VEC_MASK_F32   (1u << AMK_ABI_DTYPE_F32)
#define AMK_VEC_MASK_I32   (1u << AMK_ABI_DTYPE_I32)
#define AMK_VEC_WARP_NORM  512u /* RMSNORM: vectors up to this length get one warp each */

/* amk_op_ctx for the vector ops:
 *   RMSNORM:  ptr = out + v0 n, x + v0 n, w; count = vectors; esize = n;
 *             dtype = out | x << 4 | w << 8; pattern = eps as bits
 *   SILU_MUL: ptr = out, gate, up (at offset); count; dtype = out | gate << 4 | up << 8
 *   EMBED:    ptr = out + col0 (of the first row), table + col0, tokens + token_index;
 *             count = n_cols; esize = dim (row length); pattern = tokens (rows);
 *             dtype = out | table << 4 | tokens << 8 (the
 *             vocabulary is the table's size over dim, taken from the buffer table once
 *             the token is known)
 *   ARGMAX_PARTIAL: ptr = val + slot, idx + slot, x + offset; count; dtype = x;
 *                   pattern = offset - index_base (the index of x[offset])
 *   ARGMAX_FINAL:   ptr = out + out_index, val + first, idx + first; count = n_partials;
 *                   dtype = F32; pattern = 0 */

static __device__ __forceinline__ uint32_t
amk_vec_dt (uint32_t packed, int slot)
{
  return (packed >> (4 * slot)) & 0xfu;
}

/* ---- check ------------------------------------------------------------------------- */

/* The parameters of the op are sane. */
static __device__ __forceinline__ bool
amk_vec_params_ok (const amk_instruction_t *ins)
{
  const amk_params_t &p = ins->params;

  switch (ins->opcode)
    {
    case AMK_ABI_OP_RMSNORM:
      return p.rmsnorm.n >= 1 && p.rmsnorm.vec0 >= 0 && p.rmsnorm.n_vecs >= 0 &&
             p.rmsnorm.eps >= 0.0f && isfinite (p.rmsnorm.eps);
    case AMK_ABI_OP_SILU_MUL:
      return p.silu_mul.offset >= 0 && p.silu_mul.count >= 0;
    case AMK_ABI_OP_EMBED:
      return p.embed.token_index >= 0 && p.embed.col0 >= 0 && p.embed.n_cols >= 0 &&
             p.embed.dim >= 1 && (int64_t) p.embed.col0 + p.embed.n_cols <= p.embed.dim &&
             p.embed.n_tokens >= 0;
    case AMK_ABI_OP_ARGMAX_PARTIAL: /* every index offset + i fits an int32 */
      return p.argmax_partial.offset >= 0 && p.argmax_partial.count >= 1 &&
             p.argmax_partial.slot >= 0 && p.argmax_partial.index_base >= 0 &&
             p.argmax_partial.index_base <= p.argmax_partial.offset &&
             (int64_t) p.argmax_partial.offset + p.argmax_partial.count <= 0x80000000ll;
    default: /* ARGMAX_FINAL */
      return p.argmax_final.n_partials >= 1 && p.argmax_final.out_index >= 0 &&
             p.argmax_final.first >= 0;
    }
}

/* Operand `slot` of the op: its first element, its element count and the dtypes it may
 * have (a bit per AMK_ABI_DTYPE_*). EMBED's table: one row (the row is known later). */
static __device__ __forceinline__ void
amk_vec_operand (const amk_instruction_t *ins, int slot, uint64_t &off, uint64_t &cnt,
                 uint32_t &mask)
{
  const amk_params_t &p = ins->params;

  mask = AMK_VEC_MASK_VEC;
  switch (ins->opcode)
    {
    case AMK_ABI_OP_RMSNORM:
      off = slot == 2 ? 0 : (uint64_t) p.rmsnorm.vec0 * (uint32_t) p.rmsnorm.n;
      cnt = slot == 2 ? (uint64_t) p.rmsnorm.n : (uint64_t) p.rmsnorm.n_vecs * (uint32_t) p.rmsnorm.n;
      break;
    case AMK_ABI_OP_SILU_MUL:
      off = (uint64_t) p.silu_mul.offset;
      cnt = (uint64_t) p.silu_mul.count;
      break;
    case AMK_ABI_OP_EMBED:
      {
        /* n_tokens > 0: rows token_index .. of out, one per token */
        const uint64_t rows = p.embed.n_tokens > 0 ? (uint64_t) p.embed.n_tokens : 1;
        const uint64_t row0 = p.embed.n_tokens > 0 ? (uint64_t) p.embed.token_index : 0;
        off = slot == 0 ? row0 * (uint32_t) p.embed.dim + (uint64_t) p.embed.col0
                        : slot == 1 ? 0 : (uint64_t) p.embed.token_index;
        cnt = slot == 0 ? (rows - 1) * (uint32_t) p.embed.dim + (uint64_t) p.embed.n_cols
                        : slot == 1 ? (uint64_t) p.embed.dim : rows;
      }
      mask = slot == 0 ? AMK_VEC_MASK_VEC : slot == 1 ? AMK_VEC_MASK_TABLE : AMK_VEC_MASK_I32;
      break;
    case AMK_ABI_OP_ARGMAX_PARTIAL:
      off = slot == 2 ? (uint64_t) p.argmax_partial.offset : (uint64_t) p.argmax_partial.slot;
      cnt = slot == 2 ? (uint64_t) p.argmax_partial.count : 1;
      mask = slot == 0 ? AMK_VEC_MASK_F32 : slot == 1 ? AMK_VEC_MASK_I32 : AMK_VEC_MASK_VEC;
      break;
    default: /* ARGMAX_FINAL */
      off = slot == 0 ? (uint64_t) p.argmax_final.out_index : (uint64_t) p.argmax_final.first;
      cnt = slot == 0 ? 1 : (uint64_t) p.argmax_final.n_partials;
      mask = slot == 1 ? AMK_VEC_MASK_F32 : AMK_VEC_MASK_I32;
      break;
    }
}

/* [a, a + na) and [b, b + nb) share a byte. */
static __device__ __forceinline__ bool
amk_vec_overlap (uint64_t a, uint64_t na, uint64_t b, uint64_t nb)
{
  return na != 0 && nb != 0 && a < b + nb && b < a + na;
}

/* Validates the instruction and resolves it into ctx. Written as one unrolled loop over
 * the three slots, with shifts instead of 64-bit divisions: a first version with three
 * hand-written resolutions per op pushed the kernel (at its 128-register cap since
 * MATVEC) into spills, in the scheduler's check region, and so did moving the checks out
 * of line or after the waits. Keep it this small.
 *
 *   ptr[s] = buffer s at the operand's first element; dtype = dtype of slot s at bits
 *   4 s; count, esize, pattern: see the op's exec. A failure is CHECK (BAD_INDEX for a
 *   buffer index) with the offending buffer's index in *detail. */
static __device__ __forceinline__ int
amk_vec_prepare (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                 amk_op_ctx *ctx, int32_t *detail)
{
  const uint32_t op = ins->opcode;
  uint64_t a[3], len[3];
  uint32_t packed = 0;

  *detail = ins->buffers[1];
  if (!amk_vec_params_ok (ins))
    return AMK_ABORT_CHECK;
#pragma unroll
  for (int s = 0; s < 3; s++)
    {
      uint64_t off, cnt;
      uint32_t mask;
      const int32_t ref = ins->buffers[s];

      amk_vec_operand (ins, s, off, cnt, mask);
      *detail = ref;
      if (ref < 0 || ref >= n_buffers)
        return AMK_ABORT_BAD_INDEX;
      const amk_buffer_t *b = buffers + ref;
      const uint32_t dt = b->dtype;
      const uint32_t es = amk_dtype_size (dt);
      if (op == AMK_ABI_OP_EMBED && s == 1 && amk_qb_is_block (dt))
        {
          /* a block-quantized table: rows of whole blocks, decoded by amk_embed_exec */
          if ((uint32_t) ins->params.embed.dim % amk_qb_values (dt) != 0 ||
              b->size_bytes < (uint64_t) ((uint32_t) ins->params.embed.dim / amk_qb_values (dt)) * amk_qb_bytes (dt))
            return AMK_ABORT_CHECK;
          a[s] = b->addr;
          len[s] = b->size_bytes;
          packed |= dt << (4 * s);
          continue;
        }
      /* off, cnt < 2^62: no sum wraps; es is 1, 2 or 4: shifts, no 64-bit division */
      if (es == 0 || ((mask >> dt) & 1u) == 0 || off + cnt > (b->size_bytes >> (es >> 1)) ||
          (b->addr & (es - 1)) != 0)
        return AMK_ABORT_CHECK;
      a[s] = b->addr + off * es;
      len[s] = cnt * es;
      if (op == AMK_ABI_OP_EMBED && s == 1) /* the output stays clear of the whole table */
        {
          len[s] = b->size_bytes;
          a[s] = b->addr;
        }
      packed |= dt << (4 * s);
    }

  /* aliasing: out (slot 0) shares no byte with an input, except RMSNORM's x (slot 1)
   * when it is the very same elements; ARGMAX_PARTIAL's second output (slot 1) neither */
  *detail = ins->buffers[0];
  if (amk_vec_overlap (a[0], len[0], a[1], len[1]) &&
      !(op == AMK_ABI_OP_RMSNORM && a[0] == a[1] && amk_vec_dt (packed, 0) == amk_vec_dt (packed, 1)))
    return AMK_ABORT_CHECK;
  if (amk_vec_overlap (a[0], len[0], a[2], len[2]))
    return AMK_ABORT_CHECK;
  *detail = ins->buffers[1];
  if (op == AMK_ABI_OP_ARGMAX_PARTIAL && amk_vec_overlap (a[1], len[1], a[2], len[2]))
    return AMK_ABORT_CHECK;

  const amk_params_t &p = ins->params;
  ctx->ptr[0] = reinterpret_cast<unsigned char *> (a[0]);
  ctx->ptr[1] = reinterpret_cast<unsigned char *> (a[1]);
  ctx->ptr[2] = reinterpret_cast<unsigned char *> (a[2]);
  ctx->dtype = packed;
  ctx->pattern = 0;
  ctx->esize = 0;
  switch (op)
    {
    case AMK_ABI_OP_RMSNORM:
      ctx->count = (uint32_t) p.rmsnorm.n_vecs;
      ctx->esize = (uint32_t) p.rmsnorm.n;
      ctx->pattern = __float_as_uint (p.rmsnorm.eps);
      break;
    case AMK_ABI_OP_SILU_MUL:
      ctx->count = (uint32_t) p.silu_mul.count;
      break;
    case AMK_ABI_OP_EMBED:
      /* a block-quantized table stays at its start (amk_dtype_size 0): the exec decodes
       * from column col0 */
      ctx->ptr[1] += (uint64_t) p.embed.col0 * amk_dtype_size (amk_vec_dt (packed, 1));
      ctx->count = (uint32_t) p.embed.n_cols;
      ctx->esize = (uint32_t) p.embed.dim;
      ctx->pattern = (uint32_t) max (p.embed.n_tokens, 1);
      break;
    case AMK_ABI_OP_ARGMAX_PARTIAL:
      ctx->count = (uint32_t) p.argmax_partial.count;
      ctx->dtype = amk_vec_dt (packed, 2);
      /* the first element's index: within its row (index_base <= offset, checked) */
      ctx->pattern = (uint32_t) (p.argmax_partial.offset - p.argmax_partial.index_base);
      break;
    default:
      ctx->count = (uint32_t) p.argmax_final.n_partials;
      ctx->dtype = AMK_ABI_DTYPE_F32;
      break;
    }
  return AMK_ABORT_NONE;
}

/* Every thread, before the waits. */
static __device__ __forceinline__ int
amk_vector_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                  amk_op_ctx *ctx, int32_t *detail)
{
  return amk_vec_prepare (ins, buffers, n_buffers, ctx, detail);
}

/* ---- elements ---------------------------------------------------------------------- */

/* Element i of an F32, BF16 or F16 buffer, as fp32 (exact). */
static __device__ __forceinline__ float
amk_vec_ld (const unsigned char *p, uint32_t dt, uint32_t i)
{
  if (dt == AMK_ABI_DTYPE_F32)
    return reinterpret_cast<const float *> (p)[i];
  const uint32_t h = reinterpret_cast<const uint16_t *> (p)[i];
  if (dt == AMK_ABI_DTYPE_BF16)
    return __uint_as_float (h << 16);
  return __half2float (__ushort_as_half ((unsigned short) h));
}

/* Stores v into element i of an F32 or BF16 buffer, rounded to nearest even. */
static __device__ __forceinline__ void
amk_vec_st (unsigned char *p, uint32_t dt, uint32_t i, float v)
{
  if (dt == AMK_ABI_DTYPE_F32)
    reinterpret_cast<float *> (p)[i] = v;
  else
    reinterpret_cast<unsigned short *> (p)[i] = __bfloat16_as_ushort (__float2bfloat16_rn (v));
}

/* The two 16-bit elements of a word, as fp32. */
static __device__ __forceinline__ void
amk_vec_unpack2 (uint32_t u, uint32_t dt, float &lo, float &hi)
{
  if (dt == AMK_ABI_DTYPE_BF16)
    {
      lo = __uint_as_float (u << 16);
      hi = __uint_as_float (u & 0xffff0000u);
    }
  else
    {
      lo = __half2float (__ushort_as_half ((unsigned short) (u & 0xffffu)));
      hi = __half2float (__ushort_as_half ((unsigned short) (u >> 16)));
    }
}

/* Elements 8 c .. 8 c + 7 of an F32, BF16 or F16 buffer whose base is 16-byte aligned. */
static __device__ __forceinline__ void
amk_vec_ld8 (const unsigned char *p, uint32_t dt, uint32_t c, float (&v)[8])
{
  if (dt == AMK_ABI_DTYPE_F32)
    {
      const float4 a = reinterpret_cast<const float4 *> (p)[2 * c];
      const float4 b = reinterpret_cast<const float4 *> (p)[2 * c + 1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
      v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
  else
    {
      const uint4 a = reinterpret_cast<const uint4 *> (p)[c];
      amk_vec_unpack2 (a.x, dt, v[0], v[1]);
      amk_vec_unpack2 (a.y, dt, v[2], v[3]);
      amk_vec_unpack2 (a.z, dt, v[4], v[5]);
      amk_vec_unpack2 (a.w, dt, v[6], v[7]);
    }
}

static __device__ __forceinline__ uint32_t
amk_vec_pack_bf16 (float lo, float hi)
{
  return (uint32_t) __bfloat16_as_ushort (__float2bfloat16_rn (lo)) |
         ((uint32_t) __bfloat16_as_ushort (__float2bfloat16_rn (hi)) << 16);
}

/* Stores 8 c .. 8 c + 7 of an F32 or BF16 buffer whose base is 16-byte aligned. */
static __device__ __forceinline__ void
amk_vec_st8 (unsigned char *p, uint32_t dt, uint32_t c, const float (&v)[8])
{
  if (dt == AMK_ABI_DTYPE_F32)
    {
      reinterpret_cast<float4 *> (p)[2 * c] = make_float4 (v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4 *> (p)[2 * c + 1] = make_float4 (v[4], v[5], v[6], v[7]);
    }
  else
    reinterpret_cast<uint4 *> (p)[c] = make_uint4 (amk_vec_pack_bf16 (v[0], v[1]), amk_vec_pack_bf16 (v[2], v[3]),
                                                   amk_vec_pack_bf16 (v[4], v[5]), amk_vec_pack_bf16 (v[6], v[7]));
}

static __device__ __forceinline__ bool
amk_vec_aligned16 (const void *a, const void *b, const void *c)
{
  return ((reinterpret_cast<uintptr_t> (a) | reinterpret_cast<uintptr_t> (b) |
           reinterpret_cast<uintptr_t> (c)) & 15) == 0;
}

static __device__ __forceinline__ float
amk_vec_warp_sum (float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  return v;
}

/* ---- RMSNORM ----------------------------------------------------------------------- */

/* Participant `me` of `np`: its share of the sum of squares of x[0 .. n). */
static __device__ __forceinline__ float
amk_rms_sumsq (const unsigned char *x, uint32_t xdt, uint32_t n, bool vec8, uint32_t me, uint32_t np)
{
  float ss = 0.0f;

  if (vec8)
    for (uint32_t c = me; c < n / 8; c += np)
      {
        float v[8];
        amk_vec_ld8 (x, xdt, c, v);
#pragma unroll
        for (int e = 0; e < 8; e++)
          ss = fmaf (v[e], v[e], ss);
      }
  else
    for (uint32_t c = me; c < n; c += np)
      {
        const float v = amk_vec_ld (x, xdt, c);
        ss = fmaf (v, v, ss);
      }
  return ss;
}

/* Participant `me` of `np`: out = x * scale * w over its elements (the same ones
 * amk_rms_sumsq read, each read before it is written: out may be x). */
static __device__ __forceinline__ void
amk_rms_apply (unsigned char *out, const unsigned char *x, const unsigned char *w,
               uint32_t packed, uint32_t n, float scale, bool vec8, uint32_t me, uint32_t np)
{
  const uint32_t odt = amk_vec_dt (packed, 0), xdt = amk_vec_dt (packed, 1), wdt = amk_vec_dt (packed, 2);

  if (vec8)
    for (uint32_t c = me; c < n / 8; c += np)
      {
        float v[8], g[8];
        amk_vec_ld8 (x, xdt, c, v);
        amk_vec_ld8 (w, wdt, c, g);
#pragma unroll
        for (int e = 0; e < 8; e++)
          v[e] = v[e] * scale * g[e];
        amk_vec_st8 (out, odt, c, v);
      }
  else
    for (uint32_t c = me; c < n; c += np)
      amk_vec_st (out, odt, c, amk_vec_ld (x, xdt, c) * scale * amk_vec_ld (w, wdt, c));
}

static __device__ __forceinline__ void
amk_rmsnorm_exec (const amk_op_ctx *ctx, bool run, int tid, int nt)
{
  __shared__ float s_rms[2][32]; /* per warp partial sums, double-buffered by vector */
  const uint32_t packed = ctx->dtype;
  const uint32_t n = ctx->esize, nv = ctx->count;
  const uint32_t oes = amk_dtype_size (amk_vec_dt (packed, 0));
  const uint32_t xes = amk_dtype_size (amk_vec_dt (packed, 1));
  const uint32_t xdt = amk_vec_dt (packed, 1);
  const float eps = __uint_as_float (ctx->pattern);
  const uint32_t nw = (uint32_t) nt >> 5, warp = (uint32_t) tid >> 5, lane = (uint32_t) tid & 31;
  unsigned char *out = ctx->ptr[0];
  const unsigned char *x = ctx->ptr[1], *w = ctx->ptr[2];

  if (nv >= nw || n <= AMK_VEC_WARP_NORM)
    {
      /* a warp per vector: no barrier */
      if (!run)
        return;
      for (uint32_t v = warp; v < nv; v += nw)
        {
          unsigned char *o = out + (uint64_t) v * n * oes;
          const unsigned char *xv = x + (uint64_t) v * n * xes;
          const bool vec8 = n % 8 == 0 && amk_vec_aligned16 (o, xv, w);
          const float ss = amk_vec_warp_sum (amk_rms_sumsq (xv, xdt, n, vec8, lane, 32));
          const float scale = rsqrtf (ss * __frcp_rn ((float) n) + eps);
          amk_rms_apply (o, xv, w, packed, n, scale, vec8, lane, 32);
        }
      return;
    }

  /* the block per vector: every thread joins every barrier */
  for (uint32_t v = 0; v < nv; v++)
    {
      unsigned char *o = out + (uint64_t) v * n * oes;
      const unsigned char *xv = x + (uint64_t) v * n * xes;
      const bool vec8 = n % 8 == 0 && amk_vec_aligned16 (o, xv, w);
      float ss = run ? amk_rms_sumsq (xv, xdt, n, vec8, (uint32_t) tid, (uint32_t) nt) : 0.0f;
      ss = amk_vec_warp_sum (ss);
      if (lane == 0)
        s_rms[v & 1][warp] = ss;
      amk_sync ();
      float total = 0.0f;
      for (uint32_t k = 0; k < nw; k++)
        total += s_rms[v & 1][k];
      const float scale = rsqrtf (total * __frcp_rn ((float) n) + eps);
      if (run)
        amk_rms_apply (o, xv, w, packed, n, scale, vec8, (uint32_t) tid, (uint32_t) nt);
    }
}

/* ---- SILU_MUL ---------------------------------------------------------------------- */

static __device__ __forceinline__ float
amk_silu_mul (float g, float u)
{
  return __fdividef (g, 1.0f + expf (-g)) * u;
}

static __device__ __forceinline__ void
amk_silu_mul_run (const amk_op_ctx *ctx, int tid, int nt)
{
  const uint32_t packed = ctx->dtype, n = ctx->count;
  const uint32_t odt = amk_vec_dt (packed, 0), gdt = amk_vec_dt (packed, 1), udt = amk_vec_dt (packed, 2);
  unsigned char *out = ctx->ptr[0];
  const unsigned char *gate = ctx->ptr[1], *up = ctx->ptr[2];
  uint32_t t0 = 0;

  if (amk_vec_aligned16 (out, gate, up))
    {
      const uint32_t chunks = n / 8;
#pragma unroll 2
      for (uint32_t c = (uint32_t) tid; c < chunks; c += (uint32_t) nt)
        {
          float g[8], u[8];
          amk_vec_ld8 (gate, gdt, c, g);
          amk_vec_ld8 (up, udt, c, u);
#pragma unroll
          for (int e = 0; e < 8; e++)
            g[e] = amk_silu_mul (g[e], u[e]);
          amk_vec_st8 (out, odt, c, g);
        }
      t0 = chunks * 8;
    }
  for (uint32_t k = t0 + (uint32_t) tid; k < n; k += (uint32_t) nt)
    amk_vec_st (out, odt, k, amk_silu_mul (amk_vec_ld (gate, gdt, k), amk_vec_ld (up, udt, k)));
}

/* ---- EMBED ------------------------------------------------------------------------- */

static __device__ __forceinline__ int
amk_embed_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_device_program &prog,
                bool run, int tid, int nt, int32_t *detail)
{
  const uint32_t odt = amk_vec_dt (ctx->dtype, 0), tdt = amk_vec_dt (ctx->dtype, 1);
  const uint32_t n = ctx->count, n_tokens = ctx->pattern;
  const int32_t *tokens = reinterpret_cast<const int32_t *> (ctx->ptr[2]);
  int bad = 0;

  /* Only the warps that passed their waits may read the tokens; the barrier hands their
   * verdict to every thread. t < vocab = table elements / row, without a 64-bit
   * division. */
  if (run)
    {
      const amk_buffer_t *table = prog.buffers + ins->buffers[1];
      const uint64_t n_table = amk_qb_is_block (tdt)
                               ? table->size_bytes / amk_qb_bytes (tdt) * amk_qb_values (tdt)
                               : table->size_bytes >> (amk_dtype_size (tdt) >> 1);
      for (uint32_t j = (uint32_t) tid; j < n_tokens; j += (uint32_t) nt)
        {
          const int32_t t = tokens[j];
          bad |= t < 0 || ((uint64_t) t + 1) * ctx->esize > n_table;
        }
    }
  if (amk_sync_or (bad))
    {
      *detail = ins->buffers[2];
      return AMK_ABORT_CHECK;
    }
  if (!run)
    return AMK_ABORT_NONE;

  const uint32_t tes = amk_dtype_size (tdt), oes = amk_dtype_size (odt);
  if (amk_qb_is_block (tdt))
    {
      /* the parts of 8 values that hold columns col0 .. col0 + n, decoded; each thread
       * stores the columns of its parts */
      const uint32_t col0 = (uint32_t) ins->params.embed.col0;
      const uint64_t rowb = (uint64_t) (ctx->esize / amk_qb_values (tdt)) * amk_qb_bytes (tdt);
      const uint32_t p0 = col0 / 8, p1 = (col0 + n + 7) / 8;
      for (uint32_t j = 0; j < n_tokens; j++)
        {
          const unsigned char *row = ctx->ptr[1] + (uint64_t) (uint32_t) tokens[j] * rowb;
          unsigned char *out = ctx->ptr[0] + (uint64_t) j * ctx->esize * oes;
          for (uint32_t pi = p0 + (uint32_t) tid; pi < p1; pi += (uint32_t) nt)
            {
              float v[8];
              amk_qb_row8 (tdt, row, pi, v);
#pragma unroll
              for (uint32_t i = 0; i < 8; i++)
                if (pi * 8 + i >= col0 && pi * 8 + i < col0 + n)
                  amk_vec_st (out, odt, pi * 8 + i - col0, v[i]);
            }
        }
      return AMK_ABORT_NONE;
    }
  for (uint32_t j = 0; j < n_tokens; j++)
    {
      const int32_t t = tokens[j];
      const unsigned char *src = ctx->ptr[1] + (uint64_t) (uint32_t) t * ctx->esize * tes;
      unsigned char *out = ctx->ptr[0] + (uint64_t) j * ctx->esize * oes;

      if (odt == tdt)
        {
          /* the same dtype: the bits, as COPY moves them */
          if (tes == 4)
            amk_copy_run<4> (out, src, n, tid, nt);
          else
            amk_copy_run<2> (out, src, n, tid, nt);
          continue;
        }
      uint32_t t0 = 0;
      if (amk_vec_aligned16 (out, src, out))
        {
          const uint32_t chunks = n / 8;
          for (uint32_t c = (uint32_t) tid; c < chunks; c += (uint32_t) nt)
            {
              float v[8];
              amk_vec_ld8 (src, tdt, c, v);
              amk_vec_st8 (out, odt, c, v);
            }
          t0 = chunks * 8;
        }
      for (uint32_t k = t0 + (uint32_t) tid; k < n; k += (uint32_t) nt)
        amk_vec_st (out, odt, k, amk_vec_ld (src, tdt, k));
    }
  return AMK_ABORT_NONE;
}

/* ---- ARGMAX ------------------------------------------------------------------------ */

/* An order key of an fp32 value given as bits: larger key = larger value; every NaN is
 * 1 (below -inf), +0 and -0 are equal. 0 is left for "no element". */
static __device__ __forceinline__ uint32_t
amk_argmax_key (uint32_t bits)
{
  const uint32_t mag = bits & 0x7fffffffu;
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return mag > 0x7f800000u ? 1u : mag == 0 ? 0x80000000u : ordered;
}

/* One element in a thread's increasing index order: strictly larger keys only, so the
 * thread keeps its first maximum. */
static __device__ __forceinline__ void
amk_argmax_take (uint32_t bits, uint32_t index, uint32_t &best_key, uint32_t &best_index)
{
  const uint32_t k = amk_argmax_key (bits);
  if (k > best_key)
    {
      best_key = k;
      best_index = index;
    }
}

/* The fp32 bits of the elements of a 16-byte word: 4 F32 or 8 BF16. */
template <uint32_t DT>
static __device__ __forceinline__ void
amk_argmax_word (uint4 w, uint32_t first, uint32_t &bk, uint32_t &bi)
{
  if (DT == AMK_ABI_DTYPE_F32)
    {
      amk_argmax_take (w.x, first, bk, bi);
      amk_argmax_take (w.y, first + 1, bk, bi);
      amk_argmax_take (w.z, first + 2, bk, bi);
      amk_argmax_take (w.w, first + 3, bk, bi);
    }
  else
    {
      const uint32_t u[4] = { w.x, w.y, w.z, w.w };
#pragma unroll
      for (int e = 0; e < 4; e++)
        {
          amk_argmax_take (u[e] << 16, first + 2 * e, bk, bi);
          amk_argmax_take (u[e] & 0xffff0000u, first + 2 * e + 1, bk, bi);
        }
    }
}

template <uint32_t DT>
static __device__ __forceinline__ uint32_t
amk_argmax_bits (const unsigned char *p, uint32_t k)
{
  if (DT == AMK_ABI_DTYPE_F32)
    return reinterpret_cast<const uint32_t *> (p)[k];
  return (uint32_t) reinterpret_cast<const uint16_t *> (p)[k] << 16;
}

/* This thread's (key, index) over elements 0 .. n of p (global index base + k): a
 * scalar head up to the first 16-byte boundary, 16-byte words (2 loads in flight per
 * thread: 4 pushed the kernel into spills next to the attention ops), a scalar tail. */
template <uint32_t DT>
static __device__ __forceinline__ void
amk_argmax_scan (const unsigned char *p, uint32_t n, uint32_t base, int tid, int nt,
                 uint32_t &bk, uint32_t &bi)
{
  constexpr uint32_t ES = DT == AMK_ABI_DTYPE_F32 ? 4 : 2;
  constexpr uint32_t PER = 16 / ES;
  const uint32_t unt = (uint32_t) nt;
  const uint32_t head = min ((uint32_t) (((16 - (reinterpret_cast<uintptr_t> (p) & 15)) & 15) / ES), n);

  if ((uint32_t) tid < head)
    amk_argmax_take (amk_argmax_bits<DT> (p, tid), base + tid, bk, bi);

  const uint32_t body = (n - head) / PER;
  const uint4 *p4 = reinterpret_cast<const uint4 *> (p + head * ES);
  const uint32_t b0 = base + head;
  uint32_t c = (uint32_t) tid;
  for (; c + unt < body; c += 2u * unt)
    {
      const uint4 w0 = p4[c];
      const uint4 w1 = p4[c + unt];
      amk_argmax_word<DT> (w0, b0 + c * PER, bk, bi);
      amk_argmax_word<DT> (w1, b0 + (c + unt) * PER, bk, bi);
    }
  for (; c < body; c += unt)
    amk_argmax_word<DT> (p4[c], b0 + c * PER, bk, bi);

  for (uint32_t k = head + body * PER + (uint32_t) tid; k < n; k += unt)
    amk_argmax_take (amk_argmax_bits<DT> (p, k), base + k, bk, bi);
}

static __device__ __forceinline__ void
amk_argmax_exec (const amk_op_ctx *ctx, bool final_step, bool run, int tid, int nt)
{
  __shared__ unsigned long long s_best[32];
  const uint32_t n = ctx->count;
  const uint32_t base = ctx->pattern;
  const unsigned char *x = final_step ? ctx->ptr[1] : ctx->ptr[2];
  uint32_t bk = 0, bi = 0xffffffffu;

  if (run)
    {
      if (ctx->dtype == AMK_ABI_DTYPE_F32)
        amk_argmax_scan<AMK_ABI_DTYPE_F32> (x, n, base, tid, nt, bk, bi);
      else
        amk_argmax_scan<AMK_ABI_DTYPE_BF16> (x, n, base, tid, nt, bk, bi);
    }

  /* (key, ~index) as one 64-bit number: its maximum is the largest key at the lowest
   * index; 0 is "no element" */
  unsigned long long best = ((unsigned long long) bk << 32) | (uint32_t) ~bi;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    {
      const unsigned long long other = __shfl_xor_sync (0xffffffffu, best, o);
      best = other > best ? other : best;
    }
  if ((tid & 31) == 0)
    s_best[tid >> 5] = best;
  amk_sync ();
  if (tid != 0 || !run)
    return;
  for (int k = 1; k < (nt >> 5); k++)
    best = s_best[k] > best ? s_best[k] : best;
  if (best == 0)
    return; /* only when another warp skipped its work: the block is aborting */

  const uint32_t j = ~(uint32_t) best; /* the global index */
  if (final_step)
    *reinterpret_cast<int32_t *> (ctx->ptr[0]) = reinterpret_cast<const int32_t *> (ctx->ptr[2])[j];
  else
    {
      /* the value itself, as the CPU stores it (NaN payload and the sign of zero kept) */
      *reinterpret_cast<float *> (ctx->ptr[0]) = amk_vec_ld (x, ctx->dtype, j - base);
      *reinterpret_cast<int32_t *> (ctx->ptr[1]) = (int32_t) j;
    }
}

/* ---- exec -------------------------------------------------------------------------- */

/* Every thread of the block (run: this thread's warp passed its waits). Returns
 * AMK_ABORT_NONE, or a code with *detail, the same in every thread. */
static __device__ __forceinline__ int
amk_vector_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_device_program &prog,
                 bool run, int tid, int nt, int32_t *detail)
{
  switch (ins->opcode)
    {
    case AMK_ABI_OP_RMSNORM:
      amk_rmsnorm_exec (ctx, run, tid, nt);
      return AMK_ABORT_NONE;
    case AMK_ABI_OP_SILU_MUL:
      if (run)
        amk_silu_mul_run (ctx, tid, nt);
      return AMK_ABORT_NONE;
    case AMK_ABI_OP_EMBED:
      return amk_embed_exec (ctx, ins, prog, run, tid, nt, detail);
    case AMK_ABI_OP_ARGMAX_PARTIAL:
      amk_argmax_exec (ctx, false, run, tid, nt);
      return AMK_ABORT_NONE;
    case AMK_ABI_OP_ARGMAX_FINAL:
      amk_argmax_exec (ctx, true, run, tid, nt);
      return AMK_ABORT_NONE;
    default:
      *detail = ins->opcode;
      return AMK_ABORT_BAD_OPCODE;
    }
}

#endif /* AMK_OPS_VECTOR_CUH */
