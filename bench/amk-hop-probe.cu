/* amk-hop-probe.cu: the cost of one cross-SM dependency hop with plain CUDA, no VM, in
 * the variants the megakernel could use, to separate the hardware's latency from the
 * VM's per-instruction path. Two blocks ping-pong a counter N times; ns per hop =
 * (time(N) - time(2)) / (N - 2), each time the median of 9 launches (CUDA events).
 *
 *   built as build/bench/amk-hop-probe (or: nvcc -O3 -gencode=arch=compute_90,code=sm_90
 *   bench/amk-hop-probe.cu -o amk-hop-probe)
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

enum Variant {
  PROBE,          /* thread 0: acquire poll, release store of the hop number */
  RELAXED_FENCE,  /* thread 0: relaxed poll + fence.acq_rel, red.release add */
  BARRIERS,       /* as RELAXED_FENCE, with a block barrier after the wait and before the signal */
  WARP_POLLS,     /* lane 0 of every warp polls, block barrier before the signal */
  N_VARIANTS
};
static const char *names[] = {
  "thread 0: ld.acquire poll, st.release",
  "thread 0: ld.relaxed poll + fence, red.release add",
  "  + __syncthreads after the wait and before the signal",
  "every warp polls, __syncthreads before the signal",
};

__device__ __forceinline__ unsigned ld_acquire (const unsigned *p)
{ unsigned v; asm volatile ("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ unsigned ld_relaxed (const unsigned *p)
{ unsigned v; asm volatile ("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void st_release (unsigned *p, unsigned v)
{ asm volatile ("st.release.gpu.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void red_release (unsigned *p, unsigned v)
{ asm volatile ("red.release.gpu.global.add.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void fence () { asm volatile ("fence.acq_rel.gpu;" : : : "memory"); }

template <int V>
__global__ void ping_pong (unsigned *counter, int hops)
{
  const int b = blockIdx.x;
  for (int j = b; j < hops; j += 2)
    {
      /* hop j runs on block j % 2 once the counter reached j */
      if (V == WARP_POLLS)
        {
          if ((threadIdx.x & 31) == 0)
            {
              while (ld_relaxed (counter) < (unsigned) j) {}
              fence ();
            }
          __syncwarp ();
        }
      else if (threadIdx.x == 0)
        {
          if (V == PROBE)
            while (ld_acquire (counter) < (unsigned) j) {}
          else
            {
              while (ld_relaxed (counter) < (unsigned) j) {}
              fence ();
            }
        }
      if (V == BARRIERS)
        __syncthreads ();
      if (V == BARRIERS || V == WARP_POLLS)
        __syncthreads ();
      if (threadIdx.x == 0)
        {
          if (V == PROBE)
            st_release (counter, (unsigned) j + 1);
          else
            red_release (counter, 1u);
        }
    }
}

template <int V>
static float run (unsigned *counter, int hops, int threads)
{
  cudaEvent_t e0, e1;
  std::vector<float> t;
  cudaEventCreate (&e0);
  cudaEventCreate (&e1);
  for (int r = 0; r < 9; r++)
    {
      cudaMemset (counter, 0, sizeof (unsigned));
      cudaEventRecord (e0);
      ping_pong<V><<<2, threads>>> (counter, hops);
      cudaEventRecord (e1);
      cudaEventSynchronize (e1);
      float ms;
      cudaEventElapsedTime (&ms, e0, e1);
      t.push_back (ms);
    }
  std::sort (t.begin (), t.end ());
  return t[4];
}

template <int V>
static void measure (unsigned *counter, int threads)
{
  const int n = 20000;
  float t0 = run<V> (counter, 2, threads), t1 = run<V> (counter, n, threads);
  printf ("%-58s %4d threads: %6.0f ns per hop\n", names[V], threads, (t1 - t0) * 1e6 / (n - 2));
}

int main ()
{
  unsigned *counter;
  if (cudaMalloc (&counter, sizeof (unsigned)) != cudaSuccess)
    {
      printf ("no device\n");
      return 77;
    }
  for (int threads : { 32, 256 })
    {
      measure<PROBE> (counter, threads);
      measure<RELAXED_FENCE> (counter, threads);
      measure<BARRIERS> (counter, threads);
      measure<WARP_POLLS> (counter, threads);
    }
  return cudaGetLastError () == cudaSuccess ? 0 : 1;
}
