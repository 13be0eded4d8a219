/* probe-common.cuh: what the plain-CUDA probes (amk-matvec-probe.cu, amk-layer-probe.cu,
 * amk-release-probe.cu) share: the error check, bf16 products, a warp's sum, the global
 * timer, mbarriers by address.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_PROBE_COMMON_CUH
#define AMK_PROBE_COMMON_CUH

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf (stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString (e_)); exit (1); } } while (0)

/* the low (hi = 0) or high bf16 of u as a float */
__device__ __forceinline__ float bf (uint32_t u, int hi)
{ return __uint_as_float (hi ? (u & 0xffff0000u) : (u << 16)); }

/* acc + the 8 bf16 of w times x[0..7] */
__device__ __forceinline__ float dot8 (uint4 w, const float *x, float acc)
{
  const uint32_t u[4] = { w.x, w.y, w.z, w.w };
#pragma unroll
  for (int i = 0; i < 4; i++)
    {
      acc = fmaf (bf (u[i], 0), x[2 * i], acc);
      acc = fmaf (bf (u[i], 1), x[2 * i + 1], acc);
    }
  return acc;
}

__device__ __forceinline__ float warp_sum (float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  return v;
}

/* the global timer in ns (coarse; watchdogs and stage times) */
__device__ __forceinline__ uint64_t now_ns (void)
{ uint64_t t; asm volatile ("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

/* a shared-memory address */
__device__ __forceinline__ uint32_t sa (const void *p) { return (uint32_t) __cvta_generic_to_shared (p); }

__device__ __forceinline__ void mb_init (uint64_t *b, uint32_t count)
{ asm volatile ("mbarrier.init.shared::cta.b64 [%0], %1;" : : "r"(sa (b)), "r"(count) : "memory"); }

/* whether the phase of this parity has completed */
__device__ __forceinline__ bool mb_try (uint64_t *b, uint32_t parity)
{
  uint32_t ok;
  asm volatile ("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                " selp.u32 %0, 1, 0, p;\n}" : "=r"(ok) : "r"(sa (b)), "r"(parity) : "memory");
  return ok != 0;
}

__device__ __forceinline__ void mb_arrive (uint64_t *b)
{ asm volatile ("mbarrier.arrive.shared::cta.b64 _, [%0];" : : "r"(sa (b)) : "memory"); }

#endif /* AMK_PROBE_COMMON_CUH */
