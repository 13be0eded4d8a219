/* test-gpu.c: the megakernel on a real GPU against the CPU executor. Every test skips
 * (not fails) where there is no CUDA device.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <string.h>
#include "gpu-test-common.h"
#include "amk-abi.h" /* AMK_MATVEC_SMEM_BYTES (kernels/, on the include path) */

static GBytes *
random_bytes (gsize n_bytes, AmkDType dtype)
{
  guint8 *data = g_malloc (n_bytes);

  for (gsize i = 0; i + 4 <= n_bytes; i += 4)
    {
      guint32 v;
      if (dtype == AMK_DTYPE_F32)
        {
          float f = (float) g_test_rand_double_range (-4.0, 4.0);
          memcpy (&v, &f, 4);
        }
      else if (dtype == AMK_DTYPE_F16)
        /* two halves with exponents in a sane range: sign, exp 5..25, mantissa */
        v = ((guint32) g_test_rand_int_range (0x1400, 0x6400) | (g_test_rand_bit () ? 0x8000u : 0)) |
            (((guint32) g_test_rand_int_range (0x1400, 0x6400) | (g_test_rand_bit () ? 0x8000u : 0)) << 16);
      else if (dtype == AMK_DTYPE_BF16)
        v = ((guint32) g_test_rand_int_range (0x3c00, 0x4100) | (g_test_rand_bit () ? 0x8000u : 0)) |
            (((guint32) g_test_rand_int_range (0x3c00, 0x4100) | (g_test_rand_bit () ? 0x8000u : 0)) << 16);
      else
        v = g_test_rand_int ();
      memcpy (data + i, &v, 4);
    }
  for (gsize i = n_bytes & ~(gsize) 3; i < n_bytes; i++)
    data[i] = (guint8) g_test_rand_int ();
  return g_bytes_new_take (data, n_bytes);
}

/* Runs `program` on the CPU executor and on the GPU with the same random inputs and the
 * outputs poisoned first; asserts every non-scratch buffer ends up byte-identical. */
static void
assert_gpu_matches_cpu (AmkLauncher *launcher, AmkProgram *program, guint launches)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkCpuExecutor) cpu = amk_cpu_executor_new (program, &error);
  guint n = amk_program_get_n_buffers (program);

  g_assert_no_error (error);
  g_assert_true (amk_launcher_load (launcher, program, &error));
  g_assert_no_error (error);

  for (guint b = 0; b < n; b++)
    {
      AmkBufferRole role = amk_program_get_buffer_role (program, b);
      gsize size = amk_program_get_buffer_size (program, b);
      g_autoptr(GBytes) data = NULL;

      if (role == AMK_BUFFER_ROLE_SCRATCH || role == AMK_BUFFER_ROLE_CONSTANT)
        continue;
      data = role == AMK_BUFFER_ROLE_OUTPUT ? poison (size)
                                            : random_bytes (size, amk_program_get_buffer_dtype (program, b));
      g_assert_true (amk_cpu_executor_upload (cpu, b, data, &error));
      g_assert_true (amk_launcher_upload (launcher, b, data, &error));
      g_assert_no_error (error);
    }

  g_assert_true (amk_cpu_executor_run (cpu, &error));
  g_assert_no_error (error);
  for (guint l = 0; l < launches; l++)
    {
      amk_launcher_launch (launcher, NULL, &error);
      g_assert_no_error (error);
    }

  for (guint b = 0; b < n; b++)
    {
      g_autoptr(GBytes) want = NULL;
      g_autoptr(GBytes) got = NULL;

      if (amk_program_get_buffer_role (program, b) == AMK_BUFFER_ROLE_SCRATCH)
        continue;
      want = amk_cpu_executor_download (cpu, b, &error);
      got = amk_launcher_download (launcher, b, &error);
      g_assert_no_error (error);
      if (!g_bytes_equal (want, got))
        g_error ("buffer %u “%s” differs between the GPU and the CPU executor",
                 b, amk_program_get_buffer_name (program, b));
    }
}

static void
test_utility_ops (void)
{
  static const AmkDType dtypes[] = { AMK_DTYPE_F32, AMK_DTYPE_F16, AMK_DTYPE_BF16, AMK_DTYPE_I32, AMK_DTYPE_U8 };
  g_autoptr(AmkLauncher) launcher = NULL;

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);

  for (guint d = 0; d < G_N_ELEMENTS (dtypes); d++)
    {
      g_autoptr(AmkProgram) p = amk_program_new (4);
      gint64 shape[] = { 4099 };
      gint a = amk_program_add_buffer (p, "a", dtypes[d], shape, 1, AMK_BUFFER_ROLE_INPUT, NULL);
      gint b = amk_program_add_buffer (p, "b", dtypes[d], shape, 1, AMK_BUFFER_ROLE_INPUT, NULL);
      gint s = amk_program_add_buffer (p, "s", dtypes[d], shape, 1, AMK_BUFFER_ROLE_SCRATCH, NULL);
      gint out = amk_program_add_buffer (p, "out", dtypes[d], shape, 1, AMK_BUFFER_ROLE_OUTPUT, NULL);
      gint c0 = amk_program_add_counter (p, "copied"), c1 = amk_program_add_counter (p, "filled");
      gint i;

      /* queue 0: s[3..4003) = a[1..4001); queue 1: out[0..4099) = fill 1.75;
       * queue 2 after both: out[7..4007) = s[3..) + b[5..); queue 3: a NOP */
      i = add_ins (p, 0, AMK_OPCODE_COPY, (gint[]) { s, a }, 2, "dst_offset", 3, "src_offset", 1,
                   "count", 4000, NULL);
      signal_on (p, i, c0);
      i = add_ins (p, 1, AMK_OPCODE_FILL, (gint[]) { out }, 1, "count", 4099, NULL);
      amk_program_set_param_float (p, i, "value", 1.75f, NULL);
      signal_on (p, i, c1);
      i = add_ins (p, 2, AMK_OPCODE_ADD, (gint[]) { out, s, b }, 3, "dst_offset", 7, "a_offset", 3,
                   "b_offset", 5, "count", 4000, NULL);
      wait_on (p, i, c0, 1);
      wait_on (p, i, c1, 1);
      add_ins (p, 3, AMK_OPCODE_NOP, NULL, 0, NULL);
      assert_gpu_matches_cpu (launcher, p, 1);
    }
}

/* Long chains that cross SMs: 132 queues; stage k of queue q adds the slices of q and
 * of q-1 (mod 132) of stage k-1. Stages alternate between two buffers, so stage k of q
 * may overwrite stage k-2 only once q+1 has read it (its stage k-1 finished). */
static void
test_chains (void)
{
  const guint n_queues = 132, stages = 40, width = 64;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkProgram) p = NULL;
  gint64 shape[] = { (gint64) n_queues * width };
  gint in, acc[2], out;
  g_autofree gint *done = g_new (gint, n_queues);

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);
  p = amk_program_new (n_queues);
  in = amk_program_add_buffer (p, "in", AMK_DTYPE_F32, shape, 1, AMK_BUFFER_ROLE_INPUT, NULL);
  acc[0] = amk_program_add_buffer (p, "even", AMK_DTYPE_F32, shape, 1, AMK_BUFFER_ROLE_SCRATCH, NULL);
  acc[1] = amk_program_add_buffer (p, "odd", AMK_DTYPE_F32, shape, 1, AMK_BUFFER_ROLE_SCRATCH, NULL);
  out = amk_program_add_buffer (p, "out", AMK_DTYPE_F32, shape, 1, AMK_BUFFER_ROLE_OUTPUT, NULL);
  for (guint q = 0; q < n_queues; q++)
    done[q] = amk_program_add_counter (p, NULL);

  for (guint q = 0; q < n_queues; q++)
    {
      gint i = add_ins (p, q, AMK_OPCODE_COPY, (gint[]) { acc[0], in }, 2,
                        "dst_offset", q * width, "src_offset", q * width, "count", width, NULL);
      signal_on (p, i, done[q]);
    }
  for (guint k = 1; k < stages; k++)
    for (guint q = 0; q < n_queues; q++)
      {
        guint prev = (q + n_queues - 1) % n_queues, next = (q + 1) % n_queues;
        gint i = add_ins (p, q, AMK_OPCODE_ADD, (gint[]) { acc[k % 2], acc[(k - 1) % 2], acc[(k - 1) % 2] }, 3,
                          "dst_offset", q * width, "a_offset", q * width, "b_offset", prev * width,
                          "count", width, NULL);
        wait_on (p, i, done[prev], k);
        wait_on (p, i, done[next], k);
        signal_on (p, i, done[q]);
      }
  for (guint q = 0; q < n_queues; q++)
    add_ins (p, q, AMK_OPCODE_COPY, (gint[]) { out, acc[(stages - 1) % 2] }, 2,
             "dst_offset", q * width, "src_offset", q * width, "count", width, NULL);
  g_assert_true (amk_program_verify (p, NULL));
  assert_gpu_matches_cpu (launcher, p, 1);
}

/* A random DAG of thousands of instructions: each instruction adds two earlier results
 * into its own slot, waiting on the counters of the instructions that produced them. */
static void
test_random_dag (void)
{
  const guint n_queues = 132, n_nodes = 6000, width = 8;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkProgram) p = NULL;
  gint64 shape[] = { (gint64) n_nodes * width };
  gint in, val;

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);
  p = amk_program_new (n_queues);
  in = amk_program_add_buffer (p, "in", AMK_DTYPE_I32, shape, 1, AMK_BUFFER_ROLE_INPUT, NULL);
  val = amk_program_add_buffer (p, "val", AMK_DTYPE_I32, shape, 1, AMK_BUFFER_ROLE_OUTPUT, NULL);

  for (guint n = 0; n < n_nodes; n++)
    {
      /* counter n: node n is done (its own counter, so a target of 1 names it exactly) */
      guint queue = g_test_rand_int_range (0, n_queues);
      gint c = amk_program_add_counter (p, NULL);
      gint i;

      if (n < 64)
        i = add_ins (p, queue, AMK_OPCODE_COPY, (gint[]) { val, in }, 2,
                     "dst_offset", n * width, "src_offset", n * width, "count", width, NULL);
      else
        {
          guint x = g_test_rand_int_range (0, n), y = g_test_rand_int_range (0, n);
          i = add_ins (p, queue, AMK_OPCODE_ADD, (gint[]) { val, val, val }, 3,
                       "dst_offset", n * width, "a_offset", x * width, "b_offset", y * width, "count", width,
                       NULL);
          wait_on (p, i, x, 1);
          wait_on (p, i, y, 1);
        }
      signal_on (p, i, c);
    }
  g_assert_true (amk_program_verify (p, NULL));
  /* 100 launches in a row; counters are cleared before each, results must not drift */
  assert_gpu_matches_cpu (launcher, p, 100);
}

static void
test_rejected (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkProgram) p = NULL;
  gint64 max_grid;
  guint threads;

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);
  /* the kernel's own limit (__launch_bounds__), asked at a size it always accepts */
  {
    g_autoptr(AmkKernelAttributes) attr = amk_launcher_kernel_attributes (launcher, 32, 0, &error);
    g_assert_no_error (error);
    g_assert_nonnull (attr);
    threads = (guint) attr->max_threads;
  }
  g_assert_cmpuint (threads, >=, 32);
  amk_launcher_set_threads_per_block (launcher, threads);
  max_grid = amk_launcher_max_coresident_blocks (launcher, threads, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpint (max_grid, >, 0);
  g_test_message ("max cooperative grid at %u threads (the kernel's maximum): %" G_GINT64_FORMAT,
                  threads, max_grid);

  p = amk_program_new (max_grid + 1);
  for (gint64 q = 0; q <= max_grid; q++)
    add_ins (p, q, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_true (amk_launcher_load (launcher, p, &error));
  g_assert_false (amk_launcher_launch (launcher, NULL, &error));
  g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_REJECTED);
  g_test_message ("%s", error->message);
}

static AmkProgram *
make_nop_program (guint n_queues)
{
  AmkProgram *p = amk_program_new (n_queues);
  for (guint q = 0; q < n_queues; q++)
    add_ins (p, q, AMK_OPCODE_NOP, NULL, 0, NULL);
  return p;
}

static void
check_good_launch (AmkLauncher *launcher)
{
  g_autoptr(AmkProgram) good = make_nop_program (132);
  g_autoptr(GError) error = NULL;

  g_assert_true (amk_launcher_load (launcher, good, &error));
  g_assert_true (amk_launcher_launch (launcher, NULL, &error));
  g_assert_no_error (error);
  g_assert_null (amk_launcher_get_last_abort (launcher));
}

static void
test_timeout (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkProgram) p = NULL;
  g_autoptr(AmkAbortRecord) record = NULL;
  gint c, i;
  gint64 start, elapsed_ms;

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);
  amk_launcher_set_watchdog_ms (launcher, 200);
  p = make_nop_program (8);
  c = amk_program_add_counter (p, "never");
  i = add_ins (p, 5, AMK_OPCODE_NOP, NULL, 0, NULL);
  wait_on (p, i, c, 1);
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK);
  g_clear_error (&error);

  g_assert_true (amk_launcher_load_unverified (launcher, p, &error));
  start = g_get_monotonic_time ();
  g_assert_false (amk_launcher_launch (launcher, NULL, &error));
  elapsed_ms = (g_get_monotonic_time () - start) / 1000;
  g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_TIMEOUT);
  g_test_message ("TIMEOUT after %" G_GINT64_FORMAT " ms (budget 200 ms): %s", elapsed_ms, error->message);
  g_assert_cmpint (elapsed_ms, <, 200 + 300);
  record = amk_launcher_get_last_abort (launcher);
  g_assert_nonnull (record);
  g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_TIMEOUT);
  g_assert_cmpint (record->queue, ==, 5);
  g_assert_cmpint (record->instruction, ==, 1);
  g_assert_cmpint (record->counter, ==, c);
  g_assert_cmpuint (record->observed, ==, 0);
  g_assert_cmpuint (record->target, ==, 1);

  check_good_launch (launcher);
}

static void
test_trap (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkProgram) p = NULL;
  g_autoptr(AmkAbortRecord) record = NULL;

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);
  p = make_nop_program (16);
  add_ins (p, 9, AMK_OPCODE_TRAP, NULL, 0, "code", 4242, NULL);
  g_assert_true (amk_launcher_load (launcher, p, &error));
  g_assert_false (amk_launcher_launch (launcher, NULL, &error));
  g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
  record = amk_launcher_get_last_abort (launcher);
  g_assert_nonnull (record);
  g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_TRAP);
  g_assert_cmpint (record->queue, ==, 9);
  g_assert_cmpint (record->instruction, ==, 1);
  g_assert_cmpint (record->detail, ==, 4242);
  check_good_launch (launcher);
}

static void
on_launched (GObject *source, GAsyncResult *result, gpointer data)
{
  GError **error = data;
  amk_launcher_launch_finish (AMK_LAUNCHER (source), result, error);
}

static gboolean
cancel_later (gpointer data)
{
  g_cancellable_cancel (data);
  return G_SOURCE_REMOVE;
}

static void
test_cancel (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkProgram) p = NULL;
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  gint c, i;

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);
  amk_launcher_set_watchdog_ms (launcher, 20000);
  p = make_nop_program (4);
  c = amk_program_add_counter (p, "never");
  i = add_ins (p, 2, AMK_OPCODE_NOP, NULL, 0, NULL);
  wait_on (p, i, c, 1);
  g_assert_true (amk_launcher_load_unverified (launcher, p, &error));

  amk_launcher_launch_async (launcher, cancellable, on_launched, &error);
  g_timeout_add (100, cancel_later, cancellable);
  while (error == NULL)
    g_main_context_iteration (NULL, TRUE);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  check_good_launch (launcher);
}

static void
test_trace (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkProgram) p = NULL;
  g_autofree char *json = NULL;

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);
  p = make_nop_program (132);
  amk_launcher_set_trace (launcher, TRUE);
  g_assert_true (amk_launcher_load (launcher, p, &error));
  /* nothing traced yet: LAUNCH_ERROR_FAILED, saying what to do */
  g_assert_null (amk_launcher_get_trace_json (launcher, &error));
  g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "trace"));
  g_clear_error (&error);
  g_assert_true (amk_launcher_launch (launcher, NULL, &error));
  json = amk_launcher_get_trace_json (launcher, &error);
  g_assert_no_error (error);
  g_assert_nonnull (strstr (json, "\"traceEvents\""));
  /* one event per instruction */
  {
    guint events = 0;
    for (const char *s = json; (s = strstr (s, "\"ph\": \"X\"")) != NULL; s++)
      events++;
    g_assert_cmpuint (events, ==, 132);
  }
}

/* The device time of a launch: 0 before any, positive and within the host's wall time of
 * the call after a good launch, 0 again after a failed one. */
static void
test_launch_time (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkProgram) good = NULL, trap = NULL;
  gint64 start;
  double wall_ms, device_ms;

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);
  g_assert_cmpfloat (amk_launcher_get_last_launch_time (launcher), ==, 0.0);
  good = make_nop_program (132);
  g_assert_true (amk_launcher_load (launcher, good, &error));
  start = g_get_monotonic_time ();
  g_assert_true (amk_launcher_launch (launcher, NULL, &error));
  wall_ms = (g_get_monotonic_time () - start) / 1000.0;
  device_ms = amk_launcher_get_last_launch_time (launcher);
  g_test_message ("launch: %.4f ms on the device, %.4f ms on the host", device_ms, wall_ms);
  g_assert_cmpfloat (device_ms, >, 0.0);
  g_assert_cmpfloat (device_ms, <=, wall_ms);

  trap = make_nop_program (16);
  add_ins (trap, 3, AMK_OPCODE_TRAP, NULL, 0, "code", 7, NULL);
  g_assert_true (amk_launcher_load (launcher, trap, &error));
  g_assert_false (amk_launcher_launch (launcher, NULL, &error));
  g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
  g_assert_cmpfloat (amk_launcher_get_last_launch_time (launcher), ==, 0.0);
}

/* 1000 load/upload/launch/destroy cycles must leave the device's free memory as it was. */
static void
test_no_leak (void)
{
  g_autoptr(GError) error = NULL;
  guint64 free_before = 0, free_after = 0, total = 0;
  g_autoptr(AmkLauncher) probe = NULL;

  if (!need_gpu ())
    return;
  probe = amk_launcher_new (0);
  check_good_launch (probe); /* context and module loaded before measuring */
  g_assert_true (amk_launcher_memory_info (probe, &free_before, &total, &error));

  for (guint cycle = 0; cycle < 1000; cycle++)
    {
      g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
      g_autoptr(AmkProgram) p = amk_program_new (8);
      gint64 shape[] = { 1 << 16 };
      gint a = amk_program_add_buffer (p, "a", AMK_DTYPE_F32, shape, 1, AMK_BUFFER_ROLE_INPUT, NULL);
      gint b = amk_program_add_buffer (p, "b", AMK_DTYPE_F32, shape, 1, AMK_BUFFER_ROLE_OUTPUT, NULL);
      g_autoptr(GBytes) data = random_bytes (4 << 16, AMK_DTYPE_F32);

      add_ins (p, cycle % 8, AMK_OPCODE_COPY, (gint[]) { b, a }, 2, "count", 1 << 16, NULL);
      g_assert_true (amk_launcher_load (launcher, p, &error));
      g_assert_true (amk_launcher_upload (launcher, a, data, &error));
      g_assert_true (amk_launcher_launch (launcher, NULL, &error));
      g_assert_no_error (error);
    }
  g_assert_true (amk_launcher_memory_info (probe, &free_after, &total, &error));
  g_test_message ("free device memory before %" G_GUINT64_FORMAT " after %" G_GUINT64_FORMAT,
                  free_before, free_after);
  /* the driver's free-memory figure moves in 2 MiB pages; allow one */
  g_assert_cmpint ((gint64) free_before - (gint64) free_after, <=, 2 << 20);
}

/* ---- MATVEC ------------------------------------------------------------------------- */

#define MV_NONE (-1)

enum { RES_NONE, RES_SEPARATE, RES_IN_PLACE };

typedef struct {
  AmkDType w, y, x;
  gint     bias;      /* a dtype or MV_NONE */
  gint     residual;  /* RES_* */
  gint     res_dtype; /* RES_SEPARATE: its dtype */
  gint     norm;      /* the RMSNORM weight's dtype or MV_NONE */
  guint    rows, k, tile;
  gboolean wait;      /* x is copied into scratch by another queue; every tile waits */
  gboolean w_input;   /* W is an INPUT buffer, not CONSTANT (no loads before the waits) */
  gboolean gated;     /* a seventh buffer, up (x's dtype): x' = silu(x) * up */
  guint    splits;    /* > 1: each row tile in that many split-K column slices (y in place) */
} MatvecCase;

static const char *
mv_dtype_name (gint dtype)
{
  switch (dtype)
    {
    case AMK_DTYPE_F32: return "f32";
    case AMK_DTYPE_F16: return "f16";
    case AMK_DTYPE_BF16: return "bf16";
    default: return "-";
    }
}

static gsize
mv_esize (gint dtype)
{
  return dtype == AMK_DTYPE_F32 ? 4 : 2;
}

/* n random elements, never zero: magnitudes in [1/16, 2), random signs, all normal */
static GBytes *
mv_random (gsize n, AmkDType dtype)
{
  guint8 *d = g_malloc (n * mv_esize (dtype));

  for (gsize i = 0; i < n; i++)
    {
      guint32 sign = g_test_rand_bit () ? 1u : 0u;
      if (dtype == AMK_DTYPE_F32)
        {
          float f = (float) g_test_rand_double_range (0.0625, 2.0);
          if (sign)
            f = -f;
          memcpy (d + 4 * i, &f, 4);
        }
      else
        {
          guint16 v;
          if (dtype == AMK_DTYPE_BF16) /* exponent 2^-4 .. 2^0, 7 random mantissa bits */
            v = (guint16) ((sign << 15) | ((guint32) g_test_rand_int_range (0x7b, 0x80) << 7) |
                           (guint32) g_test_rand_int_range (0, 128));
          else /* F16: exponent 2^-4 .. 2^0, 10 random mantissa bits */
            v = (guint16) ((sign << 15) | ((guint32) g_test_rand_int_range (11, 16) << 10) |
                           (guint32) g_test_rand_int_range (0, 1024));
          memcpy (d + 2 * i, &v, 2);
        }
    }
  return g_bytes_new_take (d, n * mv_esize (dtype));
}

/* y's initial contents: random rows for an in-place residual, then the poisoned pad */
static GBytes *
mv_initial_y (const MatvecCase *c, guint pad)
{
  gsize es = mv_esize (c->y);
  guint8 *d = g_malloc ((c->rows + pad) * es);

  memset (d, 0xa5, (c->rows + pad) * es);
  if (c->residual == RES_IN_PLACE)
    {
      g_autoptr(GBytes) r = mv_random (c->rows, c->y);
      memcpy (d, g_bytes_get_data (r, NULL), c->rows * es);
    }
  return g_bytes_new_take (d, (c->rows + pad) * es);
}

static gboolean
mv_any_bf16 (const MatvecCase *c)
{
  return c->w == AMK_DTYPE_BF16 || c->y == AMK_DTYPE_BF16 || c->x == AMK_DTYPE_BF16 ||
         c->bias == AMK_DTYPE_BF16 || c->norm == AMK_DTYPE_BF16 ||
         (c->residual == RES_SEPARATE && c->res_dtype == AMK_DTYPE_BF16);
}

/* Builds the case's program (tiles of c->tile rows, tile i on queue i mod 132), runs it
 * on the CPU executor once and on the GPU under several (threads, dynamic shared memory)
 * configurations; prints one PASS/FAIL line per configuration. */
static gboolean
run_matvec_case (const MatvecCase *c, guint max_threads)
{
  const guint n_queues = 132, pad = 5;
  const struct { guint threads, smem; } configs[] = {
    { 512, AMK_MATVEC_SMEM_BYTES }, /* ring */
    { 512, 0 },                     /* direct loads */
    { 256, AMK_MATVEC_SMEM_BYTES },
    { 256, 0 },
    { 96, AMK_MATVEC_SMEM_BYTES },  /* 3 warps, one of them the fetch warp */
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkProgram) p = amk_program_new (n_queues);
  g_autoptr(AmkCpuExecutor) cpu = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(GBytes) wdata = NULL, xdata = NULL, bdata = NULL, rdata = NULL, ndata = NULL, udata = NULL;
  g_autoptr(GBytes) y0 = NULL, want = NULL;
  gint64 shape_y[] = { c->rows + pad }, shape_w[] = { c->rows, c->k }, shape_k[] = { c->k }, shape_r[] = { c->rows };
  gint y, w, x, xsrc, bias = MV_NONE, res = MV_NONE, norm = MV_NONE, up = MV_NONE, counter = -1;
  const double tol = mv_any_bf16 (c) ? 1e-2 : 1e-5;
  gboolean ok = TRUE;
  guint n_tiles = 0;
  g_autofree char *label = NULL;

  y = amk_program_add_buffer (p, "y", c->y, shape_y, 1, AMK_BUFFER_ROLE_OUTPUT, &error);
  g_assert_no_error (error);
  w = amk_program_add_buffer (p, "W", c->w, shape_w, 2,
                              c->w_input ? AMK_BUFFER_ROLE_INPUT : AMK_BUFFER_ROLE_CONSTANT, &error);
  g_assert_no_error (error);
  x = amk_program_add_buffer (p, "x", c->x, shape_k, 1, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_no_error (error);
  xsrc = x;
  if (c->wait)
    {
      xsrc = amk_program_add_buffer (p, "x copy", c->x, shape_k, 1, AMK_BUFFER_ROLE_SCRATCH, &error);
      g_assert_no_error (error);
      counter = amk_program_add_counter (p, "x ready");
    }
  if (c->bias != MV_NONE)
    bias = amk_program_add_buffer (p, "bias", c->bias, shape_r, 1, AMK_BUFFER_ROLE_INPUT, &error);
  if (c->residual == RES_SEPARATE)
    res = amk_program_add_buffer (p, "residual", c->res_dtype, shape_r, 1, AMK_BUFFER_ROLE_INPUT, &error);
  else if (c->residual == RES_IN_PLACE)
    res = y;
  if (c->norm != MV_NONE)
    norm = amk_program_add_buffer (p, "norm", c->norm, shape_k, 1, AMK_BUFFER_ROLE_CONSTANT, &error);
  if (c->gated)
    up = amk_program_add_buffer (p, "up", c->x, shape_k, 1, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_no_error (error);

  wdata = mv_random ((gsize) c->rows * c->k, c->w);
  xdata = mv_random (c->k, c->x);
  if (bias != MV_NONE)
    bdata = mv_random (c->rows, c->bias);
  if (c->residual == RES_SEPARATE)
    rdata = mv_random (c->rows, c->res_dtype);
  if (c->gated)
    udata = mv_random (c->k, c->x);
  if (norm != MV_NONE)
    {
      ndata = mv_random (c->k, c->norm);
      g_assert_true (amk_program_set_buffer_data (p, norm, ndata, &error));
    }
  if (!c->w_input)
    g_assert_true (amk_program_set_buffer_data (p, w, wdata, &error));
  g_assert_no_error (error);
  y0 = mv_initial_y (c, pad);

  if (c->wait)
    {
      /* the copy runs on the last queue; the tiles there wait behind it in order */
      gint i = add_ins (p, n_queues - 1, AMK_OPCODE_COPY, (gint[]) { xsrc, x }, 2,
                        "count", c->k, NULL);
      signal_on (p, i, counter);
    }
  for (guint r0 = 0; r0 < c->rows; r0 += c->tile)
    for (guint s = 0; s < MAX (c->splits, 1); s++, n_tiles++)
      {
        const guint n = MIN (c->tile, c->rows - r0), per = 16 / mv_esize (c->w), chunks = c->k / per;
        const guint c0 = s * chunks / MAX (c->splits, 1), c1 = (s + 1) * chunks / MAX (c->splits, 1);
        gint i = add_ins (p, n_tiles % n_queues, AMK_OPCODE_MATVEC,
                          (gint[]) { y, w, xsrc, bias, res, norm, up }, c->gated ? 7 : 6,
                          "row0", r0, "rows", n, "k", c->k, "k0", c->splits > 1 ? c0 * per : 0,
                          "k_len", c->splits > 1 ? (c1 - c0) * per : 0, NULL);
        if (norm != MV_NONE)
          g_assert_true (amk_program_set_param_float (p, i, "eps", 1e-5f, &error));
        if (c->wait)
          wait_on (p, i, counter, 1);
      }
  g_assert_true (amk_program_verify (p, &error));
  g_assert_no_error (error);

  label = g_strdup_printf ("W=%s y=%s x=%s bias=%s residual=%s norm=%s rows=%u K=%u tile=%u (%u tiles, split-K %u)%s%s%s",
                           mv_dtype_name (c->w), mv_dtype_name (c->y), mv_dtype_name (c->x),
                           mv_dtype_name (c->bias),
                           c->residual == RES_NONE ? "-" : c->residual == RES_IN_PLACE ? "y(in place)"
                                                                                       : mv_dtype_name (c->res_dtype),
                           mv_dtype_name (c->norm), c->rows, c->k, c->tile, n_tiles, MAX (c->splits, 1),
                           c->wait ? " waits" : "", c->w_input ? " W=input" : " W=constant",
                           c->gated ? " x'=silu(x)*up" : "");

  /* the reference */
  cpu = amk_cpu_executor_new (p, &error);
  g_assert_no_error (error);
  g_assert_true (amk_cpu_executor_upload (cpu, x, xdata, &error));
  g_assert_true (amk_cpu_executor_upload (cpu, y, y0, &error));
  if (bdata != NULL)
    g_assert_true (amk_cpu_executor_upload (cpu, bias, bdata, &error));
  if (rdata != NULL)
    g_assert_true (amk_cpu_executor_upload (cpu, res, rdata, &error));
  if (udata != NULL)
    g_assert_true (amk_cpu_executor_upload (cpu, up, udata, &error));
  if (c->w_input)
    g_assert_true (amk_cpu_executor_upload (cpu, w, wdata, &error));
  g_assert_true (amk_cpu_executor_run (cpu, &error));
  g_assert_no_error (error);
  want = amk_cpu_executor_download (cpu, y, &error);
  g_assert_no_error (error);

  launcher = amk_launcher_new (0);
  g_assert_true (amk_launcher_load (launcher, p, &error));
  g_assert_no_error (error);

  for (guint f = 0; f < G_N_ELEMENTS (configs); f++)
    {
      const guint threads = MIN (configs[f].threads, max_threads);
      const guint smem = configs[f].smem;
      const gboolean ring = (guint64) threads * AMK_MATVEC_RING_BYTES_PER_THREAD + 4ull * c->k <= smem;
      g_autoptr(GBytes) got = NULL;
      const guint8 *g, *e;
      double num = 0.0, den = 0.0, err;
      gboolean pad_ok;

      amk_launcher_set_threads_per_block (launcher, threads);
      amk_launcher_set_dynamic_shared_memory (launcher, smem);
      g_assert_true (amk_launcher_upload (launcher, x, xdata, &error));
      g_assert_true (amk_launcher_upload (launcher, y, y0, &error));
      if (bdata != NULL)
        g_assert_true (amk_launcher_upload (launcher, bias, bdata, &error));
      if (rdata != NULL)
        g_assert_true (amk_launcher_upload (launcher, res, rdata, &error));
      if (udata != NULL)
        g_assert_true (amk_launcher_upload (launcher, up, udata, &error));
      if (c->w_input)
        g_assert_true (amk_launcher_upload (launcher, w, wdata, &error));
      g_assert_no_error (error);

      if (!amk_launcher_launch (launcher, NULL, &error))
        {
          g_test_message ("FAIL matvec %s | threads=%u smem=%u (%s): launch failed: %s",
                          label, threads, smem, ring ? "ring" : "direct", error->message);
          g_clear_error (&error);
          ok = FALSE;
          continue;
        }
      got = amk_launcher_download (launcher, y, &error);
      g_assert_no_error (error);
      g = g_bytes_get_data (got, NULL);
      e = g_bytes_get_data (want, NULL);
      for (guint r = 0; r < c->rows; r++)
        {
          double a = load_float (g, c->y, r), b = load_float (e, c->y, r);
          num += (a - b) * (a - b);
          den += b * b;
        }
      err = sqrt (num) / sqrt (den);
      /* rows no tile covers keep their poison, on the GPU as in the reference */
      pad_ok = memcmp (g + c->rows * mv_esize (c->y), e + c->rows * mv_esize (c->y),
                       pad * mv_esize (c->y)) == 0;
      if (err <= tol && pad_ok)
        g_test_message ("PASS matvec %s | threads=%u smem=%u (%s): rel err %.3g (tol %.0e)",
                        label, threads, smem, ring ? "ring" : "direct", err, tol);
      else
        {
          g_test_message ("FAIL matvec %s | threads=%u smem=%u (%s): rel err %.3g (tol %.0e)%s; "
                          "row 0: gpu %.6g cpu %.6g",
                          label, threads, smem, ring ? "ring" : "direct", err, tol,
                          pad_ok ? "" : ", WROTE PAST THE LAST TILE",
                          load_float (g, c->y, 0), load_float (e, c->y, 0));
          ok = FALSE;
        }
    }
  return ok;
}

static void
test_matvec (void)
{
  const gint F32 = AMK_DTYPE_F32, F16 = AMK_DTYPE_F16, BF16 = AMK_DTYPE_BF16;
  const MatvecCase cases[] = {
    /* w    y     x     bias  residual      res   norm   rows   K     tile wait  w_input */
    { BF16, F32,  F32,  MV_NONE, RES_NONE,  0,    MV_NONE, 4096, 2048, 16, FALSE, FALSE },
    { BF16, BF16, BF16, BF16, RES_SEPARATE, BF16, MV_NONE, 3000, 2304, 28, FALSE, FALSE },
    { F16,  F32,  F32,  F32,  RES_IN_PLACE, 0,    MV_NONE, 2500, 2048, 8,  FALSE, FALSE },
    { F32,  F32,  F32,  F32,  RES_NONE,     0,    F32,     1000, 2304, 5,  FALSE, FALSE },
    { BF16, F32,  BF16, MV_NONE, RES_IN_PLACE, 0, BF16,    4100, 2304, 32, FALSE, FALSE },
    { F32,  BF16, F32,  BF16, RES_SEPARATE, F32,  BF16,    777,  2048, 3,  FALSE, FALSE },
    { F16,  BF16, BF16, MV_NONE, RES_NONE,  0,    F32,     2048, 2304, 64, FALSE, FALSE },
    { F32,  F32,  F32,  F32,  RES_SEPARATE, F32,  MV_NONE, 1500, 2048, 40, FALSE, FALSE },
    /* rows of fewer than 32 chunks, or not a multiple of 32 chunks */
    { BF16, F32,  F32,  F32,  RES_NONE,     0,    F32,     1000, 8,    100, FALSE, FALSE },
    { F32,  F32,  F32,  MV_NONE, RES_IN_PLACE, 0, MV_NONE, 300,  4,    7,  FALSE, FALSE },
    { BF16, BF16, F32,  MV_NONE, RES_NONE,  0,    BF16,    600,  40,   9,  FALSE, FALSE },
    { F16,  F32,  BF16, F32,  RES_NONE,     0,    MV_NONE, 900,  1000, 11, FALSE, FALSE },
    /* counters: x produced by another queue (W loads before the wait when CONSTANT) */
    { BF16, F32,  F32,  MV_NONE, RES_NONE,  0,    F32,     4096, 2048, 32, TRUE,  FALSE },
    { BF16, F32,  F32,  BF16, RES_IN_PLACE, 0,    MV_NONE, 4096, 2048, 32, TRUE,  TRUE },
    /* one big tile: many rows per warp */
    { BF16, F32,  F32,  MV_NONE, RES_NONE,  0,    MV_NONE, 2048, 2048, 2048, FALSE, FALSE },
    /* large K: the ring still fits at 14336; at 16400 x' does not and even a launch with
     * shared memory takes the direct path */
    { BF16, F32,  F32,  MV_NONE, RES_NONE,  0,    BF16,    512,  14336, 4, FALSE, FALSE },
    { BF16, F32,  F32,  MV_NONE, RES_NONE,  0,    MV_NONE, 260,  16400, 2, FALSE, TRUE },
    /* the fused SILU_MUL (a layer's down projection), x produced on another queue */
    { BF16, F32,  F32,  MV_NONE, RES_IN_PLACE, 0, MV_NONE, 2048, 8192, 16, TRUE,  FALSE, TRUE },
    { BF16, BF16, BF16, F32,  RES_NONE,     0,    MV_NONE, 1000, 2304, 9,  FALSE, FALSE, TRUE },
    { F32,  F32,  F32,  MV_NONE, RES_NONE,  0,    MV_NONE, 300,  40,   7,  FALSE, TRUE,  TRUE },
    /* split-K: the slices of a row add onto y (atomics), the bias once; a fused norm
     * still over all K (SmolLM2's o and down projections are 576 rows) */
    { BF16, F32,  F32,  F32,  RES_IN_PLACE, 0,    BF16,    576,  1536, 16, FALSE, FALSE, FALSE, 3 },
    { BF16, F32,  F32,  MV_NONE, RES_IN_PLACE, 0, MV_NONE, 576,  576,  16, TRUE,  FALSE, FALSE, 2 },
    { F32,  F32,  BF16, BF16, RES_IN_PLACE, 0,    MV_NONE, 300,  640,  8,  TRUE,  FALSE, TRUE,  5 },
    { F16,  F32,  F32,  MV_NONE, RES_IN_PLACE, 0, F32,     200,  2048, 16, FALSE, TRUE,  FALSE, 4 },
    { BF16, F32,  F32,  MV_NONE, RES_IN_PLACE, 0, MV_NONE, 64,   8192, 16, TRUE,  FALSE, TRUE,  8 },
    { BF16, F32,  BF16, F32,  RES_IN_PLACE, 0,    MV_NONE, 1000, 2304, 100, FALSE, FALSE, FALSE, 7 },
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) probe = NULL;
  g_autoptr(AmkKernelAttributes) attr = NULL;
  guint failed = 0;

  if (!need_gpu ())
    return;
  probe = amk_launcher_new (0);
  attr = amk_launcher_kernel_attributes (probe, 32, 0, &error);
  g_assert_no_error (error);
  g_test_message ("megakernel: %d registers, %d bytes local, max %d threads per block; "
                  "AMK_MATVEC_SMEM_BYTES = %d, opt-in cap %d",
                  attr->num_regs, attr->local_bytes, attr->max_threads, AMK_MATVEC_SMEM_BYTES,
                  attr->max_dynamic_smem_optin);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    if (!run_matvec_case (&cases[i], (guint) attr->max_threads))
      failed++;
  g_test_message ("%s matvec: %u of %u cases failed", failed ? "FAIL" : "PASS", failed,
                  (guint) G_N_ELEMENTS (cases));
  g_assert_cmpuint (failed, ==, 0);
}

/* Device-side checks of MATVEC (unverified images): each aborts with CHECK and the
 * offending buffer's index, and the next launch works. */
static void
test_matvec_checks (void)
{
  if (!need_gpu ())
    return;

  for (guint t = 0; t < 6; t++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
      g_autoptr(AmkProgram) p = amk_program_new (4);
      g_autoptr(AmkAbortRecord) record = NULL;
      gint64 sy[] = { 64 }, sw[] = { 64, 16 }, sw6[] = { 64, 6 };
      gint y = amk_program_add_buffer (p, "y", AMK_DTYPE_F32, sy, 1, AMK_BUFFER_ROLE_OUTPUT, NULL);
      gint w = amk_program_add_buffer (p, "W", AMK_DTYPE_BF16, t == 0 ? sw6 : sw, 2, AMK_BUFFER_ROLE_CONSTANT, NULL);
      gint x = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, sy, 1, AMK_BUFFER_ROLE_INPUT, NULL);
      gint want;
      const char *what;

      add_ins (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
      if (t == 0) /* rows of 6 bf16 = 12 bytes */
        {
          add_ins (p, 2, AMK_OPCODE_MATVEC, (gint[]) { y, w, x, -1, -1, -1 }, 6, "rows", 64, "k", 6, NULL);
          want = w, what = "W rows of 12 bytes";
        }
      else if (t == 4) /* split-K columns 4 .. 12: not whole 16-byte chunks of bf16 */
        {
          add_ins (p, 2, AMK_OPCODE_MATVEC, (gint[]) { y, w, x, -1, y, -1 }, 6, "rows", 64, "k", 16, "k0", 4,
                   "k_len", 8, NULL);
          want = w, what = "split-K columns not whole chunks";
        }
      else if (t == 5) /* split-K onto a y that is not its own residual */
        {
          add_ins (p, 2, AMK_OPCODE_MATVEC, (gint[]) { y, w, x, -1, -1, -1 }, 6, "rows", 64, "k", 16, "k0", 8,
                   "k_len", 8, NULL);
          want = w, what = "split-K without y as the residual";
        }
      else if (t == 1) /* the bias is y itself */
        {
          add_ins (p, 2, AMK_OPCODE_MATVEC, (gint[]) { y, w, x, y, -1, -1 }, 6, "rows", 64, "k", 16, NULL);
          want = y, what = "bias == y";
        }
      else if (t == 2) /* x overlaps y */
        {
          add_ins (p, 2, AMK_OPCODE_MATVEC, (gint[]) { y, w, y, -1, -1, -1 }, 6, "row0", 8, "rows", 32,
                   "k", 16, NULL);
          want = y, what = "x overlaps y";
        }
      else /* a fused norm and a fused SILU_MUL */
        {
          gint n = amk_program_add_buffer (p, "norm", AMK_DTYPE_F32, sy, 1, AMK_BUFFER_ROLE_CONSTANT, NULL);
          gint u = amk_program_add_buffer (p, "up", AMK_DTYPE_F32, sy, 1, AMK_BUFFER_ROLE_INPUT, NULL);
          add_ins (p, 2, AMK_OPCODE_MATVEC, (gint[]) { y, w, x, -1, -1, n, u }, 7, "rows", 64, "k", 16, NULL);
          want = u, what = "norm and up";
        }
      g_assert_false (amk_program_verify (p, NULL));
      g_assert_true (amk_launcher_load_unverified (launcher, p, &error));
      g_assert_false (amk_launcher_launch (launcher, NULL, &error));
      g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
      record = amk_launcher_get_last_abort (launcher);
      g_assert_nonnull (record);
      g_test_message ("%s matvec check (%s): code %d detail %d queue %d instruction %d (want CHECK, detail %d)",
                      record->code == AMK_ABORT_CODE_CHECK && record->detail == want ? "PASS" : "FAIL",
                      what, record->code, record->detail, record->queue, record->instruction, want);
      g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_CHECK);
      g_assert_cmpint (record->detail, ==, want);
      g_assert_cmpint (record->queue, ==, 2);
      g_assert_cmpint (record->instruction, ==, 0);
      check_good_launch (launcher);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/amk/gpu/utility-ops", test_utility_ops);
  g_test_add_func ("/amk/gpu/chains", test_chains);
  g_test_add_func ("/amk/gpu/random-dag", test_random_dag);
  g_test_add_func ("/amk/gpu/rejected", test_rejected);
  g_test_add_func ("/amk/gpu/timeout", test_timeout);
  g_test_add_func ("/amk/gpu/trap", test_trap);
  g_test_add_func ("/amk/gpu/cancel", test_cancel);
  g_test_add_func ("/amk/gpu/trace", test_trace);
  g_test_add_func ("/amk/gpu/launch-time", test_launch_time);
  g_test_add_func ("/amk/gpu/no-leak", test_no_leak);
  g_test_add_func ("/amk/gpu/matvec", test_matvec);
  g_test_add_func ("/amk/gpu/matvec-checks", test_matvec_checks);

  return g_test_run ();
}
