/* test-gpu-share.c: amk_executor_load_shared() on the launcher: a second launcher whose
 * program names the first one's weights and cache uses the first's device memory (the
 * same addresses, no second allocation of the weights, nothing uploaded for them), sees
 * the first's writes, and keeps the memory when the first loads another program, binds
 * the buffer elsewhere or goes. Skips without a CUDA device.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "gpu-test-common.h"

#define N 64
#define BIG_ELEMENTS (64 * 1024 * 1024) /* 256 MiB of f32: shows in the free memory */

static gint
add_buffer (AmkProgram *p, const char *name, gint64 n, AmkBufferRole role)
{
  g_autoptr(GError) error = NULL;
  gint b = amk_program_add_buffer (p, name, AMK_DTYPE_F32, &n, 1, role, &error);

  g_assert_no_error (error);
  return b;
}

static GBytes *
floats (float first, gsize n)
{
  float *data = g_new (float, n);

  for (gsize k = 0; k < n; k++)
    data[k] = first + (float) (k % 1000);
  return g_bytes_new_take (data, n * sizeof (float));
}

/* The decode step's side: "w" (1, 2, 3 ...), "big" weights, FILL cache = 3. */
static AmkProgram *
owner_program (void)
{
  AmkProgram *p = amk_program_new (1);
  g_autoptr(GBytes) w = floats (1.0f, N);
  g_autoptr(GBytes) big = floats (0.5f, BIG_ELEMENTS);
  g_autoptr(GError) error = NULL;
  gint b_w, b_big, cache, fill;

  b_w = add_buffer (p, "w", N, AMK_BUFFER_ROLE_CONSTANT);
  g_assert_true (amk_program_set_buffer_data (p, b_w, w, &error));
  b_big = add_buffer (p, "big", BIG_ELEMENTS, AMK_BUFFER_ROLE_CONSTANT);
  g_assert_true (amk_program_set_buffer_data (p, b_big, big, &error));
  cache = add_buffer (p, "cache", N, AMK_BUFFER_ROLE_STATE);
  fill = add_ins (p, 0, AMK_OPCODE_FILL, (gint[]) { cache }, 1, "count", N, NULL);
  set_float (p, fill, "value", 3.0f);
  g_assert_no_error (error);
  return p;
}

/* The prefill side: out = cache + w + big[0:N], none of the weights with data here. */
static AmkProgram *
sharer_program (gint *out, gint *w, gint *big)
{
  AmkProgram *p = amk_program_new (2);
  gint cache, tmp, c, first, second;

  *out = add_buffer (p, "out", N, AMK_BUFFER_ROLE_OUTPUT);
  *big = add_buffer (p, "big", BIG_ELEMENTS, AMK_BUFFER_ROLE_CONSTANT);
  cache = add_buffer (p, "cache", N, AMK_BUFFER_ROLE_STATE);
  *w = add_buffer (p, "w", N, AMK_BUFFER_ROLE_CONSTANT);
  tmp = add_buffer (p, "tmp", N, AMK_BUFFER_ROLE_SCRATCH);
  c = amk_program_add_counter (p, "tmp");
  first = add_ins (p, 0, AMK_OPCODE_ADD, (gint[]) { tmp, cache, *w }, 3, "count", N, NULL);
  signal_on (p, first, c);
  second = add_ins (p, 1, AMK_OPCODE_ADD, (gint[]) { *out, tmp, *big }, 3, "count", N, NULL);
  wait_on (p, second, c, 1);
  return p;
}

static float
element (AmkLauncher *l, gint buffer, guint k)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) bytes = amk_launcher_download (l, (guint) buffer, &error);

  g_assert_no_error (error);
  return ((const float *) g_bytes_get_data (bytes, NULL))[k];
}

static void
launch_ok (AmkLauncher *l)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (amk_launcher_launch (l, NULL, &error));
  g_assert_no_error (error);
}

static void
test_share (void)
{
  AmkLauncher *owner;
  g_autoptr(AmkLauncher) sharer = NULL;
  g_autoptr(AmkProgram) a = NULL;
  g_autoptr(AmkProgram) b = NULL;
  g_autoptr(AmkProgram) nop = NULL;
  g_autoptr(GError) error = NULL;
  guint64 free_before = 0, free_after = 0;
  gint out, w, big;

  if (!need_gpu ())
    return;
  owner = amk_launcher_new (0);
  sharer = amk_launcher_new (0);
  a = owner_program ();
  b = sharer_program (&out, &w, &big);
  g_assert_true (amk_launcher_load (owner, a, &error));
  g_assert_no_error (error);

  g_assert_true (amk_launcher_memory_info (sharer, &free_before, NULL, &error));
  g_assert_true (amk_executor_load_shared (AMK_EXECUTOR (sharer), b, AMK_EXECUTOR (owner), &error));
  g_assert_no_error (error);
  g_assert_true (amk_launcher_memory_info (sharer, &free_after, NULL, &error));
  g_assert_cmpuint (free_before - MIN (free_before, free_after), <,
                    (guint64) BIG_ELEMENTS * sizeof (float) / 2);
  g_assert_cmpuint (amk_launcher_get_buffer_address (sharer, (guint) big, NULL), ==,
                    amk_launcher_get_buffer_address (owner, (guint) amk_program_find_buffer (a, "big"), NULL));
  g_assert_cmpuint (amk_launcher_get_buffer_address (sharer, (guint) w, NULL), ==,
                    amk_launcher_get_buffer_address (owner, (guint) amk_program_find_buffer (a, "w"), NULL));

  /* the weights are the owner's; the cache is what the owner wrote */
  launch_ok (sharer);
  g_assert_cmpfloat (element (sharer, out, 5), ==, 6.0f + 5.5f);
  launch_ok (owner);
  launch_ok (sharer);
  g_assert_cmpfloat (element (sharer, out, 5), ==, 3.0f + 6.0f + 5.5f);

  /* the owner binds "w" elsewhere: the sharer keeps the memory it had */
  g_assert_true (amk_launcher_bind_buffer (owner, (guint) amk_program_find_buffer (a, "w"),
                                           amk_launcher_get_buffer_address (owner, (guint) amk_program_find_buffer (a, "cache"), NULL),
                                           N * sizeof (float), &error));
  g_assert_no_error (error);
  launch_ok (sharer);
  g_assert_cmpfloat (element (sharer, out, 5), ==, 3.0f + 6.0f + 5.5f);

  /* the owner loads another program, then goes: the sharer still runs on the memory */
  nop = amk_program_new (1);
  add_ins (nop, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_true (amk_launcher_load (owner, nop, &error));
  g_assert_no_error (error);
  g_object_unref (owner);
  launch_ok (sharer);
  g_assert_cmpfloat (element (sharer, out, 5), ==, 3.0f + 6.0f + 5.5f);
}

/* A name with another size is refused on the launcher too; and launchers of different
 * devices do not share. */
static void
test_share_errors (void)
{
  g_autoptr(AmkLauncher) owner = NULL;
  g_autoptr(AmkLauncher) sharer = NULL;
  g_autoptr(AmkProgram) a = NULL;
  g_autoptr(AmkProgram) wrong = amk_program_new (1);
  g_autoptr(GError) error = NULL;

  if (!need_gpu ())
    return;
  owner = amk_launcher_new (0);
  a = owner_program ();
  g_assert_true (amk_launcher_load (owner, a, &error));
  g_assert_no_error (error);
  add_buffer (wrong, "cache", 2 * N, AMK_BUFFER_ROLE_STATE);
  add_ins (wrong, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  sharer = amk_launcher_new (0);
  g_assert_false (amk_executor_load_shared (AMK_EXECUTOR (sharer), wrong, AMK_EXECUTOR (owner), &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_null (amk_launcher_get_program (sharer));

  if (amk_launcher_get_device_count () < 2)
    return;
  g_clear_object (&sharer);
  sharer = amk_launcher_new (1);
  g_assert_false (amk_executor_load_shared (AMK_EXECUTOR (sharer), a, AMK_EXECUTOR (owner), &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/amk/gpu/share/launcher", test_share);
  g_test_add_func ("/amk/gpu/share/errors", test_share_errors);
  return g_test_run ();
}
