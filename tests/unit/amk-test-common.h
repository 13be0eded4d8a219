/* amk-test-common.h: helpers shared by the unit tests.
 *
 * The library is built with hidden visibility, so the private functions of
 * amk-program-private.h (amk_program_append_raw, amk_program_set_scratch_size...) are not
 * reachable from a test. Where a test must craft what the public API refuses to build
 * (raw instructions with bad fields, a queue list naming an instruction twice), it edits
 * the AmkProgram struct of amk-program-private.h directly; that needs no symbol.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <locale.h>
#include <stdarg.h>
#include <string.h>
#include <math.h>
#include <amk-glib/amk-glib.h>
#include "amk-program-private.h"

/* Appends a raw instruction to `queue` without any check; invalidates the program. */
static inline gint
test_append_raw (AmkProgram *p, guint queue, const amk_instruction_t *ins)
{
  gint32 index = (gint32) p->instructions->len;

  g_assert_cmpuint (queue, <, p->queues->len);
  g_array_append_val (p->instructions, *ins);
  g_array_append_val ((GArray *) g_ptr_array_index (p->queues, queue), index);
  p->verified = FALSE;
  return index;
}

/* A raw instruction with no waits, no signal and no buffers. */
static inline amk_instruction_t
test_raw (guint opcode)
{
  amk_instruction_t ins;

  memset (&ins, 0, sizeof ins);
  ins.opcode = opcode;
  ins.signal.counter = AMK_NO_COUNTER;
  for (guint i = 0; i < AMK_MAX_BUFFER_REFS; i++)
    ins.buffers[i] = AMK_NO_BUFFER;
  return ins;
}

/* Writable access to an instruction; invalidates the program. */
static inline amk_instruction_t *
test_instruction (AmkProgram *p, guint index)
{
  g_assert_cmpuint (index, <, p->instructions->len);
  p->verified = FALSE;
  return &g_array_index (p->instructions, amk_instruction_t, index);
}

static inline gint
test_add_buffer (AmkProgram *p, const char *name, AmkDType dtype, gint64 n, AmkBufferRole role)
{
  g_autoptr(GError) error = NULL;
  gint index = amk_program_add_buffer (p, name, dtype, &n, 1, role, &error);

  g_assert_no_error (error);
  g_assert_cmpint (index, >=, 0);
  return index;
}

/* Appends an instruction; after the buffers come the non-zero integer parameters as
 * name, value pairs, then NULL. Float parameters go through test_set_float. */
static inline gint G_GNUC_NULL_TERMINATED
test_add (AmkProgram *p, guint queue, AmkOpcode op, const gint *buffers, gsize n_buffers, ...)
{
  g_autoptr(GError) error = NULL;
  gint index = amk_program_add_instruction (p, queue, op, buffers, n_buffers, &error);
  const char *name;
  va_list ap;

  g_assert_no_error (error);
  g_assert_cmpint (index, >=, 0);
  va_start (ap, n_buffers);
  while ((name = va_arg (ap, const char *)) != NULL)
    {
      gint value = va_arg (ap, gint);

      g_assert_true (amk_program_set_param_int (p, index, name, value, &error));
      g_assert_no_error (error);
    }
  va_end (ap);
  return index;
}

static inline void
test_set_float (AmkProgram *p, gint instruction, const char *name, gfloat value)
{
  g_autoptr(GError) error = NULL;
  g_assert_true (amk_program_set_param_float (p, instruction, name, value, &error));
  g_assert_no_error (error);
}

static inline void
test_wait (AmkProgram *p, gint instruction, gint counter, guint target)
{
  g_autoptr(GError) error = NULL;
  g_assert_true (amk_program_add_wait (p, instruction, counter, target, &error));
  g_assert_no_error (error);
}

static inline void
test_signal (AmkProgram *p, gint instruction, gint counter, guint amount)
{
  g_autoptr(GError) error = NULL;
  g_assert_true (amk_program_set_signal (p, instruction, counter, amount, &error));
  g_assert_no_error (error);
}

/* `n` random bytes from the test generator (never all zeros in practice). */
static inline GBytes *
test_random_bytes (gsize n)
{
  guint8 *data = g_malloc (MAX (n, 1));

  for (gsize i = 0; i < n; i++)
    data[i] = (guint8) g_test_rand_int_range (0, 256);
  return g_bytes_new_take (data, n);
}

/* Random floats in [-range, range), none of them zero. */
static inline float
test_rand_float (double range)
{
  float f;

  do
    f = (float) g_test_rand_double_range (-range, range);
  while (f == 0.0f);
  return f;
}

/* TRUE under valgrind (timing assertions are meaningless there). */
static inline gboolean
test_slow_environment (void)
{
  const char *preload = g_getenv ("LD_PRELOAD");
  return (preload != NULL && strstr (preload, "vgpreload") != NULL) ||
         g_getenv ("AMK_TEST_NO_TIMING") != NULL;
}

/* Messages are checked in English: make sure no translation applies. */
static inline void
test_init (int *argc, char ***argv)
{
  g_setenv ("LANGUAGE", "C", TRUE);
  g_setenv ("LC_ALL", "C.UTF-8", TRUE);
  setlocale (LC_ALL, "C.UTF-8");
  g_test_init (argc, argv, NULL);
}

#define test_assert_has(text, needle) \
  G_STMT_START { \
    const char *t_ = (text); \
    if (t_ == NULL || strstr (t_, (needle)) == NULL) \
      g_error ("“%s” lacks “%s”", t_ != NULL ? t_ : "(null)", (needle)); \
  } G_STMT_END

#define test_assert_message_has(error, needle) test_assert_has ((error)->message, (needle))

/* ---- independent scalar references ------------------------------------------------ *
 * Written from the IEEE definitions in double arithmetic (exact for these widths), not
 * from the library's bit tricks: quantize to the format's step at the value's binade,
 * round half to even with nearbyint(), then encode. */

static inline guint16
ref_encode_small_float (float f, int mant_bits, int min_exp, int bias, guint16 inf_bits,
                        double max_finite)
{
  guint16 sign = signbit (f) ? 0x8000 : 0;
  double a = fabs ((double) f), step, v;
  int e;

  if (isnan (f))
    return sign | inf_bits | 1;   /* some NaN; callers only check the class */
  if (isinf (f))
    return sign | inf_bits;
  if (a == 0.0)
    return sign;
  frexp (a, &e);                  /* a in [2^(e-1), 2^e) */
  e -= 1;
  step = ldexp (1.0, (e < min_exp ? min_exp : e) - mant_bits);
  v = nearbyint (a / step) * step;
  if (v > max_finite)
    return sign | inf_bits;
  if (v < ldexp (1.0, min_exp))   /* subnormal (or zero) */
    return sign | (guint16) (v / ldexp (1.0, min_exp - mant_bits));
  frexp (v, &e);
  e -= 1;
  return sign | (guint16) (((e + bias) << mant_bits) |
                           (guint16) ((v / ldexp (1.0, e) - 1.0) * ldexp (1.0, mant_bits)));
}

static inline double
ref_decode_small_float (guint16 h, int mant_bits, int exp_bits, int bias)
{
  int exp = (h >> mant_bits) & ((1 << exp_bits) - 1);
  int mant = h & ((1 << mant_bits) - 1);
  double s = (h & 0x8000) ? -1.0 : 1.0;

  if (exp == (1 << exp_bits) - 1)
    return mant ? NAN : s * INFINITY;
  if (exp == 0)
    return s * ldexp ((double) mant, 1 - bias - mant_bits);
  return s * ldexp (1.0 + ldexp ((double) mant, -mant_bits), exp - bias);
}

static inline guint16 ref_f32_to_f16 (float f)
{ return ref_encode_small_float (f, 10, -14, 15, 0x7c00, 65504.0); }
static inline guint16 ref_f32_to_bf16 (float f)
{ return ref_encode_small_float (f, 7, -126, 127, 0x7f80, ldexp (2.0 - ldexp (1.0, -7), 127)); }
static inline float ref_f16_to_f32 (guint16 h) { return (float) ref_decode_small_float (h, 10, 5, 15); }
static inline float ref_bf16_to_f32 (guint16 h) { return (float) ref_decode_small_float (h, 7, 8, 127); }
static inline gboolean ref_f16_is_nan (guint16 h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
static inline gboolean ref_bf16_is_nan (guint16 h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

/* float to i32 as the GPU's cvt.rzi.s32.f32: toward zero, saturating, NaN to 0 */
static inline gint32
ref_f32_to_i32 (float f)
{
  double t;
  if (isnan (f))
    return 0;
  t = trunc ((double) f);
  if (t >= 2147483647.0)
    return G_MAXINT32;
  if (t <= -2147483648.0)
    return G_MININT32;
  return (gint32) t;
}

static inline guint
test_dtype_size (AmkDType d)
{
  return d == AMK_DTYPE_F32 || d == AMK_DTYPE_I32 ? 4 : d == AMK_DTYPE_U8 ? 1 : 2;
}

/* ||a - b|| / ||b|| over n values: how far two logits vectors are apart, norm-wise */
static inline double
test_rel_error (const float *a, const float *b, gsize n)
{
  double num = 0, den = 0;

  for (gsize i = 0; i < n; i++)
    {
      num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
      den += (double) b[i] * b[i];
    }
  return sqrt (num / MAX (den, 1e-30));
}
