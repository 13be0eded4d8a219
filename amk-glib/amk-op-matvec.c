/* amk-op-matvec.c: MATVEC, y = W x' with its fusions (input RMSNORM, SILU_MUL, bias,
 * residual, split-K); the parameters in kernels/amk-abi.h, the device side in
 * kernels/ops-matvec.cuh.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <glib/gi18n-lib.h>

#include "amk-program.h"
#include "amk-op-private.h"
#include "amk-dtype-private.h"
#include "amk-error.h"

#define MATVEC_MIN_ROWS         16u /* a smaller tile costs more to start than it streams */
#define MATVEC_MIN_SPLIT_CHUNKS 32u /* 16-byte chunks of a row per split-K slice: one per lane */
#define MATVEC_GROUP_MAX        8u

/* ---- the op API --------------------------------------------------------------------- */

/* An optional MATVEC operand: absent (-1), or a F32/BF16 vector of `n` elements. */
static gboolean
optional_vector (AmkProgram *self, const char *what, gint buffer, guint64 n, GError **error)
{
  AmkBufferInfo *info;

  if (buffer == -1)
    return TRUE;
  if ((info = amk_op_tensor (self, "MATVEC", what, buffer, error)) == NULL)
    return FALSE;
  if (amk_op_is_vector_dtype (info) && info->n_elements == n)
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
 * @w: the matrix, 2-D `[rows, K]` (bf16, f16, f32, or a block-quantized type where the
 *   executor runs it), usually a constant buffer
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
 * spread over every queue. When those tiles would leave at least half of the queues idle
 * and @residual is @y (f32), it also splits each row's columns (split-K): the slices add
 * their shares onto @y with atomic adds (on the GPU in an order that may differ from run
 * to run).
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

  if (!amk_op_can_record (self, "MATVEC", error) ||
      (yi = amk_op_tensor (self, "MATVEC", _("the output"), y, error)) == NULL ||
      (wi = amk_op_tensor (self, "MATVEC", _("the matrix"), w, error)) == NULL ||
      (xi = amk_op_tensor (self, "MATVEC", _("the vector"), x, error)) == NULL ||
      !amk_op_writable ("MATVEC", yi, error))
    return -1;
  if (wi->n_dims != 2 || wi->dtype == AMK_DTYPE_I32 || wi->dtype == AMK_DTYPE_U8)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATVEC: the matrix “%s” must be 2-D bf16, f16, f32 or block-quantized"), wi->name);
      return -1;
    }
  rows = wi->shape[0];
  k = wi->shape[1];
  if (k % amk_dtype_row_step (wi->dtype) != 0)
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
  return amk_op_record (self, AMK_ABI_OP_MATVEC, (gint32[]) { y, w, x, bias, residual, norm },
                 &(amk_params_t) { .matvec = { .eps = eps } });
}

/* ---- verifier ----------------------------------------------------------------------- */

/* One operand of MATVEC: the dtypes it may have and the elements it must hold. */
static gboolean
check_matvec_operand (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                      guint slot, const char *what, guint dtypes, guint64 needed, GError **error)
{
  AmkBufferInfo *info = amk_verify_slot_buffer (self, ins, slot);

  if (info == NULL)
    return TRUE;
  if (!(dtypes & (1u << info->dtype)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATVEC): %s “%s” cannot be %s"),
                   queue, pos, what, info->name, amk_dtype_name (info->dtype));
      return FALSE;
    }
  if (info->n_elements < needed)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (MATVEC): %s “%s” has %" PRIu64 " elements; the tile needs %" PRIu64),
                   queue, pos, what, info->name, info->n_elements, needed);
      return FALSE;
    }
  return TRUE;
}

/* y must not share memory with what the tile reads, except the residual, which may be
 * exactly y's own rows (y += W x). */
static gboolean
check_matvec_aliasing (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                       GError **error)
{
  const amk_matvec_params_t *p = &ins->params.matvec;
  const gint32 r0 = p->row0, n = p->rows, k = p->k;
  /* run after the operand checks: (r0 + n) * k fits W, so an int32 */
  const gint32 offsets[7] = { r0, 0, 0, r0, r0, 0, 0 };
  const gint32 counts[7] = { n, (r0 + n) * k, k, n, n, k, k };
  gint64 ry, rs;
  guint64 sy, ss, ly, ls;

  amk_verify_operand_bytes (self, ins, 0, offsets[0], counts[0], &ry, &sy, &ly);
  for (guint slot = 1; slot < ins->n_buffers; slot++)
    {
      if (ins->buffers[slot] == AMK_NO_BUFFER)
        continue;
      amk_verify_operand_bytes (self, ins, slot, offsets[slot], counts[slot], &rs, &ss, &ls);
      if (rs != ry || ly == 0 || ls == 0 || sy + ly <= ss || ss + ls <= sy)
        continue;
      if (slot == 4 && ss == sy && ls == ly)
        continue;
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATVEC): the output overlaps input %u; only the residual may be the output itself"),
                   queue, pos, slot);
      return FALSE;
    }
  return TRUE;
}

/* Split-K (k_len > 0): columns k0 .. k0 + k_len of whole 16-byte chunks, added with atomics
 * onto an f32 output that is its own residual. */
static gboolean
check_matvec_split (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                    AmkBufferInfo *w, GError **error)
{
  const amk_matvec_params_t *p = &ins->params.matvec;
  const gint32 k = p->k, k0 = p->k0, kn = p->k_len;
  const guint64 step = amk_dtype_row_step (w->dtype);
  AmkBufferInfo *y = amk_verify_slot_buffer (self, ins, 0);

  if (kn == 0 && k0 == 0)
    return TRUE;
  if (k0 < 0 || kn <= 0 || k0 > k - kn)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (MATVEC): the split-K columns %d + %d (k0 + k_len) are out of range of K = %d; k0 and k_len are both 0 for whole rows"),
                   queue, pos, k0, kn, k);
      return FALSE;
    }
  if ((guint64) k0 % step != 0 || (guint64) kn % step != 0)
    {
      if (amk_dtype_size (w->dtype) != 0)
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                     _("Queue %u instruction %u (MATVEC): the split-K columns %d + %d must start and end on 16-byte boundaries of a row of W (%s)"),
                     queue, pos, k0, kn, amk_dtype_name (w->dtype));
      else
        g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                     _("Queue %u instruction %u (MATVEC): the split-K columns %d + %d must start and end on whole blocks of W (%s, %u values a block)"),
                     queue, pos, k0, kn, amk_dtype_name (w->dtype), (guint) step);
      return FALSE;
    }
  if (y->dtype != AMK_DTYPE_F32 || ins->buffers[4] != ins->buffers[0])
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATVEC): a split-K tile adds its share to the output “%s” with atomic adds, so the output must be f32 and also the residual (buffer 4)"),
                   queue, pos, y->name);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_matvec (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
              GError **error)
{
  const guint vec = (1u << AMK_DTYPE_F32) | (1u << AMK_DTYPE_BF16);
  const guint weights = vec | (1u << AMK_DTYPE_F16) | AMK_DTYPE_BLOCK_MASK;
  const amk_matvec_params_t *p = &ins->params.matvec;
  const gint32 r0 = p->row0, n = p->rows, k = p->k;
  AmkBufferInfo *w = amk_verify_slot_buffer (self, ins, 1); /* y, W and x are not optional */

  if (r0 < 0 || n < 0 || k < 1)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (MATVEC): rows %d + %d and K = %d are out of range"),
                   queue, pos, r0, n, k);
      return FALSE;
    }
  if ((guint64) k % amk_dtype_row_step (w->dtype) != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATVEC): a row of W (%d × %s) must be a multiple of 16 bytes, or of a quantized block"),
                   queue, pos, k, amk_dtype_name (w->dtype));
      return FALSE;
    }
  if (!check_matvec_split (self, queue, pos, ins, w, error))
    return FALSE;
  if (ins->buffers[5] != AMK_NO_BUFFER && !(p->eps >= 0.0f && p->eps < G_MAXFLOAT))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATVEC): the RMSNORM epsilon must be finite and not negative"),
                   queue, pos);
      return FALSE;
    }
  if (ins->n_buffers > 6 && ins->buffers[5] != AMK_NO_BUFFER && ins->buffers[6] != AMK_NO_BUFFER)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATVEC): a fused RMSNORM (buffer 5) and a fused SILU_MUL (buffer 6) cannot be combined; leave one of them AMK_NO_BUFFER"),
                   queue, pos);
      return FALSE;
    }
  return check_matvec_operand (self, queue, pos, ins, 0, _("the output"), vec, (guint64) r0 + n, error) &&
         check_matvec_operand (self, queue, pos, ins, 1, _("the matrix"), weights, ((guint64) r0 + n) * k, error) &&
         check_matvec_operand (self, queue, pos, ins, 2, _("the vector"), vec, k, error) &&
         check_matvec_operand (self, queue, pos, ins, 3, _("the bias"), vec, (guint64) r0 + n, error) &&
         check_matvec_operand (self, queue, pos, ins, 4, _("the residual"), vec, (guint64) r0 + n, error) &&
         check_matvec_operand (self, queue, pos, ins, 5, _("the norm weight"), vec, k, error) &&
         (ins->n_buffers < 7 ||
          check_matvec_operand (self, queue, pos, ins, 6, _("the up vector"), vec, k, error)) &&
         check_matvec_aliasing (self, queue, pos, ins, error);
}

static gboolean
verify_matvec (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
               GError **error)
{
  return amk_verify_writes (self, queue, pos, ins, error) &&
         check_matvec (self, queue, pos, ins, error);
}

/* ---- lowering and cost -------------------------------------------------------------- */

/* Whether MATVEC ops a and b can run side by side as siblings: they read the same x
 * through the same fused norm (or none), and neither writes what the other reads or
 * writes. (Every MATVEC's y differs from its own x, bias and norm: the op API checks.) */
static gboolean
matvec_siblings (const AmkOpInfo *a, const AmkOpInfo *b)
{
  if (a->opcode != AMK_ABI_OP_MATVEC || b->opcode != AMK_ABI_OP_MATVEC ||
      a->buffers[2] != b->buffers[2] || a->buffers[5] != b->buffers[5])
    return FALSE;
  for (guint i = 0; i < 6; i++)
    if ((b->buffers[i] != AMK_NO_BUFFER && b->buffers[i] == a->buffers[0]) ||
        (a->buffers[i] != AMK_NO_BUFFER && a->buffers[i] == b->buffers[0]))
      return FALSE;
  return TRUE;
}

/* The rows of op o's sibling group: the run of consecutive recorded MATVEC ops around o
 * that are pairwise siblings (a layer's q, k and v projections, or its gate and up).
 * Siblings become ready together, so they share the queues in proportion to their rows:
 * one round of tiles for the whole group rather than one round per op, each after the
 * other on the same queues. */
static guint64
matvec_group_rows (AmkProgram *self, guint o)
{
  const AmkOpInfo *ops = (const AmkOpInfo *) self->ops->data;
  guint members[MATVEC_GROUP_MAX] = { o }, n = 1;
  guint64 rows = 0;

  for (int dir = -1; dir <= 1; dir += 2)
    for (gint64 c = (gint64) o + dir; c >= 0 && c < self->ops->len && n < MATVEC_GROUP_MAX; c += dir)
      {
        gboolean ok = TRUE;
        for (guint m = 0; m < n && ok; m++)
          ok = matvec_siblings (&ops[members[m]], &ops[c]);
        if (!ok)
          break;
        members[n++] = (guint) c;
      }
  for (guint m = 0; m < n; m++)
    rows += amk_program_get_buffer_info (self, ops[members[m]].buffers[1])->shape[0];
  return rows;
}

/* Split-K slices per row tile of MATVEC op `op` cut into `row_tiles` row tiles: when
 * those leave at least half of the queues idle (a small model's o and down projections),
 * each row's columns are cut into as many slices as the idle queues allow, each slice at
 * least MATVEC_MIN_SPLIT_CHUNKS chunks of a row, so that the whole device streams the
 * matrix. Only where the slices can add onto the output: an f32 y that is its own
 * residual (y += W x, a layer's residual stream). */
static guint64
matvec_splits (AmkProgram *self, const AmkOpInfo *op, guint64 row_tiles)
{
  AmkBufferInfo *y = amk_program_get_buffer_info (self, op->buffers[0]), *w = amk_program_get_buffer_info (self, op->buffers[1]);
  const guint64 chunks = w->shape[1] / amk_dtype_row_step (w->dtype);

  if (y->dtype != AMK_DTYPE_F32 || op->buffers[4] != op->buffers[0])
    return 1;
  return MAX (1, MIN (self->num_queues / row_tiles, chunks / MATVEC_MIN_SPLIT_CHUNKS));
}

/* The columns [*c0, *c1) of x (and of a fused SILU_MUL's up) that a MATVEC reads: a
 * split-K tile's own, unless a fused norm needs the whole of x for its scale. */
static void
matvec_read_columns (const amk_instruction_t *ins, guint64 *c0, guint64 *c1)
{
  const amk_matvec_params_t *p = &ins->params.matvec;

  *c0 = 0;
  *c1 = (guint64) MAX (p->k, 0);
  if (p->k_len > 0 && ins->buffers[5] == AMK_NO_BUFFER)
    {
      *c0 = (guint64) p->k0;
      *c1 = (guint64) p->k0 + (guint64) p->k_len;
    }
}

/* Rows: at most one tile per queue, since every tile start costs about one memory
 * latency before its first weights arrive; siblings share the queues
 * (matvec_group_rows). */
static void
plan_matvec (AmkLowering *lw)
{
  lw->n = amk_lower_buffer (lw, lw->op->buffers[1])->shape[0];
  lw->n_tiles = MAX (1, MIN (lw->n / MATVEC_MIN_ROWS,
                             (guint64) lw->program->num_queues * lw->n /
                             matvec_group_rows (lw->program, lw->index)));
  lw->splits = matvec_splits (lw->program, lw->op, lw->n_tiles);
}

/* A MATVEC with lw->silu set reads that SILU_MUL's gate and up instead of x. */
static void
lower_matvec (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  const guint64 s = t->start, e = t->end;
  AmkBufferInfo *w = amk_lower_buffer (lw, op->buffers[1]);
  const guint64 k = w->shape[1];
  amk_matvec_params_t *mp = &t->ins.params.matvec;
  guint64 x0, x1;  /* the columns of x (and up) the tile reads */

  amk_tile_use_buffers (t, op, 6);
  mp->row0 = (gint32) s;
  mp->rows = (gint32) (e - s);
  mp->k = (gint32) k;
  if (lw->splits > 1)
    {
      /* whole 16-byte chunks, or quantized blocks, of a row */
      const guint64 per = amk_dtype_row_step (w->dtype);
      const guint64 chunks = k / per;
      const guint64 c0 = slice * chunks / lw->splits, c1 = (slice + 1) * chunks / lw->splits;
      mp->k0 = (gint32) (c0 * per);
      mp->k_len = (gint32) ((c1 - c0) * per);
    }
  matvec_read_columns (&t->ins, &x0, &x1);
  if (lw->silu != NULL)
    {
      t->ins.n_buffers = 7;
      t->ins.buffers[2] = lw->silu->buffers[1];
      t->ins.buffers[6] = lw->silu->buffers[2];
      amk_tile_access (t, lw->silu->buffers[2], x0, x1, FALSE);
    }
  amk_tile_access (t, op->buffers[0], s, e, TRUE);
  amk_tile_access (t, op->buffers[1], s * k, e * k, FALSE);
  amk_tile_access (t, t->ins.buffers[2], x0, x1, FALSE);
  amk_tile_access (t, op->buffers[3], s, e, FALSE);
  amk_tile_access (t, op->buffers[4], s, e, FALSE);
  amk_tile_access (t, op->buffers[5], 0, k, FALSE);
}

static double
bytes_matvec (AmkProgram *self, const amk_instruction_t *ins)
{
  const amk_matvec_params_t *m = &ins->params.matvec;
  const gint32 cols = m->k_len > 0 ? m->k_len : m->k; /* a split-K slice's, or K */

  return amk_instruction_bytes (self, ins, 1, (double) MAX (m->rows, 0) * MAX (cols, 0)) +
         4.0 * MAX (m->k, 0) + 4.0 * MAX (m->rows, 0);
}

/* ---- CPU reference ------------------------------------------------------------------ */

/* Eight bf16 rows of W at once, without the scalar transpose into wt: 8 × 8 blocks
 * transposed in registers (AMK_CPU_BF16_COLUMNS_8X8), then summed column by column with
 * fused multiply-adds as the generic path does, each lane one row: the same sums, bit for
 * bit. On x86-64 with AVX2 and FMA a version in those instructions runs. */
#if AMK_CPU_SHUFFLE
#define MATVEC_BF16_BLOCK8(FMA) \
  G_STMT_START { \
    const gsize row = (gsize) k * 2; \
    v8sf acc = { 0 }; \
    gint32 c = c0; \
    for (; c + 8 <= c1; c += 8) \
      { \
        v8sf col[8]; \
        AMK_CPU_BF16_COLUMNS_8X8 (w + (gsize) c * 2, row, col); \
        /* column c + j of the eight rows, in column order */ \
        FMA (acc, xs[c], col[0]); \
        FMA (acc, xs[c + 1], col[1]); \
        FMA (acc, xs[c + 2], col[2]); \
        FMA (acc, xs[c + 3], col[3]); \
        FMA (acc, xs[c + 4], col[4]); \
        FMA (acc, xs[c + 5], col[5]); \
        FMA (acc, xs[c + 6], col[6]); \
        FMA (acc, xs[c + 7], col[7]); \
      } \
    memcpy (out, &acc, 32); \
    for (; c < c1; c++) \
      for (guint j = 0; j < 8; j++) \
        { \
          guint16 h; \
          guint32 bits; \
          float v; \
          memcpy (&h, w + j * row + (gsize) c * 2, 2); \
          bits = (guint32) h << 16; \
          memcpy (&v, &bits, 4); \
          out[j] = fmaf (xs[c], v, out[j]); \
        } \
  } G_STMT_END

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__ ((target_clones ("avx2", "default")))   /* the transposes in AVX2 */
#endif
static void
matvec_bf16_block8_lanes (const guint8 *w, gint32 k, gint32 c0, gint32 c1, const float *xs, float out[8])
{
  MATVEC_BF16_BLOCK8 (AMK_CPU_FMA_LANES);
}

#if AMK_CPU_X86_FMA
__attribute__ ((target ("avx2,fma")))
static void
matvec_bf16_block8_x86 (const guint8 *w, gint32 k, gint32 c0, gint32 c1, const float *xs, float out[8])
{
  MATVEC_BF16_BLOCK8 (AMK_CPU_FMA_X86);
}
#endif

static void
matvec_bf16_block8 (const guint8 *w, gint32 k, gint32 c0, gint32 c1, const float *xs, float out[8])
{
#if AMK_CPU_X86_FMA
  if (amk_cpu_has_fma ())
    {
      matvec_bf16_block8_x86 (w, k, c0, c1, xs, out);
      return;
    }
#endif
  matvec_bf16_block8_lanes (w, k, c0, c1, xs, out);
}
#endif

/* out[j] = sum over c in [c0, c1) of xs[c] wt[c][j] for the 8 rows of a converted panel
 * (amk_cpu_load_columns), in column order with fused multiply-adds: the other types'
 * path, the same sums as the bf16 blocks. */
static void
matvec_panel_lanes (const float *wt, const float *xs, gint32 c0, gint32 c1, float out[8])
{
  v8sf acc = { 0 };

  for (gint32 c = c0; c < c1; c++)
    {
      v8sf w;

      memcpy (&w, wt + 8 * (gsize) c, 32);
      AMK_CPU_FMA_LANES (acc, xs[c], w);
    }
  memcpy (out, &acc, 32);
}

#if AMK_CPU_X86_FMA
__attribute__ ((target ("avx2,fma")))
static void
matvec_panel_x86 (const float *wt, const float *xs, gint32 c0, gint32 c1, float out[8])
{
  v8sf acc = { 0 };

  for (gint32 c = c0; c < c1; c++)
    {
      v8sf w;

      memcpy (&w, wt + 8 * (gsize) c, 32);
      AMK_CPU_FMA_X86 (acc, xs[c], w);
    }
  memcpy (out, &acc, 32);
}
#endif

/* One thread's share of a MATVEC tile: rows r0 .. r1 in blocks of AMK_CPU_COLS. */
typedef struct {
  AmkCpuRange              rows;  /* first: amk_cpu_run_split() sets it */
  const amk_instruction_t *ins;
  AmkCpuBuffer            *buffers;
  const float             *xs;    /* x', [k] */
} MatvecShare;

static gpointer
matvec_rows (gpointer data)
{
  const MatvecShare *s = data;
  const amk_matvec_params_t *p = &s->ins->params.matvec;
  const gint32 k = p->k;
  const gboolean split = p->k_len > 0;
  const gint32 c0 = split ? p->k0 : 0, c1 = split ? c0 + p->k_len : k;
  const amk_instruction_t *ins = s->ins;
  AmkCpuBuffer *b = s->buffers;
  AmkCpuBuffer *y = &b[ins->buffers[0]], *w = &b[ins->buffers[1]];
  AmkCpuBuffer *bias = ins->buffers[3] != AMK_NO_BUFFER ? &b[ins->buffers[3]] : NULL;
  AmkCpuBuffer *residual = ins->buffers[4] != AMK_NO_BUFFER ? &b[ins->buffers[4]] : NULL;
  g_autofree float *wt = g_new (float, (gsize) k * AMK_CPU_COLS);
  guint block, block_bytes;
  const gboolean quantized = amk_dtype_block (w->info->dtype, &block, &block_bytes);
#if AMK_CPU_X86_FMA
  const gboolean fma = amk_cpu_has_fma ();
#endif

  for (gint32 r = s->rows.start; r < s->rows.end; r += AMK_CPU_COLS)
    {
      const gint32 rows = MIN ((gint32) AMK_CPU_COLS, s->rows.end - r);
      float out[AMK_CPU_COLS];

      G_STATIC_ASSERT (AMK_CPU_COLS == 8);
      if (quantized)
        for (gint32 j = 0; j < rows; j++)
          {
            /* the row's blocks decoded, then the interleaved sums MATMUL takes too */
            const float *x = s->xs + c0;
            const guint64 first = (guint64) (r + j) * k + c0;

            if (amk_cpu_block_dot (w->info->dtype, w->data + amk_dtype_bytes (w->info->dtype, first), x,
                                   c1 - c0, &out[j]))
              continue;
            amk_dtype_dequantize (w->info->dtype, w->data, first, c1 - c0, wt);
            amk_cpu_quant_dots (wt, &x, 1, c1 - c0, &out[j]);
          }
      else
#if AMK_CPU_SHUFFLE
      if (rows == 8 && w->info->dtype == AMK_DTYPE_BF16)
        matvec_bf16_block8 (w->data + (gsize) r * k * 2, k, c0, c1, s->xs, out);
      else
#endif
        {
          amk_cpu_load_columns (w, k, r, rows, wt);
#if AMK_CPU_X86_FMA
          if (fma)
            matvec_panel_x86 (wt, s->xs, c0, c1, out);
          else
#endif
            matvec_panel_lanes (wt, s->xs, c0, c1, out);
        }
      for (gint32 j = 0; j < rows; j++)
        {
          float acc = out[j];
          if (bias != NULL && c0 == 0)
            acc += amk_dtype_load (bias->info->dtype, bias->data, r + j);
          if (split)
            {
              /* y is f32 and the residual: other slices may add at once */
              amk_cpu_atomic_add_f32 ((float *) y->data + r + j, acc);
              continue;
            }
          if (residual != NULL)
            acc += amk_dtype_load (residual->info->dtype, residual->data, r + j);
          amk_dtype_store (y->info->dtype, y->data, r + j, acc);
        }
    }
  return NULL;
}

/* y[r0 + r] = W[r0 + r, :] x' (+ bias) (+ residual): fp32 sums in column order, each row
 * a lane of a vector over AMK_CPU_COLS rows (the same sums as one row at a time); x' is
 * x, x normalised by its RMS and scaled by the norm weight, or silu(x) * up (a fused
 * SILU_MUL, like SILU_MUL). A split-K tile (k_len > 0) sums the columns k0 .. k0 + k_len
 * only and adds that (plus the bias, for the first columns) to y, which is its own
 * residual. A large tile splits its rows with a second thread (the CPU executor runs one
 * instruction at a time); the threads write disjoint rows. */
static AmkAbortCode
run_matvec (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_matvec_params_t *p = &ins->params.matvec;
  const gint32 r0 = p->row0, n = p->rows, k = p->k;
  AmkCpuBuffer *x = &b[ins->buffers[2]];
  AmkCpuBuffer *norm = ins->buffers[5] != AMK_NO_BUFFER ? &b[ins->buffers[5]] : NULL;
  AmkCpuBuffer *up = ins->n_buffers > 6 && ins->buffers[6] != AMK_NO_BUFFER ? &b[ins->buffers[6]] : NULL;
  g_autofree float *xs = g_new (float, k);
  MatvecShare shares[2] = { { { r0, r0 + n }, ins, b, xs }, { { r0, r0 + n }, ins, b, xs } };
  float scale = 1.0f;
  guint64 lo, hi;

  /* a split-K tile without a norm reads only its columns: other tiles may be writing
   * the rest */
  matvec_read_columns (ins, &lo, &hi);
  for (gint32 c = (gint32) lo; c < (gint32) hi; c++)
    xs[c] = amk_dtype_load (x->info->dtype, x->data, c);
  if (norm != NULL)
    {
      float sum = 0.0f;
      for (gint32 c = 0; c < k; c++)
        sum += xs[c] * xs[c];
      scale = 1.0f / sqrtf (sum / (float) k + p->eps);
      for (gint32 c = 0; c < k; c++)
        xs[c] = xs[c] * scale * amk_dtype_load (norm->info->dtype, norm->data, c);
    }
  else if (up != NULL)
    for (gint32 c = (gint32) lo; c < (gint32) hi; c++)
      xs[c] = xs[c] / (1.0f + expf (-xs[c])) * amk_dtype_load (up->info->dtype, up->data, c);

  amk_cpu_run_split (matvec_rows, &shares[0].rows, &shares[1].rows, AMK_CPU_COLS, (double) n * k);
  return AMK_ABORT_CODE_NONE;
}

/* ---- descriptor --------------------------------------------------------------------- */

static const AmkParamField matvec_fields[] = {
  AMK_PARAM_INT (matvec, row0), AMK_PARAM_INT (matvec, rows), AMK_PARAM_INT (matvec, k),
  AMK_PARAM_FLOAT (matvec, eps), AMK_PARAM_INT (matvec, k0), AMK_PARAM_INT (matvec, k_len),
};

/* Split-K tiles add into y with atomics (y is their residual too); a whole-row tile
 * reads its residual and writes y. */
static guint
accesses_matvec (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_matvec_params_t *p = &ins->params.matvec;
  const gboolean split = p->k_len > 0;
  guint64 c0, c1;
  guint n = 0;

  amk_access_range (out, &n, ins, 0, p->row0, p->rows, split ? AMK_ACCESS_ATOMIC_ADD : AMK_ACCESS_WRITE);
  if (split)
    amk_access_rows (out, &n, ins, 1, (guint64) p->row0 * p->k + p->k0, p->k_len, p->k, p->rows,
                     AMK_ACCESS_READ, FALSE);
  else
    amk_access_range (out, &n, ins, 1, (guint64) p->row0 * p->k, (guint64) p->rows * p->k, AMK_ACCESS_READ);
  matvec_read_columns (ins, &c0, &c1);
  amk_access_range (out, &n, ins, 2, c0, c1 - c0, AMK_ACCESS_READ);
  if (!split || p->k0 == 0)
    amk_access_range (out, &n, ins, 3, p->row0, p->rows, AMK_ACCESS_READ);
  if (!split)
    amk_access_range (out, &n, ins, 4, p->row0, p->rows, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 5, 0, p->k, AMK_ACCESS_READ);
  if (ins->n_buffers > 6)
    amk_access_range (out, &n, ins, 6, c0, c1 - c0, AMK_ACCESS_READ);
  return n;
}

/* bias, residual, norm weight and the fused SILU_MUL's up may be absent */
const AmkOpClass amk_op_matvec = {
  .opcode = AMK_ABI_OP_MATVEC, .name = "MATVEC", .n_buffers = 6, .n_extra = 1,
  .optional_slots = 0x78u,
  .fields = AMK_PARAM_FIELDS (matvec_fields),
  .verify = verify_matvec, .plan = plan_matvec, .lower = lower_matvec,
  .accesses = accesses_matvec, .bytes = bytes_matvec,
  .run_cpu = run_matvec,
};
