/* test-cpu-executor.c: every utility op on every dtype against values computed here,
 * chains across queues, GRID_SYNC phases, the seeded scheduler (through split-K's atomic
 * adds), a race refused, TRAP, and the errors.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"

static AmkCpuExecutor *
make_executor (AmkProgram *p, guint64 seed)
{
  GError *error = NULL;
  AmkCpuExecutor *ex = amk_cpu_executor_new (p, &error);

  g_assert_no_error (error);
  g_assert_nonnull (ex);
  amk_cpu_executor_set_threads (ex, 1);   /* the seeded scheduler */
  amk_cpu_executor_set_seed (ex, seed);
  return ex;
}

static void
upload (AmkCpuExecutor *ex, guint buffer, const void *data, gsize size)
{
  g_autoptr(GBytes) bytes = g_bytes_new (data, size);
  GError *error = NULL;

  g_assert_true (amk_cpu_executor_upload (ex, buffer, bytes, &error));
  g_assert_no_error (error);
}

static guint8 *
download (AmkCpuExecutor *ex, guint buffer, gsize *size)
{
  GError *error = NULL;
  g_autoptr(GBytes) bytes = amk_cpu_executor_download (ex, buffer, &error);
  gsize n = 0;
  const guint8 *data;

  g_assert_no_error (error);
  g_assert_nonnull (bytes);
  data = g_bytes_get_data (bytes, &n);
  if (size != NULL)
    *size = n;
  return g_memdup2 (data, MAX (n, 1));
}

static void
run_ok (AmkCpuExecutor *ex)
{
  GError *error = NULL;

  g_assert_true (amk_cpu_executor_run (ex, &error));
  g_assert_no_error (error);
  g_assert_null (amk_cpu_executor_get_last_abort (ex));
}

/* A random element of `dtype`: finite, never zero. */
static void
random_element (AmkDType dtype, guint8 *out)
{
  switch (dtype)
    {
    case AMK_DTYPE_F32:
      {
        float f = test_rand_float (1000.0);
        memcpy (out, &f, 4);
      }
      break;
    case AMK_DTYPE_F16:
    case AMK_DTYPE_BF16:
      {
        guint16 h, exp_mask = dtype == AMK_DTYPE_F16 ? 0x7c00 : 0x7f80;
        do
          h = (guint16) g_test_rand_int_range (0, 65536);
        while ((h & exp_mask) == exp_mask || (h & 0x7fff) == 0);
        memcpy (out, &h, 2);
      }
      break;
    case AMK_DTYPE_I32:
      {
        gint32 v;
        do
          v = (gint32) g_test_rand_int ();
        while (v == 0);
        memcpy (out, &v, 4);
      }
      break;
    case AMK_DTYPE_U8:
      out[0] = (guint8) g_test_rand_int_range (1, 256);
      break;
    default:
      g_assert_not_reached ();
    }
}

static guint8 *
random_elements (AmkDType dtype, guint n)
{
  guint es = test_dtype_size (dtype);
  guint8 *data = g_malloc (n * es);

  for (guint i = 0; i < n; i++)
    random_element (dtype, data + i * es);
  return data;
}

static float
ref_load (AmkDType dtype, const guint8 *base, guint i)
{
  guint16 h;
  float f;

  switch (dtype)
    {
    case AMK_DTYPE_F32:
      memcpy (&f, base + 4 * i, 4);
      return f;
    case AMK_DTYPE_F16:
      memcpy (&h, base + 2 * i, 2);
      return ref_f16_to_f32 (h);
    case AMK_DTYPE_BF16:
      memcpy (&h, base + 2 * i, 2);
      return ref_bf16_to_f32 (h);
    default:
      g_assert_not_reached ();
    }
}

/* Stores a float as the VM does: round to nearest even for floats, saturating truncation
 * for i32, its low byte for u8. */
static void
ref_store (AmkDType dtype, guint8 *base, guint i, float v)
{
  guint16 h;
  gint32 n;

  switch (dtype)
    {
    case AMK_DTYPE_F32:
      memcpy (base + 4 * i, &v, 4);
      break;
    case AMK_DTYPE_F16:
      h = ref_f32_to_f16 (v);
      memcpy (base + 2 * i, &h, 2);
      break;
    case AMK_DTYPE_BF16:
      h = ref_f32_to_bf16 (v);
      memcpy (base + 2 * i, &h, 2);
      break;
    case AMK_DTYPE_I32:
      n = ref_f32_to_i32 (v);
      memcpy (base + 4 * i, &n, 4);
      break;
    case AMK_DTYPE_U8:
      base[i] = (guint8) (ref_f32_to_i32 (v) & 0xff);
      break;
    default:
      g_assert_not_reached ();
    }
}

static void
ref_add (AmkDType dtype, guint8 *d, guint od, const guint8 *a, guint oa, const guint8 *b, guint ob, guint n)
{
  for (guint k = 0; k < n; k++)
    {
      if (dtype == AMK_DTYPE_I32)
        {
          guint32 x, y, z;
          memcpy (&x, a + 4 * (oa + k), 4);
          memcpy (&y, b + 4 * (ob + k), 4);
          z = x + y;   /* wraps */
          memcpy (d + 4 * (od + k), &z, 4);
        }
      else if (dtype == AMK_DTYPE_U8)
        d[od + k] = (guint8) (a[oa + k] + b[ob + k]);
      else
        {
          float s = ref_load (dtype, a, oa + k) + ref_load (dtype, b, ob + k);  /* fp32 add */
          ref_store (dtype, d, od + k, s);
        }
    }
}

static void
assert_elements_equal (AmkDType dtype, const guint8 *got, const guint8 *want, guint n, const char *what)
{
  guint es = test_dtype_size (dtype);

  for (guint i = 0; i < n; i++)
    if (memcmp (got + i * es, want + i * es, es) != 0)
      {
        guint32 g = 0, w = 0;
        memcpy (&g, got + i * es, es);
        memcpy (&w, want + i * es, es);
        g_error ("%s: element %u is 0x%x, expected 0x%x", what, i, g, w);
      }
}

/* Every op on one dtype, with random offsets and counts, in several queues. */
static void
test_ops_dtype (gconstpointer data)
{
  AmkDType dtype = GPOINTER_TO_INT (data);
  guint es = test_dtype_size (dtype);

  for (guint round = 0; round < 25; round++)
    {
      g_autoptr(AmkProgram) p = amk_program_new (4);
      g_autoptr(AmkCpuExecutor) ex = NULL;
      guint n = g_test_rand_int_range (2, 300);
      g_autofree guint8 *x = random_elements (dtype, n);
      g_autofree guint8 *y = random_elements (dtype, n);
      g_autofree guint8 *poison_c = random_elements (dtype, n);
      g_autofree guint8 *poison_f = random_elements (dtype, n);
      g_autofree guint8 *poison_a = random_elements (dtype, n);
      g_autofree guint8 *want_c = NULL, *want_f = NULL, *want_a = NULL;
      g_autofree guint8 *got = NULL;
      gint bx, by, bc, bf, ba, i;
      gint cnt, o0, o1, o2;
      float value;

      bx = test_add_buffer (p, "x", dtype, n, AMK_BUFFER_ROLE_INPUT);
      by = test_add_buffer (p, "y", dtype, n, round % 2 ? AMK_BUFFER_ROLE_CONSTANT : AMK_BUFFER_ROLE_STATE);
      bc = test_add_buffer (p, "copied", dtype, n, AMK_BUFFER_ROLE_OUTPUT);
      bf = test_add_buffer (p, "filled", dtype, n, AMK_BUFFER_ROLE_OUTPUT);
      ba = test_add_buffer (p, "added", dtype, n, AMK_BUFFER_ROLE_OUTPUT);
      want_c = g_memdup2 (poison_c, n * es);
      want_f = g_memdup2 (poison_f, n * es);
      want_a = g_memdup2 (poison_a, n * es);

      /* COPY: copied[o0 + k] = x[o1 + k] */
      cnt = g_test_rand_int_range (1, n + 1);
      o0 = g_test_rand_int_range (0, n - cnt + 1);
      o1 = g_test_rand_int_range (0, n - cnt + 1);
      test_add (p, 0, AMK_OPCODE_COPY, (gint[]) { bc, bx }, 2, "dst_offset", o0, "src_offset", o1,
                "count", cnt, NULL);
      memcpy (want_c + o0 * es, x + o1 * es, cnt * es);

      /* FILL: filled[o0 + k] = value */
      cnt = g_test_rand_int_range (1, n + 1);
      o0 = g_test_rand_int_range (0, n - cnt + 1);
      switch (dtype)
        {
        case AMK_DTYPE_I32: value = (float) g_test_rand_double_range (-3e9, 3e9); break;
        case AMK_DTYPE_U8: value = (float) g_test_rand_double_range (-1000, 1000); break;
        case AMK_DTYPE_F16: value = test_rand_float (70000.0); break;
        default: value = (float) (test_rand_float (1.0) * pow (2.0, g_test_rand_int_range (-140, 128))); break;
        }
      i = test_add (p, 1, AMK_OPCODE_FILL, (gint[]) { bf }, 1, "offset", o0, "count", cnt, NULL);
      g_assert_true (amk_program_set_param_float (p, i, "value", value, NULL));
      for (gint k = 0; k < cnt; k++)
        ref_store (dtype, want_f, o0 + k, value);

      /* ADD: added[o0 + k] = x[o1 + k] + y[o2 + k], in two halves on two queues */
      cnt = g_test_rand_int_range (1, n + 1);
      o0 = g_test_rand_int_range (0, n - cnt + 1);
      o1 = g_test_rand_int_range (0, n - cnt + 1);
      o2 = g_test_rand_int_range (0, n - cnt + 1);
      test_add (p, 2, AMK_OPCODE_ADD, (gint[]) { ba, bx, by }, 3, "dst_offset", o0, "a_offset", o1,
                "b_offset", o2, "count", cnt / 2, NULL);
      test_add (p, 3, AMK_OPCODE_ADD, (gint[]) { ba, bx, by }, 3,
                "dst_offset", o0 + cnt / 2, "a_offset", o1 + cnt / 2, "b_offset", o2 + cnt / 2,
                "count", cnt - cnt / 2, NULL);
      ref_add (dtype, want_a, o0, x, o1, y, o2, cnt);

      if (round % 2)
        {
          g_autoptr(GBytes) yb = g_bytes_new (y, n * es);
          g_assert_true (amk_program_set_buffer_data (p, by, yb, NULL));
        }
      ex = make_executor (p, g_test_rand_int ());
      upload (ex, bx, x, n * es);
      if (round % 2 == 0)
        upload (ex, by, y, n * es);
      upload (ex, bc, poison_c, n * es);
      upload (ex, bf, poison_f, n * es);
      upload (ex, ba, poison_a, n * es);
      run_ok (ex);

      got = download (ex, bc, NULL);
      assert_elements_equal (dtype, got, want_c, n, "COPY");
      g_free (got);
      got = download (ex, bf, NULL);
      assert_elements_equal (dtype, got, want_f, n, "FILL");
      g_free (got);
      got = download (ex, ba, NULL);
      assert_elements_equal (dtype, got, want_a, n, "ADD");
      g_clear_pointer (&got, g_free);
      /* inputs are untouched */
      got = download (ex, bx, NULL);
      g_assert_cmpmem (got, n * es, x, n * es);
      g_clear_pointer (&got, g_free);
      got = download (ex, by, NULL);
      g_assert_cmpmem (got, n * es, y, n * es);
    }
}

/* A value passes down a chain of queues: queue q waits for queue q - 1, adds x, signals. */
static void
test_chain (void)
{
  const guint Q = 16, N = 37;
  g_autoptr(AmkProgram) p = amk_program_new (Q + 1);
  g_autofree float *x = g_new (float, N);
  g_autofree float *want = g_new (float, N);
  gint bx, bs, bo, i;
  gint counters[17];

  bx = test_add_buffer (p, "x", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_INPUT);
  bs = test_add_buffer (p, "stages", AMK_DTYPE_F32, Q * N, AMK_BUFFER_ROLE_SCRATCH);
  bo = test_add_buffer (p, "out", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_OUTPUT);
  for (guint q = 0; q < Q; q++)
    counters[q] = amk_program_add_counter (p, NULL);

  /* the queues are filled in reverse order, so that queue order alone would be wrong */
  for (gint q = Q - 1; q >= 1; q--)
    {
      i = test_add (p, q, AMK_OPCODE_ADD, (gint[]) { bs, bs, bx }, 3,
                    "dst_offset", q * N, "a_offset", (q - 1) * N, "count", N, NULL);
      test_wait (p, i, counters[q - 1], 1);
      test_signal (p, i, counters[q], 1);
    }
  i = test_add (p, 0, AMK_OPCODE_COPY, (gint[]) { bs, bx }, 2, "count", N, NULL);
  test_signal (p, i, counters[0], 1);
  i = test_add (p, Q, AMK_OPCODE_COPY, (gint[]) { bo, bs }, 2, "src_offset", (Q - 1) * N, "count", N, NULL);
  test_wait (p, i, counters[Q - 1], 1);

  for (guint seed = 0; seed < 30; seed++)
    {
      g_autoptr(AmkCpuExecutor) ex = make_executor (p, seed * 0x9e3779b97f4a7c15ull);
      g_autofree float *poison = (float *) random_elements (AMK_DTYPE_F32, N);
      g_autofree float *got = NULL;

      for (guint k = 0; k < N; k++)
        x[k] = test_rand_float (100.0);
      for (guint k = 0; k < N; k++)
        {
          float acc = x[k];
          for (guint q = 1; q < Q; q++)
            acc = acc + x[k];
          want[k] = acc;
        }
      upload (ex, bx, x, N * 4);
      upload (ex, bo, poison, N * 4);
      run_ok (ex);
      got = (float *) download (ex, bo, NULL);
      g_assert_cmpmem (got, N * 4, want, N * 4);
    }
}

/* Three phases separated by GRID_SYNC; each phase reads what other queues wrote in the
 * phase before. */
static void
test_grid_sync_phases (void)
{
  const guint Q = 8, N = 13;
  g_autoptr(AmkProgram) p = amk_program_new (Q);
  gint bx, ba, bb, bo;

  bx = test_add_buffer (p, "x", AMK_DTYPE_F32, Q * N, AMK_BUFFER_ROLE_INPUT);
  ba = test_add_buffer (p, "a", AMK_DTYPE_F32, Q * N, AMK_BUFFER_ROLE_SCRATCH);
  bb = test_add_buffer (p, "b", AMK_DTYPE_F32, Q * N, AMK_BUFFER_ROLE_SCRATCH);
  bo = test_add_buffer (p, "out", AMK_DTYPE_F32, Q * N, AMK_BUFFER_ROLE_OUTPUT);
  for (guint q = 0; q < Q; q++)
    {
      guint next = (q + 1) % Q, prev = (q + Q - 1) % Q;
      /* phase 1: a[q] = x[q] + x[q] */
      test_add (p, q, AMK_OPCODE_ADD, (gint[]) { ba, bx, bx }, 3, "dst_offset", q * N, "a_offset", q * N,
                "b_offset", q * N, "count", N, NULL);
      test_add (p, q, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
      /* phase 2: b[q] = a[next] + x[q] */
      test_add (p, q, AMK_OPCODE_ADD, (gint[]) { bb, ba, bx }, 3, "dst_offset", q * N, "a_offset", next * N,
                "b_offset", q * N, "count", N, NULL);
      test_add (p, q, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
      /* phase 3: out[q] = b[prev] + a[q] */
      test_add (p, q, AMK_OPCODE_ADD, (gint[]) { bo, bb, ba }, 3, "dst_offset", q * N, "a_offset", prev * N,
                "b_offset", q * N, "count", N, NULL);
    }

  for (guint seed = 0; seed < 30; seed++)
    {
      g_autoptr(AmkCpuExecutor) ex = make_executor (p, seed);
      g_autofree float *x = (float *) random_elements (AMK_DTYPE_F32, Q * N);
      g_autofree float *poison = (float *) random_elements (AMK_DTYPE_F32, Q * N);
      g_autofree float *a = g_new (float, Q * N), *b = g_new (float, Q * N), *want = g_new (float, Q * N);
      g_autofree float *got = NULL;

      for (guint q = 0; q < Q; q++)
        for (guint k = 0; k < N; k++)
          a[q * N + k] = x[q * N + k] + x[q * N + k];
      for (guint q = 0; q < Q; q++)
        for (guint k = 0; k < N; k++)
          b[q * N + k] = a[((q + 1) % Q) * N + k] + x[q * N + k];
      for (guint q = 0; q < Q; q++)
        for (guint k = 0; k < N; k++)
          want[q * N + k] = b[((q + Q - 1) % Q) * N + k] + a[q * N + k];

      upload (ex, bx, x, Q * N * 4);
      upload (ex, ba, poison, Q * N * 4);   /* scratch is poisoned too */
      upload (ex, bb, poison, Q * N * 4);
      upload (ex, bo, poison, Q * N * 4);
      run_ok (ex);
      got = (float *) download (ex, bo, NULL);
      g_assert_cmpmem (got, Q * N * 4, want, Q * N * 4);
    }
}

/* Queue 0 fills `shared` four times; queue 1 copies it out without waiting: the
 * verifier's race proof refuses it, naming both instructions. */
static void
test_racy_program_refused (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  gint shared = test_add_buffer (p, "shared", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_STATE);
  gint out = test_add_buffer (p, "out", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_OUTPUT);
  g_autoptr(GError) error = NULL;
  AmkCpuExecutor *ex;

  for (guint k = 0; k < 4; k++)
    test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { shared }, 1, "count", 8, NULL);
  test_add (p, 1, AMK_OPCODE_COPY, (gint[]) { out, shared }, 2, "count", 8, NULL);
  ex = amk_cpu_executor_new (p, &error);
  g_assert_null (ex);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_RACE);
  test_assert_message_has (error, "queue 1 instruction 0 (COPY)");
  test_assert_message_has (error, "(FILL)");
  test_assert_message_has (error, "“shared”");
}

/* The one schedule-dependent result a verified program may have: split-K's atomic adds.
 * Three queues add their share of one row into y; in float, 1e8, 1 and -1e8 sum to 0 or
 * 1 depending on their order, so the seeded scheduler shows itself. */
static AmkProgram *
split_k_program (gint *y)
{
  AmkProgram *p = amk_program_new (3);
  const float wv[12] = { 1e8f, 0, 0, 0, 1.0f, 0, 0, 0, -1e8f, 0, 0, 0 };
  const float xv[12] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
  gint w = test_add_buffer (p, "w", AMK_DTYPE_F32, 12, AMK_BUFFER_ROLE_CONSTANT);
  gint x = test_add_buffer (p, "x", AMK_DTYPE_F32, 12, AMK_BUFFER_ROLE_CONSTANT);
  g_autoptr(GBytes) wb = g_bytes_new (wv, sizeof wv), xb = g_bytes_new (xv, sizeof xv);

  g_assert_true (amk_program_set_buffer_data (p, w, wb, NULL));
  g_assert_true (amk_program_set_buffer_data (p, x, xb, NULL));
  *y = test_add_buffer (p, "y", AMK_DTYPE_F32, 1, AMK_BUFFER_ROLE_STATE);
  for (guint q = 0; q < 3; q++)
    test_add (p, q, AMK_OPCODE_MATVEC, (gint[]) { *y, w, x, -1, *y, -1 }, 6,
              "row0", 0, "rows", 1, "k", 12, "k0", 4 * q, "k_len", 4, NULL);
  return p;
}

static float
run_split_k (AmkCpuExecutor *ex, gint y)
{
  const float zero = 0.0f;
  g_autofree float *got = NULL;
  float v;

  upload (ex, y, &zero, 4);
  run_ok (ex);
  got = (float *) download (ex, y, NULL);
  v = got[0];
  g_assert_true (v == 0.0f || v == 1.0f);
  return v;
}

static void
test_seeded_schedule (void)
{
  gint y;
  g_autoptr(AmkProgram) p = split_k_program (&y);
  gboolean seen[2] = { FALSE, FALSE };

  for (guint64 seed = 0; seed < 64; seed++)
    {
      g_autoptr(AmkCpuExecutor) ex = make_executor (p, seed);
      seen[(int) run_split_k (ex, y)] = TRUE;
    }
  g_assert_true (seen[0] && seen[1]);
}

static void
test_same_seed (void)
{
  gint y;
  g_autoptr(AmkProgram) p = split_k_program (&y);

  for (guint round = 0; round < 20; round++)
    {
      guint64 seed = ((guint64) g_test_rand_int () << 32) | g_test_rand_int ();
      g_autoptr(AmkCpuExecutor) a = make_executor (p, seed);
      g_autoptr(AmkCpuExecutor) b = make_executor (p, seed);
      const float first = run_split_k (a, y);

      g_assert_true (run_split_k (b, y) == first);
      g_assert_true (run_split_k (a, y) == first);   /* each run starts from the seed again */
    }
}

static void
count_notify (GObject *object, GParamSpec *pspec, gpointer data)
{
  (*(guint *) data)++;
}

static void
test_properties (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autoptr(AmkProgram) got = NULL;
  guint64 seed = 1;
  guint notified = 0;
  GError *error = NULL;

  ex = g_initable_new (AMK_TYPE_CPU_EXECUTOR, NULL, &error, "program", p, "seed", G_GUINT64_CONSTANT (0xfedcba9876543210), NULL);
  g_assert_no_error (error);
  g_assert_true (amk_cpu_executor_get_program (ex) == p);
  g_assert_cmpuint (amk_cpu_executor_get_seed (ex), ==, G_GUINT64_CONSTANT (0xfedcba9876543210));
  g_object_get (ex, "program", &got, "seed", &seed, NULL);
  g_assert_true (got == p);
  g_assert_cmpuint (seed, ==, G_GUINT64_CONSTANT (0xfedcba9876543210));
  g_assert_true (amk_program_get_verified (p));   /* made verified by the executor */

  g_signal_connect (ex, "notify::seed", G_CALLBACK (count_notify), &notified);
  amk_cpu_executor_set_seed (ex, 5);
  amk_cpu_executor_set_seed (ex, 5);
  g_object_set (ex, "seed", G_GUINT64_CONSTANT (6), NULL);
  g_assert_cmpuint (notified, ==, 2);
  g_assert_cmpuint (amk_cpu_executor_get_seed (ex), ==, 6);
  run_ok (ex);   /* an empty program runs */
  g_assert_null (amk_cpu_executor_get_last_abort (ex));
}

static void
test_new_errors (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  GError *error = NULL;
  AmkCpuExecutor *ex;
  gint c = amk_program_add_counter (p, "never");
  gint i = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);

  test_wait (p, i, c, 1);
  ex = amk_cpu_executor_new (p, &error);
  g_assert_null (ex);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK);
  g_clear_error (&error);

  /* without a program: made, but nothing runs before a program is loaded */
  ex = g_initable_new (AMK_TYPE_CPU_EXECUTOR, NULL, &error, NULL);
  g_assert_no_error (error);
  g_assert_nonnull (ex);
  g_assert_false (amk_cpu_executor_run (ex, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
  g_object_unref (ex);
}

static void
test_trap (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (3);
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autoptr(AmkAbortRecord) record = NULL;
  g_autofree char *text = NULL;
  GError *error = NULL;
  gint b, trap;

  b = test_add_buffer (p, "b", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_OUTPUT);
  test_add (p, 2, AMK_OPCODE_FILL, (gint[]) { b }, 1, "count", 4, NULL);
  test_add (p, 2, AMK_OPCODE_NOP, NULL, 0, NULL);
  trap = test_add (p, 2, AMK_OPCODE_TRAP, NULL, 0, "code", -7777, NULL);
  test_add (p, 2, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);

  ex = make_executor (p, 3);
  for (guint round = 0; round < 2; round++)
    {
      g_assert_false (amk_cpu_executor_run (ex, &error));
      g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
      test_assert_message_has (error, "-7777");
      g_clear_error (&error);

      record = amk_cpu_executor_get_last_abort (ex);
      g_assert_nonnull (record);
      g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_TRAP);
      g_assert_cmpint (record->queue, ==, 2);
      g_assert_cmpint (record->instruction, ==, 2);
      g_assert_cmpint (record->counter, ==, -1);
      g_assert_cmpuint (record->observed, ==, 0);
      g_assert_cmpuint (record->target, ==, 0);
      g_assert_cmpint (record->detail, ==, -7777);
      g_assert_cmpint (record->sm_id, ==, -1);
      text = amk_abort_record_to_string (record);
      test_assert_has (text, "queue 2 instruction 2");
      g_clear_pointer (&text, g_free);
      g_clear_pointer (&record, amk_abort_record_free);
    }

  /* the same program without the trap runs, and the record is gone */
  test_instruction (p, trap)->opcode = AMK_ABI_OP_NOP;
  g_assert_true (amk_program_verify (p, NULL));
  run_ok (ex);
  g_assert_null (amk_cpu_executor_get_last_abort (ex));
}

static void
test_not_verified (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(AmkCpuExecutor) ex = NULL;
  GError *error = NULL;
  gint b, i;

  b = test_add_buffer (p, "b", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_OUTPUT);
  i = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { b }, 1, "count", 4, NULL);
  ex = make_executor (p, 0);
  run_ok (ex);

  /* a changed parameter: verify again and it runs */
  g_assert_true (amk_program_set_param_int (p, i, "count", 5, NULL));
  g_assert_false (amk_cpu_executor_run (ex, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
  g_assert_false (amk_program_verify (p, NULL));     /* 5 elements do not fit */
  g_assert_false (amk_cpu_executor_run (ex, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
  g_assert_true (amk_program_set_param_int (p, i, "offset", 1, NULL));
  g_assert_true (amk_program_set_param_int (p, i, "count", 3, NULL));
  g_assert_true (amk_program_verify (p, NULL));
  run_ok (ex);

  /* a new counter: the program has another shape than the one loaded; load it again */
  amk_program_add_counter (p, NULL);
  g_assert_false (amk_cpu_executor_run (ex, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
  g_assert_true (amk_program_verify (p, NULL));
  g_assert_false (amk_cpu_executor_run (ex, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
  g_assert_true (amk_executor_load (AMK_EXECUTOR (ex), p, &error));
  g_assert_no_error (error);
  run_ok (ex);

  /* a new buffer or instruction: this executor is done for */
  test_add_buffer (p, "late", AMK_DTYPE_U8, 3, AMK_BUFFER_ROLE_OUTPUT);
  g_assert_true (amk_program_verify (p, NULL));
  g_assert_false (amk_cpu_executor_run (ex, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
  g_clear_object (&ex);
  ex = make_executor (p, 0);
  run_ok (ex);
  test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_true (amk_program_verify (p, NULL));
  g_assert_false (amk_cpu_executor_run (ex, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
}

static void
test_upload_download (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autoptr(GBytes) defaults = test_random_bytes (6 * 2);
  g_autoptr(GBytes) data = test_random_bytes (6 * 2);
  g_autoptr(GBytes) got = NULL;
  GError *error = NULL;
  gint k, o, s;

  k = test_add_buffer (p, "k", AMK_DTYPE_BF16, 6, AMK_BUFFER_ROLE_CONSTANT);
  o = test_add_buffer (p, "o", AMK_DTYPE_I32, 5, AMK_BUFFER_ROLE_OUTPUT);
  s = test_add_buffer (p, "s", AMK_DTYPE_BF16, 6, AMK_BUFFER_ROLE_SCRATCH);
  g_assert_true (amk_program_set_buffer_data (p, k, defaults, NULL));
  ex = make_executor (p, 0);

  /* starts from the defaults; buffers without are zeros */
  got = amk_cpu_executor_download (ex, k, &error);
  g_assert_no_error (error);
  g_assert_true (g_bytes_equal (got, defaults));
  g_clear_pointer (&got, g_bytes_unref);
  got = amk_cpu_executor_download (ex, o, &error);
  g_assert_cmpuint (g_bytes_get_size (got), ==, 20);
  for (guint i = 0; i < 20; i++)
    g_assert_cmpuint (((const guint8 *) g_bytes_get_data (got, NULL))[i], ==, 0);
  g_clear_pointer (&got, g_bytes_unref);

  /* round trips, scratch included */
  g_assert_true (amk_cpu_executor_upload (ex, k, data, &error));
  g_assert_true (amk_cpu_executor_upload (ex, s, data, &error));
  g_assert_no_error (error);
  got = amk_cpu_executor_download (ex, k, NULL);
  g_assert_true (g_bytes_equal (got, data));
  g_clear_pointer (&got, g_bytes_unref);
  got = amk_cpu_executor_download (ex, s, NULL);
  g_assert_true (g_bytes_equal (got, data));
  g_clear_pointer (&got, g_bytes_unref);
  /* the program's defaults are not touched */
  got = amk_program_get_buffer_data (p, k);
  g_assert_true (g_bytes_equal (got, defaults));
  g_clear_pointer (&got, g_bytes_unref);

  /* errors */
  {
    g_autoptr(GBytes) small = test_random_bytes (11);
    g_autoptr(GBytes) big = test_random_bytes (13);
    g_autoptr(GBytes) empty = g_bytes_new (NULL, 0);

    g_assert_false (amk_cpu_executor_upload (ex, k, small, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
    g_clear_error (&error);
    g_assert_false (amk_cpu_executor_upload (ex, s, big, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
    g_clear_error (&error);
    g_assert_false (amk_cpu_executor_upload (ex, o, empty, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
    g_clear_error (&error);
    g_assert_false (amk_cpu_executor_upload (ex, 3, data, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
    g_clear_error (&error);
    g_assert_false (amk_cpu_executor_upload (ex, G_MAXUINT, data, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
    g_clear_error (&error);
    g_assert_null (amk_cpu_executor_download (ex, 3, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
    g_clear_error (&error);
    /* the failed uploads changed nothing */
    got = amk_cpu_executor_download (ex, k, NULL);
    g_assert_true (g_bytes_equal (got, data));
  }
}

static void
test_scratch_persists (void)
{
  const guint N = 9;
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autofree float *x = (float *) random_elements (AMK_DTYPE_F32, N);
  g_autofree float *want = g_new0 (float, N);
  gint bx, bs, bo;

  bx = test_add_buffer (p, "x", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_INPUT);
  bs = test_add_buffer (p, "acc", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_SCRATCH);
  bo = test_add_buffer (p, "out", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_OUTPUT);
  test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { bs, bs, bx }, 3, "count", N, NULL);
  test_add (p, 0, AMK_OPCODE_COPY, (gint[]) { bo, bs }, 2, "count", N, NULL);
  ex = make_executor (p, 0);
  upload (ex, bx, x, N * 4);
  for (guint run = 0; run < 5; run++)
    {
      g_autofree float *got = NULL;
      for (guint k = 0; k < N; k++)
        want[k] = want[k] + x[k];
      run_ok (ex);
      got = (float *) download (ex, bo, NULL);
      g_assert_cmpmem (got, N * 4, want, N * 4);
    }
}

/* The executor's own deadlock guard: a program marked verified behind the verifier's
 * back must not hang. */
static void
test_runtime_deadlock_guard (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  g_autoptr(AmkCpuExecutor) ex = NULL;
  GError *error = NULL;
  gint c = amk_program_add_counter (p, NULL);
  gint i;

  test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  i = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
  ex = make_executor (p, 0);
  test_wait (p, i, c, 1);
  p->verified = TRUE;    /* lie */
  g_assert_false (amk_cpu_executor_run (ex, &error));
  g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_TIMEOUT);
  g_clear_error (&error);
}

/* Picking the next instruction scans no queues: 65,536 queues of one NOP each (a scan
 * of every queue per instruction took 35 s), and a chain through all of them, each
 * queue waiting for the counter of the queue before it (parked, then woken). */
static void
test_many_queues (void)
{
  const guint n = 65536;
  g_autoptr(AmkProgram) p = amk_program_new (n);
  g_autoptr(AmkProgram) chain = amk_program_new (n);
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autoptr(AmkCpuExecutor) chain_ex = NULL;
  GError *error = NULL;
  gint before = -1;
  gint64 start;

  for (guint q = 0; q < n; q++)
    {
      gint c = amk_program_add_counter (chain, NULL);
      gint i;

      test_add (p, q, AMK_OPCODE_NOP, NULL, 0, NULL);
      i = test_add (chain, n - 1 - q, AMK_OPCODE_NOP, NULL, 0, NULL);
      if (before >= 0)
        test_wait (chain, i, before, 1);
      test_signal (chain, i, c, 1);
      before = c;
    }
  ex = make_executor (p, 1);
  chain_ex = make_executor (chain, 2);
  /* the seeded scheduler (1), then worker threads: on those each step of the chain is
   * another worker's queue, parked on its counter and handed back by the signal */
  for (guint threads = 1; threads <= 3; threads++)
    {
      amk_cpu_executor_set_threads (ex, threads);
      amk_cpu_executor_set_threads (chain_ex, threads);
      start = g_get_monotonic_time ();
      g_assert_true (amk_cpu_executor_run (ex, &error));
      g_assert_no_error (error);
      g_assert_true (amk_cpu_executor_run (chain_ex, &error));
      g_assert_no_error (error);
      g_assert_cmpint (g_get_monotonic_time () - start, <, 5 * G_USEC_PER_SEC);
    }
}

/* On worker threads the split-K slices of three queues add onto y at once: every add
 * lands (a lost one would leave 1e8 or -1e8), in one of the orders. */
static void
test_workers_split_k (void)
{
  gint y;
  g_autoptr(AmkProgram) p = split_k_program (&y);
  g_autoptr(AmkCpuExecutor) ex = make_executor (p, 0);

  amk_cpu_executor_set_threads (ex, 3);
  for (guint round = 0; round < 200; round++)
    run_split_k (ex, y);
}

/* A program with GRID_SYNCs, chains and a TRAP, on 2 to 4 workers: the outputs of the
 * seeded scheduler, and the TRAP's record. */
static void
test_workers_phases (void)
{
  enum { n_queues = 5 };
  const guint m = 64;
  g_autoptr(AmkProgram) p = amk_program_new (n_queues);
  g_autoptr(AmkProgram) trap = amk_program_new (n_queues);
  const gint in = test_add_buffer (p, "in", AMK_DTYPE_F32, n_queues * m, AMK_BUFFER_ROLE_INPUT);
  const gint a = test_add_buffer (p, "a", AMK_DTYPE_F32, n_queues * m, AMK_BUFFER_ROLE_SCRATCH);
  const gint out = test_add_buffer (p, "out", AMK_DTYPE_F32, n_queues * m, AMK_BUFFER_ROLE_OUTPUT);
  gint c[n_queues];
  g_autoptr(AmkCpuExecutor) seeded = NULL;
  g_autoptr(AmkCpuExecutor) ex = NULL;
  g_autoptr(AmkAbortRecord) record = NULL;
  g_autofree float *data = g_new (float, n_queues * m);
  g_autofree float *zeros = g_new0 (float, n_queues * m);
  g_autoptr(GBytes) want = NULL;
  GError *error = NULL;

  for (guint i = 0; i < n_queues * m; i++)
    data[i] = (float) g_test_rand_double_range (-1, 1);
  for (guint q = 0; q < n_queues; q++)
    c[q] = amk_program_add_counter (p, NULL);
  for (guint round = 0; round < 3; round++)
    for (guint q = 0; q < n_queues; q++)
      {
        /* a[q] = in[q] + out[q + 1], then in a chain: out[q] = a[q] + out[q - 1] */
        const guint next = (q + 1) % n_queues;
        gint i;

        test_add (p, q, AMK_OPCODE_ADD, (gint[]) { a, in, out }, 3, "dst_offset", q * m,
                  "a_offset", q * m, "b_offset", next * m, "count", m, NULL);
        test_add (p, q, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
        i = test_add (p, q, AMK_OPCODE_ADD, (gint[]) { out, a, out }, 3, "dst_offset", q * m,
                      "a_offset", q * m, "b_offset", (q + n_queues - 1) % n_queues * m, "count", m,
                      NULL);
        if (q > 0)
          test_wait (p, i, c[q - 1], round + 1);
        test_signal (p, i, c[q], 1);
        test_add (p, q, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
      }
  seeded = make_executor (p, 5);
  upload (seeded, in, data, n_queues * m * 4);
  upload (seeded, out, zeros, n_queues * m * 4);
  run_ok (seeded);
  want = amk_cpu_executor_download (seeded, out, &error);
  g_assert_no_error (error);
  ex = make_executor (p, 0);
  for (guint threads = 2; threads <= 4; threads++)
    for (guint run = 0; run < 10; run++)
      {
        g_autoptr(GBytes) got = NULL;

        amk_cpu_executor_set_threads (ex, threads);
        upload (ex, in, data, n_queues * m * 4);
        upload (ex, out, zeros, n_queues * m * 4);
        run_ok (ex);
        got = amk_cpu_executor_download (ex, out, &error);
        g_assert_no_error (error);
        g_assert_true (g_bytes_equal (got, want));
      }

  for (guint q = 0; q < n_queues; q++)
    {
      test_add (trap, q, AMK_OPCODE_NOP, NULL, 0, NULL);
      test_add (trap, q, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    }
  test_add (trap, 3, AMK_OPCODE_TRAP, NULL, 0, "code", 77, NULL);
  g_assert_true (amk_executor_load (AMK_EXECUTOR (ex), trap, &error));
  g_assert_no_error (error);
  amk_cpu_executor_set_threads (ex, 2);
  g_assert_false (amk_cpu_executor_run (ex, &error));
  g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
  g_clear_error (&error);
  record = amk_cpu_executor_get_last_abort (ex);
  g_assert_nonnull (record);
  g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_TRAP);
  g_assert_cmpint (record->queue, ==, 3);
  g_assert_cmpint (record->instruction, ==, 2);
  g_assert_cmpint (record->detail, ==, 77);
}

int
main (int argc, char **argv)
{
  static const struct { const char *name; AmkDType dtype; } dtypes[] = {
    { "f32", AMK_DTYPE_F32 }, { "f16", AMK_DTYPE_F16 }, { "bf16", AMK_DTYPE_BF16 },
    { "i32", AMK_DTYPE_I32 }, { "u8", AMK_DTYPE_U8 },
  };

  test_init (&argc, &argv);

  for (guint i = 0; i < G_N_ELEMENTS (dtypes); i++)
    {
      g_autofree char *path = g_strdup_printf ("/amk/cpu-executor/ops/%s", dtypes[i].name);
      g_test_add_data_func (path, GINT_TO_POINTER (dtypes[i].dtype), test_ops_dtype);
    }
  g_test_add_func ("/amk/cpu-executor/chain", test_chain);
  g_test_add_func ("/amk/cpu-executor/grid-sync-phases", test_grid_sync_phases);
  g_test_add_func ("/amk/cpu-executor/racy-program-refused", test_racy_program_refused);
  g_test_add_func ("/amk/cpu-executor/seeded-schedule", test_seeded_schedule);
  g_test_add_func ("/amk/cpu-executor/same-seed", test_same_seed);
  g_test_add_func ("/amk/cpu-executor/properties", test_properties);
  g_test_add_func ("/amk/cpu-executor/new-errors", test_new_errors);
  g_test_add_func ("/amk/cpu-executor/trap", test_trap);
  g_test_add_func ("/amk/cpu-executor/not-verified", test_not_verified);
  g_test_add_func ("/amk/cpu-executor/upload-download", test_upload_download);
  g_test_add_func ("/amk/cpu-executor/scratch-persists", test_scratch_persists);
  g_test_add_func ("/amk/cpu-executor/runtime-deadlock-guard", test_runtime_deadlock_guard);
  g_test_add_func ("/amk/cpu-executor/many-queues", test_many_queues);
  g_test_add_func ("/amk/cpu-executor/workers/split-k", test_workers_split_k);
  g_test_add_func ("/amk/cpu-executor/workers/phases", test_workers_phases);

  return g_test_run ();
}
