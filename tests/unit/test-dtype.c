/* test-dtype.c: the scalar conversions of the VM (f16 / bf16 / i32 / u8 stores and the
 * f16 / bf16 loads), observed through the CPU executor (the library's conversion
 * functions are private): known bit patterns, ties to even, NaN, infinities, subnormals,
 * and every one of the 65536 half-precision patterns.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"

/* FILLs element k of a 1-element-per-value buffer of `dtype` with values[k]; returns the
 * stored elements. */
static guint8 *
fill_values (AmkDType dtype, const float *values, guint n)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autoptr(GBytes) out = NULL;
  g_autoptr(GBytes) poison = test_random_bytes (n * test_dtype_size (dtype));
  GError *error = NULL;
  gint b = test_add_buffer (p, "b", dtype, n, AMK_BUFFER_ROLE_OUTPUT);

  for (guint k = 0; k < n; k++)
    {
      gint i = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { b }, 1, "offset", k, "count", 1, NULL);
      g_assert_true (amk_program_set_param_float (p, i, "value", values[k], NULL));
    }
  ex = amk_cpu_executor_new (p, &error);
  g_assert_no_error (error);
  g_assert_true (amk_cpu_executor_upload (ex, b, poison, NULL));
  g_assert_true (amk_cpu_executor_run (ex, &error));
  g_assert_no_error (error);
  out = amk_cpu_executor_download (ex, b, NULL);
  return g_memdup2 (g_bytes_get_data (out, NULL), g_bytes_get_size (out));
}

/* d[k] = a[k] + b[k] on raw 16-bit patterns */
static guint16 *
add_halves (AmkDType dtype, const guint16 *a, const guint16 *b, guint n)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autoptr(GBytes) out = NULL, ab = g_bytes_new (a, n * 2), bb = g_bytes_new (b, n * 2);
  g_autoptr(GBytes) poison = test_random_bytes (n * 2);
  GError *error = NULL;
  gint ba = test_add_buffer (p, "a", dtype, n, AMK_BUFFER_ROLE_INPUT);
  gint bbb = test_add_buffer (p, "b", dtype, n, AMK_BUFFER_ROLE_INPUT);
  gint bd = test_add_buffer (p, "d", dtype, n, AMK_BUFFER_ROLE_OUTPUT);

  test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { bd, ba, bbb }, 3, "count", n, NULL);
  ex = amk_cpu_executor_new (p, &error);
  g_assert_no_error (error);
  g_assert_true (amk_cpu_executor_upload (ex, ba, ab, NULL));
  g_assert_true (amk_cpu_executor_upload (ex, bbb, bb, NULL));
  g_assert_true (amk_cpu_executor_upload (ex, bd, poison, NULL));
  g_assert_true (amk_cpu_executor_run (ex, &error));
  g_assert_no_error (error);
  out = amk_cpu_executor_download (ex, bd, NULL);
  return g_memdup2 (g_bytes_get_data (out, NULL), g_bytes_get_size (out));
}

static void
check_known (AmkDType dtype, const float *values, const guint16 *bits, guint n)
{
  g_autofree guint16 *got = (guint16 *) fill_values (dtype, values, n);

  for (guint k = 0; k < n; k++)
    {
      if (got[k] != bits[k])
        g_error ("%s of %.9g: got 0x%04x, expected 0x%04x",
                 dtype == AMK_DTYPE_F16 ? "f16" : "bf16", values[k], got[k], bits[k]);
      /* the independent reference agrees with the hand-made table */
      if (!isnan (values[k]))
        g_assert_cmphex (dtype == AMK_DTYPE_F16 ? ref_f32_to_f16 (values[k]) : ref_f32_to_bf16 (values[k]), ==, bits[k]);
    }
}

static void
test_f16_known (void)
{
  /* Ties: 1 + 2^-11 lies halfway between 1.0 (0x3c00) and 1 + 2^-10 (0x3c01): the even
   * mantissa wins, 0x3c00. 1 + 3 * 2^-11 lies halfway between 0x3c01 and 0x3c02: 0x3c02.
   * Just above a tie rounds up. 65504 is the largest f16; 65520 is halfway to 65536 (the
   * next binade's first value, which overflows), so it rounds to infinity, and anything
   * below it to 65504. 2^-24 is the smallest subnormal (0x0001); 2^-25 is halfway
   * between 0 and 2^-24 and rounds to the even 0; 3 * 2^-25 to 0x0002. 2^-14 - 2^-25 is
   * halfway between the largest subnormal 0x03ff and the smallest normal 0x0400: 0x0400. */
  const float values[] = {
    1.0f, -2.0f, 0.5f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f, INFINITY, -INFINITY,
    0.0f, -0.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-20f, -(1.0f + 0x1p-11f),
    0x1p-24f, 0x1p-25f, 3 * 0x1p-25f, 0x1p-14f, 0x1p-14f - 0x1p-25f, 0x1p-26f, 1e-30f,
    0x1.ff8p-15f, 0.333333343f, 3.14159274f,
  };
  const guint16 bits[] = {
    0x3c00, 0xc000, 0x3800, 0x7bff, 0x7bff, 0x7c00, 0x7c00, 0xfc00, 0x7c00, 0xfc00,
    0x0000, 0x8000, 0x3c00, 0x3c02, 0x3c01, 0xbc00,
    0x0001, 0x0000, 0x0002, 0x0400, 0x0400, 0x0000, 0x0000,
    0x03ff, 0x3555, 0x4248,
  };
  G_STATIC_ASSERT (G_N_ELEMENTS (values) == G_N_ELEMENTS (bits));
  check_known (AMK_DTYPE_F16, values, bits, G_N_ELEMENTS (values));
}

static void
test_bf16_known (void)
{
  /* bf16 keeps 7 mantissa bits: 1 + 2^-8 is the tie between 0x3f80 and 0x3f81 (even:
   * 0x3f80), 1 + 3 * 2^-8 between 0x3f81 and 0x3f82 (even: 0x3f82). FLT_MAX rounds up
   * past the largest bf16 (0x7f7f) to infinity. 2^-133 is the smallest bf16 subnormal. */
  const float values[] = {
    1.0f, -2.0f, 3.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f,
    INFINITY, -INFINITY, 0.0f, -0.0f, 3.40282347e38f, 0x1.fep127f, 0x1p-133f, 0x1p-126f,
    0x1p-134f, 3 * 0x1p-134f, 3.14159274f, -1e-3f,
  };
  const guint16 bits[] = {
    0x3f80, 0xc000, 0x4040, 0x3f80, 0x3f82, 0x3f81,
    0x7f80, 0xff80, 0x0000, 0x8000, 0x7f80, 0x7f7f, 0x0001, 0x0080,
    0x0000, 0x0002, 0x4049, 0xba83,
  };
  G_STATIC_ASSERT (G_N_ELEMENTS (values) == G_N_ELEMENTS (bits));
  check_known (AMK_DTYPE_BF16, values, bits, G_N_ELEMENTS (values));
}

static void
test_nan (void)
{
  const float nans[] = { NAN, -NAN, 0.0f };
  float v[3];
  g_autofree guint16 *h = NULL, *b = NULL;
  g_autofree gint32 *i = NULL;
  g_autofree guint8 *u = NULL;

  memcpy (v, nans, sizeof v);
  {
    guint32 payload = 0x7f800001;   /* a signalling NaN with the lowest payload bit */
    memcpy (&v[2], &payload, 4);
  }
  h = (guint16 *) fill_values (AMK_DTYPE_F16, v, 3);
  b = (guint16 *) fill_values (AMK_DTYPE_BF16, v, 3);
  i = (gint32 *) fill_values (AMK_DTYPE_I32, v, 3);
  u = fill_values (AMK_DTYPE_U8, v, 3);
  for (guint k = 0; k < 3; k++)
    {
      /* NaN stays NaN (never infinity: the payload bits below the cut must not vanish) */
      g_assert_true (ref_f16_is_nan (h[k]));
      g_assert_true (ref_bf16_is_nan (b[k]));
      g_assert_cmpint (i[k], ==, 0);
      g_assert_cmpuint (u[k], ==, 0);
    }
  /* NaN in an add */
  {
    const guint16 a[] = { 0x7e00, 0x7c00, 0x7c00, 0x3c00 };
    const guint16 c[] = { 0x3c00, 0xfc00, 0x3c00, 0x7c01 };
    g_autofree guint16 *d = add_halves (AMK_DTYPE_F16, a, c, 4);
    g_assert_true (ref_f16_is_nan (d[0]));
    g_assert_true (ref_f16_is_nan (d[1]));   /* inf - inf */
    g_assert_cmphex (d[2], ==, 0x7c00);
    g_assert_true (ref_f16_is_nan (d[3]));
  }
}

static void
test_int_stores (void)
{
  /* toward zero, saturating, like cvt.rzi.s32.f32; u8 keeps the low byte */
  const float v[] = { 1.9f, -1.9f, 2147483520.0f, 2147483648.0f, 1e20f, -2147483648.0f, -1e20f,
                      INFINITY, -INFINITY, 255.5f, 256.0f, 300.7f, -1.0f, 0.49f, 1e-40f };
  const gint32 want_i[] = { 1, -1, 2147483520, G_MAXINT32, G_MAXINT32, G_MININT32, G_MININT32,
                            G_MAXINT32, G_MININT32, 255, 256, 300, -1, 0, 0 };
  const guint8 want_u[] = { 1, 255, 0x80, 0xff, 0xff, 0, 0, 0xff, 0, 255, 0, 44, 255, 0, 0 };
  g_autofree gint32 *i = (gint32 *) fill_values (AMK_DTYPE_I32, v, G_N_ELEMENTS (v));
  g_autofree guint8 *u = fill_values (AMK_DTYPE_U8, v, G_N_ELEMENTS (v));

  G_STATIC_ASSERT (G_N_ELEMENTS (v) == G_N_ELEMENTS (want_i) && G_N_ELEMENTS (v) == G_N_ELEMENTS (want_u));
  for (guint k = 0; k < G_N_ELEMENTS (v); k++)
    {
      g_assert_cmpint (i[k], ==, want_i[k]);
      g_assert_cmpint (i[k], ==, ref_f32_to_i32 (v[k]));
      g_assert_cmpuint (u[k], ==, want_u[k]);
    }
}

/* Every half pattern: x + (-0) == x exactly, so the add returns x itself (a load and a
 * store round trip); x + x must match the independent reference. */
static void
test_all_patterns (gconstpointer data)
{
  AmkDType dtype = GPOINTER_TO_INT (data);
  g_autofree guint16 *a = g_new (guint16, 65536);
  g_autofree guint16 *z = g_new (guint16, 65536);
  g_autofree guint16 *same = NULL, *twice = NULL, *mixed = NULL;
  g_autofree guint16 *r = g_new (guint16, 65536);
  gboolean f16 = dtype == AMK_DTYPE_F16;

  for (guint k = 0; k < 65536; k++)
    {
      a[k] = (guint16) k;
      z[k] = 0x8000;
    }
  same = add_halves (dtype, a, z, 65536);
  twice = add_halves (dtype, a, a, 65536);
  for (guint k = 0; k < 65536; k++)
    {
      gboolean nan = f16 ? ref_f16_is_nan (k) : ref_bf16_is_nan (k);
      float x = f16 ? ref_f16_to_f32 (k) : ref_bf16_to_f32 (k);
      guint16 want = f16 ? ref_f32_to_f16 (x + x) : ref_f32_to_bf16 (x + x);

      if (nan)
        {
          g_assert_true (f16 ? ref_f16_is_nan (same[k]) : ref_bf16_is_nan (same[k]));
          g_assert_true (f16 ? ref_f16_is_nan (twice[k]) : ref_bf16_is_nan (twice[k]));
          continue;
        }
      if (same[k] != k)
        g_error ("0x%04x + -0 gave 0x%04x", k, same[k]);
      if (twice[k] != want)
        g_error ("0x%04x + itself gave 0x%04x, expected 0x%04x", k, twice[k], want);
    }

  /* random pairs, against the independent decode, fp32 add and encode */
  for (guint k = 0; k < 65536; k++)
    r[k] = (guint16) g_test_rand_int_range (0, 65536);
  mixed = add_halves (dtype, a, r, 65536);
  for (guint k = 0; k < 65536; k++)
    {
      float x = f16 ? ref_f16_to_f32 (k) : ref_bf16_to_f32 (k);
      float y = f16 ? ref_f16_to_f32 (r[k]) : ref_bf16_to_f32 (r[k]);
      float s = x + y;
      if (isnan (s))
        g_assert_true (f16 ? ref_f16_is_nan (mixed[k]) : ref_bf16_is_nan (mixed[k]));
      else if (mixed[k] != (f16 ? ref_f32_to_f16 (s) : ref_f32_to_bf16 (s)))
        g_error ("0x%04x + 0x%04x gave 0x%04x", k, r[k], mixed[k]);
    }
}

/* Random floats over the whole f32 range stored as f16 / bf16. */
static void
test_random_stores (void)
{
  const guint n = 4096;
  g_autofree float *v = g_new (float, n);
  g_autofree guint16 *h = NULL, *b = NULL;

  for (guint k = 0; k < n; k++)
    {
      guint32 u;
      do
        {
          u = g_test_rand_int ();
          memcpy (&v[k], &u, 4);
        }
      while (isnan (v[k]) || v[k] == 0.0f);
      if (k % 2)   /* half of them in f16's range */
        v[k] = ldexpf (frexpf (v[k], &(int) { 0 }), g_test_rand_int_range (-27, 18));
    }
  h = (guint16 *) fill_values (AMK_DTYPE_F16, v, n);
  b = (guint16 *) fill_values (AMK_DTYPE_BF16, v, n);
  for (guint k = 0; k < n; k++)
    {
      if (h[k] != ref_f32_to_f16 (v[k]))
        g_error ("f16 of %a: 0x%04x, expected 0x%04x", v[k], h[k], ref_f32_to_f16 (v[k]));
      if (b[k] != ref_f32_to_bf16 (v[k]))
        g_error ("bf16 of %a: 0x%04x, expected 0x%04x", v[k], b[k], ref_f32_to_bf16 (v[k]));
    }
}

int
main (int argc, char **argv)
{
  test_init (&argc, &argv);

  g_test_add_func ("/amk/dtype/f16/known", test_f16_known);
  g_test_add_func ("/amk/dtype/bf16/known", test_bf16_known);
  g_test_add_func ("/amk/dtype/nan", test_nan);
  g_test_add_func ("/amk/dtype/int-stores", test_int_stores);
  g_test_add_data_func ("/amk/dtype/f16/all-patterns", GINT_TO_POINTER (AMK_DTYPE_F16), test_all_patterns);
  g_test_add_data_func ("/amk/dtype/bf16/all-patterns", GINT_TO_POINTER (AMK_DTYPE_BF16), test_all_patterns);
  g_test_add_func ("/amk/dtype/random-stores", test_random_stores);

  return g_test_run ();
}
