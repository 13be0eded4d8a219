/* amk-dequant.c: ggml's block-quantized tensor types as floats. Each block is decoded
 * with the arithmetic of the format's numpy reference (gguf-py's quants.py), in the same
 * float32 operations and order, so the values are bit for bit that reference's;
 * tests/data/quants.gguf holds its output for random blocks of every type here.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>

#include "amk-dequant-private.h"
#include "amk-dtype-private.h"

/* The decoders the CPU executor runs for every weight read (Q8_0, Q5_0, Q5_1 and the K
 * types) have AVX2 versions, chosen at run time; their element-wise arithmetic gives the
 * same bits (no fused multiply-adds: the project builds with -ffp-contract=off). */
#include "amk-dequant-x86-private.h"

static float
f16_at (const guint8 *p)
{
  return amk_f16_to_float ((guint16) (p[0] | (p[1] << 8)));
}

/* 32 elements: f16 d, then 32 int8; x = q d. */
static void
block_q8_0_plain (const guint8 *p, float *out)
{
  const float d = f16_at (p);

  for (guint j = 0; j < 32; j++)
    out[j] = (float) (gint8) p[2 + j] * d;
}

#if AMK_DEQUANT_X86
/* The same products, eight at a time (each one rounded as the plain loop rounds it). */
__attribute__ ((target ("avx2")))
static void
block_q8_0_avx2 (const guint8 *p, float *out)
{
  const __m256 d = _mm256_set1_ps (f16_at (p));

  for (guint j = 0; j < 32; j += 8)
    {
      const __m128i q = _mm_loadl_epi64 ((const __m128i *) (p + 2 + j));

      _mm256_storeu_ps (out + j, _mm256_mul_ps (_mm256_cvtepi32_ps (_mm256_cvtepi8_epi32 (q)), d));
    }
}
#endif

/* 32 elements: f16 d, 16 bytes whose low nibbles are elements 0..15 and high nibbles
 * 16..31; x = (q - 8) d. */
static void
block_q4_0 (const guint8 *p, float *out)
{
  const float d = f16_at (p);

  for (guint j = 0; j < 16; j++)
    {
      out[j] = (float) ((p[2 + j] & 0x0f) - 8) * d;
      out[j + 16] = (float) ((p[2 + j] >> 4) - 8) * d;
    }
}

/* 32 elements: f16 d, f16 m, nibbles as Q4_0; x = q d + m. */
static void
block_q4_1 (const guint8 *p, float *out)
{
  const float d = f16_at (p), m = f16_at (p + 2);

  for (guint j = 0; j < 16; j++)
    {
      out[j] = (float) (p[4 + j] & 0x0f) * d + m;
      out[j + 16] = (float) (p[4 + j] >> 4) * d + m;
    }
}

/* Q5_0 and Q5_1's 5-bit values: nibbles as Q4_0 from qs, the fifth bit of element j is
 * bit j of the little-endian 32-bit qh. */
static void
five_bits (const guint8 *qh_bytes, const guint8 *qs, guint8 q[32])
{
  const guint32 qh = (guint32) qh_bytes[0] | ((guint32) qh_bytes[1] << 8) |
                     ((guint32) qh_bytes[2] << 16) | ((guint32) qh_bytes[3] << 24);

  for (guint j = 0; j < 16; j++)
    {
      q[j] = (guint8) ((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4));
      q[j + 16] = (guint8) ((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    }
}

/* 32 elements: f16 d, qh, 16 bytes of nibbles; x = (q - 16) d. */
static void
block_q5_0_plain (const guint8 *p, float *out)
{
  const float d = f16_at (p);
  guint8 q[32];

  five_bits (p + 2, p + 6, q);
  for (guint j = 0; j < 32; j++)
    out[j] = d * (float) ((gint) q[j] - 16);
}

/* 32 elements: f16 d, f16 m, qh, 16 bytes of nibbles; x = d q + m. */
static void
block_q5_1_plain (const guint8 *p, float *out)
{
  const float d = f16_at (p), m = f16_at (p + 2);
  guint8 q[32];

  five_bits (p + 4, p + 8, q);
  for (guint j = 0; j < 32; j++)
    out[j] = d * (float) q[j] + m;
}

/* The K-quants: 256 elements in sub-blocks of 16 or 32, each with its own scale (and
 * minimum) in a few bits, scaled by the block's f16 d (and dmin). Their low bits come
 * in groups of 32 bytes that hold 2, 4 or 8 elements each: element g * 32 * k + s * 32
 * + j is byte g * 32 + j of the group, shifted by s times the width. */

/* 256 elements: 16 scale bytes (low nibble: scale, high: minimum of a sub-block of 16),
 * 64 bytes of 2-bit values, f16 d, f16 dmin; x = (d sc) q - dmin m. */
static void
block_q2_k (const guint8 *p, float *out)
{
  const guint8 *scales = p, *qs = p + 16;
  const float d = f16_at (p + 80), dmin = f16_at (p + 82);

  for (guint e = 0; e < 256; e++)
    {
      const guint h = e / 128, s = e % 128 / 32, j = e % 32, sub = e / 16;
      const float dl = d * (float) (scales[sub] & 0x0f);
      const float ml = dmin * (float) (scales[sub] >> 4);
      const float q = (float) ((qs[h * 32 + j] >> (2 * s)) & 3);

      out[e] = dl * q - ml;
    }
}

/* 256 elements: 32 bytes of high bits (element b * 32 + j: bit b of byte j; a set bit
 * means no offset), 64 bytes of 2-bit low values as Q2_K, 12 bytes of 6-bit scales
 * (biased by 32) for the 16 sub-blocks, f16 d; x = (d sc) (q - 4 [high bit clear]). */
static void
block_q3_k (const guint8 *p, float *out)
{
  const guint8 *hmask = p, *qs = p + 32, *sc = p + 96;
  const float d = f16_at (p + 108);
  float dl[16];

  for (guint i = 0; i < 16; i++)
    {
      const guint low = i < 8 ? sc[i] & 0x0f : sc[i - 8] >> 4;
      const guint high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;

      dl[i] = d * (float) ((gint) (low | (high << 4)) - 32);
    }
  for (guint e = 0; e < 256; e++)
    {
      const guint h = e / 128, s = e % 128 / 32, j = e % 32;
      const gint low = (qs[h * 32 + j] >> (2 * s)) & 3;
      const gint offset = ((hmask[j] >> (e / 32)) & 1) ? 0 : 4;

      out[e] = dl[e / 16] * (float) (low - offset);
    }
}

/* 256 elements: f16 d, f16 dmin, 12 bytes of scales and minimums, 128 bytes of
 * nibbles (element c * 64 + s * 32 + j: nibble s of byte c * 32 + j);
 * x = (d sc) q - dmin m. */
static void
block_q4_k_plain (const guint8 *p, float *out)
{
  const float d = f16_at (p), dmin = f16_at (p + 2);
  const guint8 *qs = p + 16;
  guint8 sc[8], mn[8];

  amk_scales_mins_k (p + 4, sc, mn);
  for (guint e = 0; e < 256; e++)
    {
      const guint c = e / 64, s = e % 64 / 32, j = e % 32, sub = e / 32;
      const float ds = d * (float) sc[sub], dm = dmin * (float) mn[sub];

      out[e] = ds * (float) ((qs[c * 32 + j] >> (4 * s)) & 0x0f) - dm;
    }
}

/* 256 elements: as Q4_K with 32 bytes of fifth bits before the nibbles (element b * 32
 * + j: bit b of byte j). */
static void
block_q5_k_plain (const guint8 *p, float *out)
{
  const float d = f16_at (p), dmin = f16_at (p + 2);
  const guint8 *qh = p + 16, *qs = p + 48;
  guint8 sc[8], mn[8];

  amk_scales_mins_k (p + 4, sc, mn);
  for (guint e = 0; e < 256; e++)
    {
      const guint c = e / 64, s = e % 64 / 32, j = e % 32, sub = e / 32;
      const float ds = d * (float) sc[sub], dm = dmin * (float) mn[sub];
      const guint q = ((qs[c * 32 + j] >> (4 * s)) & 0x0f) | (((qh[j] >> sub) & 1u) << 4);

      out[e] = ds * (float) q - dm;
    }
}

/* 256 elements: 128 bytes of low nibbles (element h * 128 + s * 64 + k: nibble s of byte
 * h * 64 + k), 64 bytes of 2-bit high parts (element h * 128 + s * 32 + j: bits 2 s of
 * byte h * 32 + j), 16 int8 scales of sub-blocks of 16, f16 d; x = (d sc) (q - 32). */
static void
block_q6_k_plain (const guint8 *p, float *out)
{
  const guint8 *ql = p, *qh = p + 128;
  const gint8 *scales = (const gint8 *) (p + 192);
  const float d = f16_at (p + 208);

  for (guint e = 0; e < 256; e++)
    {
      const guint h = e / 128, r = e % 128;
      const guint low = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
      const guint high = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
      const float ds = d * (float) scales[e / 16];

      out[e] = ds * (float) ((gint) (low | (high << 4)) - 32);
    }
}

#if AMK_DEQUANT_X86
/* The K types eight values at a time in AVX2: the same products and differences, each
 * rounded as the plain loops round it. q holds eight integers: out = ds q (- dm, where
 * the type has minimums: subtracting a zero is no no-op for signed zeros, so it is
 * never skipped). */
__attribute__ ((target ("avx2")))
static inline void
scale8_avx2 (__m256i q, float ds, const float *dm, float *out)
{
  const __m256 v = _mm256_mul_ps (_mm256_set1_ps (ds), _mm256_cvtepi32_ps (q));

  _mm256_storeu_ps (out, dm != NULL ? _mm256_sub_ps (v, _mm256_set1_ps (*dm)) : v);
}

__attribute__ ((target ("avx2")))
static void
block_q5_0_avx2 (const guint8 *p, float *out)
{
  const float d = f16_at (p);

  for (guint j = 0; j < 32; j += 8)
    scale8_avx2 (_mm256_sub_epi32 (amk_five_bits8_avx2 (p + 2, p + 6, j), _mm256_set1_epi32 (16)),
                 d, NULL, out + j);
}

__attribute__ ((target ("avx2")))
static void
block_q5_1_avx2 (const guint8 *p, float *out)
{
  const __m256 d = _mm256_set1_ps (f16_at (p)), m = _mm256_set1_ps (f16_at (p + 2));

  /* d q + m: a product, then a sum, each rounded as the plain loop rounds it */
  for (guint j = 0; j < 32; j += 8)
    _mm256_storeu_ps (out + j, _mm256_add_ps (_mm256_mul_ps (d, _mm256_cvtepi32_ps (amk_five_bits8_avx2 (p + 4, p + 8, j))), m));
}

__attribute__ ((target ("avx2")))
static void
block_q4_k_avx2 (const guint8 *p, float *out)
{
  const float d = f16_at (p), dmin = f16_at (p + 2);
  guint8 sc[8], mn[8];

  amk_scales_mins_k (p + 4, sc, mn);
  for (guint sub = 0; sub < 8; sub++)
    {
      const float ds = d * (float) sc[sub], dm = dmin * (float) mn[sub];

      for (guint j = 0; j < 32; j += 8)
        scale8_avx2 (amk_q4_k_ints8_avx2 (p, sub * 32 + j), ds, &dm, out + sub * 32 + j);
    }
}

__attribute__ ((target ("avx2")))
static void
block_q5_k_avx2 (const guint8 *p, float *out)
{
  const float d = f16_at (p), dmin = f16_at (p + 2);
  guint8 sc[8], mn[8];

  amk_scales_mins_k (p + 4, sc, mn);
  for (guint sub = 0; sub < 8; sub++)
    {
      const float ds = d * (float) sc[sub], dm = dmin * (float) mn[sub];

      for (guint j = 0; j < 32; j += 8)
        scale8_avx2 (amk_q5_k_ints8_avx2 (p, sub * 32 + j), ds, &dm, out + sub * 32 + j);
    }
}

__attribute__ ((target ("avx2")))
static void
block_q6_k_avx2 (const guint8 *p, float *out)
{
  const gint8 *scales = (const gint8 *) (p + 192);
  const float d = f16_at (p + 208);

  for (guint e = 0; e < 256; e += 8)
    scale8_avx2 (amk_q6_k_ints8_avx2 (p, e), d * (float) scales[e / 16], NULL, out + e);
}
#endif

/* The decoders with an AVX2 version, which runs where the processor has it. */
#if AMK_DEQUANT_X86
#define DECODER(name) \
  static void \
  name (const guint8 *p, float *out) \
  { \
    if (__builtin_cpu_supports ("avx2")) \
      name##_avx2 (p, out); \
    else \
      name##_plain (p, out); \
  }
#else
#define DECODER(name) \
  static void \
  name (const guint8 *p, float *out) \
  { \
    name##_plain (p, out); \
  }
#endif

DECODER (block_q8_0)
DECODER (block_q5_0)
DECODER (block_q5_1)
DECODER (block_q4_k)
DECODER (block_q5_k)
DECODER (block_q6_k)

static const struct {
  guint block, bytes;
  void (*decode) (const guint8 *p, float *out);
} formats[] = {
  [AMK_MODEL_TENSOR_Q8_0] = { 32, 34, block_q8_0 },
  [AMK_MODEL_TENSOR_Q4_0] = { 32, 18, block_q4_0 },
  [AMK_MODEL_TENSOR_Q4_1] = { 32, 20, block_q4_1 },
  [AMK_MODEL_TENSOR_Q5_0] = { 32, 22, block_q5_0 },
  [AMK_MODEL_TENSOR_Q5_1] = { 32, 24, block_q5_1 },
  [AMK_MODEL_TENSOR_Q2_K] = { 256, 84, block_q2_k },
  [AMK_MODEL_TENSOR_Q3_K] = { 256, 110, block_q3_k },
  [AMK_MODEL_TENSOR_Q4_K] = { 256, 144, block_q4_k },
  [AMK_MODEL_TENSOR_Q5_K] = { 256, 176, block_q5_k },
  [AMK_MODEL_TENSOR_Q6_K] = { 256, 210, block_q6_k },
};

gboolean
amk_dequant_block_size (AmkModelTensorType type,
                        guint             *elements,
                        guint             *bytes)
{
  if ((guint) type >= G_N_ELEMENTS (formats) || formats[type].decode == NULL)
    return FALSE;
  *elements = formats[type].block;
  *bytes = formats[type].bytes;
  return TRUE;
}

gboolean
amk_dequant_to_bf16 (AmkModelTensorType  type,
                     const guint8       *data,
                     gsize               n,
                     guint16            *out)
{
  float values[256];
  guint block, bytes;

  if (!amk_dequant_block_size (type, &block, &bytes) || n % block != 0)
    return FALSE;
  for (gsize b = 0; b < n / block; b++)
    {
      formats[type].decode (data + b * bytes, values);
      for (guint j = 0; j < block; j++)
        out[b * block + j] = amk_float_to_bf16 (values[j]);
    }
  return TRUE;
}

gboolean
amk_dequant_to_float (AmkModelTensorType  type,
                      const guint8       *data,
                      gsize               n,
                      float              *out)
{
  guint block, bytes;

  if (!amk_dequant_block_size (type, &block, &bytes) || n % block != 0)
    return FALSE;
  for (gsize b = 0; b < n / block; b++)
    formats[type].decode (data + b * bytes, out + b * block);
  return TRUE;
}
