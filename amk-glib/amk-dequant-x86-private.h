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
#endif
