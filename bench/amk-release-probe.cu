/* amk-release-probe.cu: what signalling a counter and polling one cost on an SM whose
 * loads are in flight, and which signal avoids that cost (the second VM's storer role).
 * One block per SM: 16 worker warps, a loader warp and a signaller warp; every SM streams
 * its own slice of W while the signaller's lane 0 times one operation per sample with
 * clock64 (256 samples a block).
 *
 * Traffic: none; the loader keeping eight 16 KiB bulk copies in flight (pages); the
 *   workers keeping eight 16-byte ld.global a lane in flight; bursts: at each sample the
 *   signaller and the workers meet at a barrier, then every worker lane issues 2, 8 or 16
 *   cp.async of 16 bytes (16, 64 or 128 KiB a block, as the first VM's MATVEC issues its
 *   ring before the waits) while the signaller times its operation.
 * Operations: a store then red.release.gpu (the first VM's signal); a bulk store from
 *   shared memory, cp.async.bulk.wait_group 0, then red.relaxed.gpu (the storer's signal);
 *   a store then red.relaxed.gpu (no ordering: the bare cost); ld.acquire.gpu and
 *   ld.relaxed.gpu of a counter (a poll's round trip).
 *
 *   built as build/bench/amk-release-probe (bench/NOTES.md has what it measured)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>
#include "probe-common.cuh"

#define NW 16
#define NT ((NW + 2) * 32)
#define PAGE 16384
#define NP 8
#define SAMPLES 256
#define SLICE (8u << 20)
#define WATCHDOG_NS 2000000000ull

/* a page's copy landed; a copy that never lands traps instead of hanging the GPU */
__device__ __forceinline__ void page_wait (uint64_t *b, uint32_t parity)
{
  const uint64_t t0 = now_ns ();
  while (!mb_try (b, parity))
    if (now_ns () - t0 > WATCHDOG_NS)
      {
        printf ("STUCK block %d: page copy\n", blockIdx.x);
        __trap ();
      }
}

struct P {
  const unsigned char *w;
  uint32_t *ctr;
  uint4 *sink;
  unsigned long long *cyc, *bytes;
  int traffic, op;
};

__device__ __forceinline__ unsigned long long timed_op (const P &p, uint32_t *c, uint4 *dst, const uint4 *src_sm, int i)
{
  uint32_t v = 0;
  if (p.op == 0 || p.op == 2)
    asm volatile ("st.global.v4.u32 [%0], {%1,%1,%1,%1};" : : "l"(dst), "r"(i) : "memory");
  const long long t0 = clock64 ();
  if (p.op == 0)
    asm volatile ("red.release.gpu.global.add.u32 [%0], 1;" : : "l"(c) : "memory");
  else if (p.op == 1)
    {
      asm volatile ("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 16;" : : "l"(dst), "r"(sa (src_sm)) : "memory");
      asm volatile ("cp.async.bulk.commit_group;\n cp.async.bulk.wait_group 0;" : : : "memory");
      asm volatile ("red.relaxed.gpu.global.add.u32 [%0], 1;" : : "l"(c) : "memory");
    }
  else if (p.op == 2)
    asm volatile ("red.relaxed.gpu.global.add.u32 [%0], 1;" : : "l"(c) : "memory");
  else if (p.op == 3)
    asm volatile ("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c + 1) : "memory");
  else
    asm volatile ("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c + 1) : "memory");
  if (p.op >= 3)
    asm volatile ("add.u32 %0, %0, 1;" : "+r"(v)); /* clock64 after the value arrived */
  const long long t1 = clock64 ();
  if (v == 0x7fffffffu)
    dst[1] = make_uint4 (v, v, v, v);
  return (unsigned long long) (t1 - t0);
}

__global__ void __launch_bounds__ (NT, 1) probe (P p)
{
  extern __shared__ __align__ (1024) unsigned char sm[];
  __shared__ uint64_t full[NP];
  __shared__ __align__ (16) uint4 src[4];
  __shared__ volatile int done;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned char *w = p.w + (size_t) blockIdx.x * SLICE;
  uint32_t *c = p.ctr + blockIdx.x * 32;
  uint4 *dst = p.sink + blockIdx.x * 64 + 2 * warp;
  const bool burst = p.traffic >= 3;
  const int per_lane = p.traffic == 3 ? 2 : p.traffic == 4 ? 8 : 16;
  if (threadIdx.x == 0)
    {
      for (int i = 0; i < NP; i++)
        mb_init (&full[i], 1);
      done = 0;
      src[0] = make_uint4 (1, 2, 3, 4);
      asm volatile ("fence.mbarrier_init.release.cluster;" : : : "memory");
    }
  __syncthreads ();
  unsigned long long moved = 0;

  if (warp == NW + 1)
    {
      for (int i = 0; i < SAMPLES; i++)
        {
          if (burst)
            asm volatile ("bar.sync 1, %0;" : : "n"((NW + 1) * 32) : "memory");
          else
            __nanosleep (400);
          unsigned long long t = 0;
          if (lane == 0)
            t = timed_op (p, c, dst, src, i);
          if (burst)
            asm volatile ("bar.sync 2, %0;" : : "n"((NW + 1) * 32) : "memory");
          if (lane == 0)
            p.cyc[(size_t) blockIdx.x * SAMPLES + i] = t;
        }
      if (lane == 0)
        done = 1;
    }
  else if (warp == NW)
    {
      if (lane == 0 && p.traffic == 1)
        {
          uint64_t pol;
          asm volatile ("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
          uint32_t g = 0, off = 0;
          for (;;)
            {
              const uint32_t slot = g % NP;
              if (g >= NP)
                {
                  page_wait (&full[slot], ((g / NP) - 1) & 1);
                  moved += PAGE;
                }
              if (done)
                break;
              asm volatile ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" : : "r"(sa (&full[slot])), "r"(PAGE) : "memory");
              asm volatile ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                            : : "r"(sa (sm + slot * PAGE)), "l"(w + off), "r"(PAGE), "r"(sa (&full[slot])), "l"(pol) : "memory");
              g++;
              off = (off + PAGE) % SLICE;
            }
          for (uint32_t h = (g >= NP ? g - NP + 1 : 0); h < g; h++)
            page_wait (&full[h % NP], (h / NP) & 1);
        }
    }
  else if (p.traffic == 2)
    {
      const size_t per_warp = SLICE / NW;
      const unsigned char *ww = w + warp * per_warp;
      uint4 acc = make_uint4 (0, 0, 0, 0);
      uint32_t off = lane * 16;
      while (!done)
        {
          uint4 v[8];
#pragma unroll
          for (int j = 0; j < 8; j++)
            {
              asm volatile ("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                            : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w) : "l"(ww + off) : "memory");
              off = (off + 512) % per_warp;
            }
#pragma unroll
          for (int j = 0; j < 8; j++)
            acc.x ^= v[j].x, acc.y += v[j].y;
          moved += 128;
        }
      if (acc.x == 0x12345678u && acc.y == 7u)
        p.sink[blockIdx.x * 64 + 63] = acc;
    }
  else if (burst)
    {
      const size_t per_warp = SLICE / NW;
      const unsigned char *ww = w + warp * per_warp;
      uint32_t off = lane * 16;
      for (int i = 0; i < SAMPLES; i++)
        {
          asm volatile ("bar.sync 1, %0;" : : "n"((NW + 1) * 32) : "memory");
          for (int j = 0; j < per_lane; j++)
            {
              asm volatile ("cp.async.cg.shared.global [%0], [%1], 16;"
                            : : "r"(sa (sm) + ((j * NW + warp) * 32 + lane) * 16), "l"(ww + off) : "memory");
              off = (off + 512) % per_warp;
            }
          asm volatile ("cp.async.wait_all;" : : : "memory");
          moved += per_lane * 16;
          asm volatile ("bar.sync 2, %0;" : : "n"((NW + 1) * 32) : "memory");
        }
    }
  __syncthreads ();
  atomicAdd (p.bytes + blockIdx.x, moved);
}

int main (void)
{
  int nsm = 0, khz = 0;
  CK (cudaDeviceGetAttribute (&nsm, cudaDevAttrMultiProcessorCount, 0));
  CK (cudaDeviceGetAttribute (&khz, cudaDevAttrClockRate, 0));
  P p = {};
  void *w;
  CK (cudaMalloc (&w, (size_t) nsm * SLICE));
  CK (cudaMemset (w, 1, (size_t) nsm * SLICE));
  p.w = (const unsigned char *) w;
  CK (cudaMalloc (&p.ctr, nsm * 32 * 4));
  CK (cudaMemset (p.ctr, 0, nsm * 32 * 4));
  CK (cudaMalloc (&p.sink, nsm * 64 * 16));
  CK (cudaMalloc (&p.cyc, (size_t) nsm * SAMPLES * 8));
  CK (cudaMalloc (&p.bytes, nsm * 8));
  const int smem = NP * PAGE; /* also a burst of 16 chunks a lane: 16 * 512 * 16 B */
  CK (cudaFuncSetAttribute (probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaEvent_t e0, e1;
  CK (cudaEventCreate (&e0));
  CK (cudaEventCreate (&e1));
  std::vector<unsigned long long> cyc ((size_t) nsm * SAMPLES), bytes (nsm);
  printf ("SMs %d, clock %d MHz; cycles\n", nsm, khz / 1000);
  const char *tn[] = { "none", "bulk loader 128K", "ld.global 64K", "burst 16K", "burst 64K", "burst 128K" };
  const char *on[] = { "st+red.release", "bulkst+wait+red.relaxed", "st+red.relaxed", "ld.acquire", "ld.relaxed" };
  for (int traffic = 0; traffic < 6; traffic++)
    for (int op = 0; op < 5; op++)
      {
        p.traffic = traffic, p.op = op;
        float ms = 0;
        for (int rep = 0; rep < 2; rep++)
          {
            CK (cudaMemset (p.bytes, 0, nsm * 8));
            CK (cudaEventRecord (e0));
            probe<<<nsm, NT, smem>>> (p);
            CK (cudaEventRecord (e1));
            CK (cudaEventSynchronize (e1));
            CK (cudaGetLastError ());
          }
        CK (cudaEventElapsedTime (&ms, e0, e1));
        CK (cudaMemcpy (cyc.data (), p.cyc, cyc.size () * 8, cudaMemcpyDeviceToHost));
        CK (cudaMemcpy (bytes.data (), p.bytes, nsm * 8, cudaMemcpyDeviceToHost));
        std::vector<unsigned long long> s (cyc);
        std::sort (s.begin (), s.end ());
        unsigned long long tot = 0;
        for (auto b : bytes)
          tot += b;
        printf ("OP %-17s %-24s median %6llu p10 %6llu p90 %6llu cycles (%.2f ms, %.2f TB/s)\n", tn[traffic], on[op],
                s[s.size () / 2], s[s.size () / 10], s[s.size () * 9 / 10], ms, tot / (ms * 1e-3) / 1e12);
      }
  return 0;
}
