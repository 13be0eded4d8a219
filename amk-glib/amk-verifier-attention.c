/* amk-verifier-attention.c: the verifier's checks of the attention ops (ROPE_KV,
 * ATTN_DECODE, ATTN_REDUCE; their contract is in kernels/amk-abi.h). Called once the
 * generic checks passed: buffer indices in range, the right number of buffers. Which
 * operands an op writes comes from amk_abi_written_slots (kernels/amk-abi.h).
 *
 * What an instruction touches, in elements from the start of each buffer (D = i0):
 *   ROPE_KV:     q [i1 D] (read, written), k [i2 D] (read, written), v [i2 D],
 *                k cache and v cache [i3 i2 D] (written), pos [1]
 *   ATTN_DECODE: partial [i1 i6 (D + 2)] (written), q [i1 D], caches [i3 i2 D], pos [1],
 *                with the merge fused out [i1 D] (written) and the arrival counter i8;
 *                with RoPE fused as well qkv [(i1 + 2 i2) D] instead of q, the caches
 *                written, cos_sin [i3 D]
 *   ATTN_REDUCE: out [i1 D] (written), partial [i1 i2 (D + 2)]
 * A written buffer may not share a byte with any other operand's buffer, the whole
 * buffers compared, like the device check (q and k are rotated in place: that is one
 * operand each, not an alias).
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

/* ATTN_DECODE keeps a lane's share of a head (at most 8 elements) in registers. */
#define AMK_ATTN_MAX_HEAD_DIM 256

#define F32_ONLY    (1u << AMK_DTYPE_F32)
#define I32_ONLY    (1u << AMK_DTYPE_I32)
#define CACHE_TYPES ((1u << AMK_DTYPE_F32) | (1u << AMK_DTYPE_BF16))

typedef struct {
  AmkProgram              *self;
  guint                    queue;
  guint                    pos;
  const amk_instruction_t *ins;
  const char              *op;
} Ctx;

typedef struct {
  guint        slot;
  const char  *what;     /* translated role, e.g. "the k cache" */
  guint        dtypes;   /* mask of AmkDType bits */
  guint64      needed;   /* elements from the start of the buffer */
  gboolean     written;  /* from amk_abi_written_slots */
} Operand;

static const char *
attention_op_name (guint opcode)
{
  switch (opcode)
    {
    case AMK_ABI_OP_ROPE_KV:
      return "ROPE_KV";
    case AMK_ABI_OP_ATTN_DECODE:
      return "ATTN_DECODE";
    default:
      return "ATTN_REDUCE";
    }
}

static AmkBufferInfo *
slot_info (const Ctx *c, guint slot)
{
  return g_ptr_array_index (c->self->buffers, c->ins->buffers[slot]);
}

/* a * b * c, saturated at G_MAXUINT64 (every factor is a non-negative int32). */
static guint64
product3 (guint64 a, guint64 b, guint64 c)
{
  guint64 ab, abc;

  if (!g_uint64_checked_mul (&ab, a, b) || !g_uint64_checked_mul (&abc, ab, c))
    return G_MAXUINT64;
  return abc;
}

static gboolean
check_operand (const Ctx *c, const Operand *o, GError **error)
{
  AmkBufferInfo *info = slot_info (c, o->slot);

  if (!(o->dtypes & (1u << info->dtype)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): %s, buffer %d “%s”, cannot be %s"),
                   c->queue, c->pos, c->op, o->what, c->ins->buffers[o->slot], info->name,
                   amk_dtype_name (info->dtype));
      return FALSE;
    }
  if (info->n_elements < o->needed)
    {
      if (o->needed == G_MAXUINT64)
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                     _("Queue %u instruction %u (%s): %s, buffer %d “%s”, would need more than %" PRIu64 " elements"),
                     c->queue, c->pos, c->op, o->what, c->ins->buffers[o->slot], info->name,
                     G_MAXUINT64 - 1);
      else
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                     _("Queue %u instruction %u (%s): %s, buffer %d “%s”, has %" PRIu64 " elements; the instruction needs %" PRIu64),
                     c->queue, c->pos, c->op, o->what, c->ins->buffers[o->slot], info->name,
                     info->n_elements, o->needed);
      return FALSE;
    }
  if (o->written && info->role == AMK_BUFFER_ROLE_CONSTANT)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s) writes %s, buffer %d “%s”, which is constant"),
                   c->queue, c->pos, c->op, o->what, c->ins->buffers[o->slot], info->name);
      return FALSE;
    }
  return TRUE;
}

/* The bytes of an operand's buffer, as (region, start, length): scratch buffers share
 * the arena (region -1), the others are each their own region. */
static void
operand_region (const Ctx *c, const Operand *o, gint64 *region, guint64 *start, guint64 *length)
{
  AmkBufferInfo *info = slot_info (c, o->slot);

  *region = info->role == AMK_BUFFER_ROLE_SCRATCH ? -1 : c->ins->buffers[o->slot];
  *start = info->role == AMK_BUFFER_ROLE_SCRATCH ? info->arena_offset : 0;
  *length = info->size_bytes;
}

static gboolean
check_operands (const Ctx *c, Operand *ops, guint n, GError **error)
{
  const guint written = amk_abi_written_slots (c->ins->opcode, c->ins->n_buffers);

  for (guint i = 0; i < n; i++)
    {
      ops[i].written = (written >> ops[i].slot) & 1u;
      if (!check_operand (c, &ops[i], error))
        return FALSE;
    }

  for (guint i = 0; i < n; i++)
    for (guint j = 0; j < n; j++)
      {
        gint64 ri, rj;
        guint64 si, sj, li, lj;

        if (i == j || !ops[i].written || (ops[j].written && j < i))
          continue;
        operand_region (c, &ops[i], &ri, &si, &li);
        operand_region (c, &ops[j], &rj, &sj, &lj);
        if (ri != rj || li == 0 || lj == 0 || si + li <= sj || sj + lj <= si)
          continue;
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                     _("Queue %u instruction %u (%s): %s, buffer %d “%s”, which it writes, shares memory with %s, buffer %d “%s”; use separate buffers"),
                     c->queue, c->pos, c->op, ops[i].what, c->ins->buffers[ops[i].slot],
                     slot_info (c, ops[i].slot)->name, ops[j].what, c->ins->buffers[ops[j].slot],
                     slot_info (c, ops[j].slot)->name);
        return FALSE;
      }
  return TRUE;
}

/* head_dim (i0) and, unless n_kv < 0, the query and key/value head counts (i1, i2). */
static gboolean
check_heads (const Ctx *c, gint32 head_dim, gint32 max_head_dim, gint32 n_q, gint32 n_kv,
             GError **error)
{
  if (head_dim < 2 || head_dim > max_head_dim)
    {
      if (max_head_dim < G_MAXINT32)
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                     _("Queue %u instruction %u (%s): the head dimension %d is out of range (2 to %d)"),
                     c->queue, c->pos, c->op, head_dim, max_head_dim);
      else
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                     _("Queue %u instruction %u (%s): the head dimension %d is out of range (at least 2)"),
                     c->queue, c->pos, c->op, head_dim);
      return FALSE;
    }
  if (head_dim % 2 != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): the head dimension %d must be even"),
                   c->queue, c->pos, c->op, head_dim);
      return FALSE;
    }
  if (n_kv == -1 && n_q < 1)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): %d query heads is out of range"),
                   c->queue, c->pos, c->op, n_q);
      return FALSE;
    }
  if (n_kv != -1 && (n_q < 1 || n_kv < 1))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): %d query heads and %d key/value heads are out of range"),
                   c->queue, c->pos, c->op, n_q, n_kv);
      return FALSE;
    }
  if (n_kv != -1 && n_q % n_kv != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): %d query heads are not a multiple of %d key/value heads"),
                   c->queue, c->pos, c->op, n_q, n_kv);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_max_ctx (const Ctx *c, gint32 max_ctx, GError **error)
{
  if (max_ctx < 1)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): the caches must hold at least one position, not %d"),
                   c->queue, c->pos, c->op, max_ctx);
      return FALSE;
    }
  return TRUE;
}

/* first .. first + count within [0, limit) */
static gboolean
check_head_range (const Ctx *c, gint32 first, gint32 count, gint64 limit, GError **error)
{
  if (first < 0 || count < 0 || (gint64) first + count > limit)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): heads %d to %d + %d are outside the %" PRId64 " heads"),
                   c->queue, c->pos, c->op, first, first, count, limit);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_same_cache_dtype (const Ctx *c, guint k_slot, guint v_slot, GError **error)
{
  AmkBufferInfo *k = slot_info (c, k_slot), *v = slot_info (c, v_slot);

  if (k->dtype != v->dtype)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): the k cache “%s” is %s but the v cache “%s” is %s; the dtypes must match"),
                   c->queue, c->pos, c->op, k->name, amk_dtype_name (k->dtype),
                   v->name, amk_dtype_name (v->dtype));
      return FALSE;
    }
  return TRUE;
}

static gboolean
finite_positive (float v)
{
  return v > 0.0f && isfinite (v);
}

static gboolean
check_rope_params (const Ctx *c, GError **error)
{
  const amk_params_t *p = &c->ins->params;
  const float theta = p->f[6], factor = p->f[7], low = p->f[8], high = p->f[9];
  const gint32 old_ctx = p->i[10];

  if (!finite_positive (theta))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): the RoPE base theta must be finite and positive, not %g"),
                   c->queue, c->pos, c->op, theta);
      return FALSE;
    }
  if (factor == 0.0f)
    return TRUE;
  if (!finite_positive (factor) || !finite_positive (low) || !finite_positive (high) ||
      !(high > low) || old_ctx < 1)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): Llama-3 RoPE scaling needs a finite factor > 0 (or 0 for none), 0 < low frequency factor < high frequency factor and an original context of at least 1; got factor %g, low %g, high %g, original context %d"),
                   c->queue, c->pos, c->op, factor, low, high, old_ctx);
      return FALSE;
    }
  return TRUE;
}

static gboolean
verify_rope_kv (const Ctx *c, GError **error)
{
  const amk_params_t *p = &c->ins->params;
  const gint32 d = p->i[0], n_q = p->i[1], n_kv = p->i[2], max_ctx = p->i[3];
  Operand ops[6];
  guint64 cache;

  if (!check_heads (c, d, G_MAXINT32, n_q, n_kv, error) ||
      !check_max_ctx (c, max_ctx, error) ||
      !check_head_range (c, p->i[4], p->i[5], (gint64) n_q + n_kv, error) ||
      !check_rope_params (c, error))
    return FALSE;

  cache = product3 (max_ctx, n_kv, d);
  ops[0] = (Operand) { 0, _("the query vector"), F32_ONLY, (guint64) n_q * d };
  ops[1] = (Operand) { 1, _("the key vector"), F32_ONLY, (guint64) n_kv * d };
  ops[2] = (Operand) { 2, _("the value vector"), F32_ONLY, (guint64) n_kv * d };
  ops[3] = (Operand) { 3, _("the k cache"), CACHE_TYPES, cache };
  ops[4] = (Operand) { 4, _("the v cache"), CACHE_TYPES, cache };
  ops[5] = (Operand) { 5, _("the position"), I32_ONLY, 1 };
  return check_operands (c, ops, G_N_ELEMENTS (ops), error) &&
         check_same_cache_dtype (c, 3, 4, error);
}

static gboolean
verify_attn_decode (const Ctx *c, GError **error)
{
  const amk_params_t *p = &c->ins->params;
  const gint32 d = p->i[0], n_q = p->i[1], n_kv = p->i[2], max_ctx = p->i[3];
  const gint32 kv_head = p->i[4], split = p->i[5], n_splits = p->i[6];
  const gboolean merges = c->ins->n_buffers >= 6, ropes = c->ins->n_buffers == 7;
  Operand ops[7];
  guint64 cache;

  if (!check_heads (c, d, AMK_ATTN_MAX_HEAD_DIM, n_q, n_kv, error) ||
      !check_max_ctx (c, max_ctx, error))
    return FALSE;
  if (kv_head < 0 || kv_head >= n_kv)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): key/value head %d is outside the %d heads"),
                   c->queue, c->pos, c->op, kv_head, n_kv);
      return FALSE;
    }
  if (n_splits < 1 || split < 0 || split >= n_splits)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): split %d of %d is out of range"),
                   c->queue, c->pos, c->op, split, n_splits);
      return FALSE;
    }
  if (p->i[9] < 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): the fewest positions per split (%d) must not be negative"),
                   c->queue, c->pos, c->op, p->i[9]);
      return FALSE;
    }
  if (!isfinite (p->f[7]))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): the score scale must be finite"),
                   c->queue, c->pos, c->op);
      return FALSE;
    }

  cache = product3 (max_ctx, n_kv, d);
  ops[0] = (Operand) { 0, _("the partial results"), F32_ONLY, product3 (n_q, n_splits, (guint64) d + 2) };
  if (ropes)
    ops[1] = (Operand) { 1, _("the query, key and value vector"), F32_ONLY, ((guint64) n_q + 2ull * n_kv) * d };
  else
    ops[1] = (Operand) { 1, _("the query vector"), F32_ONLY, (guint64) n_q * d };
  ops[2] = (Operand) { 2, _("the k cache"), CACHE_TYPES, cache };
  ops[3] = (Operand) { 3, _("the v cache"), CACHE_TYPES, cache };
  ops[4] = (Operand) { 4, _("the position"), I32_ONLY, 1 };
  ops[5] = (Operand) { 5, _("the output"), F32_ONLY, (guint64) n_q * d };
  ops[6] = (Operand) { 6, _("the RoPE cos and sin table"), F32_ONLY, (guint64) max_ctx * d };
  if (ropes && !amk_abi_rope_attn_fits (d, n_q / n_kv, max_ctx, n_splits, p->i[9]))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): with RoPE fused, head dimension %d (32, 64, 128 or 256), %d query heads per key/value head and %d positions in %d splits do not fit one instruction’s shared memory; record RoPE and the attention as separate ops"),
                   c->queue, c->pos, c->op, d, n_q / n_kv, max_ctx, n_splits);
      return FALSE;
    }
  if (merges && (p->i[8] < 0 || (guint) p->i[8] >= c->self->counter_names->len))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): the arrival counter %d does not exist; the program has %u counters"),
                   c->queue, c->pos, c->op, p->i[8], c->self->counter_names->len);
      return FALSE;
    }
  return check_operands (c, ops, ropes ? 7 : merges ? 6 : 5, error) &&
         check_same_cache_dtype (c, 2, 3, error);
}

static gboolean
verify_attn_reduce (const Ctx *c, GError **error)
{
  const amk_params_t *p = &c->ins->params;
  const gint32 d = p->i[0], n_q = p->i[1], n_splits = p->i[2];
  Operand ops[2];

  if (!check_heads (c, d, G_MAXINT32, n_q, -1, error))
    return FALSE;
  if (n_splits < 1)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): %d splits is out of range"),
                   c->queue, c->pos, c->op, n_splits);
      return FALSE;
    }
  if (!check_head_range (c, p->i[3], p->i[4], n_q, error))
    return FALSE;

  ops[0] = (Operand) { 0, _("the output"), F32_ONLY, (guint64) n_q * d };
  ops[1] = (Operand) { 1, _("the partial results"), F32_ONLY, product3 (n_q, n_splits, (guint64) d + 2) };
  return check_operands (c, ops, G_N_ELEMENTS (ops), error);
}

gboolean
amk_verify_attention_op (AmkProgram              *self,
                         guint                    queue,
                         guint                    pos,
                         const amk_instruction_t *ins,
                         GError                 **error)
{
  const Ctx c = { self, queue, pos, ins, attention_op_name (ins->opcode) };

  switch (ins->opcode)
    {
    case AMK_ABI_OP_ROPE_KV:
      return verify_rope_kv (&c, error);
    case AMK_ABI_OP_ATTN_DECODE:
      return verify_attn_decode (&c, error);
    case AMK_ABI_OP_ATTN_REDUCE:
      return verify_attn_reduce (&c, error);
    default:
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u: opcode %u is not an attention op"), queue, pos, ins->opcode);
      return FALSE;
    }
}
