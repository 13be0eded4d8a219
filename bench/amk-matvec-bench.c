/* amk-matvec-bench.c: MATVEC bandwidth of the megakernel on Llama-sized shapes.
 *
 * For each shape (bf16 W of rows x K, marked CONSTANT; f32 x and y) and each candidate
 * tile size: one MATVEC instruction per tile, tile i on queue i mod 132; a sample of rows
 * is checked against a host fp64 computation (PASS/FAIL), then 20 launches are timed
 * (median host wall clock of amk_launcher_launch). Printed: bytes moved (W + x + y), time,
 * TB/s and the ratio to the 4.16 TB/s device-to-device copy bandwidth measured on the
 * H200 (DESIGN.md section 10; bench/torch_matvec.py measures it again in the same run).
 * Besides the host wall clock, two fairer kernel figures: the wall clock minus that of a
 * launch of 132 NOP queues (launch overhead), and the device span of a traced launch
 * (the median of five).
 *
 * With --splits S every tile is cut into S split-K slices of its columns (on S queues),
 * which add onto y (then its own residual, zeroed before the checked launch).
 *
 * Usage: amk-matvec-bench [--repeats N] [--threads T] [--smem BYTES] [--shape ROWSxK]
 *                         [--tile ROWS] [--splits S]
 * Defaults: 20 repeats, the kernel's maximum threads per block, AMK_MATVEC_SMEM_BYTES.
 * Exit status 1 when a check fails, 77 without a CUDA device.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench-common.h"
#include "amk-abi.h" /* AMK_MATVEC_SMEM_BYTES, AMK_MATVEC_RING_BYTES_PER_THREAD */

#define N_QUEUES   132
#define COPY_TBPS  4.16
#define N_SAMPLES  96

static int repeats = 20;
static guint splits = 1;

#define SPAN_SAMPLES 5

/* First start to last end of one traced launch, in microseconds. */
static double
device_span_once (AmkLauncher *launcher)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *json = NULL;
  g_auto(GStrv) lines = NULL;
  double t0 = G_MAXDOUBLE, t1 = 0;

  amk_launcher_set_trace (launcher, TRUE);
  if (!amk_launcher_launch (launcher, NULL, &error) ||
      (json = amk_launcher_get_trace_json (launcher, &error)) == NULL)
    g_error ("traced launch failed: %s", error->message);
  amk_launcher_set_trace (launcher, FALSE);
  lines = g_strsplit (json, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *ts = strstr (lines[i], "\"ts\": ");
      double t, d;
      if (ts == NULL || sscanf (ts, "\"ts\": %lf, \"dur\": %lf", &t, &d) != 2)
        continue;
      t0 = MIN (t0, t);
      t1 = MAX (t1, t + d);
    }
  return t1 > t0 ? t1 - t0 : 0;
}

static int
compare_doubles (gconstpointer a, gconstpointer b)
{
  const double x = *(const double *) a, y = *(const double *) b;

  return x < y ? -1 : x > y;
}

/* The median device span of SPAN_SAMPLES traced launches: one sample moved by 10 %
 * between runs of the same build. */
static double
device_span (AmkLauncher *launcher)
{
  double spans[SPAN_SAMPLES];

  for (guint i = 0; i < SPAN_SAMPLES; i++)
    spans[i] = device_span_once (launcher);
  qsort (spans, SPAN_SAMPLES, sizeof (double), compare_doubles);
  return spans[SPAN_SAMPLES / 2];
}

/* xorshift64*: fast enough for half a gigabyte of weights */
static guint64 rng_state = 0x9e3779b97f4a7c15ull;

static guint32
rng (void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (guint32) ((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* bf16 in +-[1/16, 2), never zero */
static guint16
rand_bf16 (void)
{
  guint32 r = rng ();
  return (guint16) (((r >> 31) << 15) | ((0x7bu + (r >> 8) % 5u) << 7) | (r & 0x7fu));
}

static double
bf16_value (guint16 h)
{
  guint32 u = (guint32) h << 16;
  float f;
  memcpy (&f, &u, 4);
  return f;
}

static AmkProgram *
make_program (guint rows, guint k, guint tile, gint *yb, gint *wb, gint *xb)
{
  AmkProgram *p = amk_program_new (N_QUEUES);
  g_autoptr(GError) error = NULL;
  gint64 sy[] = { rows }, sw[] = { rows, k }, sx[] = { k };
  guint i = 0;

  *yb = amk_program_add_buffer (p, "y", AMK_DTYPE_F32, sy, 1, AMK_BUFFER_ROLE_OUTPUT, &error);
  *wb = amk_program_add_buffer (p, "W", AMK_DTYPE_BF16, sw, 2, AMK_BUFFER_ROLE_CONSTANT, &error);
  *xb = amk_program_add_buffer (p, "x", AMK_DTYPE_F32, sx, 1, AMK_BUFFER_ROLE_INPUT, &error);
  if (error != NULL)
    g_error ("%s", error->message);
  for (guint r0 = 0; r0 < rows; r0 += tile)
    for (guint s = 0; s < splits; s++, i++)
      {
        const guint chunks = k / 8, c0 = s * chunks / splits, c1 = (s + 1) * chunks / splits;
        gint ins = amk_program_add_instruction (p, i % N_QUEUES, AMK_OPCODE_MATVEC,
                                                (gint[]) { *yb, *wb, *xb, -1, splits > 1 ? *yb : -1, -1 },
                                                6, &error);
        if (ins < 0 ||
            !amk_program_set_param_int (p, ins, "row0", r0, &error) ||
            !amk_program_set_param_int (p, ins, "rows", MIN (tile, rows - r0), &error) ||
            !amk_program_set_param_int (p, ins, "k", k, &error) ||
            !amk_program_set_param_int (p, ins, "k0", splits > 1 ? c0 * 8 : 0, &error) ||
            !amk_program_set_param_int (p, ins, "k_len", splits > 1 ? (c1 - c0) * 8 : 0, &error))
          g_error ("%s", error->message);
      }
  return p;
}

static AmkProgram *
nops (void)
{
  AmkProgram *p = amk_program_new (N_QUEUES);
  for (guint q = 0; q < N_QUEUES; q++)
    amk_program_add_instruction (p, q, AMK_OPCODE_NOP, NULL, 0, NULL);
  return p;
}

typedef struct {
  guint  tile;
  double host_us, net_us, span_us, gb;
} Result;

static void
configure (AmkLauncher *l, guint threads, guint smem)
{
  amk_launcher_set_threads_per_block (l, threads);
  amk_launcher_set_dynamic_shared_memory (l, smem);
}

/* One shape: all candidate tiles; returns FALSE when a check failed. */
static gboolean
bench_shape (guint rows, guint k, guint threads, guint smem, guint only_tile, double overhead_us)
{
  g_autoptr(GError) error = NULL;
  const gsize n_w = (gsize) rows * k;
  g_autofree guint16 *w = g_new (guint16, n_w);
  g_autofree float *x = g_new (float, k);
  g_autoptr(GBytes) wbytes = NULL, xbytes = NULL;
  g_autoptr(AmkLauncher) owner = NULL;
  g_autoptr(AmkProgram) owner_prog = NULL;
  guint64 w_addr, x_addr;
  gint yb, wb, xb;
  guint cand[16], n_cand = 0;
  Result best = { 0 };
  gboolean all_ok = TRUE;
  const double gb = ((double) n_w * 2 + (double) k * 4 + (double) rows * 4) / 1e9;
  const gboolean ring = (guint64) threads * AMK_MATVEC_RING_BYTES_PER_THREAD + 4ull * k <= smem;

  for (gsize i = 0; i < n_w; i++)
    w[i] = rand_bf16 ();
  for (guint i = 0; i < k; i++)
    {
      guint32 r = rng ();
      x[i] = (float) ((0.0625 + 1.9375 * (r & 0xffffff) / 16777216.0) * ((r >> 31) ? -1 : 1));
    }
  wbytes = g_bytes_new_static (w, n_w * 2);
  xbytes = g_bytes_new_static (x, (gsize) k * 4);

  /* candidates: m tiles per queue, evenly (ceil(rows / (132 m)) rows), and fixed sizes */
  if (only_tile != 0)
    cand[n_cand++] = only_tile;
  else
    {
      const guint ms[] = { 1, 2, 3, 4, 6, 8 };
      const guint fixed[] = { 16, 32, 64, 128 };
      for (guint i = 0; i < G_N_ELEMENTS (ms); i++)
        cand[n_cand++] = (rows + N_QUEUES * ms[i] - 1) / (N_QUEUES * ms[i]);
      for (guint i = 0; i < G_N_ELEMENTS (fixed); i++)
        {
          gboolean dup = FALSE;
          for (guint j = 0; j < n_cand; j++)
            dup |= cand[j] == fixed[i];
          if (!dup)
            cand[n_cand++] = fixed[i];
        }
    }

  g_print ("\n== %u x %u bf16 W, f32 x and y: %.1f MB moved (W %.1f MB); %u threads, %u B dynamic smem: %s pipeline\n",
           rows, k, gb * 1e3, n_w * 2 / 1e6, threads, smem,
           ring ? "cp.async ring" : "direct register loads");

  /* one launcher owns W and x on the device; the others bind them */
  owner_prog = make_program (rows, k, cand[0], &yb, &wb, &xb);
  owner = amk_launcher_new (0);
  if (!amk_launcher_load (owner, owner_prog, &error) ||
      !amk_launcher_upload (owner, wb, wbytes, &error) ||
      !amk_launcher_upload (owner, xb, xbytes, &error) ||
      (w_addr = amk_launcher_get_buffer_address (owner, wb, &error)) == 0 ||
      (x_addr = amk_launcher_get_buffer_address (owner, xb, &error)) == 0)
    g_error ("setting up %ux%u: %s", rows, k, error->message);

  for (guint c = 0; c < n_cand; c++)
    {
      const guint tile = cand[c];
      const guint n_tiles = (rows + tile - 1) / tile * splits;
      g_autoptr(AmkProgram) p = make_program (rows, k, tile, &yb, &wb, &xb);
      g_autoptr(AmkLauncher) l = amk_launcher_new (0);
      g_autoptr(GBytes) ybytes = NULL;
      const float *y;
      double max_err = 0;
      gboolean ok = TRUE;
      Result res = { tile, 0, 0, 0, gb };

      configure (l, threads, smem);
      if (!amk_launcher_load (l, p, &error) ||
          !amk_launcher_bind_buffer (l, wb, w_addr, n_w * 2, &error) ||
          !amk_launcher_bind_buffer (l, xb, x_addr, (guint64) k * 4, &error))
        g_error ("loading tile %u: %s", tile, error->message);

      /* check a sample of rows (first, last, evenly spaced) against fp64; split-K slices
       * add onto y, which starts at zero */
      if (splits > 1)
        {
          g_autoptr(GBytes) zeros = g_bytes_new_take (g_malloc0 ((gsize) rows * 4), (gsize) rows * 4);
          if (!amk_launcher_upload (l, yb, zeros, &error))
            g_error ("zeroing y: %s", error->message);
        }
      if (!amk_launcher_launch (l, NULL, &error))
        g_error ("launch (tile %u): %s", tile, error->message);
      ybytes = amk_launcher_download (l, yb, &error);
      if (ybytes == NULL)
        g_error ("download: %s", error->message);
      y = g_bytes_get_data (ybytes, NULL);
      for (guint s = 0; s < N_SAMPLES; s++)
        {
          const guint r = s == N_SAMPLES - 1 ? rows - 1 : (guint) ((guint64) s * rows / N_SAMPLES);
          double ref = 0, mag = 0, e;
          for (guint i = 0; i < k; i++)
            {
              const double t = bf16_value (w[(gsize) r * k + i]) * (double) x[i];
              ref += t;
              mag += fabs (t);
            }
          e = fabs ((double) y[r] - ref) / mag; /* error relative to sum |w x| */
          if (!(e <= 1e-5))
            {
              if (ok)
                g_print ("   row %u: gpu %.9g, fp64 %.9g\n", r, (double) y[r], ref);
              ok = FALSE;
            }
          if (!(e <= max_err))
            max_err = e;
        }
      all_ok &= ok;

      res.host_us = bench_time_launches (l, repeats);
      res.net_us = res.host_us - overhead_us;
      res.span_us = device_span (l);
      g_print ("%s tile %5u rows (%5u tiles, <= %3u per queue): host %8.1f us %5.2f TB/s (%3.0f%% of copy) | "
               "minus launch overhead %8.1f us %5.2f TB/s | device span %8.1f us %5.2f TB/s | max err %.1e\n",
               ok ? "PASS" : "FAIL", tile, n_tiles, (n_tiles + N_QUEUES - 1) / N_QUEUES,
               res.host_us, gb / res.host_us * 1e3, /* GB per us = 1000 TB/s */
               100.0 * gb / res.host_us * 1e3 / COPY_TBPS,
               res.net_us, res.net_us > 0 ? gb / res.net_us * 1e3 : 0,
               res.span_us, res.span_us > 0 ? gb / res.span_us * 1e3 : 0, max_err);
      if (ok && (best.tile == 0 || res.host_us < best.host_us))
        best = res;
    }

  if (best.tile != 0)
    g_print ("BEST %u x %u: tile %u rows: %.1f MB in %.1f us = %.2f TB/s, %.2f x the %.2f TB/s copy "
             "(kernel only: %.2f TB/s, %.2f x; device span: %.2f TB/s, %.2f x)\n",
             rows, k, best.tile, gb * 1e3, best.host_us, gb / best.host_us * 1e3,
             gb / best.host_us * 1e3 / COPY_TBPS, COPY_TBPS,
             gb / best.net_us * 1e3, gb / best.net_us * 1e3 / COPY_TBPS,
             gb / best.span_us * 1e3, gb / best.span_us * 1e3 / COPY_TBPS);
  return all_ok;
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) probe = amk_launcher_new (0);
  g_autoptr(AmkKernelAttributes) attr = NULL;
  g_autofree char *name = NULL;
  static const guint shapes[][2] = { { 16384, 2048 }, { 28672, 4096 }, { 128256, 2048 } };
  guint threads = 0, smem = AMK_MATVEC_SMEM_BYTES, only_rows = 0, only_k = 0, only_tile = 0;
  gboolean ok = TRUE;
  double overhead_us;

  for (int i = 1; i + 1 < argc; i += 2)
    {
      if (g_str_equal (argv[i], "--repeats"))
        repeats = MAX (atoi (argv[i + 1]), 1);
      else if (g_str_equal (argv[i], "--threads"))
        threads = (guint) atoi (argv[i + 1]);
      else if (g_str_equal (argv[i], "--smem"))
        smem = (guint) atoi (argv[i + 1]);
      else if (g_str_equal (argv[i], "--tile"))
        only_tile = (guint) atoi (argv[i + 1]);
      else if (g_str_equal (argv[i], "--splits"))
        splits = (guint) CLAMP (atoi (argv[i + 1]), 1, 64);
      else if (g_str_equal (argv[i], "--shape"))
        {
          if (sscanf (argv[i + 1], "%ux%u", &only_rows, &only_k) != 2)
            g_error ("--shape wants ROWSxK");
        }
      else
        g_error ("unknown option %s", argv[i]);
    }

  name = amk_launcher_get_device_name (probe, &error);
  if (name == NULL)
    {
      g_printerr ("amk-matvec-bench: %s\n", error->message);
      return 77;
    }
  attr = amk_launcher_kernel_attributes (probe, 32, 0, &error);
  if (attr == NULL)
    g_error ("%s", error->message);
  if (threads == 0)
    threads = (guint) attr->max_threads;
  g_print ("device: %s, %d SMs; megakernel: %d registers, %d B static smem, %d B local, "
           "max %d threads; running %u threads, %u B dynamic smem (opt-in cap %d); median of %d launches\n",
           name, attr->num_sms, attr->num_regs, attr->static_smem_bytes, attr->local_bytes,
           attr->max_threads, threads, smem, attr->max_dynamic_smem_optin, repeats);

  {
    g_autoptr(AmkProgram) p = nops ();
    configure (probe, threads, smem);
    if (!amk_launcher_load (probe, p, &error))
      g_error ("%s", error->message);
    overhead_us = bench_time_launches (probe, repeats);
    g_print ("launch overhead (132 NOP queues, same configuration): %.1f us\n", overhead_us);
  }

  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    if (only_rows == 0 || (shapes[s][0] == only_rows && shapes[s][1] == only_k))
      ok &= bench_shape (shapes[s][0], shapes[s][1], threads, smem, only_tile, overhead_us);
  if (only_rows != 0 && !(only_rows == shapes[0][0] && only_k == shapes[0][1]) &&
      !(only_rows == shapes[1][0] && only_k == shapes[1][1]) &&
      !(only_rows == shapes[2][0] && only_k == shapes[2][1]))
    ok &= bench_shape (only_rows, only_k, threads, smem, only_tile, overhead_us);

  g_print ("\n%s: amk-matvec-bench checks\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
