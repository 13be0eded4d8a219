/* test-verifier.c: every AmkProgramError the verifier gives, with the message naming the
 * culprit, and the programs it must accept (long chains, random DAGs, big programs fast).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"

#ifdef __linux__
#include <sys/resource.h>
#endif

#define assert_verify_error(p, code) \
  G_STMT_START { \
    GError *e_ = NULL; \
    g_assert_false (amk_program_verify ((p), &e_)); \
    g_assert_error (e_, AMK_PROGRAM_ERROR, (code)); \
    g_test_message ("%s", e_->message); \
    g_assert_false (amk_program_get_verified (p)); \
    g_clear_error (&e_); \
  } G_STMT_END

#define assert_verifies(p) \
  G_STMT_START { \
    GError *e_ = NULL; \
    g_assert_true (amk_program_verify ((p), &e_)); \
    g_assert_no_error (e_); \
    g_assert_true (amk_program_get_verified (p)); \
  } G_STMT_END

/* A program with f32 buffers "a" (in, 16), "b" (out, 16), "h" (f16 out, 16),
 * "k" (constant f32, 16) and two counters. */
static AmkProgram *
base_program (guint num_queues)
{
  AmkProgram *p = amk_program_new (num_queues);

  test_add_buffer (p, "a", AMK_DTYPE_F32, 16, AMK_BUFFER_ROLE_INPUT);
  test_add_buffer (p, "b", AMK_DTYPE_F32, 16, AMK_BUFFER_ROLE_OUTPUT);
  test_add_buffer (p, "h", AMK_DTYPE_F16, 16, AMK_BUFFER_ROLE_OUTPUT);
  test_add_buffer (p, "k", AMK_DTYPE_F32, 16, AMK_BUFFER_ROLE_CONSTANT);
  amk_program_add_counter (p, "ready");
  amk_program_add_counter (p, "done");
  return p;
}

enum { A, B, H, K };

/* ---- INVALID -------------------------------------------------------------------- */

static void
test_invalid_dtype_mismatch (void)
{
  g_autoptr(AmkProgram) p = base_program (1);
  gint i;

  i = test_add (p, 0, AMK_OPCODE_COPY, (gint[]) { H, A }, 2, "count", 4, NULL);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
  amk_program_set_param_int (p, i, "count", 0, NULL); /* even with no elements */
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
  g_clear_object (&p);

  p = base_program (1);
  test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { B, A, H }, 3, "count", 4, NULL);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
  g_clear_object (&p);

  p = base_program (1);
  test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { H, A, A }, 3, "count", 4, NULL);
  {
    GError *error = NULL;
    g_assert_false (amk_program_verify (p, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
    test_assert_message_has (error, "f16");
    test_assert_message_has (error, "f32");
    g_clear_error (&error);
  }
}

static void
test_invalid_write_constant (void)
{
  g_autoptr(AmkProgram) p = base_program (1);
  GError *error = NULL;

  test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { K }, 1, "count", 4, NULL);
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  test_assert_message_has (error, "“k”");
  g_clear_error (&error);
  g_clear_object (&p);

  p = base_program (1);
  test_add (p, 0, AMK_OPCODE_COPY, (gint[]) { K, A }, 2, "count", 4, NULL);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
  g_clear_object (&p);

  p = base_program (1);
  test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { K, A, A }, 3, "count", 4, NULL);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
  g_clear_object (&p);

  /* reading a constant is fine */
  p = base_program (1);
  test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { B, K, K }, 3, "count", 4, NULL);
  test_add (p, 0, AMK_OPCODE_COPY, (gint[]) { A, K }, 2, "count", 16, NULL);
  assert_verifies (p);
}

static void
test_invalid_buffer_count (void)
{
  struct { AmkOpcode op; guint n; } cases[] = {
    { AMK_OPCODE_COPY, 1 }, { AMK_OPCODE_COPY, 3 }, { AMK_OPCODE_COPY, 0 },
    { AMK_OPCODE_FILL, 0 }, { AMK_OPCODE_FILL, 2 },
    { AMK_OPCODE_ADD, 2 }, { AMK_OPCODE_ADD, 4 },
    { AMK_OPCODE_NOP, 1 }, { AMK_OPCODE_TRAP, 1 }, { AMK_OPCODE_GRID_SYNC, 2 },
  };
  const gint bufs[8] = { B, B, B, B, B, B, B, B };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autoptr(AmkProgram) p = base_program (1);
      test_add (p, 0, cases[c].op, bufs, cases[c].n, NULL);
      assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
    }
}

static void
test_invalid_unknown_opcode (void)
{
  const guint opcodes[] = { AMK_ABI_N_OPS, AMK_ABI_N_OPS + 1, 100, 0xffff };

  for (guint i = 0; i < G_N_ELEMENTS (opcodes); i++)
    {
      g_autoptr(AmkProgram) p = base_program (2);
      amk_instruction_t ins = test_raw (opcodes[i]);
      GError *error = NULL;
      g_autofree char *what = g_strdup_printf ("opcode %u", opcodes[i]);

      test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
      test_append_raw (p, 1, &ins);
      g_assert_false (amk_program_verify (p, &error));
      g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
      test_assert_message_has (error, "Queue 1 instruction 1");
      test_assert_message_has (error, what);
      g_clear_error (&error);
    }
}

static void
test_invalid_duplicate_name (void)
{
  g_autoptr(AmkProgram) p = base_program (1);
  g_autoptr(GBytes) bytes = NULL;
  g_autoptr(AmkProgram) loaded = NULL;
  AmkBufferInfo *info;
  GError *error = NULL;
  gint64 n = 4;

  g_assert_cmpint (amk_program_add_buffer (p, "a", AMK_DTYPE_F32, &n, 1, AMK_BUFFER_ROLE_INPUT, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);

  /* an image with two buffers of one name (made by renaming in place) is refused */
  info = g_ptr_array_index (p->buffers, B);
  g_free (info->name);
  info->name = g_strdup ("a");
  bytes = amk_program_serialize (p);
  loaded = amk_program_new_from_bytes (bytes, &error);
  g_assert_null (loaded);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  g_clear_error (&error);
}

static void
test_invalid_reserved_fields (void)
{
  for (guint which = 0; which < 4; which++)
    {
      g_autoptr(AmkProgram) p = base_program (1);
      gint i = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { B }, 1, "count", 4, NULL);
      amk_instruction_t *ins;

      assert_verifies (p);
      ins = test_instruction (p, i);
      switch (which)
        {
        case 0: ins->flags = 1; break;
        case 1: ins->flags = 0x8000; break;
        case 2: ins->reserved = 1; break;
        default: ins->reserved = 0xffff; break;
        }
      assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
    }
}

static void
test_invalid_queue_lists (void)
{
  g_autoptr(AmkProgram) p = base_program (3);
  GError *error = NULL;
  gint i;
  gint32 index;

  /* queued twice */
  test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  i = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  assert_verifies (p);
  index = i;
  g_array_append_val ((GArray *) g_ptr_array_index (p->queues, 2), index);
  p->verified = FALSE;
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
  test_assert_message_has (error, "Instruction 1");
  test_assert_message_has (error, "queue 2");
  g_clear_error (&error);

  /* twice in the same queue */
  g_array_set_size ((GArray *) g_ptr_array_index (p->queues, 2), 0);
  g_array_append_val ((GArray *) g_ptr_array_index (p->queues, 0), index);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
  g_array_set_size ((GArray *) g_ptr_array_index (p->queues, 0), 2);
  assert_verifies (p);

  /* in no queue */
  {
    amk_instruction_t ins = test_raw (AMK_ABI_OP_NOP);
    g_array_append_val (p->instructions, ins);
    p->verified = FALSE;
    g_assert_false (amk_program_verify (p, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID);
    test_assert_message_has (error, "Instruction 2");
    g_clear_error (&error);
    g_array_set_size (p->instructions, 2);
  }
  assert_verifies (p);

  /* a queue list naming an instruction that does not exist */
  index = 2;
  g_array_append_val ((GArray *) g_ptr_array_index (p->queues, 1), index);
  p->verified = FALSE;
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_array_index ((GArray *) g_ptr_array_index (p->queues, 1), gint32, 0) = -1;
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_array_set_size ((GArray *) g_ptr_array_index (p->queues, 1), 0);
  assert_verifies (p);

  /* more queue lists than queues */
  g_ptr_array_add (p->queues, g_array_new (FALSE, FALSE, sizeof (gint32)));
  p->verified = FALSE;
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
  g_ptr_array_set_size (p->queues, 3);
  assert_verifies (p);
}

static void
test_invalid_buffer_data_and_arena (void)
{
  g_autoptr(AmkProgram) p = base_program (1);
  AmkBufferInfo *info;
  gint s;

  /* default contents of the wrong size (only a corrupted struct can have that) */
  info = g_ptr_array_index (p->buffers, A);
  info->data = test_random_bytes (info->size_bytes - 1);
  p->verified = FALSE;
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
  g_clear_pointer (&info->data, g_bytes_unref);
  assert_verifies (p);

  /* a scratch buffer off the arena alignment */
  s = test_add_buffer (p, "s", AMK_DTYPE_F32, 4, AMK_BUFFER_ROLE_SCRATCH);
  info = g_ptr_array_index (p->buffers, s);
  info->arena_offset = 4;
  p->scratch_size = 256;
  p->verified = FALSE;
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID);
  info->arena_offset = 0;
  assert_verifies (p);
}

/* ---- OUT_OF_RANGE --------------------------------------------------------------- */

static void
test_range_copy (void)
{
  /* { dst offset, src offset, count } against 16-element buffers */
  const gint bad[][3] = {
    { 0, 0, 17 }, { 1, 0, 16 }, { 0, 1, 16 }, { 15, 0, 2 }, { 0, 15, 2 }, { 16, 0, 1 },
    { -1, 0, 1 }, { 0, -1, 1 }, { 0, 0, -1 }, { G_MAXINT32, 0, 1 }, { 0, G_MAXINT32, G_MAXINT32 },
    { G_MININT32, 0, 1 }, { 8, 8, G_MAXINT32 }, { 1, 1, G_MININT32 },
  };
  const gint good[][3] = { { 0, 0, 16 }, { 15, 0, 1 }, { 0, 15, 1 }, { 16, 16, 0 }, { 3, 7, 9 } };

  for (guint c = 0; c < G_N_ELEMENTS (bad); c++)
    {
      g_autoptr(AmkProgram) p = base_program (1);
      test_add (p, 0, AMK_OPCODE_COPY, (gint[]) { B, A }, 2, "dst_offset", bad[c][0],
                "src_offset", bad[c][1], "count", bad[c][2], NULL);
      assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
    }
  for (guint c = 0; c < G_N_ELEMENTS (good); c++)
    {
      g_autoptr(AmkProgram) p = base_program (1);
      test_add (p, 0, AMK_OPCODE_COPY, (gint[]) { B, A }, 2, "dst_offset", good[c][0],
                "src_offset", good[c][1], "count", good[c][2], NULL);
      assert_verifies (p);
    }
}

static void
test_range_fill_add (void)
{
  const gint fill_bad[][2] = { { 0, 17 }, { -1, 2 }, { 4, -1 }, { 16, 1 }, { G_MAXINT32, G_MAXINT32 } };
  const gint add_bad[][4] = {
    { 0, 0, 0, 17 }, { 1, 0, 0, 16 }, { 0, 1, 0, 16 }, { 0, 0, 1, 16 },
    { -4, 0, 0, 1 }, { 0, -4, 0, 1 }, { 0, 0, -4, 1 }, { 0, 0, 0, -4 },
  };

  for (guint c = 0; c < G_N_ELEMENTS (fill_bad); c++)
    {
      g_autoptr(AmkProgram) p = base_program (1);
      test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { B }, 1, "offset", fill_bad[c][0],
                "count", fill_bad[c][1], NULL);
      assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
    }
  for (guint c = 0; c < G_N_ELEMENTS (add_bad); c++)
    {
      g_autoptr(AmkProgram) p = base_program (1);
      test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { B, A, A }, 3, "dst_offset", add_bad[c][0],
                "a_offset", add_bad[c][1], "b_offset", add_bad[c][2], "count", add_bad[c][3], NULL);
      assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
    }
  {
    g_autoptr(AmkProgram) p = base_program (1);
    GError *error = NULL;
    test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
    test_add (p, 0, AMK_OPCODE_ADD, (gint[]) { B, A, A }, 3, "b_offset", 10, "count", 7, NULL);
    g_assert_false (amk_program_verify (p, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
    test_assert_message_has (error, "Queue 0 instruction 1 (ADD)");
    test_assert_message_has (error, "“a”");
    g_clear_error (&error);
  }
}

static void
test_range_counters (void)
{
  const gint32 bad_counters[] = { 2, 3, 1000, -2, G_MININT32, G_MAXINT32 };

  for (guint c = 0; c < G_N_ELEMENTS (bad_counters); c++)
    {
      g_autoptr(AmkProgram) p = base_program (1);
      amk_instruction_t ins = test_raw (AMK_ABI_OP_NOP);
      GError *error = NULL;

      ins.n_waits = 1;
      ins.waits[0].counter = bad_counters[c];
      ins.waits[0].target = 0;
      test_append_raw (p, 0, &ins);
      g_assert_false (amk_program_verify (p, &error));
      g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
      test_assert_message_has (error, "waits on counter");
      g_clear_error (&error);

      ins = test_raw (AMK_ABI_OP_NOP);
      ins.signal.counter = bad_counters[c];
      ins.signal.amount = 1;
      g_array_index (p->instructions, amk_instruction_t, 0) = ins;
      g_assert_false (amk_program_verify (p, &error));
      g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
      test_assert_message_has (error, "signals counter");
      g_clear_error (&error);
    }

  /* a wait beyond n_waits is ignored; too many waits is out of range */
  {
    g_autoptr(AmkProgram) p = base_program (1);
    amk_instruction_t ins = test_raw (AMK_ABI_OP_NOP);
    ins.n_waits = 1;
    ins.waits[1].counter = 99;
    test_append_raw (p, 0, &ins);
    assert_verifies (p);
    test_instruction (p, 0)->n_waits = AMK_MAX_WAITS + 1;
    assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
    test_instruction (p, 0)->n_waits = 255;
    assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  }
}

static void
test_range_buffers (void)
{
  const gint32 bad[] = { 4, 5, -2, -1, G_MAXINT32, G_MININT32 };

  for (guint c = 0; c < G_N_ELEMENTS (bad); c++)
    {
      g_autoptr(AmkProgram) p = base_program (1);
      amk_instruction_t ins = test_raw (AMK_ABI_OP_FILL);
      GError *error = NULL;

      ins.n_buffers = 1;
      ins.buffers[0] = bad[c];
      ins.params.fill.count = 1;
      test_append_raw (p, 0, &ins);
      g_assert_false (amk_program_verify (p, &error));
      g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
      test_assert_message_has (error, "uses buffer");
      g_clear_error (&error);
    }
  {
    g_autoptr(AmkProgram) p = base_program (1);
    amk_instruction_t ins = test_raw (AMK_ABI_OP_NOP);
    ins.n_buffers = AMK_MAX_BUFFER_REFS + 1;
    test_append_raw (p, 0, &ins);
    assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  }
}

static void
test_range_queue (void)
{
  g_autoptr(AmkProgram) p = base_program (4);
  GError *error = NULL;

  g_assert_cmpint (amk_program_add_instruction (p, 4, AMK_OPCODE_NOP, NULL, 0, &error), ==, -1);
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  g_clear_error (&error);
  test_add (p, 3, AMK_OPCODE_NOP, NULL, 0, NULL);
  assert_verifies (p);
}

static void
test_range_counter_overflow (void)
{
  g_autoptr(AmkProgram) p = base_program (2);
  GError *error = NULL;
  gint i, j;

  /* exactly G_MAXUINT32 in total is fine */
  i = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  j = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_signal (p, i, 1, G_MAXUINT32 - 5);
  test_signal (p, j, 1, 5);
  assert_verifies (p);
  test_signal (p, j, 1, 6);
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  test_assert_message_has (error, "“done”");
  g_clear_error (&error);

  /* many small signals adding up */
  g_clear_object (&p);
  p = base_program (3);
  for (guint k = 0; k < 5; k++)
    {
      i = test_add (p, k % 3, AMK_OPCODE_NOP, NULL, 0, NULL);
      test_signal (p, i, 0, G_MAXUINT32 / 4);
    }
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
}

static void
test_range_scratch_overflow (void)
{
  g_autoptr(AmkProgram) p = base_program (1);
  GError *error = NULL;
  gint s0, s1;

  s0 = test_add_buffer (p, "s0", AMK_DTYPE_F32, 100, AMK_BUFFER_ROLE_SCRATCH);
  s1 = test_add_buffer (p, "s1", AMK_DTYPE_F32, 10, AMK_BUFFER_ROLE_SCRATCH);
  test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { s1 }, 1, "count", 10, NULL);
  g_assert_cmpuint (amk_program_get_scratch_size (p), ==, 512 + 40);
  assert_verifies (p);

  p->scratch_size = 512 + 39;   /* what amk_program_set_scratch_size would do */
  p->verified = FALSE;
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  test_assert_message_has (error, "“s1”");
  g_clear_error (&error);

  p->scratch_size = 300;        /* s1 starts after the end */
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  p->scratch_size = 0;
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  /* offset + size wraps around 2^64: the check must not overflow */
  ((AmkBufferInfo *) g_ptr_array_index (p->buffers, s1))->arena_offset = G_MAXUINT64 - 255;
  p->scratch_size = G_MAXUINT64 - 255 + 20;
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE);
  (void) s0;
}

/* ---- DEADLOCK ------------------------------------------------------------------- */

static void
test_deadlock_cycle (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  gint c0 = amk_program_add_counter (p, "ping");
  gint c1 = amk_program_add_counter (p, "pong");
  GError *error = NULL;
  gint i, j;

  i = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  j = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_wait (p, i, c1, 1);
  test_signal (p, i, c0, 1);
  test_wait (p, j, c0, 1);
  test_signal (p, j, c1, 1);
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK);
  test_assert_message_has (error, "Deadlock");
  g_clear_error (&error);

  /* breaking the cycle makes it sound */
  test_instruction (p, i)->n_waits = 0;
  assert_verifies (p);
}

/* Verify's memory grows by a few bytes a counter: a queue parks on one counter at a
 * time, so the parked queues need no list per counter (one was about 64 bytes a counter,
 * 1.27 GB for a 64 MB image of 16 M counters). Measured as the growth of the process's
 * peak resident size, where the system reports it. */
static void
test_deadlock_memory_per_counter (void)
{
#if defined(__SANITIZE_ADDRESS__)
  g_test_skip ("AddressSanitizer's shadow memory and quarantine swamp the peak resident size");
#elif defined(__linux__)
  const guint n = 4u << 20;
  g_autoptr(AmkProgram) p = amk_program_new (2);
  struct rusage before, after;
  gint last = -1, i;

  for (guint c = 0; c < n; c++)
    last = amk_program_add_counter (p, NULL);
  i = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_wait (p, i, last, 1);
  i = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_signal (p, i, last, 1);
  g_assert_cmpint (getrusage (RUSAGE_SELF, &before), ==, 0);
  assert_verifies (p);
  g_assert_cmpint (getrusage (RUSAGE_SELF, &after), ==, 0);
  /* ru_maxrss is in KiB: at most 20 bytes a counter above the peak before */
  g_assert_cmpint ((after.ru_maxrss - before.ru_maxrss) * 1024, <=, 20 * (glong) n);
#else
  g_test_skip ("the peak resident size is read on Linux only");
#endif
}

static void
test_deadlock_nobody_signals (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (3);
  gint c0 = amk_program_add_counter (p, "used");
  gint c1 = amk_program_add_counter (p, "forgotten");
  GError *error = NULL;
  gint i;

  i = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_signal (p, i, c0, 1);
  test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
  i = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_wait (p, i, c0, 1);
  i = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_wait (p, i, c0, 1);
  test_wait (p, i, c1, 1);
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK);
  test_assert_message_has (error, "queue 1");
  test_assert_message_has (error, "instruction 2");
  test_assert_message_has (error, "counter 1");
  test_assert_message_has (error, "“forgotten”");
  test_assert_message_has (error, "reach 1");
  g_clear_error (&error);
}

static void
test_deadlock_target_too_large (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (4);
  gint c = amk_program_add_counter (p, "sum");
  GError *error = NULL;
  gint i;

  for (guint q = 0; q < 3; q++)
    {
      i = test_add (p, q, AMK_OPCODE_NOP, NULL, 0, NULL);
      test_signal (p, i, c, 2);
    }
  i = test_add (p, 3, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_wait (p, i, c, 6);
  assert_verifies (p);
  test_instruction (p, i)->waits[0].target = 7;
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK);
  test_assert_message_has (error, "queue 3");
  test_assert_message_has (error, "reach 7");
  test_assert_message_has (error, "only to 6");
  g_clear_error (&error);
}

static void
test_deadlock_own_queue (void)
{
  /* an instruction waiting on what a later instruction of its own queue signals */
  g_autoptr(AmkProgram) p = amk_program_new (2);
  gint c = amk_program_add_counter (p, NULL);
  GError *error = NULL;
  gint i, j;

  i = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  j = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
  test_wait (p, i, c, 1);
  test_signal (p, j, c, 1);
  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK);
  test_assert_message_has (error, "queue 0");
  test_assert_message_has (error, "instruction 0");
  test_assert_message_has (error, "counter 0");
  g_clear_error (&error);
}

static void
test_deadlock_grid_sync (void)
{
  /* one queue lacks the GRID_SYNC */
  {
    g_autoptr(AmkProgram) p = amk_program_new (3);
    GError *error = NULL;

    test_add (p, 0, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    test_add (p, 1, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    test_add (p, 2, AMK_OPCODE_NOP, NULL, 0, NULL);
    g_assert_false (amk_program_verify (p, &error));
    g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_DEADLOCK);
    test_assert_message_has (error, "GRID_SYNC");
    test_assert_message_has (error, "queue 2");
    g_clear_error (&error);
    test_add (p, 2, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    assert_verifies (p);
    /* different numbers of barriers */
    test_add (p, 0, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    test_add (p, 1, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    assert_verify_error (p, AMK_PROGRAM_ERROR_DEADLOCK);
  }
  /* a wait across a barrier: queue 1 waits before the barrier on what queue 0 signals after */
  {
    g_autoptr(AmkProgram) p = amk_program_new (2);
    gint c = amk_program_add_counter (p, "after");
    gint i;

    test_add (p, 0, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    i = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
    test_signal (p, i, c, 1);
    i = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
    test_wait (p, i, c, 1);
    test_add (p, 1, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    assert_verify_error (p, AMK_PROGRAM_ERROR_DEADLOCK);
  }
  /* the same the right way round is fine; a GRID_SYNC with a wait and a signal too */
  {
    g_autoptr(AmkProgram) p = amk_program_new (2);
    gint c = amk_program_add_counter (p, "before");
    gint d = amk_program_add_counter (p, "sync");
    gint i;

    i = test_add (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
    test_signal (p, i, c, 1);
    i = test_add (p, 0, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    test_signal (p, i, d, 1);
    i = test_add (p, 1, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
    test_wait (p, i, c, 1);
    test_signal (p, i, d, 1);
    i = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
    test_wait (p, i, d, 2);
    assert_verifies (p);
  }
}

/* ---- sound programs ------------------------------------------------------------- */

static void
test_sound_chain_64 (void)
{
  /* a token passes through 64 queues 50 times: instruction k waits for k signals */
  g_autoptr(AmkProgram) p = amk_program_new (64);
  gint c = amk_program_add_counter (p, "token");
  gint step = amk_program_add_counter (p, "step");
  const guint n = 64 * 50;

  for (guint k = 0; k < n; k++)
    {
      gint i = test_add (p, k % 64, AMK_OPCODE_NOP, NULL, 0, NULL);
      test_wait (p, i, c, k);
      test_signal (p, i, c, 1);
      /* a second, independent chain the other way round */
      i = test_add (p, 63 - k % 64, AMK_OPCODE_NOP, NULL, 0, NULL);
      test_wait (p, i, step, k);
      test_signal (p, i, step, 1);
    }
  assert_verifies (p);

  /* the last one waiting for one more makes it stall */
  test_instruction (p, 2 * n - 2)->waits[0].target = n;
  assert_verify_error (p, AMK_PROGRAM_ERROR_DEADLOCK);
}

/* A random DAG: instruction k goes to a random queue, after every earlier instruction of
 * that queue, and waits on the counters of up to four random earlier instructions. Every
 * such program is sound. */
static AmkProgram *
random_dag (guint n_queues, guint n, gboolean shared_counters)
{
  AmkProgram *p = amk_program_new (n_queues);
  g_autofree guint *signals = g_new0 (guint, n);   /* per-instruction counter's total */
  guint n_counters = shared_counters ? MAX (n / 16, 1) : n;

  for (guint c = 0; c < n_counters; c++)
    amk_program_add_counter (p, NULL);
  for (guint k = 0; k < n; k++)
    {
      guint q = g_test_rand_int_range (0, n_queues);
      gint i = test_add (p, q, AMK_OPCODE_NOP, NULL, 0, NULL);
      guint n_waits = k == 0 ? 0 : g_test_rand_int_range (0, AMK_MAX_WAITS + 1);
      guint counter = shared_counters ? k % n_counters : k;

      for (guint w = 0; w < n_waits; w++)
        {
          /* wait for what an earlier instruction's counter has reached by then */
          guint earlier = g_test_rand_int_range (0, k);
          guint ec = shared_counters ? earlier % n_counters : earlier;
          test_wait (p, i, ec, signals[ec]);
        }
      if (g_test_rand_bit () || !shared_counters)
        {
          guint amount = g_test_rand_int_range (1, 4);
          test_signal (p, i, counter, amount);
          signals[counter] += amount;
        }
    }
  return p;
}

static void
test_sound_random_dags (void)
{
  for (guint round = 0; round < 20; round++)
    {
      guint n_queues = g_test_rand_int_range (1, 140);
      guint n = g_test_rand_int_range (1000, 5000);
      g_autoptr(AmkProgram) p = random_dag (n_queues, n, round % 2);

      assert_verifies (p);
    }
}

static void
test_random_dag_back_edge (void)
{
  /* a random DAG with one wait for more than the whole program ever signals, or on a
   * later instruction of the same queue, deadlocks */
  for (guint round = 0; round < 10; round++)
    {
      g_autoptr(AmkProgram) p = random_dag (g_test_rand_int_range (2, 64), 2000, FALSE);
      guint victim = g_test_rand_int_range (0, 2000);
      amk_instruction_t *ins = test_instruction (p, victim);
      guint c = amk_program_add_counter (p, "never");

      if (ins->n_waits == AMK_MAX_WAITS)
        ins->n_waits--;
      ins->waits[ins->n_waits].counter = c;
      ins->waits[ins->n_waits].target = 1;
      ins->n_waits++;
      assert_verify_error (p, AMK_PROGRAM_ERROR_DEADLOCK);
    }
}

static void
test_sound_big_fast (void)
{
  /* 100k instructions over 132 queues, every instruction waiting on up to four others */
  g_autoptr(AmkProgram) p = random_dag (132, 100000, FALSE);
  g_autoptr(AmkProgram) q = amk_program_new (132);
  GError *error = NULL;
  gint64 start, elapsed;
  gint c;

  start = g_get_monotonic_time ();
  g_assert_true (amk_program_verify (p, &error));
  elapsed = g_get_monotonic_time () - start;
  g_assert_no_error (error);
  g_test_message ("random DAG: 100000 instructions over 132 queues verified in %.1f ms",
                  elapsed / 1000.0);
  if (!test_slow_environment ())
    g_assert_cmpint (elapsed, <, G_USEC_PER_SEC);

  /* the worst case of the parking: 131 queues wait on one counter that one queue
   * bumps 100000 times, one at a time */
  c = amk_program_add_counter (q, "slow");
  for (guint k = 0; k < 100000 - 131; k++)
    {
      gint i = test_add (q, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
      test_signal (q, i, c, 1);
    }
  for (guint r = 1; r < 132; r++)
    {
      gint i = test_add (q, r, AMK_OPCODE_NOP, NULL, 0, NULL);
      test_wait (q, i, c, 100000 - 131);
    }
  start = g_get_monotonic_time ();
  g_assert_true (amk_program_verify (q, &error));
  elapsed = g_get_monotonic_time () - start;
  g_assert_no_error (error);
  g_test_message ("one counter, 131 parked queues: verified in %.1f ms", elapsed / 1000.0);
  if (!test_slow_environment ())
    g_assert_cmpint (elapsed, <, G_USEC_PER_SEC);
}

/* ---- RACE ------------------------------------------------------------------------ */

static void
assert_race (AmkProgram *p, const char *const *needles)
{
  GError *error = NULL;

  g_assert_false (amk_program_verify (p, &error));
  g_assert_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_RACE);
  g_test_message ("%s", error->message);
  for (guint k = 0; needles[k] != NULL; k++)
    test_assert_message_has (error, needles[k]);
  g_clear_error (&error);
}

/* Two writes of one buffer, unordered; then ordered by a counter; then disjoint. */
static void
test_race_write_write (void)
{
  for (guint variant = 0; variant < 3; variant++)
    {
      g_autoptr(AmkProgram) p = amk_program_new (2);
      gint x = test_add_buffer (p, "x", AMK_DTYPE_F32, 16, AMK_BUFFER_ROLE_OUTPUT);
      gint c = amk_program_add_counter (p, "done");
      gint a = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { x }, 1, "count", 8, NULL);
      gint b = test_add (p, 1, AMK_OPCODE_FILL, (gint[]) { x }, 1, "count", 8,
                         "offset", variant == 2 ? 8 : 4, NULL);

      test_signal (p, a, c, 1);
      if (variant == 1)
        test_wait (p, b, c, 1);
      if (variant == 0)
        assert_race (p, (const char *[]) { "queue 0 instruction 0 (FILL)", "queue 1 instruction 0 (FILL)",
                                           "buffer 0 “x”", "bytes 16 to 32", NULL });
      else
        assert_verifies (p);
    }
}

/* A read of x, unordered with the write that feeds it; ordered through a third queue
 * (transitively); and a counter that another signal can satisfy orders nothing. */
static void
test_race_read_write (void)
{
  for (guint variant = 0; variant < 3; variant++)
    {
      g_autoptr(AmkProgram) p = amk_program_new (3);
      gint x = test_add_buffer (p, "x", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_STATE);
      gint y = test_add_buffer (p, "y", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_OUTPUT);
      gint c0 = amk_program_add_counter (p, "written"), c1 = amk_program_add_counter (p, "relayed");
      gint w = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { x }, 1, "count", 8, NULL);
      gint relay = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
      gint r = test_add (p, 2, AMK_OPCODE_COPY, (gint[]) { y, x }, 2, "count", 8, NULL);

      test_signal (p, w, c0, 1);
      test_wait (p, relay, c0, 1);
      test_signal (p, relay, c1, 1);
      if (variant == 1)
        test_wait (p, r, c1, 1);
      if (variant == 2)
        {
          /* c0 gets a second signal from queue 1: reaching 1 no longer needs the FILL */
          gint other = test_add (p, 1, AMK_OPCODE_NOP, NULL, 0, NULL);
          test_instruction (p, relay)->n_waits = 0;
          test_signal (p, relay, c1, 0);
          test_signal (p, other, c0, 1);
          test_wait (p, r, c0, 1);
        }
      if (variant == 1)
        assert_verifies (p);
      else
        assert_race (p, (const char *[]) { "queue 0 instruction 0 (FILL)", "queue 2 instruction 0 (COPY)",
                                           "“x”", NULL });
    }
}

/* Two scratch buffers placed on the same arena bytes, both live at once. */
static void
test_race_arena (void)
{
  for (guint variant = 0; variant < 2; variant++)
    {
      g_autoptr(AmkProgram) p = amk_program_new (2);
      gint s0 = test_add_buffer (p, "s0", AMK_DTYPE_F32, 64, AMK_BUFFER_ROLE_SCRATCH);
      gint s1 = test_add_buffer (p, "s1", AMK_DTYPE_F32, 64, AMK_BUFFER_ROLE_SCRATCH);
      gint c = amk_program_add_counter (p, NULL);
      gint a = test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { s0 }, 1, "count", 64, NULL);
      gint b = test_add (p, 1, AMK_OPCODE_FILL, (gint[]) { s1 }, 1, "count", 64, NULL);

      ((AmkBufferInfo *) g_ptr_array_index (p->buffers, s0))->arena_offset = 0;
      ((AmkBufferInfo *) g_ptr_array_index (p->buffers, s1))->arena_offset = 0;
      p->scratch_size = 256;
      test_signal (p, a, c, 1);
      if (variant == 1)
        test_wait (p, b, c, 1);
      if (variant == 0)
        assert_race (p, (const char *[]) { "scratch buffer 0 “s0”", "scratch buffer 1 “s1”",
                                           "arena bytes 0 to 256", NULL });
      else
        assert_verifies (p);
    }
}

/* Split-K's atomic adds of one row may run in any order; a plain write of that row
 * among them is a race. */
static void
test_race_split_k (void)
{
  for (guint variant = 0; variant < 2; variant++)
    {
      g_autoptr(AmkProgram) p = amk_program_new (4);
      gint w = test_add_buffer (p, "w", AMK_DTYPE_F32, 12, AMK_BUFFER_ROLE_CONSTANT);
      gint x = test_add_buffer (p, "x", AMK_DTYPE_F32, 12, AMK_BUFFER_ROLE_CONSTANT);
      gint y = test_add_buffer (p, "y", AMK_DTYPE_F32, 1, AMK_BUFFER_ROLE_STATE);

      for (guint q = 0; q < 3; q++)
        test_add (p, q, AMK_OPCODE_MATVEC, (gint[]) { y, w, x, -1, y, -1 }, 6,
                  "row0", 0, "rows", 1, "k", 12, "k0", 4 * q, "k_len", 4, NULL);
      if (variant == 1)
        test_add (p, 3, AMK_OPCODE_FILL, (gint[]) { y }, 1, "count", 1, NULL);
      if (variant == 0)
        assert_verifies (p);
      else
        assert_race (p, (const char *[]) { "(MATVEC)", "queue 3 instruction 0 (FILL)", NULL });
    }
}

/* A GRID_SYNC orders everything before it before everything after it. */
static void
test_race_grid_sync (void)
{
  g_autoptr(AmkProgram) p = amk_program_new (2);
  gint x = test_add_buffer (p, "x", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_STATE);
  gint y = test_add_buffer (p, "y", AMK_DTYPE_F32, 8, AMK_BUFFER_ROLE_OUTPUT);

  test_add (p, 0, AMK_OPCODE_FILL, (gint[]) { x }, 1, "count", 8, NULL);
  test_add (p, 0, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
  test_add (p, 1, AMK_OPCODE_GRID_SYNC, NULL, 0, NULL);
  test_add (p, 1, AMK_OPCODE_COPY, (gint[]) { y, x }, 2, "count", 8, NULL);
  assert_verifies (p);
}

int
main (int argc, char **argv)
{
  test_init (&argc, &argv);

  g_test_add_func ("/amk/verifier/invalid/dtype-mismatch", test_invalid_dtype_mismatch);
  g_test_add_func ("/amk/verifier/invalid/write-constant", test_invalid_write_constant);
  g_test_add_func ("/amk/verifier/invalid/buffer-count", test_invalid_buffer_count);
  g_test_add_func ("/amk/verifier/invalid/unknown-opcode", test_invalid_unknown_opcode);
  g_test_add_func ("/amk/verifier/invalid/duplicate-name", test_invalid_duplicate_name);
  g_test_add_func ("/amk/verifier/invalid/reserved-fields", test_invalid_reserved_fields);
  g_test_add_func ("/amk/verifier/invalid/queue-lists", test_invalid_queue_lists);
  g_test_add_func ("/amk/verifier/invalid/data-and-arena", test_invalid_buffer_data_and_arena);
  g_test_add_func ("/amk/verifier/out-of-range/copy", test_range_copy);
  g_test_add_func ("/amk/verifier/out-of-range/fill-add", test_range_fill_add);
  g_test_add_func ("/amk/verifier/out-of-range/counters", test_range_counters);
  g_test_add_func ("/amk/verifier/out-of-range/buffers", test_range_buffers);
  g_test_add_func ("/amk/verifier/out-of-range/queue", test_range_queue);
  g_test_add_func ("/amk/verifier/out-of-range/counter-overflow", test_range_counter_overflow);
  g_test_add_func ("/amk/verifier/out-of-range/scratch-overflow", test_range_scratch_overflow);
  g_test_add_func ("/amk/verifier/deadlock/cycle", test_deadlock_cycle);
  g_test_add_func ("/amk/verifier/deadlock/nobody-signals", test_deadlock_nobody_signals);
  g_test_add_func ("/amk/verifier/deadlock/target-too-large", test_deadlock_target_too_large);
  g_test_add_func ("/amk/verifier/deadlock/own-queue", test_deadlock_own_queue);
  g_test_add_func ("/amk/verifier/deadlock/grid-sync", test_deadlock_grid_sync);
  g_test_add_func ("/amk/verifier/deadlock/memory-per-counter", test_deadlock_memory_per_counter);
  g_test_add_func ("/amk/verifier/deadlock/random-dag-stuck", test_random_dag_back_edge);
  g_test_add_func ("/amk/verifier/sound/chain-64-queues", test_sound_chain_64);
  g_test_add_func ("/amk/verifier/sound/random-dags", test_sound_random_dags);
  g_test_add_func ("/amk/verifier/sound/100k-instructions-fast", test_sound_big_fast);
  g_test_add_func ("/amk/verifier/race/write-write", test_race_write_write);
  g_test_add_func ("/amk/verifier/race/read-write", test_race_read_write);
  g_test_add_func ("/amk/verifier/race/arena", test_race_arena);
  g_test_add_func ("/amk/verifier/race/split-k", test_race_split_k);
  g_test_add_func ("/amk/verifier/race/grid-sync", test_race_grid_sync);

  return g_test_run ();
}
