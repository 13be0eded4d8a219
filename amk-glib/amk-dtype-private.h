/* amk-dtype-private.h: element sizes and scalar conversions shared by the verifier and
 * the CPU executor.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include "amk-types.h"

G_BEGIN_DECLS

gboolean    amk_dtype_is_valid      (guint dtype);
/* bytes per element; 0 for a block-quantized type */
guint       amk_dtype_size          (AmkDType dtype);
/* A block-quantized type's values and bytes per block; FALSE for the others. */
gboolean    amk_dtype_block         (AmkDType dtype, guint *values, guint *bytes);
/* The values a matrix row of dtype is a whole number of, and split-K slices too: 16
 * bytes of a plain type (the GPU's vector loads), a block of a quantized one. */
guint       amk_dtype_row_step      (AmkDType dtype);
/* The bytes n values of dtype take (n a whole number of blocks for a block type). */
guint64     amk_dtype_bytes         (AmkDType dtype, guint64 n);
/* Decodes values [first, first + n) of a block-quantized buffer at base to floats: whole
 * blocks (first and n multiples of the block), exactly as GGUF's reference decodes them. */
void        amk_dtype_dequantize    (AmkDType dtype, const guint8 *base, guint64 first,
                                     guint64 n, float *out);
const char *amk_dtype_name          (AmkDType dtype);
float       amk_bf16_to_float       (guint16 v);
guint16     amk_float_to_bf16       (float f);
float       amk_f16_to_float        (guint16 v);
guint16     amk_float_to_f16        (float f);

/* Loads element `index` of a buffer of `dtype` as float; stores a float rounded to it. */
float       amk_dtype_load          (AmkDType dtype, const guint8 *base, guint64 index);
void        amk_dtype_store         (AmkDType dtype, guint8 *base, guint64 index, float value);

G_END_DECLS
