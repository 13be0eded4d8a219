/* amk-cuda.cu: the CUDA runtime side of the launcher, behind the plain C interface of
 * amk-cuda.h. No GLib; no C++ exception leaves this file (nothing here throws: the
 * only C++ library pieces are a std::mutex around the per-device cache and a sleep).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <mutex>
#include <thread>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "amk-abi.h"
#include "amk-cuda.h"

/* the kernel, defined in scheduler.cu */
extern "C" __global__ void amk_megakernel (amk_device_program prog);
extern "C" __global__ void amk_megakernel_many (amk_device_program prog);
extern "C" __global__ void amk_megakernel_paged (amk_device_program prog);
extern "C" __global__ void amk_check_program (amk_device_program prog);

/* baseline for the launch-overhead bench */
static __global__ void
amk_empty_kernel (void)
{
}

#define AMK_MAX_DEVICES 64
#define AMK_CANCEL_POLL_US 20

/* ---- messages ------------------------------------------------------------------------ */

static void
amk_msg (char *msg, size_t msg_len, const char *fmt, ...)
{
  va_list ap;

  if (msg == NULL || msg_len == 0)
    return;
  va_start (ap, fmt);
  vsnprintf (msg, msg_len, fmt, ap);
  va_end (ap);
}

/* Errors after which the context cannot run anything again. */
static bool
amk_is_sticky (cudaError_t e)
{
  switch (e)
    {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
    }
}

/* Reports a CUDA error, clears the (non-sticky) error state and maps it to a status. */
static amk_cuda_status
amk_fail (cudaError_t e, char *msg, size_t msg_len, const char *what)
{
  (void) cudaGetLastError ();
  amk_msg (msg, msg_len, "%s: %s (%s)%s", what, cudaGetErrorString (e), cudaGetErrorName (e),
           amk_is_sticky (e)
               ? "; the CUDA context is unusable, the process must restart to use this device again"
               : "");
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
      e == cudaErrorInvalidDevice || e == cudaErrorDevicesUnavailable)
    return AMK_CUDA_NO_DEVICE;
  if (e == cudaErrorLaunchTimeout)
    return AMK_CUDA_TIMEOUT;
  return AMK_CUDA_FAILED;
}

/* ---- devices ------------------------------------------------------------------------- */

extern "C" int
amk_cuda_device_count (void)
{
  int n = 0;
  cudaError_t e = cudaGetDeviceCount (&n);

  if (e != cudaSuccess)
    {
      (void) cudaGetLastError ();
      return 0;
    }
  return n;
}

/* Checks the index and makes `device` current on the calling thread. */
static amk_cuda_status
amk_enter (int device, char *msg, size_t msg_len)
{
  const int n = amk_cuda_device_count ();

  if (device < 0 || device >= n)
    {
      amk_msg (msg, msg_len, "CUDA device %d does not exist (%d device%s visible)",
               device, n, n == 1 ? "" : "s");
      return AMK_CUDA_NO_DEVICE;
    }
  cudaError_t e = cudaSetDevice (device);
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "cudaSetDevice");
  return AMK_CUDA_OK;
}

/* Per-device state created once and kept: the launch stream, a second stream that
 * raises the abort flag while the kernel runs, and one pinned word holding 1. */
typedef struct {
  bool          ready;
  cudaStream_t  stream;
  cudaStream_t  cancel_stream;
  int32_t      *one;          /* pinned host memory holding 1 */
  amk_abort_record_t *record; /* pinned host memory the record is copied into */
  cudaEvent_t   began, ended; /* around a launch's device work: its device time */
  std::mutex   *launch_lock;  /* one launch at a time: they share the above */
  /* the contract's numbers for the last launch configuration; kernel_attributes calls
   * invalidate them, since they may change the function's dynamic smem attribute */
  bool          query_valid;
  int           query_threads, query_smem, coop;
  amk_cuda_attributes_t query;
  int           query_paged_grid; /* blocks the paged build can run at that configuration */
} amk_device_state;

static amk_device_state amk_states[AMK_MAX_DEVICES];
static std::mutex amk_states_lock;

static amk_cuda_status
amk_state (int device, amk_device_state **out, char *msg, size_t msg_len)
{
  if (device >= AMK_MAX_DEVICES)
    {
      amk_msg (msg, msg_len, "CUDA device %d is beyond the %d devices this build supports",
               device, AMK_MAX_DEVICES);
      return AMK_CUDA_NO_DEVICE;
    }

  std::lock_guard<std::mutex> guard (amk_states_lock);
  amk_device_state *st = &amk_states[device];
  if (!st->ready)
    {
      cudaError_t e;
      cudaStream_t s1 = NULL, s2 = NULL;
      cudaEvent_t began = NULL, ended = NULL;
      void *one = NULL, *rec = NULL;

      e = cudaStreamCreateWithFlags (&s1, cudaStreamNonBlocking);
      if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags (&s2, cudaStreamNonBlocking);
      if (e == cudaSuccess)
        e = cudaEventCreate (&began);
      if (e == cudaSuccess)
        e = cudaEventCreate (&ended);
      if (e == cudaSuccess)
        e = cudaHostAlloc (&one, sizeof (int32_t), cudaHostAllocPortable);
      if (e == cudaSuccess)
        e = cudaHostAlloc (&rec, sizeof (amk_abort_record_t), cudaHostAllocPortable);
      if (e != cudaSuccess)
        {
          if (s1 != NULL)
            cudaStreamDestroy (s1);
          if (s2 != NULL)
            cudaStreamDestroy (s2);
          if (began != NULL)
            cudaEventDestroy (began);
          if (ended != NULL)
            cudaEventDestroy (ended);
          return amk_fail (e, msg, msg_len, "creating the launch streams");
        }
      *(int32_t *) one = 1;
      st->stream = s1;
      st->cancel_stream = s2;
      st->one = (int32_t *) one;
      st->record = (amk_abort_record_t *) rec;
      st->began = began;
      st->ended = ended;
      st->launch_lock = new std::mutex ();
      st->ready = true;
    }
  *out = st;
  return AMK_CUDA_OK;
}

extern "C" amk_cuda_status
amk_cuda_device_name (int device, char *name, size_t name_len, char *msg, size_t msg_len)
{
  amk_cuda_status s = amk_enter (device, msg, msg_len);
  if (s != AMK_CUDA_OK)
    return s;

  cudaDeviceProp prop;
  memset (&prop, 0, sizeof prop);
  cudaError_t e = cudaGetDeviceProperties (&prop, device);
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "cudaGetDeviceProperties");
  if (name != NULL && name_len > 0)
    snprintf (name, name_len, "%s", prop.name);
  return AMK_CUDA_OK;
}

extern "C" amk_cuda_status
amk_cuda_supports_cooperative (int device, int *supported, char *msg, size_t msg_len)
{
  if (supported != NULL)
    *supported = 0;
  amk_cuda_status s = amk_enter (device, msg, msg_len);
  if (s != AMK_CUDA_OK)
    return s;

  int coop = 0;
  cudaError_t e = cudaDeviceGetAttribute (&coop, cudaDevAttrCooperativeLaunch, device);
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "cudaDeviceGetAttribute(cudaDevAttrCooperativeLaunch)");
  if (supported != NULL)
    *supported = coop != 0;
  return AMK_CUDA_OK;
}

/* ---- kernel attributes and the co-residency contract -------------------------------- */

static bool
amk_threads_ok (int threads)
{
  return threads >= 32 && threads <= 1024 && threads % 32 == 0;
}

/* Opts into dyn_smem, then fills attributes and occupancy at (threads, dyn_smem). */
static amk_cuda_status
amk_query (int device, int threads, int dyn_smem, amk_cuda_attributes_t *out,
           char *msg, size_t msg_len)
{
  cudaError_t e;
  cudaFuncAttributes attr;
  int sms = 0, optin = 0, blocks_per_sm = 0;

  memset (out, 0, sizeof *out);
  if (!amk_threads_ok (threads))
    {
      amk_msg (msg, msg_len,
               "%d threads per block: must be a multiple of 32 between 32 and 1024", threads);
      return AMK_CUDA_REJECTED;
    }
  if (dyn_smem < 0)
    {
      amk_msg (msg, msg_len, "negative dynamic shared memory size %d", dyn_smem);
      return AMK_CUDA_REJECTED;
    }

  memset (&attr, 0, sizeof attr);
  if ((e = cudaFuncGetAttributes (&attr, (const void *) amk_megakernel)) != cudaSuccess)
    return amk_fail (e, msg, msg_len, "cudaFuncGetAttributes(amk_megakernel)");
  {
    /* the configuration must suit both builds of the kernel (scheduler.cu) */
    struct cudaFuncAttributes many;
    memset (&many, 0, sizeof many);
    if ((e = cudaFuncGetAttributes (&many, (const void *) amk_megakernel_many)) != cudaSuccess)
      return amk_fail (e, msg, msg_len, "cudaFuncGetAttributes(amk_megakernel_many)");
    attr.numRegs = attr.numRegs > many.numRegs ? attr.numRegs : many.numRegs;
    attr.sharedSizeBytes = attr.sharedSizeBytes > many.sharedSizeBytes ? attr.sharedSizeBytes : many.sharedSizeBytes;
    attr.localSizeBytes = attr.localSizeBytes > many.localSizeBytes ? attr.localSizeBytes : many.localSizeBytes;
    attr.maxThreadsPerBlock = attr.maxThreadsPerBlock < many.maxThreadsPerBlock ? attr.maxThreadsPerBlock
                                                                                : many.maxThreadsPerBlock;
  }
  if ((e = cudaDeviceGetAttribute (&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
    return amk_fail (e, msg, msg_len, "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)");
  if ((e = cudaDeviceGetAttribute (&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) !=
      cudaSuccess)
    return amk_fail (e, msg, msg_len,
                     "cudaDeviceGetAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)");

  out->num_regs = attr.numRegs;
  out->static_smem_bytes = (int32_t) attr.sharedSizeBytes;
  out->local_bytes = (int32_t) attr.localSizeBytes;
  out->max_threads = attr.maxThreadsPerBlock;
  out->const_bytes = (int32_t) attr.constSizeBytes;
  out->num_sms = sms;
  out->max_dynamic_smem_optin = optin;

  /* the dynamic part starts behind the static part, 128-byte aligned (amk_dyn_smem) */
  const long long static_used = ((long long) attr.sharedSizeBytes + 127) / 128 * 128;
  const long long dyn_cap = (long long) optin - static_used;
  if ((long long) dyn_smem > dyn_cap)
    {
      amk_msg (msg, msg_len,
               "%d bytes of dynamic shared memory exceed the per-block opt-in cap "
               "(%d bytes minus %lld bytes of static shared memory, 128-byte aligned, "
               "= %lld bytes)",
               dyn_smem, optin, static_used, dyn_cap);
      return AMK_CUDA_REJECTED;
    }
  if (threads > attr.maxThreadsPerBlock)
    {
      amk_msg (msg, msg_len, "%d threads per block exceed the kernel's limit of %d",
               threads, attr.maxThreadsPerBlock);
      return AMK_CUDA_REJECTED;
    }
  const void *builds[2] = { (const void *) amk_megakernel, (const void *) amk_megakernel_many };
  blocks_per_sm = 1 << 30;
  for (int b = 0; b < 2; b++)
    {
      int n = 0;
      if (dyn_smem > 0)
        {
          e = cudaFuncSetAttribute (builds[b], cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_smem);
          if (e != cudaSuccess)
            return amk_fail (e, msg, msg_len,
                             "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize)");
        }
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor (&n, builds[b], threads, (size_t) dyn_smem);
      if (e != cudaSuccess)
        return amk_fail (e, msg, msg_len, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
      blocks_per_sm = n < blocks_per_sm ? n : blocks_per_sm;
    }

  out->blocks_per_sm = blocks_per_sm;
  out->max_grid = blocks_per_sm * sms;
  return AMK_CUDA_OK;
}

/* How many blocks of amk_megakernel_paged (AMK_PAGED_OP_THREADS op threads and the
 * loader warp, in place of a launch of AMK_PAGED_LAUNCH_THREADS) can be co-resident at
 * dyn_smem; 0 when it cannot run there (then the decode build runs). */
static int
amk_paged_grid (int threads, int dyn_smem, int sms)
{
  int n = 0;
  if (threads != AMK_PAGED_LAUNCH_THREADS)
    return 0;
  if (dyn_smem > 0 &&
      cudaFuncSetAttribute ((const void *) amk_megakernel_paged,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_smem) != cudaSuccess)
    {
      (void) cudaGetLastError ();
      return 0;
    }
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor (&n, (const void *) amk_megakernel_paged,
                                                     AMK_PAGED_OP_THREADS + 32, (size_t) dyn_smem) != cudaSuccess)
    {
      (void) cudaGetLastError ();
      return 0;
    }
  return n * sms;
}

extern "C" amk_cuda_status
amk_cuda_kernel_attributes (int device, int threads, int dyn_smem,
                            amk_cuda_attributes_t *out, char *msg, size_t msg_len)
{
  amk_cuda_attributes_t tmp;
  amk_cuda_status s = amk_enter (device, msg, msg_len);
  if (s != AMK_CUDA_OK)
    return s;
  s = amk_query (device, threads, dyn_smem, &tmp, msg, msg_len);
  if (out != NULL)
    *out = tmp;
  {
    amk_device_state *st = NULL;
    if (amk_state (device, &st, NULL, 0) == AMK_CUDA_OK)
      {
        std::lock_guard<std::mutex> guard (*st->launch_lock);
        st->query_valid = false;
      }
  }
  return s;
}

/* ---- memory ---------------------------------------------------------------------------- */

extern "C" amk_cuda_status
amk_cuda_mem_info (int device, uint64_t *free_bytes, uint64_t *total_bytes,
                   char *msg, size_t msg_len)
{
  amk_cuda_status s = amk_enter (device, msg, msg_len);
  if (s != AMK_CUDA_OK)
    return s;
  size_t f = 0, t = 0;
  cudaError_t e = cudaMemGetInfo (&f, &t);
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "cudaMemGetInfo");
  if (free_bytes != NULL)
    *free_bytes = f;
  if (total_bytes != NULL)
    *total_bytes = t;
  return AMK_CUDA_OK;
}

extern "C" amk_cuda_status
amk_cuda_malloc (int device, size_t size, uint64_t *addr, char *msg, size_t msg_len)
{
  if (addr != NULL)
    *addr = 0;
  amk_cuda_status s = amk_enter (device, msg, msg_len);
  if (s != AMK_CUDA_OK)
    return s;
  void *p = NULL;
  cudaError_t e = cudaMalloc (&p, size);
  if (e != cudaSuccess)
    {
      char what[96];
      snprintf (what, sizeof what, "cudaMalloc of %zu bytes", size);
      return amk_fail (e, msg, msg_len, what);
    }
  if (addr != NULL)
    *addr = (uint64_t) (uintptr_t) p;
  return AMK_CUDA_OK;
}

extern "C" void
amk_cuda_free (int device, uint64_t addr)
{
  if (addr == 0 || amk_enter (device, NULL, 0) != AMK_CUDA_OK)
    return;
  if (cudaFree ((void *) (uintptr_t) addr) != cudaSuccess)
    (void) cudaGetLastError ();
}

/* Copies and memsets run on the launch stream and are waited for: the launch stream is
 * non-blocking, so work on the legacy default stream (plain cudaMemcpy / cudaMemset,
 * which may return before the device finished) would not be ordered before a launch. */
static amk_cuda_status
amk_transfer (int device, void *dst, const void *src, int value, size_t size,
              cudaMemcpyKind kind, bool is_memset, const char *what_fmt, uint64_t what_addr,
              char *msg, size_t msg_len)
{
  amk_device_state *st = NULL;
  amk_cuda_status s = amk_enter (device, msg, msg_len);
  if (s != AMK_CUDA_OK || size == 0)
    return s;
  if ((s = amk_state (device, &st, msg, msg_len)) != AMK_CUDA_OK)
    return s;

  cudaError_t e = is_memset ? cudaMemsetAsync (dst, value, size, st->stream)
                            : cudaMemcpyAsync (dst, src, size, kind, st->stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize (st->stream);
  if (e != cudaSuccess)
    {
      char what[128];
      snprintf (what, sizeof what, what_fmt, size, (unsigned long long) what_addr);
      return amk_fail (e, msg, msg_len, what);
    }
  return AMK_CUDA_OK;
}

extern "C" amk_cuda_status
amk_cuda_upload (int device, uint64_t dst, const void *src, size_t size,
                 char *msg, size_t msg_len)
{
  return amk_transfer (device, (void *) (uintptr_t) dst, src, 0, size, cudaMemcpyHostToDevice,
                       false, "upload of %zu bytes to 0x%llx", dst, msg, msg_len);
}

extern "C" amk_cuda_status
amk_cuda_download (int device, void *dst, uint64_t src, size_t size,
                   char *msg, size_t msg_len)
{
  return amk_transfer (device, dst, (const void *) (uintptr_t) src, 0, size,
                       cudaMemcpyDeviceToHost, false, "download of %zu bytes from 0x%llx", src,
                       msg, msg_len);
}

extern "C" amk_cuda_status
amk_cuda_memset (int device, uint64_t dst, int value, size_t size, char *msg, size_t msg_len)
{
  return amk_transfer (device, (void *) (uintptr_t) dst, NULL, value, size,
                       cudaMemcpyHostToDevice, true, "memset of %zu bytes at 0x%llx", dst,
                       msg, msg_len);
}

/* ---- launch ---------------------------------------------------------------------------- */

static void
amk_describe_record (const amk_abort_record_t *r, uint64_t watchdog_ns, char *msg, size_t msg_len)
{
  switch (r->code)
    {
    case AMK_ABORT_TIMEOUT:
      if (r->counter >= 0)
        amk_msg (msg, msg_len,
                 "queue %d instruction %d waited on counter %d (observed %u, target %u) for "
                 "longer than the watchdog budget of %llu ns (SM %d)",
                 r->queue, r->instruction, r->counter, r->observed, r->target,
                 (unsigned long long) watchdog_ns, r->sm_id);
      else
        amk_msg (msg, msg_len,
                 "queue %d instruction %d waited at a grid barrier (%u of %u blocks arrived) for "
                 "longer than the watchdog budget of %llu ns (SM %d)",
                 r->queue, r->instruction, r->observed, r->target,
                 (unsigned long long) watchdog_ns, r->sm_id);
      break;
    case AMK_ABORT_TRAP:
      amk_msg (msg, msg_len, "queue %d instruction %d executed TRAP with code %d (SM %d)",
               r->queue, r->instruction, r->detail, r->sm_id);
      break;
    case AMK_ABORT_BAD_OPCODE:
      amk_msg (msg, msg_len, "queue %d instruction %d has unknown opcode %d (SM %d)",
               r->queue, r->instruction, r->detail, r->sm_id);
      break;
    case AMK_ABORT_BAD_INDEX:
      amk_msg (msg, msg_len,
               "queue %d instruction %d uses the out-of-range index %d (instruction, counter, "
               "buffer or wait count) (SM %d)",
               r->queue, r->instruction, r->detail, r->sm_id);
      break;
    case AMK_ABORT_CHECK:
      amk_msg (msg, msg_len,
               "queue %d instruction %d failed a device-side check (range, dtype, alignment "
               "or overlap) on buffer %d (SM %d)",
               r->queue, r->instruction, r->detail, r->sm_id);
      break;
    case AMK_ABORT_CANCELLED:
      amk_msg (msg, msg_len, "the launch was cancelled by the host");
      break;
    default:
      amk_msg (msg, msg_len,
               "device abort with unknown code %d (queue %d instruction %d detail %d)",
               r->code, r->queue, r->instruction, r->detail);
      break;
    }
}

/* Waits for the launch on st->stream; raises the abort flag through cancel_stream once
 * *cancel becomes non-zero. */
static cudaError_t
amk_wait (amk_device_state *st, const amk_device_program *prog, cudaEvent_t cleared,
          const volatile int *cancel, bool *raised)
{
  if (cancel == NULL)
    return cudaStreamSynchronize (st->stream);

  for (;;)
    {
      cudaError_t e = cudaStreamQuery (st->stream);
      if (e != cudaErrorNotReady)
        return e;
      if (!*raised && *cancel != 0)
        {
          /* the copy must not overtake the memset that cleared the flag */
          e = cudaStreamWaitEvent (st->cancel_stream, cleared, 0);
          if (e == cudaSuccess)
            e = cudaMemcpyAsync (prog->abort_flag, st->one, sizeof (int32_t),
                                 cudaMemcpyHostToDevice, st->cancel_stream);
          if (e != cudaSuccess)
            return e;
          *raised = true;
        }
      std::this_thread::sleep_for (std::chrono::microseconds (AMK_CANCEL_POLL_US));
    }
}

extern "C" amk_cuda_status
amk_cuda_launch (int device, const amk_device_program *prog, int grid, int threads,
                 int dyn_smem, const volatile int *cancel, amk_abort_record_t *record,
                 float *device_ms, char *msg, size_t msg_len)
{
  amk_abort_record_t rec;
  amk_cuda_attributes_t at;
  amk_device_state *st = NULL;
  amk_cuda_status s;
  cudaError_t e;
  int coop = 0;

  memset (&rec, 0, sizeof rec);
  if (record != NULL)
    *record = rec;
  if (device_ms != NULL)
    *device_ms = 0.0f;
  if (msg != NULL && msg_len > 0)
    msg[0] = '\0';

  if ((s = amk_enter (device, msg, msg_len)) != AMK_CUDA_OK)
    return s;

  /* (a) the contract */
  if (prog == NULL)
    {
      amk_msg (msg, msg_len, "no device program");
      return AMK_CUDA_REJECTED;
    }
  if ((s = amk_state (device, &st, msg, msg_len)) != AMK_CUDA_OK)
    return s;
  std::lock_guard<std::mutex> launch_guard (*st->launch_lock);
  if (!st->query_valid || st->query_threads != threads || st->query_smem != dyn_smem)
    {
      /* a relaunch with the same configuration skips these driver queries */
      if ((e = cudaDeviceGetAttribute (&coop, cudaDevAttrCooperativeLaunch, device)) != cudaSuccess)
        return amk_fail (e, msg, msg_len, "cudaDeviceGetAttribute(cudaDevAttrCooperativeLaunch)");
      if ((s = amk_query (device, threads, dyn_smem, &at, msg, msg_len)) != AMK_CUDA_OK)
        return s;
      st->coop = coop;
      st->query = at;
      st->query_threads = threads;
      st->query_smem = dyn_smem;
      st->query_paged_grid = amk_paged_grid (threads, dyn_smem, at.num_sms);
      st->query_valid = true;
    }
  coop = st->coop;
  at = st->query;
  if (!coop)  if (prog->abort_flag == NULL || prog->abort_record == NULL || prog->grid_barrier == NULL ||
      (prog->n_counters > 0 && prog->counters == NULL) || prog->n_counters < 0 ||
      prog->n_buffers < 0 || prog->n_instructions < 0 || prog->num_sms < 0 ||
      (prog->num_sms > 0 && (prog->sm_queue_off == NULL || prog->sm_queue_len == NULL ||
                             prog->sm_queue_flat == NULL)))
    {
      amk_msg (msg, msg_len,
               "incomplete device program (abort flag, abort record, grid barrier, counters "
               "and queue arrays must be device addresses; counts must not be negative)");
      return AMK_CUDA_REJECTED;
    }
  if (grid == 0 && prog->num_sms == 0)
    {
      /* an empty program: nothing to launch, nothing can abort */
      return AMK_CUDA_OK;
    }
  if (grid <= 0 || grid < prog->num_sms)
    {
      amk_msg (msg, msg_len,
               "grid of %d blocks cannot run the program's %d queues (one block per queue)",
               grid, prog->num_sms);
      return AMK_CUDA_REJECTED;
    }
  if (at.blocks_per_sm <= 0)
    {
      amk_msg (msg, msg_len,
               "the megakernel cannot run at %d threads and %d bytes of dynamic shared memory "
               "(occupancy 0 blocks/SM; %d registers per thread)",
               threads, dyn_smem, at.num_regs);
      return AMK_CUDA_REJECTED;
    }
  if ((long long) grid > (long long) at.blocks_per_sm * at.num_sms)
    {
      amk_msg (msg, msg_len,
               "grid of %d blocks exceeds the cooperative co-residency limit %d (%d blocks/SM x "
               "%d SMs) at %d threads and %d bytes of dynamic shared memory",
               grid, at.blocks_per_sm * at.num_sms, at.blocks_per_sm, at.num_sms, threads,
               dyn_smem);
      return AMK_CUDA_REJECTED;
    }

  /* (b) one launch == one pass: clear counters, flag, record and barrier; one memset
   * when they sit in one control block (record, flag, barrier, counters at 64 bytes).
   * The launch's device time runs from here to the kernel's end. */
  e = cudaEventRecord (st->began, st->stream);
  const char *base = (const char *) prog->abort_record;
  const bool one_block = (const char *) prog->abort_flag == base + 32 &&
                         (const char *) prog->grid_barrier == base + 36 &&
                         (prog->n_counters == 0 || (const char *) prog->counters == base + 64);
  if (e == cudaSuccess && one_block)
    e = cudaMemsetAsync ((void *) base, 0, 64 + (size_t) prog->n_counters * sizeof (amk_counter_t),
                         st->stream);
  else if (e == cudaSuccess && prog->n_counters > 0)
    e = cudaMemsetAsync (prog->counters, 0, (size_t) prog->n_counters * sizeof (amk_counter_t),
                         st->stream);
  if (e == cudaSuccess && (const char *) prog->abort_flag != base + 32)
    {
      e = cudaMemsetAsync (prog->abort_flag, 0, sizeof (int32_t), st->stream);
      if (e == cudaSuccess)
        e = cudaMemsetAsync (prog->abort_record, 0, sizeof (amk_abort_record_t), st->stream);
      if (e == cudaSuccess)
        e = cudaMemsetAsync (prog->grid_barrier, 0, 2 * sizeof (uint32_t), st->stream);
    }
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "clearing the counters before the launch");

  cudaEvent_t cleared = NULL;
  if (cancel != NULL)
    {
      if ((e = cudaEventCreateWithFlags (&cleared, cudaEventDisableTiming)) == cudaSuccess)
        e = cudaEventRecord (cleared, st->stream);
      if (e != cudaSuccess)
        {
          if (cleared != NULL)
            cudaEventDestroy (cleared);
          return amk_fail (e, msg, msg_len, "recording the cancel event");
        }
    }

  /* (c) launch */
  amk_device_program copy = *prog;
  void *args[] = { &copy };
  const void *kernel = (prog->flags & AMK_PROGRAM_MANY_TOKENS) != 0 ? (const void *) amk_megakernel_many
                                                                  : (const void *) amk_megakernel;
  int block = threads;
  if ((prog->flags & (AMK_PROGRAM_PAGED | AMK_PROGRAM_MANY_TOKENS)) == AMK_PROGRAM_PAGED &&
      grid <= st->query_paged_grid)
    {
      kernel = (const void *) amk_megakernel_paged;
      block = AMK_PAGED_OP_THREADS + 32; /* the op threads and the loader warp */
    }
  e = cudaLaunchCooperativeKernel (kernel, dim3 ((unsigned) grid),
                                   dim3 ((unsigned) block), args, (size_t) dyn_smem, st->stream);
  if (e != cudaSuccess)
    {
      if (cleared != NULL)
        cudaEventDestroy (cleared);
      if (e == cudaErrorCooperativeLaunchTooLarge)
        {
          (void) cudaGetLastError ();
          amk_msg (msg, msg_len,
                   "cudaLaunchCooperativeKernel refused a grid of %d blocks at %d threads and "
                   "%d bytes of dynamic shared memory: %s",
                   grid, threads, dyn_smem, cudaGetErrorString (e));
          return AMK_CUDA_REJECTED;
        }
      return amk_fail (e, msg, msg_len, "cudaLaunchCooperativeKernel");
    }

  /* the abort record travels back in the same stream, so one wait covers both */
  e = cudaEventRecord (st->ended, st->stream);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync (st->record, prog->abort_record, sizeof rec, cudaMemcpyDeviceToHost, st->stream);
  if (e != cudaSuccess)
    {
      if (cleared != NULL)
        cudaEventDestroy (cleared);
      return amk_fail (e, msg, msg_len, "queueing the abort record copy");
    }

  /* (d) wait */
  bool raised = false;
  e = amk_wait (st, prog, cleared, cancel, &raised);
  if (raised)
    {
      /* the flag copy must be done before the next launch clears the flag */
      cudaError_t e2 = cudaStreamSynchronize (st->cancel_stream);
      if (e == cudaSuccess)
        e = e2;
    }
  if (cleared != NULL)
    cudaEventDestroy (cleared);

  if (e == cudaErrorLaunchTimeout)
    {
      (void) cudaGetLastError ();
      rec.code = AMK_ABORT_TIMEOUT;
      rec.queue = rec.instruction = rec.counter = rec.sm_id = -1;
      if (record != NULL)
        *record = rec;
      amk_msg (msg, msg_len,
               "the display watchdog killed the launch (cudaErrorLaunchTimeout); the CUDA "
               "context is unusable, the process must restart to use this device again");
      return AMK_CUDA_TIMEOUT;
    }
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "waiting for the megakernel");

  /* (e) the abort record, already copied, and the device time */
  rec = *st->record;
  if (device_ms != NULL && cudaEventElapsedTime (device_ms, st->began, st->ended) != cudaSuccess)
    {
      (void) cudaGetLastError ();
      *device_ms = 0.0f;
    }

  if (rec.code == AMK_ABORT_NONE && raised)
    {
      rec.code = AMK_ABORT_CANCELLED;
      rec.queue = rec.instruction = rec.counter = rec.sm_id = -1;
    }
  if (record != NULL)
    *record = rec;

  switch (rec.code)
    {
    case AMK_ABORT_NONE:
      return AMK_CUDA_OK;
    case AMK_ABORT_TIMEOUT:
      amk_describe_record (&rec, prog->watchdog_ns, msg, msg_len);
      return AMK_CUDA_TIMEOUT;
    case AMK_ABORT_CANCELLED:
      amk_describe_record (&rec, prog->watchdog_ns, msg, msg_len);
      return AMK_CUDA_CANCELLED;
    default:
      amk_describe_record (&rec, prog->watchdog_ns, msg, msg_len);
      return AMK_CUDA_ABORTED;
    }
}

/* ---- tensor maps ------------------------------------------------------------------- */

/* cuTensorMapEncodeTiled, from the driver the runtime loaded (no link to libcuda), or
 * NULL. */
static PFN_cuTensorMapEncodeTiled_v12000
amk_encode_tiled_fn (void)
{
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;

  std::call_once (once, [] {
    void *p = NULL;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion ("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                          &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      fn = (PFN_cuTensorMapEncodeTiled_v12000) p;
  });
  return fn;
}

/* Map `b` (of `box_rows`-row boxes) for a MATMUL of `k` columns, once per buffer and role:
 * a second k marks the buffer AMK_TENSOR_MAP_CONFLICT. */
static void
amk_map_operand (amk_tensor_map_t *m, const amk_buffer_t *b, uint32_t k, uint32_t box_rows)
{
  PFN_cuTensorMapEncodeTiled_v12000 encode = amk_encode_tiled_fn ();
  const uint64_t row_bytes = (uint64_t) k * 2;

  if (m->k == k || m->k == AMK_TENSOR_MAP_CONFLICT)
    return;
  if (m->k != 0)
    {
      m->k = AMK_TENSOR_MAP_CONFLICT;
      return;
    }
  if (encode == NULL || b->dtype != AMK_ABI_DTYPE_BF16 || k == 0 || row_bytes % 16 != 0 ||
      b->size_bytes % row_bytes != 0 || b->size_bytes / row_bytes >= (1ull << 31) || (b->addr & 15u) != 0)
    return;

  const cuuint64_t dims[2] = { k, b->size_bytes / row_bytes };
  const cuuint64_t strides[1] = { row_bytes };
  const cuuint32_t box[2] = { 64, box_rows };
  const cuuint32_t unit[2] = { 1, 1 };
  CUtensorMap map;
  if (encode (&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *) (uintptr_t) b->addr, dims, strides, box,
              unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return;
  static_assert (sizeof map == sizeof m->map, "a CUtensorMap fills amk_tensor_map_t.map");
  memcpy (m->map, &map, sizeof map);
  m->k = k;
  m->rows = (uint32_t) dims[1];
}

/* The tensor maps of prog's MATMULs of bf16 X and W without a fused norm (the operands
 * of the TMA tile, ops-matmul-wgmma.cuh), uploaded behind the checked records. */
static amk_cuda_status
amk_write_tensor_maps (amk_device_state *st, const amk_device_program *prog, const amk_buffer_t *table,
                       const amk_instruction_t *instructions, char *msg, size_t msg_len)
{
  const size_t n = (size_t) prog->n_buffers * 2;
  amk_tensor_map_t *maps = (amk_tensor_map_t *) calloc (n > 0 ? n : 1, sizeof *maps);

  if (maps == NULL)
    {
      amk_msg (msg, msg_len, "out of host memory for %zu tensor maps", n);
      return AMK_CUDA_FAILED;
    }
  for (int32_t i = 0; i < prog->n_instructions && table != NULL && instructions != NULL; i++)
    {
      const amk_instruction_t *ins = &instructions[i];
      const int32_t w = ins->buffers[1], x = ins->buffers[2];
      if (ins->opcode != AMK_ABI_OP_MATMUL || ins->n_buffers < 3 || ins->buffers[5] != AMK_NO_BUFFER ||
          w < 0 || w >= prog->n_buffers || x < 0 || x >= prog->n_buffers || ins->params.matmul.k <= 0)
        continue;
      amk_map_operand (&maps[2 * x], &table[x], (uint32_t) ins->params.matmul.k, AMK_MATMUL_TMA_X_ROWS);
      amk_map_operand (&maps[2 * w + 1], &table[w], (uint32_t) ins->params.matmul.k, AMK_MATMUL_TMA_W_ROWS);
    }
  const uintptr_t dst = (uintptr_t) prog->instructions + AMK_TENSOR_MAPS_OFFSET (prog->n_instructions);
  cudaError_t e = cudaMemcpyAsync ((void *) dst, maps, n * sizeof *maps, cudaMemcpyHostToDevice, st->stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize (st->stream);
  free (maps);
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "uploading the tensor maps");
  return AMK_CUDA_OK;
}

extern "C" amk_cuda_status
amk_cuda_check_program (int device, const amk_device_program *prog, const amk_buffer_t *table,
                        const amk_instruction_t *instructions, char *msg, size_t msg_len)
{
  amk_device_state *st = NULL;
  amk_cuda_status s;

  if ((s = amk_enter (device, msg, msg_len)) != AMK_CUDA_OK)
    return s;
  if (prog == NULL || prog->n_instructions < 0 || (prog->n_instructions > 0 && prog->instructions == NULL))
    {
      amk_msg (msg, msg_len, "no instruction table to check");
      return AMK_CUDA_REJECTED;
    }
  if (prog->n_instructions == 0)
    return AMK_CUDA_OK;
  if ((s = amk_state (device, &st, msg, msg_len)) != AMK_CUDA_OK)
    return s;

  std::lock_guard<std::mutex> launch_guard (*st->launch_lock);
  if ((prog->flags & AMK_PROGRAM_TENSOR_MAPS) != 0 &&
      (s = amk_write_tensor_maps (st, prog, table, instructions, msg, msg_len)) != AMK_CUDA_OK)
    return s;
  amk_device_program copy = *prog;
  void *args[] = { &copy };
  const unsigned threads = 128, blocks = ((unsigned) prog->n_instructions + threads - 1) / threads;
  cudaError_t e = cudaLaunchKernel ((const void *) amk_check_program, dim3 (blocks), dim3 (threads),
                                    args, 0, st->stream);
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "launching the check kernel");
  e = cudaStreamSynchronize (st->stream);
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "waiting for the check kernel");
  return AMK_CUDA_OK;
}

extern "C" amk_cuda_status
amk_cuda_launch_empty (int device, int grid, int threads, char *msg, size_t msg_len)
{
  amk_device_state *st = NULL;
  amk_cuda_status s;

  if ((s = amk_enter (device, msg, msg_len)) != AMK_CUDA_OK)
    return s;
  if (grid <= 0 || !amk_threads_ok (threads))
    {
      amk_msg (msg, msg_len,
               "empty launch of %d blocks x %d threads: need at least one block and a "
               "multiple of 32 threads between 32 and 1024", grid, threads);
      return AMK_CUDA_REJECTED;
    }
  if ((s = amk_state (device, &st, msg, msg_len)) != AMK_CUDA_OK)
    return s;

  amk_empty_kernel<<<dim3 ((unsigned) grid), dim3 ((unsigned) threads), 0, st->stream>>> ();
  cudaError_t e = cudaGetLastError ();
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "launching the empty kernel");
  e = cudaStreamSynchronize (st->stream);
  if (e != cudaSuccess)
    return amk_fail (e, msg, msg_len, "waiting for the empty kernel");
  return AMK_CUDA_OK;
}
