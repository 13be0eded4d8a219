/* ops-matvec-columns.cuh: MATVEC over Q4_K, Q5_K, Q6_K and Q8_0 weights with every lane owning
 * fixed columns (COLUMNS), the pipeline that ops-matvec-blocks.cuh runs for these types
 * instead of its ring (and includes after amk_mvq_stream_of, which gives the warp its rows).
 *
 * A warp's step (an item) is one slice of 2048 columns of one of its rows (Q4_K: of R
 * rows, 2 where the warp has two or more, which share the item's x' loads), and lane l
 * takes its 64 columns 64 l .. 64 l + 63, loaded straight from global memory into
 * registers, with no staging:
 *  - Q4_K and Q5_K, whose blocks are whole 16-byte words (144 and 176 bytes): chunk
 *    c = l % 4 of block l / 4 of the slice's 8, i.e. the 16-byte header (scales), Q5_K's
 *    32 bytes of fifth bits and the chunk's 32 bytes of nibbles;
 *  - Q6_K (210-byte blocks, rows of whole groups of 8: 1680 bytes): block l / 4 of the
 *    slice's 8, quarter c = l % 4 (half c / 2 of the block, low or high 32 bytes of that
 *    half's nibbles, c % 2): 3 aligned words of nibbles, 3 of high bits and 2 of scales,
 *    realigned in registers (block b starts 2 b bytes into a word);
 *  - Q8_0 (34-byte blocks): blocks 2 l and 2 l + 1 of the slice's 64, 68 bytes that start
 *    4 (l % 4) bytes into an aligned word (rows are whole groups of 8 blocks, 272 bytes),
 *    loaded as the 5 aligned words around them. x' is staged in the blocks' own byte
 *    layout (zeros where W has its scales), so each 4-byte word of W meets the x' word at
 *    the same offset, and no 4 bytes of W hold quants of two blocks (34 = 2 mod 4): the
 *    lane masks the words that are its neighbours' and sums each word into its block.
 * Items run row by row (slices of a row in order, then the next row); the loads of the
 * next D - 1 items are in flight while one is summed against x' (int8 limbs in shared
 * memory, staged by amk_mvq_stage_limbs, for Q4_K and Q5_K in records of 512 columns),
 * and a row's last slice ends it (warp sum, lane 0 stores). There is no prologue: W's
 * first loads leave after the waits.
 *
 * The ring, by contrast, stages every block through shared memory and decodes 16 values
 * at a time from addresses it computes per stage: most of its instructions were that
 * bookkeeping, and each warp's chain of them, not memory, bounded it. Q5_0 and Q5_1 stay
 * there, and Q8_0 where K is not a multiple of 256, Q6_K where it is not one of 2048.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_MATVEC_COLUMNS_CUH
#define AMK_OPS_MATVEC_COLUMNS_CUH

#include "quant-blocks.cuh"

/* Per type: 16-byte loads per lane and item, slots of loads per warp for items of one
 * row (D - 1 items stay in flight while one is summed; one slot more, which still fits
 * the scheduler's 128 registers, was slower for every type on the short rows of
 * Llama-3.2-1B; items of two rows take 2), blocks per item. */
template <uint32_t DT>
struct amk_mvc_type {
  static constexpr bool Q5 = DT == AMK_ABI_DTYPE_Q5_K;
  static constexpr bool Q8 = DT == AMK_ABI_DTYPE_Q8_0;
  static constexpr bool Q6 = DT == AMK_ABI_DTYPE_Q6_K;
  static constexpr uint32_t LOADS = Q6 ? 8 : Q5 || Q8 ? 5 : 3;
  static constexpr uint32_t DEPTH = DT == AMK_ABI_DTYPE_Q4_K ? 3 : 2;
  static constexpr uint32_t BLOCKS = Q8 ? 64 : 8;
  static constexpr bool PAIRS = DT == AMK_ABI_DTYPE_Q4_K; /* items of two rows (amk_mvc_run) */
};

/* Whether COLUMNS takes the tile, of W's type dt (the prologue, the staging and the run
 * must agree: the ring's prologue copies stages only the ring reads). Every block it
 * reads is 16-byte aligned, or for Q8_0 every group of 8 blocks: W starts so
 * (amk_matvec_check), Q4_K's and Q5_K's blocks are whole words, and a Q8_0 (Q6_K) tile
 * is taken only where its first block and every row (K a multiple of 256, 2048) start on
 * a word. Q4_K and Q5_K tiles of one block (256 columns) stay with the ring: their x'
 * record would not fit (amk_mvc_rec_at). */
static __device__ __forceinline__ bool
amk_mvc_takes (const amk_op_ctx *ctx, uint32_t dt)
{
  if (dt == AMK_ABI_DTYPE_Q8_0 || dt == AMK_ABI_DTYPE_Q6_K)
    {
      const uint32_t group = dt == AMK_ABI_DTYPE_Q8_0 ? 256 : 2048;
      return ctx->esize % group == 0 && ctx->pattern % group == 0 &&
             (reinterpret_cast<uintptr_t> (ctx->ptr[1]) & 15u) == 0;
    }
  return (dt == AMK_ABI_DTYPE_Q4_K || dt == AMK_ABI_DTYPE_Q5_K) && ctx->esize >= 512;
}

/* Q4_K's and Q5_K's x' is staged as one record per 512 columns (the 8 lanes of a phase,
 * two blocks): the high limbs, the low ones, a float scale and a float sum per 32 columns.
 * Lane l' of the 8 reads 16-byte chunk j (columns 64 l' + 16 j ..) of a limb at
 * 128 j + 16 l', so that a 16-byte load's phase reads 128 contiguous bytes, and every read
 * is the lane's own base plus a constant. A record takes 2.25 bytes a column: within the
 * 4 bytes a column of the launch's x' room from K = 512 on (amk_mvc_takes). */
#define AMK_MVC_REC_LIMB 512u
#define AMK_MVC_REC_SCALES (2u * AMK_MVC_REC_LIMB)
#define AMK_MVC_REC_SUMS (AMK_MVC_REC_SCALES + 64u)
#define AMK_MVC_REC_BYTES (AMK_MVC_REC_SUMS + 64u)

/* Where the high limb's column group j (columns 4 j .. 4 j + 3) is staged. */
static __device__ __forceinline__ uint32_t
amk_mvc_rec_at (uint32_t j)
{
  return (j >> 7) * AMK_MVC_REC_BYTES + 128u * ((j >> 2) & 3u) + 16u * ((j >> 4) & 7u) +
         4u * (j & 3u);
}

/* The same for Q8_0's x', staged in the blocks' layout: lane l reads chunks
 * 4 l + l / 4 .. + 4, which this order spreads over all 8 bank groups in each phase
 * (checked for every phase, chunk and item); it too permutes aligned groups of 8. */
static __device__ __forceinline__ uint32_t
amk_mvc_qchunk (uint32_t q)
{
  return q ^ (((q >> 2) & 3u) << 1);
}

/* The same for Q6_K's x' (natural order): lane (b, c) reads chunks 16 b + 8 (c / 2) +
 * 2 (c % 2) + {0, 1, 4, 5}, which an XOR of the low 3 bits with 0, 1, 4 or 5 by the
 * chunk's group of 8 (mod 4) spreads over all 8 bank groups in each phase. */
static __device__ __forceinline__ uint32_t
amk_mvc_q6chunk (uint32_t q)
{
  const uint32_t g = (q >> 3) & 3u;
  return q ^ ((g & 1u) | ((g & 2u) << 1));
}

/* Bytes of one limb of Q8_0's x' over kn columns: 34 per 32, rounded up to whole groups
 * of 8 chunks so that amk_mvc_qchunk keeps a last partial group inside the limb. */
static __device__ __forceinline__ uint32_t
amk_mvc_q8_limb_bytes (uint32_t kn)
{
  return (kn / 32 * 34 + 127u) & ~127u;
}

/* The lane's first block in an item: Q8_0 lanes own two blocks, the others a quarter. */
template <uint32_t DT>
static __device__ __forceinline__ uint32_t
amk_mvc_lane_block (uint32_t lane)
{
  return amk_mvc_type<DT>::Q8 ? 2 * lane : lane >> 2;
}

/* Lane's share of block `blk` (chunk c): header, (Q5_K: the fifth bits), nibbles; for
 * Q8_0, the 5 aligned words around its two blocks from `blk`; for Q6_K, the aligned words
 * around its nibbles (3), its high bits (3) and the scales and d (2). */
template <uint32_t DT>
static __device__ __forceinline__ void
amk_mvc_load (const unsigned char *blk, uint32_t c, uint4 (&v)[amk_mvc_type<DT>::LOADS])
{
  if constexpr (amk_mvc_type<DT>::Q8)
    {
      const uint4 *a = reinterpret_cast<const uint4 *> (reinterpret_cast<uintptr_t> (blk) & ~(uintptr_t) 15);
#pragma unroll
      for (uint32_t j = 0; j < 5; j++)
        v[j] = __ldcs (a + j);
      return;
    }
  if constexpr (amk_mvc_type<DT>::Q6)
    {
      const unsigned char *a = reinterpret_cast<const unsigned char *> (reinterpret_cast<uintptr_t> (blk) & ~(uintptr_t) 15);
      const uint32_t n = c >> 1, s = c & 1u;
#pragma unroll
      for (uint32_t j = 0; j < 3; j++)
        {
          v[j] = __ldcs (reinterpret_cast<const uint4 *> (a + 64 * n + 32 * s + 16 * j));
          v[3 + j] = __ldcs (reinterpret_cast<const uint4 *> (a + 128 + 32 * n + 16 * j));
        }
      v[6] = __ldcs (reinterpret_cast<const uint4 *> (a + 192));
      v[7] = __ldcs (reinterpret_cast<const uint4 *> (a + 208));
      return;
    }
  v[0] = __ldcs (reinterpret_cast<const uint4 *> (blk));
  if constexpr (amk_mvc_type<DT>::Q5)
    {
      v[1] = __ldcs (reinterpret_cast<const uint4 *> (blk + 16));
      v[2] = __ldcs (reinterpret_cast<const uint4 *> (blk + 32));
      v[3] = __ldcs (reinterpret_cast<const uint4 *> (blk + 48 + 32 * c));
      v[4] = __ldcs (reinterpret_cast<const uint4 *> (blk + 64 + 32 * c));
    }
  else
    {
      v[1] = __ldcs (reinterpret_cast<const uint4 *> (blk + 16 + 32 * c));
      v[2] = __ldcs (reinterpret_cast<const uint4 *> (blk + 32 + 32 * c));
    }
}

/* acc + the lane's two Q8_0 blocks b, b + 1 of the tile times x'. v holds words 0 .. 19
 * of the aligned window; the lane's 68 bytes are words e0 .. e0 + 16 (e0 = l % 4), block
 * b's are those up to e0 + 8 (its last quants share a word with b + 1's scale, which
 * meets x' zeros), and x' chunk (34 b) / 16 + j of each limb (in amk_mvc_qchunk order)
 * pairs with the window's word j. ls: bytes per limb of x'. */
static __device__ __forceinline__ float
amk_mvc_dot_q8 (const uint4 (&v)[5], uint32_t e0, const unsigned char *xs, uint32_t ls, uint32_t b,
                float acc)
{
  const uint32_t w[20] = { v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w,
                           v[2].x, v[2].y, v[2].z, v[2].w, v[3].x, v[3].y, v[3].z, v[3].w,
                           v[4].x, v[4].y, v[4].z, v[4].w };
  const uint4 *xh = reinterpret_cast<const uint4 *> (xs), *xl = reinterpret_cast<const uint4 *> (xs + ls);
  const uint32_t q0 = (34 * b) >> 4;
  int ha = 0, la = 0, hb = 0, lb = 0;

#pragma unroll
  for (uint32_t j = 0; j < 5; j++)
    {
      const uint32_t p = amk_mvc_qchunk (q0 + j);
      const uint4 a4 = xh[p], o4 = xl[p];
      const uint32_t xa[4] = { a4.x, a4.y, a4.z, a4.w }, xo[4] = { o4.x, o4.y, o4.z, o4.w };
#pragma unroll
      for (uint32_t e = 0; e < 4; e++)
        {
          const uint32_t m = 4 * j + e;
          uint32_t q = w[m];
          if (m < 4) /* the neighbours' words before and after the lane's */
            q = m >= e0 ? q : 0u;
          if (m >= 17)
            q = m - 17 < e0 ? q : 0u;
          if (m <= 8)
            {
              ha = __dp4a ((int) q, (int) xa[e], ha);
              la = __dp4a ((int) q, (int) xo[e], la);
            }
          else if (m >= 12)
            {
              hb = __dp4a ((int) q, (int) xa[e], hb);
              lb = __dp4a ((int) q, (int) xo[e], lb);
            }
          else /* block b up to word e0 + 8 */
            {
              const bool first = m - 8 <= e0;
              const uint32_t qa = first ? q : 0u, qb = first ? 0u : q;
              ha = __dp4a ((int) qa, (int) xa[e], ha);
              la = __dp4a ((int) qa, (int) xo[e], la);
              hb = __dp4a ((int) qb, (int) xa[e], hb);
              lb = __dp4a ((int) qb, (int) xo[e], lb);
            }
        }
    }
  /* the scales: block b's in the low half of word e0, b + 1's in the high half of e0 + 8 */
  const uint32_t wa = e0 == 0 ? v[0].x : e0 == 1 ? v[0].y : e0 == 2 ? v[0].z : v[0].w;
  const uint32_t wb = e0 == 0 ? v[2].x : e0 == 1 ? v[2].y : e0 == 2 ? v[2].z : v[2].w;
  const float da = __half2float (__ushort_as_half ((unsigned short) (wa & 0xffffu)));
  const float db = __half2float (__ushort_as_half ((unsigned short) (wb >> 16)));
  const float2 sx = *reinterpret_cast<const float2 *> (xs + 2 * ls + 4 * b);
  acc = fmaf (da * sx.x, (float) (ha * 128 + la), acc);
  return fmaf (db * sx.y, (float) (hb * 128 + lb), acc);
}

/* Words o / 4 .. o / 4 + N - 1 of w shifted down by o % 4 bytes (o even, under 16): the
 * N words that start o bytes into w, with two selects a word for o / 4 and a byte permute
 * for the 2 bytes. */
template <uint32_t N, uint32_t M>
static __device__ __forceinline__ void
amk_mvc_realign (const uint32_t (&w)[M], uint32_t o, uint32_t (&out)[N])
{
  static_assert (M >= N + 4, "room for the shift");
  uint32_t t[N + 3], u[N + 1];
  const bool s1 = (o & 4u) != 0, s2 = (o & 8u) != 0;
  const uint32_t sel = (o & 2u) ? 0x5432u : 0x3210u;
#pragma unroll
  for (uint32_t i = 0; i < N + 3; i++)
    t[i] = s1 ? w[i + 1] : w[i];
#pragma unroll
  for (uint32_t i = 0; i < N + 1; i++)
    u[i] = s2 ? t[i + 2] : t[i];
#pragma unroll
  for (uint32_t i = 0; i < N; i++)
    out[i] = __byte_perm (u[i], u[i + 1], sel);
}

/* acc + the lane's 64 values of Q6_K block b of the tile (quarter c: half n = c / 2,
 * nibbles 32 (c % 2) .. of that half, for values 128 n + 32 (c % 2) + l and 64 more, l <
 * 32) times x': the 6-bit values from the realigned nibbles and high bits, one dot per
 * sub-block of 16 against x' limbs (amk_mvc_q6chunk order), less 32 times the
 * sub-block's integer sum of x', times d and the sub-block's int8 scale. */
static __device__ __forceinline__ float
amk_mvc_dot_q6 (const uint4 (&v)[8], uint32_t c, const unsigned char *xs, uint32_t kn, uint32_t b,
                float acc)
{
  const uint32_t o = 2 * (b & 7u), n = c >> 1, s = c & 1u;
  const uint32_t wl[12] = { v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w,
                            v[2].x, v[2].y, v[2].z, v[2].w };
  const uint32_t wh[12] = { v[3].x, v[3].y, v[3].z, v[3].w, v[4].x, v[4].y, v[4].z, v[4].w,
                            v[5].x, v[5].y, v[5].z, v[5].w };
  /* the 16 scales and d: 18 bytes from o in the last two words (the zero: room to shift) */
  const uint32_t ws[9] = { v[6].x, v[6].y, v[6].z, v[6].w, v[7].x, v[7].y, v[7].z, v[7].w, 0u };
  uint32_t ql[8], qh[8], sw[5];
  amk_mvc_realign (wl, o, ql);
  amk_mvc_realign (wh, o, qh);
  amk_mvc_realign (ws, o, sw);
  const uint32_t q0 = 16 * b + 8 * n + 2 * s; /* the lane's first x' chunk (low nibbles) */
  const uint4 *xh = reinterpret_cast<const uint4 *> (xs), *xl = reinterpret_cast<const uint4 *> (xs + kn);
  const uint32_t lsh = 4 - 2 * s, hsh = 2 * s; /* high bits to bits 4, 5 of each byte */
  int h[4] = { 0, 0, 0, 0 }, l[4] = { 0, 0, 0, 0 }; /* sub-blocks: low 0, 1, high 0, 1 */

#pragma unroll
  for (uint32_t i = 0; i < 2; i++)
    {
      const uint32_t p0 = amk_mvc_q6chunk (q0 + i), p1 = amk_mvc_q6chunk (q0 + 4 + i);
      const uint4 a0 = xh[p0], a1 = xh[p1], b0 = xl[p0], b1 = xl[p1];
      const uint32_t xa0[4] = { a0.x, a0.y, a0.z, a0.w }, xa1[4] = { a1.x, a1.y, a1.z, a1.w };
      const uint32_t xb0[4] = { b0.x, b0.y, b0.z, b0.w }, xb1[4] = { b1.x, b1.y, b1.z, b1.w };
#pragma unroll
      for (uint32_t e = 0; e < 4; e++)
        {
          const uint32_t k = 4 * i + e;
          const uint32_t lo = (ql[k] & 0x0f0f0f0fu) | ((qh[k] << lsh) & 0x30303030u);
          const uint32_t hi = ((ql[k] >> 4) & 0x0f0f0f0fu) | ((qh[k] >> hsh) & 0x30303030u);
          h[i] = __dp4a ((int) lo, (int) xa0[e], h[i]);
          l[i] = __dp4a ((int) lo, (int) xb0[e], l[i]);
          h[2 + i] = __dp4a ((int) hi, (int) xa1[e], h[2 + i]);
          l[2 + i] = __dp4a ((int) hi, (int) xb1[e], l[2 + i]);
        }
    }
  /* scales 8 n + 2 s + {0, 1} (low) and + 4 (high): bytes 2 s, 2 s + 1 of words 2 n, 2 n + 1 */
  const uint32_t scl = n ? sw[2] : sw[0], sch = n ? sw[3] : sw[1];
  const float d = __half2float (__ushort_as_half ((unsigned short) (sw[4] & 0xffffu)));
  const float *xsc = reinterpret_cast<const float *> (xs + 2 * kn); /* x' scale per 32 */
  const int *sums = reinterpret_cast<const int *> (xs + 2 * kn + kn / 4);
  const int2 ssl = *reinterpret_cast<const int2 *> (sums + q0), ssh = *reinterpret_cast<const int2 *> (sums + q0 + 4);
  const int sc[4] = { (int) (int8_t) (scl >> (16 * s)), (int) (int8_t) (scl >> (16 * s + 8)),
                      (int) (int8_t) (sch >> (16 * s)), (int) (int8_t) (sch >> (16 * s + 8)) };
  const int ss[4] = { ssl.x, ssl.y, ssh.x, ssh.y };
  const float sxl = xsc[q0 / 2], sxh = xsc[q0 / 2 + 2];
  const float sx[4] = { sxl, sxl, sxh, sxh };
#pragma unroll
  for (uint32_t g = 0; g < 4; g++)
    acc = fmaf (d * sx[g] * (float) sc[g], (float) (h[g] * 128 + l[g] - 32 * ss[g]), acc);
  return acc;
}

/* The lane's x' of a Q4_K or Q5_K item, which every row of the item uses: from xq, its
 * first chunk of its record's high limb, and xf, its scales (amk_mvc_rec_at). */
struct amk_mvc_x {
  uint4 a[2][2], b[2][2]; /* [i][half]: high and low limbs of chunks i and 2 + i */
  float2 sx, sum;
};

static __device__ __forceinline__ amk_mvc_x
amk_mvc_load_x (const unsigned char *xq, const unsigned char *xf)
{
  amk_mvc_x x;
#pragma unroll
  for (uint32_t i = 0; i < 2; i++)
#pragma unroll
    for (uint32_t u = 0; u < 2; u++)
      {
        const uint4 *p = reinterpret_cast<const uint4 *> (xq + 128 * (2 * u + i));
        x.a[i][u] = p[0];
        x.b[i][u] = p[AMK_MVC_REC_LIMB / 16];
      }
  x.sx = *reinterpret_cast<const float2 *> (xf);
  x.sum = *reinterpret_cast<const float2 *> (xf + AMK_MVC_REC_SUMS - AMK_MVC_REC_SCALES);
  return x;
}

/* acc + the lane's 64 values of the block times x' (sub-blocks 2c, the low nibbles, and
 * 2c + 1, the high ones; each ds sum(q x') - dm sum(x')). The 6-bit scales and minimums
 * of sub-blocks 0..3 and 4..7 are unpacked four at a time, as whole words. */
template <uint32_t DT>
static __device__ __forceinline__ float
amk_mvc_dot (const uint4 (&v)[amk_mvc_type<DT>::LOADS], uint32_t c, const amk_mvc_x &x, float acc)
{
  constexpr uint32_t L = amk_mvc_type<DT>::LOADS;
  const uint4 h = v[0];
  const uint32_t scw = c < 2 ? h.y & 0x3f3f3f3fu : (h.w & 0x0f0f0f0fu) | ((h.y >> 2) & 0x30303030u);
  const uint32_t mnw = c < 2 ? h.z & 0x3f3f3f3fu : ((h.w >> 4) & 0x0f0f0f0fu) | ((h.z >> 2) & 0x30303030u);
  const uint32_t sh = 16 * (c & 1u); /* sub-block 2c's byte in the word */
  const float d = __half2float (__ushort_as_half ((unsigned short) (h.x & 0xffffu)));
  const float dmin = __half2float (__ushort_as_half ((unsigned short) (h.x >> 16)));
  const float2 sx = x.sx, sum = x.sum;
  int h0 = 0, l0 = 0, h1 = 0, l1 = 0;

#pragma unroll
  for (uint32_t i = 0; i < 2; i++)
    {
      const uint4 qv = v[L - 2 + i];
      const uint4 a0 = x.a[i][0], a1 = x.a[i][1], b0 = x.b[i][0], b1 = x.b[i][1];
      const uint32_t q[4] = { qv.x, qv.y, qv.z, qv.w };
      const uint32_t xa0[4] = { a0.x, a0.y, a0.z, a0.w }, xa1[4] = { a1.x, a1.y, a1.z, a1.w };
      const uint32_t xb0[4] = { b0.x, b0.y, b0.z, b0.w }, xb1[4] = { b1.x, b1.y, b1.z, b1.w };
      uint32_t f[4] = { 0, 0, 0, 0 };
      if constexpr (amk_mvc_type<DT>::Q5) /* the fifth bit of value 32 sub + j: bit sub of byte j */
        {
          const uint4 fv = v[1 + i];
          f[0] = fv.x >> (2 * c), f[1] = fv.y >> (2 * c), f[2] = fv.z >> (2 * c), f[3] = fv.w >> (2 * c);
        }
#pragma unroll
      for (uint32_t e = 0; e < 4; e++)
        {
          uint32_t a = q[e] & 0x0f0f0f0fu, b = (q[e] >> 4) & 0x0f0f0f0fu;
          if constexpr (amk_mvc_type<DT>::Q5)
            {
              a |= (f[e] & 0x01010101u) << 4;
              b |= (f[e] & 0x02020202u) << 3;
            }
          h0 = __dp4a ((int) a, (int) xa0[e], h0);
          l0 = __dp4a ((int) a, (int) xb0[e], l0);
          h1 = __dp4a ((int) b, (int) xa1[e], h1);
          l1 = __dp4a ((int) b, (int) xb1[e], l1);
        }
    }
  const float sc0 = (float) ((scw >> sh) & 0xffu), sc1 = (float) ((scw >> (sh + 8)) & 0xffu);
  const float mn0 = (float) ((mnw >> sh) & 0xffu), mn1 = (float) ((mnw >> (sh + 8)) & 0xffu);
  acc = fmaf (d * sc0 * sx.x, (float) (h0 * 128 + l0), acc);
  acc = fmaf (d * sc1 * sx.y, (float) (h1 * 128 + l1), acc);
  acc = fmaf (-dmin * mn0, sum.x, acc);
  return fmaf (-dmin * mn1, sum.y, acc);
}

/* Where the lane's next load is: item (row, slice) of the warp and its block's address. */
struct amk_mvc_walk {
  const unsigned char *p;
  uint32_t row, slice;
};

/* The lane's loads of the walk's item into v, then the walk moves to the next item (the
 * next slice: BLOCKS blocks on; past a row's last slice, `back` bytes more, to the next
 * row's first). Always issued: a lane with no block there (past the warp's rows, or past
 * the row's blocks in a last slice) loads the warp's first block instead and does not
 * use it. */
template <uint32_t DT, uint32_t R>
static __device__ __forceinline__ void
amk_mvc_issue (const unsigned char *w0, uint64_t step, uint32_t rows, uint32_t nb, uint32_t lb,
               uint32_t c, uint32_t S, int64_t back, amk_mvc_walk &nx,
               uint4 (&v)[R][amk_mvc_type<DT>::LOADS])
{
  constexpr uint32_t BLOCKS = amk_mvc_type<DT>::BLOCKS;
  const bool inrow = nx.slice * BLOCKS + lb < nb;

#pragma unroll
  for (uint32_t r = 0; r < R; r++)
    amk_mvc_load<DT> (nx.row + r < rows && inrow ? nx.p + r * step : w0, c, v[r]);
  nx.p += BLOCKS * amk_qb_bytes (DT);
  if (++nx.slice == S)
    {
      nx.slice = 0;
      nx.row += R;
      nx.p += back;
    }
}

/* Not inlined: its registers allocated apart from the ring pipelines beside it in
 * amk_mvq_run (the form measured; inlined into the scheduler, its loads in flight made
 * the scheduler spill).
 *
 * D slots of loads, unrolled by D: item t is summed from slot t % D, and that slot then
 * takes item t + D's loads. A slot is never copied: a copy of a register waits for its
 * load to land, and copying the slots along (a shift register) had been a third of the
 * loop's instructions. An item of R rows loads x' once for all of them: with R = 2 a
 * Q4_K row-slice takes a sixth fewer instructions. */
template <uint32_t DT, bool SPLIT, uint32_t R>
static __device__ __noinline__ void
amk_mvc_run (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
             float scale, int tid, int nt)
{
  constexpr uint32_t L = amk_mvc_type<DT>::LOADS, D = R == 2 ? 2 : amk_mvc_type<DT>::DEPTH;
  constexpr uint32_t BLOCKS = amk_mvc_type<DT>::BLOCKS;
  const uint32_t qb = amk_qb_bytes (DT);
  const uint32_t lane = (uint32_t) tid & 31, c = lane & 3u, lb = amk_mvc_lane_block<DT> (lane);
  const uint32_t w = (uint32_t) tid >> 5, nw = (uint32_t) nt >> 5;
  const unsigned char *xs = amk_dyn_smem + (uint32_t) nt * AMK_MATVEC_RING_BYTES_PER_THREAD;
  const uint32_t kn = ctx->esize;
  /* the warp's rows as the ring sees them (its stages aside) */
  const amk_mvq_stream st = amk_mvq_stream_of (ctx, DT, tid, nt);
  const uint32_t nb = st.nb, rows = st.rows, S = (nb + BLOCKS - 1) / BLOCKS;
  const uint32_t items = (rows + R - 1) / R * S;
  const int64_t back = (int64_t) (R * st.step) - (int64_t) S * BLOCKS * qb;
  /* the lane's record in the first slice, and its place there */
  const unsigned char *xr = xs + (lane >> 3) * AMK_MVC_REC_BYTES;
  const unsigned char *xq = xr + 16 * (lane & 7u), *xf = xr + AMK_MVC_REC_SCALES + 8 * (lane & 7u);

  uint4 slot[D][R][L];
  amk_mvc_walk next = { st.w + (uint64_t) lb * qb, 0, 0 };
#pragma unroll
  for (uint32_t d = 0; d < D; d++)
    amk_mvc_issue<DT, R> (st.w, st.step, rows, nb, lb, c, S, back, next, slot[d]);

  float acc[R];
#pragma unroll
  for (uint32_t r = 0; r < R; r++)
    acc[r] = 0.0f;
  uint32_t row = 0, slice = 0;
  for (uint32_t t = 0; t < items; t += D)
    {
#pragma unroll
      for (uint32_t d = 0; d < D; d++)
        {
          if (t + d >= items)
            break;
          const uint32_t b = slice * BLOCKS + lb;
          if constexpr (amk_mvc_type<DT>::Q8)
            {
              if (b < nb) /* nb is whole groups of 8: the lane has both blocks or neither */
                acc[0] = amk_mvc_dot_q8 (slot[d][0], c, xs, amk_mvc_q8_limb_bytes (kn), b, acc[0]);
            }
          else if constexpr (amk_mvc_type<DT>::Q6)
            acc[0] = amk_mvc_dot_q6 (slot[d][0], c, xs, kn, b, acc[0]); /* nb: whole groups of 8 */
          else if (b < nb)
            {
              const uint32_t xo = slice * (4 * AMK_MVC_REC_BYTES);
              const amk_mvc_x x = amk_mvc_load_x (xq + xo, xf + xo);
#pragma unroll
              for (uint32_t r = 0; r < R; r++)
                acc[r] = amk_mvc_dot<DT> (slot[d][r], c, x, acc[r]);
            }
          amk_mvc_issue<DT, R> (st.w, st.step, rows, nb, lb, c, S, back, next, slot[d]);
          if (++slice == S)
            {
#pragma unroll
              for (uint32_t r = 0; r < R; r++)
                {
                  if (row + r < rows)
                    amk_mv_end_row<SPLIT> (ctx, ins, buffers, w + (row + r) * nw, acc[r] * scale, lane);
                  acc[r] = 0.0f;
                }
              slice = 0;
              row += R;
            }
        }
    }
}

#endif /* AMK_OPS_MATVEC_COLUMNS_CUH */
