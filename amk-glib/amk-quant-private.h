/* amk-quant-private.h: floats to ggml's tensor types (the quantizers `amk quantize`
 * writes with) and any stored type back to floats.
 *
 * The quantizers write F32, F16, BF16, Q8_0, Q5_0, Q5_1 and the K-quants Q4_K, Q5_K and
 * Q6_K in the block layouts amk-dequant.c reads. They refuse NaN and infinite values,
 * and values too large for the format (an F16 element, or a block scale beyond f16's
 * range), with a
 * GError rather than writing a block that decodes to garbage: a weight like that is a
 * broken checkpoint, and clamping it would hide that.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include "amk-model-spec-private.h"

G_BEGIN_DECLS

/* Whether amk_quantize() writes `type`. */
gboolean  amk_quant_can_write  (AmkModelTensorType   type);

/* Encodes n floats as `type` into out, which holds amk_model_tensor_type_bytes (type, n)
 * bytes; n must be a whole number of the type's blocks. `name` (the tensor's, for
 * messages) and the first offending element are named in the error:
 * AMK_MODEL_ERROR_CORRUPT for a NaN or an infinity, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE
 * for a value beyond the format's range. */
gboolean  amk_quantize         (AmkModelTensorType   type,
                                const float         *x,
                                gsize                n,
                                guint8              *out,
                                const char          *name,
                                GError             **error);

/* Decodes n values stored as `type` (F32, F16, BF16 or a block type amk-dequant.c
 * reads; Q types in whole blocks) to floats. FALSE for a type it cannot decode. */
gboolean  amk_quant_to_float   (AmkModelTensorType   type,
                                const guint8        *data,
                                gsize                n,
                                float               *out);

/* The format's name as ggml spells it ("Q4_K"); "?" for OTHER. */
const char *amk_quant_type_name (AmkModelTensorType  type);

G_END_DECLS
