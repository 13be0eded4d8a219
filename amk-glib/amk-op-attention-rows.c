/* amk-op-attention-rows.c: the many-token attention ops ROPE_ROWS and ATTN_ROWS (a chunk
 * of a prompt, or one token of each of several sequences, as M rows); their parameters
 * in kernels/amk-abi.h ("The many-token ops").
 *
 * Row r has its own position pos[r] (negative: a padding row) and sequence seq[r] (or 0
 * without a seq buffer). The caches are [S, max_ctx, n_kv_heads * head_dim] (S = 1 may
 * be 2-D). What an instruction touches, in elements (D = head_dim, Q and KV the query and
 * key/value heads, W = (Q + 2 KV) D the width of a row of qkv):
 *   ROPE_ROWS: qkv rows row0 .. row0+n_rows [W each] (read, written), the whole k and v
 *              caches (written: the rows go where pos and seq say, known on the device
 *              only), pos and seq of the rows, the q and k norm weights [D]
 *   ATTN_ROWS: out rows [Q D each] (written; the tiles of the other key/value heads write
 *              other columns of the same rows), the query heads of the qkv rows, the
 *              whole caches, pos and seq of the rows
 *
 * The CPU reference takes the fp32 steps of the decode ops (amk-op-attention.c): RoPE as
 * ROPE_KV with the frequencies of amk-rope.c, the q/k norm as RMSNORM, the attention of
 * one row and head at a time with sums in double, so that a chunk of M rows gives what M
 * decode steps give.
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
#include "amk-rope-private.h"

/* ATTN_ROWS cuts the rows into blocks of this many, or of ATTN_ROWS_SMALL_BLOCK when the
 * large blocks would leave queues idle. */
#define ATTN_ROWS_BLOCK       64
#define ATTN_ROWS_SMALL_BLOCK 16

/* What the GPU takes (kernels/ops-attention-rows.cuh): a lane's share of a head in
 * registers, 8 elements of 32 lanes; heads counted in 12 bits. */
#define ROWS_MAX_HEAD_DIM 256
#define ROWS_MAX_HEADS    4096

/* ---- the op API --------------------------------------------------------------------- */

/* What the operands of both ops say about the shapes. */
typedef struct {
  guint64 m;        /* rows */
  guint64 max_ctx;  /* positions per sequence */
} RowsShape;

/* An i32 buffer with one element per row. */
static gboolean
per_row_ok (AmkProgram *self, const char *op, const char *what, gint buffer, guint64 m,
            GError **error)
{
  AmkBufferInfo *info = amk_op_tensor (self, op, what, buffer, error);

  if (info == NULL)
    return FALSE;
  if (info->dtype != AMK_DTYPE_I32 || info->n_elements != m)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: %s “%s” must be i32 with one element per row (%" PRIu64 ")"),
                   op, what, info->name, m);
      return FALSE;
    }
  return TRUE;
}

/* The heads, the qkv rows (their count M), the positions, the sequences (or
 * AMK_NO_BUFFER) and the caches that both ops take. */
static gboolean
rows_operands_ok (AmkProgram *self, const char *op, gint qkv, gint k_cache, gint v_cache,
                  gint pos, gint seq, guint head_dim, guint n_q, guint n_kv, RowsShape *shape,
                  GError **error)
{
  AmkBufferInfo *qi, *kc, *vc;
  guint64 width, kv;

  if (head_dim < 2 || head_dim % 2 != 0 || head_dim > ROWS_MAX_HEAD_DIM || n_q == 0 || n_kv == 0 ||
      n_q % n_kv != 0 || n_q > ROWS_MAX_HEADS)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: head_dim %u must be even and at most %d, and the %u query heads (at most %d) a multiple of the %u key/value heads"),
                   op, head_dim, ROWS_MAX_HEAD_DIM, n_q, ROWS_MAX_HEADS, n_kv);
      return FALSE;
    }
  width = ((guint64) n_q + 2ull * n_kv) * head_dim;
  kv = (guint64) n_kv * head_dim;
  if ((qi = amk_op_tensor (self, op, _("the query, key and value rows"), qkv, error)) == NULL)
    return FALSE;
  if (qi->dtype != AMK_DTYPE_F32 || qi->n_elements % width != 0 || qi->n_elements / width > G_MAXINT32)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: the rows “%s” must be f32 [rows, (%u + 2 × %u) × %u]: per row the query heads, the key heads, the value heads"),
                   op, qi->name, n_q, n_kv, head_dim);
      return FALSE;
    }
  shape->m = qi->n_elements / width;
  if (!per_row_ok (self, op, _("the positions"), pos, shape->m, error) ||
      (seq != AMK_NO_BUFFER && !per_row_ok (self, op, _("the sequences"), seq, shape->m, error)) ||
      (kc = amk_op_tensor (self, op, _("the key cache"), k_cache, error)) == NULL ||
      (vc = amk_op_tensor (self, op, _("the value cache"), v_cache, error)) == NULL)
    return FALSE;
  if ((kc->dtype != AMK_DTYPE_F32 && kc->dtype != AMK_DTYPE_BF16) || kc->dtype != vc->dtype ||
      kc->n_dims != vc->n_dims || (kc->n_dims != 2 && kc->n_dims != 3) ||
      memcmp (kc->shape, vc->shape, kc->n_dims * sizeof (gint64)) != 0 ||
      (guint64) kc->shape[kc->n_dims - 1] != kv || kc->shape[kc->n_dims - 2] > G_MAXINT32)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: the caches “%s” and “%s” must both be f32 or bf16, [positions, %u × %u] or [sequences, positions, %u × %u]"),
                   op, kc->name, vc->name, n_kv, head_dim, n_kv, head_dim);
      return FALSE;
    }
  if (k_cache == v_cache || qkv == k_cache || qkv == v_cache)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: the rows and the two caches must be three separate buffers"), op);
      return FALSE;
    }
  shape->max_ctx = (guint64) kc->shape[kc->n_dims - 2];
  return TRUE;
}

/**
 * amk_program_op_rope_rows:
 * @self: a program
 * @qkv: the rows, f32 `[M, (n_q_heads + 2 × n_kv_heads) × head_dim]`: per row the query
 *   heads, the key heads, the value heads (a q/k/v projection of M tokens); the query
 *   and key heads are normalised and rotated in place
 * @k_cache: the key cache, bf16 or f32, `[positions, n_kv_heads × head_dim]` (one
 *   sequence) or `[sequences, positions, n_kv_heads × head_dim]`
 * @v_cache: the value cache, like @k_cache
 * @pos: i32 `[M]`: the position of each row, read on the device; a negative one marks a
 *   padding row, which is left alone
 * @seq: i32 `[M]`: the sequence of each row (its slot of the caches), or -1 for
 *   sequence 0 everywhere
 * @q_norm: the weight of the RMS norm of each query head (f32 or bf16, `[head_dim]`;
 *   Qwen3), or -1 for none
 * @k_norm: the weight of the RMS norm of each key head, or -1; given with @q_norm or not
 *   at all
 * @head_dim: elements per head (even)
 * @n_q_heads: query heads
 * @n_kv_heads: key/value heads (grouped-query attention)
 * @eps: added to the mean square by the norms
 * @theta: the RoPE base
 * @factor: the Llama-3 frequency scaling factor, or 0 for plain RoPE
 * @low_freq_factor: Llama-3 scaling's low frequency factor
 * @high_freq_factor: Llama-3 scaling's high frequency factor
 * @original_context: Llama-3 scaling's original context length
 * @error: return location for a #GError
 *
 * Records, for every row `r` of @qkv with `pos[r] >= 0`: the norms of its query and key
 * heads (with @q_norm and @k_norm), their rotary embedding at position `pos[r]` (as
 * [method@Amk.Program.op_rope_kv]) and the append of its key and value heads at row
 * `pos[r]` of the caches' sequence `seq[r]`: the many-token form of
 * [method@Amk.Program.op_rope_kv], for a chunk of a prompt or one token of each of
 * several sequences. A position past the caches or a sequence outside them aborts the
 * launch with %AMK_ABORT_CODE_CHECK.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_rope_rows (AmkProgram  *self,
                          gint         qkv,
                          gint         k_cache,
                          gint         v_cache,
                          gint         pos,
                          gint         seq,
                          gint         q_norm,
                          gint         k_norm,
                          guint        head_dim,
                          guint        n_q_heads,
                          guint        n_kv_heads,
                          gfloat       eps,
                          gfloat       theta,
                          gfloat       factor,
                          gfloat       low_freq_factor,
                          gfloat       high_freq_factor,
                          guint        original_context,
                          GError     **error)
{
  RowsShape shape;
  gint index;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "ROPE_ROWS", error) ||
      !rows_operands_ok (self, "ROPE_ROWS", qkv, k_cache, v_cache, pos, seq, head_dim, n_q_heads,
                         n_kv_heads, &shape, error) ||
      !amk_op_writable ("ROPE_ROWS", amk_program_get_buffer_info (self, qkv), error) ||
      !amk_op_writable ("ROPE_ROWS", amk_program_get_buffer_info (self, k_cache), error) ||
      !amk_op_writable ("ROPE_ROWS", amk_program_get_buffer_info (self, v_cache), error))
    return -1;
  if ((q_norm == AMK_NO_BUFFER) != (k_norm == AMK_NO_BUFFER))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("ROPE_ROWS: give both the query and the key norm weights, or neither (-1)"));
      return -1;
    }
  if (q_norm != AMK_NO_BUFFER &&
      (!amk_op_vector_of (self, "ROPE_ROWS", _("the query norm weight"), q_norm, head_dim, NULL, error) ||
       !amk_op_vector_of (self, "ROPE_ROWS", _("the key norm weight"), k_norm, head_dim, NULL, error)))
    return -1;
  if (!(eps >= 0.0f && eps < G_MAXFLOAT))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("ROPE_ROWS: the epsilon must be finite and not negative"));
      return -1;
    }
  if (!amk_op_rope_freq_ok ("ROPE_ROWS", theta, factor, low_freq_factor, high_freq_factor, original_context, error))
    return -1;
  index = amk_op_record (self, AMK_ABI_OP_ROPE_ROWS, (gint32[]) { qkv, k_cache, v_cache, pos, seq, q_norm },
                  &(amk_params_t) { .rope_rows = {
                    .shape = { (gint32) head_dim, (gint32) n_q_heads, (gint32) n_kv_heads, (gint32) shape.max_ctx },
                    .freq = { theta, factor, low_freq_factor, high_freq_factor, (gint32) original_context },
                    .eps = eps } });
  /* the seventh operand, past what amk_op_record takes */
  g_array_index (self->ops, AmkOpInfo, index).buffers[6] = k_norm;
  return index;
}

/**
 * amk_program_op_attention_rows:
 * @self: a program
 * @out: the attention output, f32 or bf16 `[M, n_q_heads × head_dim]`
 * @qkv: the rows after [method@Amk.Program.op_rope_rows], f32 `[M, (n_q_heads + 2 ×
 *   n_kv_heads) × head_dim]`; only the query heads are read
 * @k_cache: the key cache, bf16 or f32, `[positions, n_kv_heads × head_dim]` or
 *   `[sequences, positions, n_kv_heads × head_dim]`
 * @v_cache: the value cache, like @k_cache
 * @pos: i32 `[M]`: the position of each row; a negative one marks a padding row
 * @seq: i32 `[M]`: the sequence of each row, or -1 for sequence 0 everywhere
 * @head_dim: elements per head
 * @n_q_heads: query heads
 * @n_kv_heads: key/value heads (query head `h` reads kv head `h / (n_q_heads /
 *   n_kv_heads)`)
 * @scale: the score scale, usually `1 / sqrt(head_dim)`
 * @error: return location for a #GError
 *
 * Records causal attention of many rows: for every row `r` with `pos[r] >= 0` and every
 * query head, the softmax of the scaled scores against the cached keys at positions
 * `0 .. pos[r]` of sequence `seq[r]`, weighting the cached values; a padding row gets
 * zeros. The keys and values of the rows themselves must be in the caches already
 * (recorded by [method@Amk.Program.op_rope_rows] before).
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_attention_rows (AmkProgram  *self,
                               gint         out,
                               gint         qkv,
                               gint         k_cache,
                               gint         v_cache,
                               gint         pos,
                               gint         seq,
                               guint        head_dim,
                               guint        n_q_heads,
                               guint        n_kv_heads,
                               gfloat       scale,
                               GError     **error)
{
  RowsShape shape;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "ATTN_ROWS", error) ||
      !rows_operands_ok (self, "ATTN_ROWS", qkv, k_cache, v_cache, pos, seq, head_dim, n_q_heads,
                         n_kv_heads, &shape, error) ||
      !amk_op_vector_of (self, "ATTN_ROWS", _("the output"), out, shape.m * n_q_heads * head_dim, NULL, error) ||
      !amk_op_writable ("ATTN_ROWS", amk_program_get_buffer_info (self, out), error))
    return -1;
  if (out == qkv || out == k_cache || out == v_cache || !(scale > 0.0f && scale < G_MAXFLOAT))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("ATTN_ROWS: the output must not be an input, and the scale must be positive"));
      return -1;
    }
  return amk_op_record (self, AMK_ABI_OP_ATTN_ROWS, (gint32[]) { out, qkv, k_cache, v_cache, pos, seq },
                 &(amk_params_t) { .attn_rows = {
                   .shape = { (gint32) head_dim, (gint32) n_q_heads, (gint32) n_kv_heads, (gint32) shape.max_ctx },
                   .scale = scale } });
}

/* ---- verifier ----------------------------------------------------------------------- */

typedef struct {
  AmkProgram              *self;
  guint                    queue;
  guint                    pos;
  const amk_instruction_t *ins;
  const char              *op;
} Ctx;

/* The slots of the operands both ops have. */
typedef struct {
  guint qkv, k_cache, v_cache, pos, seq;
} RowSlots;

static AmkBufferInfo *
slot_info (const Ctx *c, guint slot)
{
  return amk_verify_slot_buffer (c->self, c->ins, slot);
}

/* Whether two operands share a byte (whole buffers, as the device check sees them). */
static gboolean
slots_overlap (const Ctx *c, guint a, guint b)
{
  AmkBufferInfo *ia = slot_info (c, a), *ib = slot_info (c, b);
  gint64 ra, rb;
  guint64 sa, sb, la, lb;

  amk_verify_operand_bytes (c->self, c->ins, a, 0, 0, &ra, &sa, &la);
  amk_verify_operand_bytes (c->self, c->ins, b, 0, 0, &rb, &sb, &lb);
  la = ia->size_bytes;
  lb = ib->size_bytes;
  return ra == rb && la != 0 && lb != 0 && sa < sb + lb && sb < sa + la;
}

/* The rows and the two caches are pairwise apart: the device check refuses them
 * otherwise, for ATTN_ROWS too, which writes none of them. */
static gboolean
check_caches_apart (const Ctx *c, const RowSlots *s, GError **error)
{
  const struct { guint a, b; const char *what_a, *what_b; } pairs[] = {
    { s->k_cache, s->v_cache, _("the key cache"), _("the value cache") },
    { s->k_cache, s->qkv, _("the key cache"), _("the rows") },
    { s->v_cache, s->qkv, _("the value cache"), _("the rows") },
  };

  for (guint i = 0; i < G_N_ELEMENTS (pairs); i++)
    if (slots_overlap (c, pairs[i].a, pairs[i].b))
      {
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                     _("Queue %u instruction %u (%s): %s, buffer %d “%s”, shares memory with %s, buffer %d “%s”; use separate buffers"),
                     c->queue, c->pos, c->op, pairs[i].what_a, c->ins->buffers[pairs[i].a],
                     slot_info (c, pairs[i].a)->name, pairs[i].what_b, c->ins->buffers[pairs[i].b],
                     slot_info (c, pairs[i].b)->name);
        return FALSE;
      }
  return TRUE;
}

/* The shape, the qkv rows (*m of them), the row range, the caches, pos and seq. */
static gboolean
check_rows (const Ctx *c, const amk_attn_shape_t *sh, gint32 row0, gint32 n_rows,
            const RowSlots *s, guint64 *m, GError **error)
{
  const gint32 d = sh->head_dim, n_q = sh->n_q_heads, n_kv = sh->n_kv_heads;
  AmkBufferInfo *qkv, *kc, *vc;
  guint64 width, per_seq;

  if (d < 2 || d % 2 != 0 || d > ROWS_MAX_HEAD_DIM || n_q < 1 || n_kv < 1 || n_q % n_kv != 0 ||
      n_q > ROWS_MAX_HEADS)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): head_dim %d must be even, 2 to %d, and the %d query heads (at most %d) a positive multiple of the %d key/value heads"),
                   c->queue, c->pos, c->op, d, ROWS_MAX_HEAD_DIM, n_q, ROWS_MAX_HEADS, n_kv);
      return FALSE;
    }
  if (sh->max_ctx < 1)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): the caches must hold at least one position, not %d"),
                   c->queue, c->pos, c->op, sh->max_ctx);
      return FALSE;
    }

  width = ((guint64) n_q + 2ull * n_kv) * d;
  qkv = slot_info (c, s->qkv);
  if (qkv->dtype != AMK_DTYPE_F32 || qkv->n_elements % width != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): the rows, buffer %d “%s”, must be f32 with a multiple of %" PRIu64 " elements (query, key and value heads per row)"),
                   c->queue, c->pos, c->op, c->ins->buffers[s->qkv], qkv->name, width);
      return FALSE;
    }
  *m = qkv->n_elements / width;
  if (*m > G_MAXINT32)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): the rows, buffer %d “%s”, hold %" PRIu64 " rows; the device takes fewer than 2^31"),
                   c->queue, c->pos, c->op, c->ins->buffers[s->qkv], qkv->name, *m);
      return FALSE;
    }
  if (row0 < 0 || n_rows < 0 || (guint64) row0 + (guint64) n_rows > *m)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): rows %d to %d + %d are outside the %" PRIu64 " rows"),
                   c->queue, c->pos, c->op, row0, row0, n_rows, *m);
      return FALSE;
    }

  kc = slot_info (c, s->k_cache);
  vc = slot_info (c, s->v_cache);
  per_seq = (guint64) sh->max_ctx * n_kv * d;
  if ((kc->dtype != AMK_DTYPE_F32 && kc->dtype != AMK_DTYPE_BF16) || kc->dtype != vc->dtype ||
      kc->n_elements != vc->n_elements || kc->n_elements == 0 || kc->n_elements % per_seq != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): the caches “%s” and “%s” must both be f32 or bf16 with a multiple of %d × %d × %d elements (positions × key/value heads × head_dim)"),
                   c->queue, c->pos, c->op, kc->name, vc->name, sh->max_ctx, n_kv, d);
      return FALSE;
    }
  if (kc->n_elements / per_seq > G_MAXINT32)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): the caches “%s” and “%s” hold %" PRIu64 " sequences; the device takes fewer than 2^31"),
                   c->queue, c->pos, c->op, kc->name, vc->name, kc->n_elements / per_seq);
      return FALSE;
    }
  if (!check_caches_apart (c, s, error))
    return FALSE;

  for (guint i = 0; i < 2; i++)
    {
      const guint slot = i == 0 ? s->pos : s->seq;
      AmkBufferInfo *info = slot_info (c, slot);

      if (info != NULL && (info->dtype != AMK_DTYPE_I32 || info->n_elements != *m))
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                       _("Queue %u instruction %u (%s): %s, buffer %d “%s”, must be i32 with one element per row (%" PRIu64 ")"),
                       c->queue, c->pos, c->op, i == 0 ? _("the positions") : _("the sequences"),
                       c->ins->buffers[slot], info->name, *m);
          return FALSE;
        }
    }
  return TRUE;
}

/* No written operand shares a byte with another operand (whole buffers, like the
 * device check), after no write to a constant buffer. */
static gboolean
check_writes (const Ctx *c, GError **error)
{
  const guint written = amk_abi_written_slots (c->ins->opcode, c->ins->n_buffers);

  if (!amk_verify_writes (c->self, c->queue, c->pos, c->ins, error))
    return FALSE;
  for (guint a = 0; a < c->ins->n_buffers; a++)
    for (guint b = 0; b < c->ins->n_buffers; b++)
      {
        AmkBufferInfo *ia = slot_info (c, a), *ib = slot_info (c, b);

        if (a == b || !((written >> a) & 1u) || ia == NULL || ib == NULL || !slots_overlap (c, a, b))
          continue;
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                     _("Queue %u instruction %u (%s): buffer %d “%s”, which it writes, shares memory with buffer %d “%s”; use separate buffers"),
                     c->queue, c->pos, c->op, c->ins->buffers[a], ia->name, c->ins->buffers[b], ib->name);
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
check_freq (const Ctx *c, const amk_rope_freq_t *f, GError **error)
{
  if (!finite_positive (f->theta) ||
      (f->factor != 0.0f &&
       (!finite_positive (f->factor) || !finite_positive (f->low_freq_factor) ||
        !finite_positive (f->high_freq_factor) || !(f->high_freq_factor > f->low_freq_factor) ||
        f->original_context < 1)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): RoPE needs a finite theta > 0, and Llama-3 scaling a finite factor > 0 (or 0 for none), 0 < low frequency factor < high frequency factor and an original context of at least 1; got theta %g, factor %g, low %g, high %g, original context %d"),
                   c->queue, c->pos, c->op, f->theta, f->factor, f->low_freq_factor,
                   f->high_freq_factor, f->original_context);
      return FALSE;
    }
  return TRUE;
}

static gboolean
verify_rope_rows (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                  GError **error)
{
  const Ctx c = { self, queue, pos, ins, "ROPE_ROWS" };
  const amk_rope_rows_params_t *p = &ins->params.rope_rows;
  const RowSlots slots = { 0, 1, 2, 3, 4 };
  AmkBufferInfo *q_norm = ins->n_buffers > 5 ? slot_info (&c, 5) : NULL;
  AmkBufferInfo *k_norm = ins->n_buffers > 6 ? slot_info (&c, 6) : NULL;
  guint64 m;

  if (!check_rows (&c, &p->shape, p->row0, p->n_rows, &slots, &m, error))
    return FALSE;
  if ((q_norm == NULL) != (k_norm == NULL))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): names one norm weight; the query and the key norm weights come together or not at all"),
                   queue, pos, c.op);
      return FALSE;
    }
  for (guint i = 0; q_norm != NULL && i < 2; i++)
    {
      AmkBufferInfo *w = i == 0 ? q_norm : k_norm;

      if ((w->dtype != AMK_DTYPE_F32 && w->dtype != AMK_DTYPE_BF16) ||
          w->n_elements != (guint64) p->shape.head_dim)
        {
          g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                       _("Queue %u instruction %u (%s): the norm weight “%s” must be f32 or bf16 with head_dim (%d) elements"),
                       queue, pos, c.op, w->name, p->shape.head_dim);
          return FALSE;
        }
    }
  if (!(p->eps >= 0.0f && isfinite (p->eps)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): the epsilon must be finite and not negative"),
                   queue, pos, c.op);
      return FALSE;
    }
  return check_freq (&c, &p->freq, error) && check_writes (&c, error);
}

static gboolean
verify_attn_rows (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                  GError **error)
{
  const Ctx c = { self, queue, pos, ins, "ATTN_ROWS" };
  const amk_attn_rows_params_t *p = &ins->params.attn_rows;
  const RowSlots slots = { 1, 2, 3, 4, 5 };
  AmkBufferInfo *out = slot_info (&c, 0);
  guint64 m;

  if (!check_rows (&c, &p->shape, p->row0, p->n_rows, &slots, &m, error))
    return FALSE;
  if (p->kv_head < 0 || p->kv_head >= p->shape.n_kv_heads)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): key/value head %d is outside the %d heads"),
                   queue, pos, c.op, p->kv_head, p->shape.n_kv_heads);
      return FALSE;
    }
  if (!isfinite (p->scale))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): the score scale must be finite"),
                   queue, pos, c.op);
      return FALSE;
    }
  if ((out->dtype != AMK_DTYPE_F32 && out->dtype != AMK_DTYPE_BF16) ||
      out->n_elements != m * p->shape.n_q_heads * p->shape.head_dim)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (%s): the output, buffer %d “%s”, must be f32 or bf16 [%" PRIu64 " rows, %d × %d]"),
                   queue, pos, c.op, ins->buffers[0], out->name, m, p->shape.n_q_heads, p->shape.head_dim);
      return FALSE;
    }
  return check_writes (&c, error);
}

/* ---- lowering and cost -------------------------------------------------------------- */

static guint64
qkv_width (const amk_attn_shape_t *sh)
{
  return ((guint64) sh->n_q_heads + 2ull * sh->n_kv_heads) * sh->head_dim;
}

static guint64
op_rows (AmkLowering *lw, const amk_attn_shape_t *sh, gint32 qkv)
{
  return amk_lower_buffer (lw, qkv)->n_elements / qkv_width (sh);
}

/* rows, about M / queues per tile: they are independent */
static void
plan_rope_rows (AmkLowering *lw)
{
  lw->n = op_rows (lw, &lw->op->params.rope_rows.shape, lw->op->buffers[0]);
  lw->n_tiles = MAX (1, MIN (lw->n, (guint64) lw->program->num_queues));
}

static void
lower_rope_rows (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const guint64 s = t->start, e = t->end, w = qkv_width (&op->params.rope_rows.shape);
  const gboolean norms = op->buffers[5] != AMK_NO_BUFFER;

  amk_tile_use_buffers (t, op, norms ? 7 : 5);
  t->ins.params.rope_rows.row0 = (gint32) s;
  t->ins.params.rope_rows.n_rows = (gint32) (e - s);
  amk_tile_access (t, op->buffers[0], s * w, e * w, TRUE);
  /* the cache rows are chosen by pos and seq on the device */
  amk_tile_access (t, op->buffers[1], 0, amk_lower_buffer (lw, op->buffers[1])->n_elements, TRUE);
  amk_tile_access (t, op->buffers[2], 0, amk_lower_buffer (lw, op->buffers[2])->n_elements, TRUE);
  amk_tile_access (t, op->buffers[3], s, e, FALSE);
  amk_tile_access (t, op->buffers[4], s, e, FALSE);
  if (norms)
    {
      amk_tile_access (t, op->buffers[5], 0, op->params.rope_rows.shape.head_dim, FALSE);
      amk_tile_access (t, op->buffers[6], 0, op->params.rope_rows.shape.head_dim, FALSE);
    }
}

/* the query and key heads read and written, the value heads read, a key and a value
 * row written to the caches, per row */
static double
bytes_rope_rows (AmkProgram *self, const amk_instruction_t *ins)
{
  const amk_rope_rows_params_t *p = &ins->params.rope_rows;

  return 4.0 * MAX (p->n_rows, 0) * MAX (p->shape.head_dim, 0) *
         (2.0 * MAX (p->shape.n_q_heads, 0) + 5.0 * MAX (p->shape.n_kv_heads, 0));
}

/* Rows per ATTN_ROWS tile: large blocks share the loads of the keys and values among
 * more rows, small ones spread a short chunk over more queues. A batch's step (a few
 * rows, each of its own sequence: nothing to share) gets a tile per row and key/value
 * head: the warp path's loads bound a block, so its rows go to as many queues as there
 * are tiles. */
static guint64
attn_rows_block (AmkLowering *lw, guint64 m)
{
  const guint64 n_kv = lw->op->params.attn_rows.shape.n_kv_heads;

  if (lw->op->buffers[5] != AMK_NO_BUFFER && m <= ATTN_ROWS_BLOCK)
    return 1;
  if (n_kv * ((m + ATTN_ROWS_BLOCK - 1) / ATTN_ROWS_BLOCK) < lw->program->num_queues)
    return ATTN_ROWS_SMALL_BLOCK;
  return ATTN_ROWS_BLOCK;
}

/* (block of rows, key/value head) pairs, one per tile */
static void
plan_attn_rows (AmkLowering *lw)
{
  const guint64 m = op_rows (lw, &lw->op->params.attn_rows.shape, lw->op->buffers[1]);
  const guint64 block = attn_rows_block (lw, m);

  lw->n = lw->n_tiles = lw->op->params.attn_rows.shape.n_kv_heads * ((m + block - 1) / block);
}

/* The last blocks come first: in a prompt chunk their rows attend to the most
 * positions, and bytes_attn_rows gives them the larger cost as well. */
static void
lower_attn_rows (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const amk_attn_shape_t *sh = &op->params.attn_rows.shape;
  const guint64 m = op_rows (lw, sh, op->buffers[1]), block = attn_rows_block (lw, m);
  const guint64 n_blocks = (m + block - 1) / block;
  const guint64 b = n_blocks - 1 - tile / sh->n_kv_heads, g = tile % sh->n_kv_heads;
  const guint64 r0 = b * block, r1 = MIN (m, r0 + block);
  const guint64 qd = (guint64) sh->n_q_heads * sh->head_dim, w = qkv_width (sh);

  amk_tile_use_buffers (t, op, 6);
  t->ins.params.attn_rows.kv_head = (gint32) g;
  t->ins.params.attn_rows.row0 = (gint32) r0;
  t->ins.params.attn_rows.n_rows = (gint32) (r1 - r0);
  /* whole rows: the tiles of the other key/value heads write the other columns, and the
   * tiles of one op never wait for each other */
  amk_tile_access (t, op->buffers[0], r0 * qd, r1 * qd, TRUE);
  amk_tile_access (t, op->buffers[1], r0 * w, r1 * w, FALSE);
  amk_tile_access (t, op->buffers[2], 0, amk_lower_buffer (lw, op->buffers[2])->n_elements, FALSE);
  amk_tile_access (t, op->buffers[3], 0, amk_lower_buffer (lw, op->buffers[3])->n_elements, FALSE);
  amk_tile_access (t, op->buffers[4], r0, r1, FALSE);
  amk_tile_access (t, op->buffers[5], r0, r1, FALSE);
}

/* The positions are known on the device only; in a prompt chunk row r attends to about
 * r positions more than row 0. So: the keys and values up to the block's last row, read
 * once for the block, and the scores and weighted sums of its rows, counted as a byte per
 * multiply-add of a head. */
static double
bytes_attn_rows (AmkProgram *self, const amk_instruction_t *ins)
{
  const amk_attn_rows_params_t *p = &ins->params.attn_rows;
  const double d = MAX (p->shape.head_dim, 0), rows = MAX (p->n_rows, 0);
  const double last = MAX (p->row0, 0) + rows;
  const double group = p->shape.n_q_heads / MAX (p->shape.n_kv_heads, 1);

  return 2.0 * amk_instruction_elem_size (self, ins, 2) * d * last + 2.0 * group * rows * last * d;
}

/* ---- CPU reference ------------------------------------------------------------------ */




/* Checks the positions and sequences of rows row0 .. row0+n_rows against the caches:
 * CHECK with *detail = the buffer index of pos when a position is out of range, else of
 * seq when a sequence is (the GPU's order: the rows are checked all at once). */
static AmkAbortCode
check_row_slots (const amk_instruction_t *ins, const amk_attn_shape_t *sh, AmkCpuBuffer *b,
                 const RowSlots *s, gint32 row0, gint32 n_rows, gint *detail)
{
  const guint64 n_seqs = b[ins->buffers[s->k_cache]].info->n_elements /
                         ((guint64) sh->max_ctx * sh->n_kv_heads * sh->head_dim);
  const gboolean has_seq = ins->buffers[s->seq] != AMK_NO_BUFFER;
  gboolean bad_pos = FALSE, bad_seq = FALSE;

  for (gint32 r = row0; r < row0 + n_rows; r++)
    {
      const gint32 p = amk_cpu_load_i32 (&b[ins->buffers[s->pos]], r);
      const gint32 q = has_seq ? amk_cpu_load_i32 (&b[ins->buffers[s->seq]], r) : 0;

      bad_pos |= p >= sh->max_ctx;
      bad_seq |= p >= 0 && (q < 0 || (guint64) q >= n_seqs);
    }
  if (bad_pos || bad_seq)
    {
      *detail = ins->buffers[bad_pos ? s->pos : s->seq];
      return AMK_ABORT_CODE_CHECK;
    }
  return AMK_ABORT_CODE_NONE;
}

/* The element of (sequence, position, kv head, 0) in a cache. */
static guint64
cache_row (const amk_attn_shape_t *sh, gint32 seq, gint32 pos, gint32 g)
{
  return (((guint64) seq * sh->max_ctx + pos) * sh->n_kv_heads + g) * sh->head_dim;
}

/* RMSNORM's steps (amk-op-vector.c) on one head of x, in place. */
static void
norm_head (AmkCpuBuffer *x, guint64 base, gint32 d, AmkCpuBuffer *w, float eps)
{
  float sum = 0.0f, scale;

  for (gint32 c = 0; c < d; c++)
    {
      float e = amk_cpu_load (x, base + c);
      sum += e * e;
    }
  scale = 1.0f / sqrtf (sum / (float) d + eps);
  for (gint32 c = 0; c < d; c++)
    amk_cpu_store (x, base + c, amk_cpu_load (x, base + c) * scale * amk_cpu_load (w, c));
}

/* ROPE_KV's rotate-half step of one head of x at pos, in place, each fp32 product and
 * sum rounded on its own as the GPU does; the rotated head also goes to cache[row]
 * unless cache is NULL. */
static void AMK_NO_CONTRACT
rotate_head (AmkCpuBuffer *x, guint64 base, gint32 d, gint32 pos, const amk_rope_freq_t *f,
             AmkCpuBuffer *cache, guint64 row)
{
  const gint32 half = d / 2;

  for (gint32 c = 0; c < half; c++)
    {
      const float inv_freq = amk_rope_inv_freq (c, d, f->theta, f->factor, f->low_freq_factor,
                                                f->high_freq_factor, f->original_context);
      const float x1 = amk_cpu_load (x, base + c), x2 = amk_cpu_load (x, base + c + half);
      float cs, sn, x1c, x2s, x2c, x1s;

      amk_rope_cos_sin (pos, inv_freq, &cs, &sn);
      x1c = x1 * cs;
      x2s = x2 * sn;
      x2c = x2 * cs;
      x1s = x1 * sn;
      amk_cpu_store (x, base + c, x1c - x2s);
      amk_cpu_store (x, base + c + half, x2c + x1s);
      if (cache != NULL)
        {
          amk_cpu_store (cache, row + c, x1c - x2s);
          amk_cpu_store (cache, row + c + half, x2c + x1s);
        }
    }
}

static AmkAbortCode
run_rope_rows (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_rope_rows_params_t *p = &ins->params.rope_rows;
  const amk_attn_shape_t *sh = &p->shape;
  const gint32 d = sh->head_dim, n_q = sh->n_q_heads, n_kv = sh->n_kv_heads;
  const RowSlots slots = { 0, 1, 2, 3, 4 };
  const guint64 w = qkv_width (sh);
  AmkCpuBuffer *qkv = &b[ins->buffers[0]], *kc = &b[ins->buffers[1]], *vc = &b[ins->buffers[2]];
  AmkCpuBuffer *q_norm = ins->n_buffers > 6 && ins->buffers[5] != AMK_NO_BUFFER ? &b[ins->buffers[5]] : NULL;
  AmkCpuBuffer *k_norm = q_norm != NULL ? &b[ins->buffers[6]] : NULL;
  const AmkAbortCode code = check_row_slots (ins, sh, b, &slots, p->row0, p->n_rows, detail);

  if (code != AMK_ABORT_CODE_NONE)
    return code;
  for (gint32 r = p->row0; r < p->row0 + p->n_rows; r++)
    {
      const gint32 pos = amk_cpu_load_i32 (&b[ins->buffers[3]], r);
      const gint32 seq = ins->buffers[4] != AMK_NO_BUFFER ? amk_cpu_load_i32 (&b[ins->buffers[4]], r) : 0;

      if (pos < 0)
        continue;
      for (gint32 h = 0; h < n_q + n_kv; h++)
        {
          const gboolean is_key = h >= n_q;
          const guint64 base = r * w + (guint64) h * d;
          const guint64 row = cache_row (sh, seq, pos, is_key ? h - n_q : 0);

          if (q_norm != NULL)
            norm_head (qkv, base, d, is_key ? k_norm : q_norm, p->eps);
          rotate_head (qkv, base, d, pos, &p->freq, is_key ? kc : NULL, row);
          if (is_key)
            for (gint32 c = 0; c < d; c++)
              amk_cpu_store (vc, row + c, amk_cpu_load (qkv, base + (guint64) n_kv * d + c));
        }
    }
  return AMK_ABORT_CODE_NONE;
}

/* Per row and query head of the group: the softmax over positions 0 .. pos of the
 * scaled scores (their maximum subtracted first), weighting the values; sums in double.
 * The row's keys and values are read into fp32 once for the group's heads. */
static AmkAbortCode
run_attn_rows (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_attn_rows_params_t *p = &ins->params.attn_rows;
  const amk_attn_shape_t *sh = &p->shape;
  const gint32 d = sh->head_dim, n_q = sh->n_q_heads, g = p->kv_head;
  const gint32 group = n_q / sh->n_kv_heads;
  const RowSlots slots = { 1, 2, 3, 4, 5 };
  const guint64 w = qkv_width (sh);
  AmkCpuBuffer *out = &b[ins->buffers[0]], *qkv = &b[ins->buffers[1]];
  AmkCpuBuffer *kc = &b[ins->buffers[2]], *vc = &b[ins->buffers[3]];
  const AmkAbortCode code = check_row_slots (ins, sh, b, &slots, p->row0, p->n_rows, detail);
  g_autofree double *scores = NULL;
  g_autofree double *acc = g_new (double, d);
  g_autofree float *qf = g_new (float, d);
  g_autofree float *keys = NULL, *values = NULL;

  if (code != AMK_ABORT_CODE_NONE)
    return code;
  scores = g_new (double, sh->max_ctx);
  keys = g_new (float, (gsize) sh->max_ctx * d);
  values = g_new (float, (gsize) sh->max_ctx * d);
  for (gint32 r = p->row0; r < p->row0 + p->n_rows; r++)
    {
      const gint32 pos = amk_cpu_load_i32 (&b[ins->buffers[4]], r);
      const gint32 seq = ins->buffers[5] != AMK_NO_BUFFER ? amk_cpu_load_i32 (&b[ins->buffers[5]], r) : 0;

      for (gint32 t = 0; t <= pos; t++)
        {
          amk_cpu_load_run (kc, cache_row (sh, seq, t, g), d, keys + (gsize) t * d);
          amk_cpu_load_run (vc, cache_row (sh, seq, t, g), d, values + (gsize) t * d);
        }
      for (gint32 h = g * group; h < (g + 1) * group; h++)
        {
          const guint64 o = ((guint64) r * n_q + h) * d;
          double m = -INFINITY, l = 0.0;

          amk_cpu_load_run (qkv, r * w + (guint64) h * d, d, qf);
          memset (acc, 0, sizeof (double) * d);
          for (gint32 t = 0; t <= pos; t++)
            {
              const float *k = keys + (gsize) t * d;
              double dot = 0.0;

              for (gint32 c = 0; c < d; c++)
                dot += (double) qf[c] * k[c];
              scores[t] = p->scale * dot;
              m = MAX (m, scores[t]);
            }
          for (gint32 t = 0; t <= pos; t++)
            {
              const float *v = values + (gsize) t * d;
              const double e = exp (scores[t] - m);

              l += e;
              for (gint32 c = 0; c < d; c++)
                acc[c] += e * v[c];
            }
          /* a padding row (pos < 0) has no positions: zeros */
          for (gint32 c = 0; c < d; c++)
            amk_cpu_store (out, o + c, pos < 0 ? 0.0f : (float) (acc[c] / l));
        }
    }
  return AMK_ABORT_CODE_NONE;
}

/* ---- descriptors -------------------------------------------------------------------- */

static const AmkParamField rope_rows_fields[] = {
  AMK_PARAM_INT (rope_rows, shape.head_dim), AMK_PARAM_INT (rope_rows, shape.n_q_heads),
  AMK_PARAM_INT (rope_rows, shape.n_kv_heads), AMK_PARAM_INT (rope_rows, shape.max_ctx),
  AMK_PARAM_INT (rope_rows, row0), AMK_PARAM_INT (rope_rows, n_rows),
  AMK_PARAM_FLOAT (rope_rows, freq.theta), AMK_PARAM_FLOAT (rope_rows, freq.factor),
  AMK_PARAM_FLOAT (rope_rows, freq.low_freq_factor), AMK_PARAM_FLOAT (rope_rows, freq.high_freq_factor),
  AMK_PARAM_INT (rope_rows, freq.original_context), AMK_PARAM_FLOAT (rope_rows, eps),
};
static const AmkParamField attn_rows_fields[] = {
  AMK_PARAM_INT (attn_rows, shape.head_dim), AMK_PARAM_INT (attn_rows, shape.n_q_heads),
  AMK_PARAM_INT (attn_rows, shape.n_kv_heads), AMK_PARAM_INT (attn_rows, shape.max_ctx),
  AMK_PARAM_INT (attn_rows, kv_head), AMK_PARAM_INT (attn_rows, row0),
  AMK_PARAM_INT (attn_rows, n_rows), AMK_PARAM_FLOAT (attn_rows, scale),
};

/* seq (slot 4) may be absent; the q and k norm weights are two more operands */
/* ---- accesses (the race proof) ------------------------------------------------------ */

/* Every row of every slot of a cache (the rows are pos's and seq's, read on the device),
 * at the columns of kv heads g0 .. g0+count. */
static void
all_cache_rows (AmkProgram *self, AmkAccessBox *out, guint *n, const amk_instruction_t *ins, guint slot,
                const amk_attn_shape_t *sh, guint64 g0, guint64 count, AmkAccessKind kind)
{
  const guint64 width = (guint64) sh->n_kv_heads * sh->head_dim;
  const guint64 rows = amk_verify_slot_buffer (self, ins, slot)->n_elements / width;

  amk_access_rows (out, n, ins, slot, g0 * sh->head_dim, count * sh->head_dim, width, rows, kind, TRUE);
}

static guint
accesses_rope_rows (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_rope_rows_params_t *p = &ins->params.rope_rows;
  const guint64 w = qkv_width (&p->shape);
  guint n = 0;

  amk_access_range (out, &n, ins, 0, (guint64) p->row0 * w, (guint64) p->n_rows * w, AMK_ACCESS_WRITE);
  all_cache_rows (self, out, &n, ins, 1, &p->shape, 0, p->shape.n_kv_heads, AMK_ACCESS_WRITE);
  all_cache_rows (self, out, &n, ins, 2, &p->shape, 0, p->shape.n_kv_heads, AMK_ACCESS_WRITE);
  amk_access_range (out, &n, ins, 3, p->row0, p->n_rows, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 4, p->row0, p->n_rows, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 5, 0, p->shape.head_dim, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 6, 0, p->shape.head_dim, AMK_ACCESS_READ);
  return n;
}

/* rows row0.. of the output and of the query heads, at the columns of the kv head's
 * group; the caches' columns of the kv head */
static guint
accesses_attn_rows (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_attn_rows_params_t *p = &ins->params.attn_rows;
  const guint64 hd = p->shape.head_dim, group = (guint64) p->shape.n_q_heads / p->shape.n_kv_heads;
  const guint64 qd = (guint64) p->shape.n_q_heads * hd, w = qkv_width (&p->shape);
  const guint64 col = (guint64) p->kv_head * group * hd;
  guint n = 0;

  amk_access_rows (out, &n, ins, 0, (guint64) p->row0 * qd + col, group * hd, qd, p->n_rows,
                   AMK_ACCESS_WRITE, FALSE);
  amk_access_rows (out, &n, ins, 1, (guint64) p->row0 * w + col, group * hd, w, p->n_rows,
                   AMK_ACCESS_READ, FALSE);
  all_cache_rows (self, out, &n, ins, 2, &p->shape, p->kv_head, 1, AMK_ACCESS_READ);
  all_cache_rows (self, out, &n, ins, 3, &p->shape, p->kv_head, 1, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 4, p->row0, p->n_rows, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 5, p->row0, p->n_rows, AMK_ACCESS_READ);
  return n;
}

const AmkOpClass amk_op_rope_rows = {
  .opcode = AMK_ABI_OP_ROPE_ROWS, .name = "ROPE_ROWS", .n_buffers = 5, .n_extra = 2,
  .optional_slots = 0x70u,
  .fields = AMK_PARAM_FIELDS (rope_rows_fields),
  .verify = verify_rope_rows, .plan = plan_rope_rows, .lower = lower_rope_rows,
  .accesses = accesses_rope_rows, .bytes = bytes_rope_rows,
  .run_cpu = run_rope_rows,
};

/* seq (slot 5) may be absent */
const AmkOpClass amk_op_attn_rows = {
  .opcode = AMK_ABI_OP_ATTN_ROWS, .name = "ATTN_ROWS", .n_buffers = 6,
  .optional_slots = 0x20u,
  .fields = AMK_PARAM_FIELDS (attn_rows_fields),
  .verify = verify_attn_rows, .plan = plan_attn_rows, .lower = lower_attn_rows,
  .accesses = accesses_attn_rows, .bytes = bytes_attn_rows,
  .run_cpu = run_attn_rows,
};
