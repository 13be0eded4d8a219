/* test-launcher.c: AmkLauncher without a GPU (every call that needs one fails with
 * NO_DEVICE, or UNSUPPORTED in a build without CUDA), its properties, the struct sizes,
 * and the boxed AmkAbortRecord / AmkKernelAttributes / AmkStructSizes. On a machine with
 * a GPU the device tests skip: the gpu suite covers them.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"

static gint
expected_code (void)
{
  return amk_launcher_get_have_cuda () ? AMK_LAUNCH_ERROR_NO_DEVICE : AMK_LAUNCH_ERROR_UNSUPPORTED;
}

static gboolean
skip_if_gpu (void)
{
  if (amk_launcher_get_have_cuda () && amk_launcher_get_device_count () > 0)
    {
      g_test_skip ("a CUDA device is present; the gpu suite tests the launcher on it");
      return TRUE;
    }
  return FALSE;
}

#define assert_no_device(error) \
  G_STMT_START { \
    g_assert_error ((error), AMK_LAUNCH_ERROR, expected_code ()); \
    g_clear_error (&(error)); \
  } G_STMT_END

static AmkProgram *
small_program (gint *buffer)
{
  AmkProgram *p = amk_program_new (2);
  gint c = amk_program_add_counter (p, "c");
  gint i;

  *buffer = test_add_buffer (p, "b", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_OUTPUT);
  i = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { *buffer }, 1, "count", 8, NULL);
  test_signal (p, i, c, 1);
  i = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_wait (p, i, c, 1);
  return p;
}

static void
test_build_flags (void)
{
  gint count = amk_launcher_get_device_count ();

  g_test_message ("have_cuda=%d device_count=%d", amk_launcher_get_have_cuda (), count);
  g_assert_cmpint (count, >=, 0);
  if (!amk_launcher_get_have_cuda ())
    g_assert_cmpint (count, ==, 0);
  g_assert_cmpint (amk_launcher_get_have_cuda (), ==, AMK_HAVE_CUDA);
}

static void
test_no_device (gconstpointer data)
{
  gint device = GPOINTER_TO_INT (data);
  g_autoptr(AmkLauncher) l = NULL;
  g_autoptr(AmkProgram) p = NULL;
  g_autoptr(GBytes) bytes = test_random_bytes (32);
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  GError *error = NULL;
  guint64 free_bytes = 11, total_bytes = 12;
  gint b;

  if (skip_if_gpu ())
    return;
  l = amk_launcher_new (device);
  p = small_program (&b);

  g_assert_null (amk_launcher_get_device_name (l, &error));
  assert_no_device (error);
  g_assert_false (amk_launcher_supports_cooperative (l, &error));
  assert_no_device (error);
  g_assert_cmpint (amk_launcher_max_coresident_blocks (l, 256, 0, &error), ==, -1);
  assert_no_device (error);
  g_assert_null (amk_launcher_kernel_attributes (l, 128, 65536, &error));
  assert_no_device (error);
  g_assert_false (amk_launcher_memory_info (l, &free_bytes, &total_bytes, &error));
  assert_no_device (error);
  g_assert_cmpuint (free_bytes, ==, 11);
  g_assert_cmpuint (total_bytes, ==, 12);
  g_assert_false (amk_launcher_memory_info (l, NULL, NULL, &error));
  assert_no_device (error);

  g_assert_false (amk_launcher_load (l, p, &error));
  assert_no_device (error);
  g_assert_true (amk_program_get_verified (p));   /* load verified it first */
  g_assert_false (amk_launcher_load_unverified (l, p, &error));
  assert_no_device (error);
  g_assert_null (amk_launcher_get_program (l));

  g_assert_false (amk_launcher_upload (l, b, bytes, &error));
  assert_no_device (error);
  g_assert_null (amk_launcher_download (l, b, &error));
  assert_no_device (error);
  g_assert_false (amk_launcher_bind_buffer (l, b, 0x7f0000000000ull, 32, &error));
  assert_no_device (error);
  g_assert_cmpuint (amk_launcher_get_buffer_address (l, b, &error), ==, 0);
  assert_no_device (error);
  g_assert_false (amk_launcher_launch (l, NULL, &error));
  assert_no_device (error);
  g_assert_false (amk_launcher_launch (l, cancellable, &error));
  assert_no_device (error);
  g_cancellable_cancel (cancellable);
  g_assert_false (amk_launcher_launch (l, cancellable, &error));
  assert_no_device (error);
  g_assert_null (amk_launcher_get_last_abort (l));
  g_assert_cmpfloat (amk_launcher_get_last_launch_time (l), ==, 0.0);

  /* errors may be ignored */
  g_assert_false (amk_launcher_launch (l, NULL, NULL));
  g_assert_null (amk_launcher_get_device_name (l, NULL));
}

static void
test_load_unsound (void)
{
  /* verification comes before the device: an unsound program gives its own error */
  g_autoptr(AmkLauncher) l = amk_launcher_new (0);
  g_autoptr(AmkProgram) p = amk_program_new (1);
  gint c = amk_program_add_counter (p, "never");
  gint i = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  GError *error = NULL;

  test_wait (p, i, c, 1);
  g_assert_false (amk_launcher_load (l, p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK);
  g_clear_error (&error);
  g_assert_null (amk_launcher_get_program (l));
}

typedef struct {
  GMainLoop *loop;
  GError *error;
  gboolean result;
  guint calls;
} AsyncData;

static void
launched (GObject *source, GAsyncResult *result, gpointer user_data)
{
  AsyncData *data = user_data;

  data->calls++;
  data->result = amk_launcher_launch_finish (AMK_LAUNCHER (source), result, &data->error);
  g_main_loop_quit (data->loop);
}

static void
test_launch_async (void)
{
  g_autoptr(AmkLauncher) l = NULL;
  g_autoptr(GMainLoop) loop = NULL;
  g_autoptr(GCancellable) cancellable = g_cancellable_new ();
  AsyncData data = { 0 };

  if (skip_if_gpu ())
    return;
  l = amk_launcher_new (0);
  loop = g_main_loop_new (NULL, FALSE);
  data.loop = loop;
  data.result = TRUE;

  amk_launcher_launch_async (l, NULL, launched, &data);
  g_main_loop_run (loop);
  g_assert_cmpuint (data.calls, ==, 1);
  g_assert_false (data.result);
  assert_no_device (data.error);

  data.result = TRUE;
  amk_launcher_launch_async (l, cancellable, launched, &data);
  g_main_loop_run (loop);
  g_assert_cmpuint (data.calls, ==, 2);
  g_assert_false (data.result);
  assert_no_device (data.error);
}

static void
count_notify (GObject *object, GParamSpec *pspec, gpointer data)
{
  (*(guint *) data)++;
}

static void
test_properties (void)
{
  g_autoptr(AmkLauncher) l = amk_launcher_new (0);
  g_autoptr(AmkLauncher) m = NULL;
  g_autoptr(AmkProgram) program = NULL;
  gint device = -1;
  guint threads = 0, smem = 1, watchdog = 0, notified = 0;

  g_assert_cmpint (amk_launcher_get_device (l), ==, 0);
  /* chosen when a program is loaded: 0 until then */
  g_assert_cmpuint (amk_launcher_get_threads_per_block (l), ==, 0);
  g_assert_cmpuint (amk_launcher_get_dynamic_shared_memory (l), ==, 0);
  g_assert_cmpuint (amk_launcher_get_watchdog_ms (l), ==, 10000);
  g_assert_null (amk_launcher_get_program (l));

  g_signal_connect (l, "notify", G_CALLBACK (count_notify), &notified);
  amk_launcher_set_threads_per_block (l, 512);
  amk_launcher_set_threads_per_block (l, 512);
  amk_launcher_set_dynamic_shared_memory (l, 200 * 1024);
  amk_launcher_set_dynamic_shared_memory (l, 200 * 1024);
  amk_launcher_set_watchdog_ms (l, 0);
  amk_launcher_set_watchdog_ms (l, 0);
  g_assert_cmpuint (notified, ==, 3);
  g_assert_cmpuint (amk_launcher_get_threads_per_block (l), ==, 512);
  g_assert_cmpuint (amk_launcher_get_dynamic_shared_memory (l), ==, 200 * 1024);
  g_assert_cmpuint (amk_launcher_get_watchdog_ms (l), ==, 0);

  g_object_set (l, "threads-per-block", 32, "dynamic-shared-memory", 48 * 1024, "watchdog-ms", 1, NULL);
  g_assert_cmpuint (notified, ==, 6);
  g_object_get (l, "device", &device, "threads-per-block", &threads,
                "dynamic-shared-memory", &smem, "watchdog-ms", &watchdog, "program", &program, NULL);
  g_assert_cmpint (device, ==, 0);
  g_assert_cmpuint (threads, ==, 32);
  g_assert_cmpuint (smem, ==, 48 * 1024);
  g_assert_cmpuint (watchdog, ==, 1);
  g_assert_null (program);

  /* every construct parameter is a property */
  m = g_object_new (AMK_TYPE_LAUNCHER, "device", 3, "threads-per-block", 1024,
                    "dynamic-shared-memory", 99, "watchdog-ms", 12345, NULL);
  g_assert_cmpint (amk_launcher_get_device (m), ==, 3);
  g_assert_cmpuint (amk_launcher_get_threads_per_block (m), ==, 1024);
  g_assert_cmpuint (amk_launcher_get_dynamic_shared_memory (m), ==, 99);
  g_assert_cmpuint (amk_launcher_get_watchdog_ms (m), ==, 12345);
  g_clear_object (&m);
  m = g_object_new (AMK_TYPE_LAUNCHER, NULL);
  g_assert_cmpint (amk_launcher_get_device (m), ==, 0);
  g_assert_cmpuint (amk_launcher_get_threads_per_block (m), ==, 0);
  g_assert_cmpuint (amk_launcher_get_watchdog_ms (m), ==, 10000);

  /* threads-per-block must be a multiple of 32: a programmer error */
  if (g_test_undefined ())
    {
      g_test_expect_message ("Amk", G_LOG_LEVEL_CRITICAL, "*threads % 32 == 0*");
      amk_launcher_set_threads_per_block (l, 100);
      g_test_assert_expected_messages ();
      g_assert_cmpuint (amk_launcher_get_threads_per_block (l), ==, 32);
    }
}

static void
test_struct_sizes (void)
{
  g_autoptr(AmkStructSizes) s = amk_struct_sizes_get ();
  g_autoptr(AmkStructSizes) copy = NULL;
  g_autoptr(AmkStructSizes) from_launcher = NULL;
  g_autoptr(AmkLauncher) l = amk_launcher_new (0);
  AmkStructSizes *boxed;

  g_assert_cmpuint (s->abi_version, ==, AMK_ABI_VERSION);
  g_assert_cmpuint (s->params, ==, 48);
  g_assert_cmpuint (s->buffer, ==, 24);
  g_assert_cmpuint (s->instruction, ==, 128);
  g_assert_cmpuint (s->abort_record, ==, 32);
  g_assert_cmpuint (s->trace_event, ==, 32);
  g_assert_cmpuint (s->device_program, ==, 128);
  g_assert_cmpuint (s->instruction, ==, sizeof (amk_instruction_t));
  g_assert_cmpuint (s->device_program, ==, sizeof (amk_device_program));
  g_assert_cmpuint (sizeof (AmkAbortRecord), ==, sizeof (amk_abort_record_t));

  copy = amk_struct_sizes_copy (s);
  g_assert_true (copy != s);
  g_assert_cmpmem (copy, sizeof *copy, s, sizeof *s);
  from_launcher = amk_launcher_struct_sizes (l);   /* needs no device */
  g_assert_cmpmem (from_launcher, sizeof *from_launcher, s, sizeof *s);

  g_assert_true (G_TYPE_IS_BOXED (AMK_TYPE_STRUCT_SIZES));
  boxed = g_boxed_copy (AMK_TYPE_STRUCT_SIZES, s);
  g_assert_cmpmem (boxed, sizeof *boxed, s, sizeof *s);
  g_boxed_free (AMK_TYPE_STRUCT_SIZES, boxed);
  amk_struct_sizes_free (NULL);
}

static void
test_abort_record (void)
{
  struct { AmkAbortCode code; gint counter; const char *needle; } cases[] = {
    { AMK_ABORT_CODE_NONE, -1, "no abort" },
    { AMK_ABORT_CODE_TIMEOUT, 6, "counter 6 (observed 7, target 8)" },
    { AMK_ABORT_CODE_TIMEOUT, -1, "grid barrier" },
    { AMK_ABORT_CODE_TRAP, -1, "code -99" },
    { AMK_ABORT_CODE_BAD_OPCODE, -1, "opcode -99" },
    { AMK_ABORT_CODE_BAD_INDEX, -1, "index -99" },
    { AMK_ABORT_CODE_CHECK, -1, "buffer -99" },
    { AMK_ABORT_CODE_CANCELLED, -1, "cancelled" },
    { (AmkAbortCode) 42, -1, "code 42" },
  };

  g_assert_true (G_TYPE_IS_BOXED (AMK_TYPE_ABORT_RECORD));
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      AmkAbortRecord r = { cases[i].code, 4, 5, cases[i].counter, 7, 8, -99, 9 };
      g_autoptr(AmkAbortRecord) copy = amk_abort_record_copy (&r);
      g_autofree char *text = NULL, *copy_text = NULL;
      AmkAbortRecord *boxed;

      g_assert_true (copy != &r);
      g_assert_cmpmem (copy, sizeof *copy, &r, sizeof r);
      text = amk_abort_record_to_string (&r);
      copy_text = amk_abort_record_to_string (copy);
      g_test_message ("%s", text);
      g_assert_cmpstr (text, ==, copy_text);
      test_assert_has (text, cases[i].needle);
      if (cases[i].code != AMK_ABORT_CODE_NONE && cases[i].code != AMK_ABORT_CODE_CANCELLED)
        test_assert_has (text, "queue 4 instruction 5");
      boxed = g_boxed_copy (AMK_TYPE_ABORT_RECORD, &r);
      g_assert_cmpmem (boxed, sizeof *boxed, &r, sizeof r);
      g_boxed_free (AMK_TYPE_ABORT_RECORD, boxed);
    }
  amk_abort_record_free (NULL);

  /* the enum values are the ABI's */
  g_assert_cmpint (AMK_ABORT_CODE_TIMEOUT, ==, AMK_ABORT_TIMEOUT);
  g_assert_cmpint (AMK_ABORT_CODE_TRAP, ==, AMK_ABORT_TRAP);
  g_assert_cmpint (AMK_ABORT_CODE_BAD_OPCODE, ==, AMK_ABORT_BAD_OPCODE);
  g_assert_cmpint (AMK_ABORT_CODE_BAD_INDEX, ==, AMK_ABORT_BAD_INDEX);
  g_assert_cmpint (AMK_ABORT_CODE_CHECK, ==, AMK_ABORT_CHECK);
  g_assert_cmpint (AMK_ABORT_CODE_CANCELLED, ==, AMK_ABORT_CANCELLED);
  g_assert_cmpint (AMK_OPCODE_GRID_SYNC, ==, AMK_ABI_OP_GRID_SYNC);
  g_assert_cmpint (AMK_DTYPE_U8, ==, AMK_ABI_DTYPE_U8);
}

static void
test_kernel_attributes (void)
{
  AmkKernelAttributes a = { 64, 1024, 0, 1024, 256, 2, 132, 264, 232448 };
  g_autoptr(AmkKernelAttributes) copy = amk_kernel_attributes_copy (&a);
  AmkKernelAttributes *boxed;

  g_assert_true (copy != &a);
  g_assert_cmpmem (copy, sizeof *copy, &a, sizeof a);
  g_assert_cmpint (copy->max_grid, ==, 264);
  g_assert_cmpint (copy->max_dynamic_smem_optin, ==, 232448);
  g_assert_true (G_TYPE_IS_BOXED (AMK_TYPE_KERNEL_ATTRIBUTES));
  boxed = g_boxed_copy (AMK_TYPE_KERNEL_ATTRIBUTES, &a);
  g_assert_cmpmem (boxed, sizeof *boxed, &a, sizeof a);
  g_boxed_free (AMK_TYPE_KERNEL_ATTRIBUTES, boxed);
  amk_kernel_attributes_free (NULL);
}

static void
test_error_domains (void)
{
  GEnumClass *klass;

  g_assert_cmpstr (g_quark_to_string (AMK_PROGRAM_ERROR), ==, "amk-program-error-quark");
  g_assert_cmpstr (g_quark_to_string (AMK_LAUNCH_ERROR), ==, "amk-launch-error-quark");
  klass = g_type_class_ref (AMK_TYPE_LAUNCH_ERROR);
  g_assert_cmpuint (klass->n_values, ==, 6);
  g_type_class_unref (klass);
  klass = g_type_class_ref (AMK_TYPE_PROGRAM_ERROR);
  g_assert_cmpuint (klass->n_values, ==, 7);
  g_type_class_unref (klass);
}

int
main (int argc, char **argv)
{
  test_init (&argc, &argv);

  g_test_add_func ("/amk/launcher/build-flags", test_build_flags);
  g_test_add_data_func ("/amk/launcher/no-device/0", GINT_TO_POINTER (0), test_no_device);
  g_test_add_data_func ("/amk/launcher/no-device/7", GINT_TO_POINTER (7), test_no_device);
  g_test_add_func ("/amk/launcher/load-unsound", test_load_unsound);
  g_test_add_func ("/amk/launcher/launch-async", test_launch_async);
  g_test_add_func ("/amk/launcher/properties", test_properties);
  g_test_add_func ("/amk/launcher/struct-sizes", test_struct_sizes);
  g_test_add_func ("/amk/launcher/abort-record", test_abort_record);
  g_test_add_func ("/amk/launcher/kernel-attributes", test_kernel_attributes);
  g_test_add_func ("/amk/launcher/error-domains", test_error_domains);

  return g_test_run ();
}
