/* scheduler.cu: the persistent megakernel. One cooperative launch; block b is a small VM
 * that walks queue b of the instruction table in order. Instructions on different queues
 * are ordered only by 32-bit counters in device memory (wait: counter >= target with an
 * acquire load; signal: release add after the whole block finished), plus the optional
 * whole-grid barrier GRID_SYNC. See kernels/README.md and DESIGN.md section 4.
 *
 * No GLib here; plain CUDA C++ with inline PTX for the memory-model operations.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdint.h>
#include <cuda_runtime.h>

#include "amk-abi.h"
#include "ops-utility.cuh"

#define AMK_BACKOFF_MIN_NS 32u
#define AMK_BACKOFF_MAX_NS 1024u
#define AMK_ABORT_CLAIMED  (-1) /* abort record being filled by the first aborter */
#define AMK_PREFETCH_LANES 8    /* 8 x 16 bytes = one amk_instruction_t */

/* ---- PTX primitives ----------------------------------------------------------------- */

static __device__ __forceinline__ uint64_t
amk_globaltimer (void)
{
  uint64_t t;
  asm volatile ("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __device__ __forceinline__ uint32_t
amk_smid (void)
{
  uint32_t s;
  asm volatile ("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

static __device__ __forceinline__ uint32_t
amk_ld_acquire (const uint32_t *p)
{
  uint32_t v;
  asm volatile ("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ uint32_t
amk_ld_relaxed (const uint32_t *p)
{
  uint32_t v;
  asm volatile ("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ int32_t
amk_ld_flag (const int32_t *p)
{
  int32_t v;
  asm volatile ("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

static __device__ __forceinline__ void
amk_st_relaxed (uint32_t *p, uint32_t v)
{
  asm volatile ("st.relaxed.gpu.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ void
amk_red_add_release (uint32_t *p, uint32_t v)
{
  asm volatile ("red.release.gpu.global.add.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ uint32_t
amk_atom_add_acq_rel (uint32_t *p, uint32_t v)
{
  uint32_t old;
  asm volatile ("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
                : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

/* ---- abort ---------------------------------------------------------------------------- */

/* First aborter wins the record; everybody raises the flag. Cold path, out of line. */
static __device__ __noinline__ void
amk_raise_abort (int32_t *abort_flag, amk_abort_record_t *rec,
                 int32_t code, int32_t queue, int32_t instruction,
                 int32_t counter, uint32_t observed, uint32_t target, int32_t detail)
{
  if (atomicCAS (&rec->code, 0, AMK_ABORT_CLAIMED) == 0)
    {
      volatile amk_abort_record_t *r = rec;
      r->queue = queue;
      r->instruction = instruction;
      r->counter = counter;
      r->observed = observed;
      r->target = target;
      r->detail = detail;
      r->sm_id = (int32_t) amk_smid ();
      __threadfence ();
      r->code = code;
    }
  __threadfence ();
  atomicExch (abort_flag, 1);
}

/* ---- polling -------------------------------------------------------------------------- */

enum { AMK_POLL_OK = 0, AMK_POLL_ABORTED = 1, AMK_POLL_TIMEOUT = 2 };

/* Slow path of a wait: back off until the condition holds (until_change: *word != ref,
 * else *word >= ref), the abort flag rises, or the watchdog budget is spent. */
static __device__ __noinline__ int
amk_poll_slow (const uint32_t *word, uint32_t ref, bool until_change,
               const int32_t *abort_flag, uint64_t watchdog_ns, uint32_t *observed)
{
  const uint64_t t0 = amk_globaltimer ();
  uint32_t ns = AMK_BACKOFF_MIN_NS;
  uint32_t v;

  for (;;)
    {
      if (amk_ld_flag (abort_flag) != 0)
        {
          *observed = amk_ld_relaxed (word);
          return AMK_POLL_ABORTED;
        }
      __nanosleep (ns);
      ns = min (ns * 2u, AMK_BACKOFF_MAX_NS);
      v = amk_ld_acquire (word);
      if (until_change ? v != ref : v >= ref)
        {
          *observed = v;
          return AMK_POLL_OK;
        }
      if (watchdog_ns != 0 && amk_globaltimer () - t0 > watchdog_ns)
        {
          *observed = v;
          return AMK_POLL_TIMEOUT;
        }
    }
}

static __device__ __forceinline__ int
amk_wait_geq (const uint32_t *word, uint32_t target, const int32_t *abort_flag,
              uint64_t watchdog_ns, uint32_t *observed)
{
  const uint32_t v = amk_ld_acquire (word);
  if (v >= target)
    {
      *observed = v;
      return AMK_POLL_OK;
    }
  return amk_poll_slow (word, target, false, abort_flag, watchdog_ns, observed);
}

/* Sense-reversing grid barrier on gb[0] (arrived) and gb[1] (generation). Thread 0 only,
 * after a __syncthreads: the fence makes the whole block's writes visible first. On a
 * timeout *arrived holds how many blocks had arrived. */
static __device__ __noinline__ int
amk_grid_barrier (uint32_t *gb, uint32_t participants, const int32_t *abort_flag,
                  uint64_t watchdog_ns, uint32_t *arrived)
{
  __threadfence ();
  const uint32_t gen = amk_ld_acquire (gb + 1);
  const uint32_t old = amk_atom_add_acq_rel (gb, 1u);

  if (old + 1u == participants)
    {
      amk_st_relaxed (gb, 0u);          /* ordered before the release below */
      amk_red_add_release (gb + 1, 1u); /* opens the barrier */
      return AMK_POLL_OK;
    }

  uint32_t seen;
  const int r = amk_poll_slow (gb + 1, gen, true, abort_flag, watchdog_ns, &seen);
  if (r == AMK_POLL_TIMEOUT)
    *arrived = amk_ld_relaxed (gb);
  return r;
}

/* ---- instruction fetch ---------------------------------------------------------------- */

/* Lane l (0..7) of the prefetch group copies 16 bytes of instruction idx into dst. The
 * table is constant during a launch. With a 16-byte aligned table the copy is a cp.async
 * (global -> shared without registers; completed by amk_fetch_wait before the next
 * barrier), otherwise a plain synchronous copy. */
static __device__ __forceinline__ void
amk_fetch_part (amk_instruction_t *dst, const amk_instruction_t *table, int32_t idx, int lane)
{
  const amk_instruction_t *ins = table + idx;
  if ((reinterpret_cast<uintptr_t> (table) & 15) == 0)
    {
      const uint32_t s = (uint32_t) __cvta_generic_to_shared (reinterpret_cast<int4 *> (dst) + lane);
      asm volatile ("cp.async.cg.shared.global [%0], [%1], 16;\n"
                    "cp.async.commit_group;"
                    : : "r"(s), "l"(reinterpret_cast<const int4 *> (ins) + lane) : "memory");
    }
  else
    {
      const int *w = reinterpret_cast<const int *> (ins) + 4 * lane;
      reinterpret_cast<int4 *> (dst)[lane] =
          make_int4 (__ldg (w), __ldg (w + 1), __ldg (w + 2), __ldg (w + 3));
    }
}

static __device__ __forceinline__ void
amk_fetch_wait (void)
{
  asm volatile ("cp.async.wait_all;" : : : "memory");
}

/* ---- the kernel ----------------------------------------------------------------------- */

extern "C" __global__ void __launch_bounds__ (1024)
amk_megakernel (amk_device_program prog)
{
  __shared__ __align__ (16) amk_instruction_t s_ins[2]; /* current / next (double buffer) */
  __shared__ int32_t s_idx[2];                          /* their table indices */
  __shared__ amk_op_ctx s_ctx;                          /* resolved by thread 0 */
  __shared__ int s_go;

  const int q = (int) blockIdx.x;
  if (q >= prog.num_sms)
    return;

  const int tid = (int) threadIdx.x;
  const int nt = (int) blockDim.x;
  const int pf = tid - (nt - AMK_PREFETCH_LANES); /* 0..7 in the prefetch group */
  const int32_t qoff = prog.sm_queue_off[q];
  const int32_t qlen = prog.sm_queue_len[q];
  const uint32_t participants = min (gridDim.x, (unsigned) prog.num_sms);

  if (qoff < 0)
    {
      if (tid == 0)
        amk_raise_abort (prog.abort_flag, prog.abort_record, AMK_ABORT_BAD_INDEX,
                         q, -1, -1, 0, 0, qoff);
      return;
    }

  /* instruction 0 */
  if (qlen > 0 && pf >= 0)
    {
      const int32_t idx = __ldg (prog.sm_queue_flat + qoff);
      if (idx >= 0 && idx < prog.n_instructions)
        amk_fetch_part (&s_ins[0], prog.instructions, idx, pf);
      if (pf == 0)
        s_idx[0] = idx;
      amk_fetch_wait ();
    }
  __syncthreads ();

  uint64_t t_start = 0;

  for (int32_t k = 0; k < qlen; ++k)
    {
      const int cur = k & 1;

      /* Prefetch k + 1 into the other shared slot: the copy flies while thread 0 waits
       * and the block runs k, and is completed just before the end-of-instruction
       * barrier. Nobody reads that slot during k. */
      const bool have_next = pf >= 0 && k + 1 < qlen;
      if (have_next)
        {
          const int32_t nidx = __ldg (prog.sm_queue_flat + qoff + k + 1);
          if (nidx >= 0 && nidx < prog.n_instructions)
            amk_fetch_part (&s_ins[cur ^ 1], prog.instructions, nidx, pf);
          if (pf == 0)
            s_idx[cur ^ 1] = nidx;
        }

      if (tid == 0)
        {
          const amk_instruction_t *ins = &s_ins[cur];
          const int32_t idx = s_idx[cur];
          int go = 0;
          int32_t code = AMK_ABORT_NONE, detail = 0, counter = -1;
          uint32_t observed = 0, target = 0;

          if (amk_ld_flag (prog.abort_flag) != 0)
            {
              /* another block aborted, or the host cancelled: leave quietly */
            }
          else if (idx < 0 || idx >= prog.n_instructions)
            {
              code = AMK_ABORT_BAD_INDEX;
              detail = idx;
            }
          else if (ins->n_waits > AMK_MAX_WAITS)
            {
              code = AMK_ABORT_BAD_INDEX;
              detail = ins->n_waits;
            }
          else
            {
              const int32_t sc = ins->signal.counter;
              if (sc != AMK_NO_COUNTER && (sc < 0 || sc >= prog.n_counters))
                {
                  code = AMK_ABORT_BAD_INDEX;
                  detail = sc;
                }
              for (int w = 0; code == AMK_ABORT_NONE && w < ins->n_waits; ++w)
                {
                  const int32_t wc = ins->waits[w].counter;
                  if (wc < 0 || wc >= prog.n_counters)
                    {
                      code = AMK_ABORT_BAD_INDEX;
                      detail = wc;
                    }
                }
              if (code == AMK_ABORT_NONE)
                code = amk_utility_check (ins, prog.buffers, prog.n_buffers, &s_ctx, &detail);

              if (code == AMK_ABORT_NONE)
                {
                  go = 1;
                  for (int w = 0; w < ins->n_waits; ++w)
                    {
                      const amk_wait_t wt = ins->waits[w];
                      const int r = amk_wait_geq (prog.counters + wt.counter, wt.target,
                                                  prog.abort_flag, prog.watchdog_ns, &observed);
                      if (r != AMK_POLL_OK)
                        {
                          go = 0;
                          if (r == AMK_POLL_TIMEOUT)
                            {
                              code = AMK_ABORT_TIMEOUT;
                              counter = wt.counter;
                              target = wt.target;
                            }
                          break;
                        }
                    }
                }

              if (go)
                {
                  if (prog.trace != nullptr)
                    t_start = amk_globaltimer ();
                  if (ins->opcode == AMK_ABI_OP_TRAP)
                    {
                      go = 0;
                      code = AMK_ABORT_TRAP;
                      detail = ins->params.i[0];
                    }
                  else if (ins->opcode == AMK_ABI_OP_GRID_SYNC)
                    {
                      uint32_t arrived = 0;
                      const int r = amk_grid_barrier (prog.grid_barrier, participants,
                                                      prog.abort_flag, prog.watchdog_ns,
                                                      &arrived);
                      if (r != AMK_POLL_OK)
                        {
                          go = 0;
                          if (r == AMK_POLL_TIMEOUT)
                            {
                              code = AMK_ABORT_TIMEOUT;
                              counter = -1;
                              observed = arrived;
                              target = participants;
                            }
                        }
                    }
                }
            }

          if (code != AMK_ABORT_NONE)
            amk_raise_abort (prog.abort_flag, prog.abort_record, code, q, k, counter,
                             observed, target, detail);
          s_go = go;
        }
      __syncthreads ();
      if (!s_go)
        break;

      amk_utility_exec (s_ins[cur].opcode, &s_ctx, tid, nt);

      if (have_next)
        amk_fetch_wait ();
      __syncthreads ();

      if (tid == 0)
        {
          const amk_signal_t sig = s_ins[cur].signal;
          if (sig.counter != AMK_NO_COUNTER)
            {
              __threadfence ();
              amk_red_add_release (prog.counters + sig.counter, sig.amount);
            }
          if (prog.trace != nullptr)
            {
              amk_trace_event_t ev;
              ev.queue = q;
              ev.instruction = k;
              ev.sm_id = amk_smid ();
              ev.opcode = s_ins[cur].opcode;
              ev.start_ns = t_start;
              ev.end_ns = amk_globaltimer ();
              prog.trace[qoff + k] = ev;
            }
        }
    }
}
