/* test-matmul.c: every AmkProgramError of MATMUL, from the op API and from the verifier
 * (raw instructions), with the message naming the culprit; the results themselves are
 * checked against numpy in tests/python/test_matmul.py.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "amk-test-common.h"

#define M 3
#define N 6
#define K 16

static gint
add_2d (AmkProgram *p, const char *name, AmkDType dtype, gint64 rows, gint64 cols,
        AmkBufferRole role)
{
  g_autoptr(GError) error = NULL;
  const gint64 shape[2] = { rows, cols };
  gint index = amk_program_add_buffer (p, name, dtype, shape, 2, role, &error);

  g_assert_no_error (error);
  return index;
}

/* Buffers of a 3 × 16 by 6 × 16 product and its wrong variants. */
enum { Y, W, X, BIAS, NORM, W32, W12, W1D, X_ODD, Y_SMALL, WC, XH, N_BUFFERS };

static AmkProgram *
matmul_program (void)
{
  AmkProgram *p = amk_program_new (2);

  g_assert_cmpint (add_2d (p, "y", AMK_DTYPE_F32, M, N, AMK_BUFFER_ROLE_OUTPUT), ==, Y);
  g_assert_cmpint (add_2d (p, "w", AMK_DTYPE_BF16, N, K, AMK_BUFFER_ROLE_CONSTANT), ==, W);
  g_assert_cmpint (add_2d (p, "x", AMK_DTYPE_F32, M, K, AMK_BUFFER_ROLE_INPUT), ==, X);
  test_add_buffer (p, "bias", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_INPUT);
  test_add_buffer (p, "norm", AMK_DTYPE_BF16, K, AMK_BUFFER_ROLE_CONSTANT);
  add_2d (p, "w32", AMK_DTYPE_F32, N, K, AMK_BUFFER_ROLE_CONSTANT);
  add_2d (p, "w12", AMK_DTYPE_BF16, N, 12, AMK_BUFFER_ROLE_CONSTANT);
  test_add_buffer (p, "w1d", AMK_DTYPE_BF16, N * K, AMK_BUFFER_ROLE_CONSTANT);
  test_add_buffer (p, "x_odd", AMK_DTYPE_F32, 40, AMK_BUFFER_ROLE_INPUT);
  test_add_buffer (p, "y_small", AMK_DTYPE_F32, N, AMK_BUFFER_ROLE_OUTPUT);
  g_assert_cmpint (add_2d (p, "wc", AMK_DTYPE_F32, M, N, AMK_BUFFER_ROLE_CONSTANT), ==, WC);
  test_add_buffer (p, "xh", AMK_DTYPE_F16, M * K, AMK_BUFFER_ROLE_INPUT);
  return p;
}

#define assert_op_error(call, code, culprit) \
  G_STMT_START { \
    g_autoptr(GError) e_ = NULL; \
    g_assert_cmpint ((call), ==, -1); \
    g_assert_error (e_, AMK_PROGRAM_ERROR, (code)); \
    g_test_message ("%s", e_->message); \
    g_assert_nonnull (strstr (e_->message, "MATMUL")); \
    g_assert_nonnull (strstr (e_->message, (culprit))); \
  } G_STMT_END

static void
test_op_errors (void)
{
  g_autoptr(AmkProgram) p = matmul_program ();
  g_autoptr(GError) error = NULL;

  assert_op_error (amk_program_op_matmul (p, Y, W32, X, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "16-bit");
  assert_op_error (amk_program_op_matmul (p, Y, W1D, X, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "w1d");
  assert_op_error (amk_program_op_matmul (p, Y, W12, X, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "multiple of 8");
  assert_op_error (amk_program_op_matmul (p, Y, W, X_ODD, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "x_odd");
  assert_op_error (amk_program_op_matmul (p, Y, W, XH, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "xh");
  assert_op_error (amk_program_op_matmul (p, Y_SMALL, W, X, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "y_small");
  assert_op_error (amk_program_op_matmul (p, Y, W, X, X, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "bias");
  assert_op_error (amk_program_op_matmul (p, Y, W, X, -1, BIAS, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "residual");
  assert_op_error (amk_program_op_matmul (p, Y, W, X, -1, -1, BIAS, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "norm");
  assert_op_error (amk_program_op_matmul (p, WC, W, X, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "constant");
  assert_op_error (amk_program_op_matmul (p, Y, W, X, -1, -1, NORM, -1.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "epsilon");
  /* the device checks eps without a norm too */
  assert_op_error (amk_program_op_matmul (p, Y, W, X, -1, -1, -1, NAN, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "epsilon");
  assert_op_error (amk_program_op_matmul (p, Y, W, X, -1, -1, -1, INFINITY, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "epsilon");
  assert_op_error (amk_program_op_matmul (p, Y, W, X, -1, -1, -1, -1e-6f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "epsilon");
  assert_op_error (amk_program_op_matmul (p, Y, W, X, -1, -1, N_BUFFERS, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_OUT_OF_RANGE, "norm");
  assert_op_error (amk_program_op_matmul (p, N_BUFFERS, W, X, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_OUT_OF_RANGE, "output");
  g_assert_cmpuint (amk_program_get_n_ops (p), ==, 0);

  /* Y += W X with everything fused records; once compiled, nothing more does */
  g_assert_cmpint (amk_program_op_matmul (p, Y, W, X, BIAS, Y, NORM, 1e-5f, &error), ==, 0);
  g_assert_no_error (error);
  g_assert_true (amk_program_compile (p, &error));
  g_assert_no_error (error);
  assert_op_error (amk_program_op_matmul (p, Y, W, X, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_INVALID, "compiled");
}

/* ---- the verifier, on raw instructions ------------------------------------------ */

#define assert_verify_error(p, code, culprit) \
  G_STMT_START { \
    g_autoptr(GError) e_ = NULL; \
    g_assert_false (amk_program_verify ((p), &e_)); \
    g_assert_error (e_, AMK_PROGRAM_ERROR, (code)); \
    g_test_message ("%s", e_->message); \
    g_assert_nonnull (strstr (e_->message, (culprit))); \
  } G_STMT_END

/* A program with one raw MATMUL tile, rows 1 + 2 and columns 2 + 4 of y = x w^T, with
 * buffers `b` (y, W, x, bias, residual, norm). */
static AmkProgram *
raw_tile (const gint b[6], gint *index)
{
  AmkProgram *p = matmul_program ();

  *index = test_add (p, 0, AMK_OPCODE_MATMUL, b, 6, "m0", 1, "m_count", 2, "n0", 2,
                     "n_count", 4, "k", K, NULL);
  return p;
}

static void
test_verify_accepts (void)
{
  gint i;
  g_autoptr(AmkProgram) p = raw_tile ((gint[]) { Y, W, X, BIAS, Y, NORM }, &i);
  g_autoptr(GError) error = NULL;

  test_set_float (p, i, "eps", 1e-5f);
  g_assert_true (amk_program_verify (p, &error));
  g_assert_no_error (error);
}

static void
test_verify_ranges (void)
{
  const struct { const char *param; gint value; } cases[] = {
    { "m0", -1 }, { "m0", 2 }, { "m_count", 0 }, { "m_count", 3 },
    { "n0", -1 }, { "n0", 3 }, { "n_count", 0 }, { "n_count", 5 },
  };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      gint i;
      g_autoptr(AmkProgram) p = raw_tile ((gint[]) { Y, W, X, -1, -1, -1 }, &i);

      g_assert_true (amk_program_set_param_int (p, i, cases[c].param, cases[c].value, NULL));
      assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE, "out of range of M = 3 and N = 6");
    }
}

static void
test_verify_invalid (void)
{
  gint i;
  AmkProgram *p;

  /* K not a multiple of 8, or not W's row length */
  p = raw_tile ((gint[]) { Y, W, X, -1, -1, -1 }, &i);
  amk_program_set_param_int (p, i, "k", 12, NULL);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, "multiple of 8");
  amk_program_set_param_int (p, i, "k", 8, NULL);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, "rows of K = 8");
  g_object_unref (p);

  /* f32 weights, a 1-D matrix, input rows not a multiple of K or f16 */
  p = raw_tile ((gint[]) { Y, W32, X, -1, -1, -1 }, &i);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, "cannot be f32");
  g_object_unref (p);
  p = raw_tile ((gint[]) { Y, W1D, X, -1, -1, -1 }, &i);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, "w1d");
  g_object_unref (p);
  p = raw_tile ((gint[]) { Y, W, X_ODD, -1, -1, -1 }, &i);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, "x_odd");
  g_object_unref (p);
  p = raw_tile ((gint[]) { Y, W, XH, -1, -1, -1 }, &i);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, "cannot be f16");
  g_object_unref (p);

  /* a write to a constant, a bad epsilon (an output that is an input: below) */
  p = raw_tile ((gint[]) { WC, W, X, -1, -1, -1 }, &i);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, "constant");
  g_object_unref (p);
  p = raw_tile ((gint[]) { Y, W, X, -1, -1, NORM }, &i);
  test_set_float (p, i, "eps", -1.0f);
  assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, "epsilon");
  g_object_unref (p);

  /* the device refuses a bad epsilon even without a norm */
  const float bad_eps[] = { NAN, INFINITY, -1e-6f };
  for (guint c = 0; c < G_N_ELEMENTS (bad_eps); c++)
    {
      p = raw_tile ((gint[]) { Y, W, X, -1, -1, -1 }, &i);
      test_set_float (p, i, "eps", bad_eps[c]);
      assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, "epsilon");
      g_object_unref (p);
    }
}

static void
test_verify_sizes (void)
{
  gint i;
  AmkProgram *p;

  /* the device wants exactly M × N elements of the output and residual, N of the bias
   * and K of the norm weight: fewer or more are refused */
  p = raw_tile ((gint[]) { Y_SMALL, W, X, -1, -1, -1 }, &i);
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE, "“y_small” has 6 elements; it must have exactly 18");
  g_object_unref (p);
  p = raw_tile ((gint[]) { Y, W, X, -1, Y_SMALL, -1 }, &i);
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE, "“y_small” has 6 elements; it must have exactly 18");
  g_object_unref (p);
  p = raw_tile ((gint[]) { X, W, X, -1, -1, -1 }, &i);  /* 48 elements, not 18 */
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE, "the output “x” has 48 elements; it must have exactly 18");
  g_object_unref (p);
  p = raw_tile ((gint[]) { Y, W, X, -1, X, -1 }, &i);
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE, "the residual “x” has 48 elements; it must have exactly 18");
  g_object_unref (p);
  p = raw_tile ((gint[]) { Y, W, X, NORM, -1, -1 }, &i);  /* 16 elements, not N */
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE, "the bias “norm” has 16 elements; it must have exactly 6");
  g_object_unref (p);
  p = raw_tile ((gint[]) { Y, W, X, -1, -1, BIAS }, &i);  /* 6 elements, not K */
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE, "the norm weight “bias” has 6 elements; it must have exactly 16");
  g_object_unref (p);
  p = raw_tile ((gint[]) { Y, W, X, -1, -1, X }, &i);  /* 48 elements, not K */
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE, "the norm weight “x” has 48 elements; it must have exactly 16");
  g_object_unref (p);
}

/* M or N of 2^31 or more, which the device refuses (and whose element counts pass
 * int32): no buffer that large can be declared, so W's info is made to claim it. */
static void
test_huge (void)
{
  gint i;
  g_autoptr(AmkProgram) p = raw_tile ((gint[]) { Y, W, X, -1, -1, -1 }, &i);
  AmkBufferInfo *w = g_ptr_array_index (p->buffers, W);

  w->shape[0] = (gint64) G_MAXINT32 + 1;
  w->n_elements = (guint64) w->shape[0] * K;
  w->size_bytes = w->n_elements * 2;
  assert_verify_error (p, AMK_PROGRAM_ERROR_OUT_OF_RANGE, "N = 2147483648 rows of “w”: each must be below 2^31");
  assert_op_error (amk_program_op_matmul (p, Y, W, X, -1, -1, -1, 0.0f, &e_),
                   AMK_PROGRAM_ERROR_OUT_OF_RANGE, "below 2^31");
}

/* Scratch buffers over the same arena bytes: a residual that starts where y starts but
 * is shorter overlaps y partly; input rows there overlap it too. */
static void
test_verify_partial_overlap (void)
{
  for (guint slot = 2; slot <= 4; slot += 2)
    {
      g_autoptr(AmkProgram) p = matmul_program ();
      gint ys = test_add_buffer (p, "ys", AMK_DTYPE_F32, M * N, AMK_BUFFER_ROLE_SCRATCH);
      gint rs = test_add_buffer (p, "rs", AMK_DTYPE_BF16, M * N, AMK_BUFFER_ROLE_SCRATCH);
      gint xs = test_add_buffer (p, "xs", AMK_DTYPE_F32, M * K, AMK_BUFFER_ROLE_SCRATCH);
      g_autofree char *needle = g_strdup_printf ("overlaps input %u", slot);

      ((AmkBufferInfo *) g_ptr_array_index (p->buffers, ys))->arena_offset = 0;
      ((AmkBufferInfo *) g_ptr_array_index (p->buffers, rs))->arena_offset = 0;
      ((AmkBufferInfo *) g_ptr_array_index (p->buffers, xs))->arena_offset = 0;
      p->scratch_size = AMK_ARENA_ALIGNMENT;
      if (slot == 4)
        test_add (p, 0, AMK_OPCODE_MATMUL, (gint[]) { ys, W, X, -1, rs, -1 }, 6,
                  "m_count", M, "n_count", N, "k", K, NULL);
      else
        test_add (p, 0, AMK_OPCODE_MATMUL, (gint[]) { ys, W, xs, -1, -1, -1 }, 6,
                  "m_count", M, "n_count", N, "k", K, NULL);
      assert_verify_error (p, AMK_PROGRAM_ERROR_INVALID, needle);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/amk/matmul/op/errors", test_op_errors);
  g_test_add_func ("/amk/matmul/verify/accepts", test_verify_accepts);
  g_test_add_func ("/amk/matmul/verify/ranges", test_verify_ranges);
  g_test_add_func ("/amk/matmul/verify/invalid", test_verify_invalid);
  g_test_add_func ("/amk/matmul/verify/sizes", test_verify_sizes);
  g_test_add_func ("/amk/matmul/verify/huge", test_huge);
  g_test_add_func ("/amk/matmul/verify/partial-overlap", test_verify_partial_overlap);
  return g_test_run ();
}
