/* consumer.c: a program built against the installed amk-glib only (pkg-config, the
 * installed headers and library): a 2-queue program, verified, run on the CPU executor,
 * its result checked against values computed here.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <string.h>
#include <amk-glib/amk-glib.h>

#define N 64

static int
fail (const char *what, GError *error)
{
  g_printerr ("consumer: %s: %s\n", what, error != NULL ? error->message : "failed");
  g_clear_error (&error);
  return 1;
}

int
main (void)
{
  g_autoptr(AmkProgram) program = amk_program_new (2);
  g_autoptr(AmkProgram) loaded = NULL;
  g_autoptr(AmkCpuExecutor) executor = NULL;
  g_autoptr(GBytes) input = NULL, output = NULL, image = NULL, poison = NULL;
  g_autoptr(AmkStructSizes) sizes = amk_struct_sizes_get ();
  GError *error = NULL;
  const gint64 shape[] = { N };
  float x[N], y0[N], want[N], bad[N];
  const float *got;
  gint bx, by, c, i;

  for (guint k = 0; k < N; k++)
    {
      x[k] = (float) g_random_double_range (-10.0, 10.0) + 0.25f;
      bad[k] = (float) g_random_double_range (1e6, 2e6);
    }
  /* queue 0: y[0:32] = x[0:32] + x[0:32]; queue 1, after it: y[32:64] = y[0:32] + x[32:64] */
  for (guint k = 0; k < N / 2; k++)
    {
      want[k] = x[k] + x[k];
      want[N / 2 + k] = want[k] + x[N / 2 + k];
    }

  bx = amk_program_add_buffer (program, "x", AMK_DTYPE_F32, shape, 1, AMK_BUFFER_ROLE_INPUT, &error);
  if (bx < 0)
    return fail ("add_buffer", error);
  by = amk_program_add_buffer (program, "y", AMK_DTYPE_F32, shape, 1, AMK_BUFFER_ROLE_OUTPUT, &error);
  if (by < 0)
    return fail ("add_buffer", error);
  c = amk_program_add_counter (program, "half done");

  i = amk_program_add_instruction (program, 0, AMK_OPCODE_ADD, (gint[]) { by, bx, bx }, 3, &error);
  if (i < 0 ||
      !amk_program_set_param_int (program, i, "count", N / 2, &error) ||
      !amk_program_set_signal (program, i, c, 1, &error))
    return fail ("queue 0", error);
  i = amk_program_add_instruction (program, 1, AMK_OPCODE_ADD, (gint[]) { by, by, bx }, 3, &error);
  if (i < 0 ||
      !amk_program_set_param_int (program, i, "dst_offset", N / 2, &error) ||
      !amk_program_set_param_int (program, i, "b_offset", N / 2, &error) ||
      !amk_program_set_param_int (program, i, "count", N / 2, &error) ||
      !amk_program_add_wait (program, i, c, 1, &error))
    return fail ("queue 1", error);

  if (!amk_program_verify (program, &error))
    return fail ("verify", error);

  /* through an image, as a tool would */
  image = amk_program_serialize (program);
  loaded = amk_program_new_from_bytes (image, &error);
  if (loaded == NULL)
    return fail ("new_from_bytes", error);

  executor = amk_cpu_executor_new (loaded, &error);
  if (executor == NULL)
    return fail ("cpu_executor_new", error);
  input = g_bytes_new (x, sizeof x);
  poison = g_bytes_new (bad, sizeof bad);
  if (!amk_cpu_executor_upload (executor, bx, input, &error) ||
      !amk_cpu_executor_upload (executor, by, poison, &error))
    return fail ("upload", error);
  for (guint64 seed = 0; seed < 8; seed++)
    {
      amk_cpu_executor_set_seed (executor, seed);
      if (!amk_cpu_executor_run (executor, &error))
        return fail ("run", error);
      output = amk_cpu_executor_download (executor, by, &error);
      if (output == NULL)
        return fail ("download", error);
      got = g_bytes_get_data (output, NULL);
      memcpy (y0, got, sizeof y0);
      g_clear_pointer (&output, g_bytes_unref);
      if (memcmp (y0, want, sizeof want) != 0)
        {
          for (guint k = 0; k < N; k++)
            if (y0[k] != want[k])
              g_printerr ("consumer: y[%u] = %g, expected %g\n", k, y0[k], want[k]);
          return 1;
        }
    }

  if (sizes->instruction != 128 || sizes->abi_version < 1)
    return fail ("struct sizes", NULL);
  g_print ("consumer: amk-glib %s: 2-queue program verified and ran; result correct\n", AMK_VERSION_S);
  return 0;
}
