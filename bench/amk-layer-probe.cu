/* amk-layer-probe.cu: does streaming weights across instruction boundaries pay, with
 * plain CUDA and no VM? A model of the decode step's dependency chain (Llama-3.2-1B
 * shapes by default): per layer the stages qkv (3072 x 2048, norm fused), attention (a
 * chain of dependent L2 round trips and barriers on A blocks, the rest idle), o (2048 x
 * 2048), gate/up (16384 x 2048, norm fused), down (2048 x 8192). Every block takes an
 * even share of the rows of each matvec; a stage waits until every tile of the one before
 * has signalled a counter in device memory (acquire polls, release adds), as the VM's
 * counters order them. One block per SM, cooperative launch. Two ways of running it:
 *
 *   LOCKSTEP: every warp loads, waits and computes one stage at a time (the first VM):
 *             each thread's 15 cp.async slots of W issued before the wait (W is
 *             constant), x' staged in shared memory after it.
 *   PAGED:    a loader warp walks the block's stages on its own and streams each tile of
 *             W into a ring of 16 KiB pages (cp.async.bulk on full/empty mbarriers) as
 *             soon as a page is free, however far ahead of the stage the consumer warps
 *             are waiting for; the 16 consumer warps wait, normalise x into registers and
 *             read W from the pages (the second VM's loader role and pages).
 *   PAGED, quiet attention: as PAGED, but the loader of an attention block issues
 *             nothing of the stages after the attention until it has finished (does the
 *             weight traffic slow the attention's round trips?).
 *   ..., bulk-store signal: LOCKSTEP or PAGED with each stage's output kept in shared
 *             memory and written by one storer thread with a bulk copy; once that copy has
 *             completed the storer adds to the counter without a fence. A gpu-scope
 *             release waits for the loads the whole SM has in flight
 *             (amk-release-probe), so with pages always streaming it costs microseconds.
 *   ..., no products: paged with the storer's signal, the consumers only waiting for
 *             each page and handing it back (the loader, the pages and the signals alone).
 *   ..., lanes' cp.async: the loader's 32 lanes fill each page with 16-byte cp.async
 *             (the path LOCKSTEP's loads take) instead of one bulk copy; "4 copies a page":
 *             each page as four bulk copies; "no reduction", "page reads only" (timing
 *             only, wrong results): the consumers without the per-page warp sum and
 *             shared atomic, or without the arithmetic. For PAGED the line also gives a
 *             launch's time the loader waited for empty pages and consumer warp 0 for
 *             full ones: which side bounds the page stream?
 *   ..., G groups: the consumer warps in G groups that take turns, page q going to
 *             group q % G, each warp reading consecutive segments of its page against x'
 *             in shared memory (G = 4: a warp a row of the 2048-column matvecs);
 *             "page back early": a warp hands its page back before its reduction.
 *
 * For each it prints the step time against the floor (bytes of W at the copy rate of a
 * device-to-device copy measured in the same run), each stage's span (from the end of the
 * stage before to its own end, mean over layers 1..L-1) and the attention chain's time;
 * then checks every matvec of the last layer against the host (from the device's own
 * inputs to that layer). Arguments: [chain round trips (16)] [pages (11, at most)] [layers (16)].
 *
 *   built as build/bench/amk-layer-probe (or: nvcc -O3 -std=c++17
 *   -gencode=arch=compute_90a,code=sm_90a bench/amk-layer-probe.cu -o amk-layer-probe)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "probe-common.cuh"


#define NCW      16            /* consumer warps (all warps of LOCKSTEP) */
#define NCT      (NCW * 32)
#define NT_PAGED (NCT + 32)    /* + the loader warp */
#define PAGE     16384
#define RD       16            /* LOCKSTEP: cp.async slots per thread */
#define MAX_K    8192
#define MAX_ST   (5 * 64)
#define ATT_COLS 256           /* columns of the attention output per attention block */
#define CHASE    16384         /* words of the attention's L2-resident table */
#define WATCHDOG_NS 2000000000ull

enum { MATVEC = 0, ATTENTION = 1 };
enum { LOCKSTEP = 0, PAGED = 1, PAGED_QUIET = 2, PAGED_NO_WAITS = 3, LOCKSTEP_BULK = 4, PAGED_BULK = 5,
       PAGED_BULK_IDLE = 6, PAGED_LSU = 7 };
#define IS_LOCK(M) ((M) == LOCKSTEP || (M) == LOCKSTEP_BULK)
#define IS_BULK(M) ((M) == LOCKSTEP_BULK || (M) == PAGED_BULK || (M) == PAGED_BULK_IDLE || (M) == PAGED_LSU)
#define STORER ((NCW - 1) * 32)

struct Stage {
  int kind, n, k;
  const uint16_t *w;   /* n x k bf16, rows contiguous */
  const float *x;      /* k floats (ATTENTION: the q columns it copies) */
  float *y;            /* n floats */
  int att;             /* index of the layer's attention stage */
};

struct Probe {
  int n_stages, n_att;
  const float *nw;          /* MAX_K norm weights */
  const uint32_t *chase;
  uint32_t *counters;       /* one per stage */
  unsigned long long *times;/* per stage and block: wait done, signal */
  int chain, pages;
  int pieces;               /* bulk copies per page (PAGED modes but LSU) */
  int groups;               /* PAGED: 0 every consumer warp on every page; G: G groups of
                               warps take turns, x' in shared memory after the pages */
  int early;                /* groups: a warp hands its page back before its last
                               reduction of the page */
  int consume;              /* PAGED: 0 the products; timing only: 1 without the reduction
                               per page, 2 the page's reads alone */
  unsigned long long *stalls; /* PAGED, per block: cycles the loader waited for empty
                                 pages, and consumer warp 0 for full ones */
};

__constant__ Stage c_st[MAX_ST];

/* ---- primitives --------------------------------------------------------------------------- */

__device__ __forceinline__ uint32_t ld_acquire (const uint32_t *p)
{ uint32_t v; asm volatile ("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void red_release (uint32_t *p, uint32_t v)
{ asm volatile ("red.release.gpu.global.add.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ uint32_t ld_cg (const uint32_t *p)
{ uint32_t v; asm volatile ("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ uint64_t evict_first (void)
{ uint64_t p; asm volatile ("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p; }

/* the consumers' barrier (PAGED: the loader warp is not in it) */
template <int MODE>
__device__ __forceinline__ void cbar (void)
{
  if (IS_LOCK (MODE))
    __syncthreads ();
  else
    asm volatile ("bar.sync 1, %0;" : : "n"(NCT) : "memory");
}

__device__ __forceinline__ void stuck (const char *what, int s, uint32_t a, uint32_t b)
{
  printf ("STUCK block %d thread %d: %s stage %d (%u, %u)\n", blockIdx.x, threadIdx.x, what, s, a, b);
  __trap ();
}

/* thread 0: counter >= target, with a watchdog */
__device__ __forceinline__ void wait_counter (const uint32_t *c, uint32_t target, int s)
{
  const uint64_t t0 = now_ns ();
  uint32_t v;
  while ((v = ld_acquire (c)) < target)
    if (now_ns () - t0 > WATCHDOG_NS)
      stuck ("counter", s, v, target);
}

/* returns the cycles it waited */
__device__ __forceinline__ uint64_t mb_wait (uint64_t *b, uint32_t parity, const char *what, int s)
{
  if (mb_try (b, parity))
    return 0;
  const uint64_t c0 = clock64 ();
  const uint64_t t0 = now_ns ();
  while (!mb_try (b, parity))
    if (now_ns () - t0 > WATCHDOG_NS)
      stuck (what, s, parity, 0);
  return clock64 () - c0;
}
/* one bulk copy onto a page's full barrier, whose expected bytes the caller has set */
__device__ __forceinline__ void bulk_copy (void *dst, const void *src, uint32_t bytes, uint64_t *bar, uint64_t pol)
{
  asm volatile ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                : : "r"(sa (dst)), "l"(src), "r"(bytes), "r"(sa (bar)), "l"(pol) : "memory");
}

__device__ __forceinline__ void tile_of (int n, int &r0, int &rows)
{
  r0 = (int) ((int64_t) blockIdx.x * n / gridDim.x) & ~3; /* 16-byte aligned rows of y */
  const int r1 = blockIdx.x + 1 == gridDim.x ? n : (int) ((int64_t) (blockIdx.x + 1) * n / gridDim.x) & ~3;
  rows = r1 - r0;
}

/* attention block index of this block, or -1: blocks spread over the device */
__device__ __forceinline__ int att_index (int n_att)
{
  const int stride = (int) gridDim.x / n_att;
  return (int) blockIdx.x % stride == 0 && (int) blockIdx.x / stride < n_att ? (int) blockIdx.x / stride : -1;
}

/* rsqrt(mean(x^2) + eps) over the consumers */
template <int MODE>
__device__ float norm_scale (const float *x, int k, float *red)
{
  const int t = threadIdx.x;
  float ss = 0.0f;
  for (int i = t; i < k; i += NCT)
    ss = fmaf (x[i], x[i], ss);
  ss = warp_sum (ss);
  if ((t & 31) == 0)
    red[t >> 5] = ss;
  cbar<MODE> ();
  float tot = 0.0f;
  for (int w = 0; w < NCW; w++)
    tot += red[w];
  cbar<MODE> ();
  return rsqrtf (tot / (float) k + 1e-5f);
}

/* the attention stand-in: `chain` rounds of an L2 load per thread whose address depends on
 * the last round's block-wide sum, then the block's share of q copied to the output */
template <int MODE>
__device__ void attention (const Probe &p, const Stage &st, int a, float *red, float *out_sm)
{
  const int t = threadIdx.x;
  uint32_t v = (uint32_t) a * 977u;
  for (int i = 0; i < p.chain; i++)
    {
      float s = (float) ld_cg (p.chase + ((v + (uint32_t) t * 7u) & (CHASE - 1)));
      s = warp_sum (s);
      if ((t & 31) == 0)
        red[(i & 1) * NCW + (t >> 5)] = s;
      cbar<MODE> ();
      float tot = 0.0f;
      for (int w = 0; w < NCW; w++)
        tot += red[(i & 1) * NCW + w];
      v = (uint32_t) tot;
    }
  for (int c = t; c < ATT_COLS; c += NCT)
    {
      const float o = st.x[a * ATT_COLS + c] + (v == 0xffffffffu ? 1.0f : 0.0f);
      if (IS_BULK (MODE))
        out_sm[c] = o;
      else
        st.y[a * ATT_COLS + c] = o;
    }
}

/* after the stage's writes: every consumer done, then thread 0 signals (release: the
 * barrier ordered the block's writes before it) and records the times */
template <int MODE>
__device__ __forceinline__ void finish (const Probe &p, int s, uint64_t t_go)
{
  cbar<MODE> ();
  if (threadIdx.x == 0)
    {
      red_release (p.counters + s, 1u);
      unsigned long long *tm = p.times + ((size_t) s * gridDim.x + blockIdx.x) * 2;
      tm[0] = t_go;
      tm[1] = now_ns ();
    }
}

/* BULK: the stage's output is in shared memory; one storer thread (not thread 0, which
 * polls next) writes it with a bulk copy, waits for that copy to complete and then adds
 * to the counter without a fence: a gpu-scope fence waits for every load the SM has in
 * flight (scratch/release-probe), a bulk group's completion only for its own writes */
template <int MODE>
__device__ __forceinline__ void finish_bulk (const Probe &p, int s, uint64_t t_go, const float *src, float *dst, int n)
{
  asm volatile ("fence.proxy.async.shared::cta;" : : : "memory");
  cbar<MODE> ();
  if (threadIdx.x == 0)
    p.times[((size_t) s * gridDim.x + blockIdx.x) * 2] = t_go;
  if (threadIdx.x == STORER)
    {
      if (n > 0)
        {
          asm volatile ("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                        : : "l"(dst), "r"(sa (src)), "r"(n * 4) : "memory");
          asm volatile ("cp.async.bulk.commit_group;\n cp.async.bulk.wait_group 0;" : : : "memory");
        }
      asm volatile ("red.relaxed.gpu.global.add.u32 [%0], 1;" : : "l"(p.counters + s) : "memory");
      p.times[((size_t) s * gridDim.x + blockIdx.x) * 2 + 1] = now_ns ();
    }
}

/* thread 0 waits for the stage before, the consumers learn it at a barrier */
template <int MODE>
__device__ __forceinline__ uint64_t wait_stage (const Probe &p, int s)
{
  uint64_t t = 0;
  if (threadIdx.x == 0)
    {
      if (s > 0 && MODE != PAGED_NO_WAITS)
        {
          const Stage &prev = c_st[s - 1];
          wait_counter (p.counters + s - 1, prev.kind == ATTENTION ? (uint32_t) p.n_att : gridDim.x, s);
        }
      t = now_ns ();
    }
  cbar<MODE> ();
  return t;
}

/* an attention block's stage: its waits, the chain, its output and signal (BULK: the
 * output goes through out_sm and the storer) */
template <int MODE>
__device__ __forceinline__ void attention_stage (const Probe &p, const Stage &st, int s, int a, float *red, float *out_sm)
{
  const uint64_t t = wait_stage<MODE> (p, s);
  attention<MODE> (p, st, a, red, out_sm);
  if (IS_BULK (MODE))
    finish_bulk<MODE> (p, s, t, out_sm, st.y + a * ATT_COLS, ATT_COLS);
  else
    finish<MODE> (p, s, t);
}

/* ---- LOCKSTEP ------------------------------------------------------------------------------ */

template <int MODE>
__global__ void __launch_bounds__ (NCT, 1) layer_lockstep (Probe p)
{
  __shared__ __align__ (16) float ys[2048];
  extern __shared__ __align__ (1024) unsigned char sm[];
  float *xs = reinterpret_cast<float *> (sm + NCT * RD * 16);
  __shared__ float red[2 * NCW];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint32_t ring = sa (sm);
  const uint64_t pol = evict_first ();
  const int a = att_index (p.n_att);

  for (int s = 0; s < p.n_stages; s++)
    {
      const Stage &st = c_st[s];
      if (st.kind == ATTENTION)
        {
          if (a < 0)
            continue;
          attention_stage<MODE> (p, st, s, a, red, ys);
          continue;
        }
      int r0, n;
      tile_of (st.n, r0, n);
      const int J = st.k / 256; /* 16-byte chunks per lane per row */
      const int T = n > warp ? ((n - 1 - warp) / NCW + 1) * J : 0;
      const uint16_t *w = st.w + (size_t) r0 * st.k;
      auto issue = [&] (int tt) {
        if (tt < T)
          {
            const int row = warp + NCW * (tt / J), c = lane + 32 * (tt % J);
            asm volatile ("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;"
                          : : "r"(ring + ((tt & (RD - 1)) * NCT + threadIdx.x) * 16),
                              "l"(w + (size_t) row * st.k + c * 8), "l"(pol) : "memory");
          }
        asm volatile ("cp.async.commit_group;" : : : "memory");
      };
      for (int tt = 0; tt < RD - 1; tt++) /* W is constant: before the wait */
        issue (tt);
      const uint64_t t = wait_stage<MODE> (p, s);
      const float sc = norm_scale<MODE> (st.x, st.k, red);
      for (int i = threadIdx.x; i < st.k; i += NCT)
        xs[i] = st.x[i] * sc * p.nw[i];
      __syncthreads ();
      float acc = 0.0f;
      for (int tt = 0; tt < T; tt++)
        {
          issue (tt + RD - 1);
          asm volatile ("cp.async.wait_group %0;" : : "n"(RD - 1) : "memory");
          const uint4 v = reinterpret_cast<const uint4 *> (sm)[(tt & (RD - 1)) * NCT + threadIdx.x];
          const int c = lane + 32 * (tt % J);
          acc = dot8 (v, xs + c * 8, acc);
          if (tt % J == J - 1)
            {
              acc = warp_sum (acc);
              if (lane == 0 && IS_BULK (MODE))
                ys[warp + NCW * (tt / J)] = acc;
              else if (lane == 0)
                st.y[r0 + warp + NCW * (tt / J)] = acc;
              acc = 0.0f;
            }
        }
      asm volatile ("cp.async.wait_all;" : : : "memory");
      if (IS_BULK (MODE))
        finish_bulk<MODE> (p, s, t, ys, st.y + r0, n);
      else
        finish<MODE> (p, s, t);
    }
}

/* ---- PAGED --------------------------------------------------------------------------------- */

/* A matvec tile streams as its bytes in order (rows are contiguous), page after page. A
 * row is R = 2 k bytes, which divides the page or is a multiple of it (checked on the
 * host): a page then holds whole rows, or a piece of one, and warp w always reads the
 * same 1 KiB segment of a row (its 512 columns), so its x' stays in registers. */
template <int MODE>
__global__ void __launch_bounds__ (NT_PAGED, 1) layer_paged (Probe p)
{
  extern __shared__ __align__ (1024) unsigned char sm[];
  __shared__ uint64_t full[32], empty[32];
  __shared__ float red[2 * NCW];
  __shared__ __align__ (16) float rowacc[2048];
  __shared__ volatile int s_done; /* stages the consumers have finished */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int a = att_index (p.n_att);
  const int np = p.pages;

  if (threadIdx.x == 0)
    {
      for (int i = 0; i < np; i++)
        mb_init (&full[i], MODE == PAGED_LSU ? 32 : 1), mb_init (&empty[i], p.groups > 0 ? NCW / p.groups : NCW);
      s_done = 0;
      asm volatile ("fence.mbarrier_init.release.cluster;" : : : "memory");
    }
  __syncthreads ();

  if (warp == NCW)
    {
      /* the loader: every matvec tile of the block, in stage order */
      if (lane != 0 && MODE != PAGED_LSU)
        return;
      const uint64_t pol = evict_first ();
      uint32_t g = 0;
      uint64_t stall = 0;
      for (int s = 0; s < p.n_stages; s++)
        {
          const Stage &st = c_st[s];
          if (st.kind != MATVEC)
            continue;
          /* quiet: nothing after the attention while it runs here */
          if (MODE == PAGED_QUIET && a >= 0 && s > st.att)
            {
              const uint64_t t0 = now_ns ();
              while (s_done <= st.att)
                if (now_ns () - t0 > WATCHDOG_NS)
                  stuck ("quiet loader", s, s_done, st.att);
            }
          int r0, n;
          tile_of (st.n, r0, n);
          const unsigned char *src = reinterpret_cast<const unsigned char *> (st.w + (size_t) r0 * st.k);
          const uint32_t bytes = (uint32_t) n * st.k * 2;
          for (uint32_t off = 0; off < bytes; off += PAGE, g++)
            {
              const uint32_t slot = g % np;
              if (g >= (uint32_t) np)
                stall += mb_wait (&empty[slot], ((g / np) - 1) & 1, "empty page", s);
              const uint32_t len = min ((uint32_t) PAGE, bytes - off);
              if (MODE == PAGED_LSU)
                {
                  /* every lane copies its 16-byte chunks; the page is full once each
                   * lane's copies have landed (one no-increment arrive per lane) */
                  for (uint32_t c = lane * 16; c < len; c += 32 * 16)
                    asm volatile ("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;"
                                  : : "r"(sa (sm + slot * PAGE + c)), "l"(src + off + c), "l"(pol) : "memory");
                  asm volatile ("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" : : "r"(sa (&full[slot])) : "memory");
                }
              else
                {
                  asm volatile ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                                : : "r"(sa (&full[slot])), "r"(len) : "memory");
                  const uint32_t piece = len / p.pieces;
                  for (int i = 0; i < p.pieces; i++)
                    bulk_copy (sm + slot * PAGE + i * piece, src + off + i * piece,
                               i + 1 == p.pieces ? len - i * piece : piece, &full[slot], pol);
                }
            }
        }
      if (lane == 0)
        p.stalls[blockIdx.x * 2] = stall;
      return;
    }

  /* the consumers */
  uint32_t g = 0;
  uint64_t stall = 0;
  for (int s = 0; s < p.n_stages; s++)
    {
      const Stage &st = c_st[s];
      if (st.kind == ATTENTION)
        {
          if (a >= 0)
            {
              attention_stage<MODE> (p, st, s, a, red, rowacc);
            }
          if (threadIdx.x == 0)
            s_done = s + 1;
          continue;
        }
      int r0, n;
      tile_of (st.n, r0, n);
      const int R = st.k * 2;                       /* bytes per row */
      const int segs = R / 1024;                    /* warps per row (or per page) */
      const int rpp = R <= PAGE ? PAGE / R : 0;     /* rows per page (0: pages per row) */
      const int ppr = R <= PAGE ? 1 : R / PAGE;
      const int seg = warp % (rpp ? segs : NCW);    /* this warp's 1 KiB of a row's page */
      const uint32_t pages = ((uint32_t) n * R + PAGE - 1) / PAGE;

      const uint64_t t = wait_stage<MODE> (p, s);
      const float sc = norm_scale<MODE> (st.x, st.k, red);
      float xv[16], lacc = 0.0f;
      uint32_t xsum = 0;
      for (int i = threadIdx.x; i < n; i += NCT)
        rowacc[i] = 0.0f;
      if (p.groups > 0)
        {
          /* groups of WG warps take turns, page q going to group q % G; each warp
           * reads 16 / WG consecutive 1 KiB segments of its page (a whole row of the
           * 2048-column matvecs at four warps) against x' staged in shared memory */
          const int G = p.groups, WG = NCW / G, spw = 16 / WG, grp = warp / WG, wi = warp % WG;
          float *xs = reinterpret_cast<float *> (sm + np * PAGE);
          for (int i = threadIdx.x; i < st.k; i += NCT)
            xs[i] = st.x[i] * sc * p.nw[i];
          cbar<MODE> ();
          auto add_row = [&] (int r, float v) {
            v = warp_sum (v);
            if (lane == 0)
              atomicAdd (&rowacc[r], v);
          };
          auto hand_back = [&] (uint32_t slot) {
            __syncwarp ();
            if (lane == 0)
              mb_arrive (&empty[slot]);
          };
          for (uint32_t q = grp; q < pages; q += G)
            {
              const uint32_t gq = g + q, slot = gq % np;
              stall += mb_wait (&full[slot], (gq / np) & 1, "full page", s);
              float acc = 0.0f;
              int cur = -1;
              for (int j = 0; j < spw; j++)
                {
                  const int sg = wi * spw + j;
                  const int row = rpp ? (int) q * rpp + sg / segs : (int) (q / ppr);
                  const int col = rpp ? (sg % segs) * 512 : (int) (q % ppr) * (PAGE / 2) + sg * 512;
                  if (row >= n)
                    break;
                  if (row != cur && cur >= 0)
                    {
                      add_row (cur, acc);
                      acc = 0.0f;
                    }
                  cur = row;
                  const uint4 *pg = reinterpret_cast<const uint4 *> (sm + slot * PAGE + sg * 1024);
                  acc = dot8 (pg[lane], xs + col + lane * 8, acc);
                  acc = dot8 (pg[lane + 32], xs + col + (lane + 32) * 8, acc);
                }
              if (p.early) /* the page back before the last row's reduction */
                hand_back (slot);
              if (cur >= 0)
                add_row (cur, acc);
              if (!p.early)
                hand_back (slot);
            }
          g += pages;
        }
      else
      for (uint32_t q = 0; q < pages; q++, g++)
        {
          /* page q: rows q rpp .. (whole rows), or piece q % ppr of row q / ppr */
          const int row = rpp ? (int) q * rpp + warp / segs : (int) (q / ppr);
          const int col = rpp ? seg * 512 : (int) (q % ppr) * (PAGE / 2) + warp * 512;
          if (q == 0 || !rpp) /* x' of this warp's columns: fixed while rows fit a page */
#pragma unroll
            for (int e = 0; e < 8; e++)
              {
                const int c0 = col + lane * 8 + e, c1 = col + (lane + 32) * 8 + e;
                xv[e] = st.x[c0] * sc * p.nw[c0];
                xv[8 + e] = st.x[c1] * sc * p.nw[c1];
              }
          if (q == 0)
            cbar<MODE> (); /* rowacc zeroed */
          const uint32_t slot = g % np;
          stall += mb_wait (&full[slot], (g / np) & 1, "full page", s);
          if (MODE != PAGED_BULK_IDLE && row < n && (rpp == 0 || warp / segs < rpp))
            {
              const uint4 *pg = reinterpret_cast<const uint4 *> (sm + slot * PAGE +
                                                                (rpp ? (warp / segs) * R + seg * 1024 : warp * 1024));
              if (p.consume == 2)
                {
                  const uint4 u = pg[lane], v = pg[lane + 32];
                  xsum ^= u.x ^ u.y ^ u.z ^ u.w ^ v.x ^ v.y ^ v.z ^ v.w;
                }
              else
                {
                  float acc = dot8 (pg[lane], xv, 0.0f);
                  acc = dot8 (pg[lane + 32], xv + 8, acc);
                  if (p.consume == 1)
                    lacc += acc;
                  else
                    {
                      acc = warp_sum (acc);
                      if (lane == 0)
                        atomicAdd (&rowacc[row], acc);
                    }
                }
            }
          __syncwarp ();
          if (lane == 0)
            mb_arrive (&empty[slot]);
        }
      if (p.consume) /* keep the timing-only work live: one add a warp */
        {
          const float v = warp_sum (lacc + (float) (xsum & 1u));
          if (lane == 0)
            atomicAdd (&rowacc[0], v);
        }
      if (IS_BULK (MODE))
        finish_bulk<MODE> (p, s, t, rowacc, st.y + r0, n);
      else
        {
          cbar<MODE> ();
          for (int i = threadIdx.x; i < n; i += NCT)
            st.y[r0 + i] = rowacc[i];
          finish<MODE> (p, s, t);
        }
      if (threadIdx.x == 0)
        s_done = s + 1;
    }
  if (threadIdx.x == 0)
    p.stalls[blockIdx.x * 2 + 1] = stall;
}

/* ---- host ------------------------------------------------------------------------------------ */

/* deterministic bf16 weights: sign and 7 mantissa bits from a hash, magnitude 2^-5 .. 2^-4 */
__host__ __device__ static inline uint16_t w_bits (uint64_t i)
{
  uint64_t h = i * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return (uint16_t) (((h >> 8) & 1u) << 15 | (122u << 7) | (h & 0x7fu));
}
static float bf_to_f (uint16_t b) { uint32_t u = (uint32_t) b << 16; float f; memcpy (&f, &u, 4); return f; }

__global__ void fill_w (uint16_t *w, size_t n, uint64_t seed)
{
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x)
    w[i] = w_bits (seed + i);
}

int main (int argc, char **argv)
{
  const int chain = argc > 1 ? atoi (argv[1]) : 16;
  const int np = argc > 2 ? atoi (argv[2]) : 11;
  const int layers = argc > 3 ? atoi (argv[3]) : 16;
  const int n_att = 8;
  int sms, coop;
  CK (cudaDeviceGetAttribute (&sms, cudaDevAttrMultiProcessorCount, 0));
  CK (cudaDeviceGetAttribute (&coop, cudaDevAttrCooperativeLaunch, 0));
  if (np < 2 || np > 11 || layers < 2 || layers * 5 > MAX_ST || !coop)
    {
      fprintf (stderr, "usage: amk-layer-probe [chain] [pages 2..11] [layers 2..64]\n");
      return 2;
    }

  /* the copy rate */
  double copy_tbs;
  {
    const size_t bytes = 1ull << 30;
    void *s, *d;
    CK (cudaMalloc (&s, bytes));
    CK (cudaMalloc (&d, bytes));
    CK (cudaMemset (s, 1, bytes));
    cudaEvent_t e0, e1;
    CK (cudaEventCreate (&e0));
    CK (cudaEventCreate (&e1));
    std::vector<float> ts;
    for (int i = 0; i < 8; i++)
      {
        CK (cudaEventRecord (e0));
        CK (cudaMemcpyAsync (d, s, bytes, cudaMemcpyDeviceToDevice));
        CK (cudaEventRecord (e1));
        CK (cudaEventSynchronize (e1));
        float ms;
        CK (cudaEventElapsedTime (&ms, e0, e1));
        if (i > 0)
          ts.push_back (ms);
      }
    std::sort (ts.begin (), ts.end ());
    copy_tbs = 2.0 * bytes / ts[ts.size () / 2] / 1e9;
    printf ("copy 1 GiB: %.2f TB/s (read + write)\n", copy_tbs);
    CK (cudaFree (s));
    CK (cudaFree (d));
  }

  /* the stages */
  struct Shape { int kind, n, k; const char *name; };
  const Shape shapes[5] = { { MATVEC, 3072, 2048, "qkv" }, { ATTENTION, 2048, 0, "attention" },
                            { MATVEC, 2048, 2048, "o" }, { MATVEC, 16384, 2048, "gate/up" },
                            { MATVEC, 2048, 8192, "down" } };
  std::vector<Stage> st (layers * 5);
  std::vector<uint64_t> seeds (layers * 5);
  double wbytes = 0;
  float *x0;
  CK (cudaMalloc (&x0, 2048 * 4));
  {
    std::vector<float> hx (2048);
    for (int i = 0; i < 2048; i++)
      hx[i] = bf_to_f (w_bits (77777 + i)) * 32.0f;
    CK (cudaMemcpy (x0, hx.data (), 2048 * 4, cudaMemcpyHostToDevice));
  }
  const float *prev_y = x0;
  for (int l = 0; l < layers; l++)
    for (int j = 0; j < 5; j++)
      {
        Stage &s = st[l * 5 + j];
        s.kind = shapes[j].kind;
        s.n = shapes[j].n;
        s.k = shapes[j].k;
        s.att = l * 5 + 1;
        s.x = prev_y;
        CK (cudaMalloc (&s.y, (size_t) s.n * 4));
        s.w = nullptr;
        if (s.kind == MATVEC)
          {
            const size_t n = (size_t) s.n * s.k;
            uint16_t *w;
            CK (cudaMalloc (&w, n * 2));
            seeds[l * 5 + j] = ((uint64_t) (l * 5 + j) << 40);
            fill_w<<<1024, 256>>> (w, n, seeds[l * 5 + j]);
            s.w = w;
            wbytes += n * 2.0;
            const int R = s.k * 2;
            if (!(PAGE % R == 0 || R % PAGE == 0) || R % 1024 != 0 || s.k > MAX_K ||
                (s.n + sms - 1) / sms > 2048)
              {
                fprintf (stderr, "shape %s not supported\n", shapes[j].name);
                return 2;
              }
          }
        prev_y = s.y;
      }
  CK (cudaMemcpyToSymbol (c_st, st.data (), sizeof (Stage) * st.size ()));
  CK (cudaGetLastError ());

  Probe p = {};
  p.n_stages = layers * 5;
  p.n_att = n_att;
  p.chain = chain;
  p.pages = np;
  p.pieces = 1;
  {
    std::vector<float> hn (MAX_K);
    std::vector<uint32_t> hc (CHASE);
    for (int i = 0; i < MAX_K; i++)
      hn[i] = 1.0f + bf_to_f (w_bits (55555 + i)) * 4.0f;
    for (int i = 0; i < CHASE; i++)
      hc[i] = (uint32_t) (w_bits (99999 + i) & 0x7f);
    float *dn;
    uint32_t *dc;
    CK (cudaMalloc (&dn, MAX_K * 4));
    CK (cudaMalloc (&dc, CHASE * 4));
    CK (cudaMemcpy (dn, hn.data (), MAX_K * 4, cudaMemcpyHostToDevice));
    CK (cudaMemcpy (dc, hc.data (), CHASE * 4, cudaMemcpyHostToDevice));
    p.nw = dn;
    p.chase = dc;
  }
  CK (cudaMalloc (&p.counters, MAX_ST * 4));
  CK (cudaMalloc (&p.times, (size_t) MAX_ST * sms * 2 * 8));
  CK (cudaMalloc (&p.stalls, (size_t) sms * 2 * 8));

  const double floor_ms = wbytes / (copy_tbs * 1e12) * 1e3;
  printf ("%d layers, %.1f MB of weights: floor %.3f ms at the copy rate; attention chain %d "
          "round trips on %d blocks; %d pages of 16 KiB\n", layers, wbytes / 1e6, floor_ms, chain,
          n_att, np);

  const int smem_lock = NCT * RD * 16 + MAX_K * 4;
  const int smem_paged = np * PAGE + MAX_K * 4;
  CK (cudaFuncSetAttribute (layer_lockstep<LOCKSTEP>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_lock));
  CK (cudaFuncSetAttribute (layer_lockstep<LOCKSTEP_BULK>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_lock));
  CK (cudaFuncSetAttribute (layer_paged<PAGED_BULK>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_paged));
  CK (cudaFuncSetAttribute (layer_paged<PAGED_BULK_IDLE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_paged));
  CK (cudaFuncSetAttribute (layer_paged<PAGED_LSU>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_paged));
  CK (cudaFuncSetAttribute (layer_paged<PAGED>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_paged));
  CK (cudaFuncSetAttribute (layer_paged<PAGED_QUIET>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_paged));
  CK (cudaFuncSetAttribute (layer_paged<PAGED_NO_WAITS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_paged));

  auto run = [&] (int mode, const char *name) {
    void *args[] = { &p };
    const void *fn = mode == LOCKSTEP ? (const void *) layer_lockstep<LOCKSTEP>
                     : mode == LOCKSTEP_BULK ? (const void *) layer_lockstep<LOCKSTEP_BULK>
                     : mode == PAGED_BULK ? (const void *) layer_paged<PAGED_BULK>
                     : mode == PAGED_BULK_IDLE ? (const void *) layer_paged<PAGED_BULK_IDLE>
                     : mode == PAGED_LSU ? (const void *) layer_paged<PAGED_LSU>
                     : mode == PAGED ? (const void *) layer_paged<PAGED>
                     : mode == PAGED_QUIET ? (const void *) layer_paged<PAGED_QUIET>
                     : (const void *) layer_paged<PAGED_NO_WAITS>;
    const int nt = IS_LOCK (mode) ? NCT : NT_PAGED;
    const int smem = IS_LOCK (mode) ? smem_lock : smem_paged;
    cudaEvent_t e0, e1;
    CK (cudaEventCreate (&e0));
    CK (cudaEventCreate (&e1));
    std::vector<float> ts;
    std::vector<double> span (5, 0.0), chain_us;
    std::vector<unsigned long long> tm ((size_t) p.n_stages * sms * 2), stl ((size_t) sms * 2);
    double stall_l = 0, stall_c = 0;
    for (int i = 0; i < 10; i++)
      {
        CK (cudaMemset (p.counters, 0, MAX_ST * 4));
        CK (cudaMemset (p.times, 0, (size_t) MAX_ST * sms * 2 * 8));
        CK (cudaMemset (p.stalls, 0, (size_t) sms * 2 * 8));
        CK (cudaEventRecord (e0));
        CK (cudaLaunchCooperativeKernel (fn, sms, nt, args, smem));
        CK (cudaEventRecord (e1));
        CK (cudaEventSynchronize (e1));
        float ms;
        CK (cudaEventElapsedTime (&ms, e0, e1));
        if (i < 3)
          continue;
        ts.push_back (ms);
        /* stage spans and the attention's own time, from the last launches' records */
        CK (cudaMemcpy (tm.data (), p.times, tm.size () * 8, cudaMemcpyDeviceToHost));
        CK (cudaMemcpy (stl.data (), p.stalls, stl.size () * 8, cudaMemcpyDeviceToHost));
        for (int b = 0; b < sms; b++)
          stall_l += stl[b * 2] / 1980.0 / sms, stall_c += stl[b * 2 + 1] / 1980.0 / sms;
        auto end_of = [&] (int s) {
          unsigned long long e = 0;
          for (int b = 0; b < sms; b++)
            e = std::max (e, tm[((size_t) s * sms + b) * 2 + 1]);
          return e;
        };
        for (int s = 5; s < p.n_stages; s++)
          span[s % 5] += (end_of (s) - end_of (s - 1)) / 1e3;
        for (int s = 6; s < p.n_stages; s += 5)
          for (int b = 0; b < sms; b++)
            if (tm[((size_t) s * sms + b) * 2 + 1] != 0)
              chain_us.push_back ((tm[((size_t) s * sms + b) * 2 + 1] - tm[((size_t) s * sms + b) * 2]) / 1e3);
      }
    std::sort (ts.begin (), ts.end ());
    const double ms = ts[ts.size () / 2];
    const int nl = (int) ts.size () * (layers - 1);
    double att = 0;
    for (double c : chain_us)
      att += c;
    printf ("%-34s %7.3f ms  %.2f of floor  %.1f us/layer | spans us: qkv %.1f attention %.1f o %.1f "
            "gate/up %.1f down %.1f | attention alone %.2f us",
            name, ms, floor_ms / ms, ms * 1e3 / layers, span[0] / nl, span[1] / nl, span[2] / nl,
            span[3] / nl, span[4] / nl, chain_us.empty () ? 0.0 : att / chain_us.size ());
    if (!IS_LOCK (mode)) /* a launch's waits, mean over blocks, at 1.98 GHz */
      printf (" | waits us: loader %.0f, consumers %.0f", stall_l / ts.size (), stall_c / ts.size ());
    printf ("\n");
    fflush (stdout);

    /* every matvec of the last layer against the host, from the device's inputs */
    bool ok = true;
    if (mode == PAGED_BULK_IDLE || p.consume != 0) /* computes nothing, or timing only */
      {
        CK (cudaEventDestroy (e0));
        CK (cudaEventDestroy (e1));
        return ms;
      }
    for (int j = 0; j < 5; j++)
      {
        const Stage &s = st[(layers - 1) * 5 + j];
        if (s.kind != MATVEC)
          continue;
        std::vector<float> hx (s.k), hy (s.n), hn (s.k);
        CK (cudaMemcpy (hx.data (), s.x, s.k * 4, cudaMemcpyDeviceToHost));
        CK (cudaMemcpy (hy.data (), s.y, s.n * 4, cudaMemcpyDeviceToHost));
        CK (cudaMemcpy (hn.data (), p.nw, s.k * 4, cudaMemcpyDeviceToHost));
        double ss = 0;
        for (float v : hx)
          ss += (double) v * v;
        const double sc = 1.0 / sqrt (ss / s.k + 1e-5);
        double err = 0, nrm = 0;
        for (int r = 0; r < s.n; r += 37)
          {
            double ref = 0;
            for (int c = 0; c < s.k; c++)
              ref += (double) bf_to_f (w_bits (seeds[(layers - 1) * 5 + j] + (uint64_t) r * s.k + c)) *
                     hx[c] * sc * hn[c];
            err += (hy[r] - ref) * (hy[r] - ref);
            nrm += ref * ref;
          }
        if (!(sqrt (err / nrm) < 1e-4))
          {
            printf ("  FAIL %s: %s relative error %.3g\n", name, shapes[j].name, sqrt (err / nrm));
            ok = false;
          }
      }
    if (ok)
      printf ("  %s: last layer's matvecs match the host\n", name);
    CK (cudaEventDestroy (e0));
    CK (cudaEventDestroy (e1));
    return ms;
  };

  for (int round = 0; round < 2; round++)
    {
      run (LOCKSTEP, "lockstep (first VM)");
      run (LOCKSTEP_BULK, "lockstep, bulk-store signal");
      run (PAGED_BULK, "paged, bulk-store signal");
      run (PAGED_LSU, "paged, lanes' cp.async, bulk-store");
      p.consume = 1;
      run (PAGED_BULK, "paged, bulk-store, no reduction");
      p.consume = 2;
      run (PAGED_BULK, "paged, bulk-store, page reads only");
      p.consume = 0;
    }
  const struct { int groups, early; } cfg[] = { { 1, 0 }, { 2, 0 }, { 4, 0 }, { 8, 0 }, { 2, 1 }, { 4, 1 } };
  for (int round = 0; round < 2; round++)
    for (const auto &c : cfg)
      {
        char name[64];
        snprintf (name, sizeof name, "paged, bulk-store, %d groups%s", c.groups, c.early ? ", page back early" : "");
        p.groups = c.groups;
        p.early = c.early;
        run (PAGED_BULK, name);
      }
  p.early = 0;
  p.groups = 0;
  p.pieces = 4;
  run (PAGED_BULK, "paged, 4 copies a page, bulk-store");
  p.pieces = 1;
  run (PAGED, "paged (loader warp, pages)");
  run (PAGED_QUIET, "paged, quiet attention");
  run (PAGED_NO_WAITS, "paged, no waits (streaming alone)");
  run (PAGED_BULK_IDLE, "paged, bulk-store, no products");
  const int saved = p.chain;
  p.chain = 0;
  run (LOCKSTEP, "lockstep, no attention chain");
  run (PAGED_BULK, "paged, bulk-store, no attention chain");
  run (PAGED_LSU, "paged, lanes' cp.async, no chain");
  run (PAGED_BULK_IDLE, "paged, bulk-store, no chain, no products");
  p.groups = 2;
  run (PAGED_BULK, "paged, bulk-store, 2 groups, no chain");
  p.early = 1;
  run (PAGED_BULK, "paged, 2 groups, page back early, no chain");
  p.early = 0;
  p.groups = 0;
  p.chain = saved;
  return 0;
}
