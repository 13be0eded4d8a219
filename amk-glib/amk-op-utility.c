/* amk-op-utility.c: the utility ops: NOP, COPY, FILL, ADD, TRAP and GRID_SYNC (their
 * parameters in kernels/amk-abi.h, the device side in kernels/ops-utility.cuh).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-program.h"
#include "amk-op-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

/* ---- the op API --------------------------------------------------------------------- */

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

  if (!amk_op_can_record (self, "COPY", error) ||
      (d = amk_op_tensor (self, "COPY", _("the destination"), dst, error)) == NULL ||
      (s = amk_op_tensor (self, "COPY", _("the source"), src, error)) == NULL ||
      !amk_op_writable ("COPY", d, error) || !amk_op_same_shape ("COPY", d, s, error) ||
      !amk_op_elementwise_dtype ("COPY", d, error))
    return -1;
  if (dst == src)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("COPY: “%s” is copied onto itself"), d->name);
      return -1;
    }
  return amk_op_record (self, AMK_ABI_OP_COPY, (gint32[]) { dst, src, G_MININT32 }, NULL);
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

  if (!amk_op_can_record (self, "FILL", error) ||
      (d = amk_op_tensor (self, "FILL", _("the destination"), dst, error)) == NULL ||
      !amk_op_writable ("FILL", d, error) || !amk_op_elementwise_dtype ("FILL", d, error))
    return -1;
  return amk_op_record (self, AMK_ABI_OP_FILL, (gint32[]) { dst, G_MININT32 },
                 &(amk_params_t) { .fill = { .value = value } });
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

  if (!amk_op_can_record (self, "ADD", error) ||
      (d = amk_op_tensor (self, "ADD", _("the destination"), dst, error)) == NULL ||
      (x = amk_op_tensor (self, "ADD", _("the first operand"), a, error)) == NULL ||
      (y = amk_op_tensor (self, "ADD", _("the second operand"), b, error)) == NULL ||
      !amk_op_writable ("ADD", d, error) || !amk_op_same_shape ("ADD", d, x, error) ||
      !amk_op_same_shape ("ADD", d, y, error) || !amk_op_elementwise_dtype ("ADD", d, error))
    return -1;
  return amk_op_record (self, AMK_ABI_OP_ADD, (gint32[]) { dst, a, b, G_MININT32 }, NULL);
}

/* ---- verifier ----------------------------------------------------------------------- */

static gboolean
verify_copy (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins, GError **error)
{
  const amk_copy_params_t *p = &ins->params.copy;

  return amk_verify_writes (self, queue, pos, ins, error) &&
         amk_verify_same_dtype (self, queue, pos, ins, 2, error) &&
         amk_verify_elementwise_dtype (self, queue, pos, ins, error) &&
         amk_verify_range (self, queue, pos, ins, 0, p->dst_offset, p->count, error) &&
         amk_verify_range (self, queue, pos, ins, 1, p->src_offset, p->count, error) &&
         amk_verify_no_partial_overlap (self, queue, pos, ins, 0, p->dst_offset, 1, p->src_offset,
                                        p->count, error);
}

static gboolean
verify_fill (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins, GError **error)
{
  return amk_verify_writes (self, queue, pos, ins, error) &&
         amk_verify_elementwise_dtype (self, queue, pos, ins, error) &&
         amk_verify_range (self, queue, pos, ins, 0, ins->params.fill.offset, ins->params.fill.count, error);
}

static gboolean
verify_add (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins, GError **error)
{
  const amk_add_params_t *p = &ins->params.add;

  return amk_verify_writes (self, queue, pos, ins, error) &&
         amk_verify_same_dtype (self, queue, pos, ins, 3, error) &&
         amk_verify_elementwise_dtype (self, queue, pos, ins, error) &&
         amk_verify_range (self, queue, pos, ins, 0, p->dst_offset, p->count, error) &&
         amk_verify_range (self, queue, pos, ins, 1, p->a_offset, p->count, error) &&
         amk_verify_range (self, queue, pos, ins, 2, p->b_offset, p->count, error) &&
         amk_verify_no_partial_overlap (self, queue, pos, ins, 0, p->dst_offset, 1, p->a_offset,
                                        p->count, error) &&
         amk_verify_no_partial_overlap (self, queue, pos, ins, 0, p->dst_offset, 2, p->b_offset,
                                        p->count, error);
}

/* ---- lowering and cost -------------------------------------------------------------- */

static void
lower_copy (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;

  amk_tile_use_buffers (t, op, 2);
  t->ins.params.copy.dst_offset = t->ins.params.copy.src_offset = (gint32) t->start;
  t->ins.params.copy.count = (gint32) (t->end - t->start);
  amk_tile_access (t, op->buffers[0], t->start, t->end, TRUE);
  amk_tile_access (t, op->buffers[1], t->start, t->end, FALSE);
}

static void
lower_fill (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  amk_tile_use_buffers (t, lw->op, 1);
  t->ins.params.fill.offset = (gint32) t->start;
  t->ins.params.fill.count = (gint32) (t->end - t->start);
  amk_tile_access (t, lw->op->buffers[0], t->start, t->end, TRUE);
}

static void
lower_add (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  amk_add_params_t *p = &t->ins.params.add;

  amk_tile_use_buffers (t, op, 3);
  p->dst_offset = p->a_offset = p->b_offset = (gint32) t->start;
  p->count = (gint32) (t->end - t->start);
  amk_tile_access (t, op->buffers[0], t->start, t->end, TRUE);
  amk_tile_access (t, op->buffers[1], t->start, t->end, FALSE);
  amk_tile_access (t, op->buffers[2], t->start, t->end, FALSE);
}

static double
bytes_copy (AmkProgram *self, const amk_instruction_t *ins)
{
  return 2.0 * MAX (ins->params.copy.count, 0) * amk_instruction_elem_size (self, ins, 0);
}

static double
bytes_fill (AmkProgram *self, const amk_instruction_t *ins)
{
  return (double) MAX (ins->params.fill.count, 0) * amk_instruction_elem_size (self, ins, 0);
}

static double
bytes_add (AmkProgram *self, const amk_instruction_t *ins)
{
  return 3.0 * MAX (ins->params.add.count, 0) * amk_instruction_elem_size (self, ins, 0);
}

/* ---- CPU reference ------------------------------------------------------------------ */
/* One element at a time, floats through fp32 with round-to-nearest-even stores, integers
 * with wrapping arithmetic, like the GPU. */

static AmkAbortCode
run_nothing (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  return AMK_ABORT_CODE_NONE;
}

static AmkAbortCode
run_copy (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  AmkCpuBuffer *dst = &b[ins->buffers[0]], *src = &b[ins->buffers[1]];
  guint esize = amk_dtype_size (dst->info->dtype);

  memmove (dst->data + (gsize) ins->params.copy.dst_offset * esize,
           src->data + (gsize) ins->params.copy.src_offset * esize,
           (gsize) ins->params.copy.count * esize);
  return AMK_ABORT_CODE_NONE;
}

static AmkAbortCode
run_fill (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  AmkCpuBuffer *dst = &b[ins->buffers[0]];
  const amk_fill_params_t *p = &ins->params.fill;

  for (gint32 k = 0; k < p->count; k++)
    amk_dtype_store (dst->info->dtype, dst->data, (guint64) p->offset + k, p->value);
  return AMK_ABORT_CODE_NONE;
}

static AmkAbortCode
run_add (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  AmkCpuBuffer *dst = &b[ins->buffers[0]], *x = &b[ins->buffers[1]], *y = &b[ins->buffers[2]];
  AmkDType dtype = dst->info->dtype;
  guint64 od = ins->params.add.dst_offset, ox = ins->params.add.a_offset, oy = ins->params.add.b_offset;

  for (gint32 k = 0; k < ins->params.add.count; k++)
    {
      if (dtype == AMK_DTYPE_I32)
        {
          guint32 u, v, w;
          memcpy (&u, x->data + (ox + k) * 4, 4);
          memcpy (&v, y->data + (oy + k) * 4, 4);
          w = u + v;
          memcpy (dst->data + (od + k) * 4, &w, 4);
        }
      else if (dtype == AMK_DTYPE_U8)
        dst->data[od + k] = (guint8) (x->data[ox + k] + y->data[oy + k]);
      else
        amk_dtype_store (dtype, dst->data, od + k,
                         amk_dtype_load (dtype, x->data, ox + k) +
                         amk_dtype_load (dtype, y->data, oy + k));
    }
  return AMK_ABORT_CODE_NONE;
}

static AmkAbortCode
run_trap (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  *detail = ins->params.trap.code;
  return AMK_ABORT_CODE_TRAP;
}

/* ---- descriptors -------------------------------------------------------------------- */

static const AmkParamField copy_fields[] = {
  AMK_PARAM_INT (copy, dst_offset), AMK_PARAM_INT (copy, src_offset), AMK_PARAM_INT (copy, count),
};
static const AmkParamField fill_fields[] = {
  AMK_PARAM_INT (fill, offset), AMK_PARAM_INT (fill, count), AMK_PARAM_FLOAT (fill, value),
};
static const AmkParamField add_fields[] = {
  AMK_PARAM_INT (add, dst_offset), AMK_PARAM_INT (add, a_offset), AMK_PARAM_INT (add, b_offset),
  AMK_PARAM_INT (add, count),
};
static const AmkParamField trap_fields[] = {
  AMK_PARAM_INT (trap, code),
};

/* ---- accesses (the race proof) ------------------------------------------------------ */

static guint
accesses_copy (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_copy_params_t *p = &ins->params.copy;
  guint n = 0;

  amk_access_range (out, &n, ins, 0, p->dst_offset, p->count, AMK_ACCESS_WRITE);
  amk_access_range (out, &n, ins, 1, p->src_offset, p->count, AMK_ACCESS_READ);
  return n;
}

static guint
accesses_fill (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  guint n = 0;

  amk_access_range (out, &n, ins, 0, ins->params.fill.offset, ins->params.fill.count, AMK_ACCESS_WRITE);
  return n;
}

static guint
accesses_add (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_add_params_t *p = &ins->params.add;
  guint n = 0;

  amk_access_range (out, &n, ins, 0, p->dst_offset, p->count, AMK_ACCESS_WRITE);
  amk_access_range (out, &n, ins, 1, p->a_offset, p->count, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 2, p->b_offset, p->count, AMK_ACCESS_READ);
  return n;
}

static guint
accesses_none (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  return 0;
}

const AmkOpClass amk_op_nop = {
  .opcode = AMK_ABI_OP_NOP, .name = "NOP",
  .accesses = accesses_none,
  .run_cpu = run_nothing,
};

const AmkOpClass amk_op_copy = {
  .opcode = AMK_ABI_OP_COPY, .name = "COPY", .n_buffers = 2,
  .fields = AMK_PARAM_FIELDS (copy_fields),
  .verify = verify_copy, .lower = lower_copy, .accesses = accesses_copy, .bytes = bytes_copy,
  .run_cpu = run_copy,
};

const AmkOpClass amk_op_fill = {
  .opcode = AMK_ABI_OP_FILL, .name = "FILL", .n_buffers = 1,
  .fields = AMK_PARAM_FIELDS (fill_fields),
  .verify = verify_fill, .lower = lower_fill, .accesses = accesses_fill, .bytes = bytes_fill,
  .run_cpu = run_fill,
};

const AmkOpClass amk_op_add = {
  .opcode = AMK_ABI_OP_ADD, .name = "ADD", .n_buffers = 3,
  .fields = AMK_PARAM_FIELDS (add_fields),
  .verify = verify_add, .lower = lower_add, .accesses = accesses_add, .bytes = bytes_add,
  .run_cpu = run_add,
};

const AmkOpClass amk_op_trap = {
  .opcode = AMK_ABI_OP_TRAP, .name = "TRAP",
  .fields = AMK_PARAM_FIELDS (trap_fields),
  .accesses = accesses_none,
  .run_cpu = run_trap,
};

const AmkOpClass amk_op_grid_sync = {
  .opcode = AMK_ABI_OP_GRID_SYNC, .name = "GRID_SYNC",
  .accesses = accesses_none,
  .run_cpu = run_nothing,
};
