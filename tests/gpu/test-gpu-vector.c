/* test-gpu-vector.c: the vector ops (RMSNORM, SILU_MUL, EMBED, ARGMAX_PARTIAL,
 * ARGMAX_FINAL) on the GPU against the CPU executor on the same image. Random inputs,
 * outputs poisoned (0xa5 bytes) before every run, work spread over many queues and
 * ordered by counters, several block sizes. Floats within a norm-wise relative error
 * (1e-2 where bf16 is involved, 1e-5 for f32), integers and ARGMAX exactly, and every
 * element outside the computed ranges byte-identical to the reference (poison). Skips
 * without a CUDA device.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <string.h>
#include "gpu-test-common.h"

#define MAX_BUFS 8

static const guint thread_configs[] = { 512, 256, 96, 32 };

static const char *
dt_name (AmkDType dtype)
{
  switch (dtype)
    {
    case AMK_DTYPE_F32: return "f32";
    case AMK_DTYPE_F16: return "f16";
    case AMK_DTYPE_BF16: return "bf16";
    case AMK_DTYPE_I32: return "i32";
    default: return "?";
    }
}

static gsize
esize (AmkDType dtype)
{
  return dtype == AMK_DTYPE_F16 || dtype == AMK_DTYPE_BF16 ? 2 : dtype == AMK_DTYPE_U8 ? 1 : 4;
}

/* n random elements, never zero: magnitudes in [1/16, 2) (times 2^scale_exp), random
 * signs, all normal numbers. */
static GBytes *
vec_random (gsize n, AmkDType dtype, int scale_exp)
{
  guint8 *d = g_malloc (n * esize (dtype));

  for (gsize i = 0; i < n; i++)
    {
      const gboolean neg = g_test_rand_bit ();
      float f = ldexpf ((float) g_test_rand_double_range (0.0625, 2.0), scale_exp);
      if (neg)
        f = -f;
      if (dtype == AMK_DTYPE_F32)
        memcpy (d + 4 * i, &f, 4);
      else if (dtype == AMK_DTYPE_BF16)
        {
          guint32 u;
          guint16 h;
          memcpy (&u, &f, 4);
          h = (guint16) ((u + 0x7fff + ((u >> 16) & 1)) >> 16);
          memcpy (d + 2 * i, &h, 2);
        }
      else if (dtype == AMK_DTYPE_F16)
        {
          /* exponent 2^-4 .. 2^0 (scale_exp ignored), 10 random mantissa bits */
          guint16 h = (guint16) ((neg ? 0x8000u : 0u) | ((guint32) g_test_rand_int_range (11, 16) << 10) |
                                 (guint32) g_test_rand_int_range (0, 1024));
          memcpy (d + 2 * i, &h, 2);
        }
      else
        {
          gint32 v = g_test_rand_int ();
          memcpy (d + 4 * i, &v, 4);
        }
    }
  return g_bytes_new_take (d, n * esize (dtype));
}

static void
store_f32 (guint8 *p, AmkDType dtype, gsize i, float v)
{
  if (dtype == AMK_DTYPE_F32)
    memcpy (p + 4 * i, &v, 4);
  else
    {
      guint32 u;
      guint16 h;
      memcpy (&u, &v, 4);
      h = (guint16) ((u + 0x7fff + ((u >> 16) & 1)) >> 16);
      memcpy (p + 2 * i, &h, 2);
    }
}

/* ---- program building ---------------------------------------------------------------- */

static gint
buf (AmkProgram *p, const char *name, AmkDType dtype, gint64 n, AmkBufferRole role)
{
  g_autoptr(GError) error = NULL;
  gint b = amk_program_add_buffer (p, name, dtype, &n, 1, role, &error);
  g_assert_no_error (error);
  return b;
}

/* takes data */
static void
set_data (AmkProgram *p, gint b, GBytes *data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) owned = data;
  g_assert_true (amk_program_set_buffer_data (p, b, data, &error));
}

/* ---- running a case ------------------------------------------------------------------ */

typedef struct {
  gint     buffer;
  AmkDType dtype;
  gsize    lo, hi;   /* the elements the ops compute; the rest must stay poison */
  gboolean exact;    /* integers and ARGMAX: byte for byte */
} VecOut;

typedef struct {
  const char *label;
  AmkProgram *program;
  gint        in[MAX_BUFS];
  GBytes     *in_data[MAX_BUFS];
  guint       n_in;
  VecOut      out[MAX_BUFS];
  guint       n_out;
  double      tol;
} VecCase;

static void
case_input (VecCase *c, gint buffer, GBytes *data)
{
  g_assert_cmpuint (c->n_in, <, MAX_BUFS);
  c->in[c->n_in] = buffer;
  c->in_data[c->n_in++] = data;
}

static void
case_output (VecCase *c, gint buffer, AmkDType dtype, gsize lo, gsize hi, gboolean exact)
{
  g_assert_cmpuint (c->n_out, <, MAX_BUFS);
  c->out[c->n_out++] = (VecOut) { buffer, dtype, lo, hi, exact };
}

static void
case_clear (VecCase *c)
{
  for (guint i = 0; i < c->n_in; i++)
    g_bytes_unref (c->in_data[i]);
  g_clear_object (&c->program);
}

static void
upload_all (const VecCase *c, AmkCpuExecutor *cpu, AmkLauncher *gpu)
{
  g_autoptr(GError) error = NULL;

  for (guint i = 0; i < c->n_in; i++)
    {
      if (cpu != NULL)
        g_assert_true (amk_cpu_executor_upload (cpu, c->in[i], c->in_data[i], &error));
      if (gpu != NULL)
        g_assert_true (amk_launcher_upload (gpu, c->in[i], c->in_data[i], &error));
      g_assert_no_error (error);
    }
  for (guint o = 0; o < c->n_out; o++)
    {
      g_autoptr(GBytes) bad = NULL;
      gboolean is_input = FALSE;

      for (guint i = 0; i < c->n_in; i++)
        is_input = is_input || c->in[i] == c->out[o].buffer;
      if (is_input) /* in place: it starts as the input */
        continue;
      bad = poison (amk_program_get_buffer_size (c->program, c->out[o].buffer));
      if (cpu != NULL)
        g_assert_true (amk_cpu_executor_upload (cpu, c->out[o].buffer, bad, &error));
      if (gpu != NULL)
        g_assert_true (amk_launcher_upload (gpu, c->out[o].buffer, bad, &error));
      g_assert_no_error (error);
    }
}

/* Compares one output; returns its error (0 for exact matches, G_MAXDOUBLE for a
 * mismatch that no tolerance covers) and describes it in *what. */
static double
compare (const VecOut *o, GBytes *want, GBytes *got, char **what)
{
  gsize n_bytes;
  const guint8 *e = g_bytes_get_data (want, &n_bytes);
  const guint8 *g = g_bytes_get_data (got, NULL);
  const gsize es = esize (o->dtype);
  double num = 0.0, den = 0.0;

  g_assert_cmpuint (g_bytes_get_size (got), ==, n_bytes);
  if (memcmp (e, g, o->lo * es) != 0 || memcmp (e + o->hi * es, g + o->hi * es, n_bytes - o->hi * es) != 0)
    {
      *what = g_strdup ("WROTE OUTSIDE ITS RANGE");
      return G_MAXDOUBLE;
    }
  if (o->exact)
    {
      for (gsize i = o->lo; i < o->hi; i++)
        if (memcmp (e + i * es, g + i * es, es) != 0)
          {
            gint32 a = 0, b = 0;
            memcpy (&a, e + i * es, MIN (es, 4));
            memcpy (&b, g + i * es, MIN (es, 4));
            *what = g_strdup_printf ("element %" G_GSIZE_FORMAT ": gpu 0x%08x cpu 0x%08x", i, (guint32) b, (guint32) a);
            return G_MAXDOUBLE;
          }
      *what = g_strdup ("exact");
      return 0.0;
    }
  for (gsize i = o->lo; i < o->hi; i++)
    {
      double a = load_float (g, o->dtype, i), b = load_float (e, o->dtype, i);
      num += (a - b) * (a - b);
      den += b * b;
    }
  if (!(den > 0.0) || isnan (num))
    {
      *what = g_strdup_printf ("not comparable (|cpu|^2 = %g, |gpu - cpu|^2 = %g)", den, num);
      return G_MAXDOUBLE;
    }
  *what = g_strdup_printf ("rel err %.3g", sqrt (num / den));
  return sqrt (num / den);
}

/* Runs the case on the CPU executor once and on the GPU under every block size; one
 * PASS/FAIL line per block size. */
static gboolean
run_case (VecCase *c, guint max_threads)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkCpuExecutor) cpu = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  GBytes *want[MAX_BUFS] = { NULL };
  gboolean ok = TRUE;

  g_assert_true (amk_program_verify (c->program, &error));
  g_assert_no_error (error);
  cpu = amk_cpu_executor_new (c->program, &error);
  g_assert_no_error (error);
  upload_all (c, cpu, NULL);
  g_assert_true (amk_cpu_executor_run (cpu, &error));
  g_assert_no_error (error);
  for (guint o = 0; o < c->n_out; o++)
    {
      want[o] = amk_cpu_executor_download (cpu, c->out[o].buffer, &error);
      g_assert_no_error (error);
    }

  launcher = amk_launcher_new (0);
  g_assert_true (amk_launcher_load (launcher, c->program, &error));
  g_assert_no_error (error);
  for (guint t = 0; t < G_N_ELEMENTS (thread_configs); t++)
    {
      const guint threads = MIN (thread_configs[t], max_threads);
      g_autoptr(GString) line = g_string_new (NULL);
      gboolean pass = TRUE;

      amk_launcher_set_threads_per_block (launcher, threads);
      upload_all (c, NULL, launcher);
      if (!amk_launcher_launch (launcher, NULL, &error))
        {
          g_test_message ("FAIL vector %s | threads=%u: launch failed: %s", c->label, threads, error->message);
          g_clear_error (&error);
          ok = FALSE;
          continue;
        }
      for (guint o = 0; o < c->n_out; o++)
        {
          g_autoptr(GBytes) got = amk_launcher_download (launcher, c->out[o].buffer, &error);
          g_autofree char *what = NULL;
          double err;

          g_assert_no_error (error);
          err = compare (&c->out[o], want[o], got, &what);
          if (err > (c->out[o].exact ? 0.0 : c->tol))
            pass = FALSE;
          g_string_append_printf (line, "%s%s: %s", o ? ", " : "",
                                  amk_program_get_buffer_name (c->program, c->out[o].buffer), what);
        }
      g_test_message ("%s vector %s | threads=%u: %s (tol %.0e)", pass ? "PASS" : "FAIL", c->label,
                      threads, line->str, c->tol);
      ok = ok && pass;
    }
  for (guint o = 0; o < c->n_out; o++)
    g_bytes_unref (want[o]);
  return ok;
}

static guint
probe_max_threads (guint *max_queues)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) probe = amk_launcher_new (0);
  g_autoptr(AmkKernelAttributes) attr = amk_launcher_kernel_attributes (probe, 32, 0, &error);
  gint64 blocks;

  g_assert_no_error (error);
  blocks = amk_launcher_max_coresident_blocks (probe, MIN (512, (guint) attr->max_threads), 0, &error);
  g_assert_no_error (error);
  *max_queues = (guint) CLAMP (blocks, 1, 128);
  g_test_message ("megakernel: %d registers, %d bytes local, max %d threads per block; %u queues",
                  attr->num_regs, attr->local_bytes, attr->max_threads, *max_queues);
  return (guint) attr->max_threads;
}

/* ---- RMSNORM --------------------------------------------------------------------------- */

typedef struct {
  AmkDType out, x, w;
  guint    n, vectors;   /* vectors of n elements */
  guint    per_ins;      /* vectors per instruction, dealt over the queues */
  guint    v0;           /* first vector normalised: the ones before keep poison */
  gboolean in_place;
  gboolean wait;         /* x is copied in by another queue first; the norms wait */
} NormCase;

static gboolean
run_norm_case (const NormCase *nc, guint max_threads, guint queues)
{
  VecCase c = { 0 };
  g_autofree char *label = NULL;
  const gsize total = (gsize) nc->n * (nc->v0 + nc->vectors);
  gint out, x, xsrc, w, counter = -1;
  gboolean ok;

  c.program = amk_program_new (queues);
  x = buf (c.program, "x", nc->x, total, nc->in_place ? AMK_BUFFER_ROLE_OUTPUT : AMK_BUFFER_ROLE_INPUT);
  out = nc->in_place ? x : buf (c.program, "out", nc->out, total, AMK_BUFFER_ROLE_OUTPUT);
  w = buf (c.program, "w", nc->w, nc->n, AMK_BUFFER_ROLE_CONSTANT);
  set_data (c.program, w, vec_random (nc->n, nc->w, 0));
  xsrc = x;
  if (nc->wait)
    {
      gint xin = buf (c.program, "x in", nc->x, total, AMK_BUFFER_ROLE_INPUT);
      gint i;
      xsrc = buf (c.program, "x copy", nc->x, total, AMK_BUFFER_ROLE_SCRATCH);
      counter = amk_program_add_counter (c.program, "x ready");
      i = add_ins (c.program, queues - 1, AMK_OPCODE_COPY, (gint[]) { xsrc, xin }, 2,
                   "count", (gint) total, NULL);
      signal_on (c.program, i, counter);
      case_input (&c, xin, vec_random (total, nc->x, 2));
    }
  else
    case_input (&c, x, vec_random (total, nc->x, 2)); /* in place: x is the output too */

  for (guint v = nc->v0, k = 0; v < nc->v0 + nc->vectors; v += nc->per_ins, k++)
    {
      const guint nv = MIN (nc->per_ins, nc->v0 + nc->vectors - v);
      gint i = add_ins (c.program, k % queues, AMK_OPCODE_RMSNORM, (gint[]) { out, xsrc, w }, 3,
                        "n", (gint) nc->n, "vec0", (gint) v, "n_vecs", (gint) nv, NULL);
      set_float (c.program, i, "eps", 1e-6f);
      if (nc->wait)
        wait_on (c.program, i, counter, 1);
    }
  if (nc->in_place)
    {
      /* the output is x itself: compare all of it (the vectors before v0 are the input) */
      case_output (&c, x, nc->x, 0, total, FALSE);
    }
  else
    case_output (&c, out, nc->out, (gsize) nc->v0 * nc->n, total, FALSE);
  c.tol = nc->out == AMK_DTYPE_F32 && nc->x == AMK_DTYPE_F32 && nc->w == AMK_DTYPE_F32 ? 1e-5 : 1e-2;
  label = g_strdup_printf ("RMSNORM out=%s x=%s w=%s n=%u vectors %u..%u, %u per instruction%s%s",
                           dt_name (nc->out), dt_name (nc->x), dt_name (nc->w),
                           nc->n, nc->v0, nc->v0 + nc->vectors, nc->per_ins,
                           nc->in_place ? " in place" : "", nc->wait ? " waits" : "");
  c.label = label;
  ok = run_case (&c, max_threads);
  case_clear (&c);
  return ok;
}

static void
test_rmsnorm (void)
{
  const AmkDType F32 = AMK_DTYPE_F32, BF16 = AMK_DTYPE_BF16;
  const NormCase cases[] = {
    /* out   x     w     n     vectors per_ins v0 in_place wait */
    { BF16, BF16, BF16, 2304, 1,  1,  0, FALSE, FALSE }, /* the hidden state: a block per vector */
    { F32,  F32,  F32,  2304, 1,  1,  1, FALSE, FALSE },
    { F32,  BF16, BF16, 4096, 3,  3,  0, FALSE, TRUE },  /* several long vectors per block */
    { BF16, F32,  BF16, 128,  32, 8,  0, FALSE, FALSE }, /* Qwen3 q heads: a warp per head */
    { F32,  F32,  BF16, 128,  2,  2,  0, FALSE, TRUE },  /* 2 KV heads after a counter */
    { BF16, BF16, F32,  128,  16, 5,  3, TRUE,  FALSE }, /* in place */
    { F32,  F32,  F32,  2304, 2,  1,  0, TRUE,  FALSE }, /* in place, a block per vector */
    { F32,  BF16, F32,  100,  40, 40, 1, FALSE, FALSE }, /* n % 8 != 0: one element at a time */
    { BF16, BF16, BF16, 1001, 7,  7,  0, FALSE, FALSE }, /* long and odd: a block per vector, one element at a time */
    { F32,  F32,  F32,  8,    600, 600, 0, FALSE, FALSE }, /* many tiny vectors */
  };
  guint failed = 0, max_queues, max_threads;

  if (!need_gpu ())
    return;
  max_threads = probe_max_threads (&max_queues);
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    if (!run_norm_case (&cases[i], max_threads, max_queues))
      failed++;
  g_test_message ("%s rmsnorm: %u of %u cases failed", failed ? "FAIL" : "PASS", failed,
                  (guint) G_N_ELEMENTS (cases));
  g_assert_cmpuint (failed, ==, 0);
}

/* ---- SILU_MUL -------------------------------------------------------------------------- */

static void
test_silu_mul (void)
{
  const AmkDType F32 = AMK_DTYPE_F32, BF16 = AMK_DTYPE_BF16;
  const struct { AmkDType out, gate, up; guint n, tile, start; gboolean wait; } cases[] = {
    { BF16, BF16, BF16, 14336, 112, 0, FALSE },  /* Llama-3.1-8B's intermediate size */
    { F32,  F32,  F32,  8192,  64,  0, TRUE },   /* gate and up written by other queues */
    { BF16, F32,  F32,  8192,  1000, 3, FALSE }, /* unaligned tiles: one element at a time */
    { F32,  BF16, F32,  6000,  6000, 8, FALSE }, /* one tile, 16-byte aligned from element 8 */
  };
  guint failed = 0, max_queues, max_threads;

  if (!need_gpu ())
    return;
  max_threads = probe_max_threads (&max_queues);
  for (guint k = 0; k < G_N_ELEMENTS (cases); k++)
    {
      VecCase c = { 0 };
      g_autofree char *label = NULL;
      const guint n = cases[k].n, pad = 5;
      gint out, gate, up, gsrc, usrc, counter = -1, counter2 = -1;
      guint t = 0;

      c.program = amk_program_new (max_queues);
      out = buf (c.program, "out", cases[k].out, n + pad, AMK_BUFFER_ROLE_OUTPUT);
      gate = buf (c.program, "gate", cases[k].gate, n + pad, AMK_BUFFER_ROLE_INPUT);
      up = buf (c.program, "up", cases[k].up, n + pad, AMK_BUFFER_ROLE_INPUT);
      case_input (&c, gate, vec_random (n + pad, cases[k].gate, 2));
      case_input (&c, up, vec_random (n + pad, cases[k].up, 0));
      gsrc = gate, usrc = up;
      if (cases[k].wait)
        {
          /* the last two queues copy gate and up tile by tile, each signalling its own
           * counter; the SILU_MUL of tile t waits until both reach t + 1 */
          gsrc = buf (c.program, "gate copy", cases[k].gate, n + pad, AMK_BUFFER_ROLE_SCRATCH);
          usrc = buf (c.program, "up copy", cases[k].up, n + pad, AMK_BUFFER_ROLE_SCRATCH);
          counter = amk_program_add_counter (c.program, "gate tiles copied");
          counter2 = amk_program_add_counter (c.program, "up tiles copied");
        }
      for (guint k0 = cases[k].start; k0 < n; k0 += cases[k].tile, t++)
        {
          const guint cnt = MIN (cases[k].tile, n - k0);
          gint i;
          if (cases[k].wait)
            {
              gint a = add_ins (c.program, max_queues - 1, AMK_OPCODE_COPY, (gint[]) { gsrc, gate }, 2,
                                "dst_offset", (gint) k0, "src_offset", (gint) k0, "count", (gint) cnt, NULL);
              gint b = add_ins (c.program, max_queues - 2, AMK_OPCODE_COPY, (gint[]) { usrc, up }, 2,
                                "dst_offset", (gint) k0, "src_offset", (gint) k0, "count", (gint) cnt, NULL);
              signal_on (c.program, a, counter);
              signal_on (c.program, b, counter2);
            }
          i = add_ins (c.program, t % (max_queues - 2), AMK_OPCODE_SILU_MUL, (gint[]) { out, gsrc, usrc }, 3,
                       "offset", (gint) k0, "count", (gint) cnt, NULL);
          if (cases[k].wait)
            {
              wait_on (c.program, i, counter, t + 1);
              wait_on (c.program, i, counter2, t + 1);
            }
        }
      case_output (&c, out, cases[k].out, cases[k].start, n, FALSE);
      c.tol = cases[k].out == F32 && cases[k].gate == F32 && cases[k].up == F32 ? 1e-5 : 1e-2;
      label = g_strdup_printf ("SILU_MUL out=%s gate=%s up=%s n=%u from %u, tiles of %u (%u)%s",
                               dt_name (cases[k].out), dt_name (cases[k].gate),
                               dt_name (cases[k].up), n, cases[k].start, cases[k].tile, t,
                               cases[k].wait ? " waits" : "");
      c.label = label;
      if (!run_case (&c, max_threads))
        failed++;
      case_clear (&c);
    }
  g_test_message ("%s silu_mul: %u of %u cases failed", failed ? "FAIL" : "PASS", failed,
                  (guint) G_N_ELEMENTS (cases));
  g_assert_cmpuint (failed, ==, 0);
}

/* ---- ARGMAX, then EMBED of the token it found ------------------------------------------- */

/* Logits with a unique maximum at `at` (many ties below it: bf16 has few values), and
 * NaN sprinkled in when asked (NaN counts as the smallest). */
static GBytes *
logits (gsize n, AmkDType dtype, gsize at, gboolean nans)
{
  g_autoptr(GBytes) r = vec_random (n, dtype, 2);
  gsize size;
  guint8 *d = g_bytes_unref_to_data (g_steal_pointer (&r), &size);

  store_f32 (d, dtype, at, 64.0f);
  if (nans)
    for (gsize i = 0; i < n; i += 1 + (gsize) g_test_rand_int_range (0, 50))
      if (i != at)
        store_f32 (d, dtype, i, NAN);
  return g_bytes_new_take (d, size);
}

typedef struct {
  AmkDType x;
  guint    vocab, tile;
  gboolean nans;
  AmkDType table, out; /* EMBED of the chosen token, columns col .. col + count of row */
  guint    row, col, count, pieces;
} ArgmaxCase;

static gboolean
run_argmax_case (const ArgmaxCase *ac, guint max_threads, guint queues)
{
  VecCase c = { 0 };
  g_autofree char *label = NULL;
  const guint tiles = (ac->vocab + ac->tile - 1) / ac->tile, pad = 3;
  const guint at = (guint) g_test_rand_int_range (0, (gint32) ac->vocab);
  gint x, val, idx, tok, table, out, done, found;
  gint fin;
  gboolean ok;

  c.program = amk_program_new (queues);
  x = buf (c.program, "logits", ac->x, ac->vocab, AMK_BUFFER_ROLE_INPUT);
  val = buf (c.program, "val", AMK_DTYPE_F32, tiles + pad, AMK_BUFFER_ROLE_OUTPUT);
  idx = buf (c.program, "idx", AMK_DTYPE_I32, tiles + pad, AMK_BUFFER_ROLE_OUTPUT);
  tok = buf (c.program, "token", AMK_DTYPE_I32, 4, AMK_BUFFER_ROLE_OUTPUT);
  table = buf (c.program, "table", ac->table, (gint64) ac->vocab * ac->row, AMK_BUFFER_ROLE_CONSTANT);
  out = buf (c.program, "embedding", ac->out, ac->row, AMK_BUFFER_ROLE_OUTPUT);
  set_data (c.program, table, vec_random ((gsize) ac->vocab * ac->row, ac->table, 0));
  done = amk_program_add_counter (c.program, "tiles done");
  found = amk_program_add_counter (c.program, "token found");
  case_input (&c, x, logits (ac->vocab, ac->x, at, ac->nans));

  for (guint t = 0; t < tiles; t++)
    {
      const guint k0 = t * ac->tile;
      gint i = add_ins (c.program, (t + 1) % queues, AMK_OPCODE_ARGMAX_PARTIAL, (gint[]) { val, idx, x }, 3,
                        "offset", (gint) k0, "count", (gint) MIN (ac->tile, ac->vocab - k0), "slot", (gint) t,
                        NULL);
      signal_on (c.program, i, done);
    }
  fin = add_ins (c.program, 0, AMK_OPCODE_ARGMAX_FINAL, (gint[]) { tok, val, idx }, 3,
                 "n_partials", (gint) tiles, "out_index", 2, NULL);
  wait_on (c.program, fin, done, tiles);
  signal_on (c.program, fin, found);
  /* the next step's embedding, in pieces over other queues, once the token is there */
  for (guint k = 0, c0 = ac->col; c0 < ac->col + ac->count; k++)
    {
      const guint piece = (ac->count + ac->pieces - 1) / ac->pieces;
      const guint cnt = MIN (piece, ac->col + ac->count - c0);
      gint i = add_ins (c.program, (k * 7 + 3) % queues, AMK_OPCODE_EMBED, (gint[]) { out, table, tok }, 3,
                        "token_index", 2, "col0", (gint) c0, "n_cols", (gint) cnt, "dim", (gint) ac->row,
                        NULL);
      wait_on (c.program, i, found, 1);
      c0 += cnt;
    }
  case_output (&c, val, AMK_DTYPE_F32, 0, tiles, TRUE);
  case_output (&c, idx, AMK_DTYPE_I32, 0, tiles, TRUE);
  case_output (&c, tok, AMK_DTYPE_I32, 2, 3, TRUE);
  /* the same dtype is a bit copy; a conversion rounds the same way on both sides */
  case_output (&c, out, ac->out, ac->col, ac->col + ac->count, TRUE);
  c.tol = 0.0;
  label = g_strdup_printf ("ARGMAX x=%s vocab=%u tiles of %u (%u)%s, maximum at %u; EMBED %s -> %s row %u cols %u..%u in %u pieces",
                           dt_name (ac->x), ac->vocab, ac->tile, tiles, ac->nans ? " NaNs" : "", at,
                           dt_name (ac->table), dt_name (ac->out), ac->row, ac->col,
                           ac->col + ac->count, ac->pieces);
  c.label = label;
  ok = run_case (&c, max_threads);
  case_clear (&c);
  return ok;
}

static void
test_argmax_embed (void)
{
  const AmkDType F32 = AMK_DTYPE_F32, BF16 = AMK_DTYPE_BF16, F16 = AMK_DTYPE_F16;
  const ArgmaxCase cases[] = {
    /* x   vocab    tile    nans   table out   row   col count pieces */
    { BF16, 128256, 1024,   FALSE, BF16, BF16, 128,  0,  128,  4 },  /* Llama-3's vocabulary */
    { F32,  151936, 1187,   TRUE,  BF16, F32,  96,   5,  90,   3 },  /* Qwen's, odd tiles, NaN */
    { BF16, 1000003, 1000003, FALSE, F16, BF16, 8,   1,  7,    1 },  /* one tile of ~1M */
    { F32,  1000,   7,      TRUE,  F32,  F32,  2304, 0,  2304, 8 },  /* hidden 2304 */
    { BF16, 50000,  50000,  TRUE,  F16,  F32,  256,  8,  240,  2 },
  };
  guint failed = 0, max_queues, max_threads;

  if (!need_gpu ())
    return;
  max_threads = probe_max_threads (&max_queues);
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    if (!run_argmax_case (&cases[i], max_threads, max_queues))
      failed++;
  g_test_message ("%s argmax/embed: %u of %u cases failed", failed ? "FAIL" : "PASS", failed,
                  (guint) G_N_ELEMENTS (cases));
  g_assert_cmpuint (failed, ==, 0);
}

/* ---- EMBED: a token outside the vocabulary aborts with CHECK ----------------------------- */

static void
test_embed_bad_token (void)
{
  const gint32 bad[] = { 37, -1, G_MAXINT32 };

  if (!need_gpu ())
    return;

  for (guint k = 0; k < G_N_ELEMENTS (bad); k++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
      g_autoptr(AmkProgram) p = amk_program_new (8);
      g_autoptr(AmkAbortRecord) record = NULL;
      g_autoptr(GBytes) good = NULL, got = NULL, want_row = NULL;
      gint32 t;
      gint out, table, tokens, i;

      out = buf (p, "out", AMK_DTYPE_F32, 64, AMK_BUFFER_ROLE_OUTPUT);
      table = buf (p, "table", AMK_DTYPE_F32, 37 * 64, AMK_BUFFER_ROLE_CONSTANT);
      tokens = buf (p, "tokens", AMK_DTYPE_I32, 2, AMK_BUFFER_ROLE_INPUT);
      want_row = vec_random (37 * 64, AMK_DTYPE_F32, 0);
      set_data (p, table, g_bytes_ref (want_row));
      for (guint q = 0; q < 8; q++)
        add_ins (p, q, AMK_OPCODE_NOP, NULL, 0, NULL);
      i = add_ins (p, 5, AMK_OPCODE_EMBED, (gint[]) { out, table, tokens }, 3, "token_index", 1, "n_cols", 64,
                   "dim", 64, NULL);
      (void) i;
      g_assert_true (amk_launcher_load (launcher, p, &error));
      g_assert_no_error (error);

      t = bad[k];
      g_autoptr(GBytes) tb = g_bytes_new (((gint32[]) { 0, t }), 8);
      g_assert_true (amk_launcher_upload (launcher, tokens, tb, &error));
      g_assert_false (amk_launcher_launch (launcher, NULL, &error));
      g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
      g_clear_error (&error);
      record = amk_launcher_get_last_abort (launcher);
      g_assert_nonnull (record);
      g_test_message ("%s embed token %d: code %d detail %d queue %d instruction %d (want CHECK, detail %d, queue 5, instruction 1)",
                      record->code == AMK_ABORT_CODE_CHECK && record->detail == tokens ? "PASS" : "FAIL",
                      t, record->code, record->detail, record->queue, record->instruction, tokens);
      g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_CHECK);
      g_assert_cmpint (record->detail, ==, tokens);
      g_assert_cmpint (record->queue, ==, 5);
      g_assert_cmpint (record->instruction, ==, 1);

      /* the same launcher, a good token: the row arrives */
      good = g_bytes_new (((gint32[]) { 0, 36 }), 8);
      g_assert_true (amk_launcher_upload (launcher, tokens, good, &error));
      g_assert_true (amk_launcher_launch (launcher, NULL, &error));
      g_assert_no_error (error);
      g_assert_null (amk_launcher_get_last_abort (launcher));
      got = amk_launcher_download (launcher, out, &error);
      g_assert_no_error (error);
      g_assert_cmpmem (g_bytes_get_data (got, NULL), 64 * 4,
                       (const guint8 *) g_bytes_get_data (want_row, NULL) + 36 * 64 * 4, 64 * 4);
      g_test_message ("PASS embed: a good launch after the abort");
    }
}

/* ---- device-side checks of unverified images --------------------------------------------- */

static void
test_vector_checks (void)
{
  if (!need_gpu ())
    return;

  for (guint t = 0; t < 4; t++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
      g_autoptr(AmkProgram) p = amk_program_new (4);
      g_autoptr(AmkAbortRecord) record = NULL;
      gint f = buf (p, "f", AMK_DTYPE_F32, 256, AMK_BUFFER_ROLE_OUTPUT);
      gint g = buf (p, "g", AMK_DTYPE_F32, 256, AMK_BUFFER_ROLE_INPUT);
      gint i = buf (p, "i", AMK_DTYPE_I32, 16, AMK_BUFFER_ROLE_OUTPUT);
      gint want;
      const char *what;

      add_ins (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
      if (t == 0)
        {
          add_ins (p, 2, AMK_OPCODE_SILU_MUL, (gint[]) { f, f, g }, 3, "count", 64, NULL);
          want = f, what = "SILU_MUL out == gate";
        }
      else if (t == 1)
        {
          gint k = add_ins (p, 2, AMK_OPCODE_RMSNORM, (gint[]) { f, g, g }, 3, "n", 64, "vec0", 2,
                            "n_vecs", 3, NULL);
          set_float (p, k, "eps", 1e-5f);
          want = f, what = "RMSNORM vectors past the end";
        }
      else if (t == 2)
        {
          add_ins (p, 2, AMK_OPCODE_ARGMAX_PARTIAL, (gint[]) { f, g, g }, 3, "count", 8, NULL);
          want = g, what = "ARGMAX_PARTIAL idx is F32";
        }
      else
        {
          add_ins (p, 2, AMK_OPCODE_ARGMAX_FINAL, (gint[]) { i, g, i }, 3, "n_partials", 8, "out_index", 4,
                   NULL);
          want = i, what = "ARGMAX_FINAL out inside idx";
        }
      g_assert_false (amk_program_verify (p, NULL));
      g_assert_true (amk_launcher_load_unverified (launcher, p, &error));
      g_assert_false (amk_launcher_launch (launcher, NULL, &error));
      g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
      record = amk_launcher_get_last_abort (launcher);
      g_assert_nonnull (record);
      g_test_message ("%s vector check (%s): code %d detail %d queue %d instruction %d (want CHECK, detail %d)",
                      record->code == AMK_ABORT_CODE_CHECK && record->detail == want ? "PASS" : "FAIL",
                      what, record->code, record->detail, record->queue, record->instruction, want);
      g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_CHECK);
      g_assert_cmpint (record->detail, ==, want);
      g_assert_cmpint (record->queue, ==, 2);
      g_assert_cmpint (record->instruction, ==, 0);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/amk/gpu/vector/rmsnorm", test_rmsnorm);
  g_test_add_func ("/amk/gpu/vector/silu-mul", test_silu_mul);
  g_test_add_func ("/amk/gpu/vector/argmax-embed", test_argmax_embed);
  g_test_add_func ("/amk/gpu/vector/embed-bad-token", test_embed_bad_token);
  g_test_add_func ("/amk/gpu/vector/checks", test_vector_checks);

  return g_test_run ();
}
