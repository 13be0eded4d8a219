/* amk-cuda.h: the CUDA side of the launcher as plain C functions (no CUDA or GLib types),
 * so the GObject code in amk-glib/ never includes cuda_runtime.h and the kernels never
 * include GLib. Every function returns an amk_cuda_status and, on failure, writes a
 * human-readable message (English; the library wraps it in a translated GError).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_CUDA_H
#define AMK_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "amk-abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  AMK_CUDA_OK = 0,
  AMK_CUDA_NO_DEVICE,  /* no driver, no GPU, or the index does not exist */
  AMK_CUDA_REJECTED,   /* launch contract refused before launching */
  AMK_CUDA_TIMEOUT,    /* cudaErrorLaunchTimeout or the device watchdog */
  AMK_CUDA_ABORTED,    /* a device-side abort; the record says why */
  AMK_CUDA_CANCELLED,  /* the host raised the abort flag */
  AMK_CUDA_FAILED      /* any other CUDA error */
} amk_cuda_status;

typedef struct {
  int32_t num_regs;
  int32_t static_smem_bytes;
  int32_t local_bytes;
  int32_t max_threads;
  int32_t const_bytes;
  int32_t blocks_per_sm;
  int32_t num_sms;
  int32_t max_grid;
  int32_t max_dynamic_smem_optin; /* per-block opt-in cap of the device */
} amk_cuda_attributes_t;

int             amk_cuda_device_count           (void);
amk_cuda_status amk_cuda_device_name            (int device, char *name, size_t name_len,
                                                 char *msg, size_t msg_len);
amk_cuda_status amk_cuda_supports_cooperative   (int device, int *supported,
                                                 char *msg, size_t msg_len);
amk_cuda_status amk_cuda_kernel_attributes      (int device, int threads, int dyn_smem,
                                                 amk_cuda_attributes_t *out,
                                                 char *msg, size_t msg_len);
amk_cuda_status amk_cuda_mem_info               (int device, uint64_t *free_bytes,
                                                 uint64_t *total_bytes,
                                                 char *msg, size_t msg_len);
amk_cuda_status amk_cuda_malloc                 (int device, size_t size, uint64_t *addr,
                                                 char *msg, size_t msg_len);
void            amk_cuda_free                   (int device, uint64_t addr);
amk_cuda_status amk_cuda_upload                 (int device, uint64_t dst, const void *src,
                                                 size_t size, char *msg, size_t msg_len);
amk_cuda_status amk_cuda_download               (int device, void *dst, uint64_t src,
                                                 size_t size, char *msg, size_t msg_len);
amk_cuda_status amk_cuda_memset                 (int device, uint64_t dst, int value,
                                                 size_t size, char *msg, size_t msg_len);

/* Runs the launch contract: opts into dynamic shared memory (<= the opt-in cap), checks
 * co-residency of `grid` blocks, clears counters / abort flag / abort record / grid
 * barrier, launches cooperatively and waits. While waiting it polls *cancel (if not
 * NULL); when it becomes non-zero the abort flag is raised on the device and the launch
 * ends with AMK_CUDA_CANCELLED. On AMK_CUDA_TIMEOUT / AMK_CUDA_ABORTED / AMK_CUDA_CANCELLED
 * *record holds the device's abort record. *device_ms (if not NULL) gets the launch's
 * device time, from the clearing to the kernel's end (CUDA events), or 0. `prog` points
 * at device memory the caller owns; prog->counters etc. must be valid device addresses. */
amk_cuda_status amk_cuda_launch                 (int device, const amk_device_program *prog,
                                                 int grid, int threads, int dyn_smem,
                                                 const volatile int *cancel,
                                                 amk_abort_record_t *record, float *device_ms,
                                                 char *msg, size_t msg_len);

/* Checks every instruction of `prog` once, for its buffer table as it is now, into the
 * records behind the instruction table (AMK_PROGRAM_CHECKED in amk-abi.h: the table must
 * have room for them) and waits. With AMK_PROGRAM_TENSOR_MAPS in prog->flags it first
 * writes the tensor maps behind the records from `table` and `instructions`, the host's
 * copies of prog's buffer table and instructions (room for them too); a map the driver
 * cannot make is left out, and its MATMULs read X and W without one. */
amk_cuda_status amk_cuda_check_program          (int device, const amk_device_program *prog,
                                                 const amk_buffer_t *table,
                                                 const amk_instruction_t *instructions,
                                                 char *msg, size_t msg_len);

/* Launches an empty kernel of `grid` x `threads` and waits: the baseline for launch
 * overhead benchmarks. */
amk_cuda_status amk_cuda_launch_empty           (int device, int grid, int threads,
                                                 char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif

#endif /* AMK_CUDA_H */
