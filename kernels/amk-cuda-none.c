/* amk-cuda-none.c: the amk-cuda.h functions of a library built without nvcc. There is
 * never a device; the launcher reports AMK_LAUNCH_ERROR_UNSUPPORTED before calling these.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdio.h>

#include "amk-cuda.h"

static amk_cuda_status
no_cuda (char *msg, size_t msg_len)
{
  if (msg != NULL && msg_len > 0)
    snprintf (msg, msg_len, "this library was built without CUDA");
  return AMK_CUDA_NO_DEVICE;
}

int amk_cuda_device_count (void) { return 0; }

amk_cuda_status
amk_cuda_device_name (int device, char *name, size_t name_len, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

amk_cuda_status
amk_cuda_supports_cooperative (int device, int *supported, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

amk_cuda_status
amk_cuda_kernel_attributes (int device, int threads, int dyn_smem,
                            amk_cuda_attributes_t *out, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

amk_cuda_status
amk_cuda_mem_info (int device, uint64_t *free_bytes, uint64_t *total_bytes, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

amk_cuda_status
amk_cuda_malloc (int device, size_t size, uint64_t *addr, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

void amk_cuda_free (int device, uint64_t addr) { }

amk_cuda_status
amk_cuda_upload (int device, uint64_t dst, const void *src, size_t size, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

amk_cuda_status
amk_cuda_download (int device, void *dst, uint64_t src, size_t size, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

amk_cuda_status
amk_cuda_memset (int device, uint64_t dst, int value, size_t size, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

amk_cuda_status
amk_cuda_launch (int device, const amk_device_program *prog, int grid, int threads, int dyn_smem,
                 const volatile int *cancel, amk_abort_record_t *record, float *device_ms,
                 char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

amk_cuda_status
amk_cuda_check_program (int device, const amk_device_program *prog, const amk_buffer_t *table,
                        const amk_instruction_t *instructions, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}

amk_cuda_status
amk_cuda_launch_empty (int device, int grid, int threads, char *msg, size_t msg_len)
{
  return no_cuda (msg, msg_len);
}
