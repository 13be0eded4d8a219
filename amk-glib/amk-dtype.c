/* amk-dtype.c: element sizes and scalar conversions (round to nearest even, like the GPU).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "amk-dtype-private.h"
#include "amk-dequant-private.h"

gboolean
amk_dtype_is_valid (guint dtype)
{
  return dtype <= AMK_DTYPE_Q5_1;
}

gboolean
amk_dtype_block (AmkDType dtype, guint *values, guint *bytes)
{
  static const guint sizes[][2] = { { 32, 34 }, { 256, 144 }, { 256, 176 }, { 256, 210 },
                                    { 32, 22 }, { 32, 24 } };

  if (dtype < AMK_DTYPE_Q8_0 || dtype > AMK_DTYPE_Q5_1)
    return FALSE;
  *values = sizes[dtype - AMK_DTYPE_Q8_0][0];
  *bytes = sizes[dtype - AMK_DTYPE_Q8_0][1];
  return TRUE;
}

guint
amk_dtype_row_step (AmkDType dtype)
{
  guint values, bytes;

  if (amk_dtype_block (dtype, &values, &bytes))
    return values;
  return amk_dtype_size (dtype) != 0 ? 16 / amk_dtype_size (dtype) : 16;
}

guint64
amk_dtype_bytes (AmkDType dtype, guint64 n)
{
  guint values, bytes;

  if (amk_dtype_block (dtype, &values, &bytes))
    return n / values * bytes;
  return n * amk_dtype_size (dtype);
}

static AmkModelTensorType
block_tensor_type (AmkDType dtype)
{
  switch (dtype)
    {
    case AMK_DTYPE_Q8_0:
      return AMK_MODEL_TENSOR_Q8_0;
    case AMK_DTYPE_Q4_K:
      return AMK_MODEL_TENSOR_Q4_K;
    case AMK_DTYPE_Q5_K:
      return AMK_MODEL_TENSOR_Q5_K;
    case AMK_DTYPE_Q6_K:
      return AMK_MODEL_TENSOR_Q6_K;
    case AMK_DTYPE_Q5_0:
      return AMK_MODEL_TENSOR_Q5_0;
    case AMK_DTYPE_Q5_1:
      return AMK_MODEL_TENSOR_Q5_1;
    default:
      return AMK_MODEL_TENSOR_OTHER;
    }
}

void
amk_dtype_dequantize (AmkDType dtype, const guint8 *base, guint64 first, guint64 n, float *out)
{
  guint values, bytes;

  if (!amk_dtype_block (dtype, &values, &bytes) ||
      !amk_dequant_to_float (block_tensor_type (dtype), base + first / values * bytes, n, out))
    g_return_if_reached ();
}

guint
amk_dtype_size (AmkDType dtype)
{
  switch (dtype)
    {
    case AMK_DTYPE_F32:
    case AMK_DTYPE_I32:
      return 4;
    case AMK_DTYPE_F16:
    case AMK_DTYPE_BF16:
      return 2;
    case AMK_DTYPE_U8:
      return 1;
    default:
      return 0;
    }
}

const char *
amk_dtype_name (AmkDType dtype)
{
  static const char *names[] = { "f32", "f16", "bf16", "i32", "u8", "q8_0", "q4_k", "q5_k", "q6_k",
                                 "q5_0", "q5_1" };
  return amk_dtype_is_valid (dtype) ? names[dtype] : "?";
}

static guint32
float_bits (float f)
{
  guint32 u;
  memcpy (&u, &f, sizeof u);
  return u;
}

static float
bits_float (guint32 u)
{
  float f;
  memcpy (&f, &u, sizeof f);
  return f;
}

float
amk_bf16_to_float (guint16 v)
{
  return bits_float ((guint32) v << 16);
}

guint16
amk_float_to_bf16 (float f)
{
  guint32 u = float_bits (f);
  if (isnan (f))
    return (guint16) ((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (guint16) (u >> 16);
}

float
amk_f16_to_float (guint16 h)
{
  guint32 sign = (guint32) (h & 0x8000) << 16;
  guint32 exp = (h >> 10) & 0x1f;
  guint32 mant = h & 0x3ff;

  if (exp == 0)
    {
      /* zero or subnormal: mant * 2^-24 */
      float f = ldexpf ((float) mant, -24);
      return sign ? -f : f;
    }
  if (exp == 31)
    return bits_float (sign | 0x7f800000 | (mant << 13));
  return bits_float (sign | ((exp + 112) << 23) | (mant << 13));
}

guint16
amk_float_to_f16 (float f)
{
  guint32 u = float_bits (f);
  guint16 sign = (u >> 16) & 0x8000;
  float a = fabsf (f);

  if (isnan (f))
    return sign | 0x7e00;
  if (a >= 65520.0f)  /* rounds to infinity */
    return sign | 0x7c00;
  if (a < 6.103515625e-05f)
    {
      /* subnormal range: multiples of 2^-24, rint rounds half to even */
      float m = rintf (ldexpf (a, 24));
      return sign | (guint16) m;
    }
  {
    guint32 au = float_bits (a);
    guint32 exp = (au >> 23) - 112;
    guint32 mant = au & 0x7fffff;
    guint32 h = (exp << 10) | (mant >> 13);
    guint32 rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
      h++;
    return sign | (guint16) h;
  }
}

/* Like the GPU's cvt.rzi.s32.f32: truncate, saturate, NaN to zero. */
static gint32
float_to_i32_saturating (float value)
{
  if (isnan (value))
    return 0;
  if (value >= 2147483648.0f)
    return G_MAXINT32;
  if (value <= -2147483648.0f)
    return G_MININT32;
  return (gint32) value;
}

float
amk_dtype_load (AmkDType dtype, const guint8 *base, guint64 index)
{
  switch (dtype)
    {
    case AMK_DTYPE_F32:
      {
        float v;
        memcpy (&v, base + index * 4, 4);
        return v;
      }
    case AMK_DTYPE_F16:
      {
        guint16 v;
        memcpy (&v, base + index * 2, 2);
        return amk_f16_to_float (v);
      }
    case AMK_DTYPE_BF16:
      {
        guint16 v;
        memcpy (&v, base + index * 2, 2);
        return amk_bf16_to_float (v);
      }
    case AMK_DTYPE_I32:
      {
        gint32 v;
        memcpy (&v, base + index * 4, 4);
        return (float) v;
      }
    case AMK_DTYPE_U8:
      return base[index];
    default:
      return 0.0f;
    }
}

void
amk_dtype_store (AmkDType dtype, guint8 *base, guint64 index, float value)
{
  switch (dtype)
    {
    case AMK_DTYPE_F32:
      memcpy (base + index * 4, &value, 4);
      break;
    case AMK_DTYPE_F16:
      {
        guint16 v = amk_float_to_f16 (value);
        memcpy (base + index * 2, &v, 2);
      }
      break;
    case AMK_DTYPE_BF16:
      {
        guint16 v = amk_float_to_bf16 (value);
        memcpy (base + index * 2, &v, 2);
      }
      break;
    case AMK_DTYPE_I32:
      {
        gint32 v = float_to_i32_saturating (value);
        memcpy (base + index * 4, &v, 4);
      }
      break;
    case AMK_DTYPE_U8:
      base[index] = (guint8) float_to_i32_saturating (value);
      break;
    default:
      break;
    }
}
