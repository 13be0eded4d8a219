/* amk-ops.c: the op API of AmkProgram. Each call checks its tensors and records one op;
 * amk_program_compile() (amk-compiler.c) lowers the ops into tile instructions.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <glib/gi18n-lib.h>

#include "amk-program.h"
#include "amk-program-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

static AmkBufferInfo *
tensor (AmkProgram *self, const char *op, const char *what, gint buffer, GError **error)
{
  AmkBufferInfo *info = buffer >= 0 ? amk_program_get_buffer_info (self, buffer) : NULL;

  if (info == NULL)
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                 _("%s: %s is buffer %d, which does not exist (the program has %u buffers)"),
                 op, what, buffer, self->buffers->len);
  return info;
}

static gboolean
writable (const char *op, AmkBufferInfo *info, GError **error)
{
  if (info->role != AMK_BUFFER_ROLE_CONSTANT)
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("%s writes “%s”, which is constant"), op, info->name);
  return FALSE;
}

static gboolean
same_shape (const char *op, AmkBufferInfo *a, AmkBufferInfo *b, GError **error)
{
  if (a->dtype == b->dtype && a->n_elements == b->n_elements)
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("%s: “%s” (%" PRIu64 " × %s) and “%s” (%" PRIu64 " × %s) must have the same size and dtype"),
               op, a->name, a->n_elements, amk_dtype_name (a->dtype),
               b->name, b->n_elements, amk_dtype_name (b->dtype));
  return FALSE;
}

static gboolean
can_add_ops (AmkProgram *self, const char *op, GError **error)
{
  if (!self->compiled)
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("%s: the program is already compiled; record every op before compiling"), op);
  return FALSE;
}

static gint
record (AmkProgram *self, guint opcode, const gint32 *buffers, gfloat value)
{
  AmkOpInfo op = { opcode, { AMK_NO_BUFFER, AMK_NO_BUFFER, AMK_NO_BUFFER,
                             AMK_NO_BUFFER, AMK_NO_BUFFER, AMK_NO_BUFFER }, value };

  for (guint i = 0; i < 6 && buffers[i] != G_MININT32; i++)
    op.buffers[i] = buffers[i];
  g_array_append_val (self->ops, op);
  amk_program_invalidate (self);
  return (gint) self->ops->len - 1;
}

/**
 * amk_program_op_copy:
 * @self: a program
 * @dst: the buffer to write
 * @src: a buffer of the same size and dtype
 * @error: return location for a #GError
 *
 * Records `dst = src`. Ops run in the order they are recorded, as far as their data
 * depends on each other; [method@Amk.Program.compile] turns them into instructions.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_copy (AmkProgram  *self,
                     gint         dst,
                     gint         src,
                     GError     **error)
{
  AmkBufferInfo *d, *s;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!can_add_ops (self, "COPY", error) ||
      (d = tensor (self, "COPY", _("the destination"), dst, error)) == NULL ||
      (s = tensor (self, "COPY", _("the source"), src, error)) == NULL ||
      !writable ("COPY", d, error) || !same_shape ("COPY", d, s, error))
    return -1;
  if (dst == src)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("COPY: “%s” is copied onto itself"), d->name);
      return -1;
    }
  return record (self, AMK_ABI_OP_COPY, (gint32[]) { dst, src, G_MININT32 }, 0.0f);
}

/**
 * amk_program_op_fill:
 * @self: a program
 * @dst: the buffer to write
 * @value: the value every element gets (rounded to the dtype)
 * @error: return location for a #GError
 *
 * Records `dst[:] = value`.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_fill (AmkProgram  *self,
                     gint         dst,
                     gfloat       value,
                     GError     **error)
{
  AmkBufferInfo *d;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!can_add_ops (self, "FILL", error) ||
      (d = tensor (self, "FILL", _("the destination"), dst, error)) == NULL ||
      !writable ("FILL", d, error))
    return -1;
  return record (self, AMK_ABI_OP_FILL, (gint32[]) { dst, G_MININT32 }, value);
}

/**
 * amk_program_op_add:
 * @self: a program
 * @dst: the buffer to write; may be @a or @b (in place)
 * @a: a buffer of the same size and dtype
 * @b: a buffer of the same size and dtype
 * @error: return location for a #GError
 *
 * Records `dst = a + b`, elementwise (floats through fp32, integers wrapping).
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_add (AmkProgram  *self,
                    gint         dst,
                    gint         a,
                    gint         b,
                    GError     **error)
{
  AmkBufferInfo *d, *x, *y;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!can_add_ops (self, "ADD", error) ||
      (d = tensor (self, "ADD", _("the destination"), dst, error)) == NULL ||
      (x = tensor (self, "ADD", _("the first operand"), a, error)) == NULL ||
      (y = tensor (self, "ADD", _("the second operand"), b, error)) == NULL ||
      !writable ("ADD", d, error) || !same_shape ("ADD", d, x, error) ||
      !same_shape ("ADD", d, y, error))
    return -1;
  return record (self, AMK_ABI_OP_ADD, (gint32[]) { dst, a, b, G_MININT32 }, 0.0f);
}

static gboolean
is_vector_dtype (AmkBufferInfo *info)
{
  return info->dtype == AMK_DTYPE_F32 || info->dtype == AMK_DTYPE_BF16;
}

/* An optional MATVEC operand: absent (-1), or a F32/BF16 vector of `n` elements. */
static gboolean
optional_vector (AmkProgram *self, const char *what, gint buffer, guint64 n, GError **error)
{
  AmkBufferInfo *info;

  if (buffer == -1)
    return TRUE;
  if ((info = tensor (self, "MATVEC", what, buffer, error)) == NULL)
    return FALSE;
  if (is_vector_dtype (info) && info->n_elements == n)
    return TRUE;
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("MATVEC: %s “%s” must be %" PRIu64 " f32 or bf16 elements, not %" PRIu64 " × %s"),
               what, info->name, n, info->n_elements, amk_dtype_name (info->dtype));
  return FALSE;
}

/**
 * amk_program_op_matvec:
 * @self: a program
 * @y: the output vector (f32 or bf16), one element per row of @w
 * @w: the matrix, 2-D `[rows, K]` (bf16, f16 or f32), usually a constant buffer
 * @x: the input vector of K elements (f32 or bf16)
 * @bias: a vector of `rows` elements added to the product, or -1
 * @residual: a vector of `rows` elements added to the product, or -1; may be @y
 *   (`y += W x`)
 * @norm: the weight of an RMSNORM fused before the product (K elements), or -1
 * @eps: the RMSNORM epsilon (used with @norm)
 * @error: return location for a #GError
 *
 * Records `y = W x' + bias + residual` with fp32 accumulation, where `x'` is @x or,
 * with @norm, `x / sqrt(mean(x²) + eps) * norm`. The compiler splits the rows into tiles
 * spread over every queue.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_matvec (AmkProgram  *self,
                       gint         y,
                       gint         w,
                       gint         x,
                       gint         bias,
                       gint         residual,
                       gint         norm,
                       gfloat       eps,
                       GError     **error)
{
  AmkBufferInfo *yi, *wi, *xi;
  guint64 rows, k;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!can_add_ops (self, "MATVEC", error) ||
      (yi = tensor (self, "MATVEC", _("the output"), y, error)) == NULL ||
      (wi = tensor (self, "MATVEC", _("the matrix"), w, error)) == NULL ||
      (xi = tensor (self, "MATVEC", _("the vector"), x, error)) == NULL ||
      !writable ("MATVEC", yi, error))
    return -1;
  if (wi->n_dims != 2 || wi->dtype == AMK_DTYPE_I32 || wi->dtype == AMK_DTYPE_U8)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATVEC: the matrix “%s” must be 2-D bf16, f16 or f32"), wi->name);
      return -1;
    }
  rows = wi->shape[0];
  k = wi->shape[1];
  if ((k * amk_dtype_size (wi->dtype)) % 16 != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATVEC: a row of “%s” (%" PRIu64 " × %s) must be a multiple of 16 bytes"),
                   wi->name, k, amk_dtype_name (wi->dtype));
      return -1;
    }
  if (!optional_vector (self, _("the output"), y, rows, error) ||
      !optional_vector (self, _("the vector"), x, k, error) ||
      !optional_vector (self, _("the bias"), bias, rows, error) ||
      !optional_vector (self, _("the residual"), residual, rows, error) ||
      !optional_vector (self, _("the norm weight"), norm, k, error))
    return -1;
  if (y == w || y == x || y == bias || y == norm)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATVEC: the output “%s” is also an input; only the residual may be the output"),
                   yi->name);
      return -1;
    }
  if (norm != -1 && !(eps >= 0.0f && eps < G_MAXFLOAT))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATVEC: the RMSNORM epsilon must be finite and not negative"));
      return -1;
    }
  return record (self, AMK_ABI_OP_MATVEC, (gint32[]) { y, w, x, bias, residual, norm }, eps);
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
