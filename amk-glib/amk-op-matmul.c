/* amk-op-matmul.c: MATMUL, Y = X' W^T of many rows (a prompt chunk, or one token of each
 * of several sequences) with MATVEC's fusions (input RMSNORM, bias, residual); the
 * parameters in kernels/amk-abi.h, the device side in kernels/ops-matmul.cuh.
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

#define MATMUL_TILE_ROWS  256u /* rows of a full tile: the device kernel's wgmma tile at 512 threads */
#define MATMUL_ROW_STEP    64u /* a warpgroup's rows in that tile */
#define MATMUL_TILE_FIXED  32u /* a tile's fixed cost (pipeline fill, stores), in rows */
#define MATMUL_TILE_COLS  128u /* columns of a full tile */
#define MATMUL_MIN_COLS    16u /* a column tile is a whole number of tensor-core tiles */
#define MATMUL_K_MULTIPLE   8u /* 16 bytes of a 16-bit row of W */
/* M and N are int32 in the instruction; the device refuses 2^31 or more of either */
#define MATMUL_MAX_DIM     ((guint64) G_MAXINT32)

static gboolean
eps_ok (float eps)
{
  return eps >= 0.0f && isfinite (eps);
}

/* ---- the op API --------------------------------------------------------------------- */

/* The op API's checks and record; pos -1: no positions. */
static gint
record_matmul (AmkProgram  *self,
               gint         y,
               gint         w,
               gint         x,
               gint         bias,
               gint         residual,
               gint         norm,
               gfloat       eps,
               gint         pos,
               GError     **error)
{
  AmkBufferInfo *yi, *wi, *xi;
  guint64 n, k, m;
  gint index;

  if (!amk_op_can_record (self, "MATMUL", error) ||
      (yi = amk_op_tensor (self, "MATMUL", _("the output"), y, error)) == NULL ||
      (wi = amk_op_tensor (self, "MATMUL", _("the matrix"), w, error)) == NULL ||
      (xi = amk_op_tensor (self, "MATMUL", _("the input rows"), x, error)) == NULL ||
      !amk_op_writable ("MATMUL", yi, error))
    return -1;
  if (!amk_op_is_vector_dtype (xi))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATMUL: the input rows “%s” must be f32 or bf16, not %s"),
                   xi->name, amk_dtype_name (xi->dtype));
      return -1;
    }
  if (wi->n_dims == 2 && wi->dtype == AMK_DTYPE_F32)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATMUL: the matrix “%s” is f32, but tensor cores need 16-bit weights; store it as bf16 or f16, or use MATVEC"),
                   wi->name);
      return -1;
    }
  if (wi->n_dims != 2 || (wi->dtype != AMK_DTYPE_BF16 && wi->dtype != AMK_DTYPE_F16 &&
                          !((AMK_DTYPE_BLOCK_MASK >> wi->dtype) & 1u)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATMUL: the matrix “%s” must be 2-D bf16, f16 or block-quantized"), wi->name);
      return -1;
    }
  n = wi->shape[0];
  k = wi->shape[1];
  if (k % MATMUL_K_MULTIPLE != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATMUL: a row of “%s” has %" PRIu64 " elements; it must be a multiple of %u"),
                   wi->name, k, MATMUL_K_MULTIPLE);
      return -1;
    }
  if (xi->n_elements % k != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATMUL: the input rows “%s” have %" PRIu64 " elements, which is not a whole number of rows of K = %" PRIu64),
                   xi->name, xi->n_elements, k);
      return -1;
    }
  m = xi->n_elements / k;
  if (m > MATMUL_MAX_DIM || n > MATMUL_MAX_DIM)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("MATMUL: M = %" PRIu64 " rows of “%s” by N = %" PRIu64 " rows of “%s”: each must be below 2^31"),
                   m, xi->name, n, wi->name);
      return -1;
    }
  if (!amk_op_vector_of (self, "MATMUL", _("the output"), y, m * n, NULL, error) ||
      (bias != -1 && !amk_op_vector_of (self, "MATMUL", _("the bias"), bias, n, NULL, error)) ||
      (residual != -1 && !amk_op_vector_of (self, "MATMUL", _("the residual"), residual, m * n, NULL, error)) ||
      (norm != -1 && !amk_op_vector_of (self, "MATMUL", _("the norm weight"), norm, k, NULL, error)))
    return -1;
  if (y == w || y == x || y == bias || y == norm)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATMUL: the output “%s” is also an input; only the residual may be the output"),
                   yi->name);
      return -1;
    }
  /* the device checks eps with or without a norm */
  if (!eps_ok (eps))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATMUL: the RMSNORM epsilon %g must be finite and not negative, even without a norm weight"),
                   eps);
      return -1;
    }
  if (pos != -1 && !amk_op_int_tensor (self, "MATMUL", _("the positions"), pos, m, error))
    return -1;
  if (pos != -1 && amk_program_get_buffer_info (self, pos)->n_elements != m)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("MATMUL: the positions “%s” must have one element per input row, %" PRIu64 ", not %" PRIu64),
                   amk_program_get_buffer_info (self, pos)->name, m,
                   amk_program_get_buffer_info (self, pos)->n_elements);
      return -1;
    }
  index = amk_op_record (self, AMK_ABI_OP_MATMUL, (gint32[]) { y, w, x, bias, residual, norm },
                         &(amk_params_t) { .matmul = { .k = (gint32) k, .eps = eps } });
  /* the seventh operand, past what amk_op_record takes */
  g_array_index (self->ops, AmkOpInfo, index).buffers[6] = pos != -1 ? pos : AMK_NO_BUFFER;
  return index;
}

/**
 * amk_program_op_matmul:
 * @self: a program
 * @y: the output (f32 or bf16), `M × N` elements: row m holds `Y[m, 0 .. N)`
 * @w: the matrix, 2-D `[N, K]` (bf16, f16, or a block-quantized type where the executor
 *   runs it), usually a constant buffer
 * @x: the input rows (f32 or bf16), `M × K` elements for some `M ≥ 1`
 * @bias: a vector of N elements added to every row, or -1
 * @residual: `M × N` elements added to the product, or -1; may be @y (`Y += X W^T`)
 * @norm: the weight of an RMSNORM fused before the product (K elements), applied to
 *   each row of @x, or -1
 * @eps: the RMSNORM epsilon, used with @norm; finite and not negative even without it
 * @error: return location for a #GError
 *
 * Records `Y[m] = W X'[m] + bias + residual[m]` for every row m of @x, with fp32
 * accumulation: [method@Amk.Program.op_matvec] for M rows at once, which reads the
 * matrix once for all of them (prefill of a prompt, or a step of several sequences).
 * `X'[m]` is `X[m]` or, with @norm, `X[m] / sqrt(mean(X[m]²) + eps) * norm`. On the GPU
 * the product runs on tensor cores: block-quantized weights are decoded to bf16 there,
 * and `X'` is rounded to the weights' 16-bit type first. K must be a multiple of 8. The compiler cuts Y into tiles of rows
 * and columns spread over every queue.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_matmul (AmkProgram  *self,
                       gint         y,
                       gint         w,
                       gint         x,
                       gint         bias,
                       gint         residual,
                       gint         norm,
                       gfloat       eps,
                       GError     **error)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  return record_matmul (self, y, w, x, bias, residual, norm, eps, -1, error);
}

/**
 * amk_program_op_matmul_rows:
 * @self: a program
 * @y: the output, as for [method@Amk.Program.op_matmul]
 * @w: the matrix
 * @x: the input rows, `M × K` elements
 * @bias: a vector of N elements, or -1
 * @residual: `M × N` elements, or -1; may be @y
 * @norm: the weight of a fused RMSNORM (K elements), or -1
 * @eps: the RMSNORM epsilon
 * @pos: the rows' positions, i32 with M elements, as for
 *   [method@Amk.Program.op_rope_rows]: a negative one marks a padding row
 * @error: return location for a #GError
 *
 * Records [method@Amk.Program.op_matmul] for rows that carry positions (a prompt chunk
 * whose last rows are padding, a batch with free slots): the output rows of padding rows
 * are left unspecified, so that an executor need not compute them.
 *
 * Returns: the op's index, or -1 with @error set
 */
gint
amk_program_op_matmul_rows (AmkProgram  *self,
                            gint         y,
                            gint         w,
                            gint         x,
                            gint         bias,
                            gint         residual,
                            gint         norm,
                            gfloat       eps,
                            gint         pos,
                            GError     **error)
{
  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  return record_matmul (self, y, w, x, bias, residual, norm, eps, pos, error);
}


/* ---- verifier ----------------------------------------------------------------------- */

/* One operand of MATMUL: the dtypes it may have and the elements it must hold exactly
 * (needed 0: any), as the device check asks. */
static gboolean
check_matmul_operand (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                      guint slot, const char *what, guint dtypes, guint64 needed, GError **error)
{
  AmkBufferInfo *info = amk_verify_slot_buffer (self, ins, slot);

  if (info == NULL)
    return TRUE;
  if (!(dtypes & (1u << info->dtype)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATMUL): %s “%s” cannot be %s"),
                   queue, pos, what, info->name, amk_dtype_name (info->dtype));
      return FALSE;
    }
  if (needed != 0 && info->n_elements != needed)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (MATMUL): %s “%s” has %" PRIu64 " elements; it must have exactly %" PRIu64),
                   queue, pos, what, info->name, info->n_elements, needed);
      return FALSE;
    }
  return TRUE;
}

/* amk_verify_operand_bytes for a count of 64 bits: its own count is an int32. */
static void
matmul_operand_bytes (AmkProgram *self, const amk_instruction_t *ins, guint slot, guint64 count,
                      gint64 *region, guint64 *start, guint64 *length)
{
  amk_verify_operand_bytes (self, ins, slot, 0, 0, region, start, length);
  *length = (guint64) amk_instruction_bytes (self, ins, slot, (double) count);
}

/* Y must not share memory with anything the op reads, except the residual, which may be
 * exactly Y (Y += X W^T). Whole operands: the tiles of one op run side by side, so a
 * tile's output must not overlap what any other tile reads either. */
static gboolean
check_matmul_aliasing (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
                       guint64 m, guint64 n, GError **error)
{
  const guint64 k = (guint64) ins->params.matmul.k;
  /* 64-bit: M × N or N × K may pass 2^31 */
  const guint64 counts[7] = { m * n, n * k, m * k, n, m * n, k, m };
  gint64 ry, rs;
  guint64 sy, ss, ly, ls;

  matmul_operand_bytes (self, ins, 0, counts[0], &ry, &sy, &ly);
  for (guint slot = 1; slot < ins->n_buffers; slot++)
    {
      if (ins->buffers[slot] == AMK_NO_BUFFER)
        continue;
      matmul_operand_bytes (self, ins, slot, counts[slot], &rs, &ss, &ls);
      if (rs != ry || sy + ly <= ss || ss + ls <= sy)
        continue;
      if (slot == 4 && ss == sy && ls == ly)
        continue;
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATMUL): the output overlaps input %u; only the residual may be the output itself"),
                   queue, pos, slot);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_matmul (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
              GError **error)
{
  const guint vec = (1u << AMK_DTYPE_F32) | (1u << AMK_DTYPE_BF16);
  const guint weights = (1u << AMK_DTYPE_BF16) | (1u << AMK_DTYPE_F16) | AMK_DTYPE_BLOCK_MASK;
  const amk_matmul_params_t *p = &ins->params.matmul;
  /* y, W and x are not optional */
  AmkBufferInfo *w = amk_verify_slot_buffer (self, ins, 1), *x = amk_verify_slot_buffer (self, ins, 2);
  guint64 m, n;

  if (p->k < 1 || p->k % MATMUL_K_MULTIPLE != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATMUL): K = %d must be a positive multiple of %u"),
                   queue, pos, p->k, MATMUL_K_MULTIPLE);
      return FALSE;
    }
  if (w->n_dims != 2 || w->shape[1] != p->k)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATMUL): the matrix “%s” must be 2-D with rows of K = %d elements"),
                   queue, pos, w->name, p->k);
      return FALSE;
    }
  if (x->n_elements % p->k != 0)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATMUL): the input rows “%s” (%" PRIu64 " elements) are not a whole number of rows of K = %d"),
                   queue, pos, x->name, x->n_elements, p->k);
      return FALSE;
    }
  n = w->shape[0];
  m = x->n_elements / p->k;
  if (m > MATMUL_MAX_DIM || n > MATMUL_MAX_DIM)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (MATMUL): M = %" PRIu64 " rows of “%s” by N = %" PRIu64 " rows of “%s”: each must be below 2^31"),
                   queue, pos, m, x->name, n, w->name);
      return FALSE;
    }
  if (p->m0 < 0 || p->m_count < 1 || (guint64) p->m0 + p->m_count > m ||
      p->n0 < 0 || p->n_count < 1 || (guint64) p->n0 + p->n_count > n)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_OUT_OF_RANGE,
                   _("Queue %u instruction %u (MATMUL): rows %d + %d and columns %d + %d are out of range of M = %" PRIu64 " and N = %" PRIu64),
                   queue, pos, p->m0, p->m_count, p->n0, p->n_count, m, n);
      return FALSE;
    }
  /* the device checks eps with or without a norm */
  if (!eps_ok (p->eps))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("Queue %u instruction %u (MATMUL): the RMSNORM epsilon %g must be finite and not negative, even without a norm weight"),
                   queue, pos, p->eps);
      return FALSE;
    }
  return check_matmul_operand (self, queue, pos, ins, 0, _("the output"), vec, m * n, error) &&
         check_matmul_operand (self, queue, pos, ins, 1, _("the matrix"), weights, 0, error) &&
         check_matmul_operand (self, queue, pos, ins, 2, _("the input rows"), vec, 0, error) &&
         check_matmul_operand (self, queue, pos, ins, 3, _("the bias"), vec, n, error) &&
         check_matmul_operand (self, queue, pos, ins, 4, _("the residual"), vec, m * n, error) &&
         check_matmul_operand (self, queue, pos, ins, 5, _("the norm weight"), vec, p->k, error) &&
         (ins->n_buffers < 7 ||
          check_matmul_operand (self, queue, pos, ins, 6, _("the positions"), 1u << AMK_DTYPE_I32, m, error)) &&
         check_matmul_aliasing (self, queue, pos, ins, m, n, error);
}

static gboolean
verify_matmul (AmkProgram *self, guint queue, guint pos, const amk_instruction_t *ins,
               GError **error)
{
  return amk_verify_writes (self, queue, pos, ins, error) &&
         check_matmul (self, queue, pos, ins, error);
}

/* ---- lowering and cost -------------------------------------------------------------- */

/* Rows per tile when the tiles fill every queue: a multiple of the warpgroup's rows, the
 * one whose rounds over the queues take least (a round lasts as long as its tiles, about
 * their rows plus a fixed cost). Fewer rows can help: 192 tiles of 256 rows on 132 queues
 * take two full rounds, 264 tiles of 192 rows two rounds of shorter tiles. */
static guint64
matmul_tile_rows (guint64 m, guint64 n_tiles, guint64 queues)
{
  guint64 best = MATMUL_TILE_ROWS;
  double best_cost = G_MAXDOUBLE;

  for (guint64 rows = MATMUL_TILE_ROWS; rows >= MATMUL_TILE_ROWS / 2; rows -= MATMUL_ROW_STEP)
    {
      const guint64 tiles = (m + rows - 1) / rows * n_tiles;
      const double cost = (double) ((tiles + queues - 1) / queues) * (double) (rows + MATMUL_TILE_FIXED);

      if (cost < best_cost)
        best = rows, best_cost = cost;
    }
  return best;
}

/* The tile grid of a MATMUL op: columns in tiles of MATMUL_TILE_COLS and rows in tiles of
 * matmul_tile_rows() (the last one smaller) when that gives every queue a tile;
 * otherwise rows in tiles of MATMUL_TILE_ROWS and columns in narrower tiles (whole
 * tensor-core tiles of MATMUL_MIN_COLS) that give about one tile per queue, so that a few
 * rows still spread over the device. */
static void
matmul_grid (AmkLowering *lw, guint64 *m, guint64 *n, guint64 *m_tile, guint64 *m_tiles, guint64 *n_tile)
{
  const guint64 queues = MAX (1, lw->program->num_queues);
  AmkBufferInfo *w = amk_lower_buffer (lw, lw->op->buffers[1]);
  AmkBufferInfo *x = amk_lower_buffer (lw, lw->op->buffers[2]);
  const guint64 n_full = (w->shape[0] + MATMUL_TILE_COLS - 1) / MATMUL_TILE_COLS;

  *n = w->shape[0];
  *m = x->n_elements / w->shape[1];
  *m_tile = MATMUL_TILE_ROWS;
  *m_tiles = (*m + MATMUL_TILE_ROWS - 1) / MATMUL_TILE_ROWS;
  if (*m_tiles * n_full >= queues)
    {
      *n_tile = MATMUL_TILE_COLS;
      *m_tile = matmul_tile_rows (*m, n_full, queues);
      *m_tiles = (*m + *m_tile - 1) / *m_tile;
    }
  else
    {
      const guint64 cols = (*n * *m_tiles + queues - 1) / queues;
      *n_tile = MAX (MATMUL_MIN_COLS, (cols + MATMUL_MIN_COLS - 1) / MATMUL_MIN_COLS * MATMUL_MIN_COLS);
    }
}

/* One unit per tile: lower finds the tile's rows and columns from its index. */
static void
plan_matmul (AmkLowering *lw)
{
  guint64 m, n, m_tile, m_tiles, n_tile;

  matmul_grid (lw, &m, &n, &m_tile, &m_tiles, &n_tile);
  lw->n = m_tiles * ((n + n_tile - 1) / n_tile);
  lw->n_tiles = lw->n;
}

/* Tile `tile` is row tile tile / (column tiles), column tile tile % (column tiles). Y and
 * the residual are declared from the tile's first element to its last: that covers its
 * rows' other columns in between (strided by N), which only matters to other ops (the
 * tiles of one op never wait for each other), and the tiles of a row tile together cover
 * its rows exactly, so that a later writer of those rows retires them. */
static void
lower_matmul (AmkLowering *lw, AmkTile *t, guint64 tile, guint64 slice)
{
  const AmkOpInfo *op = lw->op;
  amk_matmul_params_t *mp = &t->ins.params.matmul;
  guint64 m, n, m_tile, m_tiles, n_tile, n_tiles, m0, mc, n0, nc, k, y0, y1;

  matmul_grid (lw, &m, &n, &m_tile, &m_tiles, &n_tile);
  n_tiles = (n + n_tile - 1) / n_tile;
  m0 = tile / n_tiles * m_tile;
  mc = MIN (m_tile, m - m0);
  n0 = tile % n_tiles * n_tile;
  nc = MIN (n_tile, n - n0);
  k = amk_lower_buffer (lw, op->buffers[1])->shape[1];

  amk_tile_use_buffers (t, op, op->buffers[6] != AMK_NO_BUFFER ? 7 : 6);
  mp->m0 = (gint32) m0;
  mp->m_count = (gint32) mc;
  mp->n0 = (gint32) n0;
  mp->n_count = (gint32) nc;
  mp->k = (gint32) k;
  y0 = m0 * n + n0;
  y1 = (m0 + mc - 1) * n + n0 + nc;
  amk_tile_access (t, op->buffers[0], y0, y1, TRUE);
  amk_tile_access (t, op->buffers[1], n0 * k, (n0 + nc) * k, FALSE);
  amk_tile_access (t, op->buffers[2], m0 * k, (m0 + mc) * k, FALSE);
  amk_tile_access (t, op->buffers[3], n0, n0 + nc, FALSE);
  amk_tile_access (t, op->buffers[4], y0, y1, FALSE);
  amk_tile_access (t, op->buffers[5], 0, k, FALSE);
  if (op->buffers[6] != AMK_NO_BUFFER)
    amk_tile_access (t, op->buffers[6], m0, m0 + mc, FALSE);
}

/* The tile's weights, input rows and output, plus its multiply-adds as bytes: tensor
 * cores do about 200 flops in the time an SM moves one byte, so a tile of many rows costs
 * more than its traffic alone (with one row it is a MATVEC, bound by the weights). */
static double
bytes_matmul (AmkProgram *self, const amk_instruction_t *ins)
{
  const amk_matmul_params_t *p = &ins->params.matmul;
  const double mc = MAX (p->m_count, 0), nc = MAX (p->n_count, 0), k = MAX (p->k, 0);
  const guint esx = amk_instruction_elem_size (self, ins, 2);
  const guint esy = amk_instruction_elem_size (self, ins, 0);

  return amk_instruction_bytes (self, ins, 1, nc * k) + mc * k * (esx != 0 ? esx : 4) +
         mc * nc * (esy != 0 ? esy : 4) + 2.0 * mc * nc * k / 200.0;
}

/* ---- CPU reference ------------------------------------------------------------------ */

/* The CPU reference is what prefill runs on without a GPU, so it is blocked: X' once per
 * instruction in fp32, W converted to fp32 two panels of AMK_CPU_COLS columns at a time
 * (transposed, so that a step over K reads one short contiguous run of each), and each
 * output summed over K in order with fused multiply-adds, as MATVEC sums (the results do
 * not depend on the blocking). The 8-lane vectors are GCC's generic vectors; on x86-64
 * with AVX2 and FMA the block runs in one FMA instruction per lane group. */
typedef float v8sf __attribute__ ((vector_size (32)));

#define MATMUL_CPU_ROWS  4u  /* rows of X per block: 4 × 2 accumulator vectors */
#define MATMUL_CPU_COLS  (2 * AMK_CPU_COLS)  /* columns of W per block: 2 panels */

/* out[r][c] = sum over k of x[r][k] W[c][k] for 4 rows of x and 16 columns of W, the
 * first 8 transposed in wt0, the others in wt1; FMA(acc, s, v) is acc += s v fused. */
#define MATMUL_BLOCK(FMA) \
  G_STMT_START { \
    v8sf a00 = { 0 }, a01 = { 0 }, a10 = { 0 }, a11 = { 0 }; \
    v8sf a20 = { 0 }, a21 = { 0 }, a30 = { 0 }, a31 = { 0 }; \
    for (gint32 c = 0; c < k; c++) \
      { \
        v8sf w0, w1; \
        const float x0 = x[0][c], x1 = x[1][c], x2 = x[2][c], x3 = x[3][c]; \
        memcpy (&w0, wt0 + 8 * (gsize) c, 32); \
        memcpy (&w1, wt1 + 8 * (gsize) c, 32); \
        FMA (a00, x0, w0); \
        FMA (a01, x0, w1); \
        FMA (a10, x1, w0); \
        FMA (a11, x1, w1); \
        FMA (a20, x2, w0); \
        FMA (a21, x2, w1); \
        FMA (a30, x3, w0); \
        FMA (a31, x3, w1); \
      } \
    memcpy (out[0], &a00, 32); \
    memcpy (out[0] + 8, &a01, 32); \
    memcpy (out[1], &a10, 32); \
    memcpy (out[1] + 8, &a11, 32); \
    memcpy (out[2], &a20, 32); \
    memcpy (out[2] + 8, &a21, 32); \
    memcpy (out[3], &a30, 32); \
    memcpy (out[3] + 8, &a31, 32); \
  } G_STMT_END

static void
matmul_block_lanes (const float *const x[MATMUL_CPU_ROWS], const float *wt0, const float *wt1, gint32 k,
                    float out[MATMUL_CPU_ROWS][MATMUL_CPU_COLS])
{
  MATMUL_BLOCK (AMK_CPU_FMA_LANES);
}

#if AMK_CPU_X86_FMA
__attribute__ ((target ("avx2,fma")))
static void
matmul_block_x86 (const float *const x[MATMUL_CPU_ROWS], const float *wt0, const float *wt1, gint32 k,
                  float out[MATMUL_CPU_ROWS][MATMUL_CPU_COLS])
{
  MATMUL_BLOCK (AMK_CPU_FMA_X86);
}
#endif

/* One share of a MATMUL tile's columns for one thread: X' (shared, read-only) times the
 * columns j0 .. j1 of the tile. */
typedef struct {
  AmkCpuRange              cols;  /* first: amk_cpu_run_split() sets it */
  const amk_instruction_t *ins;
  AmkCpuBuffer            *buffers;
  const float             *xs;    /* the tile's live rows of X', [n_rows, k] */
  const gint32            *rows;  /* the tile's live rows, from m0 */
  gint32                   n_rows;
} MatmulShare;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__ ((target_clones ("avx2", "default")))   /* the panels' transposes in AVX2 */
#endif
static gpointer
matmul_columns (gpointer data)
{
  const MatmulShare *s = data;
  const amk_instruction_t *ins = s->ins;
  const amk_matmul_params_t *p = &ins->params.matmul;
  const gint32 m0 = p->m0, mc = s->n_rows, n0 = p->n0, k = p->k;
  AmkCpuBuffer *b = s->buffers;
  AmkCpuBuffer *y = &b[ins->buffers[0]], *w = &b[ins->buffers[1]];
  AmkCpuBuffer *bias = ins->buffers[3] != AMK_NO_BUFFER ? &b[ins->buffers[3]] : NULL;
  AmkCpuBuffer *residual = ins->buffers[4] != AMK_NO_BUFFER ? &b[ins->buffers[4]] : NULL;
  const guint64 n = w->info->shape[0];
  /* the common types without a conversion call per element */
  const gboolean f32_y = y->info->dtype == AMK_DTYPE_F32;
  const gboolean f32_residual = residual != NULL && residual->info->dtype == AMK_DTYPE_F32;
  g_autofree float *wt = g_new (float, (gsize) k * MATMUL_CPU_COLS);
  float *wt1 = wt + (gsize) k * AMK_CPU_COLS;
  guint block, block_bytes;
  const gboolean quantized = amk_dtype_block (w->info->dtype, &block, &block_bytes);
#if AMK_CPU_X86_FMA
  const gboolean fma = amk_cpu_has_fma ();
#endif

  for (gint32 j0 = s->cols.start; j0 < s->cols.end; j0 += MATMUL_CPU_COLS)
    {
      const gint32 cols = MIN ((gint32) MATMUL_CPU_COLS, s->cols.end - j0);

      /* a quantized W: its rows decoded, row after row (wt holds MATMUL_CPU_COLS rows) */
      if (quantized)
        amk_dtype_dequantize (w->info->dtype, w->data, (guint64) (n0 + j0) * k, (guint64) cols * k, wt);
      else
        {
          amk_cpu_load_columns (w, k, n0 + j0, MIN (cols, (gint32) AMK_CPU_COLS), wt);
          amk_cpu_load_columns (w, k, n0 + j0 + AMK_CPU_COLS, cols - (gint32) AMK_CPU_COLS, wt1);
        }
      for (gint32 r0 = 0; r0 < mc; r0 += MATMUL_CPU_ROWS)
        {
          const gint32 rows = MIN ((gint32) MATMUL_CPU_ROWS, mc - r0);
          const float *xr[MATMUL_CPU_ROWS];
          float out[MATMUL_CPU_ROWS][MATMUL_CPU_COLS];

          /* a partial block repeats its last row and stores only its own */
          for (guint r = 0; r < MATMUL_CPU_ROWS; r++)
            xr[r] = s->xs + (gsize) (r0 + MIN ((gint32) r, rows - 1)) * k;
          if (quantized)
            for (gint32 j = 0; j < cols; j++)
              {
                float dots[MATMUL_CPU_ROWS];

                G_STATIC_ASSERT (MATMUL_CPU_ROWS % AMK_CPU_QUANT_ROWS == 0);
                for (gint32 r = 0; r < rows; r += (gint32) AMK_CPU_QUANT_ROWS)
                  amk_cpu_quant_dots (wt + (gsize) j * k, xr + r, MIN (AMK_CPU_QUANT_ROWS, (guint) (rows - r)),
                                      k, dots + r);
                for (gint32 r = 0; r < rows; r++)
                  out[r][j] = dots[r];
              }
          else
#if AMK_CPU_X86_FMA
          if (fma)
            matmul_block_x86 (xr, wt, wt1, k, out);
          else
#endif
            matmul_block_lanes (xr, wt, wt1, k, out);
          for (gint32 r = 0; r < rows; r++)
            for (gint32 j = 0; j < cols; j++)
              {
                const guint64 at = (guint64) (m0 + s->rows[r0 + r]) * n + n0 + j0 + j;
                float acc = out[r][j];
                if (bias != NULL)
                  acc += amk_cpu_load (bias, n0 + j0 + j);
                if (residual != NULL)
                  acc += f32_residual ? ((const float *) residual->data)[at] : amk_cpu_load (residual, at);
                if (f32_y)
                  ((float *) y->data)[at] = acc;
                else
                  amk_cpu_store (y, at, acc);
              }
        }
    }
  return NULL;
}

/* Y[m, n] = W[n, :] X'[m] (+ bias[n]) (+ R[m, n]) for the tile's rows and columns; X'[m]
 * is X[m] or X[m] normalised by its RMS and scaled by the norm weight, as MATVEC. Not
 * rounded to W's type as on the GPU: a plain fp32 reference. Rows whose position is
 * negative (padding) are skipped. A tile of many rows splits its columns with a second
 * thread (the CPU executor runs one instruction at a time): each output is computed the
 * same either way, and the threads write disjoint elements. */
static AmkAbortCode
run_matmul (const amk_instruction_t *ins, AmkCpuBuffer *b, guint32 *counters, gint *detail)
{
  const amk_matmul_params_t *p = &ins->params.matmul;
  const gint32 m0 = p->m0, nc = p->n_count, k = p->k;
  AmkCpuBuffer *x = &b[ins->buffers[2]];
  AmkCpuBuffer *norm = ins->buffers[5] != AMK_NO_BUFFER ? &b[ins->buffers[5]] : NULL;
  AmkCpuBuffer *pos = ins->n_buffers > 6 && ins->buffers[6] != AMK_NO_BUFFER ? &b[ins->buffers[6]] : NULL;
  g_autofree gint32 *rows = g_new (gint32, p->m_count);
  g_autofree float *xs = NULL;
  g_autofree float *gamma = NULL;
  gint32 mc = 0;

  for (gint32 r = 0; r < p->m_count; r++)
    if (pos == NULL || amk_cpu_load_i32 (pos, (guint64) (m0 + r)) >= 0)
      rows[mc++] = r;
  if (mc == 0)
    return AMK_ABORT_CODE_NONE;

  xs = g_new (float, (gsize) mc * k);
  if (norm != NULL)
    {
      gamma = g_new (float, k);
      for (gint32 c = 0; c < k; c++)
        gamma[c] = amk_dtype_load (norm->info->dtype, norm->data, c);
    }
  for (gint32 r = 0; r < mc; r++)
    {
      float *row = xs + (gsize) r * k;

      amk_cpu_load_run (x, (guint64) (m0 + rows[r]) * k, k, row);
      if (norm != NULL)
        {
          float sum = 0.0f, scale;
          for (gint32 c = 0; c < k; c++)
            sum += row[c] * row[c];
          scale = 1.0f / sqrtf (sum / (float) k + p->eps);
          for (gint32 c = 0; c < k; c++)
            row[c] = row[c] * scale * gamma[c];
        }
    }

  {
    MatmulShare shares[2] = { { { 0, nc }, ins, b, xs, rows, mc }, { { 0, nc }, ins, b, xs, rows, mc } };

    amk_cpu_run_split (matmul_columns, &shares[0].cols, &shares[1].cols, MATMUL_CPU_COLS,
                       (double) mc * nc * k);
  }
  return AMK_ABORT_CODE_NONE;
}

/* ---- descriptor --------------------------------------------------------------------- */

static const AmkParamField matmul_fields[] = {
  AMK_PARAM_INT (matmul, m0), AMK_PARAM_INT (matmul, m_count), AMK_PARAM_INT (matmul, n0),
  AMK_PARAM_INT (matmul, n_count), AMK_PARAM_INT (matmul, k), AMK_PARAM_FLOAT (matmul, eps),
};

/* bias, residual, norm weight and positions may be absent */
/* Y's and R's rows m0.. at columns n0.., W's rows n0.., X's rows m0.. */
static guint
accesses_matmul (AmkProgram *self, const amk_instruction_t *ins, AmkAccessBox *out)
{
  const amk_matmul_params_t *p = &ins->params.matmul;
  const guint64 big_n = amk_verify_slot_buffer (self, ins, 1)->n_elements / (guint64) p->k;
  const guint64 y0 = (guint64) p->m0 * big_n + p->n0;
  guint n = 0;

  amk_access_rows (out, &n, ins, 0, y0, p->n_count, big_n, p->m_count, AMK_ACCESS_WRITE, FALSE);
  amk_access_range (out, &n, ins, 1, (guint64) p->n0 * p->k, (guint64) p->n_count * p->k, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 2, (guint64) p->m0 * p->k, (guint64) p->m_count * p->k, AMK_ACCESS_READ);
  amk_access_range (out, &n, ins, 3, p->n0, p->n_count, AMK_ACCESS_READ);
  amk_access_rows (out, &n, ins, 4, y0, p->n_count, big_n, p->m_count, AMK_ACCESS_READ, FALSE);
  amk_access_range (out, &n, ins, 5, 0, p->k, AMK_ACCESS_READ);
  if (ins->n_buffers > 6)
    amk_access_range (out, &n, ins, 6, p->m0, p->m_count, AMK_ACCESS_READ);
  return n;
}

const AmkOpClass amk_op_matmul = {
  .opcode = AMK_ABI_OP_MATMUL, .name = "MATMUL", .n_buffers = 6, .n_extra = 1,
  .optional_slots = 0x78u,
  .fields = AMK_PARAM_FIELDS (matmul_fields),
  .verify = verify_matmul, .plan = plan_matmul, .lower = lower_matmul,
  .accesses = accesses_matmul, .bytes = bytes_matmul,
  .run_cpu = run_matmul,
};
