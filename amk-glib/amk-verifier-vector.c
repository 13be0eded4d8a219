/* amk-verifier-vector.c: the verifier's checks of the vector ops (RMSNORM, SILU_MUL,
 * EMBED, ARGMAX_PARTIAL, ARGMAX_FINAL; their contract is in kernels/amk-abi.h).
 *
 * Called by check_instruction() once the buffer indices are in range and the instruction
 * names three buffers. Checked here: the parameters, the dtype of every operand, the
 * element range of every operand (64-bit arithmetic), no write to a CONSTANT buffer, and
 * aliasing: an output shares no byte with an input or another output, except that
 * RMSNORM's output may be its input itself (in place: the very same elements). Scratch
 * buffers share the arena, so for them the bytes compared are arena offsets.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>

#include <glib/gi18n-lib.h>

#include "amk-program-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

#define VEC_DTYPES   ((1u << AMK_DTYPE_F32) | (1u << AMK_DTYPE_BF16))
#define TABLE_DTYPES (VEC_DTYPES | (1u << AMK_DTYPE_F16))
#define F32_ONLY     (1u << AMK_DTYPE_F32)
#define I32_ONLY     (1u << AMK_DTYPE_I32)

/* What one instruction does with one buffer slot. */
typedef struct {
  const char *what;     /* translated: "the output", "the gate", ... */
  guint       dtypes;   /* bit per AmkDType */
  guint64     offset;   /* first element */
  guint64     count;    /* elements */
  gboolean    written;  /* from amk_abi_written_slots */
} Operand;

static const char *
vector_op_name (guint opcode)
{
  switch (opcode)
    {
    case AMK_ABI_OP_RMSNORM: return "RMSNORM";
    case AMK_ABI_OP_SILU_MUL: return "SILU_MUL";
    case AMK_ABI_OP_EMBED: return "EMBED";
    case AMK_ABI_OP_ARGMAX_PARTIAL: return "ARGMAX_PARTIAL";
    case AMK_ABI_OP_ARGMAX_FINAL: return "ARGMAX_FINAL";
    default: return "?";
    }
}

static AmkBufferInfo *
slot_info (AmkProgram *self, const amk_instruction_t *ins, guint slot)
{
  return g_ptr_array_index (self->buffers, ins->buffers[slot]);
}

static gboolean
check_operand (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
               guint slot, const Operand *op, GError **error)
{
  AmkBufferInfo *info = slot_info (self, ins, slot);
  const char *name = vector_op_name (ins->opcode);

  if (op->written && info->role == AMK_BUFFER_ROLE_CONSTANT)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s) writes buffer %d “%s”, which is constant"),
                   queue, pos, name, ins->buffers[slot], info->name);
      return FALSE;
    }
  if (!(op->dtypes & (1u << info->dtype)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): %s, buffer %d “%s”, cannot be %s"),
                   queue, pos, name, op->what, ins->buffers[slot], info->name,
                   amk_dtype_name (info->dtype));
      return FALSE;
    }
  /* offset and count are below 2^62: their sum cannot wrap */
  if (op->offset + op->count > info->n_elements)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): %s, buffer %d “%s”, has %" PRIu64 " elements; the instruction needs elements %" PRIu64 " to %" PRIu64),
                   queue, pos, name, op->what, ins->buffers[slot], info->name, info->n_elements,
                   op->offset, op->offset + op->count);
      return FALSE;
    }
  return TRUE;
}

/* The bytes an operand covers: scratch buffers share the arena (region -1), any other
 * buffer is its own region. */
static void
operand_bytes (AmkProgram *self, const amk_instruction_t *ins, guint slot, const Operand *op,
               gint64 *region, guint64 *start, guint64 *length)
{
  AmkBufferInfo *info = slot_info (self, ins, slot);
  guint esize = amk_dtype_size (info->dtype);

  *region = info->role == AMK_BUFFER_ROLE_SCRATCH ? -1 : ins->buffers[slot];
  *start = (info->role == AMK_BUFFER_ROLE_SCRATCH ? info->arena_offset : 0) + op->offset * esize;
  *length = op->count * esize;
}

/* Operand a (written) against operand b. in_place_ok: a may cover exactly b's bytes with
 * b's dtype. */
static gboolean
check_overlap (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
               guint sa, const Operand *a, guint sb, const Operand *b, gboolean in_place_ok,
               GError **error)
{
  gint64 ra, rb;
  guint64 s0, s1, l0, l1;

  operand_bytes (self, ins, sa, a, &ra, &s0, &l0);
  operand_bytes (self, ins, sb, b, &rb, &s1, &l1);
  if (ra != rb || l0 == 0 || l1 == 0 || s0 + l0 <= s1 || s1 + l1 <= s0)
    return TRUE;
  if (in_place_ok && s0 == s1 && l0 == l1 &&
      slot_info (self, ins, sa)->dtype == slot_info (self, ins, sb)->dtype)
    return TRUE;
  if (b->written)
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                 _("Queue %u instruction %u (%s): the outputs “%s” and “%s” overlap"),
                 queue, pos, vector_op_name (ins->opcode),
                 slot_info (self, ins, sa)->name, slot_info (self, ins, sb)->name);
  else if (in_place_ok)
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                 _("Queue %u instruction %u (%s): the output “%s” partly overlaps %s “%s”; use separate buffers or the very same elements"),
                 queue, pos, vector_op_name (ins->opcode),
                 slot_info (self, ins, sa)->name, b->what, slot_info (self, ins, sb)->name);
  else
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                 _("Queue %u instruction %u (%s): the output “%s” overlaps %s “%s”; the output must not share memory with an input"),
                 queue, pos, vector_op_name (ins->opcode),
                 slot_info (self, ins, sa)->name, b->what, slot_info (self, ins, sb)->name);
  return FALSE;
}

static gboolean
params_out_of_range (guint queue, guint pos, const amk_instruction_t *ins, GError **error)
{
  const gint32 *i = ins->params.i;

  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
               _("Queue %u instruction %u (%s): the parameters %d, %d, %d, %d are out of range"),
               queue, pos, vector_op_name (ins->opcode), i[0], i[1], i[2], i[3]);
  return FALSE;
}

gboolean
amk_verify_vector_op (AmkProgram              *self,
                      guint                    queue,
                      guint                    pos,
                      const amk_instruction_t *ins,
                      GError                 **error)
{
  const gint32 *i = ins->params.i;
  Operand ops[3] = { { 0 } };
  gboolean in_place_ok = FALSE;

  switch (ins->opcode)
    {
    case AMK_ABI_OP_RMSNORM:
      {
        /* n = i0, vectors i1 .. i1 + i2; out[v n + c], x[v n + c], w[c] */
        const float eps = ins->params.f[3];
        if (i[0] < 1 || i[1] < 0 || i[2] < 0)
          return params_out_of_range (queue, pos, ins, error);
        if (!(eps >= 0.0f && isfinite (eps)))
          {
            g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                         _("Queue %u instruction %u (%s): the epsilon must be finite and not negative"),
                         queue, pos, "RMSNORM");
            return FALSE;
          }
        ops[0] = (Operand) { _("the output"), VEC_DTYPES, (guint64) i[1] * i[0], (guint64) i[2] * i[0] };
        ops[1] = (Operand) { _("the input"), VEC_DTYPES, (guint64) i[1] * i[0], (guint64) i[2] * i[0] };
        ops[2] = (Operand) { _("the weight"), VEC_DTYPES, 0, (guint64) i[0] };
        in_place_ok = TRUE;
        break;
      }
    case AMK_ABI_OP_SILU_MUL:
      if (i[0] < 0 || i[1] < 0)
        return params_out_of_range (queue, pos, ins, error);
      ops[0] = (Operand) { _("the output"), VEC_DTYPES, (guint64) i[0], (guint64) i[1] };
      ops[1] = (Operand) { _("the gate"), VEC_DTYPES, (guint64) i[0], (guint64) i[1] };
      ops[2] = (Operand) { _("the up projection"), VEC_DTYPES, (guint64) i[0], (guint64) i[1] };
      break;
    case AMK_ABI_OP_EMBED:
      {
        /* the row is chosen on the device: the output must stay clear of the whole table,
         * which must hold at least one row */
        AmkBufferInfo *table = slot_info (self, ins, 1);
        if (i[0] < 0 || i[1] < 0 || i[2] < 0 || i[3] < 1 || (gint64) i[1] + i[2] > i[3])
          return params_out_of_range (queue, pos, ins, error);
        ops[0] = (Operand) { _("the output"), VEC_DTYPES, (guint64) i[1], (guint64) i[2] };
        ops[1] = (Operand) { _("the table"), TABLE_DTYPES, 0, MAX (table->n_elements, (guint64) i[3]) };
        ops[2] = (Operand) { _("the tokens"), I32_ONLY, (guint64) i[0], 1 };
        break;
      }
    case AMK_ABI_OP_ARGMAX_PARTIAL:
      /* every index i0 + k must fit the I32 idx */
      if (i[0] < 0 || i[1] < 1 || i[2] < 0 || (gint64) i[0] + i[1] > (gint64) G_MAXINT32 + 1)
        return params_out_of_range (queue, pos, ins, error);
      ops[0] = (Operand) { _("the values"), F32_ONLY, (guint64) i[2], 1 };
      ops[1] = (Operand) { _("the indices"), I32_ONLY, (guint64) i[2], 1 };
      ops[2] = (Operand) { _("the input"), VEC_DTYPES, (guint64) i[0], (guint64) i[1] };
      break;
    case AMK_ABI_OP_ARGMAX_FINAL:
      if (i[0] < 1 || i[1] < 0)
        return params_out_of_range (queue, pos, ins, error);
      ops[0] = (Operand) { _("the output"), I32_ONLY, (guint64) i[1], 1 };
      ops[1] = (Operand) { _("the values"), F32_ONLY, 0, (guint64) i[0] };
      ops[2] = (Operand) { _("the indices"), I32_ONLY, 0, (guint64) i[0] };
      break;
    default:
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u has the unknown opcode %u"),
                   queue, pos, ins->opcode);
      return FALSE;
    }

  const guint written = amk_abi_written_slots (ins->opcode, ins->n_buffers);
  for (guint s = 0; s < 3; s++)
    {
      ops[s].written = (written >> s) & 1u;
      if (!check_operand (self, queue, pos, ins, s, &ops[s], error))
        return FALSE;
    }
  for (guint a = 0; a < 3; a++)
    {
      if (!ops[a].written)
        continue;
      for (guint b = a + 1; b < 3; b++)
        if (!check_overlap (self, queue, pos, ins, a, &ops[a], b, &ops[b],
                            in_place_ok && a == 0 && b == 1, error))
          return FALSE;
    }
  return TRUE;
}
