/* amk-op-attention.c: the attention ops ROPE_KV, ATTN_DECODE (with the merge and RoPE
 * fused or not) and ATTN_REDUCE; their parameters in kernels/amk-abi.h, the device side in
 * kernels/ops-attention.cuh.
 *
 * The verifier's checks run once the generic ones passed (buffer indices in range, the
 * right number of buffers); which operands an op writes comes from amk_abi_written_slots.
 * What an instruction touches, in elements from the start of each buffer (D = head_dim,
 * Q and KV the query and key/value heads, C = max_ctx, S = n_splits):
 *   ROPE_KV:     q [Q D] (read, written), k [KV D] (read, written), v [KV D],
 *                k cache and v cache [C KV D] (written), pos [1]
 *   ATTN_DECODE: partial [Q S (D + 2)] (written), q [Q D], caches [C KV D], pos [1],
 *                with the merge fused out [Q D] (written) and the arrival counter;
 *                with RoPE fused as well qkv [(Q + 2 KV) D] instead of q, the caches
 *                written, cos_sin [C D]
 *   ATTN_REDUCE: out [Q D] (written), partial [Q S (D + 2)]
 * A written buffer may not share a byte with any other operand's buffer, the whole
 * buffers compared, like the device check (q and k are rotated in place: that is one
 * operand each, not an alias).
 *
 * The CPU reference is obviously correct before fast: one head, one position at a time;
 * sums in double, results stored as fp32 (bf16 caches with round-to-nearest-even). The
 * RoPE angle is computed in fp32 step by step like HF transformers (inv_freq and the
 * Llama-3 scaling in amk-rope.c, then pos * inv_freq), with one exception: theta^e is
 * evaluated in double and rounded once, where torch's fp32 pow may be an ulp off. cos and
 * sin of the fp32 angle are the correctly rounded fp32 values. The GPU does the very same
 * operations, so the rotated vectors agree to the bit.
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

/* ---- the op API --------------------------------------------------------------------- */

/* The head layout shared by the attention ops; returns the cache length (positions). */
static gboolean
heads_ok (AmkProgram *self, const char *op, guint head_dim, guint n_q, guint n_kv,
         gint k_cache, gint v_cache, gint pos, guint64 *max_ctx, GError **error)
{
  AmkBufferInfo *kc, *vc;

  if (head_dim < 2 || head_dim % 2 != 0 || n_q == 0 || n_kv == 0 || n_q % n_kv != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: head_dim %u must be even and the %u query heads a multiple of the %u key/value heads"),
                   op, head_dim, n_q, n_kv);
      return FALSE;
    }
  if ((kc = amk_op_tensor (self, op, _("the key cache"), k_cache, error)) == NULL ||
      (vc = amk_op_tensor (self, op, _("the value cache"), v_cache, error)) == NULL ||
      !amk_op_int_tensor (self, op, _("the position"), pos, 1, error))
    return FALSE;
  if ((kc->dtype != AMK_DTYPE_F32 && kc->dtype != AMK_DTYPE_BF16) || kc->dtype != vc->dtype ||
      kc->n_elements != vc->n_elements || kc->n_elements % ((guint64) n_kv * head_dim) != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: the caches “%s” and “%s” must both be f32 or bf16, [positions, %u × %u]"),
                   op, kc->name, vc->name, n_kv, head_dim);
      return FALSE;
    }
  *max_ctx = kc->n_elements / ((guint64) n_kv * head_dim);
  return TRUE;
}

/**
 * amk_program_op_rope_kv:
 * @self: a program
 * @q: the query heads, f32 `[n_q_heads × head_dim]`, rotated in place
 * @k: the key heads, f32 `[n_kv_heads × head_dim]`, rotated in place
 * @v: the value heads, f32 `[n_kv_heads × head_dim]`
 * @k_cache: the key cache, `[positions, n_kv_heads × head_dim]` (bf16 or f32)
 * @v_cache: the value cache, like @k_cache
 * @pos: an i32 buffer whose element 0 is the position, read on the device
 * @head_dim: elements per head (even)
 * @n_q_heads: query heads
 * @n_kv_heads: key/value heads (grouped-query attention)
 * @theta: the RoPE base
 * @factor: the Llama-3 frequency scaling factor, or 0 for plain RoPE
 * @low_freq_factor: Llama-3 scaling's low frequency factor
 * @high_freq_factor: Llama-3 scaling's high frequency factor
 * @original_context: Llama-3 scaling's original context length
 * @error: return location for a #GError
 *
 * Records the rotary embedding of @q and @k at position `pos[0]` (rotate-half pairs,
 * like Llama in HF transformers) and the append of the rotated @k and of @v at row
 * `pos[0]` of the caches.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_rope_kv (AmkProgram  *self,
                        gint         q,
                        gint         k,
                        gint         v,
                        gint         k_cache,
                        gint         v_cache,
                        gint         pos,
                        guint        head_dim,
                        guint        n_q_heads,
                        guint        n_kv_heads,
                        gfloat       theta,
                        gfloat       factor,
                        gfloat       low_freq_factor,
                        gfloat       high_freq_factor,
                        guint        original_context,
                        GError     **error)
{
  guint64 max_ctx = 0;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "ROPE_KV", error) ||
      !heads_ok (self, "ROPE_KV", head_dim, n_q_heads, n_kv_heads, k_cache, v_cache, pos, &max_ctx, error) ||
      !amk_op_f32_of (self, "ROPE_KV", _("the queries"), q, (guint64) n_q_heads * head_dim, error) ||
      !amk_op_f32_of (self, "ROPE_KV", _("the keys"), k, (guint64) n_kv_heads * head_dim, error) ||
      !amk_op_f32_of (self, "ROPE_KV", _("the values"), v, (guint64) n_kv_heads * head_dim, error) ||
      !amk_op_writable ("ROPE_KV", amk_program_get_buffer_info (self, q), error) ||
      !amk_op_writable ("ROPE_KV", amk_program_get_buffer_info (self, k), error) ||
      !amk_op_writable ("ROPE_KV", amk_program_get_buffer_info (self, k_cache), error) ||
      !amk_op_writable ("ROPE_KV", amk_program_get_buffer_info (self, v_cache), error))
    return -1;
  if (!amk_op_rope_freq_ok ("ROPE_KV", theta, factor, low_freq_factor, high_freq_factor, original_context, error))
    return -1;
  return amk_op_record (self, AMK_ABI_OP_ROPE_KV, (gint32[]) { q, k, v, k_cache, v_cache, pos },
                 &(amk_params_t) { .rope_kv = {
                   .shape = { (gint32) head_dim, (gint32) n_q_heads, (gint32) n_kv_heads, (gint32) max_ctx },
                   .freq = { theta, factor, low_freq_factor, high_freq_factor, (gint32) original_context } } });
}

/* ATTN_DECODE (with RoPE fused when cos_sin is a buffer: q is then qkv) and the
 * ATTN_REDUCE that the compiler fuses into it. Returns the index of the merging op. */
static gint
record_attention (AmkProgram *self, gint out, gint q, gint k_cache, gint v_cache, gint pos,
                  gint cos_sin, guint head_dim, guint n_q_heads, guint n_kv_heads, guint n_splits,
                  gfloat scale, guint64 max_ctx, GError **error)
{
  gint partial;

  n_splits = amk_program_attention_splits (self, n_kv_heads, n_splits, max_ctx);
  partial = amk_op_internal_scratch (self, "attention-partials", AMK_DTYPE_F32,
                              (guint64) n_q_heads * n_splits * (head_dim + 2), error);
  if (partial < 0)
    return -1;
  amk_op_record (self, AMK_ABI_OP_ATTN_DECODE, (gint32[]) { partial, q, k_cache, v_cache, pos, cos_sin },
          &(amk_params_t) { .attn_decode = {
            .shape = { (gint32) head_dim, (gint32) n_q_heads, (gint32) n_kv_heads, (gint32) max_ctx },
            .n_splits = (gint32) n_splits, .scale = scale, .min_split = ATTN_MIN_SPLIT_POSITIONS } });
  return amk_op_record (self, AMK_ABI_OP_ATTN_REDUCE, (gint32[]) { out, partial, G_MININT32 },
                 &(amk_params_t) { .attn_reduce = { .head_dim = (gint32) head_dim,
                                                    .n_q_heads = (gint32) n_q_heads,
                                                    .n_splits = (gint32) n_splits } });
}

/* The queries of ATTENTION: f32, at least n elements, the query heads at the front (a
 * q/k/v projection's output, whose key and value heads ROPE_ROWS already appended). */
static gboolean
queries_ok (AmkProgram *self, gint q, guint64 n, GError **error)
{
  AmkBufferInfo *info = amk_op_tensor (self, "ATTENTION", _("the queries"), q, error);

  if (info == NULL)
    return FALSE;
  if (info->dtype != AMK_DTYPE_F32 || info->n_elements < n)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("ATTENTION: the queries “%s” must be f32 with at least %" PRIu64 " elements"),
                   info->name, n);
      return FALSE;
    }
  return TRUE;
}

/**
 * amk_program_op_attention:
 * @self: a program
 * @out: the attention output, f32 `[n_q_heads × head_dim]`
 * @q: the (rotated) queries, f32 `[n_q_heads × head_dim]` at the front of the buffer
 *   (it may hold more: the key and value heads of a q/k/v projection after them)
 * @k_cache: the key cache, `[positions, n_kv_heads × head_dim]` (bf16 or f32)
 * @v_cache: the value cache, like @k_cache
 * @pos: an i32 buffer whose element 0 is the current position: positions `0 .. pos`
 *   are attended to
 * @head_dim: elements per head
 * @n_q_heads: query heads
 * @n_kv_heads: key/value heads (query head `h` reads kv head `h / (n_q_heads /
 *   n_kv_heads)`)
 * @n_splits: parts the positions are split into, each on its own queue, or 0 for as
 *   many as fill the queues
 * @scale: the score scale, usually `1 / sqrt(head_dim)`
 * @error: return location for a #GError
 *
 * Records decode attention: per (key/value head, split of the positions) a partial
 * softmax, then a numerically safe merge of the splits. Recorded as two ops.
 *
 * Returns: the index of the merging op, or -1 with @error set
 */
gint
amk_program_op_attention (AmkProgram  *self,
                          gint         out,
                          gint         q,
                          gint         k_cache,
                          gint         v_cache,
                          gint         pos,
                          guint        head_dim,
                          guint        n_q_heads,
                          guint        n_kv_heads,
                          guint        n_splits,
                          gfloat       scale,
                          GError     **error)
{
  guint64 max_ctx = 0;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "ATTENTION", error) ||
      !heads_ok (self, "ATTENTION", head_dim, n_q_heads, n_kv_heads, k_cache, v_cache, pos, &max_ctx, error) ||
      !queries_ok (self, q, (guint64) n_q_heads * head_dim, error) ||
      !amk_op_f32_of (self, "ATTENTION", _("the output"), out, (guint64) n_q_heads * head_dim, error) ||
      !amk_op_writable ("ATTENTION", amk_program_get_buffer_info (self, out), error))
    return -1;
  if (out == q || !(scale > 0.0f && scale < G_MAXFLOAT))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("ATTENTION: the output must not be the queries, and the scale must be positive"));
      return -1;
    }
  return record_attention (self, out, q, k_cache, v_cache, pos, AMK_NO_BUFFER, head_dim, n_q_heads,
                           n_kv_heads, n_splits, scale, max_ctx, error);
}

/**
 * amk_program_op_rope_attention:
 * @self: a program
 * @out: the attention output, f32 `[n_q_heads × head_dim]`
 * @qkv: the query, key and value heads before RoPE, f32
 *   `[(n_q_heads + 2 × n_kv_heads) × head_dim]`: the query heads, then the key heads,
 *   then the value heads (a q/k/v projection's output); not modified
 * @k_cache: the key cache, `[positions, n_kv_heads × head_dim]` (bf16 or f32)
 * @v_cache: the value cache, like @k_cache
 * @pos: an i32 buffer whose element 0 is the position, read on the device
 * @head_dim: elements per head (even)
 * @n_q_heads: query heads
 * @n_kv_heads: key/value heads (grouped-query attention)
 * @n_splits: parts the positions are split into, or 0 for as many as fill the queues
 * @scale: the score scale, usually `1 / sqrt(head_dim)`
 * @theta: the RoPE base
 * @factor: the Llama-3 frequency scaling factor, or 0 for plain RoPE
 * @low_freq_factor: Llama-3 scaling's low frequency factor
 * @high_freq_factor: Llama-3 scaling's high frequency factor
 * @original_context: Llama-3 scaling's original context length
 * @error: return location for a #GError
 *
 * Records what [method@Amk.Program.op_rope_kv] and [method@Amk.Program.op_attention]
 * do together, as one stage: the rotary embedding of the query and key heads at position
 * `pos[0]`, the append of the rotated key and of the value at row `pos[0]` of the caches,
 * and decode attention over positions `0 .. pos[0]`. Each attention instruction rotates
 * the query heads it needs itself, which saves the RoPE stage's round trips through
 * device memory. The shapes must fit one instruction's shared memory: a head dimension
 * of 32, 64, 128 or 256, at most 256 query elements per key/value head (4 heads of 64,
 * 2 of 128), and at most 1024 scores per split (with 4 query heads per key/value head
 * and the default splits on 132 queues, contexts up to 4096); other shapes need the two
 * separate ops.
 *
 * Returns: the index of the op that writes @out, or -1 with @error set
 */
gint
amk_program_op_rope_attention (AmkProgram  *self,
                               gint         out,
                               gint         qkv,
                               gint         k_cache,
                               gint         v_cache,
                               gint         pos,
                               guint        head_dim,
                               guint        n_q_heads,
                               guint        n_kv_heads,
                               guint        n_splits,
                               gfloat       scale,
                               gfloat       theta,
                               gfloat       factor,
                               gfloat       low_freq_factor,
                               gfloat       high_freq_factor,
                               guint        original_context,
                               GError     **error)
{
  g_autofree char *name = NULL;
  g_autoptr(GBytes) bytes = NULL;
  guint64 max_ctx = 0;
  gint table;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!amk_op_can_record (self, "ROPE_ATTENTION", error) ||
      !heads_ok (self, "ROPE_ATTENTION", head_dim, n_q_heads, n_kv_heads, k_cache, v_cache, pos,
                    &max_ctx, error) ||
      !amk_op_f32_of (self, "ROPE_ATTENTION", _("the queries, keys and values"), qkv,
               ((guint64) n_q_heads + 2ull * n_kv_heads) * head_dim, error) ||
      !amk_op_f32_of (self, "ROPE_ATTENTION", _("the output"), out, (guint64) n_q_heads * head_dim, error) ||
      !amk_op_writable ("ROPE_ATTENTION", amk_program_get_buffer_info (self, out), error) ||
      !amk_op_writable ("ROPE_ATTENTION", amk_program_get_buffer_info (self, k_cache), error) ||
      !amk_op_writable ("ROPE_ATTENTION", amk_program_get_buffer_info (self, v_cache), error) ||
      !amk_op_rope_freq_ok ("ROPE_ATTENTION", theta, factor, low_freq_factor, high_freq_factor,
                       original_context, error))
    return -1;
  if (out == qkv || !(scale > 0.0f && scale < G_MAXFLOAT))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("ROPE_ATTENTION: the output must not be the queries, and the scale must be positive"));
      return -1;
    }
  if (!amk_program_rope_attention_fits (self, head_dim, n_q_heads, n_kv_heads, max_ctx, n_splits))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("ROPE_ATTENTION: head_dim %u (must be 32, 64, 128 or 256), %u query heads per key/value head and %" PRIu64 " positions in %u splits do not fit one attention instruction’s shared memory; use op_rope_kv and op_attention"),
                   head_dim, n_q_heads / n_kv_heads, max_ctx,
                   amk_program_attention_splits (self, n_kv_heads, n_splits, max_ctx));
      return -1;
    }

  /* cos and sin of every position's angles, computed on the host like the CPU
   * executor's ROPE_KV (amk-rope.c): every executor rotates by the same values, and the
   * GPU skips the double-precision cos and sin. One table per set of parameters. */
  name = g_strdup_printf ("rope-cos-sin.%u.%" PRIu64 ".%a.%a.%a.%a.%u", head_dim, max_ctx, theta, factor,
                          low_freq_factor, high_freq_factor, original_context);
  table = amk_program_find_buffer (self, name);
  if (table < 0)
    {
      const guint half = head_dim / 2;
      float *cs = g_new (float, max_ctx * head_dim);
      gint64 shape[3] = { (gint64) max_ctx, half, 2 };

      for (guint c = 0; c < half; c++)
        {
          const float inv_freq = amk_rope_inv_freq ((gint32) c, (gint32) head_dim, theta, factor,
                                                    low_freq_factor, high_freq_factor,
                                                    (gint32) original_context);
          for (guint64 t = 0; t < max_ctx; t++)
            amk_rope_cos_sin ((gint64) t, inv_freq, &cs[(t * half + c) * 2], &cs[(t * half + c) * 2 + 1]);
        }
      bytes = g_bytes_new_take (cs, max_ctx * head_dim * sizeof (float));
      table = amk_program_add_buffer (self, name, AMK_DTYPE_F32, shape, 3, AMK_BUFFER_ROLE_CONSTANT, error);
      if (table < 0 || !amk_program_set_buffer_data (self, (guint) table, bytes, error))
        return -1;
    }
  return record_attention (self, out, qkv, k_cache, v_cache, pos, table, head_dim, n_q_heads,
                           n_kv_heads, n_splits, scale, max_ctx, error);
}

/* ---- verifier ----------------------------------------------------------------------- */

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

/* head_dim and, unless n_kv < 0, the query and key/value head counts. */
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
  const amk_rope_freq_t *f = &c->ins->params.rope_kv.freq;
  const float theta = f->theta, factor = f->factor;
  const float low = f->low_freq_factor, high = f->high_freq_factor;
  const gint32 old_ctx = f->original_context;

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
  const amk_rope_kv_params_t *p = &c->ins->params.rope_kv;
  const gint32 d = p->shape.head_dim, n_q = p->shape.n_q_heads, n_kv = p->shape.n_kv_heads;
  const gint32 max_ctx = p->shape.max_ctx;
  Operand ops[6];
  guint64 cache;

  if (!check_heads (c, d, G_MAXINT32, n_q, n_kv, error) ||
      !check_max_ctx (c, max_ctx, error) ||
      !check_head_range (c, p->head0, p->n_heads, (gint64) n_q + n_kv, error) ||
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
  const amk_attn_decode_params_t *p = &c->ins->params.attn_decode;
  const gint32 d = p->shape.head_dim, n_q = p->shape.n_q_heads, n_kv = p->shape.n_kv_heads;
  const gint32 max_ctx = p->shape.max_ctx;
  const gint32 kv_head = p->kv_head, split = p->split, n_splits = p->n_splits;
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
  if (p->min_split < 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): the fewest positions per split (%d) must not be negative"),
                   c->queue, c->pos, c->op, p->min_split);
      return FALSE;
    }
  if (!isfinite (p->scale))
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
  if (ropes && !amk_abi_rope_attn_fits (d, n_q / n_kv, max_ctx, n_splits, p->min_split))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): with RoPE fused, head dimension %d (32, 64, 128 or 256), %d query heads per key/value head and %d positions in %d splits do not fit one instruction’s shared memory; record RoPE and the attention as separate ops"),
                   c->queue, c->pos, c->op, d, n_q / n_kv, max_ctx, n_splits);
      return FALSE;
    }
  if (merges && (p->arrival_counter < 0 || (guint) p->arrival_counter >= c->self->counter_names->len))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (%s): the arrival counter %d does not exist; the program has %u counters"),
                   c->queue, c->pos, c->op, p->arrival_counter, c->self->counter_names->len);
      return FALSE;
    }
  return check_operands (c, ops, ropes ? 7 : merges ? 6 : 5, error) &&
         check_same_cache_dtype (c, 2, 3, error);
}

static gboolean
verify_attn_reduce (const Ctx *c, GError **error)
{
  const amk_attn_reduce_params_t *p = &c->ins->params.attn_reduce;
  const gint32 d = p->head_dim, n_q = p->n_q_heads, n_splits = p->n_splits;
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
  if (!check_head_range (c, p->head0, p->n_heads, n_q, error))
    return FALSE;

  ops[0] = (Operand) { 0, _("the output"), F32_ONLY, (guint64) n_q * d };
  ops[1] = (Operand) { 1, _("the partial results"), F32_ONLY, product3 (n_q, n_splits, (guint64) d + 2) };
  return check_operands (c, ops, G_N_ELEMENTS (ops), error);
}

/* The verifier's entry points: a context for the checks above. */
static gboolean
verify_rope_kv_instruction (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                            GError **error)
{
  const Ctx c = { self, queue, pos, ins, "ROPE_KV" };

  return verify_rope_kv (&c, error);
}

static gboolean
verify_attn_decode_instruction (AmkProgram *self, guint queue, guint pos,
                                const amk_instruction_t *ins, GError **error)
{
  const Ctx c = { self, queue, pos, ins, "ATTN_DECODE" };

  return verify_attn_decode (&c, error);
}

static gboolean
verify_attn_reduce_instruction (AmkProgram *self, guint queue, guint pos,
                                const amk_instruction_t *ins, GError **error)
{
  const Ctx c = { self, queue, pos, ins, "ATTN_REDUCE" };

  return verify_attn_reduce (&c, error);
}

/* ---- lowering and cost -------------------------------------------------------------- */

/* query heads, then key heads */
static void
plan_rope_kv (AmkLowering *lw)
{
  lw->n = (guint64) lw->op->params.rope_kv.shape.n_q_heads + lw->op->params.rope_kv.shape.n_kv_heads;
  lw->n_tiles = MIN (lw->n, (guint64) lw->program->num_queues);
}

static void
lower_rope_kv (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const guint64 s = t->start, e = t->end;
  const guint64 hd = op->params.rope_kv.shape.head_dim, nq = op->params.rope_kv.shape.n_q_heads;

  amk_tile_use_buffers (t, op, 6);
  t->ins.params.rope_kv.head0 = (gint32) s;
  t->ins.params.rope_kv.n_heads = (gint32) (e - s);
  if (s < nq)
    amk_tile_access (t, op->buffers[0], s * hd, MIN (e, nq) * hd, TRUE);
  if (e > nq)
    {
      const guint64 k0 = (MAX (s, nq) - nq) * hd, k1 = (e - nq) * hd;
      amk_tile_access (t, op->buffers[1], k0, k1, TRUE);
      amk_tile_access (t, op->buffers[2], k0, k1, FALSE);
      /* the row the keys go to is known on the device only */
      amk_tile_access (t, op->buffers[3], 0, amk_lower_buffer (lw, op->buffers[3])->n_elements, TRUE);
      amk_tile_access (t, op->buffers[4], 0, amk_lower_buffer (lw, op->buffers[4])->n_elements, TRUE);
    }
  amk_tile_access (t, op->buffers[5], 0, 1, FALSE);
}

static double
bytes_rope_kv (AmkProgram *self, const amk_instruction_t *ins)
{
  return 4.0 * 4 * MAX (ins->params.rope_kv.shape.head_dim, 0) * MAX (ins->params.rope_kv.n_heads, 0);
}

/* (key/value head, split) pairs, one per tile */
static void
plan_attn_decode (AmkLowering *lw)
{
  lw->n = lw->n_tiles = (guint64) lw->op->params.attn_decode.shape.n_kv_heads *
                        lw->op->params.attn_decode.n_splits;
}

/* With lw->merge set (the ATTN_REDUCE fused into it) the last split of each key/value head
 * to finish merges that head's query heads. */
static void
lower_attn_decode (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const guint64 s = t->start;
  const amk_attn_decode_params_t *ap = &op->params.attn_decode;
  const guint64 hd = ap->shape.head_dim, nq = ap->shape.n_q_heads;
  const guint64 nkv = ap->shape.n_kv_heads, ns = ap->n_splits;
  const guint64 group = s / ns, split = s % ns, per = nq / nkv;
  /* RoPE fused (amk_program_op_rope_attention): b1 is qkv, b6 the cos and sin
   * table; the op is recorded with its merge, so it always fuses */
  const gboolean ropes = op->buffers[5] != AMK_NO_BUFFER && lw->merge != NULL;

  amk_tile_use_buffers (t, op, 5);
  t->ins.params.attn_decode.kv_head = (gint32) group;
  t->ins.params.attn_decode.split = (gint32) split;
  if (lw->merge != NULL)
    {
      if (split == 0)
        lw->arrival = amk_program_add_counter (lw->program, NULL);
      t->ins.n_buffers = 6;
      t->ins.buffers[5] = lw->merge->buffers[0];
      t->ins.params.attn_decode.arrival_counter = lw->arrival;
      amk_tile_access (t, lw->merge->buffers[0], group * per * hd, (group + 1) * per * hd, TRUE);
      /* one of the group's tiles reads all its partial rows */
      amk_tile_access (t, op->buffers[0], group * per * ns * (hd + 2), (group + 1) * per * ns * (hd + 2), TRUE);
    }
  else
    /* the partial rows of the group's heads for this split, as one covering range */
    amk_tile_access (t, op->buffers[0], (group * per * ns + split) * (hd + 2),
                     (((group + 1) * per - 1) * ns + split + 1) * (hd + 2), TRUE);
  amk_tile_access (t, op->buffers[1], group * per * hd, (group + 1) * per * hd, FALSE);
  if (ropes)
    {
      t->ins.n_buffers = 7;
      t->ins.buffers[6] = op->buffers[5];
      /* the group's key and value heads; the row it appends is known on the
       * device only */
      amk_tile_access (t, op->buffers[1], (nq + group) * hd, (nq + group + 1) * hd, FALSE);
      amk_tile_access (t, op->buffers[1], (nq + nkv + group) * hd, (nq + nkv + group + 1) * hd, FALSE);
      amk_tile_access (t, op->buffers[5], 0, amk_lower_buffer (lw, op->buffers[5])->n_elements, FALSE);
    }
  amk_tile_access (t, op->buffers[2], 0, amk_lower_buffer (lw, op->buffers[2])->n_elements, ropes);
  amk_tile_access (t, op->buffers[3], 0, amk_lower_buffer (lw, op->buffers[3])->n_elements, ropes);
  amk_tile_access (t, op->buffers[4], 0, 1, FALSE);
}

/* the whole cache, as if full: the position is known on the device only */
static double
bytes_attn_decode (AmkProgram *self, const amk_instruction_t *ins)
{
  const amk_attn_decode_params_t *p = &ins->params.attn_decode;

  return 2.0 * 2 * MAX (p->shape.head_dim, 0) * MAX (p->shape.max_ctx, 0) / MAX (p->n_splits, 1);
}

/* query heads */
static void
plan_attn_reduce (AmkLowering *lw)
{
  lw->n = lw->op->params.attn_reduce.n_q_heads;
  lw->n_tiles = MIN (lw->n, (guint64) lw->program->num_queues);
}

static void
lower_attn_reduce (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const guint64 s = t->start, e = t->end;
  const guint64 hd = op->params.attn_reduce.head_dim, ns = op->params.attn_reduce.n_splits;

  amk_tile_use_buffers (t, op, 2);
  t->ins.params.attn_reduce.head0 = (gint32) s;
  t->ins.params.attn_reduce.n_heads = (gint32) (e - s);
  amk_tile_access (t, op->buffers[0], s * hd, e * hd, TRUE);
  amk_tile_access (t, op->buffers[1], s * ns * (hd + 2), e * ns * (hd + 2), FALSE);
}

static double
bytes_attn_reduce (AmkProgram *self, const amk_instruction_t *ins)
{
  const amk_attn_reduce_params_t *p = &ins->params.attn_reduce;

  return 4.0 * (MAX (p->head_dim, 0) + 2) * MAX (p->n_splits, 0) * MAX (p->n_heads, 0);
}

/* ---- CPU reference ------------------------------------------------------------------ */




/* inv_freq[c] of head dimension d with the ROPE_KV instruction's parameters. */
static float
rope_inv_freq (gint32 c, gint32 d, const amk_rope_freq_t *f)
{
  return amk_rope_inv_freq (c, d, f->theta, f->factor, f->low_freq_factor, f->high_freq_factor,
                            f->original_context);
}

/* The position, or -1 (with *detail) when it is outside [0, max_ctx). */
static gint32
read_pos (const amk_instruction_t *ins, const amk_attn_shape_t *shape, AmkCpuBuffer *buffers,
          guint slot, gint *detail)
{
  const gint32 pos = amk_cpu_load_i32 (&buffers[ins->buffers[slot]], 0);

  if (pos < 0 || pos >= shape->max_ctx)
    {
      *detail = ins->buffers[slot];
      return -1;
    }
  return pos;
}

/* The rotate-half step of one pair (x1, x2) by the angle whose cosine and sine are cs
 * and sn, each fp32 product and sum rounded on its own, as the GPU does. */
static void AMK_NO_CONTRACT
rotate_pair (float x1, float x2, float cs, float sn, float *r1, float *r2)
{
  const float x1c = x1 * cs, x2s = x2 * sn, x2c = x2 * cs, x1s = x1 * sn;

  *r1 = x1c - x2s;
  *r2 = x2c + x1s;
}

static AmkAbortCode AMK_NO_CONTRACT
run_rope_kv (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_rope_kv_params_t *p = &ins->params.rope_kv;
  const gint32 d = p->shape.head_dim, n_q = p->shape.n_q_heads, n_kv = p->shape.n_kv_heads;
  const gint32 first = p->head0, count = p->n_heads;
  const gint32 half = d / 2;
  AmkCpuBuffer *q = &b[ins->buffers[0]], *k = &b[ins->buffers[1]], *v = &b[ins->buffers[2]];
  AmkCpuBuffer *kc = &b[ins->buffers[3]], *vc = &b[ins->buffers[4]];
  const gint32 pos = read_pos (ins, &p->shape, b, 5, detail);

  if (pos < 0)
    return AMK_ABORT_CODE_CHECK;

  for (gint32 h = first; h < first + count; h++)
    {
      const gboolean is_key = h >= n_q;
      AmkCpuBuffer *x = is_key ? k : q;
      const guint64 base = (guint64) (is_key ? h - n_q : h) * d;
      const guint64 row = ((guint64) pos * n_kv + (is_key ? h - n_q : 0)) * d;

      for (gint32 c = 0; c < half; c++)
        {
          float cs, sn, r1, r2;

          amk_rope_cos_sin (pos, rope_inv_freq (c, d, &p->freq), &cs, &sn);

          rotate_pair (amk_cpu_load (x, base + c), amk_cpu_load (x, base + c + half), cs, sn, &r1, &r2);
          amk_cpu_store (x, base + c, r1);
          amk_cpu_store (x, base + c + half, r2);
          if (is_key)
            {
              amk_cpu_store (kc, row + c, r1);
              amk_cpu_store (kc, row + c + half, r2);
              amk_cpu_store (vc, row + c, amk_cpu_load (v, base + c));
              amk_cpu_store (vc, row + c + half, amk_cpu_load (v, base + c + half));
            }
        }
    }
  return AMK_ABORT_CODE_NONE;
}

/* RoPE fused into ATTN_DECODE (a seventh buffer, the cos and sin of every position's
 * angles): the group's query heads of qkv rotated into qrot, and, when the split holds
 * pos, key head g rotated and value head g appended at row pos of the caches. The fp32
 * steps of op_rope_kv. */
static void
rope_fused (const amk_instruction_t *ins, AmkCpuBuffer *b, gint32 pos, gboolean holds, float *qrot)
{
  const amk_attn_decode_params_t *p = &ins->params.attn_decode;
  const gint32 d = p->shape.head_dim, n_q = p->shape.n_q_heads, n_kv = p->shape.n_kv_heads;
  const gint32 g = p->kv_head;
  const gint32 group = n_q / n_kv, half = d / 2;
  AmkCpuBuffer *qkv = &b[ins->buffers[1]], *cos_sin = &b[ins->buffers[6]];
  AmkCpuBuffer *kc = &b[ins->buffers[2]], *vc = &b[ins->buffers[3]];
  const guint64 row = ((guint64) pos * n_kv + g) * d;

  for (gint32 h = 0; h <= group; h++)
    {
      const gboolean is_key = h == group;
      const guint64 base = (guint64) (is_key ? n_q + g : g * group + h) * d;
      const guint64 v_base = (guint64) (n_q + n_kv + g) * d;

      if (is_key && !holds)
        break;
      for (gint32 c = 0; c < half; c++)
        {
          const float cs = amk_cpu_load (cos_sin, ((guint64) pos * half + c) * 2);
          const float sn = amk_cpu_load (cos_sin, ((guint64) pos * half + c) * 2 + 1);
          float r1, r2;

          rotate_pair (amk_cpu_load (qkv, base + c), amk_cpu_load (qkv, base + c + half), cs, sn, &r1, &r2);
          if (!is_key)
            {
              qrot[h * d + c] = r1;
              qrot[h * d + c + half] = r2;
              continue;
            }
          amk_cpu_store (kc, row + c, r1);
          amk_cpu_store (kc, row + c + half, r2);
          amk_cpu_store (vc, row + c, amk_cpu_load (qkv, v_base + c));
          amk_cpu_store (vc, row + c + half, amk_cpu_load (qkv, v_base + c + half));
        }
    }
}

/* Split `split` of n_splits of the positions 0 .. pos (chunks of at least min_split
 * positions) for the query heads of key/value head kv_head. */
static AmkAbortCode
op_attn_decode (const amk_instruction_t *ins, AmkCpuBuffer *b, gint *detail)
{
  const amk_attn_decode_params_t *p = &ins->params.attn_decode;
  const gint32 d = p->shape.head_dim, n_q = p->shape.n_q_heads, n_kv = p->shape.n_kv_heads;
  const gint32 g = p->kv_head, split = p->split, n_splits = p->n_splits;
  const gint32 group = n_q / n_kv;
  const double scale = p->scale;
  AmkCpuBuffer *partial = &b[ins->buffers[0]], *q = &b[ins->buffers[1]];
  AmkCpuBuffer *kc = &b[ins->buffers[2]], *vc = &b[ins->buffers[3]];
  const gint32 pos = read_pos (ins, &p->shape, b, 4, detail);
  gint64 n, chunk, start, end;
  g_autofree double *scores = NULL;
  g_autofree double *acc = NULL;
  g_autofree float *qrot = NULL;

  if (pos < 0)
    return AMK_ABORT_CODE_CHECK;
  n = (gint64) pos + 1;
  chunk = MAX ((n + n_splits - 1) / n_splits, (gint64) p->min_split);
  start = MIN ((gint64) split * chunk, n);
  end = MIN (start + chunk, n);
  scores = g_new (double, MAX (end - start, 1));
  acc = g_new (double, d);
  if (ins->n_buffers >= 7)
    {
      qrot = g_new (float, (gsize) group * d);
      rope_fused (ins, b, pos, start <= pos && pos < end, qrot);
    }

  for (gint32 h = g * group; h < (g + 1) * group; h++)
    {
      const guint64 out = ((guint64) h * n_splits + split) * (d + 2);
      double m = -INFINITY, l = 0.0;

      memset (acc, 0, sizeof (double) * d);
      for (gint64 t = start; t < end; t++)
        {
          const guint64 row = ((guint64) t * n_kv + g) * d;
          double dot = 0.0;
          for (gint32 c = 0; c < d; c++)
            dot += (double) (qrot != NULL ? qrot[(h - g * group) * d + c] : amk_cpu_load (q, (guint64) h * d + c)) *
                   amk_cpu_load (kc, row + c);
          scores[t - start] = scale * dot;
          m = MAX (m, scores[t - start]);
        }
      for (gint64 t = start; t < end; t++)
        {
          const guint64 row = ((guint64) t * n_kv + g) * d;
          const double e = exp (scores[t - start] - m);
          l += e;
          for (gint32 c = 0; c < d; c++)
            acc[c] += e * amk_cpu_load (vc, row + c);
        }
      for (gint32 c = 0; c < d; c++)
        amk_cpu_store (partial, out + c, (float) acc[c]);
      amk_cpu_store (partial, out + d, (float) m); /* -inf for an empty split */
      amk_cpu_store (partial, out + d + 1, (float) l);
    }
  return AMK_ABORT_CODE_NONE;
}

/* out[h] = the n_splits partials of head h merged, for heads first .. first+count. */
static void
merge_heads (gint32 d, gint32 n_splits, AmkCpuBuffer *out, AmkCpuBuffer *partial, gint32 first,
             gint32 count)
{
  for (gint32 h = first; h < first + count; h++)
    {
      const guint64 base = (guint64) h * n_splits * (d + 2);
      double big_m = -INFINITY, den = 0.0;

      for (gint32 s = 0; s < n_splits; s++)
        big_m = MAX (big_m, (double) amk_cpu_load (partial, base + (guint64) s * (d + 2) + d));
      for (gint32 s = 0; s < n_splits; s++)
        {
          const double m = amk_cpu_load (partial, base + (guint64) s * (d + 2) + d);
          if (m != -INFINITY)
            den += exp (m - big_m) * amk_cpu_load (partial, base + (guint64) s * (d + 2) + d + 1);
        }
      for (gint32 c = 0; c < d; c++)
        {
          double num = 0.0;
          for (gint32 s = 0; s < n_splits; s++)
            {
              const double m = amk_cpu_load (partial, base + (guint64) s * (d + 2) + d);
              if (m != -INFINITY)
                num += exp (m - big_m) * amk_cpu_load (partial, base + (guint64) s * (d + 2) + c);
            }
          amk_cpu_store (out, (guint64) h * d + c, (float) (num / den));
        }
    }
}

/* ATTN_REDUCE: the n_splits splits of heads head0 .. head0 + n_heads merged. */
static AmkAbortCode
run_attn_reduce (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_attn_reduce_params_t *p = &ins->params.attn_reduce;

  merge_heads (p->head_dim, p->n_splits, &b[ins->buffers[0]], &b[ins->buffers[1]], p->head0, p->n_heads);
  return AMK_ABORT_CODE_NONE;
}

/* ATTN_DECODE; with the merge fused, the last split of the key/value head to arrive
 * merges its heads (the arrival counter is atomic: splits may run on several threads). */
static AmkAbortCode
run_attn_decode (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_attn_decode_params_t *p = &ins->params.attn_decode;
  const AmkAbortCode code = op_attn_decode (ins, b, detail);

  if (code == AMK_ABORT_CODE_NONE && ins->n_buffers >= 6 &&
      (guint32) g_atomic_int_add ((gint *) &counters[p->arrival_counter], 1) + 1 == (guint32) p->n_splits)
    {
      /* query heads per kv head */
      const gint32 group = p->shape.n_q_heads / MAX (p->shape.n_kv_heads, 1);
      merge_heads (p->shape.head_dim, p->n_splits, &b[ins->buffers[5]], &b[ins->buffers[0]],
                   p->kv_head * group, group);
    }
  return code;
}

/* ---- descriptors -------------------------------------------------------------------- */

static const AmkParamField rope_kv_fields[] = {
  AMK_PARAM_INT (rope_kv, shape.head_dim), AMK_PARAM_INT (rope_kv, shape.n_q_heads),
  AMK_PARAM_INT (rope_kv, shape.n_kv_heads), AMK_PARAM_INT (rope_kv, shape.max_ctx),
  AMK_PARAM_INT (rope_kv, head0), AMK_PARAM_INT (rope_kv, n_heads),
  AMK_PARAM_FLOAT (rope_kv, freq.theta), AMK_PARAM_FLOAT (rope_kv, freq.factor),
  AMK_PARAM_FLOAT (rope_kv, freq.low_freq_factor), AMK_PARAM_FLOAT (rope_kv, freq.high_freq_factor),
  AMK_PARAM_INT (rope_kv, freq.original_context),
};
static const AmkParamField attn_decode_fields[] = {
  AMK_PARAM_INT (attn_decode, shape.head_dim), AMK_PARAM_INT (attn_decode, shape.n_q_heads),
  AMK_PARAM_INT (attn_decode, shape.n_kv_heads), AMK_PARAM_INT (attn_decode, shape.max_ctx),
  AMK_PARAM_INT (attn_decode, kv_head), AMK_PARAM_INT (attn_decode, split),
  AMK_PARAM_INT (attn_decode, n_splits), AMK_PARAM_FLOAT (attn_decode, scale),
  AMK_PARAM_INT (attn_decode, arrival_counter), AMK_PARAM_INT (attn_decode, min_split),
};
static const AmkParamField attn_reduce_fields[] = {
  AMK_PARAM_INT (attn_reduce, head_dim), AMK_PARAM_INT (attn_reduce, n_q_heads),
  AMK_PARAM_INT (attn_reduce, n_splits), AMK_PARAM_INT (attn_reduce, head0),
  AMK_PARAM_INT (attn_reduce, n_heads),
};

/* ---- accesses (the race proof) ------------------------------------------------------ */

/* The caches' rows are pos's, read on the device: every row, the columns of kv heads
 * g0 .. g0+count. */
static void
cache_columns (AmkAccessBox *out, guint *n, const amk_instruction_t *ins, guint slot,
               const amk_attn_shape_t *sh, guint64 g0, guint64 count, AmkAccessKind kind)
{
  const guint64 width = (guint64) sh->n_kv_heads * sh->head_dim;

  amk_access_rows (out, n, ins, slot, g0 * sh->head_dim, count * sh->head_dim, width,
                   (guint64) sh->max_ctx, kind, TRUE);
}

static guint
accesses_rope_kv (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_rope_kv_params_t *p = &ins->params.rope_kv;
  const guint64 hd = p->shape.head_dim, nq = p->shape.n_q_heads;
  const guint64 h0 = p->head0, h1 = (guint64) p->head0 + p->n_heads;
  const guint64 q1 = MIN (h1, nq), k0 = MAX (h0, nq) - nq, k1 = MAX (h1, nq) - nq;
  guint n = 0;

  if (h0 < q1)
    amk_access_range (out, &n, ins, 0, h0 * hd, (q1 - h0) * hd, AMK_ACCESS_WRITE);
  if (k0 < k1)
    {
      amk_access_range (out, &n, ins, 1, k0 * hd, (k1 - k0) * hd, AMK_ACCESS_WRITE);
      amk_access_range (out, &n, ins, 2, k0 * hd, (k1 - k0) * hd, AMK_ACCESS_READ);
      cache_columns (out, &n, ins, 3, &p->shape, k0, k1 - k0, AMK_ACCESS_WRITE);
      cache_columns (out, &n, ins, 4, &p->shape, k0, k1 - k0, AMK_ACCESS_WRITE);
    }
  amk_access_range (out, &n, ins, 5, 0, 1, AMK_ACCESS_READ);
  return n;
}

/* The split's partials of its group's query heads; with the merge, every split's
 * partials of the group and the group's output (the race proof does not compare two
 * splits of one arrival counter: the last to arrive merges); with RoPE, the caches'
 * row pos. */
static guint
accesses_attn_decode (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_attn_decode_params_t *p = &ins->params.attn_decode;
  const guint64 hd = p->shape.head_dim, group = (guint64) p->shape.n_q_heads / p->shape.n_kv_heads;
  const guint64 h0 = (guint64) p->kv_head * group, slots = (guint64) p->n_splits * (hd + 2);
  const AmkAccessKind cache = ins->n_buffers >= 7 ? AMK_ACCESS_WRITE : AMK_ACCESS_READ;
  guint n = 0;

  amk_access_rows (out, &n, ins, 0, h0 * slots + (guint64) p->split * (hd + 2), hd + 2, slots, group,
                   AMK_ACCESS_WRITE, FALSE);
  amk_access_range (out, &n, ins, 1, h0 * hd, group * hd, AMK_ACCESS_READ);
  if (ins->n_buffers >= 7)
    {
      const guint64 nq = p->shape.n_q_heads, nkv = p->shape.n_kv_heads;
      amk_access_range (out, &n, ins, 1, (nq + (guint64) p->kv_head) * hd, hd, AMK_ACCESS_READ);
      amk_access_range (out, &n, ins, 1, (nq + nkv + (guint64) p->kv_head) * hd, hd, AMK_ACCESS_READ);
      amk_access_range (out, &n, ins, 6, 0, hd / 2, AMK_ACCESS_READ);
    }
  cache_columns (out, &n, ins, 2, &p->shape, p->kv_head, 1, cache);
  cache_columns (out, &n, ins, 3, &p->shape, p->kv_head, 1, cache);
  amk_access_range (out, &n, ins, 4, 0, 1, AMK_ACCESS_READ);
  if (ins->n_buffers >= 6)
    {
      amk_access_range (out, &n, ins, 0, h0 * slots, group * slots, AMK_ACCESS_READ);
      amk_access_range (out, &n, ins, 5, h0 * hd, group * hd, AMK_ACCESS_WRITE);
    }
  return n;
}

static guint
accesses_attn_reduce (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_attn_reduce_params_t *p = &ins->params.attn_reduce;
  const guint64 slots = (guint64) p->n_splits * (p->head_dim + 2);
  guint n = 0;

  amk_access_range (out, &n, ins, 0, (guint64) p->head0 * p->head_dim, (guint64) p->n_heads * p->head_dim,
                    AMK_ACCESS_WRITE);
  amk_access_range (out, &n, ins, 1, (guint64) p->head0 * slots, (guint64) p->n_heads * slots, AMK_ACCESS_READ);
  return n;
}

const AmkOpClass amk_op_rope_kv = {
  .opcode = AMK_ABI_OP_ROPE_KV, .name = "ROPE_KV", .n_buffers = 6,
  .fields = AMK_PARAM_FIELDS (rope_kv_fields),
  .verify = verify_rope_kv_instruction, .plan = plan_rope_kv, .lower = lower_rope_kv,
  .accesses = accesses_rope_kv, .bytes = bytes_rope_kv,
  .run_cpu = run_rope_kv,
};

/* may name the fused merge's output and the fused RoPE's cos and sin table */
const AmkOpClass amk_op_attn_decode = {
  .opcode = AMK_ABI_OP_ATTN_DECODE, .name = "ATTN_DECODE", .n_buffers = 5, .n_extra = 2,
  .fields = AMK_PARAM_FIELDS (attn_decode_fields),
  .verify = verify_attn_decode_instruction, .plan = plan_attn_decode, .lower = lower_attn_decode,
  .accesses = accesses_attn_decode, .bytes = bytes_attn_decode,
  .run_cpu = run_attn_decode,
};

const AmkOpClass amk_op_attn_reduce = {
  .opcode = AMK_ABI_OP_ATTN_REDUCE, .name = "ATTN_REDUCE", .n_buffers = 2,
  .fields = AMK_PARAM_FIELDS (attn_reduce_fields),
  .verify = verify_attn_reduce_instruction, .plan = plan_attn_reduce, .lower = lower_attn_reduce,
  .accesses = accesses_attn_reduce, .bytes = bytes_attn_reduce,
  .run_cpu = run_attn_reduce,
};
