/* amk-op-record.c: what every call of the op API shares: the argument checks and the
 * recording of an op, which amk_program_compile() (amk-compiler.c) lowers later.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <glib/gi18n-lib.h>

#include "amk-program.h"
#include "amk-op-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

AmkBufferInfo *
amk_op_tensor (AmkProgram *self, const char *op, const char *what, gint buffer, GError **error)
{
  AmkBufferInfo *info = buffer >= 0 ? amk_program_get_buffer_info (self, buffer) : NULL;

  if (info == NULL)
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                 _("%s: %s is buffer %d, which does not exist (the program has %u buffers)"),
                 op, what, buffer, self->buffers->len);
  return info;
}

gboolean
amk_op_writable (const char *op, AmkBufferInfo *info, GError **error)
{
  if (info->role != AMK_BUFFER_ROLE_CONSTANT)
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("%s writes “%s”, which is constant"), op, info->name);
  return FALSE;
}

gboolean
amk_op_same_shape (const char *op, AmkBufferInfo *a, AmkBufferInfo *b, GError **error)
{
  if (a->dtype == b->dtype && a->n_elements == b->n_elements)
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("%s: “%s” (%" PRIu64 " × %s) and “%s” (%" PRIu64 " × %s) must have the same size and dtype"),
               op, a->name, a->n_elements, amk_dtype_name (a->dtype),
               b->name, b->n_elements, amk_dtype_name (b->dtype));
  return FALSE;
}

gboolean
amk_op_elementwise_dtype (const char *op, AmkBufferInfo *info, GError **error)
{
  guint values, bytes;

  if (!amk_dtype_block (info->dtype, &values, &bytes))
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("%s: “%s” is %s, whose values are packed in blocks; only a matrix or a table "
                 "(MATVEC, MATMUL, EMBED) can be block-quantized"),
               op, info->name, amk_dtype_name (info->dtype));
  return FALSE;
}

gboolean
amk_op_can_record (AmkProgram *self, const char *op, GError **error)
{
  if (!self->compiled)
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("%s: the program is already compiled; record every op before compiling"), op);
  return FALSE;
}

/* Appends an op; `buffers` ends at G_MININT32 (or after 6; an op with more operands sets
 * the others in the recorded AmkOpInfo). `params` holds what the op fixes for all its
 * tiles (the compiler fills in each tile's range); NULL for none. Returns the op's index. */
gint
amk_op_record (AmkProgram *self, guint opcode, const gint32 *buffers, const amk_params_t *params)
{
  AmkOpInfo op = { opcode, { 0 }, { { 0 } } };

  for (guint i = 0; i < G_N_ELEMENTS (op.buffers); i++)
    op.buffers[i] = AMK_NO_BUFFER;
  for (guint i = 0; i < 6 && buffers[i] != G_MININT32; i++)
    op.buffers[i] = buffers[i];
  if (params != NULL)
    op.params = *params;
  g_array_append_val (self->ops, op);
  amk_program_invalidate (self);
  return (gint) self->ops->len - 1;
}

gboolean
amk_op_is_vector_dtype (AmkBufferInfo *info)
{
  return info->dtype == AMK_DTYPE_F32 || info->dtype == AMK_DTYPE_BF16;
}

/* A float or bf16 tensor of exactly `n` elements (n 0: any size). */
gboolean
amk_op_vector_of (AmkProgram *self, const char *op, const char *what, gint buffer, guint64 n,
                  AmkBufferInfo **out, GError **error)
{
  AmkBufferInfo *info = amk_op_tensor (self, op, what, buffer, error);

  if (info == NULL)
    return FALSE;
  if (!amk_op_is_vector_dtype (info) || (n != 0 && info->n_elements != n))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: %s “%s” must be f32 or bf16 with %" PRIu64 " elements, not %" PRIu64 " × %s"),
                   op, what, info->name, n, info->n_elements, amk_dtype_name (info->dtype));
      return FALSE;
    }
  if (out != NULL)
    *out = info;
  return TRUE;
}

gboolean
amk_op_int_tensor (AmkProgram *self, const char *op, const char *what, gint buffer, guint64 min,
                   GError **error)
{
  AmkBufferInfo *info = amk_op_tensor (self, op, what, buffer, error);

  if (info == NULL)
    return FALSE;
  if (info->dtype != AMK_DTYPE_I32 || info->n_elements < min)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: %s “%s” must be i32 with at least %" PRIu64 " elements"),
                   op, what, info->name, min);
      return FALSE;
    }
  return TRUE;
}

/* A scratch buffer the compiler's lowering needs, named after its op. */
gint
amk_op_internal_scratch (AmkProgram *self, const char *what, AmkDType dtype, guint64 n, GError **error)
{
  g_autofree char *name = g_strdup_printf ("%s.%u", what, self->ops->len);
  gint64 shape = (gint64) n;

  return amk_program_add_buffer (self, name, dtype, &shape, 1, AMK_BUFFER_ROLE_SCRATCH, error);
}

gboolean
amk_op_f32_of (AmkProgram *self, const char *op, const char *what, gint buffer, guint64 n, GError **error)
{
  AmkBufferInfo *info = amk_op_tensor (self, op, what, buffer, error);

  if (info == NULL)
    return FALSE;
  if (info->dtype != AMK_DTYPE_F32 || info->n_elements != n)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: %s “%s” must be f32 with %" PRIu64 " elements"), op, what, info->name, n);
      return FALSE;
    }
  return TRUE;
}

/**
 * amk_program_get_n_ops:
 * @self: a program
 *
 * Counts the ops recorded with the op API.
 *
 * Returns: the number of ops
 */
guint
amk_program_get_n_ops (AmkProgram *self)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), 0);
  return self->ops->len;
}

gboolean
amk_op_rope_freq_ok (const char *op, gfloat theta, gfloat factor, gfloat low_freq_factor,
                     gfloat high_freq_factor, guint original_context, GError **error)
{
  if (!(theta > 0.0f && theta < G_MAXFLOAT) || !(factor >= 0.0f && factor < G_MAXFLOAT) ||
      (factor > 0.0f && !(low_freq_factor > 0.0f && high_freq_factor > low_freq_factor &&
                          high_freq_factor < G_MAXFLOAT && original_context > 0 &&
                          original_context <= G_MAXINT32)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: theta must be positive, and Llama-3 scaling needs 0 < low < high frequency factors and an original context"),
                   op);
      return FALSE;
    }
  return TRUE;
}
