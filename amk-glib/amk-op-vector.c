/* amk-op-vector.c: the vector ops RMSNORM, SILU_MUL, EMBED, ARGMAX_PARTIAL and
 * ARGMAX_FINAL (their parameters in kernels/amk-abi.h, the device side in
 * kernels/ops-vector.cuh).
 *
 * The verifier checks the parameters, the dtype of every operand, the element range of
 * every operand (64-bit arithmetic), no write to a CONSTANT buffer, and aliasing: an
 * output shares no byte with an input or another output, except that RMSNORM's output
 * may be its input itself (in place: the very same elements). Scratch buffers share the
 * arena, so for them the bytes compared are arena offsets. The CPU reference is
 * obviously correct before fast: one element at a time, fp32 arithmetic,
 * round-to-nearest-even stores.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <glib/gi18n-lib.h>

#include "amk-program.h"
#include "amk-op-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

/* ---- the op API --------------------------------------------------------------------- */

/**
 * amk_program_op_rmsnorm:
 * @self: a program
 * @out: the output, the size of @x (f32 or bf16); may be @x (in place)
 * @x: the input: one vector of @n elements, or several (one per head)
 * @weight: the scale, @n elements
 * @n: the length of each normalised vector
 * @eps: added to the mean square
 * @error: return location for a #GError
 *
 * Records `out[v] = x[v] / sqrt(mean(x[v]²) + eps) * weight` for every vector `v` of @n
 * elements of @x: the whole hidden state, or every head (Qwen3's q/k norm).
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_rmsnorm (AmkProgram  *self,
                        gint         out,
                        gint         x,
                        gint         weight,
                        guint        n,
                        gfloat       eps,
                        GError     **error)
{
  AmkBufferInfo *xi;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "RMSNORM", error) ||
      !amk_op_vector_of (self, "RMSNORM", _("the input"), x, 0, &xi, error))
    return -1;
  if (n == 0 || xi->n_elements % n != 0 || !(eps >= 0.0f && eps < G_MAXFLOAT))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("RMSNORM: “%s” (%" PRIu64 " elements) is not made of vectors of %u, or the epsilon is not finite"),
                   xi->name, xi->n_elements, n);
      return -1;
    }
  if (!amk_op_vector_of (self, "RMSNORM", _("the output"), out, xi->n_elements, NULL, error) ||
      !amk_op_vector_of (self, "RMSNORM", _("the weight"), weight, n, NULL, error) ||
      !amk_op_writable ("RMSNORM", amk_program_get_buffer_info (self, out), error))
    return -1;
  return amk_op_record (self, AMK_ABI_OP_RMSNORM, (gint32[]) { out, x, weight, G_MININT32 },
                 &(amk_params_t) { .rmsnorm = { .n = (gint32) n, .eps = eps } });
}

/**
 * amk_program_op_silu_mul:
 * @self: a program
 * @out: the output
 * @gate: f32 or bf16, the size of @out
 * @up: f32 or bf16, the size of @out
 * @error: return location for a #GError
 *
 * Records `out = silu(gate) * up` elementwise (SwiGLU), `silu(g) = g / (1 + e^-g)`.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_silu_mul (AmkProgram  *self,
                         gint         out,
                         gint         gate,
                         gint         up,
                         GError     **error)
{
  AmkBufferInfo *oi;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "SILU_MUL", error) ||
      !amk_op_vector_of (self, "SILU_MUL", _("the output"), out, 0, &oi, error) ||
      !amk_op_vector_of (self, "SILU_MUL", _("the gate"), gate, oi->n_elements, NULL, error) ||
      !amk_op_vector_of (self, "SILU_MUL", _("the up projection"), up, oi->n_elements, NULL, error) ||
      !amk_op_writable ("SILU_MUL", oi, error))
    return -1;
  if (out == gate || out == up)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("SILU_MUL: the output “%s” is also an input"), oi->name);
      return -1;
    }
  return amk_op_record (self, AMK_ABI_OP_SILU_MUL, (gint32[]) { out, gate, up, G_MININT32 }, NULL);
}

/**
 * amk_program_op_embed:
 * @self: a program
 * @out: the output row (f32 or bf16), one element per column of @table
 * @table: the embedding table, 2-D `[vocab, hidden]` (bf16, f16, f32, or a
 *   block-quantized type where the executor runs it)
 * @tokens: an i32 buffer holding token ids
 * @token_index: which element of @tokens to look up, read on the device when the
 *   instruction runs (the previous step's ARGMAX can write it there)
 * @error: return location for a #GError
 *
 * Records `out = table[tokens[token_index]]`. A token id outside the table aborts the
 * launch with %AMK_ABORT_CODE_CHECK.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_embed (AmkProgram  *self,
                      gint         out,
                      gint         table,
                      gint         tokens,
                      guint        token_index,
                      GError     **error)
{
  AmkBufferInfo *ti;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "EMBED", error) ||
      (ti = amk_op_tensor (self, "EMBED", _("the table"), table, error)) == NULL)
    return -1;
  if (ti->n_dims != 2 || ti->dtype == AMK_DTYPE_I32 || ti->dtype == AMK_DTYPE_U8)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("EMBED: the table “%s” must be 2-D bf16, f16, f32 or block-quantized"), ti->name);
      return -1;
    }
  if (!amk_op_vector_of (self, "EMBED", _("the output"), out, ti->shape[1], NULL, error) ||
      !amk_op_int_tensor (self, "EMBED", _("the tokens"), tokens, (guint64) token_index + 1, error) ||
      !amk_op_writable ("EMBED", amk_program_get_buffer_info (self, out), error))
    return -1;
  return amk_op_record (self, AMK_ABI_OP_EMBED, (gint32[]) { out, table, tokens, G_MININT32 },
                 &(amk_params_t) { .embed = { .token_index = (gint32) token_index,
                                              .dim = (gint32) ti->shape[1] } });
}

/**
 * amk_program_op_embed_rows:
 * @self: a program
 * @out: the output rows (f32 or bf16), `[M, hidden]`: one row per token
 * @table: the embedding table, 2-D `[vocab, hidden]` (bf16, f16, f32, or a
 *   block-quantized type where the executor runs it)
 * @tokens: an i32 buffer of M token ids, read on the device
 * @error: return location for a #GError
 *
 * Records `out[j] = table[tokens[j]]` for every element `j` of @tokens: the embedding of
 * a chunk of a prompt, or of one token of each of several sequences. A token id outside
 * the table aborts the launch with %AMK_ABORT_CODE_CHECK.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_embed_rows (AmkProgram  *self,
                           gint         out,
                           gint         table,
                           gint         tokens,
                           GError     **error)
{
  AmkBufferInfo *ti, *tok;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "EMBED", error) ||
      (ti = amk_op_tensor (self, "EMBED", _("the table"), table, error)) == NULL ||
      (tok = amk_op_tensor (self, "EMBED", _("the tokens"), tokens, error)) == NULL)
    return -1;
  if (ti->n_dims != 2 || ti->dtype == AMK_DTYPE_I32 || ti->dtype == AMK_DTYPE_U8)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("EMBED: the table “%s” must be 2-D bf16, f16, f32 or block-quantized"), ti->name);
      return -1;
    }
  if (tok->dtype != AMK_DTYPE_I32 || tok->n_elements > G_MAXINT32)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("EMBED: the tokens “%s” must be i32 with at most %d elements"), tok->name, G_MAXINT32);
      return -1;
    }
  if (!amk_op_vector_of (self, "EMBED", _("the output"), out, tok->n_elements * ti->shape[1], NULL, error) ||
      !amk_op_writable ("EMBED", amk_program_get_buffer_info (self, out), error))
    return -1;
  return amk_op_record (self, AMK_ABI_OP_EMBED, (gint32[]) { out, table, tokens, G_MININT32 },
                 &(amk_params_t) { .embed = { .dim = (gint32) ti->shape[1],
                                              .n_tokens = (gint32) tok->n_elements } });
}

/* Records out[out_index + r] = argmax of row r of logits, for rows of `row_len`
 * elements (all of logits when rows is 1): one partial op whose tiles are spread over the
 * queues, the same number per row, and a final op per row over that row's partials. */
static gint
record_argmax (AmkProgram  *self,
               gint         out,
               guint        out_index,
               gint         logits,
               guint64      rows,
               guint64      row_len,
               GError     **error)
{
  guint64 per_row;
  gint val, idx, index = -1;

  per_row = MAX (1, MIN ((guint64) self->num_queues, rows * row_len / 1024) / rows);
  if ((val = amk_op_internal_scratch (self, "argmax-values", AMK_DTYPE_F32, rows * per_row, error)) < 0 ||
      (idx = amk_op_internal_scratch (self, "argmax-indices", AMK_DTYPE_I32, rows * per_row, error)) < 0)
    return -1;
  amk_op_record (self, AMK_ABI_OP_ARGMAX_PARTIAL, (gint32[]) { val, idx, logits, G_MININT32 },
                 &(amk_params_t) { .argmax_partial = { .count = rows > 1 ? (gint32) row_len : 0 } });
  for (guint64 r = 0; r < rows; r++)
    index = amk_op_record (self, AMK_ABI_OP_ARGMAX_FINAL, (gint32[]) { out, val, idx, G_MININT32 },
                           &(amk_params_t) { .argmax_final = { .n_partials = (gint32) per_row,
                                                               .out_index = (gint32) (out_index + r),
                                                               .first = (gint32) (r * per_row) } });
  return index;
}

/**
 * amk_program_op_argmax:
 * @self: a program
 * @out: an i32 buffer that receives the index
 * @out_index: the element of @out to write (the next token id)
 * @logits: f32 or bf16
 * @error: return location for a #GError
 *
 * Records `out[out_index] = argmax(logits)` (the lowest index on ties; NaN loses):
 * partial maxima over tiles of @logits spread over the queues, then a final pick.
 * Recorded as two ops.
 *
 * Returns: the index of the final op, or -1 with @error set
 */
gint
amk_program_op_argmax (AmkProgram  *self,
                       gint         out,
                       guint        out_index,
                       gint         logits,
                       GError     **error)
{
  AmkBufferInfo *li;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "ARGMAX", error) ||
      !amk_op_vector_of (self, "ARGMAX", _("the logits"), logits, 0, &li, error) ||
      !amk_op_int_tensor (self, "ARGMAX", _("the output"), out, (guint64) out_index + 1, error) ||
      !amk_op_writable ("ARGMAX", amk_program_get_buffer_info (self, out), error))
    return -1;
  return record_argmax (self, out, out_index, logits, 1, li->n_elements, error);
}

/**
 * amk_program_op_argmax_rows:
 * @self: a program
 * @out: an i32 buffer of at least as many elements as @logits has rows
 * @logits: f32 or bf16 `[rows, n]`
 * @error: return location for a #GError
 *
 * Records `out[r] = argmax(logits[r])` for every row r, the index within the row (the
 * lowest on ties; NaN loses): the next token of each sequence of a batch, one per row
 * of logits. Recorded as a partial op and a final op per row.
 *
 * Returns: the index of the last final op, or -1 with @error set
 */
gint
amk_program_op_argmax_rows (AmkProgram  *self,
                            gint         out,
                            gint         logits,
                            GError     **error)
{
  AmkBufferInfo *li;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "ARGMAX", error) ||
      !amk_op_vector_of (self, "ARGMAX", _("the logits"), logits, 0, &li, error))
    return -1;
  if (li->n_dims != 2 || li->shape[1] > G_MAXINT32)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("ARGMAX: the logits “%s” must be a matrix [rows, n] of rows of fewer than 2^31 elements"),
                   li->name);
      return -1;
    }
  if (!amk_op_int_tensor (self, "ARGMAX", _("the output"), out, (guint64) li->shape[0], error) ||
      !amk_op_writable ("ARGMAX", amk_program_get_buffer_info (self, out), error))
    return -1;
  return record_argmax (self, out, 0, logits, (guint64) li->shape[0], (guint64) li->shape[1], error);
}

/* ---- verifier ----------------------------------------------------------------------- */

#define VEC_DTYPES   ((1u << AMK_DTYPE_F32) | (1u << AMK_DTYPE_BF16))
#define TABLE_DTYPES (VEC_DTYPES | (1u << AMK_DTYPE_F16) | AMK_DTYPE_BLOCK_MASK)
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
  const char *name = amk_op_name (ins->opcode);

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

  *region = info->role == AMK_BUFFER_ROLE_SCRATCH ? -1 : ins->buffers[slot];
  *start = (info->role == AMK_BUFFER_ROLE_SCRATCH ? info->arena_offset : 0) +
           amk_dtype_bytes (info->dtype, op->offset);
  *length = amk_dtype_bytes (info->dtype, op->count);
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
                 queue, pos, amk_op_name (ins->opcode),
                 slot_info (self, ins, sa)->name, slot_info (self, ins, sb)->name);
  else if (in_place_ok)
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                 _("Queue %u instruction %u (%s): the output “%s” partly overlaps %s “%s”; use separate buffers or the very same elements"),
                 queue, pos, amk_op_name (ins->opcode),
                 slot_info (self, ins, sa)->name, b->what, slot_info (self, ins, sb)->name);
  else
    g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                 _("Queue %u instruction %u (%s): the output “%s” overlaps %s “%s”; the output must not share memory with an input"),
                 queue, pos, amk_op_name (ins->opcode),
                 slot_info (self, ins, sa)->name, b->what, slot_info (self, ins, sb)->name);
  return FALSE;
}

static gboolean
params_out_of_range (guint queue, guint pos, const amk_instruction_t *ins, GError **error)
{
  g_autofree char *params = amk_op_describe_params (ins);

  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
               _("Queue %u instruction %u (%s): the parameters (%s) are out of range"),
               queue, pos, amk_op_name (ins->opcode), params);
  return FALSE;
}

/* The checks of every vector op: its parameters, then each operand's dtype, range and
 * aliasing. */
static gboolean
verify_vector (AmkProgram              *self,
               guint                    queue,
               guint                    pos,
               const amk_instruction_t *ins,
               GError                 **error)
{
  const amk_params_t *p = &ins->params;
  Operand ops[3] = { { 0 } };
  gboolean in_place_ok = FALSE;

  switch (ins->opcode)
    {
    case AMK_ABI_OP_RMSNORM:
      {
        /* vectors vec0 .. vec0 + n_vecs of n; out[v n + c], x[v n + c], w[c] */
        const amk_rmsnorm_params_t *r = &p->rmsnorm;
        const float eps = r->eps;
        if (r->n < 1 || r->vec0 < 0 || r->n_vecs < 0)
          return params_out_of_range (queue, pos, ins, error);
        if (!(eps >= 0.0f && isfinite (eps)))
          {
            g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                         _("Queue %u instruction %u (%s): the epsilon must be finite and not negative"),
                         queue, pos, "RMSNORM");
            return FALSE;
          }
        ops[0] = (Operand) { _("the output"), VEC_DTYPES, (guint64) r->vec0 * r->n, (guint64) r->n_vecs * r->n };
        ops[1] = (Operand) { _("the input"), VEC_DTYPES, (guint64) r->vec0 * r->n, (guint64) r->n_vecs * r->n };
        ops[2] = (Operand) { _("the weight"), VEC_DTYPES, 0, (guint64) r->n };
        in_place_ok = TRUE;
        break;
      }
    case AMK_ABI_OP_SILU_MUL:
      if (p->silu_mul.offset < 0 || p->silu_mul.count < 0)
        return params_out_of_range (queue, pos, ins, error);
      ops[0] = (Operand) { _("the output"), VEC_DTYPES, (guint64) p->silu_mul.offset, (guint64) p->silu_mul.count };
      ops[1] = (Operand) { _("the gate"), VEC_DTYPES, (guint64) p->silu_mul.offset, (guint64) p->silu_mul.count };
      ops[2] = (Operand) { _("the up projection"), VEC_DTYPES, (guint64) p->silu_mul.offset, (guint64) p->silu_mul.count };
      break;
    case AMK_ABI_OP_EMBED:
      {
        /* the row is chosen on the device: the output must stay clear of the whole table,
         * which must hold at least one row */
        AmkBufferInfo *table = slot_info (self, ins, 1);
        const amk_embed_params_t *e = &p->embed;
        /* n_tokens rows j = token_index ..: out[j dim + col0 ..]; n_tokens 0 is one token
         * into out[col0 ..] */
        const guint64 rows = MAX (e->n_tokens, 1);
        const guint64 first = e->n_tokens > 0 ? (guint64) e->token_index * (guint64) e->dim : 0;
        if (e->token_index < 0 || e->col0 < 0 || e->n_cols < 0 || e->dim < 1 || e->n_tokens < 0 ||
            (gint64) e->col0 + e->n_cols > e->dim)
          return params_out_of_range (queue, pos, ins, error);
        ops[0] = (Operand) { _("the output"), VEC_DTYPES, first + (guint64) e->col0,
                             (rows - 1) * (guint64) e->dim + (guint64) e->n_cols };
        ops[1] = (Operand) { _("the table"), TABLE_DTYPES, 0, MAX (table->n_elements, (guint64) e->dim) };
        ops[2] = (Operand) { _("the tokens"), I32_ONLY, (guint64) e->token_index, rows };
        break;
      }
    case AMK_ABI_OP_ARGMAX_PARTIAL:
      {
        /* every index offset + k must fit the I32 idx */
        const amk_argmax_partial_params_t *a = &p->argmax_partial;
        if (a->offset < 0 || a->count < 1 || a->slot < 0 || a->index_base < 0 ||
            a->index_base > a->offset ||
            (gint64) a->offset + a->count > (gint64) G_MAXINT32 + 1)
          return params_out_of_range (queue, pos, ins, error);
        ops[0] = (Operand) { _("the values"), F32_ONLY, (guint64) a->slot, 1 };
        ops[1] = (Operand) { _("the indices"), I32_ONLY, (guint64) a->slot, 1 };
        ops[2] = (Operand) { _("the input"), VEC_DTYPES, (guint64) a->offset, (guint64) a->count };
      }
      break;
    case AMK_ABI_OP_ARGMAX_FINAL:
      if (p->argmax_final.n_partials < 1 || p->argmax_final.out_index < 0 ||
          p->argmax_final.first < 0)
        return params_out_of_range (queue, pos, ins, error);
      ops[0] = (Operand) { _("the output"), I32_ONLY, (guint64) p->argmax_final.out_index, 1 };
      ops[1] = (Operand) { _("the values"), F32_ONLY, (guint64) p->argmax_final.first,
                           (guint64) p->argmax_final.n_partials };
      ops[2] = (Operand) { _("the indices"), I32_ONLY, (guint64) p->argmax_final.first,
                           (guint64) p->argmax_final.n_partials };
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

/* ---- lowering and cost -------------------------------------------------------------- */

/* vectors (heads), one tile per queue at most */
static void
plan_rmsnorm (AmkLowering *lw)
{
  lw->n = amk_lower_buffer (lw, lw->op->buffers[1])->n_elements / lw->op->params.rmsnorm.n;
  lw->n_tiles = MIN (lw->n, (guint64) lw->program->num_queues);
}

static void
lower_rmsnorm (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const guint64 len = op->params.rmsnorm.n;

  amk_tile_use_buffers (t, op, 3);
  t->ins.params.rmsnorm.vec0 = (gint32) t->start;
  t->ins.params.rmsnorm.n_vecs = (gint32) (t->end - t->start);
  amk_tile_access (t, op->buffers[0], t->start * len, t->end * len, TRUE);
  amk_tile_access (t, op->buffers[1], t->start * len, t->end * len, FALSE);
  amk_tile_access (t, op->buffers[2], 0, len, FALSE);
}

static double
bytes_rmsnorm (AmkProgram *self, const amk_instruction_t *ins)
{
  return 2.0 * 4 * MAX (ins->params.rmsnorm.n, 0) * MAX (ins->params.rmsnorm.n_vecs, 0);
}

/* Tiles start at multiples of SILU_MUL_GRANULE elements: the device reads and writes 16
 * bytes at a time only where all three operands are 16-byte aligned. */
#define SILU_MUL_GRANULE 8u

static void
plan_silu_mul (AmkLowering *lw)
{
  const guint64 n = amk_lower_buffer (lw, lw->op->buffers[0])->n_elements;

  lw->n = (n + SILU_MUL_GRANULE - 1) / SILU_MUL_GRANULE;
  lw->n_tiles = MAX (1, MIN ((guint64) lw->program->num_queues, n / AMK_ELEMENTWISE_MIN_TILE));
  lw->n_tiles = MIN (lw->n_tiles, lw->n);
}

static void
lower_silu_mul (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const guint64 n = amk_lower_buffer (lw, op->buffers[0])->n_elements;
  const guint64 start = t->start * SILU_MUL_GRANULE, end = MIN (t->end * SILU_MUL_GRANULE, n);

  amk_tile_use_buffers (t, op, 3);
  t->ins.params.silu_mul.offset = (gint32) start;
  t->ins.params.silu_mul.count = (gint32) (end - start);
  amk_tile_access (t, op->buffers[0], start, end, TRUE);
  amk_tile_access (t, op->buffers[1], start, end, FALSE);
  amk_tile_access (t, op->buffers[2], start, end, FALSE);
}

static double
bytes_silu_mul (AmkProgram *self, const amk_instruction_t *ins)
{
  return 3.0 * 4 * MAX (ins->params.silu_mul.count, 0);
}

/* One token: columns of the row, at least 256 per tile. Many tokens (op_embed_rows):
 * whole rows, about n_tokens / queues per tile. */
static void
plan_embed (AmkLowering *lw)
{
  const gint32 n_tokens = lw->op->params.embed.n_tokens;

  if (n_tokens > 0)
    {
      lw->n = n_tokens;
      lw->n_tiles = MIN (lw->n, (guint64) lw->program->num_queues);
      return;
    }
  lw->n = amk_lower_buffer (lw, lw->op->buffers[1])->shape[1];
  lw->n_tiles = MAX (1, MIN ((guint64) lw->program->num_queues, lw->n / 256));
}

static void
lower_embed (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const gint32 token = op->params.embed.token_index, dim = op->params.embed.dim;

  amk_tile_use_buffers (t, op, 3);
  amk_tile_access (t, op->buffers[1], 0, amk_lower_buffer (lw, op->buffers[1])->n_elements, FALSE);
  if (op->params.embed.n_tokens > 0)
    {
      t->ins.params.embed.token_index = (gint32) t->start;
      t->ins.params.embed.n_tokens = (gint32) (t->end - t->start);
      t->ins.params.embed.n_cols = dim;
      amk_tile_access (t, op->buffers[0], t->start * dim, t->end * dim, TRUE);
      amk_tile_access (t, op->buffers[2], t->start, t->end, FALSE);
      return;
    }
  t->ins.params.embed.col0 = (gint32) t->start;
  t->ins.params.embed.n_cols = (gint32) (t->end - t->start);
  amk_tile_access (t, op->buffers[0], t->start, t->end, TRUE);
  amk_tile_access (t, op->buffers[2], token, token + 1, FALSE);
}

static double
bytes_embed (AmkProgram *self, const amk_instruction_t *ins)
{
  return 2.0 * 4 * MAX (ins->params.embed.n_cols, 0) * MAX (ins->params.embed.n_tokens, 1);
}

/* One tile per slot of the partial values and indices. The op's count is the length of
 * a row of x (0: x is one row): the slots are the rows' in order, the same number per
 * row, so that the even split never lets a tile cross a row's end. */
static void
plan_argmax_partial (AmkLowering *lw)
{
  lw->n = amk_lower_buffer (lw, lw->op->buffers[2])->n_elements;
  lw->n_tiles = amk_lower_buffer (lw, lw->op->buffers[0])->n_elements;
}

static void
lower_argmax_partial (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const guint64 row = (guint64) op->params.argmax_partial.count;

  amk_tile_use_buffers (t, op, 3);
  t->ins.params.argmax_partial.offset = (gint32) t->start;
  t->ins.params.argmax_partial.count = (gint32) (t->end - t->start);
  t->ins.params.argmax_partial.slot = (gint32) tile;
  t->ins.params.argmax_partial.index_base = row > 0 ? (gint32) (t->start / row * row) : 0;
  amk_tile_access (t, op->buffers[0], tile, tile + 1, TRUE);
  amk_tile_access (t, op->buffers[1], tile, tile + 1, TRUE);
  amk_tile_access (t, op->buffers[2], t->start, t->end, FALSE);
}

static double
bytes_argmax_partial (AmkProgram *self, const amk_instruction_t *ins)
{
  return 4.0 * MAX (ins->params.argmax_partial.count, 0);
}

static void
plan_one_tile (AmkLowering *lw)
{
  lw->n = lw->n_tiles = 1;
}

static void
lower_argmax_final (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const amk_argmax_final_params_t *fp = &op->params.argmax_final;

  amk_tile_use_buffers (t, op, 3);
  amk_tile_access (t, op->buffers[0], fp->out_index, fp->out_index + 1, TRUE);
  amk_tile_access (t, op->buffers[1], fp->first, fp->first + fp->n_partials, FALSE);
  amk_tile_access (t, op->buffers[2], fp->first, fp->first + fp->n_partials, FALSE);
}

/* ---- CPU reference ------------------------------------------------------------------ */





/* out[v n + c] = x[v n + c] / sqrt(mean_c x[v n + c]^2 + eps) * w[c], v = vec0 .. vec0 + n_vecs.
 * The sum of squares is taken before any element of the vector is written, so out may be
 * x itself. Same arithmetic as MATVEC's fused norm: scale = 1 / sqrtf (sum / n + eps),
 * then x * scale * w. */
static AmkAbortCode
run_rmsnorm (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_rmsnorm_params_t *p = &ins->params.rmsnorm;
  const gint32 n = p->n, v0 = p->vec0, nv = p->n_vecs;
  const float eps = p->eps;
  AmkCpuBuffer *out = &b[ins->buffers[0]], *x = &b[ins->buffers[1]], *w = &b[ins->buffers[2]];

  for (gint64 v = v0; v < (gint64) v0 + nv; v++)
    {
      const guint64 base = (guint64) v * (guint64) n;
      float sum = 0.0f, scale;

      for (gint32 c = 0; c < n; c++)
        {
          float e = amk_cpu_load (x, base + c);
          sum += e * e;
        }
      scale = 1.0f / sqrtf (sum / (float) n + eps);
      for (gint32 c = 0; c < n; c++)
        amk_cpu_store (out, base + c, amk_cpu_load (x, base + c) * scale * amk_cpu_load (w, c));
    }
  return AMK_ABORT_CODE_NONE;
}

/* out[offset + k] = silu(gate[offset + k]) * up[offset + k], silu(g) = g / (1 + e^-g). */
static AmkAbortCode
run_silu_mul (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const guint64 off = (guint64) ins->params.silu_mul.offset;
  AmkCpuBuffer *out = &b[ins->buffers[0]], *gate = &b[ins->buffers[1]], *up = &b[ins->buffers[2]];

  for (gint32 k = 0; k < ins->params.silu_mul.count; k++)
    {
      float g = amk_cpu_load (gate, off + k);
      amk_cpu_store (out, off + k, g / (1.0f + expf (-g)) * amk_cpu_load (up, off + k));
    }
  return AMK_ABORT_CODE_NONE;
}

/* out[col0 + c] = table[t dim + col0 + c], c < n_cols, t = tokens[token_index]; a token outside
 * [0, vocab) aborts with CHECK, detail = the tokens' buffer index. Equal dtypes copy the
 * bits (what the GPU does); otherwise load as fp32 (decoding a quantized table's blocks)
 * and round. */
static AmkAbortCode
run_embed (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_embed_params_t *p = &ins->params.embed;
  const gint32 col = p->col0, count = p->n_cols, row_len = p->dim;
  const gint64 first = p->token_index, end = first + MAX (p->n_tokens, 1);
  AmkCpuBuffer *out = &b[ins->buffers[0]], *table = &b[ins->buffers[1]], *tokens = &b[ins->buffers[2]];
  const guint64 vocab = table->info->n_elements / (guint64) row_len;
  g_autofree float *rows = NULL;
  guint block, block_bytes;

  for (gint64 j = first; j < end; j++)
    {
      const gint32 t = amk_cpu_load_i32 (tokens, (guint64) j);
      if (t < 0 || (guint64) t >= vocab)
        {
          *detail = ins->buffers[2];
          return AMK_ABORT_CODE_CHECK;
        }
    }
  for (gint64 j = first; j < end; j++)
    {
      /* n_tokens 0: one token into out[col0 ..] */
      const guint64 dst = (p->n_tokens > 0 ? (guint64) j * (guint64) row_len : 0) + (guint64) col;
      const guint64 src = (guint64) amk_cpu_load_i32 (tokens, (guint64) j) * (guint64) row_len + (guint64) col;

      if (amk_dtype_block (table->info->dtype, &block, &block_bytes))
        {
          /* the whole blocks that hold the columns, decoded */
          const guint64 from = src / block * block, to = (src + (guint64) count + block - 1) / block * block;

          rows = g_renew (float, rows, to - from);
          amk_dtype_dequantize (table->info->dtype, table->data, from, to - from, rows);
          for (gint32 c = 0; c < count; c++)
            amk_cpu_store (out, dst + c, rows[src - from + c]);
        }
      else if (out->info->dtype == table->info->dtype)
        {
          guint es = amk_dtype_size (out->info->dtype);
          memcpy (out->data + dst * es, table->data + src * es, (gsize) count * es);
        }
      else
        for (gint32 c = 0; c < count; c++)
          amk_cpu_store (out, dst + c, amk_cpu_load (table, src + c));
    }
  return AMK_ABORT_CODE_NONE;
}

/* (a, ia) beats (b, ib): the larger value; NaN is smaller than everything (also -inf);
 * equal values (+0 and -0 too) and two NaNs go to the lower index. */
static gboolean
beats (float a, gint64 ia, float b, gint64 ib)
{
  if (isnan (a))
    return isnan (b) && ia < ib;
  if (isnan (b))
    return TRUE;
  if (a != b)
    return a > b;
  return ia < ib;
}

/* val[slot], idx[slot] = the largest x[offset + k], k < count, and its index offset + k. */
static AmkAbortCode
run_argmax_partial (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_argmax_partial_params_t *p = &ins->params.argmax_partial;
  const gint32 off = p->offset, count = p->count, slot = p->slot;
  AmkCpuBuffer *val = &b[ins->buffers[0]], *idx = &b[ins->buffers[1]], *x = &b[ins->buffers[2]];
  float best = amk_cpu_load (x, (guint64) off);
  gint64 best_i = off;

  for (gint64 i = (gint64) off + 1; i < (gint64) off + count; i++)
    {
      float e = amk_cpu_load (x, (guint64) i);
      if (beats (e, i, best, best_i))
        best = e, best_i = i;
    }
  amk_cpu_store (val, (guint64) slot, best);
  amk_cpu_store_i32 (idx, (guint64) slot, (gint32) (best_i - p->index_base));
  return AMK_ABORT_CODE_NONE;
}

/* out[out_index] = idx[j] of the largest val[j], first <= j < first + n_partials, the
 * lowest j on ties. */
static AmkAbortCode
run_argmax_final (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const gint64 first = ins->params.argmax_final.first;
  const gint64 end = first + ins->params.argmax_final.n_partials;
  AmkCpuBuffer *out = &b[ins->buffers[0]], *val = &b[ins->buffers[1]], *idx = &b[ins->buffers[2]];
  float best = amk_cpu_load (val, (guint64) first);
  gint64 best_j = first;

  for (gint64 j = first + 1; j < end; j++)
    {
      float e = amk_cpu_load (val, (guint64) j);
      if (beats (e, j, best, best_j))
        best = e, best_j = j;
    }
  amk_cpu_store_i32 (out, (guint64) ins->params.argmax_final.out_index, amk_cpu_load_i32 (idx, (guint64) best_j));
  return AMK_ABORT_CODE_NONE;
}

/* ---- descriptors -------------------------------------------------------------------- */

static const AmkParamField rmsnorm_fields[] = {
  AMK_PARAM_INT (rmsnorm, n), AMK_PARAM_INT (rmsnorm, vec0), AMK_PARAM_INT (rmsnorm, n_vecs),
  AMK_PARAM_FLOAT (rmsnorm, eps),
};
static const AmkParamField silu_mul_fields[] = {
  AMK_PARAM_INT (silu_mul, offset), AMK_PARAM_INT (silu_mul, count),
};
static const AmkParamField embed_fields[] = {
  AMK_PARAM_INT (embed, token_index), AMK_PARAM_INT (embed, col0), AMK_PARAM_INT (embed, n_cols),
  AMK_PARAM_INT (embed, dim), AMK_PARAM_INT (embed, n_tokens),
};
static const AmkParamField argmax_partial_fields[] = {
  AMK_PARAM_INT (argmax_partial, offset), AMK_PARAM_INT (argmax_partial, count),
  AMK_PARAM_INT (argmax_partial, slot), AMK_PARAM_INT (argmax_partial, index_base),
};
static const AmkParamField argmax_final_fields[] = {
  AMK_PARAM_INT (argmax_final, n_partials), AMK_PARAM_INT (argmax_final, out_index),
  AMK_PARAM_INT (argmax_final, first),
};

/* ---- accesses (the race proof) ------------------------------------------------------ */

static guint
accesses_rmsnorm (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_rmsnorm_params_t *p = &ins->params.rmsnorm;
  const guint64 start = (guint64) p->vec0 * p->n, count = (guint64) p->n_vecs * p->n;
  guint n = 0;

  amk_access_range (out, &n, ins, 0, start, count, AMK_ACCESS_WRITE);
  amk_access_range (out, &n, ins, 1, start, count, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 2, 0, p->n, AMK_ACCESS_READ);
  return n;
}

static guint
accesses_silu_mul (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_silu_mul_params_t *p = &ins->params.silu_mul;
  guint n = 0;

  amk_access_range (out, &n, ins, 0, p->offset, p->count, AMK_ACCESS_WRITE);
  amk_access_range (out, &n, ins, 1, p->offset, p->count, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 2, p->offset, p->count, AMK_ACCESS_READ);
  return n;
}

/* the table's row is the token's, read on the device: every row's columns col0.. */
static guint
accesses_embed (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_embed_params_t *p = &ins->params.embed;
  const guint64 vocab = amk_verify_slot_buffer (self, ins, 1)->n_elements / (guint64) p->dim;
  const guint64 tokens = MAX (p->n_tokens, 1);
  guint n = 0;

  amk_access_rows (out, &n, ins, 0, (guint64) (p->n_tokens > 0 ? p->token_index : 0) * p->dim + p->col0,
                   p->n_cols, p->dim, tokens, AMK_ACCESS_WRITE, FALSE);
  amk_access_rows (out, &n, ins, 1, p->col0, p->n_cols, p->dim, vocab, AMK_ACCESS_READ, TRUE);
  amk_access_range (out, &n, ins, 2, p->token_index, tokens, AMK_ACCESS_READ);
  return n;
}

static guint
accesses_argmax_partial (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_argmax_partial_params_t *p = &ins->params.argmax_partial;
  guint n = 0;

  amk_access_range (out, &n, ins, 0, p->slot, 1, AMK_ACCESS_WRITE);
  amk_access_range (out, &n, ins, 1, p->slot, 1, AMK_ACCESS_WRITE);
  amk_access_range (out, &n, ins, 2, p->offset, p->count, AMK_ACCESS_READ);
  return n;
}

static guint
accesses_argmax_final (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_argmax_final_params_t *p = &ins->params.argmax_final;
  guint n = 0;

  amk_access_range (out, &n, ins, 0, p->out_index, 1, AMK_ACCESS_WRITE);
  amk_access_range (out, &n, ins, 1, p->first, p->n_partials, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 2, p->first, p->n_partials, AMK_ACCESS_READ);
  return n;
}

const AmkOpClass amk_op_rmsnorm = {
  .opcode = AMK_ABI_OP_RMSNORM, .name = "RMSNORM", .n_buffers = 3,
  .fields = AMK_PARAM_FIELDS (rmsnorm_fields),
  .verify = verify_vector, .plan = plan_rmsnorm, .lower = lower_rmsnorm, .accesses = accesses_rmsnorm,
  .bytes = bytes_rmsnorm,
  .run_cpu = run_rmsnorm,
};

/* elementwise; usually fused into the MATVEC that reads it (amk-compiler.c) */
const AmkOpClass amk_op_silu_mul = {
  .opcode = AMK_ABI_OP_SILU_MUL, .name = "SILU_MUL", .n_buffers = 3,
  .fields = AMK_PARAM_FIELDS (silu_mul_fields),
  .verify = verify_vector, .plan = plan_silu_mul, .lower = lower_silu_mul, .accesses = accesses_silu_mul,
  .bytes = bytes_silu_mul,
  .run_cpu = run_silu_mul,
};

const AmkOpClass amk_op_embed = {
  .opcode = AMK_ABI_OP_EMBED, .name = "EMBED", .n_buffers = 3,
  .fields = AMK_PARAM_FIELDS (embed_fields),
  .verify = verify_vector, .plan = plan_embed, .lower = lower_embed, .accesses = accesses_embed,
  .bytes = bytes_embed,
  .run_cpu = run_embed,
};

const AmkOpClass amk_op_argmax_partial = {
  .opcode = AMK_ABI_OP_ARGMAX_PARTIAL, .name = "ARGMAX_PARTIAL", .n_buffers = 3,
  .fields = AMK_PARAM_FIELDS (argmax_partial_fields),
  .verify = verify_vector, .plan = plan_argmax_partial, .lower = lower_argmax_partial,
  .accesses = accesses_argmax_partial, .bytes = bytes_argmax_partial,
  .run_cpu = run_argmax_partial,
};

const AmkOpClass amk_op_argmax_final = {
  .opcode = AMK_ABI_OP_ARGMAX_FINAL, .name = "ARGMAX_FINAL", .n_buffers = 3,
  .fields = AMK_PARAM_FIELDS (argmax_final_fields),
  .verify = verify_vector, .plan = plan_one_tile, .lower = lower_argmax_final,
  .accesses = accesses_argmax_final,
  .run_cpu = run_argmax_final,
};
