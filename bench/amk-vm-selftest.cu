/* amk-vm-selftest.cu: standalone GPU self-test of the megakernel and its launcher,
 * without GLib. Builds the ABI structs by hand, runs them through amk_cuda_launch and
 * compares every output byte with values computed here on the host.
 *
 *   nvcc -gencode=arch=compute_90,code=sm_90 -I kernels bench/amk-vm-selftest.cu \
 *        kernels/scheduler.cu kernels/amk-cuda.cu -o /tmp/selftest && /tmp/selftest
 *
 * Prints PASS/FAIL lines; exits non-zero when anything failed.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "amk-abi.h"
#include "amk-cuda.h"

static int n_fail = 0;
static int dev = 0;

static void
result (bool ok, const char *fmt, ...)
{
  va_list ap;
  printf ("%s: ", ok ? "PASS" : "FAIL");
  va_start (ap, fmt);
  vprintf (fmt, ap);
  va_end (ap);
  printf ("\n");
  fflush (stdout);
  if (!ok)
    n_fail++;
}

static const char *
status_name (amk_cuda_status s)
{
  static const char *names[] = { "OK", "NO_DEVICE", "REJECTED", "TIMEOUT", "ABORTED", "CANCELLED", "FAILED" };
  return (unsigned) s < 7 ? names[s] : "?";
}

static double
now_s (void)
{
  return std::chrono::duration<double> (std::chrono::steady_clock::now ().time_since_epoch ()).count ();
}

/* ---- host reference conversions (independent of cuda_fp16.h) ------------------------- */

static uint32_t f2u (float f) { uint32_t u; memcpy (&u, &f, 4); return u; }
static float u2f (uint32_t u) { float f; memcpy (&f, &u, 4); return f; }

/* f16 -> float for zeros and normals (the test only makes those) */
static float
h2f (uint16_t h)
{
  uint32_t sign = (uint32_t) (h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0 && m == 0)
    return u2f (sign);
  if (e == 0 || e == 31)
    {
      fprintf (stderr, "h2f: unexpected subnormal/inf 0x%04x\n", h);
      abort ();
    }
  return u2f (sign | ((e - 15 + 127) << 23) | (m << 13));
}

/* float -> f16, round to nearest even, zeros and the normal range only */
static uint16_t
f2h (float f)
{
  uint32_t x = f2u (f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
  if (ax == 0)
    return (uint16_t) sign;
  int e = (int) (ax >> 23) - 127 + 15;
  uint32_t m = ax & 0x7fffff, hm = m >> 13, rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (hm & 1)))
    hm++;
  if (hm == 0x400)
    {
      hm = 0;
      e++;
    }
  if (e < 1 || e > 30)
    {
      fprintf (stderr, "f2h: %g outside the normal f16 range\n", f);
      abort ();
    }
  return (uint16_t) (sign | ((uint32_t) e << 10) | hm);
}

static float bf2f (uint16_t b) { return u2f ((uint32_t) b << 16); }
static uint16_t f2bf (float f)
{
  uint32_t x = f2u (f);
  return (uint16_t) ((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- program builder ------------------------------------------------------------------- */

static const uint8_t POISON = 0xcd;

static uint32_t
esize (uint32_t dt)
{
  return dt == AMK_ABI_DTYPE_F32 || dt == AMK_ABI_DTYPE_I32 ? 4 : dt == AMK_ABI_DTYPE_U8 ? 1 : 2;
}

struct W { int counter; uint32_t target; };

/* The parameters of the ops built here, set through amk-abi.h's named members; `{}`
 * (all zero) serves the ops without any. */
static amk_params_t
copy_params (int32_t dst_offset, int32_t src_offset, int32_t count)
{
  amk_params_t p = {};
  p.copy.dst_offset = dst_offset, p.copy.src_offset = src_offset, p.copy.count = count;
  return p;
}

static amk_params_t
fill_params (int32_t offset, int32_t count, float value)
{
  amk_params_t p = {};
  p.fill.offset = offset, p.fill.count = count, p.fill.value = value;
  return p;
}

static amk_params_t
add_params (int32_t dst_offset, int32_t a_offset, int32_t b_offset, int32_t count)
{
  amk_params_t p = {};
  p.add.dst_offset = dst_offset, p.add.a_offset = a_offset, p.add.b_offset = b_offset;
  p.add.count = count;
  return p;
}

static amk_params_t
trap_params (int32_t code)
{
  amk_params_t p = {};
  p.trap.code = code;
  return p;
}

struct Prog {
  std::vector<amk_buffer_t> bufs;
  std::vector<std::vector<uint8_t>> init;   /* initial bytes of each buffer */
  std::vector<std::vector<uint8_t>> expect; /* expected bytes after the launch */
  std::vector<amk_instruction_t> ins;
  std::vector<std::vector<int32_t>> queues;
  int n_counters = 0;

  explicit Prog (int nq) : queues (nq) {}

  int buffer (uint32_t dt, size_t n, const void *data = NULL)
  {
    amk_buffer_t b = { 0, n * esize (dt), dt, 0 };
    bufs.push_back (b);
    std::vector<uint8_t> v (b.size_bytes, POISON);
    if (data != NULL)
      memcpy (v.data (), data, v.size ());
    init.push_back (v);
    expect.push_back (v);
    return (int) bufs.size () - 1;
  }

  int counter () { return n_counters++; }

  int add (int q, uint16_t op, std::vector<int> b, amk_params_t params,
           std::vector<W> waits = {}, int sig = AMK_NO_COUNTER, uint32_t amount = 1)
  {
    amk_instruction_t x;
    memset (&x, 0, sizeof x);
    x.opcode = op;
    x.n_waits = (uint8_t) waits.size ();
    for (size_t i = 0; i < waits.size () && i < AMK_MAX_WAITS; i++)
      {
        x.waits[i].counter = waits[i].counter;
        x.waits[i].target = waits[i].target;
      }
    x.signal.counter = sig;
    x.signal.amount = amount;
    x.n_buffers = (uint8_t) b.size ();
    for (int i = 0; i < AMK_MAX_BUFFER_REFS; i++)
      x.buffers[i] = i < (int) b.size () ? b[i] : AMK_NO_BUFFER;
    x.params = params;
    ins.push_back (x);
    queues[q].push_back ((int32_t) ins.size () - 1);
    return (int) ins.size () - 1;
  }
};

struct Dev {
  std::vector<uint64_t> baddr;
  uint64_t table = 0, counters = 0, instrs = 0, flat = 0, off = 0, len = 0;
  uint64_t flag = 0, rec = 0, barrier = 0, trace = 0;
};

static uint64_t
dmalloc (size_t n)
{
  char msg[256];
  uint64_t a = 0;
  if (amk_cuda_malloc (dev, n < 16 ? 16 : n, &a, msg, sizeof msg) != AMK_CUDA_OK)
    {
      fprintf (stderr, "FATAL: %s\n", msg);
      exit (2);
    }
  return a;
}

static void
dupload (uint64_t dst, const void *src, size_t n)
{
  char msg[256];
  if (n && amk_cuda_upload (dev, dst, src, n, msg, sizeof msg) != AMK_CUDA_OK)
    {
      fprintf (stderr, "FATAL: %s\n", msg);
      exit (2);
    }
}

static void
ddownload (void *dst, uint64_t src, size_t n)
{
  char msg[256];
  if (n && amk_cuda_download (dev, dst, src, n, msg, sizeof msg) != AMK_CUDA_OK)
    {
      fprintf (stderr, "FATAL: %s\n", msg);
      exit (2);
    }
}

static Dev
upload (const Prog &p)
{
  Dev d;
  std::vector<amk_buffer_t> table = p.bufs;
  for (size_t b = 0; b < p.bufs.size (); b++)
    {
      uint64_t a = dmalloc (p.bufs[b].size_bytes);
      d.baddr.push_back (a);
      table[b].addr = a;
      dupload (a, p.init[b].data (), p.init[b].size ());
    }
  std::vector<int32_t> flat, off, len;
  for (auto &q : p.queues)
    {
      off.push_back ((int32_t) flat.size ());
      len.push_back ((int32_t) q.size ());
      flat.insert (flat.end (), q.begin (), q.end ());
    }
  d.table = dmalloc (table.size () * sizeof (amk_buffer_t));
  dupload (d.table, table.data (), table.size () * sizeof (amk_buffer_t));
  d.counters = dmalloc ((size_t) (p.n_counters ? p.n_counters : 1) * 4);
  d.instrs = dmalloc (p.ins.size () * sizeof (amk_instruction_t));
  dupload (d.instrs, p.ins.data (), p.ins.size () * sizeof (amk_instruction_t));
  d.flat = dmalloc (flat.size () * 4);
  dupload (d.flat, flat.data (), flat.size () * 4);
  d.off = dmalloc (off.size () * 4);
  dupload (d.off, off.data (), off.size () * 4);
  d.len = dmalloc (len.size () * 4);
  dupload (d.len, len.data (), len.size () * 4);
  d.flag = dmalloc (4);
  d.rec = dmalloc (sizeof (amk_abort_record_t));
  d.barrier = dmalloc (8);
  d.trace = dmalloc (p.ins.size () * sizeof (amk_trace_event_t));
  return d;
}

static void
release (Dev &d)
{
  for (uint64_t a : d.baddr)
    amk_cuda_free (dev, a);
  uint64_t *all[] = { &d.table, &d.counters, &d.instrs, &d.flat, &d.off, &d.len,
                      &d.flag, &d.rec, &d.barrier, &d.trace };
  for (uint64_t *a : all)
    amk_cuda_free (dev, *a);
  d = Dev ();
}

struct Run {
  amk_cuda_status status;
  amk_abort_record_t rec;
  char msg[512];
  double seconds;
};

static Run
launch (const Prog &p, const Dev &d, int threads, uint64_t watchdog_ns, bool trace = false,
        const volatile int *cancel = NULL, int grid = -1)
{
  amk_device_program prog;
  memset (&prog, 0, sizeof prog);
  prog.buffers = (const amk_buffer_t *) (uintptr_t) d.table;
  prog.counters = (amk_counter_t *) (uintptr_t) d.counters;
  prog.instructions = (const amk_instruction_t *) (uintptr_t) d.instrs;
  prog.sm_queue_flat = (const int32_t *) (uintptr_t) d.flat;
  prog.sm_queue_off = (const int32_t *) (uintptr_t) d.off;
  prog.sm_queue_len = (const int32_t *) (uintptr_t) d.len;
  prog.abort_flag = (int32_t *) (uintptr_t) d.flag;
  prog.abort_record = (amk_abort_record_t *) (uintptr_t) d.rec;
  prog.grid_barrier = (uint32_t *) (uintptr_t) d.barrier;
  prog.trace = trace ? (amk_trace_event_t *) (uintptr_t) d.trace : NULL;
  prog.watchdog_ns = watchdog_ns;
  prog.n_buffers = (int32_t) p.bufs.size ();
  prog.n_counters = p.n_counters;
  prog.n_instructions = (int32_t) p.ins.size ();
  prog.num_sms = (int32_t) p.queues.size ();

  Run r;
  memset (&r, 0, sizeof r);
  double t0 = now_s ();
  r.status = amk_cuda_launch (dev, &prog, grid < 0 ? (int) p.queues.size () : grid, threads, 0,
                              cancel, &r.rec, NULL, r.msg, sizeof r.msg);
  r.seconds = now_s () - t0;
  return r;
}

/* Re-poisons outputs (buffers whose expected bytes differ from their init stay as init:
 * we upload init for every buffer). */
static void
reset_buffers (const Prog &p, const Dev &d)
{
  for (size_t b = 0; b < p.bufs.size (); b++)
    dupload (d.baddr[b], p.init[b].data (), p.init[b].size ());
}

static bool
compare (const Prog &p, const Dev &d, const char *what, int threads)
{
  bool all = true;
  for (size_t b = 0; b < p.bufs.size (); b++)
    {
      std::vector<uint8_t> got (p.bufs[b].size_bytes);
      ddownload (got.data (), d.baddr[b], got.size ());
      if (memcmp (got.data (), p.expect[b].data (), got.size ()) != 0)
        {
          size_t i = 0;
          while (got[i] == p.expect[b][i])
            i++;
          printf ("   %s (threads %d): buffer %zu differs first at byte %zu: got 0x%02x, want 0x%02x\n",
                  what, threads, b, i, got[i], p.expect[b][i]);
          all = false;
        }
    }
  return all;
}

/* ---- test 1: COPY/ADD chain over 4 queues, FILL, GRID_SYNC phases, relay ------------- */

template <typename T>
static T *
as (std::vector<uint8_t> &v)
{
  return reinterpret_cast<T *> (v.data ());
}

static Prog
build_chain (std::mt19937 &rng)
{
  const int Q = 4;
  const int N = 100003;
  const int M = 1001;
  const int PART = (N + Q - 1) / Q;
  Prog p (Q);
  std::uniform_real_distribution<float> uf (-1.0f, 1.0f);

  std::vector<float> a (N), b (N);
  for (int i = 0; i < N; i++)
    {
      a[i] = uf (rng);
      b[i] = uf (rng);
    }
  const int A = p.buffer (AMK_ABI_DTYPE_F32, N, a.data ());
  const int B = p.buffer (AMK_ABI_DTYPE_F32, N, b.data ());
  const int C = p.buffer (AMK_ABI_DTYPE_F32, N);
  const int D = p.buffer (AMK_ABI_DTYPE_F32, N);
  const int E = p.buffer (AMK_ABI_DTYPE_F32, N);
  const int G = p.buffer (AMK_ABI_DTYPE_F32, N + 8);
  const int H16 = p.buffer (AMK_ABI_DTYPE_F16, N);
  const int BF = p.buffer (AMK_ABI_DTYPE_BF16, N);
  const int FI = p.buffer (AMK_ABI_DTYPE_I32, M);
  const int FU = p.buffer (AMK_ABI_DTYPE_U8, M);

  std::vector<uint32_t> xi (M), yi (M);
  std::vector<uint8_t> xu (M), yu (M);
  std::vector<uint16_t> xh (N), yh (N), xb (N), yb (N);
  for (int i = 0; i < M; i++)
    {
      xi[i] = rng ();
      yi[i] = rng ();
      xu[i] = (uint8_t) rng ();
      yu[i] = (uint8_t) rng ();
    }
  for (int i = 0; i < N; i++)
    {
      xh[i] = (uint16_t) (0x3800 + (rng () & 0x7ff)) | (uint16_t) ((rng () & 1) << 15);
      yh[i] = (uint16_t) (0x3800 + (rng () & 0x7ff)) | (uint16_t) ((rng () & 1) << 15);
      xb[i] = (uint16_t) (0x3f00 + (rng () & 0xff)) | (uint16_t) ((rng () & 1) << 15);
      yb[i] = (uint16_t) (0x3f00 + (rng () & 0xff)) | (uint16_t) ((rng () & 1) << 15);
    }
  const int XI = p.buffer (AMK_ABI_DTYPE_I32, M, xi.data ());
  const int YI = p.buffer (AMK_ABI_DTYPE_I32, M, yi.data ());
  const int ZI = p.buffer (AMK_ABI_DTYPE_I32, M);
  const int XU = p.buffer (AMK_ABI_DTYPE_U8, M, xu.data ());
  const int YU = p.buffer (AMK_ABI_DTYPE_U8, M, yu.data ());
  const int ZU = p.buffer (AMK_ABI_DTYPE_U8, M);
  const int XH = p.buffer (AMK_ABI_DTYPE_F16, N, xh.data ());
  const int YH = p.buffer (AMK_ABI_DTYPE_F16, N, yh.data ());
  const int ZH = p.buffer (AMK_ABI_DTYPE_F16, N);
  const int XB = p.buffer (AMK_ABI_DTYPE_BF16, N, xb.data ());
  const int YB = p.buffer (AMK_ABI_DTYPE_BF16, N, yb.data ());
  const int ZB = p.buffer (AMK_ABI_DTYPE_BF16, N);
  const int UC = p.buffer (AMK_ABI_DTYPE_U8, M);
  const int S = p.buffer (AMK_ABI_DTYPE_F32, N);
  const int T = p.buffer (AMK_ABI_DTYPE_F32, N);
  const int RN = 4096;
  std::vector<float> r0 (RN);
  for (int i = 0; i < RN; i++)
    r0[i] = uf (rng);
  const int R = p.buffer (AMK_ABI_DTYPE_F32, RN, r0.data ());

  const int c0 = p.counter (), c1 = p.counter (), c2 = p.counter (), c3 = p.counter ();
  const int fan = p.counter ();

  /* phase 1: the chain A -> C -> D -> E -> G across the queues, plus independent ops */
  for (int q = 0; q < Q; q++)
    p.add (q, AMK_ABI_OP_NOP, {}, {}, {}, fan, 2);
  p.add (0, AMK_ABI_OP_COPY, { C, A }, copy_params (0, 0, N), {}, c0);
  p.add (1, AMK_ABI_OP_ADD, { D, C, B }, add_params (0, 0, 0, N), { { c0, 1 } }, c1);
  p.add (2, AMK_ABI_OP_ADD, { E, D, A }, add_params (0, 0, 0, N), { { c1, 1 }, { c0, 1 } }, c2);
  p.add (3, AMK_ABI_OP_COPY, { G, E }, copy_params (5, 3, N - 3), { { c2, 1 } }, c3);
  p.add (0, AMK_ABI_OP_FILL, { H16 }, fill_params (1, N - 2, 1.0f / 3.0f));
  p.add (1, AMK_ABI_OP_FILL, { BF }, fill_params (3, N - 5, -2.7182817f));
  p.add (2, AMK_ABI_OP_FILL, { FI }, fill_params (0, M, -3.7f));
  p.add (2, AMK_ABI_OP_FILL, { FU }, fill_params (1, M - 1, 300.0f));
  p.add (0, AMK_ABI_OP_ADD, { ZI, XI, YI }, add_params (0, 0, 0, M));
  p.add (1, AMK_ABI_OP_ADD, { ZU, XU, YU }, add_params (1, 0, 1, M - 1));
  p.add (2, AMK_ABI_OP_ADD, { ZH, XH, YH }, add_params (0, 0, 0, N));
  p.add (3, AMK_ABI_OP_ADD, { ZB, XB, YB }, add_params (1, 1, 1, N - 1));
  p.add (3, AMK_ABI_OP_COPY, { UC, XU }, copy_params (3, 0, M - 3));

  /* phase 2 and 3, separated by grid barriers: S = E + C, then T = S[part q] + S[part q+1] */
  for (int q = 0; q < Q; q++)
    p.add (q, AMK_ABI_OP_GRID_SYNC, {}, {});
  for (int q = 0; q < Q; q++)
    {
      int lo = q * PART, n = std::min (PART, N - lo);
      p.add (q, AMK_ABI_OP_ADD, { S, E, C }, add_params (lo, lo, lo, n));
    }
  for (int q = 0; q < Q; q++)
    p.add (q, AMK_ABI_OP_GRID_SYNC, {}, {});
  for (int q = 0; q < Q; q++)
    {
      int lo = q * PART, n = std::min (PART, N - lo);
      int lo2 = ((q + 1) % Q) * PART;
      n = std::min (n, std::min (PART, N - lo2));
      p.add (q, AMK_ABI_OP_ADD, { T, S, S }, add_params (lo, lo, lo2, n));
    }

  /* relay: 32 dependent hops R = R + A[0:RN], hop h on queue h % Q */
  const int HOPS = 32;
  int prev = -1;
  for (int h = 0; h < HOPS; h++)
    {
      int c = p.counter ();
      std::vector<W> w;
      if (prev >= 0)
        w.push_back ({ prev, 1 });
      else
        w.push_back ({ fan, 2 * Q });
      p.add (h % Q, AMK_ABI_OP_ADD, { R, R, A }, add_params (0, 0, 0, RN), w, c);
      prev = c;
    }

  /* ---- expected values ---- */
  std::vector<float> c (a), d (N), e (N);
  for (int i = 0; i < N; i++)
    d[i] = c[i] + b[i];
  for (int i = 0; i < N; i++)
    e[i] = d[i] + a[i];
  memcpy (p.expect[C].data (), c.data (), 4 * N);
  memcpy (p.expect[D].data (), d.data (), 4 * N);
  memcpy (p.expect[E].data (), e.data (), 4 * N);
  memcpy (p.expect[G].data () + 5 * 4, e.data () + 3, 4 * (N - 3));
  {
    uint16_t h = f2h (1.0f / 3.0f), bf = f2bf (-2.7182817f);
    for (int i = 1; i < N - 1; i++)
      as<uint16_t> (p.expect[H16])[i] = h;
    for (int i = 3; i < N - 2; i++)
      as<uint16_t> (p.expect[BF])[i] = bf;
    for (int i = 0; i < M; i++)
      as<int32_t> (p.expect[FI])[i] = -3;
    for (int i = 1; i < M; i++)
      p.expect[FU][i] = (uint8_t) (int32_t) 300.0f;
  }
  for (int i = 0; i < M; i++)
    as<uint32_t> (p.expect[ZI])[i] = xi[i] + yi[i];
  for (int i = 1; i < M; i++)
    p.expect[ZU][i] = (uint8_t) (xu[i - 1] + yu[i]);
  for (int i = 0; i < N; i++)
    as<uint16_t> (p.expect[ZH])[i] = f2h (h2f (xh[i]) + h2f (yh[i]));
  for (int i = 1; i < N; i++)
    as<uint16_t> (p.expect[ZB])[i] = f2bf (bf2f (xb[i]) + bf2f (yb[i]));
  memcpy (p.expect[UC].data () + 3, xu.data (), M - 3);
  std::vector<float> s (N);
  for (int i = 0; i < N; i++)
    s[i] = e[i] + c[i];
  memcpy (p.expect[S].data (), s.data (), 4 * N);
  for (int q = 0; q < Q; q++)
    {
      int lo = q * PART, n = std::min (PART, N - lo);
      int lo2 = ((q + 1) % Q) * PART;
      n = std::min (n, std::min (PART, N - lo2));
      for (int i = 0; i < n; i++)
        as<float> (p.expect[T])[lo + i] = s[lo + i] + s[lo2 + i];
    }
  std::vector<float> r (r0);
  for (int h = 0; h < HOPS; h++)
    for (int i = 0; i < RN; i++)
      r[i] = r[i] + a[i];
  memcpy (p.expect[R].data (), r.data (), 4 * RN);
  return p;
}

static bool
check_trace (const Prog &p, const Dev &d)
{
  std::vector<amk_trace_event_t> ev (p.ins.size ());
  ddownload (ev.data (), d.trace, ev.size () * sizeof ev[0]);
  size_t k0 = 0;
  for (size_t q = 0; q < p.queues.size (); q++)
    {
      for (size_t k = 0; k < p.queues[q].size (); k++)
        {
          const amk_trace_event_t &e = ev[k0 + k];
          const amk_instruction_t &in = p.ins[p.queues[q][k]];
          if (e.queue != (int) q || e.instruction != (int) k || e.opcode != in.opcode ||
              e.start_ns == 0 || e.end_ns < e.start_ns)
            {
              printf ("   trace event %zu: queue %d instr %d opcode %u start %llu end %llu\n",
                      k0 + k, e.queue, e.instruction, e.opcode,
                      (unsigned long long) e.start_ns, (unsigned long long) e.end_ns);
              return false;
            }
        }
      k0 += p.queues[q].size ();
    }
  /* the chain: queue 1 instruction 1 (D = C + B) cannot start before queue 0's COPY */
  size_t q1 = p.queues[0].size ();
  if (ev[q1 + 1].start_ns < ev[1].start_ns)
    {
      printf ("   trace: consumer started before its producer\n");
      return false;
    }
  return true;
}

/* ---- test: many-block grid barrier ----------------------------------------------------- */

static Prog
build_barrier_stress (int Q, int rounds, std::mt19937 &rng)
{
  const int W = 256;
  Prog p (Q);
  std::uniform_real_distribution<float> uf (-1.0f, 1.0f);
  std::vector<float> x (Q * W);
  for (auto &v : x)
    v = uf (rng);
  int buf[2] = { p.buffer (AMK_ABI_DTYPE_F32, Q * W, x.data ()), p.buffer (AMK_ABI_DTYPE_F32, Q * W) };
  std::vector<float> cur (x), nxt (Q * W);
  for (int r = 0; r < rounds; r++)
    {
      int src = buf[r & 1], dst = buf[(r + 1) & 1];
      for (int q = 0; q < Q; q++)
        {
          p.add (q, AMK_ABI_OP_ADD, { dst, src, src }, add_params (q * W, q * W, ((q + 1) % Q) * W, W));
          p.add (q, AMK_ABI_OP_GRID_SYNC, {}, {});
        }
      for (int q = 0; q < Q; q++)
        for (int i = 0; i < W; i++)
          nxt[q * W + i] = cur[q * W + i] + cur[((q + 1) % Q) * W + i];
      std::swap (cur, nxt);
    }
  /* final contents: buffer (rounds & 1) holds cur, the other the round before */
  std::vector<float> prev (x);
  {
    std::vector<float> c2 (x), n2 (Q * W);
    for (int r = 0; r < rounds - 1; r++)
      {
        for (int q = 0; q < Q; q++)
          for (int i = 0; i < W; i++)
            n2[q * W + i] = c2[q * W + i] + c2[((q + 1) % Q) * W + i];
        std::swap (c2, n2);
      }
    prev = c2;
  }
  memcpy (p.expect[buf[rounds & 1]].data (), cur.data (), 4 * Q * W);
  if (rounds >= 1)
    memcpy (p.expect[buf[(rounds + 1) & 1]].data (), prev.data (), 4 * Q * W);
  return p;
}

/* ---- main -------------------------------------------------------------------------------- */

int
main (void)
{
  char msg[512] = "";
  char name[256] = "";
  int n = amk_cuda_device_count ();
  if (n <= 0)
    {
      printf ("FAIL: no CUDA device\n");
      return 1;
    }
  amk_cuda_device_name (dev, name, sizeof name, msg, sizeof msg);
  int coop = 0;
  amk_cuda_supports_cooperative (dev, &coop, msg, sizeof msg);
  printf ("device 0: %s, cooperative %d\n", name, coop);

  {
    amk_cuda_status s = amk_cuda_device_name (n, name, sizeof name, msg, sizeof msg);
    result (s == AMK_CUDA_NO_DEVICE, "device index %d -> %s (%s)", n, status_name (s), msg);
  }

  amk_cuda_attributes_t at;
  memset (&at, 0, sizeof at);
  {
    amk_cuda_status s = amk_cuda_kernel_attributes (dev, 256, 0, &at, msg, sizeof msg);
    result (s == AMK_CUDA_OK && at.blocks_per_sm > 0,
            "kernel attributes: %d regs, %d B static smem, %d B local, max threads %d, "
            "%d blocks/SM x %d SMs = max grid %d, opt-in smem %d",
            at.num_regs, at.static_smem_bytes, at.local_bytes, at.max_threads,
            at.blocks_per_sm, at.num_sms, at.max_grid, at.max_dynamic_smem_optin);
  }
  {
    double t0 = now_s ();
    amk_cuda_status s = AMK_CUDA_OK;
    for (int i = 0; i < 100 && s == AMK_CUDA_OK; i++)
      s = amk_cuda_launch_empty (dev, at.num_sms, 256, msg, sizeof msg);
    result (s == AMK_CUDA_OK, "empty launch + sync: %.2f us each", (now_s () - t0) * 1e4);
  }

  std::mt19937 rng ((unsigned) std::chrono::steady_clock::now ().time_since_epoch ().count ());

  /* 1. the chain at several block sizes */
  Prog chain = build_chain (rng);
  Dev cd = upload (chain);
  for (int threads : { 32, 96, 256, at.max_threads }) /* the kernel's maximum (__launch_bounds__) */
    {
      reset_buffers (chain, cd);
      Run r = launch (chain, cd, threads, 2000000000ull, threads == 256);
      bool ok = r.status == AMK_CUDA_OK && compare (chain, cd, "chain", threads);
      if (ok && threads == 256)
        ok = check_trace (chain, cd);
      result (ok, "chain COPY/ADD/FILL/GRID_SYNC/relay, %d threads: %s %.3f ms %s",
              threads, status_name (r.status), r.seconds * 1e3, r.msg);
    }

  /* 2. grid barrier over every co-resident block */
  {
    int Q = at.max_grid;
    Prog bs = build_barrier_stress (Q, 50, rng);
    Dev bd = upload (bs);
    Run r = launch (bs, bd, 256, 2000000000ull);
    bool ok = r.status == AMK_CUDA_OK && compare (bs, bd, "barrier", 256);
    result (ok, "grid barrier stress, %d blocks x 50 rounds: %s %.3f ms %s", Q,
            status_name (r.status), r.seconds * 1e3, r.msg);
    release (bd);
  }

  /* 3. TRAP -> ABORTED with the record; other blocks waiting leave */
  {
    Prog p (4);
    int c0 = p.counter (), c1 = p.counter ();
    p.add (0, AMK_ABI_OP_NOP, {}, {}, {}, c0);
    p.add (1, AMK_ABI_OP_NOP, {}, {});
    p.add (1, AMK_ABI_OP_TRAP, {}, trap_params (77), { { c0, 1 } });
    p.add (2, AMK_ABI_OP_NOP, {}, {}, { { c1, 1 } });
    p.add (3, AMK_ABI_OP_GRID_SYNC, {}, {});
    Dev d = upload (p);
    Run r = launch (p, d, 256, 5000000000ull);
    result (r.status == AMK_CUDA_ABORTED && r.rec.code == AMK_ABORT_TRAP && r.rec.queue == 1 &&
            r.rec.instruction == 1 && r.rec.detail == 77 && r.seconds < 1.0,
            "TRAP: %s code %d queue %d instr %d detail %d in %.3f ms: %s", status_name (r.status),
            r.rec.code, r.rec.queue, r.rec.instruction, r.rec.detail, r.seconds * 1e3, r.msg);
    release (d);
  }

  /* 4. a wait on a counter nobody signals: watchdog 50 ms -> TIMEOUT */
  {
    Prog p (4);
    int c0 = p.counter ();
    p.add (0, AMK_ABI_OP_NOP, {}, {});
    p.add (0, AMK_ABI_OP_NOP, {}, {}, { { c0, 1 } });
    for (int q = 1; q < 4; q++)
      p.add (q, AMK_ABI_OP_NOP, {}, {});
    Dev d = upload (p);
    Run r = launch (p, d, 256, 50000000ull);
    result (r.status == AMK_CUDA_TIMEOUT && r.rec.code == AMK_ABORT_TIMEOUT && r.rec.queue == 0 &&
            r.rec.instruction == 1 && r.rec.counter == c0 && r.rec.observed == 0 &&
            r.rec.target == 1 && r.seconds < 1.0 && r.seconds >= 0.045,
            "watchdog TIMEOUT after %.3f ms: %s", r.seconds * 1e3, r.msg);
    release (d);
  }

  /* 5. a grid barrier one block never reaches -> TIMEOUT with counter -1 */
  {
    Prog p (4);
    for (int q = 0; q < 3; q++)
      p.add (q, AMK_ABI_OP_GRID_SYNC, {}, {});
    p.add (3, AMK_ABI_OP_NOP, {}, {});
    Dev d = upload (p);
    Run r = launch (p, d, 256, 50000000ull);
    result (r.status == AMK_CUDA_TIMEOUT && r.rec.counter == -1 && r.rec.observed == 3 &&
            r.rec.target == 4 && r.seconds < 1.0,
            "grid barrier TIMEOUT after %.3f ms: %s", r.seconds * 1e3, r.msg);
    release (d);
  }

  /* 6. device-side checks */
  {
    struct Case { const char *what; uint16_t op; std::vector<int> b; amk_params_t params;
                  std::vector<W> w; int sig; int code; int detail; };
    std::vector<Case> cases = {
      { "bad buffer index", AMK_ABI_OP_COPY, { 0, 99 }, copy_params (0, 0, 4), {}, AMK_NO_COUNTER,
        AMK_ABORT_BAD_INDEX, 99 },
      { "bad wait counter", AMK_ABI_OP_NOP, {}, {}, { { 7, 1 } }, AMK_NO_COUNTER,
        AMK_ABORT_BAD_INDEX, 7 },
      { "bad signal counter", AMK_ABI_OP_NOP, {}, {}, {}, 5, AMK_ABORT_BAD_INDEX, 5 },
      { "bad opcode", 42, {}, {}, {}, AMK_NO_COUNTER, AMK_ABORT_BAD_OPCODE, 42 },
      { "range past the end", AMK_ABI_OP_FILL, { 1 }, fill_params (60, 5, 0.0f), {}, AMK_NO_COUNTER,
        AMK_ABORT_CHECK, 1 },
      { "dtype mismatch", AMK_ABI_OP_ADD, { 0, 0, 2 }, add_params (0, 0, 0, 4), {}, AMK_NO_COUNTER,
        AMK_ABORT_CHECK, 2 },
      { "overlapping copy", AMK_ABI_OP_COPY, { 0, 0 }, copy_params (1, 0, 8), {}, AMK_NO_COUNTER,
        AMK_ABORT_CHECK, 0 },
    };
    for (auto &c : cases)
      {
        Prog p (2);
        p.buffer (AMK_ABI_DTYPE_F32, 64);
        p.buffer (AMK_ABI_DTYPE_F32, 64);
        p.buffer (AMK_ABI_DTYPE_I32, 64);
        p.counter ();
        p.add (0, AMK_ABI_OP_NOP, {}, {});
        p.add (0, c.op, c.b, c.params, c.w, c.sig);
        p.add (1, AMK_ABI_OP_NOP, {}, {});
        Dev d = upload (p);
        Run r = launch (p, d, 128, 1000000000ull);
        result (r.status == AMK_CUDA_ABORTED && r.rec.code == c.code && r.rec.detail == c.detail &&
                r.rec.queue == 0 && r.rec.instruction == 1,
                "%s: %s code %d detail %d: %s", c.what, status_name (r.status), r.rec.code,
                r.rec.detail, r.msg);
        release (d);
      }
  }

  /* 7. cancel from the host while a block waits forever */
  {
    Prog p (2);
    int c0 = p.counter ();
    p.add (0, AMK_ABI_OP_NOP, {}, {}, { { c0, 1 } });
    p.add (1, AMK_ABI_OP_NOP, {}, {});
    Dev d = upload (p);
    volatile int cancel = 0;
    std::thread t ([&cancel] {
      std::this_thread::sleep_for (std::chrono::milliseconds (100));
      cancel = 1;
    });
    Run r = launch (p, d, 256, 5000000000ull, false, &cancel);
    t.join ();
    result (r.status == AMK_CUDA_CANCELLED && r.rec.code == AMK_ABORT_CANCELLED && r.seconds < 1.0,
            "cancel: %s after %.3f ms: %s", status_name (r.status), r.seconds * 1e3, r.msg);
    release (d);
  }

  /* 8. refusals before launching */
  {
    Prog p (2);
    p.add (0, AMK_ABI_OP_NOP, {}, {});
    p.add (1, AMK_ABI_OP_NOP, {}, {});
    Dev d = upload (p);
    Run r = launch (p, d, 256, 0, false, NULL, at.max_grid + 1);
    result (r.status == AMK_CUDA_REJECTED, "grid %d: %s: %s", at.max_grid + 1,
            status_name (r.status), r.msg);
    r = launch (p, d, 48, 0);
    result (r.status == AMK_CUDA_REJECTED, "48 threads: %s: %s", status_name (r.status), r.msg);
    amk_cuda_attributes_t a2;
    amk_cuda_status s = amk_cuda_kernel_attributes (dev, 256, at.max_dynamic_smem_optin, &a2,
                                                    msg, sizeof msg);
    result (s == AMK_CUDA_REJECTED, "dynamic smem %d: %s: %s", at.max_dynamic_smem_optin,
            status_name (s), msg);
    release (d);
  }

  /* 9. the context is still fine: the chain again */
  {
    reset_buffers (chain, cd);
    Run r = launch (chain, cd, 256, 2000000000ull);
    bool ok = r.status == AMK_CUDA_OK && compare (chain, cd, "chain again", 256);
    result (ok, "good launch after the aborts: %s %.3f ms %s", status_name (r.status),
            r.seconds * 1e3, r.msg);
  }
  release (cd);

  printf ("%s: %d failure%s\n", n_fail ? "FAILED" : "ALL PASSED", n_fail, n_fail == 1 ? "" : "s");
  return n_fail ? 1 : 0;
}
