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
#include "amk-rope-private.h"

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

/* Appends an op; `buffers` and `ints` end at G_MININT32 (or after 6), `floats` may be
 * NULL. Returns the op's index. */
static gint
record_full (AmkProgram *self, guint opcode, const gint32 *buffers, gfloat value,
             const gint32 *ints, const gfloat *floats)
{
  AmkOpInfo op = { opcode, { AMK_NO_BUFFER, AMK_NO_BUFFER, AMK_NO_BUFFER,
                             AMK_NO_BUFFER, AMK_NO_BUFFER, AMK_NO_BUFFER }, value, { 0 }, { 0 } };

  for (guint i = 0; i < 6 && buffers[i] != G_MININT32; i++)
    op.buffers[i] = buffers[i];
  for (guint i = 0; ints != NULL && i < 6 && ints[i] != G_MININT32; i++)
    op.ints[i] = ints[i];
  for (guint i = 0; floats != NULL && i < 4; i++)
    op.floats[i] = floats[i];
  g_array_append_val (self->ops, op);
  amk_program_invalidate (self);
  return (gint) self->ops->len - 1;
}

static gint
record (AmkProgram *self, guint opcode, const gint32 *buffers, gfloat value)
{
  return record_full (self, opcode, buffers, value, NULL, NULL);
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

/* A float or bf16 tensor of exactly `n` elements (n 0: any size). */
static gboolean
vector_of (AmkProgram *self, const char *op, const char *what, gint buffer, guint64 n,
           AmkBufferInfo **out, GError **error)
{
  AmkBufferInfo *info = tensor (self, op, what, buffer, error);

  if (info == NULL)
    return FALSE;
  if (!is_vector_dtype (info) || (n != 0 && info->n_elements != n))
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

static gboolean
int_tensor (AmkProgram *self, const char *op, const char *what, gint buffer, guint64 min,
            GError **error)
{
  AmkBufferInfo *info = tensor (self, op, what, buffer, error);

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
static gint
internal_scratch (AmkProgram *self, const char *what, AmkDType dtype, guint64 n, GError **error)
{
  g_autofree char *name = g_strdup_printf ("%s.%u", what, self->ops->len);
  gint64 shape = (gint64) n;

  return amk_program_add_buffer (self, name, dtype, &shape, 1, AMK_BUFFER_ROLE_SCRATCH, error);
}

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

  if (!can_add_ops (self, "RMSNORM", error) ||
      !vector_of (self, "RMSNORM", _("the input"), x, 0, &xi, error))
    return -1;
  if (n == 0 || xi->n_elements % n != 0 || !(eps >= 0.0f && eps < G_MAXFLOAT))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("RMSNORM: “%s” (%" PRIu64 " elements) is not made of vectors of %u, or the epsilon is not finite"),
                   xi->name, xi->n_elements, n);
      return -1;
    }
  if (!vector_of (self, "RMSNORM", _("the output"), out, xi->n_elements, NULL, error) ||
      !vector_of (self, "RMSNORM", _("the weight"), weight, n, NULL, error) ||
      !writable ("RMSNORM", amk_program_get_buffer_info (self, out), error))
    return -1;
  return record_full (self, AMK_ABI_OP_RMSNORM, (gint32[]) { out, x, weight, G_MININT32 }, eps,
                      (gint32[]) { (gint32) n, G_MININT32 }, NULL);
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

  if (!can_add_ops (self, "SILU_MUL", error) ||
      !vector_of (self, "SILU_MUL", _("the output"), out, 0, &oi, error) ||
      !vector_of (self, "SILU_MUL", _("the gate"), gate, oi->n_elements, NULL, error) ||
      !vector_of (self, "SILU_MUL", _("the up projection"), up, oi->n_elements, NULL, error) ||
      !writable ("SILU_MUL", oi, error))
    return -1;
  if (out == gate || out == up)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("SILU_MUL: the output “%s” is also an input"), oi->name);
      return -1;
    }
  return record (self, AMK_ABI_OP_SILU_MUL, (gint32[]) { out, gate, up, G_MININT32 }, 0.0f);
}

/**
 * amk_program_op_embed:
 * @self: a program
 * @out: the output row (f32 or bf16), one element per column of @table
 * @table: the embedding table, 2-D `[vocab, hidden]` (bf16, f16 or f32)
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

  if (!can_add_ops (self, "EMBED", error) ||
      (ti = tensor (self, "EMBED", _("the table"), table, error)) == NULL)
    return -1;
  if (ti->n_dims != 2 || ti->dtype == AMK_DTYPE_I32 || ti->dtype == AMK_DTYPE_U8)
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("EMBED: the table “%s” must be 2-D bf16, f16 or f32"), ti->name);
      return -1;
    }
  if (!vector_of (self, "EMBED", _("the output"), out, ti->shape[1], NULL, error) ||
      !int_tensor (self, "EMBED", _("the tokens"), tokens, (guint64) token_index + 1, error) ||
      !writable ("EMBED", amk_program_get_buffer_info (self, out), error))
    return -1;
  return record_full (self, AMK_ABI_OP_EMBED, (gint32[]) { out, table, tokens, G_MININT32 }, 0.0f,
                      (gint32[]) { (gint32) token_index, G_MININT32 }, NULL);
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
  guint64 n_tiles;
  gint val, idx;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), -1);

  if (!can_add_ops (self, "ARGMAX", error) ||
      !vector_of (self, "ARGMAX", _("the logits"), logits, 0, &li, error) ||
      !int_tensor (self, "ARGMAX", _("the output"), out, (guint64) out_index + 1, error) ||
      !writable ("ARGMAX", amk_program_get_buffer_info (self, out), error))
    return -1;
  n_tiles = MAX (1, MIN ((guint64) self->num_queues, li->n_elements / 1024));
  if ((val = internal_scratch (self, "argmax-values", AMK_DTYPE_F32, n_tiles, error)) < 0 ||
      (idx = internal_scratch (self, "argmax-indices", AMK_DTYPE_I32, n_tiles, error)) < 0)
    return -1;
  record_full (self, AMK_ABI_OP_ARGMAX_PARTIAL, (gint32[]) { val, idx, logits, G_MININT32 }, 0.0f,
               (gint32[]) { (gint32) n_tiles, G_MININT32 }, NULL);
  return record_full (self, AMK_ABI_OP_ARGMAX_FINAL, (gint32[]) { out, val, idx, G_MININT32 }, 0.0f,
                      (gint32[]) { (gint32) n_tiles, (gint32) out_index, G_MININT32 }, NULL);
}

/* The head layout shared by the attention ops; returns the cache length (positions). */
static gboolean
check_heads (AmkProgram *self, const char *op, guint head_dim, guint n_q, guint n_kv,
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
  if ((kc = tensor (self, op, _("the key cache"), k_cache, error)) == NULL ||
      (vc = tensor (self, op, _("the value cache"), v_cache, error)) == NULL ||
      !int_tensor (self, op, _("the position"), pos, 1, error))
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

static gboolean
f32_of (AmkProgram *self, const char *op, const char *what, gint buffer, guint64 n, GError **error)
{
  AmkBufferInfo *info = tensor (self, op, what, buffer, error);

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

static gboolean
rope_params_ok (const char *op, gfloat theta, gfloat factor, gfloat low_freq_factor,
                gfloat high_freq_factor, guint original_context, GError **error)
{
  if (!(theta > 0.0f && theta < G_MAXFLOAT) || factor < 0.0f ||
      (factor > 0.0f && !(low_freq_factor > 0.0f && high_freq_factor > low_freq_factor && original_context > 0)))
    {
      g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
                   _("%s: theta must be positive, and Llama-3 scaling needs 0 < low < high frequency factors and an original context"),
                   op);
      return FALSE;
    }
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

  if (!can_add_ops (self, "ROPE_KV", error) ||
      !check_heads (self, "ROPE_KV", head_dim, n_q_heads, n_kv_heads, k_cache, v_cache, pos, &max_ctx, error) ||
      !f32_of (self, "ROPE_KV", _("the queries"), q, (guint64) n_q_heads * head_dim, error) ||
      !f32_of (self, "ROPE_KV", _("the keys"), k, (guint64) n_kv_heads * head_dim, error) ||
      !f32_of (self, "ROPE_KV", _("the values"), v, (guint64) n_kv_heads * head_dim, error) ||
      !writable ("ROPE_KV", amk_program_get_buffer_info (self, q), error) ||
      !writable ("ROPE_KV", amk_program_get_buffer_info (self, k), error) ||
      !writable ("ROPE_KV", amk_program_get_buffer_info (self, k_cache), error) ||
      !writable ("ROPE_KV", amk_program_get_buffer_info (self, v_cache), error))
    return -1;
  if (!rope_params_ok ("ROPE_KV", theta, factor, low_freq_factor, high_freq_factor, original_context, error))
    return -1;
  return record_full (self, AMK_ABI_OP_ROPE_KV, (gint32[]) { q, k, v, k_cache, v_cache, pos }, 0.0f,
                      (gint32[]) { (gint32) head_dim, (gint32) n_q_heads, (gint32) n_kv_heads,
                                   (gint32) max_ctx, (gint32) original_context, G_MININT32 },
                      (gfloat[]) { theta, factor, low_freq_factor, high_freq_factor });
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
  partial = internal_scratch (self, "attention-partials", AMK_DTYPE_F32,
                              (guint64) n_q_heads * n_splits * (head_dim + 2), error);
  if (partial < 0)
    return -1;
  record_full (self, AMK_ABI_OP_ATTN_DECODE,
               (gint32[]) { partial, q, k_cache, v_cache, pos, cos_sin, G_MININT32 },
               scale, (gint32[]) { (gint32) head_dim, (gint32) n_q_heads, (gint32) n_kv_heads,
                                   (gint32) max_ctx, (gint32) n_splits, G_MININT32 }, NULL);
  return record_full (self, AMK_ABI_OP_ATTN_REDUCE, (gint32[]) { out, partial, G_MININT32 }, 0.0f,
                      (gint32[]) { (gint32) head_dim, (gint32) n_q_heads, (gint32) n_splits, G_MININT32 },
                      NULL);
}

/**
 * amk_program_op_attention:
 * @self: a program
 * @out: the attention output, f32 `[n_q_heads × head_dim]`
 * @q: the (rotated) queries, f32 `[n_q_heads × head_dim]`
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

  if (!can_add_ops (self, "ATTENTION", error) ||
      !check_heads (self, "ATTENTION", head_dim, n_q_heads, n_kv_heads, k_cache, v_cache, pos, &max_ctx, error) ||
      !f32_of (self, "ATTENTION", _("the queries"), q, (guint64) n_q_heads * head_dim, error) ||
      !f32_of (self, "ATTENTION", _("the output"), out, (guint64) n_q_heads * head_dim, error) ||
      !writable ("ATTENTION", amk_program_get_buffer_info (self, out), error))
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

  if (!can_add_ops (self, "ROPE_ATTENTION", error) ||
      !check_heads (self, "ROPE_ATTENTION", head_dim, n_q_heads, n_kv_heads, k_cache, v_cache, pos,
                    &max_ctx, error) ||
      !f32_of (self, "ROPE_ATTENTION", _("the queries, keys and values"), qkv,
               ((guint64) n_q_heads + 2ull * n_kv_heads) * head_dim, error) ||
      !f32_of (self, "ROPE_ATTENTION", _("the output"), out, (guint64) n_q_heads * head_dim, error) ||
      !writable ("ROPE_ATTENTION", amk_program_get_buffer_info (self, out), error) ||
      !writable ("ROPE_ATTENTION", amk_program_get_buffer_info (self, k_cache), error) ||
      !writable ("ROPE_ATTENTION", amk_program_get_buffer_info (self, v_cache), error) ||
      !rope_params_ok ("ROPE_ATTENTION", theta, factor, low_freq_factor, high_freq_factor,
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
