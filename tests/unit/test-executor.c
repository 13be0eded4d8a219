/* test-executor.c: the AmkExecutor interface through both executors (the launcher's part
 * skips without a GPU), and the launcher's choice of threads per block and dynamic
 * shared memory (amk-launch-config.c) with made-up kernel attributes.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <string.h>

#include "amk-test-common.h"
#include "amk-launch-config-private.h"
#include "amk-abi.h"

#define N 16

/* out = in + 2 over two queues: FILL two = 2 on queue 0, then ADD on queue 1. */
static AmkProgram *
make_add_program (gint *in, gint *out)
{
  AmkProgram *p = amk_program_new (2);
  gint two, c, fill, add;

  *in = test_add_buffer (p, "in", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_INPUT);
  *out = test_add_buffer (p, "out", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_OUTPUT);
  two = test_add_buffer (p, "two", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_SCRATCH);
  c = amk_program_add_counter (p, "filled");
  fill = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { two }, 1, "count", N, NULL);
  test_set_float (p, fill, "value", 2.0f);
  test_signal (p, fill, c, 1);
  add = test_add (p, 1, AMK_OPCODE_ADD, (gint[]) { *out, *in, two }, 3, "count", N, NULL);
  test_wait (p, add, c, 1);
  return p;
}

static void
on_run_done (GObject *source, GAsyncResult *result, gpointer data)
{
  GAsyncResult **out = data;

  *out = g_object_ref (result);
}

/* Everything the generator does with an executor, through the interface alone. */
static void
check_executor (AmkExecutor *executor)
{
  g_autoptr(AmkProgram) p = NULL;
  g_autoptr(AmkProgram) trap = NULL;
  g_autoptr(GBytes) input = NULL;
  g_autoptr(GBytes) output = NULL;
  g_autoptr(GBytes) short_data = g_bytes_new_static ("x", 1);
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  g_autoptr(AmkAbortRecord) record = NULL;
  g_autofree char *description = NULL;
  GError *error = NULL;
  float in[N];
  const float *got;
  gint b_in, b_out;

  description = amk_executor_get_description (executor);
  g_assert_nonnull (description);
  g_test_message ("executor: %s", description);

  /* nothing loaded */
  g_assert_null (amk_executor_get_program (executor));
  g_assert_false (amk_executor_run (executor, NULL, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);

  p = make_add_program (&b_in, &b_out);
  g_assert_true (amk_executor_load (executor, p, &error));
  g_assert_no_error (error);
  g_assert_true (amk_executor_get_program (executor) == p);
  g_assert_true (amk_program_get_verified (p));

  for (guint k = 0; k < N; k++)
    in[k] = (float) k - 4.5f;
  input = g_bytes_new (in, sizeof in);
  g_assert_true (amk_executor_upload (executor, (guint) b_in, input, &error));
  g_assert_no_error (error);
  g_assert_true (amk_executor_run (executor, NULL, &error));
  g_assert_no_error (error);
  g_assert_null (amk_executor_get_last_abort (executor));
  output = amk_executor_download (executor, (guint) b_out, &error);
  g_assert_no_error (error);
  got = g_bytes_get_data (output, NULL);
  for (guint k = 0; k < N; k++)
    g_assert_cmpfloat (got[k], ==, in[k] + 2.0f);
  g_clear_pointer (&output, g_bytes_unref);

  /* a buffer that does not exist; data of the wrong size */
  g_assert_null (amk_executor_download (executor, 99, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_false (amk_executor_upload (executor, (guint) b_in, short_data, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);

  /* asynchronously, from this thread's main context */
  amk_executor_run_async (executor, NULL, on_run_done, &result);
  while (result == NULL)
    g_main_context_iteration (NULL, TRUE);
  g_assert_true (amk_executor_run_finish (executor, result, &error));
  g_assert_no_error (error);
  g_clear_object (&result);

  /* cancelled before it starts */
  g_cancellable_cancel (cancellable);
  g_assert_false (amk_executor_run (executor, cancellable, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&error);
  amk_executor_run_async (executor, cancellable, on_run_done, &result);
  while (result == NULL)
    g_main_context_iteration (NULL, TRUE);
  g_assert_false (amk_executor_run_finish (executor, result, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  g_clear_error (&error);
  g_clear_object (&result);

  /* the program grows after it was loaded: the executor refuses it until loaded again */
  test_add_buffer (p, "late", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_OUTPUT);
  g_assert_true (amk_program_verify (p, NULL));
  g_assert_false (amk_executor_run (executor, NULL, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
  g_assert_true (amk_executor_load (executor, p, &error));
  g_assert_no_error (error);
  g_assert_true (amk_executor_run (executor, NULL, &error));
  g_assert_no_error (error);
  /* loading again gives fresh buffers: the input is zeros again */
  output = amk_executor_download (executor, (guint) b_out, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (((const float *) g_bytes_get_data (output, NULL))[0], ==, 2.0f);
  g_clear_pointer (&output, g_bytes_unref);

  /* a TRAP: ABORTED, with a record */
  trap = amk_program_new (1);
  test_add (trap, 0, AMK_OPCODE_TRAP, NULL, 0, "code", 7, NULL);
  g_assert_true (amk_executor_load (executor, trap, &error));
  g_assert_no_error (error);
  g_assert_false (amk_executor_run (executor, NULL, &error));
  g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
  g_clear_error (&error);
  record = amk_executor_get_last_abort (executor);
  g_assert_nonnull (record);
  g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_TRAP);
  g_assert_cmpint (record->detail, ==, 7);
}

static void
test_cpu_executor (void)
{
  g_autoptr(AmkCpuExecutor) cpu = amk_cpu_executor_new_empty ();
  g_autoptr(GError) error = NULL;
  g_autofree char *description = amk_executor_get_description (AMK_EXECUTOR (cpu));

  g_assert_true (AMK_IS_EXECUTOR (cpu));
  g_assert_cmpstr (description, ==, "CPU executor");
  /* a queue per worker, one worker per core unless told */
  g_assert_cmpuint (amk_executor_get_preferred_queues (AMK_EXECUTOR (cpu), &error), ==,
                    g_get_num_processors ());
  amk_cpu_executor_set_threads (cpu, 3);
  g_assert_cmpuint (amk_executor_get_preferred_queues (AMK_EXECUTOR (cpu), &error), ==, 3);
  /* many rows per run on the CPU too, but fewer than on a GPU */
  g_assert_cmpuint (amk_executor_get_preferred_rows (AMK_EXECUTOR (cpu)), ==, 64);
  {
    g_autoptr(AmkExecutor) sibling = NULL;
    guint64 seed = 0;

    guint threads = 0;

    g_object_set (cpu, "seed", (guint64) 7, NULL);
    sibling = amk_executor_new_sibling (AMK_EXECUTOR (cpu));
    g_assert_true (AMK_IS_CPU_EXECUTOR (sibling));
    g_assert_null (amk_executor_get_program (sibling));
    g_object_get (sibling, "seed", &seed, "threads", &threads, NULL);
    g_assert_cmpuint (seed, ==, 7);
    g_assert_cmpuint (threads, ==, 3);
    g_object_set (cpu, "seed", (guint64) 0, "threads", 0u, NULL);
  }
  g_assert_no_error (error);
  check_executor (AMK_EXECUTOR (cpu));
}

/* A program that does not verify is not loaded, and the one before stays. */
static void
test_cpu_executor_load_error (void)
{
  g_autoptr(AmkCpuExecutor) cpu = amk_cpu_executor_new_empty ();
  g_autoptr(AmkProgram) good = amk_program_new (1);
  g_autoptr(AmkProgram) bad = amk_program_new (2);
  g_autoptr(GError) error = NULL;
  gint c, i;

  test_add (good, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_true (amk_executor_load (AMK_EXECUTOR (cpu), good, &error));
  c = amk_program_add_counter (bad, "never");
  i = test_add (bad, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_wait (bad, i, c, 1);
  g_assert_false (amk_executor_load (AMK_EXECUTOR (cpu), bad, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK);
  g_assert_true (amk_executor_get_program (AMK_EXECUTOR (cpu)) == good);
}

static void
test_launcher (void)
{
  g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(GError) error = NULL;
  guint queues;

  g_assert_true (AMK_IS_EXECUTOR (launcher));
  if (amk_launcher_get_device_count () == 0)
    {
      /* no GPU: the interface reports the launcher's own errors */
      test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
      g_assert_false (amk_executor_load (AMK_EXECUTOR (launcher), p, &error));
      g_assert_error (error, AMK_LAUNCH_ERROR,
                      amk_launcher_get_have_cuda () ? AMK_LAUNCH_ERROR_NO_DEVICE
                                                    : AMK_LAUNCH_ERROR_UNSUPPORTED);
      g_clear_error (&error);
      g_assert_cmpuint (amk_executor_get_preferred_rows (AMK_EXECUTOR (launcher)), ==, 2048);
      {
        g_autoptr(AmkExecutor) sibling = amk_executor_new_sibling (AMK_EXECUTOR (launcher));

        g_assert_true (AMK_IS_LAUNCHER (sibling));
        g_assert_cmpint (amk_launcher_get_device (AMK_LAUNCHER (sibling)), ==,
                         amk_launcher_get_device (launcher));
      }
      g_assert_cmpuint (amk_executor_get_preferred_queues (AMK_EXECUTOR (launcher), &error), ==, 0);
      g_assert_error (error, AMK_LAUNCH_ERROR,
                      amk_launcher_get_have_cuda () ? AMK_LAUNCH_ERROR_NO_DEVICE
                                                    : AMK_LAUNCH_ERROR_UNSUPPORTED);
      g_test_skip ("no CUDA device");
      return;
    }
  queues = amk_executor_get_preferred_queues (AMK_EXECUTOR (launcher), &error);
  g_assert_no_error (error);
  g_assert_cmpuint (queues, >, 0);
  check_executor (AMK_EXECUTOR (launcher));
}

/* ---- programs that share buffers ------------------------------------------------------ */

static void
set_floats (AmkProgram *p, gint buffer, float value)
{
  float data[N];
  g_autoptr(GBytes) bytes = NULL;
  g_autoptr(GError) error = NULL;

  for (guint k = 0; k < N; k++)
    data[k] = value + (float) k;
  bytes = g_bytes_new (data, sizeof data);
  g_assert_true (amk_program_set_buffer_data (p, buffer, bytes, &error));
  g_assert_no_error (error);
}

/* The decode step's side: FILL cache with 3 each run; the weights "w" hold 1, 2, 3 ... */
static AmkProgram *
make_owner_program (void)
{
  AmkProgram *p = amk_program_new (1);
  gint w, cache, fill;

  w = test_add_buffer (p, "w", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_CONSTANT);
  set_floats (p, w, 1.0f);
  cache = test_add_buffer (p, "cache", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_STATE);
  test_add_buffer (p, "scratch", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_SCRATCH);
  fill = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { cache }, 1, "count", N, NULL);
  test_set_float (p, fill, "value", 3.0f);
  return p;
}

/* The prefill side: out = cache + w, in another buffer order, with "w" without data
 * (it is the owner's), a default for "cache" that sharing ignores, and buffers of its
 * own ("bias" with data, "scratch" in its arena although the owner has one too). */
static AmkProgram *
make_sharer_program (gint *out, gint *cache, gint *bias)
{
  AmkProgram *p = amk_program_new (1);
  gint w, scratch;

  *out = test_add_buffer (p, "out", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_OUTPUT);
  *bias = test_add_buffer (p, "bias", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_CONSTANT);
  set_floats (p, *bias, 100.0f);
  *cache = test_add_buffer (p, "cache", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_STATE);
  set_floats (p, *cache, 9.0f);
  w = test_add_buffer (p, "w", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_CONSTANT);
  scratch = test_add_buffer (p, "scratch", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_SCRATCH);
  test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { scratch, *cache, w }, 3, "count", N, NULL);
  test_add (p, 0, AMK_OPCODE_COPY, (gint[]) { *out, scratch }, 2, "count", N, NULL);
  return p;
}

/* Element k of buffer b of executor e. */
static float
element (AmkExecutor *e, gint b, guint k)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) bytes = amk_executor_download (e, (guint) b, &error);

  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (bytes), ==, N * sizeof (float));
  return ((const float *) g_bytes_get_data (bytes, NULL))[k];
}

static void
run_ok (AmkExecutor *e)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (amk_executor_run (e, NULL, &error));
  g_assert_no_error (error);
}

/* Everything a model does with a decode step and a prefill program that share the
 * weights and the cache; owner_ref is the caller's only reference to the owner. */
static void
check_shared (AmkExecutor *owner_ref, AmkExecutor *sharer)
{
  g_autoptr(AmkExecutor) owner = owner_ref;
  g_autoptr(AmkProgram) a = make_owner_program ();
  g_autoptr(AmkProgram) b = NULL;
  g_autoptr(AmkProgram) other = amk_program_new (1);
  g_autoptr(GBytes) sevens = NULL;
  g_autoptr(GError) error = NULL;
  float data[N];
  gint out, cache, bias, a_cache;

  b = make_sharer_program (&out, &cache, &bias);
  a_cache = amk_program_find_buffer (a, "cache");
  g_assert_true (amk_executor_load (owner, a, &error));
  g_assert_no_error (error);
  g_assert_true (amk_executor_load_shared (sharer, b, owner, &error));
  g_assert_no_error (error);
  g_assert_true (amk_executor_get_program (sharer) == b);

  /* the owner's contents, not the sharer's defaults; its own buffers get their data */
  g_assert_cmpfloat (element (sharer, cache, 5), ==, 0.0f);
  g_assert_cmpfloat (element (sharer, bias, 5), ==, 105.0f);
  run_ok (sharer);
  g_assert_cmpfloat (element (sharer, out, 5), ==, 6.0f);        /* 0 + w */

  /* what the owner writes, the sharer reads, and back */
  run_ok (owner);
  run_ok (sharer);
  g_assert_cmpfloat (element (sharer, out, 5), ==, 3.0f + 6.0f); /* cache + w */
  for (guint k = 0; k < N; k++)
    data[k] = 7.0f;
  sevens = g_bytes_new (data, sizeof data);
  g_assert_true (amk_executor_upload (sharer, (guint) cache, sevens, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (element (owner, a_cache, 5), ==, 7.0f);

  /* the sharer's "program changed after load" check still holds */
  test_add_buffer (b, "late", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_OUTPUT);
  g_assert_true (amk_program_verify (b, NULL));
  g_assert_false (amk_executor_run (sharer, NULL, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
  g_assert_true (amk_executor_load_shared (sharer, b, owner, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (element (sharer, cache, 5), ==, 7.0f);

  /* the owner loads another program, then goes: the sharer keeps the memory */
  test_add (other, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_true (amk_executor_load (owner, other, &error));
  g_assert_no_error (error);
  g_clear_object (&owner);
  run_ok (sharer);
  g_assert_cmpfloat (element (sharer, out, 5), ==, 7.0f + 6.0f);
}

static void
test_cpu_shared (void)
{
  g_autoptr(AmkCpuExecutor) sharer = amk_cpu_executor_new_empty ();

  check_shared (AMK_EXECUTOR (amk_cpu_executor_new_empty ()), AMK_EXECUTOR (sharer));
}

/* The owner is finalized while the sharer still uses its memory. */
static void
test_cpu_shared_owner_gone (void)
{
  AmkCpuExecutor *owner = amk_cpu_executor_new_empty ();
  g_autoptr(AmkCpuExecutor) sharer = amk_cpu_executor_new_empty ();
  g_autoptr(AmkProgram) a = make_owner_program ();
  g_autoptr(AmkProgram) b = NULL;
  g_autoptr(GError) error = NULL;
  gint out, cache, bias;

  b = make_sharer_program (&out, &cache, &bias);
  g_assert_true (amk_executor_load (AMK_EXECUTOR (owner), a, &error));
  run_ok (AMK_EXECUTOR (owner));
  g_assert_true (amk_executor_load_shared (AMK_EXECUTOR (sharer), b, AMK_EXECUTOR (owner), &error));
  g_assert_no_error (error);
  g_object_add_weak_pointer (G_OBJECT (owner), (gpointer *) &owner);
  g_object_unref (owner);
  g_assert_null (owner);
  run_ok (AMK_EXECUTOR (sharer));
  g_assert_cmpfloat (element (AMK_EXECUTOR (sharer), out, 5), ==, 3.0f + 6.0f);
}

/* A sharer of a sharer uses the first owner's memory. */
static void
test_cpu_shared_chain (void)
{
  g_autoptr(AmkCpuExecutor) first = amk_cpu_executor_new_empty ();
  g_autoptr(AmkCpuExecutor) second = amk_cpu_executor_new_empty ();
  g_autoptr(AmkCpuExecutor) third = amk_cpu_executor_new_empty ();
  g_autoptr(AmkProgram) a = make_owner_program ();
  g_autoptr(AmkProgram) b = NULL;
  g_autoptr(GError) error = NULL;
  gint out, cache, bias;

  b = make_sharer_program (&out, &cache, &bias);
  g_assert_true (amk_executor_load (AMK_EXECUTOR (first), a, &error));
  g_assert_true (amk_executor_load_shared (AMK_EXECUTOR (second), b, AMK_EXECUTOR (first), &error));
  g_assert_true (amk_executor_load_shared (AMK_EXECUTOR (third), b, AMK_EXECUTOR (second), &error));
  g_assert_no_error (error);
  run_ok (AMK_EXECUTOR (first));
  run_ok (AMK_EXECUTOR (third));
  g_assert_cmpfloat (element (AMK_EXECUTOR (third), out, 5), ==, 3.0f + 6.0f);
  /* "bias" and "out" are the second's own, shared by the third */
  g_assert_cmpfloat (element (AMK_EXECUTOR (second), out, 5), ==, 3.0f + 6.0f);
}

/* Names that match with another dtype or size, and owners that cannot share. Each
 * failure leaves the program loaded before. */
static void
test_cpu_shared_errors (void)
{
  g_autoptr(AmkCpuExecutor) owner = amk_cpu_executor_new_empty ();
  g_autoptr(AmkCpuExecutor) sharer = amk_cpu_executor_new_empty ();
  g_autoptr(AmkCpuExecutor) empty = amk_cpu_executor_new_empty ();
  g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
  g_autoptr(AmkProgram) a = make_owner_program ();
  g_autoptr(AmkProgram) before = amk_program_new (1);
  g_autoptr(AmkProgram) wrong_dtype = amk_program_new (1);
  g_autoptr(AmkProgram) wrong_size = amk_program_new (1);
  g_autoptr(AmkProgram) plain = NULL;
  GError *error = NULL;
  gint out, cache, bias;

  g_assert_true (amk_executor_load (AMK_EXECUTOR (owner), a, &error));
  test_add (before, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_true (amk_executor_load (AMK_EXECUTOR (sharer), before, &error));
  g_assert_no_error (error);

  test_add_buffer (wrong_dtype, "cache", AMK_DTYPE_I32, N, AMK_BUFFER_ROLE_STATE);
  test_add (wrong_dtype, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_false (amk_executor_load_shared (AMK_EXECUTOR (sharer), wrong_dtype,
                                            AMK_EXECUTOR (owner), &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "cache"));
  g_assert_nonnull (strstr (error->message, "[16] i32"));
  g_assert_nonnull (strstr (error->message, "[16] f32"));
  g_clear_error (&error);

  test_add_buffer (wrong_size, "w", AMK_DTYPE_F32, 2 * N, AMK_BUFFER_ROLE_CONSTANT);
  test_add (wrong_size, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_false (amk_executor_load_shared (AMK_EXECUTOR (sharer), wrong_size,
                                            AMK_EXECUTOR (owner), &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "[32] f32"));
  g_clear_error (&error);

  plain = make_sharer_program (&out, &cache, &bias);
  g_assert_false (amk_executor_load_shared (AMK_EXECUTOR (sharer), plain,
                                            AMK_EXECUTOR (launcher), &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "AmkLauncher"));
  g_clear_error (&error);
  g_assert_false (amk_executor_load_shared (AMK_EXECUTOR (sharer), plain,
                                            AMK_EXECUTOR (sharer), &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (amk_executor_load_shared (AMK_EXECUTOR (sharer), plain,
                                            AMK_EXECUTOR (empty), &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);

  /* the owner's program changed after it was loaded: its memory no longer fits it */
  test_add_buffer (a, "late", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_OUTPUT);
  g_assert_false (amk_executor_load_shared (AMK_EXECUTOR (sharer), plain,
                                            AMK_EXECUTOR (owner), &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_NOT_VERIFIED);
  g_clear_error (&error);
  g_assert_true (amk_executor_get_program (AMK_EXECUTOR (sharer)) == before);

  /* no owner: a plain load, with the program's own defaults */
  g_assert_true (amk_executor_load_shared (AMK_EXECUTOR (sharer), plain, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (element (AMK_EXECUTOR (sharer), cache, 5), ==, 14.0f);
}

static void
test_launcher_shared (void)
{
  g_autoptr(AmkLauncher) sharer = amk_launcher_new (0);

  if (amk_launcher_get_device_count () == 0)
    {
      g_test_skip ("no CUDA device");
      return;
    }
  check_shared (AMK_EXECUTOR (amk_launcher_new (0)), AMK_EXECUTOR (sharer));
}

/* ---- the launcher's configuration ---------------------------------------------------- */

/* A made-up multiprocessor: blocks limited by registers, shared memory and threads. */
typedef struct {
  guint regs_per_thread;
  guint smem_per_sm;
  guint static_smem;
  guint calls;
} FakeSm;

static guint
fake_occupancy (guint threads, guint smem, gpointer data)
{
  FakeSm *sm = data;
  guint by_regs = 65536 / (threads * sm->regs_per_thread);
  guint by_smem = sm->smem_per_sm / (smem + sm->static_smem + 1024);

  sm->calls++;
  return MIN (MIN (by_regs, by_smem), 2048 / threads);
}

/* An H200-like device and kernel: 512 threads at most, a 227 KiB opt-in cap. */
static const AmkKernelAttributes h200 = {
  .num_regs = 128, .static_smem_bytes = 2000, .max_threads = 512, .blocks_per_sm = 1,
  .num_sms = 132, .max_grid = 132, .max_dynamic_smem_optin = 232448,
};

static void
choose (const AmkKernelAttributes *attr, guint n_queues, guint max_k, guint fixed_threads,
        gboolean fixed_smem, guint fixed_smem_bytes, guint *threads, guint *smem, FakeSm *sm)
{
  const AmkLaunchNeeds needs = { n_queues, max_k };

  amk_launch_config_choose (attr, &needs, fixed_threads, fixed_smem, fixed_smem_bytes,
                            fake_occupancy, sm, threads, smem);
}

static void
test_config_ring (void)
{
  FakeSm sm = { 128, 233472, 2000, 0 };
  guint threads = 0, smem = 0;

  /* a Llama-3.2-1B step: the widest MATVEC is the down projection, K = 8192 */
  choose (&h200, 132, 8192, 0, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (threads, ==, 512);
  g_assert_cmpuint (smem, ==, 512 * AMK_MATVEC_RING_BYTES_PER_THREAD + 4 * 8192);
  /* the largest K the recommended size covers gives that size */
  choose (&h200, 132, 16384, 0, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (smem, ==, AMK_MATVEC_SMEM_BYTES);
}

static void
test_config_no_matvec (void)
{
  FakeSm sm = { 128, 233472, 2000, 0 };
  guint threads = 0, smem = 1;

  choose (&h200, 132, 0, 0, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (threads, ==, 512);
  g_assert_cmpuint (smem, ==, 0);
}

/* A device whose cap is too small for the ring at the most threads keeps the threads and
 * loads W into registers; so does a K whose staged x' alone exceeds the cap. */
static void
test_config_cap_too_small (void)
{
  AmkKernelAttributes small = h200;
  FakeSm sm = { 128, 102400, 2000, 0 };
  guint threads = 0, smem = 1;

  small.max_dynamic_smem_optin = 101376;
  choose (&small, 132, 8192, 0, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (threads, ==, 512);
  g_assert_cmpuint (smem, ==, 0);

  sm = (FakeSm) { 128, 233472, 2000, 0 };
  smem = 1;
  choose (&h200, 132, 60000, 0, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (threads, ==, 512);
  g_assert_cmpuint (smem, ==, 0);
}

/* The static shared memory comes first, 128-byte aligned: the ring fits exactly. */
static void
test_config_static_alignment (void)
{
  AmkKernelAttributes attr = h200;
  FakeSm sm = { 128, 1 << 20, 0, 0 };
  const guint ring = 512 * AMK_MATVEC_RING_BYTES_PER_THREAD + 4 * 8192;
  guint threads = 0, smem = 0;

  attr.static_smem_bytes = 100;
  attr.max_dynamic_smem_optin = (gint) ring + 128;
  choose (&attr, 132, 8192, 0, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (smem, ==, ring);
  attr.max_dynamic_smem_optin = (gint) ring + 127;
  choose (&attr, 132, 8192, 0, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (smem, ==, 0);
}

/* Two queues per multiprocessor: smaller blocks, so that every block is co-resident. */
static void
test_config_more_queues (void)
{
  FakeSm sm = { 128, 233472, 2000, 0 };
  guint threads = 0, smem = 0;

  choose (&h200, 264, 8192, 0, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (threads, ==, 256);
  g_assert_cmpuint (smem, ==, 256 * AMK_MATVEC_RING_BYTES_PER_THREAD + 4 * 8192);

  /* nothing co-resides: the largest blocks, and the launch says why it is refused */
  choose (&h200, 132 * 1000, 8192, 0, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (threads, ==, 512);
  g_assert_cmpuint (smem, ==, 0);
}

/* What is set stays; the other value is chosen for it. */
static void
test_config_fixed (void)
{
  FakeSm sm = { 128, 233472, 2000, 0 };
  guint threads = 0, smem = 0;

  choose (&h200, 132, 8192, 256, FALSE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (threads, ==, 256);
  g_assert_cmpuint (smem, ==, 256 * AMK_MATVEC_RING_BYTES_PER_THREAD + 4 * 8192);

  choose (&h200, 132, 8192, 0, TRUE, 0, &threads, &smem, &sm);
  g_assert_cmpuint (threads, ==, 512);
  g_assert_cmpuint (smem, ==, 0);

  sm.calls = 0;
  choose (&h200, 132, 8192, 512, TRUE, AMK_MATVEC_SMEM_BYTES, &threads, &smem, &sm);
  g_assert_cmpuint (threads, ==, 512);
  g_assert_cmpuint (smem, ==, AMK_MATVEC_SMEM_BYTES);
  g_assert_cmpuint (sm.calls, ==, 0);
}

/* A MATMUL's tiles need their shared memory and a multiple of 128 threads, with or
 * without a MATVEC ring beside them; ATTN_ROWS's fast path its key/value buffers. */
static void
test_config_many_tokens (void)
{
  FakeSm sm = { 128, 233472, 2000, 0 };
  AmkLaunchNeeds needs = { 132, 0, TRUE, FALSE };
  guint threads = 0, smem = 0;

  amk_launch_config_choose (&h200, &needs, 0, FALSE, 0, fake_occupancy, &sm, &threads, &smem);
  g_assert_cmpuint (threads, ==, 512);
  g_assert_cmpuint (smem, ==, AMK_MATMUL_SMEM_BYTES (512));

  needs.max_matvec_k = 8192;
  amk_launch_config_choose (&h200, &needs, 0, FALSE, 0, fake_occupancy, &sm, &threads, &smem);
  g_assert_cmpuint (smem, ==, MAX (AMK_MATMUL_SMEM_BYTES (512), 512 * AMK_MATVEC_RING_BYTES_PER_THREAD + 4 * 8192));

  /* two queues per multiprocessor: smaller blocks, still whole MATMUL tiles */
  needs.max_matvec_k = 0;
  needs.n_queues = 132 * 2;
  amk_launch_config_choose (&h200, &needs, 0, FALSE, 0, fake_occupancy, &sm, &threads, &smem);
  g_assert_cmpuint (threads, <, 512);
  g_assert_cmpuint (threads % 128, ==, 0);
  g_assert_cmpuint (smem, ==, AMK_MATMUL_SMEM_BYTES (threads));

  needs = (AmkLaunchNeeds) { 132, 0, FALSE, TRUE };
  amk_launch_config_choose (&h200, &needs, 0, FALSE, 0, fake_occupancy, &sm, &threads, &smem);
  g_assert_cmpuint (threads, ==, 512);
  g_assert_cmpuint (smem, ==, AMK_ATTN_ROWS_SMEM_BYTES);
}

/* The program's needs: its queues and the widest MATVEC tile. */
static void
test_config_needs (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(GError) error = NULL;
  AmkLaunchNeeds needs = { 0 };
  gint y, w, x;

  amk_launch_needs_from_program (p, &needs);
  g_assert_cmpuint (needs.n_queues, ==, 1);
  g_assert_cmpuint (needs.max_matvec_k, ==, 0);

  y = test_add_buffer (p, "y", AMK_DTYPE_F32, 64, AMK_BUFFER_ROLE_OUTPUT);
  w = amk_program_add_buffer (p, "w", AMK_DTYPE_BF16, (gint64[]) { 64, 512 }, 2,
                              AMK_BUFFER_ROLE_CONSTANT, &error);
  g_assert_no_error (error);
  x = test_add_buffer (p, "x", AMK_DTYPE_F32, 512, AMK_BUFFER_ROLE_INPUT);
  g_assert_cmpint (amk_program_op_matvec (p, y, w, x, -1, -1, -1, 1e-5f, &error), >=, 0);
  g_assert_true (amk_program_compile (p, &error));
  g_assert_no_error (error);
  amk_launch_needs_from_program (p, &needs);
  g_assert_cmpuint (needs.max_matvec_k, ==, 512);
}

int
main (int argc, char **argv)
{
  test_init (&argc, &argv);
  g_test_add_func ("/amk/executor/cpu", test_cpu_executor);
  g_test_add_func ("/amk/executor/cpu/load-error", test_cpu_executor_load_error);
  g_test_add_func ("/amk/executor/cpu/shared", test_cpu_shared);
  g_test_add_func ("/amk/executor/cpu/shared/owner-gone", test_cpu_shared_owner_gone);
  g_test_add_func ("/amk/executor/cpu/shared/chain", test_cpu_shared_chain);
  g_test_add_func ("/amk/executor/cpu/shared/errors", test_cpu_shared_errors);
  g_test_add_func ("/amk/executor/launcher", test_launcher);
  g_test_add_func ("/amk/executor/launcher/shared", test_launcher_shared);
  g_test_add_func ("/amk/launcher/config/ring", test_config_ring);
  g_test_add_func ("/amk/launcher/config/no-matvec", test_config_no_matvec);
  g_test_add_func ("/amk/launcher/config/cap-too-small", test_config_cap_too_small);
  g_test_add_func ("/amk/launcher/config/static-alignment", test_config_static_alignment);
  g_test_add_func ("/amk/launcher/config/more-queues", test_config_more_queues);
  g_test_add_func ("/amk/launcher/config/fixed", test_config_fixed);
  g_test_add_func ("/amk/launcher/config/needs", test_config_needs);
  g_test_add_func ("/amk/launcher/config/many-tokens", test_config_many_tokens);
  return g_test_run ();
}
