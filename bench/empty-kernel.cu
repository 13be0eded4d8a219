/* empty-kernel.cu: the baselines of the launch-overhead benchmark: a plain empty kernel,
 * launched and waited for like the megakernel, and the device time (CUDA events) of an
 * empty cooperative launch of the megakernel's shape.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>

__global__ void amk_bench_empty_kernel (void) {}

extern "C" int
amk_bench_empty_launch (int grid, int threads)
{
  amk_bench_empty_kernel<<<grid, threads>>> ();
  return cudaDeviceSynchronize () == cudaSuccess ? 0 : -1;
}

/* Median device time in microseconds of `repeats` cooperative launches of the empty
 * kernel (after 3 warm-ups), events around the launch; with `clear`, a 64-byte memset
 * runs first inside the events, like the launcher's clearing of the counters. -1 on an
 * error. */
extern "C" double
amk_bench_empty_device_us (int grid, int threads, int dyn_smem, int clear, int repeats)
{
  cudaEvent_t a = nullptr, b = nullptr;
  void *scratch = nullptr;
  std::vector<float> t;
  bool ok = cudaEventCreate (&a) == cudaSuccess && cudaEventCreate (&b) == cudaSuccess &&
            cudaMalloc (&scratch, 64) == cudaSuccess &&
            cudaFuncSetAttribute ((const void *) amk_bench_empty_kernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_smem) == cudaSuccess;

  for (int i = 0; ok && i < 3 + repeats; i++)
    {
      float ms = 0.0f;
      ok = cudaEventRecord (a) == cudaSuccess &&
           (!clear || cudaMemsetAsync (scratch, 0, 64) == cudaSuccess) &&
           cudaLaunchCooperativeKernel ((const void *) amk_bench_empty_kernel, dim3 (grid),
                                        dim3 (threads), nullptr, (size_t) dyn_smem) == cudaSuccess &&
           cudaEventRecord (b) == cudaSuccess && cudaEventSynchronize (b) == cudaSuccess &&
           cudaEventElapsedTime (&ms, a, b) == cudaSuccess;
      if (ok && i >= 3)
        t.push_back (ms * 1000.0f);
    }
  if (a != nullptr)
    cudaEventDestroy (a);
  if (b != nullptr)
    cudaEventDestroy (b);
  if (scratch != nullptr)
    cudaFree (scratch);
  if (!ok || t.empty ())
    return -1.0;
  std::nth_element (t.begin (), t.begin () + t.size () / 2, t.end ());
  return t[t.size () / 2];
}
