/* test-quant.c: the quantizers of amk-quant.c, measured through the library's own
 * decoder (amk-dequant.c, bit for bit gguf-py's): the round trip on random data of
 * several magnitudes against a bound per type, and odd blocks (all zeros, constants,
 * one huge outlier, negative only, tiny values); NaN, infinities and values beyond a
 * format's range are refused with a GError naming the element.
 *
 * The bounds: a uniform quantizer with L levels over a range R errs by R / (L √12) in
 * RMS. Gaussian data of unit σ spans about 4.1σ over a sub-block of 32 and 3.5σ over
 * 16, and Q8_0's levels span ±max|x| (about ±2.1σ over 32 values), so the expected
 * relative RMS errors are: Q8_0 4.2 / (254 √12) = 0.0048, Q6_K 3.5 / (63 √12) = 0.016,
 * Q5_0 (±max|x| too) 4.2 / (31 √12) = 0.039, Q5_1 and Q5_K 4.1 / (31 √12) = 0.038, Q4_K
 * 4.1 / (15 √12) = 0.079. Each bound leaves room for the scales' own rounding (6 bits
 * for Q4_K and Q5_K, 8 for Q6_K, f16 for every block): 0.01, 0.025, 0.05 and 0.1. F16 and BF16 round to nearest: half an ulp, 2^-11 and
 * 2^-8 relative to each element.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"
#include "amk-quant-private.h"
#include "amk-model-spec-private.h"

#define N_VALUES (64 * 256)

typedef struct {
  AmkModelTensorType type;
  double             bound;        /* relative RMS error on Gaussian data */
} Case;

static const Case cases[] = {
  { AMK_MODEL_TENSOR_Q8_0, 0.01 },
  { AMK_MODEL_TENSOR_Q6_K, 0.025 },
  { AMK_MODEL_TENSOR_Q5_0, 0.05 },
  { AMK_MODEL_TENSOR_Q5_1, 0.05 },
  { AMK_MODEL_TENSOR_Q5_K, 0.05 },
  { AMK_MODEL_TENSOR_Q4_K, 0.1 },
  { AMK_MODEL_TENSOR_F16, 0.0005 },
  { AMK_MODEL_TENSOR_BF16, 0.004 },
  { AMK_MODEL_TENSOR_F32, 0.0 },
};

static double
gaussian (GRand *rand)
{
  double u = g_rand_double_range (rand, 1e-12, 1.0), v = g_rand_double (rand);

  return sqrt (-2.0 * log (u)) * cos (2.0 * G_PI * v);
}

/* quantize then decode n values; asserts success */
static float *
round_trip (AmkModelTensorType type, const float *x, gsize n)
{
  g_autoptr(GError) error = NULL;
  gsize bytes = amk_model_tensor_type_bytes (type, n);
  g_autofree guint8 *q = g_malloc0 (MAX (bytes, 1));
  float *y = g_new0 (float, MAX (n, 1));

  g_assert_cmpuint (bytes, >, 0);
  g_assert_true (amk_quantize (type, x, n, q, "test", &error));
  g_assert_no_error (error);
  g_assert_true (amk_quant_to_float (type, q, n, y));
  return y;
}

static double
relative_rms (const float *x, const float *y, gsize n)
{
  double err = 0.0, ref = 0.0;

  for (gsize i = 0; i < n; i++)
    {
      err += ((double) y[i] - x[i]) * ((double) y[i] - x[i]);
      ref += (double) x[i] * x[i];
    }
  return ref > 0.0 ? sqrt (err / ref) : sqrt (err);
}

/* Gaussian data at 1e-3, 1 and 300 σ: each type within its bound (the relative error
 * does not depend on the magnitude while the f16 scales are normal numbers). */
static void
test_random (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (42);
  g_autofree float *x = g_new (float, N_VALUES);
  const double sigmas[] = { 1e-3, 1.0, 300.0 };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    for (guint s = 0; s < G_N_ELEMENTS (sigmas); s++)
      {
        g_autofree float *y = NULL;
        double rms;

        for (gsize i = 0; i < N_VALUES; i++)
          x[i] = (float) (sigmas[s] * gaussian (rand));
        y = round_trip (cases[c].type, x, N_VALUES);
        rms = relative_rms (x, y, N_VALUES);
        g_test_message ("%s at sigma %g: relative RMS error %.5f (bound %g)",
                        amk_quant_type_name (cases[c].type), sigmas[s], rms, cases[c].bound);
        g_assert_cmpfloat (rms, <=, cases[c].bound);
      }
}

/* Q8_0 is exact to half a step per element: |error| <= max |x| of the block / 254
 * (with the f16 scale rounded up by at most one ulp, 2^-10 relative). */
static void
test_q8_0_elementwise (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (7);
  g_autofree float *x = g_new (float, N_VALUES);
  g_autofree float *y = NULL;

  for (gsize i = 0; i < N_VALUES; i++)
    x[i] = (float) g_rand_double_range (rand, -5.0, 5.0);
  y = round_trip (AMK_MODEL_TENSOR_Q8_0, x, N_VALUES);
  for (gsize b = 0; b < N_VALUES / 32; b++)
    {
      float amax = 0.0f;

      for (guint j = 0; j < 32; j++)
        amax = MAX (amax, fabsf (x[b * 32 + j]));
      for (guint j = 0; j < 32; j++)
        g_assert_cmpfloat (fabsf (y[b * 32 + j] - x[b * 32 + j]), <=, amax / 254.0f * (1.0f + 1.0f / 512));
    }
}

/* All zeros, and constant blocks (positive, negative), decode exactly or nearly. */
static void
test_constants (void)
{
  const float values[] = { 0.0f, 1.0f, -1.0f, -0.375f, 42.5f };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    for (guint v = 0; v < G_N_ELEMENTS (values); v++)
      {
        g_autofree float *x = g_new (float, 512);
        g_autofree float *y = NULL;

        for (guint i = 0; i < 512; i++)
          x[i] = values[v];
        y = round_trip (cases[c].type, x, 512);
        for (guint i = 0; i < 512; i++)
          if (values[v] == 0.0f)
            g_assert_cmpfloat (y[i], ==, 0.0f);
          else
            /* the constant is a scale times a level: f16's precision at worst */
            g_assert_cmpfloat (fabsf (y[i] - x[i]), <=, fabsf (x[i]) * 4e-3f);
      }
}

/* One value 1000 times the others' σ in one block: it comes back within 1 % and the
 * other blocks keep their bound. */
static void
test_outlier (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (3);

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autofree float *x = g_new (float, N_VALUES);
      g_autofree float *y = NULL;
      const gsize at = 3 * 256 + 77;

      for (gsize i = 0; i < N_VALUES; i++)
        x[i] = (float) gaussian (rand);
      x[at] = -1000.0f;
      y = round_trip (cases[c].type, x, N_VALUES);
      g_assert_cmpfloat (fabsf (y[at] - x[at]), <=, 10.0f);
      g_assert_cmpfloat (relative_rms (x + 4 * 256, y + 4 * 256, N_VALUES - 4 * 256), <=, cases[c].bound);
      g_assert_cmpfloat (relative_rms (x, y, 3 * 256), <=, cases[c].bound);
    }
}

/* Negative-only and positive-only blocks: the offset of Q4_K and Q5_K (stored as a
 * non-negative minimum) and Q6_K's signed scales cover them as well as mixed ones. */
static void
test_one_sign (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (11);

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    for (gint sign = -1; sign <= 1; sign += 2)
      {
        g_autofree float *x = g_new (float, N_VALUES);
        g_autofree float *y = NULL;

        for (gsize i = 0; i < N_VALUES; i++)
          x[i] = (float) (sign * g_rand_double_range (rand, 0.5, 2.0));
        y = round_trip (cases[c].type, x, N_VALUES);
        g_assert_cmpfloat (relative_rms (x, y, N_VALUES), <=, cases[c].bound);
      }
}

/* Values around 1e-6, where Q8_0's f16 scale is a subnormal number: none is clipped,
 * so every error stays below one step of the smallest subnormal scale's grid. */
static void
test_tiny (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (5);

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autofree float *x = g_new (float, 1024);
      g_autofree float *y = NULL;

      for (gsize i = 0; i < 1024; i++)
        x[i] = (float) (1e-6 * gaussian (rand));
      y = round_trip (cases[c].type, x, 1024);
      for (gsize i = 0; i < 1024; i++)
        g_assert_cmpfloat (fabsf (y[i] - x[i]), <=, 1.1e-6f);
      g_assert_cmpfloat (relative_rms (x, y, 1024), <=, 0.5);
    }
}

/* NaN and infinities are refused (AMK_MODEL_ERROR_CORRUPT) with the element's index. */
static void
test_non_finite (void)
{
  const float bad[] = { NAN, INFINITY, -INFINITY };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    for (guint b = 0; b < G_N_ELEMENTS (bad); b++)
      {
        g_autoptr(GError) error = NULL;
        g_autofree float *x = g_new0 (float, 512);
        g_autofree guint8 *q = g_malloc0 (amk_model_tensor_type_bytes (cases[c].type, 512));

        x[300] = bad[b];
        g_assert_false (amk_quantize (cases[c].type, x, 512, q, "blk.0.attn_q.weight", &error));
        g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_CORRUPT);
        g_assert_nonnull (strstr (error->message, "blk.0.attn_q.weight"));
        g_assert_nonnull (strstr (error->message, "300"));
      }
}

/* A value whose block scale (or whose own f16) would be infinite is refused
 * (AMK_MODEL_ERROR_UNSUPPORTED_FEATURE); F32 and BF16 take it. */
static void
test_out_of_range (void)
{
  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autoptr(GError) error = NULL;
      g_autofree float *x = g_new0 (float, 512);
      g_autofree guint8 *q = g_malloc0 (amk_model_tensor_type_bytes (cases[c].type, 512));
      gboolean ok;

      x[260] = 1e30f;
      ok = amk_quantize (cases[c].type, x, 512, q, "token_embd.weight", &error);
      if (cases[c].type == AMK_MODEL_TENSOR_F32 || cases[c].type == AMK_MODEL_TENSOR_BF16)
        {
          g_assert_no_error (error);
          g_assert_true (ok);
          continue;
        }
      g_assert_false (ok);
      g_assert_error (error, AMK_MODEL_ERROR, AMK_MODEL_ERROR_UNSUPPORTED_FEATURE);
      g_assert_nonnull (strstr (error->message, "token_embd.weight"));
      g_assert_nonnull (strstr (error->message, "260"));
    }
}

/* The least-squares search never does worse than the plain fit it starts from: on
 * uniform data (the worst case for clipping) Q4_K stays below the plain max-based
 * quantizer's 1 / (15 √12) of the range. */
static void
test_search_helps (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (9);
  g_autofree float *x = g_new (float, N_VALUES);
  g_autofree float *y = NULL;
  double err = 0.0;

  for (gsize i = 0; i < N_VALUES; i++)
    x[i] = (float) g_rand_double_range (rand, -1.0, 1.0);
  y = round_trip (AMK_MODEL_TENSOR_Q4_K, x, N_VALUES);
  for (gsize i = 0; i < N_VALUES; i++)
    err += ((double) y[i] - x[i]) * ((double) y[i] - x[i]);
  err = sqrt (err / N_VALUES);
  g_test_message ("Q4_K on U(-1, 1): RMS error %.5f, plain max-based %.5f", err, 2.0 / (15 * sqrt (12.0)));
  g_assert_cmpfloat (err, <=, 2.0 / (15 * sqrt (12.0)) * 1.05);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C");
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/amk/quant/random", test_random);
  g_test_add_func ("/amk/quant/q8_0-elementwise", test_q8_0_elementwise);
  g_test_add_func ("/amk/quant/constants", test_constants);
  g_test_add_func ("/amk/quant/outlier", test_outlier);
  g_test_add_func ("/amk/quant/one-sign", test_one_sign);
  g_test_add_func ("/amk/quant/tiny", test_tiny);
  g_test_add_func ("/amk/quant/non-finite", test_non_finite);
  g_test_add_func ("/amk/quant/out-of-range", test_out_of_range);
  g_test_add_func ("/amk/quant/search-helps", test_search_helps);
  return g_test_run ();
}
