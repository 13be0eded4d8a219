/* amk-dequant-private.h: ggml's block-quantized tensor types (Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1 and the K-quants Q2_K to Q6_K) decoded to floats as the format's reference does.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

#include "amk-model-spec-private.h"

G_BEGIN_DECLS

/* The elements and bytes of one block of `type`; FALSE if it is not block-quantized. */
gboolean amk_dequant_block_size (AmkModelTensorType type,
                                 guint             *elements,
                                 guint             *bytes);

/* Decodes n values (a whole number of blocks) of a block-quantized `type` to bf16,
 * rounded to nearest even; FALSE for another type or a partial block. */
gboolean amk_dequant_to_bf16    (AmkModelTensorType  type,
                                 const guint8       *data,
                                 gsize               n,
                                 guint16            *out);
/* The same values as floats, unrounded (what the quantizers' round trip is measured
 * against, and what a conversion to another type starts from). */
gboolean amk_dequant_to_float   (AmkModelTensorType  type,
                                 const guint8       *data,
                                 gsize               n,
                                 float              *out);

/* Q4_K and Q5_K's eight 6-bit scales and minimums (sub-blocks of 32) in 12 bytes:
 * bytes 0..3 and 4..7 hold scales and minimums 0..3 in their low 6 bits and the top
 * 2 bits of 4..7 in their high bits; bytes 8..11 hold the low nibbles of 4..7. */
static inline void
amk_scales_mins_k (const guint8 *b, guint8 sc[8], guint8 mn[8])
{
  for (guint i = 0; i < 4; i++)
    {
      sc[i] = b[i] & 0x3f;
      mn[i] = b[4 + i] & 0x3f;
      sc[4 + i] = (guint8) ((b[8 + i] & 0x0f) | ((b[i] >> 2) & 0x30));
      mn[4 + i] = (guint8) ((b[8 + i] >> 4) | ((b[4 + i] >> 2) & 0x30));
    }
}

G_END_DECLS
