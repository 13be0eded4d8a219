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
guint       amk_dtype_size          (AmkDType dtype);
const char *amk_dtype_name          (AmkDType dtype);
float       amk_bf16_to_float       (guint16 v);
guint16     amk_float_to_bf16       (float f);
float       amk_f16_to_float        (guint16 v);
guint16     amk_float_to_f16        (float f);

/* Loads element `index` of a buffer of `dtype` as float; stores a float rounded to it. */
float       amk_dtype_load          (AmkDType dtype, const guint8 *base, guint64 index);
void        amk_dtype_store         (AmkDType dtype, guint8 *base, guint64 index, float value);

G_END_DECLS
