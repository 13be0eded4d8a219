/* gpu-test-common.h: the helpers the GPU test programs share.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <stdarg.h>
#include <string.h>
#include <amk-glib/amk-glib.h>

static inline gboolean
need_gpu (void)
{
  if (amk_launcher_get_device_count () > 0)
    return TRUE;
  g_test_skip (amk_launcher_get_have_cuda () ? "no CUDA device" : "built without CUDA");
  return FALSE;
}

static inline GBytes *
poison (gsize n_bytes)
{
  return g_bytes_new_take (memset (g_malloc (n_bytes), 0xa5, n_bytes), n_bytes);
}

/* Appends an instruction; after the buffers come the non-zero integer parameters as
 * name, value pairs, then NULL. Float parameters go through set_float. */
static inline gint G_GNUC_NULL_TERMINATED
add_ins (AmkProgram *p, guint queue, AmkOpcode op, const gint *buffers, gsize n, ...)
{
  g_autoptr(GError) error = NULL;
  gint i = amk_program_add_instruction (p, queue, op, buffers, n, &error);
  const char *name;
  va_list ap;

  g_assert_no_error (error);
  va_start (ap, n);
  while ((name = va_arg (ap, const char *)) != NULL)
    {
      gint value = va_arg (ap, gint);

      g_assert_true (amk_program_set_param_int (p, i, name, value, &error));
      g_assert_no_error (error);
    }
  va_end (ap);
  return i;
}

static inline void
set_float (AmkProgram *p, gint i, const char *name, float v)
{
  g_autoptr(GError) error = NULL;
  g_assert_true (amk_program_set_param_float (p, i, name, v, &error));
  g_assert_no_error (error);
}

static inline void
wait_on (AmkProgram *p, gint waiter, gint counter, guint target)
{
  g_autoptr(GError) error = NULL;
  g_assert_true (amk_program_add_wait (p, waiter, counter, target, &error));
}

static inline void
signal_on (AmkProgram *p, gint instruction, gint counter)
{
  g_autoptr(GError) error = NULL;
  g_assert_true (amk_program_set_signal (p, instruction, counter, 1, &error));
}

/* Element i of an F32 or BF16 buffer, as a float. */
static inline float
load_float (const guint8 *p, AmkDType dtype, gsize i)
{
  float f;

  if (dtype == AMK_DTYPE_BF16)
    {
      guint32 u = 0;
      guint16 h;
      memcpy (&h, p + 2 * i, 2);
      u = (guint32) h << 16;
      memcpy (&f, &u, 4);
    }
  else
    memcpy (&f, p + 4 * i, 4);
  return f;
}
