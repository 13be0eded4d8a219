/* make-seeds.c: writes the seed corpus of fuzz-image into a folder: small images that
 * load (every opcode, dtype and role), and a few that must fail (deadlock, another ABI
 * version, bad indices), so the fuzzer starts next to every branch of the loader.
 *
 *   make-seeds DIR
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <amk-glib/amk-glib.h>

static const char *out_dir;

static void
check (gboolean ok, GError *error)
{
  if (!ok)
    g_error ("make-seeds: %s", error != NULL ? error->message : "failed");
}

static void
write_bytes (const char *name, GBytes *bytes)
{
  g_autofree char *path = g_build_filename (out_dir, name, NULL);
  GError *error = NULL;

  check (g_file_set_contents (path, g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes), &error), error);
  g_print ("%s (%" G_GSIZE_FORMAT " bytes)\n", path, g_bytes_get_size (bytes));
}

static void
write_program (const char *name, AmkProgram *p)
{
  g_autoptr(GBytes) bytes = amk_program_serialize (p);
  write_bytes (name, bytes);
}

static gint
buffer (AmkProgram *p, const char *name, AmkDType dtype, gint64 n, AmkBufferRole role)
{
  GError *error = NULL;
  gint b = amk_program_add_buffer (p, name, dtype, &n, 1, role, &error);
  check (b >= 0, error);
  return b;
}

/* Appends an instruction; after the buffers come its non-zero integer parameters as
 * name, value pairs, then NULL. */
static gint G_GNUC_NULL_TERMINATED
instruction (AmkProgram *p, guint queue, AmkOpcode op, const gint *bufs, gsize n_bufs, ...)
{
  GError *error = NULL;
  gint i = amk_program_add_instruction (p, queue, op, bufs, n_bufs, &error);
  const char *name;
  va_list ap;

  check (i >= 0, error);
  va_start (ap, n_bufs);
  while ((name = va_arg (ap, const char *)) != NULL)
    check (amk_program_set_param_int (p, i, name, va_arg (ap, gint), &error), error);
  va_end (ap);
  return i;
}

static void
wait_on (AmkProgram *p, gint i, gint counter, guint target)
{
  GError *error = NULL;
  check (amk_program_add_wait (p, i, counter, target, &error), error);
}

static void
signal_to (AmkProgram *p, gint i, gint counter, guint amount)
{
  GError *error = NULL;
  check (amk_program_set_signal (p, i, counter, amount, &error), error);
}

/* FILL -> COPY -> ADD over one queue per step, in @dtype. */
static AmkProgram *
chain (AmkDType dtype, guint n, gboolean with_data)
{
  AmkProgram *p = amk_program_new (3);
  gint x = buffer (p, "x", dtype, n, AMK_BUFFER_ROLE_SCRATCH);
  gint y = buffer (p, "y", dtype, n, AMK_BUFFER_ROLE_SCRATCH);
  gint in = buffer (p, "in", dtype, n, AMK_BUFFER_ROLE_INPUT);
  gint z = buffer (p, "z", dtype, n, AMK_BUFFER_ROLE_OUTPUT);
  gint c0 = amk_program_add_counter (p, "c0");
  gint c1 = amk_program_add_counter (p, NULL);
  GError *error = NULL;
  gint i;

  i = instruction (p, 0, AMK_OPCODE_FILL, (gint[]) { x }, 1, "count", n, NULL);
  check (amk_program_set_param_float (p, i, "value", 2.5f, &error), error);
  signal_to (p, i, c0, 1);
  i = instruction (p, 1, AMK_OPCODE_COPY, (gint[]) { y, x }, 2, "count", n, NULL);
  wait_on (p, i, c0, 1);
  signal_to (p, i, c1, 2);
  i = instruction (p, 2, AMK_OPCODE_ADD, (gint[]) { z, y, in }, 3, "count", n, NULL);
  wait_on (p, i, c1, 2);
  wait_on (p, i, c0, 1);
  if (with_data)
    {
      gsize size = amk_program_get_buffer_size (p, in);
      g_autofree guint8 *data = g_malloc (size);
      g_autoptr(GBytes) bytes = NULL;

      for (gsize k = 0; k < size; k++)
        data[k] = (guint8) (k * 37 + 11);
      bytes = g_bytes_new (data, size);
      check (amk_program_set_buffer_data (p, in, bytes, &error), error);
    }
  return p;
}

int
main (int argc, char **argv)
{
  static const AmkDType dtypes[] = { AMK_DTYPE_F32, AMK_DTYPE_F16, AMK_DTYPE_BF16, AMK_DTYPE_I32, AMK_DTYPE_U8 };
  static const char *dtype_names[] = { "f32", "f16", "bf16", "i32", "u8" };
  GError *error = NULL;

  if (argc != 2)
    {
      g_printerr ("usage: make-seeds DIR\n");
      return 2;
    }
  out_dir = argv[1];
  check (g_mkdir_with_parents (out_dir, 0777) == 0, NULL);

  /* the chain in every dtype, with and without default contents */
  for (guint d = 0; d < G_N_ELEMENTS (dtypes); d++)
    {
      g_autoptr(AmkProgram) p = chain (dtypes[d], 8, d % 2 == 0);
      g_autofree char *name = g_strdup_printf ("chain-%s.amk", dtype_names[d]);
      check (amk_program_verify (p, &error), error);
      write_program (name, p);
    }

  /* quantized weights: MATVECs of a Q8_0 and a Q4_K matrix, MATMUL of a Q5_K one, an
   * EMBED of a Q6_K table, compiled by the op API (random blocks with small f16 scales) */
  {
    static const AmkDType types[] = { AMK_DTYPE_Q8_0, AMK_DTYPE_Q4_K, AMK_DTYPE_Q5_K, AMK_DTYPE_Q6_K };
    static const guint scale_at[][2] = { { 0, 0 }, { 0, 2 }, { 0, 2 }, { 208, 208 } };
    g_autoptr(AmkProgram) p = amk_program_new (3);
    gint64 shape[2] = { 4, 256 };
    gint w[4], x, y, y2, e, ids;

    for (guint t = 0; t < G_N_ELEMENTS (types); t++)
      {
        g_autofree char *name = g_strdup_printf ("w%u", t);
        guint values, bytes;
        gsize size;
        g_autofree guint8 *data = NULL;

        w[t] = amk_program_add_buffer (p, name, types[t], shape, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
        check (w[t] >= 0, error);
        size = amk_program_get_buffer_size (p, (guint) w[t]);
        data = g_malloc (size);
        for (gsize k = 0; k < size; k++)
          data[k] = (guint8) (k * 131 + 7);
        values = types[t] == AMK_DTYPE_Q8_0 ? 32 : 256;
        bytes = (guint) (size / (4 * 256 / values));
        for (gsize b = 0; b < size / bytes; b++)
          for (guint s = 0; s < 2; s++)
            {
              data[b * bytes + scale_at[t][s]] = 0x00;       /* f16 0x1800: 2^-9 */
              data[b * bytes + scale_at[t][s] + 1] = 0x18;
            }
        {
          g_autoptr(GBytes) contents = g_bytes_new (data, size);
          check (amk_program_set_buffer_data (p, (guint) w[t], contents, &error), error);
        }
      }
    x = buffer (p, "x", AMK_DTYPE_F32, 256, AMK_BUFFER_ROLE_INPUT);
    y = buffer (p, "y", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_OUTPUT);
    y2 = buffer (p, "y2", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_OUTPUT);
    e = buffer (p, "e", AMK_DTYPE_F32, 256, AMK_BUFFER_ROLE_OUTPUT);
    ids = buffer (p, "ids", AMK_DTYPE_I32, 1, AMK_BUFFER_ROLE_INPUT);
    check (amk_program_op_matvec (p, y, w[0], x, -1, -1, -1, 0.0f, &error) >= 0, error);
    check (amk_program_op_matvec (p, y, w[1], x, -1, y, -1, 0.0f, &error) >= 0, error);
    check (amk_program_op_matmul (p, y2, w[2], x, -1, -1, -1, 0.0f, &error) >= 0, error);
    check (amk_program_op_embed (p, e, w[3], ids, 0, &error) >= 0, error);
    check (amk_program_compile (p, &error), error);
    write_program ("quantized.amk", p);
  }

  /* one empty queue */
  {
    g_autoptr(AmkProgram) p = amk_program_new (1);
    write_program ("empty.amk", p);
  }

  /* NOP and TRAP (the run aborts) */
  {
    g_autoptr(AmkProgram) p = amk_program_new (2);
    gint c = amk_program_add_counter (p, "go");
    gint i = instruction (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
    signal_to (p, i, c, 1);
    i = instruction (p, 1, AMK_OPCODE_TRAP, NULL, 0, "code", 42, NULL);
    wait_on (p, i, c, 1);
    write_program ("trap.amk", p);
  }

  /* GRID_SYNC on three queues, with work on both sides of the barrier */
  {
    g_autoptr(AmkProgram) p = amk_program_new (3);
    gint64 shape[] = { 2, 3, 4 };
    gint a = amk_program_add_buffer (p, "a", AMK_DTYPE_F32, shape, 3, AMK_BUFFER_ROLE_STATE, &error);
    gint k = buffer (p, "k", AMK_DTYPE_F32, 24, AMK_BUFFER_ROLE_CONSTANT);
    gint o = buffer (p, "o", AMK_DTYPE_F32, 24, AMK_BUFFER_ROLE_OUTPUT);

    check (a >= 0, error);
    for (guint q = 0; q < 3; q++)
      {
        gint i = instruction (p, q, AMK_OPCODE_FILL, (gint[]) { a }, 1, "offset", 8 * q, "count", 8, NULL);
        check (amk_program_set_param_float (p, i, "value", 0.5f + q, &error), error);
        instruction (p, q, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
        instruction (p, q, AMK_OPCODE_ADD, (gint[]) { o, a, k }, 3, "dst_offset", 8 * q, "a_offset", 8 * q,
                     "b_offset", 8 * q, "count", 8, NULL);
      }
    write_program ("grid-sync.amk", p);
  }

  /* must fail: a deadlock (each queue waits for the other) */
  {
    g_autoptr(AmkProgram) p = amk_program_new (2);
    gint c0 = amk_program_add_counter (p, "c0");
    gint c1 = amk_program_add_counter (p, "c1");
    gint i = instruction (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
    wait_on (p, i, c1, 1);
    signal_to (p, i, c0, 1);
    i = instruction (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
    wait_on (p, i, c0, 1);
    signal_to (p, i, c1, 1);
    write_program ("deadlock.amk", p);
  }

  /* must fail: an ADD past the end of its buffer */
  {
    g_autoptr(AmkProgram) p = amk_program_new (1);
    gint a = buffer (p, "a", AMK_DTYPE_I32, 4, AMK_BUFFER_ROLE_OUTPUT);
    instruction (p, 0, AMK_OPCODE_ADD, (gint[]) { a, a, a }, 3, "a_offset", 1, "b_offset", 2, "count", 3,
                 NULL);
    write_program ("out-of-range.amk", p);
  }

  /* must fail: another ABI version, and a wrong magic (same layout, other values) */
  {
    g_autoptr(AmkProgram) p = chain (AMK_DTYPE_F32, 4, FALSE);
    g_autoptr(GBytes) good = amk_program_serialize (p);
    g_autoptr(GVariant) v = g_variant_ref_sink (g_variant_new_from_bytes (G_VARIANT_TYPE ("(suuta(syyaxtmay)amsayaai)"), good, TRUE));
    g_autoptr(GVariant) version = NULL;
    g_autoptr(GVariant) magic = NULL;
    g_autoptr(GBytes) b1 = NULL;
    g_autoptr(GBytes) b2 = NULL;
    GVariant *children[8];

    for (guint c = 0; c < 8; c++)
      children[c] = g_variant_get_child_value (v, c);
    g_variant_unref (children[1]);
    children[1] = g_variant_new_uint32 (2);
    version = g_variant_ref_sink (g_variant_new_tuple (children, 8));
    b1 = g_variant_get_data_as_bytes (version);
    write_bytes ("abi-version-2.amk", b1);
    children[1] = g_variant_get_child_value (v, 1);
    g_variant_unref (children[0]);
    children[0] = g_variant_new_string ("amk-imagf");
    magic = g_variant_ref_sink (g_variant_new_tuple (children, 8));
    b2 = g_variant_get_data_as_bytes (magic);
    write_bytes ("bad-magic.amk", b2);
  }
  return 0;
}
