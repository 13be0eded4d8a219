/* ops-matvec-blocks.cuh: MATVEC over block-quantized W (Q8_0, Q5_0, Q5_1 and the K
 * types; quant-blocks.cuh), the same product and fusions as ops-matvec.cuh, which
 * includes this file before its exec and, for the ring and COLUMNS, stages x' with
 * amk_mvq_stage_limbs below (DIRECT reads x and applies the fusions as it goes); its
 * exec hands the tile to amk_mvq_exec at the end of this file. Q4_K, Q5_K and Q8_0 (K a
 * multiple of 256) run COLUMNS (ops-matvec-columns.cuh) where the ring would.
 *
 * Work split: warp w owns rows w, w + nw, ... of the tile, as for the 16-bit types. In
 * the ring, lane l takes the 16-value pieces l, l + 32, ... of a stage (integer dot
 * products against x' staged as int8 limbs); DIRECT, the 8-value parts l,
 * l + 32, ... of each row (float multiply-adds).
 *
 * RING: the warp's rows form one stream of blocks (row w's, then row w + nw's, ...),
 * cut into stages of G whole blocks each: a stage may end one row and start the next, so
 * every stage but the last is full whatever the row's length (a stage of one row's rest
 * would carry a few blocks, and the ring's depth is counted in stages). A stage is one
 * segment per row it touches; each segment copies the 16-byte chunks that cover its blocks
 * (from the chunk boundary below its first block: blocks straddle chunks, Q8_0's are 34
 * bytes) to the next chunk boundary of the slot, so copies stay aligned. Lanes read blocks
 * that other lanes copied, hence a __syncwarp after the wait (the copies visible to the
 * warp) and one before the refill (every lane done reading the slot).
 * DIRECT (no ring): each lane decodes its parts straight from global memory.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_MATVEC_BLOCKS_CUH
#define AMK_OPS_MATVEC_BLOCKS_CUH

#include "quant-blocks.cuh"

/* A segment's chunks hold its blocks and at most 30 bytes more (15 before the first
 * block, 15 after the last). */
#define AMK_MVQ_SLACK 30u

/* The warp's stream of stages over its rows of a block-quantized tile. */
struct amk_mvq_stream {
  const unsigned char *w; /* the warp's first row, from the tile's first column */
  uint64_t rowb;          /* bytes per row of W (the stride) */
  uint64_t step;          /* from one of the warp's rows to the next: nw rows */
  uint32_t nb;            /* blocks per row of the tile */
  uint32_t rows;          /* the warp's rows */
  uint32_t g;             /* blocks per full stage */
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
  st.rows = n > w ? (n - 1 - w) / nw + 1 : 0;
  /* the most blocks whose segments fit a slot: G blocks touch at most G / nb + 2 rows */
  st.g = (AMK_MV_STAGE_BYTES - 2 * AMK_MVQ_SLACK) / qb;
  while (st.g > 1 && st.g * qb + AMK_MVQ_SLACK * (st.g / st.nb + 2) > AMK_MV_STAGE_BYTES)
    st.g--;
  st.n = (st.rows * st.nb + st.g - 1) / st.g;
  st.ring = w * AMK_MV_WARP_RING;
  return st;
}

/* COLUMNS, the pipeline of Q4_K, Q5_K and Q8_0 (it takes its rows from amk_mvq_stream_of). */
#include "ops-matvec-columns.cuh"

/* A place in the warp's stream of blocks: row i of the warp's (tile row w + i nw), block
 * b0 of the row. Stages advance it by G blocks; only its start needs a division. */
struct amk_mvq_cursor {
  uint32_t row, b0;
};

static __device__ __forceinline__ amk_mvq_cursor
amk_mvq_cursor_at (const amk_mvq_stream &st, uint32_t k)
{
  const uint32_t b = k * st.g, row = b / st.nb;
  return { row, b - row * st.nb };
}

/* Blocks in stage k. */
static __device__ __forceinline__ uint32_t
amk_mvq_stage_blocks (const amk_mvq_stream &st, uint32_t k)
{
  return min (st.g, st.rows * st.nb - k * st.g);
}

/* One row's part of a stage: its first block b0 in the row, its block count, where it
 * starts in W, and where its chunks start in the slot (a multiple of 16). */
struct amk_mvq_segment {
  uint32_t row;  /* the warp's row index i (tile row w + i nw) */
  uint32_t b0, blocks;
  const unsigned char *src;
  uint32_t at;
};

/* The next segment of a stage with *m blocks still to place, from cursor c, its chunks
 * at slot offset *at: fills s, moves c, *m and *at past it. */
static __device__ __forceinline__ void
amk_mvq_next_segment (const amk_mvq_stream &st, uint32_t qb, amk_mvq_cursor &c, uint32_t *m,
                      uint32_t *at, amk_mvq_segment &s)
{
  s.row = c.row;
  s.b0 = c.b0;
  s.blocks = min (st.nb - c.b0, *m);
  s.src = st.w + (uint64_t) c.row * st.step + (uint64_t) c.b0 * qb;
  s.at = *at;
  const uintptr_t a = reinterpret_cast<uintptr_t> (s.src);
  *at += (uint32_t) (((a + s.blocks * qb + 15) & ~(uintptr_t) 15) - (a & ~(uintptr_t) 15));
  *m -= s.blocks;
  c.b0 += s.blocks;
  if (c.b0 == st.nb)
    {
      c.b0 = 0;
      c.row++;
    }
}

/* This lane's copies of stage k (when it exists; c is where it starts, and moves past it)
 * into slot `slot`, then the stage's commit group (always: group k holds stage k). W
 * streams marked evict-first in L2, as for the 16-bit types. */
static __device__ __forceinline__ void
amk_mvq_copy_stage (const amk_mvq_stream &st, uint32_t k, amk_mvq_cursor &c, uint32_t qb,
                    uint32_t slot, uint32_t lane)
{
  if (k < st.n)
    {
      uint32_t m = amk_mvq_stage_blocks (st, k), at = 0;
      while (m > 0) /* uniform over the warp */
        {
          amk_mvq_segment s;
          amk_mvq_next_segment (st, qb, c, &m, &at, s);
          const uintptr_t a = reinterpret_cast<uintptr_t> (s.src) & ~(uintptr_t) 15;
          const uint32_t nc = (uint32_t) ((reinterpret_cast<uintptr_t> (s.src) + s.blocks * qb - a + 15) / 16);
          amk_mv_copy_chunks (amk_mv_ring_base () + st.ring + slot * AMK_MV_STAGE_BYTES + s.at + lane * 16u,
                              reinterpret_cast<const unsigned char *> (a) + lane * 16u, nc, lane);
        }
    }
  asm volatile ("cp.async.commit_group;" : : : "memory");
}

/* The warp's first AMK_MV_STAGES stages (before the waits when W is CONSTANT). */
static __device__ __forceinline__ void
amk_mvq_prologue (const amk_op_ctx *ctx, int tid, int nt)
{
  const uint32_t dt = amk_mv_dt (ctx->dtype, 1), qb = amk_qb_bytes (dt);
  const amk_mvq_stream st = amk_mvq_stream_of (ctx, dt, tid, nt);

  amk_mvq_cursor c = { 0, 0 };

  if (st.n == 0 || amk_mvc_takes (ctx, dt))
    return;
#pragma unroll
  for (uint32_t k = 0; k < AMK_MV_STAGES; k++)
    amk_mvq_copy_stage (st, k, c, qb, k, (uint32_t) tid & 31);
}

/* How x' is laid out for a pipeline: the ring's natural order, COLUMNS' for Q4_K and
 * Q5_K (records of 512 columns, amk_mvc_rec_at), for Q6_K (chunks in amk_mvc_q6chunk
 * order, and an integer sum of x' per 16 columns), for Q8_0 (the blocks' own layout, 34
 * bytes per 32 columns with zeros where W has its scale, chunks in amk_mvc_qchunk
 * order). */
enum amk_mvq_order { AMK_MVQ_X_RING, AMK_MVQ_X_CHUNKS, AMK_MVQ_X_Q6_K, AMK_MVQ_X_Q8_0 };

static __device__ __forceinline__ amk_mvq_order
amk_mvq_order_of (const amk_op_ctx *ctx, uint32_t wdt)
{
  if (!amk_mvc_takes (ctx, wdt))
    return AMK_MVQ_X_RING;
  return wdt == AMK_ABI_DTYPE_Q8_0 ? AMK_MVQ_X_Q8_0 : wdt == AMK_ABI_DTYPE_Q6_K ? AMK_MVQ_X_Q6_K
                                                                              : AMK_MVQ_X_CHUNKS;
}

/* Bytes of one limb of x' over kn columns in that order. */
static __device__ __forceinline__ uint32_t
amk_mvq_limb_bytes (amk_mvq_order order, uint32_t kn)
{
  return order == AMK_MVQ_X_Q8_0 ? amk_mvc_q8_limb_bytes (kn) : kn;
}

/* Byte p of a Q8_0-ordered limb, where it is staged. */
static __device__ __forceinline__ uint32_t
amk_mvq_q8_at (uint32_t p)
{
  return amk_mvc_qchunk (p >> 4) * 16 + (p & 15u);
}

/* x' of the tile's kn columns staged for the ring or COLUMNS as int8 limbs
 * (amk_qb_dot16_limbs): at byte 0 the high limbs, at ls (amk_mvq_limb_bytes) the low ones,
 * at 2 ls a float scale per 32 columns, then a float sum of x' per 32 columns (for Q6_K
 * then an int sum of the integers per 16 columns, at 2 ls + kn / 4; for Q4_K and Q5_K
 * the same in records of 512 columns, amk_mvc_rec_at). x' is
 * x * norm weight (the RMS scale comes later: the row's sum is multiplied by it) or
 * silu(x) * up or x. Lanes 8 i .. 8 i + 7 hold a group of 32 columns (four each), so the
 * group's maximum and sum are three shuffles. Returns this thread's share of sum(x^2) for
 * a fused norm. */
static __device__ __forceinline__ float
amk_mvq_stage_limbs (const unsigned char *x, uint32_t xdt, const unsigned char *nw, uint32_t ndt,
                     const unsigned char *up, uint32_t udt, uint32_t kn, unsigned char *xs,
                     amk_mvq_order order, int tid, int nt)
{
  const uint32_t n4 = kn / 4, lane = (uint32_t) tid & 31, ls = amk_mvq_limb_bytes (order, kn);
  float *scales = reinterpret_cast<float *> (xs + 2 * ls), *sums = scales + kn / 32;
  float ss = 0.0f;

  /* the warp's groups of four columns: uniform trip count, so every lane shuffles */
  for (uint32_t jw = ((uint32_t) tid & ~31u); jw < n4; jw += (uint32_t) nt)
    {
      const uint32_t j = jw + lane;
      const bool live = j < n4; /* n4 is whole groups of 8: a group is live or not */
      float4 o = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
      if (live)
        {
          const float4 v = amk_mv_load4 (x, xdt, j);
          ss = fmaf (v.x, v.x, fmaf (v.y, v.y, fmaf (v.z, v.z, fmaf (v.w, v.w, ss))));
          o = v;
          if (nw != nullptr)
            {
              const float4 g = amk_mv_load4 (nw, ndt, j);
              o = make_float4 (v.x * g.x, v.y * g.y, v.z * g.z, v.w * g.w);
            }
          else if (up != nullptr)
            {
              const float4 u = amk_mv_load4 (up, udt, j);
              o = make_float4 (amk_mv_gated (v.x, u.x), amk_mv_gated (v.y, u.y),
                               amk_mv_gated (v.z, u.z), amk_mv_gated (v.w, u.w));
            }
        }
      float amax = fmaxf (fmaxf (fabsf (o.x), fabsf (o.y)), fmaxf (fabsf (o.z), fabsf (o.w)));
      float sum = (o.x + o.y) + (o.z + o.w);
#pragma unroll
      for (int m = 1; m < 8; m <<= 1)
        {
          amax = fmaxf (amax, __shfl_xor_sync (0xffffffffu, amax, m));
          sum += __shfl_xor_sync (0xffffffffu, sum, m);
        }
      const float inv = amax > 0.0f ? 16383.0f / amax : 0.0f;
      const int q[4] = { __float2int_rn (o.x * inv), __float2int_rn (o.y * inv),
                         __float2int_rn (o.z * inv), __float2int_rn (o.w * inv) };
      if (order == AMK_MVQ_X_Q6_K) /* lanes 4 i .. 4 i + 3 hold 16 columns */
        {
          int q16 = (q[0] + q[1]) + (q[2] + q[3]);
          q16 += __shfl_xor_sync (0xffffffffu, q16, 1);
          q16 += __shfl_xor_sync (0xffffffffu, q16, 2);
          if (live && (j & 3u) == 0)
            reinterpret_cast<int *> (xs + 2 * ls + kn / 4)[j / 4] = q16;
        }
      if (!live)
        continue;
      uint32_t hi = 0, lo = 0;
#pragma unroll
      for (int e = 0; e < 4; e++)
        {
          hi |= ((uint32_t) (q[e] >> 7) & 0xffu) << (8 * e);
          lo |= ((uint32_t) q[e] & 0x7fu) << (8 * e);
        }
      if (order == AMK_MVQ_X_Q8_0)
        { /* 2-byte aligned in a block's layout: four 16-bit halves, and the scale's zeros */
          const uint32_t p = 34 * (j >> 3) + 2 + 4 * (j & 7u);
          uint16_t *h = reinterpret_cast<uint16_t *> (xs), *l = reinterpret_cast<uint16_t *> (xs + ls);
          h[amk_mvq_q8_at (p) / 2] = (uint16_t) hi;
          h[amk_mvq_q8_at (p + 2) / 2] = (uint16_t) (hi >> 16);
          l[amk_mvq_q8_at (p) / 2] = (uint16_t) lo;
          l[amk_mvq_q8_at (p + 2) / 2] = (uint16_t) (lo >> 16);
          if ((j & 7u) == 0)
            h[amk_mvq_q8_at (p - 2) / 2] = l[amk_mvq_q8_at (p - 2) / 2] = 0;
        }
      else if (order == AMK_MVQ_X_CHUNKS)
        {
          const uint32_t at = amk_mvc_rec_at (j);
          *reinterpret_cast<uint32_t *> (xs + at) = hi;
          *reinterpret_cast<uint32_t *> (xs + at + AMK_MVC_REC_LIMB) = lo;
          if ((j & 7u) == 0)
            {
              const uint32_t g = (j / 8) & 15u, rec = (j / 128) * AMK_MVC_REC_BYTES;
              reinterpret_cast<float *> (xs + rec + AMK_MVC_REC_SCALES)[g] = amax / 16383.0f;
              reinterpret_cast<float *> (xs + rec + AMK_MVC_REC_SUMS)[g] = sum;
            }
          continue;
        }
      else
        {
          const uint32_t at = order == AMK_MVQ_X_Q6_K ? amk_mvc_q6chunk (j >> 2) * 4 + (j & 3u) : j;
          reinterpret_cast<uint32_t *> (xs)[at] = hi;
          reinterpret_cast<uint32_t *> (xs + kn)[at] = lo;
        }
      if ((j & 7u) == 0)
        {
          scales[j / 8] = amax / 16383.0f;
          sums[j / 8] = sum;
        }
    }
  return ss;
}

template <uint32_t DT, bool SPLIT>
static __device__ __forceinline__ void
amk_mvq_run_ring (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                  float scale, int tid, int nt)
{
  /* pieces of 16 values per block */
  constexpr uint32_t PP = DT == AMK_ABI_DTYPE_Q4_K || DT == AMK_ABI_DTYPE_Q5_K || DT == AMK_ABI_DTYPE_Q6_K ? 16 : 2;
  const uint32_t qb = amk_qb_bytes (DT);
  const uint32_t lane = (uint32_t) tid & 31;
  const unsigned char *xs = amk_dyn_smem + (uint32_t) nt * AMK_MATVEC_RING_BYTES_PER_THREAD;
  const uint32_t kn = ctx->esize;
  const float *scales = reinterpret_cast<const float *> (xs + 2 * kn), *sums = scales + kn / 32;
  const amk_mvq_stream st = amk_mvq_stream_of (ctx, DT, tid, nt);
  const uint32_t w = (uint32_t) tid >> 5, nw = (uint32_t) nt >> 5;
  amk_mvq_cursor rc = { 0, 0 };                             /* the next stage to read */
  amk_mvq_cursor cc = amk_mvq_cursor_at (st, AMK_MV_STAGES); /* and to copy */
  float acc = 0.0f; /* this lane's part of the row in progress */

  for (uint32_t k = 0; k < st.n; ++k)
    {
      asm volatile ("cp.async.wait_group %0;" : : "n"(AMK_MV_STAGES - 1) : "memory");
      __syncwarp (); /* every lane's copies of the stage visible to the warp */
      const uint32_t slot = k % AMK_MV_STAGES;
      const unsigned char *base = amk_dyn_smem + st.ring + slot * AMK_MV_STAGE_BYTES;
      uint32_t m = amk_mvq_stage_blocks (st, k), at = 0;

      if (st.g <= st.nb) /* uniform: a stage ends at most one row and starts the next */
        {
          amk_mvq_segment s0, s1;
          amk_mvq_next_segment (st, qb, rc, &m, &at, s0);
          s1.blocks = 0;
          s1.at = at;
          s1.src = s0.src;
          if (m > 0)
            amk_mvq_next_segment (st, qb, rc, &m, &at, s1);
          const unsigned char *ws0 = base + s0.at + (reinterpret_cast<uintptr_t> (s0.src) & 15u);
          const unsigned char *ws1 = base + s1.at + (reinterpret_cast<uintptr_t> (s1.src) & 15u);
          const uint32_t n0 = s0.blocks * PP, n = n0 + s1.blocks * PP;
          float acc1 = 0.0f; /* the next row's part, from s1 */
          /* the stage's pieces over all lanes at once, whichever row they belong to */
          for (uint32_t it = lane; it < n; it += 32)
            {
              const bool second = it >= n0;
              const uint32_t j = second ? it - n0 : it;
              const uint32_t blk = j / PP, piece = j - blk * PP;
              const uint32_t v0 = ((second ? 0u : s0.b0) + blk) * (PP * 16) + piece * 16;
              const float d = amk_qb_dot16_limbs<DT> ((second ? ws1 : ws0) + blk * qb, piece,
                                                      *reinterpret_cast<const uint4 *> (xs + v0),
                                                      *reinterpret_cast<const uint4 *> (xs + kn + v0),
                                                      scales[v0 / 32], sums[v0 / 32], 0.0f);
              if (second)
                acc1 += d;
              else
                acc += d;
            }
          if (s0.b0 + s0.blocks == st.nb) /* s0 ends its row */
            {
              amk_mv_end_row<SPLIT> (ctx, ins, buffers, w + s0.row * nw, acc * scale, lane);
              acc = acc1;
            }
        }
      else
        while (m > 0) /* short rows: a stage may hold several; uniform over the warp */
          {
            amk_mvq_segment sg;
            amk_mvq_next_segment (st, qb, rc, &m, &at, sg);
            const unsigned char *ws = base + sg.at + (reinterpret_cast<uintptr_t> (sg.src) & 15u);
            for (uint32_t it = lane; it < sg.blocks * PP; it += 32)
              {
                const uint32_t blk = it / PP, piece = it - blk * PP;
                const uint32_t v0 = (sg.b0 + blk) * (PP * 16) + piece * 16; /* its first column */
                acc = amk_qb_dot16_limbs<DT> (ws + blk * qb, piece, *reinterpret_cast<const uint4 *> (xs + v0),
                                              *reinterpret_cast<const uint4 *> (xs + kn + v0), scales[v0 / 32],
                                              sums[v0 / 32], acc);
              }
            if (sg.b0 + sg.blocks == st.nb) /* the row ends here */
              {
                amk_mv_end_row<SPLIT> (ctx, ins, buffers, w + sg.row * nw, acc * scale, lane);
                acc = 0.0f;
              }
          }
      __syncwarp (); /* every lane done with the slot */
      amk_mvq_copy_stage (st, k + AMK_MV_STAGES, cc, qb, slot, lane);
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

  for (uint32_t i = 0; i < st.rows; i++)
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

/* The pipeline for W's block type: COLUMNS (ops-matvec-columns.cuh) where it takes the tile,
 * else the ring, or DIRECT without the ring's shared memory. Out of line, the form that
 * was measured (bench/NOTES.md): its pipelines' registers apart from the staging's. */
template <bool SPLIT>
static __device__ __noinline__ void
amk_mvq_run (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
             float scale, bool ring, uint32_t wdt, int tid, int nt)
{
#define AMK_MVQ_CASE(DT) \
  case DT: \
    if (ring && amk_mvc_takes (ctx, DT) && amk_mvc_type<DT>::PAIRS && ctx->count >= 2u * (nt >> 5)) \
      amk_mvc_run<DT, SPLIT, 2> (ctx, ins, buffers, scale, tid, nt); \
    else if (ring && amk_mvc_takes (ctx, DT)) \
      amk_mvc_run<DT, SPLIT, 1> (ctx, ins, buffers, scale, tid, nt); \
    else if (ring) \
      amk_mvq_run_ring<DT, SPLIT> (ctx, ins, buffers, scale, tid, nt); \
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

/* amk_matvec_exec for block-quantized W: the same steps (W's prologue when it waits on
 * a counter, x' staged and the norm's scale, the rows), with x' as int8 limbs for the
 * ring and COLUMNS; DIRECT reads x as it goes and only sums its squares here. Not
 * inlined (see amk_matvec_exec). */
static __device__ __noinline__ void
amk_mvq_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
              bool run, int tid, int nt)
{
  const uint32_t k = ctx->esize, packed = ctx->dtype;
  const uint32_t wdt = amk_mv_dt (packed, 1), xdt = amk_mv_dt (packed, 2), ndt = amk_mv_dt (packed, 5);
  const uint32_t udt = amk_mv_dt (packed, 6);
  const bool ring = amk_mv_use_ring (k, nt), norm = ndt != AMK_MV_ABSENT;
  /* this warp has rows */
  const bool work = run && ((uint32_t) tid >> 5) < ctx->count;
  const unsigned char *x = ctx->ptr[2];
  const unsigned char *nwt = norm ? amk_mv_vector_at (ctx, ins, buffers, 5, ndt) : nullptr;
  const unsigned char *up = udt != AMK_MV_ABSENT ? amk_mv_vector_at (ctx, ins, buffers, 6, udt) : nullptr;
  float ss = 0.0f, scale = 1.0f;

  /* W that may depend on the waits starts streaming only now */
  if (ring && work && !amk_matvec_early (ctx))
    amk_mvq_prologue (ctx, tid, nt);
  if (run && ring)
    ss = amk_mvq_stage_limbs (x, xdt, nwt, ndt, up, udt, k,
                              amk_dyn_smem + (uint32_t) nt * AMK_MATVEC_RING_BYTES_PER_THREAD,
                              amk_mvq_order_of (ctx, wdt), tid, nt);
  else if (run && norm) /* the tile's squares: outside an empty range, every group */
    ss = amk_mv_sumsq_outside (x, xdt, 0, 0, k / 4, tid, nt);
  if (norm)
    {
      if (run && (packed & AMK_MV_SPLIT))
        {
          const uint32_t g0 = amk_mv_first_column (ctx, ins) / 4;
          ss += amk_mv_sumsq_outside (reinterpret_cast<const unsigned char *> (buffers[ins->buffers[2]].addr),
                                      xdt, g0, g0 + k / 4, ctx->pattern / 4, tid, nt);
        }
      scale = amk_mv_norm_scale (ss, ctx, ins, tid, nt); /* the row's sum takes it */
    }
  if (ring)
    amk_sync ();

  if (work)
    {
      if (packed & AMK_MV_SPLIT)
        amk_mvq_run<true> (ctx, ins, buffers, scale, ring, wdt, tid, nt);
      else
        amk_mvq_run<false> (ctx, ins, buffers, scale, ring, wdt, tid, nt);
    }

  /* a warp that skipped its rows may still have prefetched copies in flight; they must
   * land before the slots are reused */
  if (ring && !run)
    asm volatile ("cp.async.wait_all;" : : : "memory");
}

#endif /* AMK_OPS_MATVEC_BLOCKS_CUH */
