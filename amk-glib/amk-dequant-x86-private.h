/* amk-dequant-x86-private.h: the AVX2 pieces that decode quantized blocks, shared by
 * the decoders (amk-dequant.c) and the CPU executor's in-register dot products
 * (amk-op-quant-dot.c), so that both round alike. Only where AMK_DEQUANT_X86 is 1.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define AMK_DEQUANT_X86 1
#else
#define AMK_DEQUANT_X86 0
#endif

#if AMK_DEQUANT_X86
/* bytes p[0 .. 8) as eight integers, shifted right by `shift` and masked */
__attribute__ ((target ("avx2")))
static inline __m256i
amk_bits8_avx2 (const guint8 *p, int shift, int mask)
{
  const __m256i v = _mm256_cvtepu8_epi32 (_mm_loadl_epi64 ((const __m128i *) p));

  return _mm256_and_si256 (_mm256_srl_epi32 (v, _mm_cvtsi32_si128 (shift)), _mm256_set1_epi32 (mask));
}

/* Q5_0 and Q5_1's eight values j .. j + 8 (j a multiple of 8): nibbles from qs (high
 * nibbles from element 16 on), the fifth bit from the little-endian 32-bit qh */
__attribute__ ((target ("avx2")))
static inline __m256i
amk_five_bits8_avx2 (const guint8 *qh_bytes, const guint8 *qs, guint j)
{
  const guint32 qh = (guint32) qh_bytes[0] | ((guint32) qh_bytes[1] << 8) |
                     ((guint32) qh_bytes[2] << 16) | ((guint32) qh_bytes[3] << 24);
  const __m256i shifts = _mm256_add_epi32 (_mm256_set1_epi32 ((int) j), _mm256_setr_epi32 (0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i high = _mm256_and_si256 (_mm256_srlv_epi32 (_mm256_set1_epi32 ((int) qh), shifts),
                                         _mm256_set1_epi32 (1));

  return _mm256_or_si256 (amk_bits8_avx2 (qs + j % 16, j < 16 ? 0 : 4, 0x0f), _mm256_slli_epi32 (high, 4));
}

/* The K types' integers of values e .. e + 8 (e a multiple of 8) of the 256-value block
 * at p: Q4_K's and Q5_K's q (sub-block e / 32: nibbles from p + 16, resp. p + 48, Q5_K's
 * fifth bit s of byte j from p + 16), Q6_K's q - 32 (values h * 128 + r: nibble r / 64
 * of byte h * 64 + r % 64, bits 2 (r / 32) of byte 128 + h * 32 + r % 32). */
__attribute__ ((target ("avx2")))
static inline __m256i
amk_q4_k_ints8_avx2 (const guint8 *p, guint e)
{
  const guint s = e / 32;

  return amk_bits8_avx2 (p + 16 + s / 2 * 32 + e % 32, (int) (4 * (s % 2)), 0x0f);
}

__attribute__ ((target ("avx2")))
static inline __m256i
amk_q5_k_ints8_avx2 (const guint8 *p, guint e)
{
  const guint s = e / 32;
  const __m256i low = amk_bits8_avx2 (p + 48 + s / 2 * 32 + e % 32, (int) (4 * (s % 2)), 0x0f);

  return _mm256_or_si256 (low, _mm256_slli_epi32 (amk_bits8_avx2 (p + 16 + e % 32, (int) s, 1), 4));
}

__attribute__ ((target ("avx2")))
static inline __m256i
amk_q6_k_ints8_avx2 (const guint8 *p, guint e)
{
  const guint h = e / 128, r = e % 128;
  const __m256i low = amk_bits8_avx2 (p + h * 64 + r % 64, (int) (4 * (r / 64)), 0x0f);
  const __m256i high = _mm256_slli_epi32 (amk_bits8_avx2 (p + 128 + h * 32 + r % 32, (int) (2 * (r / 32)), 3), 4);

  return _mm256_sub_epi32 (_mm256_or_si256 (low, high), _mm256_set1_epi32 (32));
}
#endif
