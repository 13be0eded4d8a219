/* ops-matvec-blocks.cuh: MATVEC over block-quantized W (Q8_0, Q5_0, Q5_1 and the K
 * types; quant-blocks.cuh), the same product and fusions as ops-matvec.cuh, which
 * includes this file before its exec and stages x' for it as plain fp32 (x'[i] at
 * float i of the tile's columns).
 *
 * Work split: warp w owns rows w, w + nw, ... of the tile, as for the 16-bit types, and
 * lane l takes the parts (8 values of a block) l, l + 32, ... of each piece of a row.
 *
 * RING: a row streams in stages of whole blocks, G = AMK_MVQ_STAGE_FILL / bytes of them
 * (blocks straddle 16-byte chunks: Q8_0's are 34 bytes). A stage copies the 16-byte
 * chunks that cover its blocks (from the chunk boundary below the first block's start),
 * so the copies stay aligned whatever a row's alignment; lanes read blocks that other
 * lanes copied, hence a __syncwarp after the wait (the copies visible to the warp) and
 * one before the refill (every lane done reading the slot).
 * DIRECT (no ring): each lane decodes its parts straight from global memory.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_MATVEC_BLOCKS_CUH
#define AMK_OPS_MATVEC_BLOCKS_CUH

#include "quant-blocks.cuh"

/* Block bytes a stage holds at most: its chunks then fit AMK_MV_STAGE_BYTES even when
 * the first block starts 15 bytes past a chunk boundary and the last ends 1 byte past
 * one. */
#define AMK_MVQ_STAGE_FILL (AMK_MV_STAGE_BYTES - 30u)

/* The warp's stream of stages over its rows of a block-quantized tile. */
struct amk_mvq_stream {
  const unsigned char *w; /* the warp's first row, from the tile's first column */
  uint64_t rowb;          /* bytes per row of W (the stride) */
  uint64_t step;          /* from one of the warp's rows to the next: nw rows */
  uint32_t nb;            /* blocks per row of the tile */
  uint32_t g;             /* blocks per full stage */
  uint32_t per_row;       /* stages per row */
  uint32_t n;             /* stages of the warp */
  uint32_t ring;          /* the warp's share of the ring: byte offset in amk_dyn_smem */
};

static __device__ __forceinline__ amk_mvq_stream
amk_mvq_stream_of (const amk_op_ctx *ctx, uint32_t dt, int tid, int nt)
{
  amk_mvq_stream st;
  const uint32_t w = (uint32_t) tid >> 5, nw = (uint32_t) nt >> 5, n = ctx->count;
  const uint32_t qb = amk_qb_bytes (dt), qv = amk_qb_values (dt);

  st.rowb = (uint64_t) (ctx->pattern / qv) * qb;
  st.step = (uint64_t) nw * st.rowb;
  st.w = ctx->ptr[1] + (uint64_t) w * st.rowb;
  st.nb = ctx->esize / qv;
  st.g = AMK_MVQ_STAGE_FILL / qb;
  st.per_row = (st.nb + st.g - 1) / st.g;
  st.n = (n > w ? (n - 1 - w) / nw + 1 : 0) * st.per_row;
  st.ring = w * AMK_MV_WARP_RING;
  return st;
}

/* Stage k of the warp: its first block's address and its block count. */
static __device__ __forceinline__ const unsigned char *
amk_mvq_stage_src (const amk_mvq_stream &st, uint32_t k, uint32_t qb, uint32_t *blocks)
{
  const uint32_t i = k / st.per_row, b0 = (k - i * st.per_row) * st.g;

  *blocks = min (st.g, st.nb - b0);
  return st.w + (uint64_t) i * st.step + (uint64_t) b0 * qb;
}

/* This lane's copies of stage k (when it exists) into slot `slot`, then the stage's
 * commit group (always: group k holds stage k). W streams marked evict-first in L2, as
 * for the 16-bit types. */
static __device__ __forceinline__ void
amk_mvq_copy_stage (const amk_mvq_stream &st, uint32_t k, uint32_t qb, uint32_t slot, uint32_t lane)
{
  if (k < st.n)
    {
      uint32_t nbs;
      const unsigned char *src = amk_mvq_stage_src (st, k, qb, &nbs);
      const uintptr_t a = reinterpret_cast<uintptr_t> (src) & ~(uintptr_t) 15;
      const uint32_t nc = (uint32_t) ((reinterpret_cast<uintptr_t> (src) + nbs * qb - a + 15) / 16);

      amk_mv_copy_chunks (amk_mv_ring_base () + st.ring + slot * AMK_MV_STAGE_BYTES + lane * 16u,
                          reinterpret_cast<const unsigned char *> (a) + lane * 16u, nc, lane);
    }
  asm volatile ("cp.async.commit_group;" : : : "memory");
}

/* The warp's first AMK_MV_STAGES stages (before the waits when W is CONSTANT). */
static __device__ __forceinline__ void
amk_mvq_prologue (const amk_op_ctx *ctx, int tid, int nt)
{
  const uint32_t dt = amk_mv_dt (ctx->dtype, 1), qb = amk_qb_bytes (dt);
  const amk_mvq_stream st = amk_mvq_stream_of (ctx, dt, tid, nt);

  if (st.n == 0)
    return;
#pragma unroll
  for (uint32_t k = 0; k < AMK_MV_STAGES; k++)
    amk_mvq_copy_stage (st, k, qb, k, (uint32_t) tid & 31);
}

template <uint32_t DT, bool SPLIT>
static __device__ __forceinline__ void
amk_mvq_run_ring (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                  int tid, int nt)
{
  constexpr uint32_t P = DT == AMK_ABI_DTYPE_Q4_K || DT == AMK_ABI_DTYPE_Q5_K || DT == AMK_ABI_DTYPE_Q6_K ? 32 : 4;
  const uint32_t qb = amk_qb_bytes (DT);
  const uint32_t lane = (uint32_t) tid & 31;
  const float *xs = reinterpret_cast<const float *> (amk_dyn_smem + (uint32_t) nt * AMK_MATVEC_RING_BYTES_PER_THREAD);
  const amk_mvq_stream st = amk_mvq_stream_of (ctx, DT, tid, nt);
  uint32_t b0 = 0, r = (uint32_t) tid >> 5;
  float acc = 0.0f;

  for (uint32_t k = 0; k < st.n; ++k)
    {
      asm volatile ("cp.async.wait_group %0;" : : "n"(AMK_MV_STAGES - 1) : "memory");
      __syncwarp (); /* every lane's copies of the stage visible to the warp */
      const uint32_t slot = k % AMK_MV_STAGES;
      uint32_t nbs;
      const unsigned char *src = amk_mvq_stage_src (st, k, qb, &nbs);
      const unsigned char *ws = amk_dyn_smem + st.ring + slot * AMK_MV_STAGE_BYTES +
                                (reinterpret_cast<uintptr_t> (src) & 15u);

      for (uint32_t it = lane; it < nbs * P; it += 32)
        {
          const uint32_t blk = it / P, part = it - blk * P;
          const float4 *xp = reinterpret_cast<const float4 *> (xs + (b0 + blk) * (P * 8) + part * 8);
          const float4 a = xp[0], b = xp[1];
          const float x[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
          acc = amk_qb_dot8<DT> (ws + blk * qb, part, x, acc);
        }
      __syncwarp (); /* every lane done with the slot */
      amk_mvq_copy_stage (st, k + AMK_MV_STAGES, qb, slot, lane);

      b0 += nbs;
      if (b0 == st.nb) /* the row's last stage */
        {
          amk_mv_end_row<SPLIT> (ctx, ins, buffers, r, acc, lane);
          acc = 0.0f;
          b0 = 0;
          r += (uint32_t) nt >> 5;
        }
    }
}

template <uint32_t DT, bool SPLIT>
static __device__ __forceinline__ void
amk_mvq_run_direct (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                    float scale, int tid, int nt)
{
  constexpr uint32_t P = DT == AMK_ABI_DTYPE_Q4_K || DT == AMK_ABI_DTYPE_Q5_K || DT == AMK_ABI_DTYPE_Q6_K ? 32 : 4;
  const uint32_t qb = amk_qb_bytes (DT);
  const uint32_t lane = (uint32_t) tid & 31;
  const uint32_t xdt = amk_mv_dt (ctx->dtype, 2), ndt = amk_mv_dt (ctx->dtype, 5);
  const uint32_t udt = amk_mv_dt (ctx->dtype, 6);
  const unsigned char *x = ctx->ptr[2];
  const unsigned char *nw = ndt != AMK_MV_ABSENT ? amk_mv_vector_at (ctx, ins, buffers, 5, ndt) : nullptr;
  const unsigned char *up = udt != AMK_MV_ABSENT ? amk_mv_vector_at (ctx, ins, buffers, 6, udt) : nullptr;
  const amk_mvq_stream st = amk_mvq_stream_of (ctx, DT, tid, nt);
  const uint32_t rows = st.n / max (st.per_row, 1u);

  for (uint32_t i = 0; i < rows; i++)
    {
      const unsigned char *row = st.w + (uint64_t) i * st.step;
      float acc = 0.0f;
      for (uint32_t it = lane; it < st.nb * P; it += 32)
        {
          float xv[8];
          amk_mv_direct_x<8> (x, xdt, nw, ndt, up, udt, it, scale, xv); /* values 8 it .. 8 it + 7 */
          const uint32_t blk = it / P;
          acc = amk_qb_dot8<DT> (row + (uint64_t) blk * qb, it - blk * P, xv, acc);
        }
      amk_mv_end_row<SPLIT> (ctx, ins, buffers, ((uint32_t) tid >> 5) + i * ((uint32_t) nt >> 5), acc, lane);
    }
}

/* The pipeline for W's block type. */
template <bool SPLIT>
static __device__ __forceinline__ void
amk_mvq_run (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
             float scale, bool ring, uint32_t wdt, int tid, int nt)
{
#define AMK_MVQ_CASE(DT) \
  case DT: \
    if (ring) \
      amk_mvq_run_ring<DT, SPLIT> (ctx, ins, buffers, tid, nt); \
    else \
      amk_mvq_run_direct<DT, SPLIT> (ctx, ins, buffers, scale, tid, nt); \
    break;
  switch (wdt)
    {
    AMK_MVQ_CASE (AMK_ABI_DTYPE_Q8_0)
    AMK_MVQ_CASE (AMK_ABI_DTYPE_Q4_K)
    AMK_MVQ_CASE (AMK_ABI_DTYPE_Q5_K)
    AMK_MVQ_CASE (AMK_ABI_DTYPE_Q6_K)
    AMK_MVQ_CASE (AMK_ABI_DTYPE_Q5_0)
    default:
    AMK_MVQ_CASE (AMK_ABI_DTYPE_Q5_1)
    }
#undef AMK_MVQ_CASE
}

#endif /* AMK_OPS_MATVEC_BLOCKS_CUH */
