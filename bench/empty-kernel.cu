/* empty-kernel.cu: the baseline of the launch-overhead benchmark: a plain empty kernel,
 * launched and waited for like the megakernel.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <cuda_runtime.h>

__global__ void amk_bench_empty_kernel (void) {}

extern "C" int
amk_bench_empty_launch (int grid, int threads)
{
  amk_bench_empty_kernel<<<grid, threads>>> ();
  return cudaDeviceSynchronize () == cudaSuccess ? 0 : -1;
}
