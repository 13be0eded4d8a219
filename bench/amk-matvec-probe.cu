/* amk-matvec-probe.cu: how fast can one block per SM stream a bf16 matvec tile, with plain
 * CUDA and no VM? Three ways of moving the weights, each run the way the megakernel runs
 * a layer's matvecs: every block takes one tile of rows of each of NMAT matrices in turn
 * (like gate, up, down on one queue), starts the next tile only when the last one is
 * done, fused RMSNORM of x at every tile start.
 *
 *   DIRECT: 16-byte ld.global.cs into registers, D per thread in flight, x' from L1
 *   RING:   cp.async 16-byte slots, 15 per thread in flight, x' staged in shared memory
 *   BULK:   one thread issues cp.async.bulk copies of whole stages (up to 16 KB: R rows)
 *           into NST shared-memory buffers, completing on mbarriers; every warp reads a
 *           fixed 64-chunk segment of a row, so its x' chunks stay in registers
 *
 * Prints TB/s per variant (bytes of W / median time of 9 launches, CUDA events) against a
 * device-to-device copy of 1 GiB measured in the same run.
 *
 *   built as build/bench/amk-matvec-probe (or: nvcc -O3 -std=c++17
 *   -gencode=arch=compute_90,code=sm_90 bench/amk-matvec-probe.cu -o amk-matvec-probe)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "probe-common.cuh"

#define NT 512

struct Job {
  const uint16_t *w;    /* NMAT matrices of N x K bf16, back to back */
  const float *x, *nw;  /* K floats each */
  float *y;             /* NMAT x N */
  int nmat, n, k;
};

/* rsqrt(mean(x^2) + eps) over the block */
__device__ float block_scale (const float *x, int k)
{
  __shared__ float red[32];
  float ss = 0.0f;
  for (int i = threadIdx.x; i < k; i += NT)
    ss = fmaf (x[i], x[i], ss);
  ss = warp_sum (ss);
  if ((threadIdx.x & 31) == 0)
    red[threadIdx.x >> 5] = ss;
  __syncthreads ();
  float t = 0.0f;
  for (int w = 0; w < NT / 32; w++)
    t += red[w];
  __syncthreads ();
  return rsqrtf (t / k + 1e-5f);
}

__device__ __forceinline__ void tile_of (const Job &j, int &r0, int &n)
{
  r0 = (int) ((int64_t) blockIdx.x * j.n / gridDim.x);
  n = (int) ((int64_t) (blockIdx.x + 1) * j.n / gridDim.x) - r0;
}

__device__ __forceinline__ uint4 ld_cs (const void *p)
{
  uint4 v;
  asm volatile ("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
                : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

/* ---- DIRECT ---------------------------------------------------------------------------- */
template <int D>
__global__ void __launch_bounds__ (NT, 1) mv_direct (Job j)
{
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, C = j.k / 8, J = C / 32;
  for (int m = 0; m < j.nmat; m++)
    {
      int r0, n;
      tile_of (j, r0, n);
      const float s = block_scale (j.x, j.k);
      const uint16_t *w = j.w + ((size_t) m * j.n + r0) * j.k;
      const int T = n > warp ? ((n - 1 - warp) / 16 + 1) * J : 0;
      float acc = 0.0f;
      for (int t = 0; t < T; t += D)
        {
          uint4 v[D];
#pragma unroll
          for (int u = 0; u < D; u++)
            {
              const int tt = t + u, row = warp + 16 * (tt / J), c = lane + 32 * (tt % J);
              v[u] = tt < T ? ld_cs (w + (size_t) row * j.k + c * 8) : make_uint4 (0, 0, 0, 0);
            }
#pragma unroll
          for (int u = 0; u < D; u++)
            {
              const int tt = t + u;
              if (tt >= T)
                break;
              const int c = lane + 32 * (tt % J);
              float xv[8];
#pragma unroll
              for (int e = 0; e < 8; e++)
                xv[e] = j.x[c * 8 + e] * s * j.nw[c * 8 + e];
              acc = dot8 (v[u], xv, acc);
              if (tt % J == J - 1)
                {
                  acc = warp_sum (acc);
                  if (lane == 0)
                    j.y[(size_t) m * j.n + r0 + warp + 16 * (tt / J)] = acc;
                  acc = 0.0f;
                }
            }
        }
      __syncthreads ();
    }
}

/* ---- RING (cp.async, 16 slots per thread) ------------------------------------------------ */
#define RD 16
/* INTER: block b takes rows b, b + G, b + 2 G, ... (G blocks) instead of one contiguous
 * run, so that at any moment the blocks read neighbouring rows */
template <bool INTER>
__global__ void __launch_bounds__ (NT, 1) mv_ring (Job j)
{
  extern __shared__ __align__ (16) unsigned char sm[];
  float *xs = reinterpret_cast<float *> (sm + NT * RD * 16);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, C = j.k / 8, J = C / 32;
  const uint32_t ring = (uint32_t) __cvta_generic_to_shared (sm);
  const int G = gridDim.x, b = blockIdx.x;
  const size_t rstride = INTER ? (size_t) G * j.k : (size_t) j.k;
  for (int m = 0; m < j.nmat; m++)
    {
      int r0, n;
      tile_of (j, r0, n);
      if (INTER)
        r0 = b, n = (j.n - b + G - 1) / G;
      const uint16_t *w = j.w + ((size_t) m * j.n + r0) * j.k;
      const int T = n > warp ? ((n - 1 - warp) / 16 + 1) * J : 0;
      auto issue = [&] (int tt) {
        if (tt < T)
          {
            const int row = warp + 16 * (tt / J), c = lane + 32 * (tt % J);
            asm volatile ("cp.async.cg.shared.global [%0], [%1], 16;"
                          : : "r"(ring + ((tt & (RD - 1)) * NT + threadIdx.x) * 16),
                              "l"(w + (size_t) row * rstride + c * 8) : "memory");
          }
        asm volatile ("cp.async.commit_group;" : : : "memory");
      };
      for (int tt = 0; tt < RD - 1; tt++)
        issue (tt);
      const float s = block_scale (j.x, j.k);
      for (int i = threadIdx.x; i < j.k; i += NT)
        xs[i] = j.x[i] * s * j.nw[i];
      __syncthreads ();
      float acc = 0.0f;
      for (int tt = 0; tt < T; tt++)
        {
          issue (tt + RD - 1);
          asm volatile ("cp.async.wait_group %0;" : : "n"(RD - 1) : "memory");
          const uint4 v = reinterpret_cast<const uint4 *> (sm)[(tt & (RD - 1)) * NT + threadIdx.x];
          const int c = lane + 32 * (tt % J);
          acc = dot8 (v, xs + c * 8, acc);
          if (tt % J == J - 1)
            {
              acc = warp_sum (acc);
              if (lane == 0)
                j.y[(size_t) m * j.n + r0 + (size_t) (warp + 16 * (tt / J)) * (INTER ? G : 1)] = acc;
              acc = 0.0f;
            }
        }
      asm volatile ("cp.async.wait_all;" : : : "memory");
      __syncthreads ();
    }
}

/* ---- BULK (cp.async.bulk + mbarrier stages) ---------------------------------------------- */

/* with a watchdog: a probe that deadlocks says where instead of hanging */
__device__ __forceinline__ void mb_wait (uint64_t *b, uint32_t parity)
{
  for (uint32_t spin = 0; !mb_try (b, parity); spin++)
    if (spin == (1u << 22))
      {
        printf ("DEADLOCK block %d thread %d barrier %p parity %u\n", blockIdx.x, threadIdx.x, b, parity);
        __trap ();
      }
}

__device__ __forceinline__ void bulk_load (void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
  asm volatile ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" : : "r"(sa (bar)), "r"(bytes) : "memory");
  asm volatile ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                : : "r"(sa (dst)), "l"(src), "r"(bytes), "r"(sa (bar)) : "memory");
}

#define SB 16384 /* bytes per stage */
/* MODE 0: as described; 1: x' computed once for all tiles (no per-tile norm); 2: no
 * arithmetic at all (the stages are only waited for): the copy engine's own rate. */
template <int NST, int MODE>
__global__ void __launch_bounds__ (NT, 1) mv_bulk (Job j)
{
  extern __shared__ __align__ (16) unsigned char sm[];
  __shared__ uint64_t full[NST], empty[NST];
  float *rowacc = reinterpret_cast<float *> (sm + NST * SB);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int C = j.k / 8, segs = C / 64, R = 1024 / C, S = R * C;
  const int wseg = warp % segs, wrow = warp / segs;
  const bool active = wrow < R;
  int r0, n;
  tile_of (j, r0, n);
  const int nst = (n + R - 1) / R;
  float xv[16];

  if (threadIdx.x == 0)
    {
      for (int i = 0; i < NST; i++)
        mb_init (&full[i], 1), mb_init (&empty[i], NT / 32);
      asm volatile ("fence.mbarrier_init.release.cluster;" : : : "memory");
    }
  __syncthreads ();

  /* global stage G = m nst + s lives in buffer G % NST */
  auto issue = [&] (int G) {
    const int m = G / nst, s = G % nst, b = G % NST;
    if (G >= NST)
      mb_wait (&empty[b], ((G / NST) - 1) & 1);
    const unsigned char *src = reinterpret_cast<const unsigned char *> (j.w + ((size_t) m * j.n + r0) * j.k);
    const int rows = min (R, n - s * R);
    bulk_load (sm + b * SB, src + (size_t) s * S * 16, rows * C * 16, &full[b]);
  };

  for (int m = 0; m < j.nmat; m++)
    {
      if (threadIdx.x == 0)
        for (int s = 0; s < min (NST, nst); s++)
          issue (m * nst + s);

      const int c0 = 64 * wseg + lane;
      if (MODE != 1 || m == 0)
        {
          const float sc = block_scale (j.x, j.k);
#pragma unroll
          for (int e = 0; e < 8; e++)
            {
              xv[e] = j.x[c0 * 8 + e] * sc * j.nw[c0 * 8 + e];
              xv[8 + e] = j.x[(c0 + 32) * 8 + e] * sc * j.nw[(c0 + 32) * 8 + e];
            }
        }
      for (int r = threadIdx.x; r < n; r += NT)
        rowacc[r] = 0.0f;
      __syncthreads ();

      for (int s = 0; s < nst; s++)
        {
          const int G = m * nst + s, b = G % NST;
          const int row = s * R + wrow;
          if (active && row < n)
            {
              mb_wait (&full[b], (G / NST) & 1);
              if (MODE == 2)
                goto done;
              const uint4 *st = reinterpret_cast<const uint4 *> (sm + b * SB) + wrow * C + c0;
              float acc = dot8 (st[0], xv, 0.0f);
              acc = dot8 (st[32], xv + 8, acc);
              acc = warp_sum (acc);
              if (lane == 0)
                atomicAdd (&rowacc[row], acc);
            }
        done:
          __syncwarp ();
          if (lane == 0)
            mb_arrive (&empty[b]);
          if (threadIdx.x == 0 && s + NST < nst)
            issue (G + NST);
        }
      __syncthreads ();
      for (int r = threadIdx.x; r < n; r += NT)
        j.y[(size_t) m * j.n + r0 + r] = rowacc[r];
      __syncthreads ();
    }
}

/* ---- host ------------------------------------------------------------------------------ */
template <typename F>
static float time_ms (F launch)
{
  cudaEvent_t a, b;
  CK (cudaEventCreate (&a));
  CK (cudaEventCreate (&b));
  std::vector<float> ts;
  launch ();
  CK (cudaDeviceSynchronize ());
  for (int i = 0; i < 9; i++)
    {
      CK (cudaEventRecord (a));
      launch ();
      CK (cudaEventRecord (b));
      CK (cudaEventSynchronize (b));
      float t;
      CK (cudaEventElapsedTime (&t, a, b));
      ts.push_back (t);
    }
  std::sort (ts.begin (), ts.end ());
  return ts[4];
}

static uint16_t to_bf (float f) { uint32_t u; memcpy (&u, &f, 4); return (uint16_t) ((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
static float from_bf (uint16_t h) { uint32_t u = (uint32_t) h << 16; float f; memcpy (&f, &u, 4); return f; }

int main (void)
{
  int sms;
  CK (cudaDeviceGetAttribute (&sms, cudaDevAttrMultiProcessorCount, 0));
  /* copy bandwidth */
  {
    const size_t bytes = 1ull << 30;
    void *a, *b;
    CK (cudaMalloc (&a, bytes));
    CK (cudaMalloc (&b, bytes));
    CK (cudaMemset (a, 1, bytes));
    const float t = time_ms ([&] { CK (cudaMemcpyAsync (b, a, bytes, cudaMemcpyDeviceToDevice)); });
    printf ("COPY 1 GiB: %.3f ms, %.2f TB/s (read + write)\n", t, 2.0 * bytes / t / 1e9);
    CK (cudaFree (a));
    CK (cudaFree (b));
  }
  struct Shape { int n, k, nmat; const char *what; };
  const Shape shapes[] = {
    { 8192, 2048, 8, "gate/up 8192x2048 x8" },
    { 2048, 8192, 8, "down 2048x8192 x8" },
    { 2048, 2048, 16, "o 2048x2048 x16" },
    { 16384, 2048, 4, "16384x2048 x4" },
  };
  for (const Shape &sh : shapes)
    {
      const size_t nw = (size_t) sh.nmat * sh.n * sh.k;
      std::vector<uint16_t> hw (nw);
      std::vector<float> hx (sh.k), hn (sh.k);
      srand (7);
      for (size_t i = 0; i < nw; i++)
        hw[i] = to_bf ((rand () / (float) RAND_MAX - 0.5f) * 0.1f);
      for (int i = 0; i < sh.k; i++)
        hx[i] = rand () / (float) RAND_MAX - 0.5f, hn[i] = 0.5f + rand () / (float) RAND_MAX;
      Job j;
      uint16_t *dw;
      float *dx, *dn, *dy;
      CK (cudaMalloc (&dw, nw * 2));
      CK (cudaMalloc (&dx, sh.k * 4));
      CK (cudaMalloc (&dn, sh.k * 4));
      CK (cudaMalloc (&dy, (size_t) sh.nmat * sh.n * 4));
      CK (cudaMemcpy (dw, hw.data (), nw * 2, cudaMemcpyHostToDevice));
      CK (cudaMemcpy (dx, hx.data (), sh.k * 4, cudaMemcpyHostToDevice));
      CK (cudaMemcpy (dn, hn.data (), sh.k * 4, cudaMemcpyHostToDevice));
      j = { dw, dx, dn, dy, sh.nmat, sh.n, sh.k };
      /* reference: a few rows of the last matrix */
      double ss = 0;
      for (int i = 0; i < sh.k; i++)
        ss += (double) hx[i] * hx[i];
      const double sc = 1.0 / sqrt (ss / sh.k + 1e-5);
      auto check = [&] (const char *name) {
        std::vector<float> hy ((size_t) sh.nmat * sh.n);
        CK (cudaMemcpy (hy.data (), dy, hy.size () * 4, cudaMemcpyDeviceToHost));
        double err = 0, nrm = 0;
        for (int r = 0; r < sh.n; r += 97)
          {
            const int m = sh.nmat - 1;
            double ref = 0;
            for (int c = 0; c < sh.k; c++)
              ref += (double) from_bf (hw[((size_t) m * sh.n + r) * sh.k + c]) * hx[c] * sc * hn[c];
            err += (hy[(size_t) m * sh.n + r] - ref) * (hy[(size_t) m * sh.n + r] - ref);
            nrm += ref * ref;
          }
        const double rel = sqrt (err / nrm);
        if (!(rel < 1e-4))
          printf ("FAIL %s: relative error %.3g\n", name, rel);
        return rel < 1e-4;
      };
      const double bytes = (double) nw * 2;
      auto report = [&] (const char *name, float ms) {
        printf ("%-24s %-28s %8.1f us  %.2f TB/s  %.1f GB/s per SM\n", sh.what, name, ms * 1e3,
                bytes / ms / 1e9, bytes / ms / 1e6 / sms);
        fflush (stdout);
      };
      float t;
      CK (cudaMemset (dy, 0xff, (size_t) sh.nmat * sh.n * 4));
      t = time_ms ([&] { mv_direct<8><<<sms, NT>>> (j); });
      if (check ("direct8")) report ("direct, 8 in flight", t);
      t = time_ms ([&] { mv_direct<16><<<sms, NT>>> (j); });
      if (check ("direct16")) report ("direct, 16 in flight", t);
      const int ring_smem = NT * RD * 16 + 4 * sh.k;
      CK (cudaFuncSetAttribute (mv_ring<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, ring_smem));
      CK (cudaFuncSetAttribute (mv_ring<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, ring_smem));
      CK (cudaMemset (dy, 0xff, (size_t) sh.nmat * sh.n * 4));
      t = time_ms ([&] { mv_ring<false><<<sms, NT, ring_smem>>> (j); });
      if (check ("ring")) report ("cp.async ring, 15 ahead", t);
      CK (cudaMemset (dy, 0xff, (size_t) sh.nmat * sh.n * 4));
      t = time_ms ([&] { mv_ring<true><<<sms, NT, ring_smem>>> (j); });
      if (check ("ring, rows interleaved")) report ("ring, rows interleaved", t);
      const int rows_max = (sh.n + sms - 1) / sms;
#define BULK(NST, MODE)                                                                     \
      {                                                                                     \
        const int smem = NST * SB + 4 * rows_max;                                           \
        CK (cudaFuncSetAttribute (mv_bulk<NST, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)); \
        CK (cudaMemset (dy, 0xff, (size_t) sh.nmat * sh.n * 4));                            \
        t = time_ms ([&] { mv_bulk<NST, MODE><<<sms, NT, smem>>> (j); });                   \
        char name[64];                                                                      \
        snprintf (name, sizeof name, "bulk, %d x 16 KB%s", NST,                             \
                  MODE == 1 ? ", x' once" : MODE == 2 ? ", no math" : "");                  \
        if (MODE == 2 || check (name)) report (name, t);                                    \
      }
      BULK (4, 0) BULK (12, 0) BULK (4, 1) BULK (12, 1) BULK (4, 2) BULK (12, 2)
      CK (cudaGetLastError ());
      CK (cudaFree (dw));
      CK (cudaFree (dx));
      CK (cudaFree (dn));
      CK (cudaFree (dy));
    }
  return 0;
}
