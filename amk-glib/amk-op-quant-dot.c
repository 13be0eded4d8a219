/* amk-op-quant-dot.c: the CPU executor's dot products of a block-quantized matrix's rows
 * (MATVEC, MATMUL): one order of sums for both ops, and Q8_0, Q5_0, Q5_1, Q4_K, Q5_K and
 * Q6_K rows decoded in registers.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>

#include "amk-op-private.h"
#include "amk-dtype-private.h"
#include "amk-dequant-private.h"
#include "amk-dequant-x86-private.h"

/* The dot products of a quantized matrix's decoded row: 32 partial sums, sum s over the
 * columns c = s (mod 32) in order with fused multiply-adds (four 8-lane accumulators,
 * enough to hide the latency of one row's chain), then added in a fixed order. MATVEC
 * and MATMUL both sum so, whatever the vector width. */
#define QUANT_SUM(a0, a1, a2, a3, out) \
  G_STMT_START { \
    const v8sf t_ = ((a0) + (a1)) + ((a2) + (a3)); \
    (out) = ((t_[0] + t_[4]) + (t_[2] + t_[6])) + ((t_[1] + t_[5]) + (t_[3] + t_[7])); \
  } G_STMT_END

/* One row's four groups of eight columns c .. c + 32 added into its accumulators. */
#define QUANT_ROW(FMAV, xr, c, w0, w1, w2, w3, a0, a1, a2, a3) \
  G_STMT_START { \
    v8sf v0_, v1_, v2_, v3_; \
    memcpy (&v0_, (xr) + (c), 32); \
    memcpy (&v1_, (xr) + (c) + 8, 32); \
    memcpy (&v2_, (xr) + (c) + 16, 32); \
    memcpy (&v3_, (xr) + (c) + 24, 32); \
    FMAV (a0, v0_, w0); \
    FMAV (a1, v1_, w1); \
    FMAV (a2, v2_, w2); \
    FMAV (a3, v3_, w3); \
  } G_STMT_END

/* One row of x, or two (named accumulators: an array indexed by row stays in memory). */
#define QUANT_DOTS(FMAV) \
  G_STMT_START { \
    v8sf a0 = { 0 }, a1 = { 0 }, a2 = { 0 }, a3 = { 0 }; \
    v8sf b0 = { 0 }, b1 = { 0 }, b2 = { 0 }, b3 = { 0 }; \
    const float *x0 = x[0], *x1 = x[nx - 1]; \
    for (gint32 c = 0; c < n; c += 32) \
      { \
        v8sf w0, w1, w2, w3; \
        memcpy (&w0, w + c, 32); \
        memcpy (&w1, w + c + 8, 32); \
        memcpy (&w2, w + c + 16, 32); \
        memcpy (&w3, w + c + 24, 32); \
        QUANT_ROW (FMAV, x0, c, w0, w1, w2, w3, a0, a1, a2, a3); \
        if (nx > 1) \
          QUANT_ROW (FMAV, x1, c, w0, w1, w2, w3, b0, b1, b2, b3); \
      } \
    QUANT_SUM (a0, a1, a2, a3, out[0]); \
    if (nx > 1) \
      QUANT_SUM (b0, b1, b2, b3, out[1]); \
  } G_STMT_END

#define FMAV_LANES(acc, a, b) \
  G_STMT_START { \
    for (guint l_ = 0; l_ < 8; l_++) \
      (acc)[l_] = fmaf ((a)[l_], (b)[l_], (acc)[l_]); \
  } G_STMT_END

static void
quant_dots_lanes (const float *w, const float *const *x, guint nx, gint32 n, float *out)
{
  QUANT_DOTS (FMAV_LANES);
}

#if AMK_CPU_X86_FMA
#define FMAV_X86(acc, a, b) ((acc) = __builtin_ia32_vfmaddps256 ((a), (b), (acc)))

__attribute__ ((target ("avx2,fma")))
static void
quant_dots_x86 (const float *w, const float *const *x, guint nx, gint32 n, float *out)
{
  QUANT_DOTS (FMAV_X86);
}
#endif

void
amk_cpu_quant_dots (const float *w, const float *const *x, guint nx, gint32 n, float *out)
{
  g_return_if_fail (nx >= 1 && nx <= AMK_CPU_QUANT_ROWS && n % 32 == 0);
#if AMK_CPU_X86_FMA
  if (amk_cpu_has_fma ())
    {
      quant_dots_x86 (w, x, nx, n, out);
      return;
    }
#endif
  quant_dots_lanes (w, x, nx, n, out);
}

#if AMK_CPU_X86_FMA
/* A block's f16 scale at p: F16C converts as amk_f16_to_float() does, but for NaNs (it
 * quiets them). */
__attribute__ ((target ("f16c")))
static inline float
f16_scale (const guint8 *p)
{
  guint16 h;

  memcpy (&h, p, 2);
  h = GUINT16_FROM_LE (h);
  return (h & 0x7c00) != 0x7c00 ? _cvtsh_ss (h) : amk_f16_to_float (h);
}

/* A row's dot product without the decoded row in memory, over blocks of SUBS sub-blocks
 * of 32 values: SETUP once per block, SUB (s) per sub-block, DECODE8 (s, g) its values
 * 8 g .. 8 g + 8, each rounded as the decoder rounds it; then the same four accumulators
 * and order as QUANT_DOTS. */
#define BLOCK_DOT(BYTES, SUBS, SETUP, SUB, DECODE8) \
  G_STMT_START { \
    __m256 acc[4] = { _mm256_setzero_ps (), _mm256_setzero_ps (), _mm256_setzero_ps (), _mm256_setzero_ps () }; \
    v8sf a0, a1, a2, a3; \
    for (gint32 c = 0; c < n; c += 32 * (SUBS), blocks += (BYTES)) \
      { \
        SETUP; \
        for (guint s = 0; s < (SUBS); s++) \
          { \
            SUB (s); \
            for (guint g = 0; g < 4; g++) \
              acc[g] = _mm256_fmadd_ps (_mm256_loadu_ps (x + c + 32 * s + 8 * g), DECODE8 (s, g), acc[g]); \
          } \
      } \
    memcpy (&a0, &acc[0], 32); \
    memcpy (&a1, &acc[1], 32); \
    memcpy (&a2, &acc[2], 32); \
    memcpy (&a3, &acc[3], 32); \
    QUANT_SUM (a0, a1, a2, a3, out); \
  } G_STMT_END
/* blocks of one sub-block (32 values) */
#define NO_SUB(s) (void) (s)

/* Q8_0: q d */
#define Q8_0_SETUP const __m256 d = _mm256_set1_ps (f16_scale (blocks))
#define Q8_0_DECODE8(s, g) \
  _mm256_mul_ps (_mm256_cvtepi32_ps (_mm256_cvtepi8_epi32 (_mm_loadl_epi64 ((const __m128i *) (blocks + 2 + 8 * (g))))), d)
/* Q5_0: d (q - 16) */
#define Q5_0_SETUP const __m256 d = _mm256_set1_ps (f16_scale (blocks))
#define Q5_0_DECODE8(s, g) \
  _mm256_mul_ps (d, _mm256_cvtepi32_ps (_mm256_sub_epi32 (amk_five_bits8_avx2 (blocks + 2, blocks + 6, 8 * (g)), \
                                                          _mm256_set1_epi32 (16))))
/* Q5_1: d q + m */
#define Q5_1_SETUP const __m256 d = _mm256_set1_ps (f16_scale (blocks)), m = _mm256_set1_ps (f16_scale (blocks + 2))
#define Q5_1_DECODE8(s, g) \
  _mm256_add_ps (_mm256_mul_ps (d, _mm256_cvtepi32_ps (amk_five_bits8_avx2 (blocks + 4, blocks + 8, 8 * (g)))), m)

/* Q4_K and Q5_K: (d sc) q - dmin m per sub-block of 32; Q6_K: (d sc) (q - 32), a scale
 * per 16 values */
#define K45_SETUP \
  const float d = f16_scale (blocks), dmin = f16_scale (blocks + 2); \
  guint8 sc[8], mn[8]; \
  amk_scales_mins_k (blocks + 4, sc, mn)
#define K45_SUB(s) \
  const __m256 ds = _mm256_set1_ps (d * (float) sc[s]), dm = _mm256_set1_ps (dmin * (float) mn[s])
#define Q4_K_DECODE8(s, g) \
  _mm256_sub_ps (_mm256_mul_ps (ds, _mm256_cvtepi32_ps (amk_q4_k_ints8_avx2 (blocks, 32 * (s) + 8 * (g)))), dm)
#define Q5_K_DECODE8(s, g) \
  _mm256_sub_ps (_mm256_mul_ps (ds, _mm256_cvtepi32_ps (amk_q5_k_ints8_avx2 (blocks, 32 * (s) + 8 * (g)))), dm)
#define Q6_K_SETUP const float d = f16_scale (blocks + 208)
#define Q6_K_SUB(s) \
  const __m256 ds0 = _mm256_set1_ps (d * (float) (gint8) blocks[192 + 2 * (s)]), \
               ds1 = _mm256_set1_ps (d * (float) (gint8) blocks[193 + 2 * (s)])
#define Q6_K_DECODE8(s, g) \
  _mm256_mul_ps ((g) < 2 ? ds0 : ds1, _mm256_cvtepi32_ps (amk_q6_k_ints8_avx2 (blocks, 32 * (s) + 8 * (g))))

/* FALSE for a type without a decoder here */
__attribute__ ((target ("avx2,fma,f16c")))
static gboolean
block_dot_x86 (AmkDType dtype, const guint8 *blocks, const float *x, gint32 n, float *result)
{
  float out;

  switch (dtype)
    {
    case AMK_DTYPE_Q8_0:
      BLOCK_DOT (34, 1, Q8_0_SETUP, NO_SUB, Q8_0_DECODE8);
      break;
    case AMK_DTYPE_Q5_0:
      BLOCK_DOT (22, 1, Q5_0_SETUP, NO_SUB, Q5_0_DECODE8);
      break;
    case AMK_DTYPE_Q5_1:
      BLOCK_DOT (24, 1, Q5_1_SETUP, NO_SUB, Q5_1_DECODE8);
      break;
    case AMK_DTYPE_Q4_K:
      BLOCK_DOT (144, 8, K45_SETUP, K45_SUB, Q4_K_DECODE8);
      break;
    case AMK_DTYPE_Q5_K:
      BLOCK_DOT (176, 8, K45_SETUP, K45_SUB, Q5_K_DECODE8);
      break;
    case AMK_DTYPE_Q6_K:
      BLOCK_DOT (210, 8, Q6_K_SETUP, Q6_K_SUB, Q6_K_DECODE8);
      break;
    default:
      return FALSE;
    }
  *result = out;
  return TRUE;
}
#endif

gboolean
amk_cpu_block_dot (AmkDType dtype, const guint8 *blocks, const float *x, gint32 n, float *out)
{
#if AMK_CPU_X86_FMA
  if (amk_cpu_has_fma () && __builtin_cpu_supports ("f16c"))
    return block_dot_x86 (dtype, blocks, x, n, out);
#endif
  return FALSE;
}
