/* amk-quant.c: floats to ggml's tensor types, and back.
 *
 * Q8_0 is a plain absolute-maximum scale per block of 32. Q5_0 (a signed step, the
 * extreme on the side with more levels) and Q5_1 (a minimum and a step) try steps
 * around the one that spans the block and keep the one of least squared error. The
 * K-quants fit each sub-block first (Q4_K and Q5_K: a step and an offset, x ≈ step q -
 * min; Q6_K: a signed step, x ≈ step q) by trying step sizes around the one that spans
 * the sub-block's range, each refitted by least squares and scored by the squared error
 * of the values it rounds to; then the sub-blocks' steps are stored in 6 or 8 bits
 * against the block's f16 scale, and every value is rounded again against the step it
 * will really be decoded with. The layouts are amk-dequant.c's, which decodes them bit
 * for bit as gguf-py does.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <math.h>
#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-glib.h"
#include "amk-dequant-private.h"
#include "amk-dtype-private.h"
#include "amk-quant-private.h"

#define QK_K          256
/* the step sizes a sub-block's fit tries: nmax + k * FIT_DELTA for |k| <= FIT_STEPS
 * levels across its range (fewer levels: no value clipped; more: the extremes clipped
 * for a finer grid inside) */
#define FIT_STEPS     10
#define FIT_DELTA     0.1f

const char *
amk_quant_type_name (AmkModelTensorType type)
{
  static const char * const names[] = {
    [AMK_MODEL_TENSOR_F32] = "F32", [AMK_MODEL_TENSOR_F16] = "F16",
    [AMK_MODEL_TENSOR_BF16] = "BF16", [AMK_MODEL_TENSOR_Q8_0] = "Q8_0",
    [AMK_MODEL_TENSOR_Q4_0] = "Q4_0", [AMK_MODEL_TENSOR_Q4_1] = "Q4_1",
    [AMK_MODEL_TENSOR_Q5_0] = "Q5_0", [AMK_MODEL_TENSOR_Q5_1] = "Q5_1",
    [AMK_MODEL_TENSOR_Q2_K] = "Q2_K", [AMK_MODEL_TENSOR_Q3_K] = "Q3_K",
    [AMK_MODEL_TENSOR_Q4_K] = "Q4_K", [AMK_MODEL_TENSOR_Q5_K] = "Q5_K",
    [AMK_MODEL_TENSOR_Q6_K] = "Q6_K",
  };

  if ((guint) type < G_N_ELEMENTS (names) && names[type] != NULL)
    return names[type];
  return "?";
}

gboolean
amk_quant_can_write (AmkModelTensorType type)
{
  switch (type)
    {
    case AMK_MODEL_TENSOR_F32:
    case AMK_MODEL_TENSOR_F16:
    case AMK_MODEL_TENSOR_BF16:
    case AMK_MODEL_TENSOR_Q8_0:
    case AMK_MODEL_TENSOR_Q5_0:
    case AMK_MODEL_TENSOR_Q5_1:
    case AMK_MODEL_TENSOR_Q4_K:
    case AMK_MODEL_TENSOR_Q5_K:
    case AMK_MODEL_TENSOR_Q6_K:
      return TRUE;
    default:
      return FALSE;
    }
}

static void
put16 (guint8 *p, guint16 v)
{
  p[0] = (guint8) (v & 0xff);
  p[1] = (guint8) (v >> 8);
}

static guint16
get16 (const guint8 *p)
{
  return (guint16) (p[0] | (p[1] << 8));
}

/* Stores `value` (>= 0), the largest magnitude over `levels`, as a block's f16 scale,
 * rounded up rather than down where rounding down would clip that magnitude; *stored
 * is the scale the decoder will read. FALSE when it is beyond f16's range. */
static gboolean
store_scale (guint8 *p, float amax, float levels, float *stored)
{
  guint16 h = amk_float_to_f16 (amax / levels);

  if (amk_f16_to_float (h) * levels < amax && (h & 0x7fff) < 0x7c00)
    h++;
  *stored = amk_f16_to_float (h);
  put16 (p, h);
  return isfinite (*stored);
}

/* Clamped as a float first: a tiny candidate step of the scale search can give a value
 * past the int range. NaN goes to lo. Inside the range (|v| < 2^22) adding and taking
 * away 1.5 * 2^23 rounds to the nearest integer, ties to even, as lrintf does, without
 * its call in the fits' inner loops. */
static inline gint
round_clamp (float v, gint lo, gint hi)
{
  const float big = 12582912.0f;
  float r;

  if (!(v > (float) lo))
    return lo;
  if (v >= (float) hi)
    return hi;
  r = (v + big) - big;
  return CLAMP ((gint) r, lo, hi);
}

/* ---- Q8_0 ------------------------------------------------------------------------- */

/* 32 values: f16 d = max |x| / 127, then q = round (x / d) as int8. */
static gboolean
block_q8_0 (const float *x, guint8 *p)
{
  float amax = 0.0f, d;

  for (guint j = 0; j < 32; j++)
    amax = MAX (amax, fabsf (x[j]));
  if (!store_scale (p, amax, 127.0f, &d))
    return FALSE;
  for (guint j = 0; j < 32; j++)
    p[2 + j] = (guint8) (gint8) (d > 0.0f ? round_clamp (x[j] / d, -127, 127) : 0);
  return TRUE;
}

/* ---- Q5_0 and Q5_1 ------------------------------------------------------------------ */

/* 32 values of 5 bits: the low nibbles of elements j and j + 16 share byte j of qs, the
 * fifth bits are the bits of the little-endian 32-bit qh. */
static void
store_five_bits (const guint8 q[32], guint8 *qh, guint8 *qs)
{
  guint32 high = 0;

  for (guint j = 0; j < 16; j++)
    qs[j] = (guint8) ((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
  for (guint j = 0; j < 32; j++)
    high |= (guint32) (q[j] >> 4) << j;
  put16 (qh, (guint16) (high & 0xffff));
  put16 (qh + 2, (guint16) (high >> 16));
}

/* The squared error of 32 values stored as d (q + offset), q in lo .. hi. */
static float
step_error (const float *x, float d, float offset, gint lo, gint hi)
{
  float err = 0.0f;

  for (guint j = 0; j < 32; j++)
    {
      const float q = d != 0.0f ? (float) round_clamp ((x[j] - offset) / d, lo, hi) : 0.0f;
      const float e = x[j] - (d * q + offset);

      err += e * e;
    }
  return err;
}

/* A block's step: of the steps that put the largest magnitude `amax` at `levels` + k *
 * FIT_DELTA levels (|k| <= FIT_STEPS; more levels clip it for a finer grid), each
 * stored as an f16 (with `sign`), the one of least squared error over q in lo .. hi. */
static gboolean
best_step (const float *x, float amax, float levels, float sign, float offset, gint lo, gint hi,
           guint8 *p, float *d)
{
  float best = INFINITY;
  guint16 best_h = 0;

  for (gint k = -FIT_STEPS; k <= FIT_STEPS; k++)
    {
      const float n = levels + (float) k * FIT_DELTA;
      const guint16 h = amk_float_to_f16 (amax / n);
      const float step = sign * amk_f16_to_float (h);
      float err;

      if (!isfinite (step))
        continue;
      err = step_error (x, step, offset, lo, hi);
      if (err < best)
        {
          best = err;
          best_h = h;
        }
    }
  if (!isfinite (best))
    return FALSE;
  *d = sign * amk_f16_to_float (best_h);
  put16 (p, (guint16) (best_h | (sign < 0.0f ? 0x8000 : 0)));
  return TRUE;
}

/* 32 values, x ≈ d (q - 16): d's sign puts the value of largest magnitude on the side
 * with more levels (-16), and its size is the best of the steps around that value over
 * 16 levels. */
static gboolean
block_q5_0 (const float *x, guint8 *p)
{
  float big = 0.0f, d = 0.0f;
  guint8 q[32];

  for (guint j = 0; j < 32; j++)
    if (fabsf (x[j]) > fabsf (big))
      big = x[j];
  if (big == 0.0f)
    put16 (p, 0);
  else if (!best_step (x, fabsf (big), 16.0f, big > 0.0f ? -1.0f : 1.0f, 0.0f, -16, 15, p, &d))
    return FALSE;
  for (guint j = 0; j < 32; j++)
    q[j] = (guint8) (d != 0.0f ? round_clamp (x[j] / d, -16, 15) + 16 : 16);
  store_five_bits (q, p + 2, p + 6);
  return TRUE;
}

/* 32 values, x ≈ d q + m: m the minimum as an f16, d the best of the steps around the
 * range above m over 31 levels. */
static gboolean
block_q5_1 (const float *x, guint8 *p)
{
  float lo = x[0], hi = x[0], m, d = 0.0f;
  guint8 q[32];
  guint16 mh;

  for (guint j = 1; j < 32; j++)
    {
      lo = MIN (lo, x[j]);
      hi = MAX (hi, x[j]);
    }
  mh = amk_float_to_f16 (lo);
  m = amk_f16_to_float (mh);
  if (!isfinite (m))
    return FALSE;
  if (hi - m <= 0.0f)
    put16 (p, 0);
  else if (!best_step (x, hi - m, 31.0f, 1.0f, m, 0, 31, p, &d))
    return FALSE;
  put16 (p + 2, mh);
  for (guint j = 0; j < 32; j++)
    q[j] = (guint8) (d > 0.0f ? round_clamp ((x[j] - m) / d, 0, 31) : 0);
  store_five_bits (q, p + 4, p + 8);
  return TRUE;
}

/* ---- the sub-block fits -------------------------------------------------------------- */

/* Squared error of x ≈ step q - min with q the nearest level in 0..nmax. */
static float
affine_error (const float *x, guint n, guint nmax, float step, float min)
{
  float err = 0.0f;

  for (guint i = 0; i < n; i++)
    {
      const gint q = step > 0.0f ? round_clamp ((x[i] + min) / step, 0, (gint) nmax) : 0;
      const float e = step * (float) q - min - x[i];

      err += e * e;
    }
  return err;
}

/* Fits x ≈ step q - min with q in 0..nmax and min >= 0 (the offset of Q4_K and Q5_K is
 * subtracted, and stored unsigned). */
static void
fit_affine (const float *x, guint n, guint nmax, float *step_out, float *min_out)
{
  float lo = 0.0f, hi = x[0], best_step, best_min, best_err;

  for (guint i = 0; i < n; i++)
    {
      lo = MIN (lo, x[i]);
      hi = MAX (hi, x[i]);
    }
  if (hi <= lo)
    {
      /* every value is lo (<= 0): the offset alone gives it exactly */
      *step_out = 0.0f;
      *min_out = -lo;
      return;
    }
  best_step = (hi - lo) / (float) nmax;
  best_min = -lo;
  best_err = affine_error (x, n, nmax, best_step, best_min);
  for (gint k = -FIT_STEPS; k <= FIT_STEPS; k++)
    {
      const float iscale = ((float) nmax + FIT_DELTA * (float) k) / (hi - lo);
      float sq = 0.0f, sqq = 0.0f, sx = 0.0f, sqx = 0.0f, det, a, b, err;

      for (guint i = 0; i < n; i++)
        {
          const float q = (float) round_clamp ((x[i] - lo) * iscale, 0, (gint) nmax);

          sq += q;
          sqq += q * q;
          sx += x[i];
          sqx += q * x[i];
        }
      /* least squares for x ≈ a q + b over these q; b must stay <= 0 */
      det = (float) n * sqq - sq * sq;
      if (det <= 0.0f)
        continue;
      a = ((float) n * sqx - sq * sx) / det;
      b = (sqq * sx - sq * sqx) / det;
      if (b > 0.0f)
        {
          b = 0.0f;
          a = sqx / sqq;
        }
      if (!(a > 0.0f))
        continue;
      err = affine_error (x, n, nmax, a, -b);
      if (err < best_err)
        {
          best_err = err;
          best_step = a;
          best_min = -b;
        }
    }
  *step_out = best_step;
  *min_out = best_min;
}

/* Squared error of x ≈ step q with q the nearest level in -32..31. */
static float
signed_error (const float *x, guint n, float step)
{
  float err = 0.0f;

  for (guint i = 0; i < n; i++)
    {
      const gint q = step != 0.0f ? round_clamp (x[i] / step, -32, 31) : 0;
      const float e = step * (float) q - x[i];

      err += e * e;
    }
  return err;
}

/* Fits x ≈ step q with q in -32..31 (Q6_K): the step's sign puts the value of largest
 * magnitude at whichever end of the asymmetric range fits it best. */
static float
fit_signed (const float *x, guint n)
{
  float amax = 0.0f, v = 0.0f, best_step, best_err;

  for (guint i = 0; i < n; i++)
    if (fabsf (x[i]) > amax)
      {
        amax = fabsf (x[i]);
        v = x[i];
      }
  if (amax == 0.0f)
    return 0.0f;
  best_step = -v / 32.0f;
  best_err = signed_error (x, n, best_step);
  for (gint end = 0; end < 2; end++)
    for (gint k = -FIT_STEPS; k <= FIT_STEPS; k++)
      {
        /* v lands on level -(32 + ...) or +(31 + ...) */
        const float levels = (end == 0 ? -32.0f : 31.0f) + (end == 0 ? -1.0f : 1.0f) * FIT_DELTA * (float) k;
        const float iscale = levels / v;
        float sqq = 0.0f, sqx = 0.0f, a, err;

        for (guint i = 0; i < n; i++)
          {
            const float q = (float) round_clamp (x[i] * iscale, -32, 31);

            sqq += q * q;
            sqx += q * x[i];
          }
        if (sqq <= 0.0f)
          continue;
        a = sqx / sqq;
        err = signed_error (x, n, a);
        if (err < best_err)
          {
            best_err = err;
            best_step = a;
          }
      }
  return best_step;
}

/* ---- Q4_K and Q5_K ----------------------------------------------------------------- */

/* The 6-bit scales and minimums of 8 sub-blocks in 12 bytes, as
 * amk_scales_mins_k() (amk-dequant-private.h) unpacks them. */
static void
pack_scales_mins (const guint8 sc[8], const guint8 mn[8], guint8 *b)
{
  for (guint i = 0; i < 4; i++)
    {
      b[i] = (guint8) (sc[i] | ((sc[4 + i] >> 4) << 6));
      b[4 + i] = (guint8) (mn[i] | ((mn[4 + i] >> 4) << 6));
      b[8 + i] = (guint8) ((sc[4 + i] & 0x0f) | ((mn[4 + i] & 0x0f) << 4));
    }
}

/* 256 values as Q4_K (nmax 15) or Q5_K (nmax 31): f16 d and dmin at p, the packed
 * scales at p + 4; the levels (0..nmax) in q. */
static gboolean
block_k_affine (const float *x, guint nmax, guint8 *p, guint8 q[QK_K])
{
  float steps[8], mins[8], max_step = 0.0f, max_min = 0.0f, d, dmin;
  guint8 sc[8], mn[8];

  for (guint s = 0; s < 8; s++)
    {
      fit_affine (x + s * 32, 32, nmax, &steps[s], &mins[s]);
      max_step = MAX (max_step, steps[s]);
      max_min = MAX (max_min, mins[s]);
    }
  if (!store_scale (p, max_step, 63.0f, &d) || !store_scale (p + 2, max_min, 63.0f, &dmin))
    return FALSE;
  for (guint s = 0; s < 8; s++)
    {
      float ds, dm;

      /* a sub-block with any range keeps at least one step: never worse than none,
       * since its values may still all round to level 0 */
      sc[s] = (guint8) (d > 0.0f ? round_clamp (steps[s] / d, steps[s] > 0.0f ? 1 : 0, 63) : 0);
      mn[s] = (guint8) (dmin > 0.0f ? round_clamp (mins[s] / dmin, 0, 63) : 0);
      ds = d * (float) sc[s];
      dm = dmin * (float) mn[s];
      for (guint j = 0; j < 32; j++)
        q[s * 32 + j] = (guint8) (ds > 0.0f ? round_clamp ((x[s * 32 + j] + dm) / ds, 0, (gint) nmax) : 0);
    }
  pack_scales_mins (sc, mn, p + 4);
  return TRUE;
}

/* Element c * 64 + s * 32 + j is nibble s of byte c * 32 + j. */
static void
pack_nibbles (const guint8 q[QK_K], guint8 *qs)
{
  for (guint c = 0; c < 4; c++)
    for (guint j = 0; j < 32; j++)
      qs[c * 32 + j] = (guint8) ((q[c * 64 + j] & 0x0f) | ((q[c * 64 + 32 + j] & 0x0f) << 4));
}

static gboolean
block_q4_k (const float *x, guint8 *p)
{
  guint8 q[QK_K];

  if (!block_k_affine (x, 15, p, q))
    return FALSE;
  pack_nibbles (q, p + 16);
  return TRUE;
}

/* As Q4_K with a fifth bit per element: bit s of byte j for element s * 32 + j. */
static gboolean
block_q5_k (const float *x, guint8 *p)
{
  guint8 q[QK_K];

  if (!block_k_affine (x, 31, p, q))
    return FALSE;
  memset (p + 16, 0, 32);
  for (guint e = 0; e < QK_K; e++)
    p[16 + e % 32] |= (guint8) (((q[e] >> 4) & 1u) << (e / 32));
  pack_nibbles (q, p + 48);
  return TRUE;
}

/* ---- Q6_K ------------------------------------------------------------------------- */

/* 256 values: 16 sub-blocks of 16 with int8 scales against the block's f16 d; levels
 * q + 32 split in low nibbles (ql) and high 2 bits (qh), as amk-dequant.c reads them. */
static gboolean
block_q6_k (const float *x, guint8 *p)
{
  guint8 *ql = p, *qh = p + 128;
  gint8 *scales = (gint8 *) (p + 192);
  float steps[16], max_step = 0.0f, d;
  guint8 q[QK_K];

  for (guint s = 0; s < 16; s++)
    {
      steps[s] = fit_signed (x + s * 16, 16);
      max_step = MAX (max_step, fabsf (steps[s]));
    }
  if (!store_scale (p + 208, max_step, 127.0f, &d))
    return FALSE;
  for (guint s = 0; s < 16; s++)
    {
      gint sc = d > 0.0f ? round_clamp (steps[s] / d, -127, 127) : 0;
      float ds;

      if (sc == 0 && steps[s] != 0.0f && d > 0.0f)
        sc = steps[s] > 0.0f ? 1 : -1;
      scales[s] = (gint8) sc;
      ds = d * (float) sc;
      for (guint j = 0; j < 16; j++)
        q[s * 16 + j] = (guint8) ((ds != 0.0f ? round_clamp (x[s * 16 + j] / ds, -32, 31) : 0) + 32);
    }
  memset (qh, 0, 64);
  for (guint h = 0; h < 2; h++)
    {
      for (guint k = 0; k < 64; k++)
        ql[h * 64 + k] = (guint8) ((q[h * 128 + k] & 0x0f) | ((q[h * 128 + 64 + k] & 0x0f) << 4));
      for (guint r = 0; r < 128; r++)
        qh[h * 32 + r % 32] |= (guint8) (((q[h * 128 + r] >> 4) & 3u) << (2 * (r / 32)));
    }
  return TRUE;
}

/* ---- the entry points ---------------------------------------------------------------- */

static gboolean
out_of_range (GError **error, const char *name, AmkModelTensorType type, gsize index, float value)
{
  g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE,
               _("Cannot quantize the tensor “%s” to %s: its element %zu (%g) is beyond the "
                 "range of that format"),
               name, amk_quant_type_name (type), index, (double) value);
  return FALSE;
}

/* The element of largest magnitude in x[0..n). */
static gsize
largest (const float *x, gsize n)
{
  gsize at = 0;

  for (gsize i = 1; i < n; i++)
    if (fabsf (x[i]) > fabsf (x[at]))
      at = i;
  return at;
}

gboolean
amk_quantize (AmkModelTensorType   type,
              const float         *x,
              gsize                n,
              guint8              *out,
              const char          *name,
              GError             **error)
{
  gboolean (*block) (const float *x, guint8 *p) = NULL;
  guint block_n = 1, block_bytes = 4;

  g_return_val_if_fail (amk_quant_can_write (type), FALSE);
  g_return_val_if_fail (x != NULL || n == 0, FALSE);
  g_return_val_if_fail (out != NULL || n == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (name == NULL)
    name = "?";
  for (gsize i = 0; i < n; i++)
    if (!isfinite (x[i]))
      {
        g_set_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT,
                     _("Cannot quantize the tensor “%s”: its element %zu is %s"), name, i,
                     isnan (x[i]) ? _("not a number") : _("infinite"));
        return FALSE;
      }

  switch (type)
    {
    case AMK_MODEL_TENSOR_F32:
      for (gsize i = 0; i < n; i++)
        {
          guint32 u;

          memcpy (&u, &x[i], 4);
          u = GUINT32_TO_LE (u);
          memcpy (out + 4 * i, &u, 4);
        }
      return TRUE;
    case AMK_MODEL_TENSOR_F16:
    case AMK_MODEL_TENSOR_BF16:
      for (gsize i = 0; i < n; i++)
        {
          const guint16 h = type == AMK_MODEL_TENSOR_F16 ? amk_float_to_f16 (x[i])
                                                         : amk_float_to_bf16 (x[i]);
          const float back = type == AMK_MODEL_TENSOR_F16 ? amk_f16_to_float (h)
                                                          : amk_bf16_to_float (h);

          if (!isfinite (back))
            return out_of_range (error, name, type, i, x[i]);
          put16 (out + 2 * i, h);
        }
      return TRUE;
    case AMK_MODEL_TENSOR_Q8_0:
      block = block_q8_0;
      block_n = 32;
      block_bytes = 34;
      break;
    case AMK_MODEL_TENSOR_Q5_0:
      block = block_q5_0;
      block_n = 32;
      block_bytes = 22;
      break;
    case AMK_MODEL_TENSOR_Q5_1:
      block = block_q5_1;
      block_n = 32;
      block_bytes = 24;
      break;
    case AMK_MODEL_TENSOR_Q4_K:
      block = block_q4_k;
      block_n = QK_K;
      block_bytes = 144;
      break;
    case AMK_MODEL_TENSOR_Q5_K:
      block = block_q5_k;
      block_n = QK_K;
      block_bytes = 176;
      break;
    case AMK_MODEL_TENSOR_Q6_K:
      block = block_q6_k;
      block_n = QK_K;
      block_bytes = 210;
      break;
    default:
      g_assert_not_reached ();
    }
  g_return_val_if_fail (n % block_n == 0, FALSE);

  for (gsize b = 0; b < n / block_n; b++)
    {
      const float *xb = x + b * block_n;
      guint8 *p = out + b * block_bytes;

      if (!block (xb, p))
        {
          const gsize at = largest (xb, block_n);

          return out_of_range (error, name, type, b * block_n + at, xb[at]);
        }
    }
  return TRUE;
}

gboolean
amk_quant_to_float (AmkModelTensorType   type,
                    const guint8        *data,
                    gsize                n,
                    float               *out)
{
  g_return_val_if_fail (data != NULL || n == 0, FALSE);
  g_return_val_if_fail (out != NULL || n == 0, FALSE);

  switch (type)
    {
    case AMK_MODEL_TENSOR_F32:
      for (gsize i = 0; i < n; i++)
        {
          guint32 u;

          memcpy (&u, data + 4 * i, 4);
          u = GUINT32_FROM_LE (u);
          memcpy (&out[i], &u, 4);
        }
      return TRUE;
    case AMK_MODEL_TENSOR_F16:
      for (gsize i = 0; i < n; i++)
        out[i] = amk_f16_to_float (get16 (data + 2 * i));
      return TRUE;
    case AMK_MODEL_TENSOR_BF16:
      for (gsize i = 0; i < n; i++)
        out[i] = amk_bf16_to_float (get16 (data + 2 * i));
      return TRUE;
    default:
      return amk_dequant_to_float (type, data, n, out);
    }
}
