/* test-program.c: building an AmkProgram, its properties and accessors, and every error
 * of the add_* / set_* calls.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"

static void
count_notify (GObject *object, GParamSpec *pspec, gpointer data)
{
  (*(guint *) data)++;
}

static void
test_new (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (7);
  g_autoptr(AmkProgram) q = NULL;
  guint num_queues = 0;
  guint64 scratch = 1;
  gboolean verified = TRUE;

  g_assert_true (AMK_IS_PROGRAM (p));
  g_assert_cmpuint (amk_program_get_num_queues (p), ==, 7);
  g_assert_cmpuint (amk_program_get_scratch_size (p), ==, 0);
  g_assert_false (amk_program_get_verified (p));
  g_assert_cmpuint (amk_program_get_n_buffers (p), ==, 0);
  g_assert_cmpuint (amk_program_get_n_counters (p), ==, 0);
  g_assert_cmpuint (amk_program_get_n_instructions (p), ==, 0);
  for (guint i = 0; i < 7; i++)
    g_assert_cmpuint (amk_program_get_queue_length (p, i), ==, 0);

  g_object_get (p, "num-queues", &num_queues, "scratch-size", &scratch, "verified", &verified, NULL);
  g_assert_cmpuint (num_queues, ==, 7);
  g_assert_cmpuint (scratch, ==, 0);
  g_assert_false (verified);

  /* the property is the constructor (what bindings use) */
  q = g_object_new (AMK_TYPE_PROGRAM, "num-queues", 132, NULL);
  g_assert_cmpuint (amk_program_get_num_queues (q), ==, 132);
  for (guint i = 0; i < 132; i++)
    g_assert_cmpuint (amk_program_get_queue_length (q, i), ==, 0);
  g_clear_object (&q);
  q = g_object_new (AMK_TYPE_PROGRAM, NULL);
  g_assert_cmpuint (amk_program_get_num_queues (q), ==, 1);
  g_clear_object (&q);
  q = amk_program_new (65536);
  g_assert_cmpuint (amk_program_get_num_queues (q), ==, 65536);

  /* an empty program is sound */
  g_assert_true (amk_program_verify (p, NULL));
  g_assert_true (amk_program_get_verified (p));
}

static void
test_buffers (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(GError) error = NULL;
  const gint64 shape3[] = { 3, 5, 7 };
  const gint64 shape1[] = { 11 };
  const gint64 *got;
  gsize n_dims = 0;
  gint a, b, c, d, e;

  a = amk_program_add_buffer (p, "a", AMK_DTYPE_F32, shape3, 3, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_no_error (error);
  b = amk_program_add_buffer (p, "b", AMK_DTYPE_F16, shape1, 1, AMK_BUFFER_ROLE_OUTPUT, &error);
  g_assert_no_error (error);
  c = amk_program_add_buffer (p, "c", AMK_DTYPE_BF16, shape1, 1, AMK_BUFFER_ROLE_CONSTANT, &error);
  g_assert_no_error (error);
  d = amk_program_add_buffer (p, "d", AMK_DTYPE_I32, shape3, 2, AMK_BUFFER_ROLE_STATE, &error);
  g_assert_no_error (error);
  e = amk_program_add_buffer (p, "e", AMK_DTYPE_U8, shape1, 1, AMK_BUFFER_ROLE_SCRATCH, &error);
  g_assert_no_error (error);
  g_assert_cmpint (a, ==, 0);
  g_assert_cmpint (b, ==, 1);
  g_assert_cmpint (c, ==, 2);
  g_assert_cmpint (d, ==, 3);
  g_assert_cmpint (e, ==, 4);
  g_assert_cmpuint (amk_program_get_n_buffers (p), ==, 5);

  g_assert_cmpstr (amk_program_get_buffer_name (p, a), ==, "a");
  g_assert_cmpstr (amk_program_get_buffer_name (p, e), ==, "e");
  g_assert_cmpint (amk_program_get_buffer_dtype (p, a), ==, AMK_DTYPE_F32);
  g_assert_cmpint (amk_program_get_buffer_dtype (p, b), ==, AMK_DTYPE_F16);
  g_assert_cmpint (amk_program_get_buffer_dtype (p, c), ==, AMK_DTYPE_BF16);
  g_assert_cmpint (amk_program_get_buffer_dtype (p, d), ==, AMK_DTYPE_I32);
  g_assert_cmpint (amk_program_get_buffer_dtype (p, e), ==, AMK_DTYPE_U8);
  g_assert_cmpint (amk_program_get_buffer_role (p, a), ==, AMK_BUFFER_ROLE_INPUT);
  g_assert_cmpint (amk_program_get_buffer_role (p, b), ==, AMK_BUFFER_ROLE_OUTPUT);
  g_assert_cmpint (amk_program_get_buffer_role (p, c), ==, AMK_BUFFER_ROLE_CONSTANT);
  g_assert_cmpint (amk_program_get_buffer_role (p, d), ==, AMK_BUFFER_ROLE_STATE);
  g_assert_cmpint (amk_program_get_buffer_role (p, e), ==, AMK_BUFFER_ROLE_SCRATCH);

  got = amk_program_get_buffer_shape (p, a, &n_dims);
  g_assert_cmpuint (n_dims, ==, 3);
  g_assert_cmpmem (got, 3 * sizeof (gint64), shape3, sizeof shape3);
  got = amk_program_get_buffer_shape (p, d, &n_dims);
  g_assert_cmpuint (n_dims, ==, 2);
  g_assert_cmpint (got[0], ==, 3);
  g_assert_cmpint (got[1], ==, 5);
  g_assert_nonnull (amk_program_get_buffer_shape (p, b, NULL));

  g_assert_cmpuint (amk_program_get_buffer_n_elements (p, a), ==, 105);
  g_assert_cmpuint (amk_program_get_buffer_size (p, a), ==, 420);
  g_assert_cmpuint (amk_program_get_buffer_n_elements (p, b), ==, 11);
  g_assert_cmpuint (amk_program_get_buffer_size (p, b), ==, 22);
  g_assert_cmpuint (amk_program_get_buffer_size (p, c), ==, 22);
  g_assert_cmpuint (amk_program_get_buffer_n_elements (p, d), ==, 15);
  g_assert_cmpuint (amk_program_get_buffer_size (p, d), ==, 60);
  g_assert_cmpuint (amk_program_get_buffer_size (p, e), ==, 11);

  g_assert_cmpint (amk_program_find_buffer (p, "a"), ==, a);
  g_assert_cmpint (amk_program_find_buffer (p, "d"), ==, d);
  g_assert_cmpint (amk_program_find_buffer (p, "e"), ==, e);
  g_assert_cmpint (amk_program_find_buffer (p, "nothing"), ==, -1);
  g_assert_cmpint (amk_program_find_buffer (p, ""), ==, -1);

  /* shape is copied */
  {
    gint64 shape[] = { 4 };
    gint f = amk_program_add_buffer (p, "f", AMK_DTYPE_F32, shape, 1, AMK_BUFFER_ROLE_INPUT, &error);
    g_assert_no_error (error);
    shape[0] = 99;
    g_assert_cmpuint (amk_program_get_buffer_n_elements (p, f), ==, 4);
    g_assert_cmpint (amk_program_get_buffer_shape (p, f, NULL)[0], ==, 4);
  }

  /* the largest buffer: G_MAXINT32 elements */
  {
    const gint64 big[] = { 65536, 32767 };
    gint f = amk_program_add_buffer (p, "big", AMK_DTYPE_U8, big, 2, AMK_BUFFER_ROLE_INPUT, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (amk_program_get_buffer_n_elements (p, f), ==, (guint64) 65536 * 32767);
  }
}

static void
test_scratch_placement (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  guint notified = 0;
  AmkBufferInfo *info;
  gint a, b, in, c;

  g_signal_connect (p, "notify::scratch-size", G_CALLBACK (count_notify), &notified);
  a = test_add_buffer (p, "s0", AMK_DTYPE_F32, 3, AMK_BUFFER_ROLE_SCRATCH);   /* 12 bytes */
  g_assert_cmpuint (amk_program_get_scratch_size (p), ==, 12);
  g_assert_cmpuint (notified, ==, 1);
  in = test_add_buffer (p, "in", AMK_DTYPE_F32, 1000, AMK_BUFFER_ROLE_INPUT);
  g_assert_cmpuint (amk_program_get_scratch_size (p), ==, 12);
  b = test_add_buffer (p, "s1", AMK_DTYPE_BF16, 5, AMK_BUFFER_ROLE_SCRATCH);  /* 10 bytes */
  g_assert_cmpuint (amk_program_get_scratch_size (p), ==, 256 + 10);
  c = test_add_buffer (p, "s2", AMK_DTYPE_U8, 256, AMK_BUFFER_ROLE_SCRATCH);
  g_assert_cmpuint (amk_program_get_scratch_size (p), ==, 512 + 256);
  g_assert_cmpuint (notified, ==, 3);

  info = g_ptr_array_index (p->buffers, a);
  g_assert_cmpuint (info->arena_offset, ==, 0);
  info = g_ptr_array_index (p->buffers, b);
  g_assert_cmpuint (info->arena_offset, ==, 256);
  info = g_ptr_array_index (p->buffers, c);
  g_assert_cmpuint (info->arena_offset, ==, 512);
  (void) in;
  g_assert_true (amk_program_verify (p, NULL));
}

static void
test_add_buffer_errors (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  const gint64 one[] = { 1 };
  const gint64 shapes[][2] = {
    { 0, 1 }, { -1, 1 }, { 1, 0 }, { 4, -7 }, { (gint64) G_MAXINT32 + 1, 1 },
    { G_MININT64, 1 }, { 65536, 65536 }, { 46341, 46341 }, { G_MAXINT64, 1 },
  };
  const gint64 nine[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
  GError *error = NULL;
  gint index;

  test_add_buffer (p, "taken", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_INPUT);

  index = amk_program_add_buffer (p, NULL, AMK_DTYPE_F32, one, 1, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_assert_cmpint (index, ==, -1);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "", AMK_DTYPE_F32, one, 1, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_assert_cmpint (index, ==, -1);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "taken", AMK_DTYPE_I32, one, 1, AMK_BUFFER_ROLE_OUTPUT, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  test_assert_message_has (error, "taken");
  g_assert_cmpint (index, ==, -1);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "x", (AmkDType) 5, one, 1, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_assert_cmpint (index, ==, -1);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "x", (AmkDType) -1, one, 1, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, one, 1, (AmkBufferRole) 5, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_assert_cmpint (index, ==, -1);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, one, 1, (AmkBufferRole) -3, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, one, 0, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, NULL, 0, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, NULL, 1, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  index = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, nine, 9, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++)
    {
      index = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, shapes[i], 2, AMK_BUFFER_ROLE_SCRATCH, &error);
      g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
      g_assert_cmpint (index, ==, -1);
      g_clear_error (&error);
    }

  /* nothing was added, and the arena did not grow */
  g_assert_cmpuint (amk_program_get_n_buffers (p), ==, 1);
  g_assert_cmpuint (amk_program_get_scratch_size (p), ==, 0);
  g_assert_cmpint (amk_program_find_buffer (p, "x"), ==, -1);

  /* 8 dimensions are fine */
  index = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, nine, 8, AMK_BUFFER_ROLE_INPUT, &error);
  g_assert_no_error (error);
  g_assert_cmpint (index, ==, 1);
}

static void
test_buffer_data (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(GBytes) data = test_random_bytes (5 * 4);
  g_autoptr(GBytes) other = test_random_bytes (5 * 4);
  g_autoptr(GBytes) small = test_random_bytes (19);
  g_autoptr(GBytes) got = NULL;
  GError *error = NULL;
  gint a, s;

  a = test_add_buffer (p, "a", AMK_DTYPE_F32, 5, AMK_BUFFER_ROLE_CONSTANT);
  s = test_add_buffer (p, "s", AMK_DTYPE_F32, 5, AMK_BUFFER_ROLE_SCRATCH);
  g_assert_null (amk_program_get_buffer_data (p, a));

  g_assert_true (amk_program_set_buffer_data (p, a, data, &error));
  g_assert_no_error (error);
  got = amk_program_get_buffer_data (p, a);
  g_assert_true (g_bytes_equal (got, data));
  g_clear_pointer (&got, g_bytes_unref);

  g_assert_true (amk_program_set_buffer_data (p, a, other, &error));
  g_assert_no_error (error);
  got = amk_program_get_buffer_data (p, a);
  g_assert_true (g_bytes_equal (got, other));
  g_clear_pointer (&got, g_bytes_unref);

  g_assert_false (amk_program_set_buffer_data (p, a, small, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  got = amk_program_get_buffer_data (p, a);
  g_assert_true (g_bytes_equal (got, other));

  g_assert_false (amk_program_set_buffer_data (p, s, data, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_null (amk_program_get_buffer_data (p, s));

  g_assert_false (amk_program_set_buffer_data (p, 2, data, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_false (amk_program_set_buffer_data (p, G_MAXUINT, data, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
}

static void
test_counters (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);

  g_assert_cmpint (amk_program_add_counter (p, "first"), ==, 0);
  g_assert_cmpint (amk_program_add_counter (p, NULL), ==, 1);
  g_assert_cmpint (amk_program_add_counter (p, "first"), ==, 2); /* names need not be unique */
  g_assert_cmpuint (amk_program_get_n_counters (p), ==, 3);
  g_assert_cmpstr (g_ptr_array_index (p->counter_names, 0), ==, "first");
  g_assert_null (g_ptr_array_index (p->counter_names, 1));
  for (guint i = 3; i < 1000; i++)
    g_assert_cmpint (amk_program_add_counter (p, "c"), ==, (gint) i);
  g_assert_cmpuint (amk_program_get_n_counters (p), ==, 1000);
  g_assert_true (amk_program_verify (p, NULL));
}

static void
test_instructions (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (3);
  g_autoptr(GError) error = NULL;
  amk_instruction_t *ins;
  gint a, b, c0, c1, i0, i1, i2, i3;

  a = test_add_buffer (p, "a", AMK_DTYPE_F32, 16, AMK_BUFFER_ROLE_INPUT);
  b = test_add_buffer (p, "b", AMK_DTYPE_F32, 16, AMK_BUFFER_ROLE_OUTPUT);
  c0 = amk_program_add_counter (p, "c0");
  c1 = amk_program_add_counter (p, "c1");

  i0 = test_add (p, 2, AMK_OPCODE_COPY, (gint[]) { b, a }, 2, NULL);
  i1 = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  i2 = test_add (p, 2, AMK_OPCODE_FILL, (gint[]) { b }, 1, NULL);
  i3 = test_add (p, 1, AMK_OPCODE_ADD, (gint[]) { b, a, a }, 3, NULL);
  g_assert_cmpint (i0, ==, 0);
  g_assert_cmpint (i1, ==, 1);
  g_assert_cmpint (i2, ==, 2);
  g_assert_cmpint (i3, ==, 3);
  g_assert_cmpuint (amk_program_get_n_instructions (p), ==, 4);
  g_assert_cmpuint (amk_program_get_queue_length (p, 0), ==, 1);
  g_assert_cmpuint (amk_program_get_queue_length (p, 1), ==, 1);
  g_assert_cmpuint (amk_program_get_queue_length (p, 2), ==, 2);
  g_assert_cmpint (g_array_index ((GArray *) g_ptr_array_index (p->queues, 2), gint32, 0), ==, i0);
  g_assert_cmpint (g_array_index ((GArray *) g_ptr_array_index (p->queues, 2), gint32, 1), ==, i2);

  ins = &g_array_index (p->instructions, amk_instruction_t, i0);
  g_assert_cmpuint (ins->opcode, ==, AMK_ABI_OP_COPY);
  g_assert_cmpuint (ins->flags, ==, 0);
  g_assert_cmpuint (ins->reserved, ==, 0);
  g_assert_cmpuint (ins->n_buffers, ==, 2);
  g_assert_cmpint (ins->buffers[0], ==, b);
  g_assert_cmpint (ins->buffers[1], ==, a);
  for (guint i = 2; i < AMK_MAX_BUFFER_REFS; i++)
    g_assert_cmpint (ins->buffers[i], ==, AMK_NO_BUFFER);
  g_assert_cmpuint (ins->n_waits, ==, 0);
  g_assert_cmpint (ins->signal.counter, ==, AMK_NO_COUNTER);

  for (guint k = 0; k < AMK_PARAM_SLOTS; k++)
    g_assert_cmpuint (ins->params.raw[k], ==, 0); /* a new instruction's parameters are 0 */
  g_assert_true (amk_program_set_param_int (p, i0, "dst_offset", 1, &error));
  g_assert_true (amk_program_set_param_int (p, i0, "src_offset", -2, &error));
  g_assert_true (amk_program_set_param_int (p, i0, "count", G_MININT32, &error));
  g_assert_no_error (error);
  ins = &g_array_index (p->instructions, amk_instruction_t, i0);
  g_assert_cmpint (ins->params.copy.dst_offset, ==, 1);
  g_assert_cmpint (ins->params.copy.src_offset, ==, -2);
  g_assert_cmpint (ins->params.copy.count, ==, G_MININT32);
  g_assert_true (amk_program_set_param_int (p, i0, "dst_offset", 42, &error));
  g_assert_cmpint (ins->params.copy.dst_offset, ==, 42);
  g_assert_cmpint (ins->params.copy.src_offset, ==, -2); /* the other parameters stay */
  g_assert_no_error (error);

  g_assert_true (amk_program_set_param_float (p, i2, "value", 3.25f, &error));
  g_assert_no_error (error);
  ins = &g_array_index (p->instructions, amk_instruction_t, i2);
  g_assert_cmpfloat (ins->params.fill.value, ==, 3.25f);
  g_assert_true (amk_program_set_param_float (p, i2, "value", -1.5e-7f, &error));
  g_assert_cmpfloat (ins->params.fill.value, ==, -1.5e-7f);
  g_assert_no_error (error);

  test_wait (p, i3, c0, 1);
  test_wait (p, i3, c1, 7);
  test_wait (p, i3, c0, 0);
  test_wait (p, i3, c1, G_MAXUINT32);
  ins = &g_array_index (p->instructions, amk_instruction_t, i3);
  g_assert_cmpuint (ins->n_waits, ==, 4);
  g_assert_cmpint (ins->waits[0].counter, ==, c0);
  g_assert_cmpuint (ins->waits[0].target, ==, 1);
  g_assert_cmpint (ins->waits[1].counter, ==, c1);
  g_assert_cmpuint (ins->waits[1].target, ==, 7);
  g_assert_cmpuint (ins->waits[3].target, ==, G_MAXUINT32);

  test_signal (p, i1, c1, 5);
  test_signal (p, i1, c0, 9); /* the last call wins */
  ins = &g_array_index (p->instructions, amk_instruction_t, i1);
  g_assert_cmpint (ins->signal.counter, ==, c0);
  g_assert_cmpuint (ins->signal.amount, ==, 9);

  /* all 8 buffer slots */
  {
    gint eight[8] = { a, a, a, a, b, b, b, b };
    gint i = test_add (p, 0, AMK_OPCODE_NOP, eight, 8, NULL);
    ins = &g_array_index (p->instructions, amk_instruction_t, i);
    g_assert_cmpuint (ins->n_buffers, ==, 8);
    g_assert_cmpint (ins->buffers[7], ==, b);
  }
}

static void
test_instruction_errors (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  GError *error = NULL;
  gint a, c, i;

  a = test_add_buffer (p, "a", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_OUTPUT);
  c = amk_program_add_counter (p, "c");

  g_assert_cmpint (amk_program_add_instruction (p, 0, (AmkOpcode) AMK_ABI_N_OPS, NULL, 0, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_add_instruction (p, 0, (AmkOpcode) -1, NULL, 0, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);

  g_assert_cmpint (amk_program_add_instruction (p, 0, AMK_OPCODE_NOP,
                                                (gint[]) { a, a, a, a, a, a, a, a, a }, 9, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  g_assert_cmpint (amk_program_add_instruction (p, 0, AMK_OPCODE_FILL, (gint[]) { 1 }, 1, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_add_instruction (p, 0, AMK_OPCODE_FILL, (gint[]) { -1 }, 1, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_add_instruction (p, 0, AMK_OPCODE_COPY, (gint[]) { a, G_MININT32 }, 2, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  g_assert_cmpint (amk_program_add_instruction (p, 2, AMK_OPCODE_NOP, NULL, 0, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_cmpint (amk_program_add_instruction (p, G_MAXUINT, AMK_OPCODE_NOP, NULL, 0, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  g_assert_cmpuint (amk_program_get_n_instructions (p), ==, 0);
  g_assert_cmpuint (amk_program_get_queue_length (p, 0), ==, 0);

  i = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);

  g_assert_false (amk_program_set_param_int (p, i, "count", 1, &error)); /* NOP has none */
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (amk_program_set_param_int (p, i + 1, "count", 1, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  g_assert_false (amk_program_set_param_float (p, i, "value", 1.0f, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (amk_program_set_param_float (p, 77, "value", 1.0f, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  g_assert_false (amk_program_add_wait (p, i, c + 1, 1, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_false (amk_program_add_wait (p, i + 1, c, 1, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  for (guint w = 0; w < AMK_MAX_WAITS; w++)
    test_wait (p, i, c, 0);
  g_assert_false (amk_program_add_wait (p, i, c, 0, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_cmpuint (g_array_index (p->instructions, amk_instruction_t, i).n_waits, ==, AMK_MAX_WAITS);

  g_assert_false (amk_program_set_signal (p, i, c + 1, 1, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_false (amk_program_set_signal (p, i + 1, c, 1, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_cmpint (g_array_index (p->instructions, amk_instruction_t, i).signal.counter, ==, AMK_NO_COUNTER);

  /* errors may be ignored */
  g_assert_cmpint (amk_program_add_instruction (p, 5, AMK_OPCODE_NOP, NULL, 0, NULL), ==, -1);
  g_assert_false (amk_program_add_wait (p, i, 99, 1, NULL));
}

/* Parameters by name: what is set reads back, nested names short or dotted, and the
 * errors for a name the op lacks, the wrong type and a missing instruction. */
static void
test_params (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (1);
  g_autoptr(GError) error = NULL;
  const amk_instruction_t *ins;
  gint a, fill, rope, v;
  gfloat f;

  a = test_add_buffer (p, "a", AMK_DTYPE_F32, 16, AMK_BUFFER_ROLE_OUTPUT);
  fill = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { a }, 1, "offset", 3, "count", -7, NULL);
  test_set_float (p, fill, "value", -0.375f);
  rope = test_add (p, 0, AMK_OPCODE_ROPE_KV, (gint[]) { a, a, a, a, a, a }, 6, "head_dim", 64,
                   "shape.n_kv_heads", 2, "original_context", 8192, NULL);
  test_set_float (p, rope, "freq.theta", 500000.0f);
  test_set_float (p, rope, "low_freq_factor", 1.5f);

  g_assert_true (amk_program_get_param_int (p, fill, "offset", &v, &error));
  g_assert_no_error (error);
  g_assert_cmpint (v, ==, 3);
  g_assert_true (amk_program_get_param_int (p, fill, "count", &v, &error));
  g_assert_cmpint (v, ==, -7);
  g_assert_true (amk_program_get_param_float (p, fill, "value", &f, &error));
  g_assert_cmpfloat (f, ==, -0.375f);
  g_assert_true (amk_program_get_param_int (p, rope, "shape.head_dim", &v, &error));
  g_assert_cmpint (v, ==, 64);
  g_assert_true (amk_program_get_param_int (p, rope, "n_kv_heads", &v, &error));
  g_assert_cmpint (v, ==, 2);
  g_assert_true (amk_program_get_param_int (p, rope, "n_q_heads", &v, &error));
  g_assert_cmpint (v, ==, 0); /* never set */
  g_assert_true (amk_program_get_param_int (p, rope, "freq.original_context", &v, &error));
  g_assert_cmpint (v, ==, 8192);
  g_assert_true (amk_program_get_param_float (p, rope, "theta", &f, &error));
  g_assert_cmpfloat (f, ==, 500000.0f);
  g_assert_true (amk_program_get_param_float (p, rope, "freq.low_freq_factor", &f, &error));
  g_assert_cmpfloat (f, ==, 1.5f);
  g_assert_no_error (error);

  /* the named fields are where the ABI structs have them */
  ins = &g_array_index (p->instructions, amk_instruction_t, fill);
  g_assert_cmpint (ins->params.fill.offset, ==, 3);
  g_assert_cmpint (ins->params.fill.count, ==, -7);
  g_assert_cmpfloat (ins->params.fill.value, ==, -0.375f);
  ins = &g_array_index (p->instructions, amk_instruction_t, rope);
  g_assert_cmpint (ins->params.rope_kv.shape.head_dim, ==, 64);
  g_assert_cmpint (ins->params.rope_kv.shape.n_kv_heads, ==, 2);
  g_assert_cmpint (ins->params.rope_kv.freq.original_context, ==, 8192);
  g_assert_cmpfloat (ins->params.rope_kv.freq.theta, ==, 500000.0f);
  g_assert_cmpfloat (ins->params.rope_kv.freq.low_freq_factor, ==, 1.5f);

  /* a name the op lacks: another op's, or none at all */
  g_assert_false (amk_program_set_param_int (p, fill, "rows", 1, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (amk_program_get_param_int (p, fill, "no such", &v, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (amk_program_get_param_float (p, rope, "scale", &f, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);

  /* the wrong type, either way */
  g_assert_false (amk_program_set_param_int (p, fill, "value", 2, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (amk_program_set_param_float (p, fill, "count", 2.0f, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (amk_program_get_param_int (p, rope, "theta", &v, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_false (amk_program_get_param_float (p, rope, "head0", &f, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);

  /* no such instruction */
  g_assert_false (amk_program_get_param_int (p, rope + 1, "count", &v, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  g_assert_false (amk_program_get_param_float (p, G_MAXUINT, "value", &f, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);

  /* the failed calls changed nothing */
  g_assert_true (amk_program_get_param_float (p, fill, "value", &f, NULL));
  g_assert_cmpfloat (f, ==, -0.375f);
  g_assert_true (amk_program_get_param_int (p, fill, "count", &v, NULL));
  g_assert_cmpint (v, ==, -7);
}

static void
test_verified_property (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  guint notified = 0;
  gint a, c, i;

  g_signal_connect (p, "notify::verified", G_CALLBACK (count_notify), &notified);

  g_assert_true (amk_program_verify (p, NULL));
  g_assert_true (amk_program_get_verified (p));
  g_assert_cmpuint (notified, ==, 1);
  g_assert_true (amk_program_verify (p, NULL));
  g_assert_cmpuint (notified, ==, 1);

#define CHANGE_INVALIDATES(stmt) \
  G_STMT_START { \
    g_assert_true (amk_program_verify (p, NULL)); \
    g_assert_true (amk_program_get_verified (p)); \
    notified = 0; \
    stmt; \
    g_assert_false (amk_program_get_verified (p)); \
    g_assert_cmpuint (notified, ==, 1); \
  } G_STMT_END

  CHANGE_INVALIDATES (a = test_add_buffer (p, "a", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_OUTPUT));
  CHANGE_INVALIDATES (c = amk_program_add_counter (p, "c"));
  CHANGE_INVALIDATES (i = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { a }, 1, NULL));
  CHANGE_INVALIDATES (amk_program_set_param_int (p, i, "offset", 1, NULL));
  CHANGE_INVALIDATES (amk_program_set_param_float (p, i, "value", 0.5f, NULL));
  CHANGE_INVALIDATES (test_signal (p, i, c, 1));
  {
    gint j = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
    CHANGE_INVALIDATES (test_wait (p, j, c, 1));
  }
  CHANGE_INVALIDATES (test_add_buffer (p, "s", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_SCRATCH));
#undef CHANGE_INVALIDATES

  /* a failed verification leaves it unverified */
  notified = 0;
  test_wait (p, i, c, 5);
  g_assert_false (amk_program_verify (p, NULL));
  g_assert_false (amk_program_get_verified (p));
}

int
main (int argc, char **argv)
{
  test_init (&argc, &argv);

  g_test_add_func ("/amk/program/new", test_new);
  g_test_add_func ("/amk/program/buffers", test_buffers);
  g_test_add_func ("/amk/program/buffers/scratch-placement", test_scratch_placement);
  g_test_add_func ("/amk/program/buffers/errors", test_add_buffer_errors);
  g_test_add_func ("/amk/program/buffers/data", test_buffer_data);
  g_test_add_func ("/amk/program/counters", test_counters);
  g_test_add_func ("/amk/program/instructions", test_instructions);
  g_test_add_func ("/amk/program/instructions/errors", test_instruction_errors);
  g_test_add_func ("/amk/program/params", test_params);
  g_test_add_func ("/amk/program/verified", test_verified_property);

  return g_test_run ();
}
