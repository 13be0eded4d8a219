/* quant-blocks.cuh: the block-quantized weight types on the device (GGUF's layouts, see
 * docs/abi.md and amk-glib/amk-dequant.c, the reference these decoders match).
 *
 * A block of V values (32 or 256) is read in parts of 8 consecutive values. Every type's
 * part is an affine map of 8 small integers q: value = ds q - dm, with ds and dm the
 * part's scale and offset (dm = 0 where the type has none); 16 values (two parts) never
 * straddle a scale either. Three readers:
 *   amk_qb_decode8():      the 8 values, rounded exactly as the CPU reference rounds them
 *                          (EMBED's rows and MATMUL's weights, stored as 16-bit after);
 *   amk_qb_dot8():         sum of value * x over the part, as ds * sum (q x) - dm * sum (x):
 *                          one multiply-add per value (MATVEC's direct loads);
 *   amk_qb_dot16_limbs():  the same over 16 values with x' as int8 limbs: integer dot
 *                          products (MATVEC's ring, where the weights stream once and the
 *                          arithmetic must keep up with memory).
 * Integers become floats through the exponent of 2^23 (a byte permute and a subtraction,
 * both exact) rather than a conversion instruction, which runs at a quarter of the rate.
 *
 * A block starts on a 2-byte boundary (Q8_0: 34 bytes, Q6_K: 210); the readers load
 * 16-bit halves where a block may be only that aligned. Pointers may be generic
 * (global or shared memory).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_QUANT_BLOCKS_CUH
#define AMK_QUANT_BLOCKS_CUH

#include <stdint.h>
#include <cuda_fp16.h>

#include "amk-abi.h"

/* The block types the kernels read, as a mask of 1 << dtype. */
#define AMK_QB_MASK ((1u << AMK_ABI_DTYPE_Q8_0) | (1u << AMK_ABI_DTYPE_Q4_K) | \
                     (1u << AMK_ABI_DTYPE_Q5_K) | (1u << AMK_ABI_DTYPE_Q6_K) | \
                     (1u << AMK_ABI_DTYPE_Q5_0) | (1u << AMK_ABI_DTYPE_Q5_1))

static __device__ __forceinline__ bool
amk_qb_is_block (uint32_t dt)
{
  return dt < 32 && ((AMK_QB_MASK >> dt) & 1u) != 0;
}

/* Values per block (0: not a block type). */
static __device__ __forceinline__ uint32_t
amk_qb_values (uint32_t dt)
{
  switch (dt)
    {
    case AMK_ABI_DTYPE_Q8_0: case AMK_ABI_DTYPE_Q5_0: case AMK_ABI_DTYPE_Q5_1: return 32;
    case AMK_ABI_DTYPE_Q4_K: case AMK_ABI_DTYPE_Q5_K: case AMK_ABI_DTYPE_Q6_K: return 256;
    default: return 0;
    }
}

/* Bytes per block (0: not a block type). */
static __device__ __forceinline__ uint32_t
amk_qb_bytes (uint32_t dt)
{
  switch (dt)
    {
    case AMK_ABI_DTYPE_Q8_0: return 34;
    case AMK_ABI_DTYPE_Q5_0: return 22;
    case AMK_ABI_DTYPE_Q5_1: return 24;
    case AMK_ABI_DTYPE_Q4_K: return 144;
    case AMK_ABI_DTYPE_Q5_K: return 176;
    case AMK_ABI_DTYPE_Q6_K: return 210;
    default: return 0;
    }
}

/* ---- loads ---------------------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t
amk_qb_u16 (const unsigned char *p)
{
  return *reinterpret_cast<const uint16_t *> (p);
}

/* 4 bytes at a 2-byte aligned address, little-endian. */
static __device__ __forceinline__ uint32_t
amk_qb_u32 (const unsigned char *p)
{
  return amk_qb_u16 (p) | (amk_qb_u16 (p + 2) << 16);
}

static __device__ __forceinline__ float
amk_qb_f16 (const unsigned char *p)
{
  return __half2float (__ushort_as_half ((unsigned short) amk_qb_u16 (p)));
}

/* Byte i of w as a float, minus `bias` (2^23 + the integer subtracted): exact for the
 * results of every type (|q| < 2^8). */
static __device__ __forceinline__ float
amk_qb_byte (uint32_t w, uint32_t i, float bias)
{
  return __uint_as_float (__byte_perm (w, 0x4b000000u, 0x7650u | i)) - bias;
}

#define AMK_QB_2P23 8388608.0f

/* Whether the type has minimums (dm), over sub-blocks of 32 values. */
template <uint32_t DT>
struct amk_qb_has_min {
  static constexpr bool value = DT == AMK_ABI_DTYPE_Q4_K || DT == AMK_ABI_DTYPE_Q5_K ||
                                DT == AMK_ABI_DTYPE_Q5_1;
};

/* ---- a part: 8 integers, their scale and offset ------------------------------------------- */

/* Q4_K and Q5_K's scale and minimum of sub-block `sub` (of 8) from the 12 packed bytes. */
static __device__ __forceinline__ void
amk_qb_scale_min_k (const unsigned char *b, uint32_t sub, uint32_t *sc, uint32_t *mn)
{
  if (sub < 4)
    {
      *sc = b[sub] & 63u;
      *mn = b[4 + sub] & 63u;
    }
  else
    {
      *sc = (b[4 + sub] & 0x0fu) | ((b[sub - 4] >> 2) & 0x30u);
      *mn = (b[4 + sub] >> 4) | ((b[sub] >> 2) & 0x30u);
    }
}

/* Piece `part` of 4 NW values (values 4 NW part ..; NW = 2: a part, NW = 4: 16 values,
 * which never straddle a sub-block's scale) of the block at p as 4 NW signed bytes (NW
 * little-endian words), ds and dm: value i = ds q[i] - dm. The types' offsets (Q5_0's 16,
 * Q6_K's 32) are taken off bytewise, so every q is a signed byte. */
template <uint32_t DT, uint32_t NW = 2>
static __device__ __forceinline__ void
amk_qb_part_bytes (const unsigned char *p, uint32_t part, uint32_t (&w)[NW], float *ds, float *dm)
{
  static_assert (NW == 2 || NW == 4, "a part or a 16-value piece");
  const uint32_t e0 = part * 4 * NW;

  if (DT == AMK_ABI_DTYPE_Q8_0)
    {
      /* f16 d, 32 int8: value = q d */
#pragma unroll
      for (uint32_t h = 0; h < NW; h++)
        w[h] = amk_qb_u32 (p + 2 + e0 + 4 * h);
      *ds = amk_qb_f16 (p);
      *dm = 0.0f;
    }
  else if (DT == AMK_ABI_DTYPE_Q5_0 || DT == AMK_ABI_DTYPE_Q5_1)
    {
      /* f16 d (Q5_1: f16 m), 32 fifth bits, 16 bytes of nibbles (low: values 0..15,
       * high: 16..31); Q5_0: value = (q - 16) d, Q5_1: value = q d + m */
      const uint32_t o = DT == AMK_ABI_DTYPE_Q5_0 ? 2 : 4;
      const uint32_t qh = amk_qb_u32 (p + o) >> e0;
      const uint32_t j0 = e0 & 15u, s = e0 >> 4;
#pragma unroll
      for (uint32_t h = 0; h < NW; h++)
        {
          uint32_t v = (amk_qb_u32 (p + o + 4 + j0 + 4 * h) >> (4 * s)) & 0x0f0f0f0fu;
#pragma unroll
          for (uint32_t i = 0; i < 4; i++)
            v |= ((qh >> (4 * h + i)) & 1u) << (8 * i + 4);
          w[h] = DT == AMK_ABI_DTYPE_Q5_0 ? __vsub4 (v, 0x10101010u) : v;
        }
      *ds = amk_qb_f16 (p);
      *dm = DT == AMK_ABI_DTYPE_Q5_0 ? 0.0f : -amk_qb_f16 (p + 2);
    }
  else if (DT == AMK_ABI_DTYPE_Q4_K || DT == AMK_ABI_DTYPE_Q5_K)
    {
      /* f16 d, f16 dmin, 12 bytes of 6-bit scales and minimums, (Q5_K: 32 bytes of fifth
       * bits), 128 bytes of nibbles: value e = c 64 + s 32 + j is nibble s of byte
       * c 32 + j; value = (d sc) q - dmin mn of sub-block e / 32 */
      const uint32_t sub = e0 >> 5, c = e0 >> 6, s = sub & 1u, j = e0 & 31u;
      const unsigned char *qs = p + (DT == AMK_ABI_DTYPE_Q4_K ? 16 : 48) + c * 32 + j;
#pragma unroll
      for (uint32_t h = 0; h < NW; h++)
        {
          w[h] = (amk_qb_u32 (qs + 4 * h) >> (4 * s)) & 0x0f0f0f0fu;
          if (DT == AMK_ABI_DTYPE_Q5_K) /* fifth bit of value b 32 + j: bit b of byte j of qh */
            w[h] |= ((amk_qb_u32 (p + 16 + j + 4 * h) >> sub) & 0x01010101u) << 4;
        }
      uint32_t sc, mn;
      amk_qb_scale_min_k (p + 4, sub, &sc, &mn);
      *ds = amk_qb_f16 (p) * (float) sc;
      *dm = amk_qb_f16 (p + 2) * (float) mn;
    }
  else /* Q6_K */
    {
      /* 128 bytes of low nibbles (value h 128 + r: nibble r / 64 of byte h 64 + r % 64),
       * 64 bytes of 2-bit high parts (bits 2 (r / 32) of byte h 32 + r % 32), 16 int8
       * scales of sub-blocks of 16, f16 d; value = (d sc) (q - 32) */
      const uint32_t h = e0 >> 7, r = e0 & 127u;
      const unsigned char *ql = p + h * 64 + (r & 63u), *qh = p + 128 + h * 32 + (r & 31u);
      const uint32_t ls = 4 * (r >> 6), hs = 2 * (r >> 5);
#pragma unroll
      for (uint32_t i = 0; i < NW; i++)
        w[i] = __vsub4 (((amk_qb_u32 (ql + 4 * i) >> ls) & 0x0f0f0f0fu) |
                        (((amk_qb_u32 (qh + 4 * i) >> hs) & 0x03030303u) << 4), 0x20202020u);
      *ds = amk_qb_f16 (p + 208) * (float) (int8_t) p[192 + (e0 >> 4)];
      *dm = 0.0f;
    }
}

/* The same part's integers as floats (exact), with ds and dm. */
template <uint32_t DT>
static __device__ __forceinline__ void
amk_qb_part (const unsigned char *p, uint32_t part, float (&q)[8], float *ds, float *dm)
{
  uint32_t w[2];

  amk_qb_part_bytes<DT> (p, part, w, ds, dm);
#pragma unroll
  for (uint32_t i = 0; i < 4; i++)
    {
      q[i] = amk_qb_byte (w[0] ^ 0x80808080u, i, AMK_QB_2P23 + 128.0f);
      q[4 + i] = amk_qb_byte (w[1] ^ 0x80808080u, i, AMK_QB_2P23 + 128.0f);
    }
}

/* ---- the readers ------------------------------------------------------------------------ */

/* The 8 values, each rounded as the CPU reference rounds it (no fused multiply-add). */
template <uint32_t DT>
static __device__ __forceinline__ void
amk_qb_decode8 (const unsigned char *p, uint32_t part, float (&v)[8])
{
  float q[8], ds, dm;

  amk_qb_part<DT> (p, part, q, &ds, &dm);
#pragma unroll
  for (int i = 0; i < 8; i++)
    v[i] = __fsub_rn (__fmul_rn (ds, q[i]), dm);
}

/* acc + sum_i value_i x_i over the part. */
template <uint32_t DT>
static __device__ __forceinline__ float
amk_qb_dot8 (const unsigned char *p, uint32_t part, const float (&x)[8], float acc)
{
  float q[8], ds, dm, s = 0.0f, sx = 0.0f;

  amk_qb_part<DT> (p, part, q, &ds, &dm);
#pragma unroll
  for (int i = 0; i < 8; i++)
    {
      s = fmaf (q[i], x[i], s);
      if (amk_qb_has_min<DT>::value)
        sx += x[i];
    }
  acc = fmaf (ds, s, acc);
  return amk_qb_has_min<DT>::value ? fmaf (-dm, sx, acc) : acc;
}

/* acc + sum_i value_i x'_i over piece `piece` of 16 values, with x' as two int8 limbs,
 * x'_i = sx (128 hi_i + lo_i) (hi signed, lo in 0 .. 127: 15 bits with the group's scale
 * sx): integer dot products (dp4a) of the piece's bytes with each limb, then one
 * multiply-add (|128 sh + sl| < 2^25: the float conversion rounds by at most 2^-24 of it,
 * far below the limbs' step). A type with minimums takes dm sum(x') once per sub-block of
 * 32 (`sum`, on its first piece). Sixteen values a lane: one scale decode and two x' loads
 * per limb for twice the values of a part, and fewer dependent steps per byte. */
template <uint32_t DT>
static __device__ __forceinline__ float
amk_qb_dot16_limbs (const unsigned char *p, uint32_t piece, uint4 hi, uint4 lo, float sx, float sum,
                    float acc)
{
  uint32_t w[4];
  float ds, dm;

  amk_qb_part_bytes<DT, 4> (p, piece, w, &ds, &dm);
  const int sh = __dp4a ((int) w[0], (int) hi.x, __dp4a ((int) w[1], (int) hi.y,
                 __dp4a ((int) w[2], (int) hi.z, __dp4a ((int) w[3], (int) hi.w, 0))));
  const int sl = __dp4a ((int) w[0], (int) lo.x, __dp4a ((int) w[1], (int) lo.y,
                 __dp4a ((int) w[2], (int) lo.z, __dp4a ((int) w[3], (int) lo.w, 0))));
  acc = fmaf (ds * sx, (float) (sh * 128 + sl), acc);
  if (amk_qb_has_min<DT>::value && (piece & 1u) == 0)
    acc = fmaf (-dm, sum, acc);
  return acc;
}

/* amk_qb_decode8 for a dtype known only at run time (uniform over the warp). */
static __device__ __forceinline__ void
amk_qb_decode8_any (uint32_t dt, const unsigned char *p, uint32_t part, float (&v)[8])
{
  switch (dt)
    {
    case AMK_ABI_DTYPE_Q8_0: amk_qb_decode8<AMK_ABI_DTYPE_Q8_0> (p, part, v); break;
    case AMK_ABI_DTYPE_Q4_K: amk_qb_decode8<AMK_ABI_DTYPE_Q4_K> (p, part, v); break;
    case AMK_ABI_DTYPE_Q5_K: amk_qb_decode8<AMK_ABI_DTYPE_Q5_K> (p, part, v); break;
    case AMK_ABI_DTYPE_Q6_K: amk_qb_decode8<AMK_ABI_DTYPE_Q6_K> (p, part, v); break;
    case AMK_ABI_DTYPE_Q5_0: amk_qb_decode8<AMK_ABI_DTYPE_Q5_0> (p, part, v); break;
    default:                 amk_qb_decode8<AMK_ABI_DTYPE_Q5_1> (p, part, v); break;
    }
}

/* Values [8 c, 8 c + 8) of a row of block type dt starting at `row` (whole blocks). */
static __device__ __forceinline__ void
amk_qb_row8 (uint32_t dt, const unsigned char *row, uint32_t c, float (&v)[8])
{
  const uint32_t per = amk_qb_values (dt) / 8; /* parts per block */
  const uint32_t b = c / per;

  amk_qb_decode8_any (dt, row + (uint64_t) b * amk_qb_bytes (dt), c - b * per, v);
}

#endif /* AMK_QUANT_BLOCKS_CUH */
