/* test-gpu-attention.c: the attention ops (ROPE_KV, ATTN_DECODE, ATTN_REDUCE) on the GPU
 * against the CPU executor: random inputs, outputs poisoned first, each op alone, then whole
 * decode steps at context 1024 with Llama-3.2-1B shapes (32 query / 8 key-value heads of
 * 64, Llama-3 RoPE scaling) and Qwen3 shapes (16 / 8 of 128) spread over 132 queues with
 * counters, under several block sizes; the device-side position check. Tolerance,
 * norm-wise relative: 1e-5 with f32 caches, 1e-2 with bf16. Skips without a CUDA device.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <string.h>
#include "gpu-test-common.h"

#define N_QUEUES 132

static guint16
f32_to_bf16 (float f)
{
  guint32 u;
  memcpy (&u, &f, 4);
  return (guint16) ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* n random floats in [-range, range], stored as dtype (F32 or BF16). */
static GBytes *
random_floats (gsize n, AmkDType dtype, double range)
{
  gsize es = dtype == AMK_DTYPE_BF16 ? 2 : 4;
  guint8 *d = g_malloc (n * es);

  for (gsize i = 0; i < n; i++)
    {
      float f = (float) g_test_rand_double_range (-range, range);
      if (dtype == AMK_DTYPE_BF16)
        {
          guint16 h = f32_to_bf16 (f);
          memcpy (d + 2 * i, &h, 2);
        }
      else
        memcpy (d + 4 * i, &f, 4);
    }
  return g_bytes_new_take (d, n * es);
}

static GBytes *
int_bytes (gint32 v)
{
  return g_bytes_new (&v, 4);
}

static gint
add_buf (AmkProgram *p, const char *name, AmkDType dtype, gint64 n, AmkBufferRole role)
{
  g_autoptr(GError) error = NULL;
  gint b = amk_program_add_buffer (p, name, dtype, (gint64[]) { n }, 1, role, &error);
  g_assert_no_error (error);
  return b;
}

typedef struct {
  float theta, factor, low, high;
  gint old_ctx;
} Rope;

static const Rope LLAMA3 = { 500000.0f, 32.0f, 1.0f, 4.0f, 8192 };
static const Rope QWEN3 = { 1000000.0f, 0.0f, 0.0f, 0.0f, 0 };

static gint
add_rope (AmkProgram *p, guint queue, const gint *bufs, gint d, gint nq, gint nkv, gint ctx,
          gint first, gint count, const Rope *r)
{
  gint i = add_ins (p, queue, AMK_OPCODE_ROPE_KV, bufs, 6,
                    "head_dim", d, "n_q_heads", nq, "n_kv_heads", nkv, "max_ctx", ctx, "head0", first,
                    "n_heads", count, "original_context", r->old_ctx, NULL);
  set_float (p, i, "theta", r->theta);
  set_float (p, i, "factor", r->factor);
  set_float (p, i, "low_freq_factor", r->low);
  set_float (p, i, "high_freq_factor", r->high);
  return i;
}

/* ---- running a program on both sides --------------------------------------------------- */

typedef struct {
  gint    buffer;
  GBytes *data;
} Input;

/* Runs `p` on the CPU once and on the GPU at each block size (512 threads twice: without
 * dynamic shared memory and with the MATVEC ring's, which ATTN_DECODE's short path stages
 * V rows in), uploading `inputs` before
 * every run (ROPE_KV rotates q and k in place) and poison into every OUTPUT buffer; compares
 * every non-scratch float buffer norm-wise (I32 ones exactly). Returns FALSE on a mismatch,
 * after printing one PASS/FAIL line per block size. */
static gboolean
run_both (AmkProgram *p, const Input *inputs, guint n_inputs, double tol, const char *label)
{
  static const guint threads[] = { 512, 256, 96, 32, 512 };
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkCpuExecutor) cpu = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  guint n = amk_program_get_n_buffers (p);
  g_autoptr(GPtrArray) want = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  gboolean ok = TRUE;

  g_assert_true (amk_program_verify (p, &error));
  g_assert_no_error (error);
  cpu = amk_cpu_executor_new (p, &error);
  g_assert_no_error (error);
  launcher = amk_launcher_new (0);
  g_assert_true (amk_launcher_load (launcher, p, &error));
  g_assert_no_error (error);

  for (guint b = 0; b < n; b++)
    if (amk_program_get_buffer_role (p, b) == AMK_BUFFER_ROLE_OUTPUT)
      {
        g_autoptr(GBytes) z = poison (amk_program_get_buffer_size (p, b));
        g_assert_true (amk_cpu_executor_upload (cpu, b, z, &error));
      }
  for (guint i = 0; i < n_inputs; i++)
    g_assert_true (amk_cpu_executor_upload (cpu, inputs[i].buffer, inputs[i].data, &error));
  g_assert_true (amk_cpu_executor_run (cpu, &error));
  g_assert_no_error (error);
  for (guint b = 0; b < n; b++)
    g_ptr_array_add (want, amk_cpu_executor_download (cpu, b, &error));

  for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
    {
      double worst = 0.0;
      const char *worst_name = "-";

      const guint smem = t == G_N_ELEMENTS (threads) - 1 ? AMK_LAUNCHER_MATVEC_SHARED_MEMORY : 0;

      amk_launcher_set_threads_per_block (launcher, threads[t]);
      amk_launcher_set_dynamic_shared_memory (launcher, smem);
      for (guint b = 0; b < n; b++)
        if (amk_program_get_buffer_role (p, b) == AMK_BUFFER_ROLE_OUTPUT)
          {
            g_autoptr(GBytes) z = poison (amk_program_get_buffer_size (p, b));
            g_assert_true (amk_launcher_upload (launcher, b, z, &error));
          }
      for (guint i = 0; i < n_inputs; i++)
        g_assert_true (amk_launcher_upload (launcher, inputs[i].buffer, inputs[i].data, &error));
      g_assert_no_error (error);
      if (!amk_launcher_launch (launcher, NULL, &error))
        {
          g_test_message ("FAIL attention %s | threads=%u smem=%u: launch failed: %s", label, threads[t], smem,
                          error->message);
          g_clear_error (&error);
          ok = FALSE;
          continue;
        }
      for (guint b = 0; b < n; b++)
        {
          AmkDType dt = amk_program_get_buffer_dtype (p, b);
          g_autoptr(GBytes) got = NULL;
          const guint8 *g, *e;
          gsize count;
          double num = 0.0, den = 0.0, err;

          if (amk_program_get_buffer_role (p, b) == AMK_BUFFER_ROLE_SCRATCH)
            continue;
          got = amk_launcher_download (launcher, b, &error);
          g_assert_no_error (error);
          if (dt == AMK_DTYPE_I32)
            {
              if (!g_bytes_equal (got, g_ptr_array_index (want, b)))
                err = INFINITY;
              else
                err = 0.0;
            }
          else
            {
              g = g_bytes_get_data (got, NULL);
              e = g_bytes_get_data (g_ptr_array_index (want, b), NULL);
              count = amk_program_get_buffer_n_elements (p, b);
              for (gsize i = 0; i < count; i++)
                {
                  double x = load_float (g, dt, i), y = load_float (e, dt, i);
                  /* -inf (an empty split's m) on both sides counts as equal */
                  if (isinf (y) && x == y)
                    continue;
                  num += (x - y) * (x - y);
                  den += isfinite (y) ? y * y : 0.0;
                }
              err = isnan (num) ? INFINITY : den > 0.0 ? sqrt (num / den) : sqrt (num);
            }
          if (!(err <= worst))
            {
              worst = err;
              worst_name = amk_program_get_buffer_name (p, b);
            }
        }
      if (worst <= tol)
        g_test_message ("PASS attention %s | threads=%u smem=%u: worst rel err %.3g (%s, tol %.0e)",
                        label, threads[t], smem, worst, worst_name, tol);
      else
        {
          g_test_message ("FAIL attention %s | threads=%u smem=%u: rel err %.3g in “%s” (tol %.0e)",
                          label, threads[t], smem, worst, worst_name, tol);
          ok = FALSE;
        }
    }
  return ok;
}

/* ---- the decode step ------------------------------------------------------------------- */

typedef struct {
  gint nq, nkv, d, ctx, splits;
  const Rope *rope;
  AmkDType cache;
  gint pos;
  gboolean partial_out; /* the partial results as an OUTPUT (compared) or SCRATCH */
  gint min_split;       /* ATTN_DECODE's i9: the fewest positions per split (0: none) */
  gboolean pos_written; /* a COPY writes the position during the launch (a stale one before) */
} Step;

/* ROPE_KV in 4 instructions, ATTN_DECODE one instruction per (kv head, split) dealt over
 * the 132 queues behind the rotation, ATTN_REDUCE in 8 instructions behind every split.
 * With pos_written, a COPY on its own queue writes the position first and ROPE_KV and
 * ATTN_DECODE wait for it: the position buffer is then not CONSTANT for the launch, so
 * the device must read it after the waits (not the stale value before them).
 * With ops = 1, 2 or 4 only that op (with random inputs in place of its producers); with
 * 8 the splits merge themselves (ATTN_DECODE's fused merge, an arrival counter per key/
 * value head) instead of ATTN_REDUCE. */
static gboolean
run_step (const Step *s, guint ops)
{
  g_autoptr(AmkProgram) p = amk_program_new (N_QUEUES);
  const gint nq = s->nq, nkv = s->nkv, d = s->d, ctx = s->ctx, S = s->splits;
  const gint64 n_partial = (gint64) nq * S * (d + 2);
  gint q, k, v, kc, vc, pos, partial, out;
  gint rotated = amk_program_add_counter (p, "rotated");
  gint positioned = amk_program_add_counter (p, "positioned");
  gint decoded = amk_program_add_counter (p, "decoded");
  guint n_rope = 0, n_dec = 0;
  Input in[8];
  guint n_in = 0;
  gboolean ok;
  g_autofree char *label = NULL;
  const gboolean do_rope = ops & 1, do_decode = ops & 2, do_reduce = ops & 4, do_merge = ops & 8;

  q = add_buf (p, "q", AMK_DTYPE_F32, (gint64) nq * d, AMK_BUFFER_ROLE_INPUT);
  k = add_buf (p, "k", AMK_DTYPE_F32, (gint64) nkv * d, AMK_BUFFER_ROLE_INPUT);
  v = add_buf (p, "v", AMK_DTYPE_F32, (gint64) nkv * d, AMK_BUFFER_ROLE_INPUT);
  kc = add_buf (p, "k cache", s->cache, (gint64) ctx * nkv * d, AMK_BUFFER_ROLE_INPUT);
  vc = add_buf (p, "v cache", s->cache, (gint64) ctx * nkv * d, AMK_BUFFER_ROLE_INPUT);
  pos = add_buf (p, "pos", AMK_DTYPE_I32, 1, AMK_BUFFER_ROLE_INPUT);
  partial = add_buf (p, "partial", AMK_DTYPE_F32, n_partial,
                     s->partial_out || !do_decode ? (do_decode ? AMK_BUFFER_ROLE_OUTPUT : AMK_BUFFER_ROLE_INPUT)
                                                  : AMK_BUFFER_ROLE_SCRATCH);
  out = add_buf (p, "out", AMK_DTYPE_F32, (gint64) nq * d, AMK_BUFFER_ROLE_OUTPUT);

  in[n_in++] = (Input) { q, random_floats ((gsize) nq * d, AMK_DTYPE_F32, 2.0) };
  in[n_in++] = (Input) { k, random_floats ((gsize) nkv * d, AMK_DTYPE_F32, 2.0) };
  in[n_in++] = (Input) { v, random_floats ((gsize) nkv * d, AMK_DTYPE_F32, 2.0) };
  in[n_in++] = (Input) { kc, random_floats ((gsize) ctx * nkv * d, s->cache, 2.0) };
  in[n_in++] = (Input) { vc, random_floats ((gsize) ctx * nkv * d, s->cache, 2.0) };
  if (s->pos_written)
    {
      gint src = add_buf (p, "new pos", AMK_DTYPE_I32, 1, AMK_BUFFER_ROLE_INPUT);
      gint c = add_ins (p, 11, AMK_OPCODE_COPY, (gint[]) { pos, src }, 2, "count", 1, NULL);
      signal_on (p, c, positioned);
      in[n_in++] = (Input) { src, int_bytes (s->pos) };
      in[n_in++] = (Input) { pos, int_bytes ((s->pos + 1 + g_test_rand_int_range (0, ctx - 1)) % ctx) };
    }
  else
    in[n_in++] = (Input) { pos, int_bytes (s->pos) };
  if (!do_decode)
    {
      /* random partial results: acc, m in [-4, 4] (-inf for the splits past pos), l > 0 */
      float *pr = g_new (float, n_partial);
      for (gint h = 0; h < nq; h++)
        for (gint sp = 0; sp < S; sp++)
          {
            float *e = pr + ((gsize) h * S + sp) * (d + 2);
            gboolean empty = sp > 0 && g_test_rand_int_range (0, 4) == 0;
            for (gint c = 0; c < d; c++)
              e[c] = empty ? 0.0f : (float) g_test_rand_double_range (-3.0, 3.0);
            e[d] = empty ? -INFINITY : (float) g_test_rand_double_range (-4.0, 4.0);
            e[d + 1] = empty ? 0.0f : (float) g_test_rand_double_range (1.0, 20.0);
          }
      in[n_in++] = (Input) { partial, g_bytes_new_take (pr, n_partial * 4) };
    }

  if (do_rope)
    for (gint i = 0; i < 4; i++)
      {
        gint first = (nq + nkv) * i / 4, last = (nq + nkv) * (i + 1) / 4;
        gint r = add_rope (p, (guint) (7 * i) % N_QUEUES, (gint[]) { q, k, v, kc, vc, pos }, d, nq, nkv, ctx,
                           first, last - first, s->rope);
        if (s->pos_written)
          wait_on (p, r, positioned, 1);
        signal_on (p, r, rotated);
        n_rope++;
      }
  if (do_decode)
    for (gint g = 0; g < nkv; g++)
      for (gint sp = 0, arrival = do_merge ? amk_program_add_counter (p, NULL) : 0; sp < S; sp++)
        {
          gint i = add_ins (p, (guint) (g * S + sp + 3) % N_QUEUES, AMK_OPCODE_ATTN_DECODE,
                            (gint[]) { partial, q, kc, vc, pos, out }, do_merge ? 6 : 5,
                            "head_dim", d, "n_q_heads", nq, "n_kv_heads", nkv, "max_ctx", ctx, "kv_head", g,
                            "split", sp, "n_splits", S, "arrival_counter", arrival, "min_split", s->min_split,
                            NULL);
          set_float (p, i, "scale", 1.0f / sqrtf ((float) d));
          if (n_rope > 0)
            wait_on (p, i, rotated, n_rope);
          else if (s->pos_written)
            wait_on (p, i, positioned, 1);
          signal_on (p, i, decoded);
          n_dec++;
        }
  if (do_reduce)
    for (gint i = 0; i < 8; i++)
      {
        gint first = nq * i / 8, last = nq * (i + 1) / 8;
        gint r = add_ins (p, (guint) (N_QUEUES - 1 - 5 * i) % N_QUEUES, AMK_OPCODE_ATTN_REDUCE,
                          (gint[]) { out, partial }, 2, "head_dim", d, "n_q_heads", nq, "n_splits", S,
                          "head0", first, "n_heads", last - first, NULL);
        if (n_dec > 0)
          wait_on (p, r, decoded, n_dec);
      }

  label = g_strdup_printf ("%s%s%s%s q=%d kv=%d d=%d ctx=%d splits=%d (min %d) pos=%d%s cache=%s rope=%s",
                           do_rope ? "ROPE_KV " : "", do_decode ? "ATTN_DECODE " : "",
                           do_reduce ? "ATTN_REDUCE" : "", do_merge ? "(merged by the splits)" : "",
                           nq, nkv, d, ctx, S, s->min_split, s->pos,
                           s->pos_written ? " (written in the launch)" : "",
                           s->cache == AMK_DTYPE_BF16 ? "bf16" : "f32",
                           s->rope->factor > 0 ? "llama3" : "plain");
  ok = run_both (p, in, n_in, s->cache == AMK_DTYPE_BF16 ? 1e-2 : 1e-5, label);
  for (guint i = 0; i < n_in; i++)
    g_bytes_unref (in[i].data);
  return ok;
}

static void
test_each_op (void)
{
  const AmkDType caches[] = { AMK_DTYPE_F32, AMK_DTYPE_BF16 };
  guint failed = 0, total = 0;

  if (!need_gpu ())
    return;
  for (guint c = 0; c < G_N_ELEMENTS (caches); c++)
    for (guint op = 1; op <= 4; op <<= 1)
      {
        const Step steps[] = {
          { 32, 8, 64, 1024, 16, &LLAMA3, caches[c], g_test_rand_int_range (0, 1024), TRUE },
          { 16, 8, 128, 1024, 9, &QWEN3, caches[c], 1023, TRUE },
        };
        for (guint i = 0; i < G_N_ELEMENTS (steps); i++, total++)
          if (!run_step (&steps[i], op))
            failed++;
      }
  g_test_message ("%s attention ops alone: %u of %u cases failed", failed ? "FAIL" : "PASS", failed, total);
  g_assert_cmpuint (failed, ==, 0);
}

static void
test_decode_step (void)
{
  const AmkDType caches[] = { AMK_DTYPE_F32, AMK_DTYPE_BF16 };
  const gint positions[] = { 0, 1, 37, 1023, -1 /* random */ };
  guint failed = 0, total = 0;

  if (!need_gpu ())
    return;
  for (guint c = 0; c < G_N_ELEMENTS (caches); c++)
    for (guint i = 0; i < G_N_ELEMENTS (positions); i++)
      {
        gint pos = positions[i] >= 0 ? positions[i] : g_test_rand_int_range (2, 1023);
        const Step steps[] = {
          /* Llama-3.2-1B: 8 kv heads x 16 splits = 128 instructions */
          { 32, 8, 64, 1024, 16, &LLAMA3, caches[c], pos, i % 2 == 0 },
          /* Qwen3: 16 / 8 heads of 128 */
          { 16, 8, 128, 1024, 16, &QWEN3, caches[c], pos, i % 2 == 1 },
          /* few splits: long splits per block */
          { 32, 8, 64, 1024, 2, &LLAMA3, caches[c], pos, FALSE },
          /* the compiler's minimum of 128 positions per split: one split (writing the
           * result itself when merging) up to position 127, then the first ones only */
          { 32, 8, 64, 1024, 16, &LLAMA3, caches[c], pos, i % 2 == 1, 128 },
          { 16, 8, 128, 1024, 16, &QWEN3, caches[c], pos, i % 2 == 0, 128 },
          /* SmolLM2: 9 / 3 heads of 64 */
          { 9, 3, 64, 1024, 16, &LLAMA3, caches[c], pos, TRUE, 128 },
          /* the position written during the launch: read after the waits */
          { 32, 8, 64, 1024, 16, &LLAMA3, caches[c], pos, i % 2 == 0, 128, TRUE },
          { 16, 8, 128, 1024, 9, &QWEN3, caches[c], pos, i % 2 == 1, 0, TRUE },
        };
        for (guint s = 0; s < G_N_ELEMENTS (steps); s++, total += 2)
          {
            if (!run_step (&steps[s], 7))
              failed++;
            if (!run_step (&steps[s], 1 | 2 | 8))
              failed++;
          }
      }
  g_test_message ("%s decode steps: %u of %u cases failed", failed ? "FAIL" : "PASS", failed, total);
  g_assert_cmpuint (failed, ==, 0);
}

/* Shapes off the beaten path: head dims that do not fill 16-byte loads (36, 6, 80), more
 * query heads per kv head than one pass takes (8, 5), one kv head, many splits. */
static void
test_odd_shapes (void)
{
  const Step steps[] = {
    { 8, 1, 80, 300, 3, &QWEN3, AMK_DTYPE_BF16, 299, TRUE },
    { 8, 2, 36, 200, 4, &LLAMA3, AMK_DTYPE_BF16, 150, TRUE },
    { 6, 3, 6, 100, 5, &QWEN3, AMK_DTYPE_F32, 57, TRUE },
    { 10, 2, 256, 64, 2, &QWEN3, AMK_DTYPE_F32, 63, TRUE },
    { 16, 2, 256, 64, 3, &LLAMA3, AMK_DTYPE_BF16, 40, TRUE },
    { 4, 4, 96, 2048, 40, &LLAMA3, AMK_DTYPE_F32, 2047, TRUE },
    { 4, 4, 16, 2048, 64, &QWEN3, AMK_DTYPE_BF16, 5, TRUE }, /* most splits empty */
    { 8, 4, 256, 600, 6, &LLAMA3, AMK_DTYPE_F32, 599, TRUE, 50 },   /* two 16-byte batches of K */
    { 8, 2, 32, 600, 6, &QWEN3, AMK_DTYPE_BF16, 260, TRUE, 100 },  /* four chunks per row */
    { 12, 4, 64, 500, 7, &LLAMA3, AMK_DTYPE_BF16, 499, TRUE, 500 }, /* one split, too long for the lanes */
  };
  guint failed = 0;

  if (!need_gpu ())
    return;
  for (guint s = 0; s < G_N_ELEMENTS (steps); s++)
    {
      if (!run_step (&steps[s], 7))
        failed++;
      if (!run_step (&steps[s], 1 | 2 | 8))
        failed++;
    }
  g_test_message ("%s odd shapes: %u of %u cases failed", failed ? "FAIL" : "PASS", failed,
                  2 * (guint) G_N_ELEMENTS (steps));
  g_assert_cmpuint (failed, ==, 0);
}

static void
check_good_launch (AmkLauncher *launcher)
{
  g_autoptr(AmkProgram) good = amk_program_new (N_QUEUES);
  g_autoptr(GError) error = NULL;

  for (guint q = 0; q < N_QUEUES; q++)
    add_ins (good, q, AMK_OPCODE_NOP, NULL, 0, NULL);
  g_assert_true (amk_launcher_load (launcher, good, &error));
  g_assert_true (amk_launcher_launch (launcher, NULL, &error));
  g_assert_no_error (error);
  g_assert_null (amk_launcher_get_last_abort (launcher));
}

/* A position outside [0, max_ctx) aborts ROPE_KV and ATTN_DECODE with CHECK and the
 * position buffer's index, also behind a wait; the launcher stays usable. */
static void
test_position_check (void)
{
  const gint bad[] = { -1, 64, G_MAXINT32 };

  if (!need_gpu ())
    return;
  for (guint op = 0; op < 2; op++)
    for (guint b = 0; b < G_N_ELEMENTS (bad); b++)
      {
        g_autoptr(GError) error = NULL;
        g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
        g_autoptr(AmkProgram) p = amk_program_new (8);
        g_autoptr(AmkAbortRecord) record = NULL;
        g_autoptr(GBytes) posb = int_bytes (bad[b]);
        gint q = add_buf (p, "q", AMK_DTYPE_F32, 4 * 64, AMK_BUFFER_ROLE_INPUT);
        gint k = add_buf (p, "k", AMK_DTYPE_F32, 2 * 64, AMK_BUFFER_ROLE_INPUT);
        gint v = add_buf (p, "v", AMK_DTYPE_F32, 2 * 64, AMK_BUFFER_ROLE_INPUT);
        gint kc = add_buf (p, "kc", AMK_DTYPE_BF16, 64 * 2 * 64, AMK_BUFFER_ROLE_INPUT);
        gint vc = add_buf (p, "vc", AMK_DTYPE_BF16, 64 * 2 * 64, AMK_BUFFER_ROLE_INPUT);
        gint pos = add_buf (p, "pos", AMK_DTYPE_I32, 1, AMK_BUFFER_ROLE_INPUT);
        gint part = add_buf (p, "partial", AMK_DTYPE_F32, 4 * 66, AMK_BUFFER_ROLE_OUTPUT);
        gint c = amk_program_add_counter (p, "go");
        gint i;

        i = add_ins (p, 0, AMK_OPCODE_NOP, NULL, 0, NULL);
        signal_on (p, i, c);
        add_ins (p, 5, AMK_OPCODE_NOP, NULL, 0, NULL);
        if (op == 0)
          i = add_rope (p, 5, (gint[]) { q, k, v, kc, vc, pos }, 64, 4, 2, 64, 0, 6, &LLAMA3);
        else
          {
            i = add_ins (p, 5, AMK_OPCODE_ATTN_DECODE, (gint[]) { part, q, kc, vc, pos }, 5,
                         "head_dim", 64, "n_q_heads", 4, "n_kv_heads", 2, "max_ctx", 64, "kv_head", 1,
                         "n_splits", 1, NULL);
            set_float (p, i, "scale", 0.125f);
          }
        wait_on (p, i, c, 1);
        g_assert_true (amk_launcher_load (launcher, p, &error));
        g_assert_true (amk_launcher_upload (launcher, pos, posb, &error));
        g_assert_false (amk_launcher_launch (launcher, NULL, &error));
        g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
        record = amk_launcher_get_last_abort (launcher);
        g_assert_nonnull (record);
        g_test_message ("%s %s with pos %d: code %d detail %d queue %d instruction %d (want CHECK, detail %d)",
                        record->code == AMK_ABORT_CODE_CHECK && record->detail == pos ? "PASS" : "FAIL",
                        op == 0 ? "ROPE_KV" : "ATTN_DECODE", bad[b], record->code, record->detail,
                        record->queue, record->instruction, pos);
        g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_CHECK);
        g_assert_cmpint (record->detail, ==, pos);
        g_assert_cmpint (record->queue, ==, 5);
        g_assert_cmpint (record->instruction, ==, 1);
        check_good_launch (launcher);
      }
}

/* ATTN_DECODE's fused merge names an arrival counter the program does not have (an
 * unverified image): BAD_INDEX with the counter's index, before any work; the launcher
 * stays usable. */
static void
test_merge_counter_check (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) launcher = NULL;
  g_autoptr(AmkProgram) p = NULL;
  g_autoptr(AmkAbortRecord) record = NULL;
  g_autoptr(GBytes) posb = NULL;
  gint q, kc, vc, pos, part, out, i;

  if (!need_gpu ())
    return;
  launcher = amk_launcher_new (0);
  p = amk_program_new (8);
  posb = int_bytes (3);
  q = add_buf (p, "q", AMK_DTYPE_F32, 4 * 64, AMK_BUFFER_ROLE_INPUT);
  kc = add_buf (p, "kc", AMK_DTYPE_BF16, 64 * 2 * 64, AMK_BUFFER_ROLE_INPUT);
  vc = add_buf (p, "vc", AMK_DTYPE_BF16, 64 * 2 * 64, AMK_BUFFER_ROLE_INPUT);
  pos = add_buf (p, "pos", AMK_DTYPE_I32, 1, AMK_BUFFER_ROLE_INPUT);
  part = add_buf (p, "partial", AMK_DTYPE_F32, 4 * 66, AMK_BUFFER_ROLE_OUTPUT);
  out = add_buf (p, "out", AMK_DTYPE_F32, 4 * 64, AMK_BUFFER_ROLE_OUTPUT);
  amk_program_add_counter (p, "only");

  add_ins (p, 3, AMK_OPCODE_NOP, NULL, 0, NULL);
  i = add_ins (p, 3, AMK_OPCODE_ATTN_DECODE, (gint[]) { part, q, kc, vc, pos, out }, 6,
               "head_dim", 64, "n_q_heads", 4, "n_kv_heads", 2, "max_ctx", 64, "kv_head", 1, "n_splits", 1,
               "arrival_counter", 77, NULL);
  set_float (p, i, "scale", 0.125f);
  g_assert_false (amk_program_verify (p, NULL));
  g_assert_true (amk_launcher_load_unverified (launcher, p, &error));
  g_assert_true (amk_launcher_upload (launcher, pos, posb, &error));
  g_assert_false (amk_launcher_launch (launcher, NULL, &error));
  g_assert_error (error, AMK_LAUNCH_ERROR, AMK_LAUNCH_ERROR_ABORTED);
  record = amk_launcher_get_last_abort (launcher);
  g_assert_nonnull (record);
  g_test_message ("%s ATTN_DECODE merging on counter 77 of 1: code %d detail %d queue %d instruction %d (want BAD_INDEX, detail 77)",
                  record->code == AMK_ABORT_CODE_BAD_INDEX && record->detail == 77 ? "PASS" : "FAIL",
                  record->code, record->detail, record->queue, record->instruction);
  g_assert_cmpint (record->code, ==, AMK_ABORT_CODE_BAD_INDEX);
  g_assert_cmpint (record->detail, ==, 77);
  g_assert_cmpint (record->queue, ==, 3);
  g_assert_cmpint (record->instruction, ==, 1);
  check_good_launch (launcher);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/amk/gpu/attention/each-op", test_each_op);
  g_test_add_func ("/amk/gpu/attention/decode-step", test_decode_step);
  g_test_add_func ("/amk/gpu/attention/odd-shapes", test_odd_shapes);
  g_test_add_func ("/amk/gpu/attention/position-check", test_position_check);
  g_test_add_func ("/amk/gpu/attention/merge-counter-check", test_merge_counter_check);

  return g_test_run ();
}
