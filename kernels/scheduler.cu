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
#include "ops-matvec.cuh"
#include "ops-vector.cuh"
#include "ops-attention.cuh"
#include "ops-matmul.cuh"
#include "ops-attention-rows.cuh"
#include "l2-prefetch.cuh"

#define AMK_BACKOFF_MIN_NS 32u
#define AMK_BACKOFF_MAX_NS 1024u
#define AMK_SPIN_NS        20000u /* spin this long before backing off */
#define AMK_ABORT_CLAIMED  (-1) /* abort record being filled by the first aborter */
#define AMK_PREFETCH_LANES 8    /* 8 x 16 bytes = one amk_instruction_t */
#define AMK_RING           8    /* instruction slots in shared memory */
#define AMK_DEPTH          6    /* instructions in flight ahead of the current one */
#define AMK_CHUNK          32   /* queue entries (instruction indices) fetched at once */
#define AMK_SMEM_BUFFERS   384  /* buffer tables up to this size are read from shared memory */

/* ---- PTX primitives ----------------------------------------------------------------- */

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

/* Poll results travel packed as (status << 32) | observed value, so no local has its
 * address taken (which would put it on the stack). */
static __device__ __forceinline__ uint64_t
amk_poll_result (int status, uint32_t observed)
{
  return ((uint64_t) status << 32) | observed;
}

/* Slow path of a wait: poll until the condition holds (until_change: *word != ref, else
 * *word >= ref), the abort flag rises, or the watchdog budget is spent. The first polls
 * spin without sleeping (each load already takes an L2 round trip, and a dependency
 * usually resolves within microseconds); long waits back off with __nanosleep. The abort
 * flag and the timer are read every 256 polls only, so the loop stays one load deep.
 * Plain acquire polls give the shortest hop: relaxed polls with a fence after the hit,
 * several polls in flight, or thread 0 polling alone were slower (bench/NOTES.md). */
static __device__ __noinline__ uint64_t
amk_poll_slow (const uint32_t *word, uint32_t ref, bool until_change,
               const int32_t *abort_flag, uint64_t watchdog_ns)
{
  const uint64_t t0 = amk_globaltimer ();
  uint32_t ns = 0;
  uint32_t v;

  for (uint32_t polls = 1;; ++polls)
    {
      v = amk_ld_acquire (word);
      if (until_change ? v != ref : v >= ref)
        return amk_poll_result (AMK_POLL_OK, v);
      if ((polls & 255u) == 0)
        {
          if (amk_ld_flag (abort_flag) != 0)
            return amk_poll_result (AMK_POLL_ABORTED, v);
          const uint64_t elapsed = amk_globaltimer () - t0;
          if (watchdog_ns != 0 && elapsed > watchdog_ns)
            return amk_poll_result (AMK_POLL_TIMEOUT, v);
          if (elapsed > AMK_SPIN_NS)
            ns = min (max (ns * 2u, AMK_BACKOFF_MIN_NS), AMK_BACKOFF_MAX_NS);
        }
      if (ns != 0)
        __nanosleep (ns);
    }
}

static __device__ __forceinline__ uint64_t
amk_wait_geq (const uint32_t *word, uint32_t target, const int32_t *abort_flag,
              uint64_t watchdog_ns)
{
  const uint32_t v = amk_ld_acquire (word);
  if (v >= target)
    return amk_poll_result (AMK_POLL_OK, v);
  return amk_poll_slow (word, target, false, abort_flag, watchdog_ns);
}

/* Sense-reversing grid barrier on gb[0] (arrived) and gb[1] (generation). Thread 0 only,
 * after a __syncthreads: the fence makes the whole block's writes visible first. The
 * packed result's value is, on a timeout, how many blocks had arrived. */
static __device__ __noinline__ uint64_t
amk_grid_barrier (uint32_t *gb, uint32_t participants, const int32_t *abort_flag,
                  uint64_t watchdog_ns)
{
  __threadfence ();
  const uint32_t gen = amk_ld_acquire (gb + 1);
  const uint32_t old = amk_atom_add_acq_rel (gb, 1u);

  if (old + 1u == participants)
    {
      amk_st_relaxed (gb, 0u);          /* ordered before the release below */
      amk_red_add_release (gb + 1, 1u); /* opens the barrier */
      return amk_poll_result (AMK_POLL_OK, participants);
    }

  const uint64_t r = amk_poll_slow (gb + 1, gen, true, abort_flag, watchdog_ns);
  if ((int) (r >> 32) == AMK_POLL_TIMEOUT)
    return amk_poll_result (AMK_POLL_TIMEOUT, amk_ld_relaxed (gb));
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
      asm volatile ("cp.async.cg.shared.global [%0], [%1], 16;"
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
amk_fetch_commit (void)
{
  asm volatile ("cp.async.commit_group;" : : : "memory");
}

static __device__ __forceinline__ void
amk_fetch_wait (void)
{
  asm volatile ("cp.async.wait_all;" : : : "memory");
}

/* Waits until at most AMK_DEPTH - 2 groups are in flight: the two oldest, holding the
 * next two instructions, have landed (the second one for the L2 prefetch). */
static __device__ __forceinline__ void
amk_fetch_wait_next (void)
{
  asm volatile ("cp.async.wait_group %0;" : : "n"(AMK_DEPTH - 2) : "memory");
}

/* The fetch warp (the block's last warp) copies the queue's instruction indices into a
 * shared ring, AMK_CHUNK at a time, one chunk ahead (lane l copies entry l of chunk c),
 * so that fetching an instruction never waits for a global load. */
static __device__ __forceinline__ void
amk_fetch_chunk (const amk_device_program &prog, int32_t *qidx, int32_t qoff, int32_t qlen,
                 int32_t chunk, int lane)
{
  const int32_t pos = chunk * AMK_CHUNK + lane;
  if (pos < qlen)
    {
      const uint32_t s = (uint32_t) __cvta_generic_to_shared (&qidx[pos % (2 * AMK_CHUNK)]);
      asm volatile ("cp.async.ca.shared.global [%0], [%1], 4;"
                    : : "r"(s), "l"(prog.sm_queue_flat + qoff + pos) : "memory");
    }
}

/* What amk_check_program found for one instruction (AMK_PROGRAM_CHECKED). */
struct __align__ (16) amk_checked_t {
  amk_op_ctx ctx;
  int32_t    code;   /* AMK_ABORT_NONE or the check's abort code */
  int32_t    detail;
};
static_assert (sizeof (amk_checked_t) == AMK_CHECKED_RECORD_BYTES, "checked record size");
#define AMK_CHECKED_LANES (AMK_CHECKED_RECORD_BYTES / 16)

static __device__ __forceinline__ const amk_checked_t *
amk_checked_table (const amk_device_program &prog)
{
  return reinterpret_cast<const amk_checked_t *> (prog.instructions + prog.n_instructions);
}

/* Lanes 0..7 of the fetch warp start copying instruction `pos` of the queue (its index
 * already in the shared ring) into its ring slot; with AMK_PROGRAM_CHECKED, lanes 8..10
 * copy its checked record too. */
static __device__ __forceinline__ void
amk_fetch_position (const amk_device_program &prog, amk_instruction_t *ring,
                    amk_checked_t *checked, int32_t *ring_idx, const int32_t *qidx, int32_t pos,
                    int lane)
{
  const bool record = (prog.flags & AMK_PROGRAM_CHECKED) != 0;
  if (lane >= AMK_PREFETCH_LANES + (record ? AMK_CHECKED_LANES : 0))
    return;
  const int32_t idx = qidx[pos % (2 * AMK_CHUNK)];
  if (idx >= 0 && idx < prog.n_instructions)
    {
      if (lane < AMK_PREFETCH_LANES)
        amk_fetch_part (&ring[pos % AMK_RING], prog.instructions, idx, lane);
      else
        {
          const int part = lane - AMK_PREFETCH_LANES;
          const uint32_t dst = (uint32_t) __cvta_generic_to_shared (reinterpret_cast<int4 *> (&checked[pos % AMK_RING]) + part);
          asm volatile ("cp.async.cg.shared.global [%0], [%1], 16;"
                        : : "r"(dst), "l"(reinterpret_cast<const int4 *> (amk_checked_table (prog) + idx) + part)
                        : "memory");
        }
    }
  if (lane == 0)
    ring_idx[pos % AMK_RING] = idx;
}

/* The fetch warp, at the top of iteration k: the MATVEC weights of position k (its
 * waits have not started yet) or k + 1 (it runs after this one) into L2; both have
 * landed in the ring. With a lookahead of 2, position 0 gets its own at k = 0. */
static __device__ __forceinline__ void
amk_l2_prefetch_ahead (const amk_device_program &prog, const amk_instruction_t *ring,
                       const int32_t *ring_idx, int32_t k, int32_t qlen, int lane)
{
  const int32_t ahead = (int32_t) min (prog.l2_prefetch, (uint32_t) AMK_L2_PREFETCH_MAX);

  for (int32_t p = k == 0 ? 0 : k + ahead - 1; p < k + ahead && p < qlen; ++p)
    {
      const int32_t idx = ring_idx[p % AMK_RING];
      if (idx >= 0 && idx < prog.n_instructions)
        amk_l2_prefetch_instruction (prog, &ring[p % AMK_RING], lane);
    }
}

/* ---- the kernel ----------------------------------------------------------------------- */

/* Thread 0 only: the instruction's waits, each an acquire poll. Returns AMK_ABORT_NONE,
 * AMK_ABORT_TIMEOUT (with counter/observed/target set) or -1 when the abort flag rose. */
static __device__ __forceinline__ int
amk_run_waits (const amk_device_program &prog, const amk_instruction_t *ins,
               int32_t *counter, uint32_t *observed, uint32_t *target)
{
  for (int w = 0; w < ins->n_waits; ++w)
    {
      const amk_wait_t wt = ins->waits[w];
      const uint64_t pr = amk_wait_geq (prog.counters + wt.counter, wt.target,
                                        prog.abort_flag, prog.watchdog_ns);
      const int r = (int) (pr >> 32);
      if (r == AMK_POLL_OK)
        continue;
      if (r == AMK_POLL_TIMEOUT)
        {
          *counter = wt.counter;
          *observed = (uint32_t) pr;
          *target = wt.target;
          return AMK_ABORT_TIMEOUT;
        }
      return -1;
    }
  return AMK_ABORT_NONE;
}

/* One warp: the instruction's waits, lane w polling wait w, so that they cost one round
 * trip rather than one each. Returns, in every lane, AMK_ABORT_NONE or the failure of
 * the first wait that failed, which that lane has recorded (-1: the abort flag rose). */
static __device__ __forceinline__ int
amk_run_waits_warp (const amk_device_program &prog, const amk_instruction_t *ins, int q,
                    int32_t k, int lane)
{
  int r = AMK_ABORT_NONE;
  uint64_t pr = 0;

  if (lane < ins->n_waits)
    {
      const amk_wait_t wt = ins->waits[lane];
      pr = amk_wait_geq (prog.counters + wt.counter, wt.target, prog.abort_flag,
                         prog.watchdog_ns);
      const int status = (int) (pr >> 32);
      r = status == AMK_POLL_OK ? AMK_ABORT_NONE : status == AMK_POLL_TIMEOUT ? AMK_ABORT_TIMEOUT : -1;
    }
  const unsigned failed = __ballot_sync (0xffffffffu, r != AMK_ABORT_NONE);
  if (failed == 0)
    return AMK_ABORT_NONE;
  const int first = __ffs (failed) - 1;
  if (lane == first && r > 0)
    {
      const amk_wait_t wt = ins->waits[lane];
      amk_raise_abort (prog.abort_flag, prog.abort_record, r, q, k, wt.counter,
                       (uint32_t) pr, wt.target, 0);
    }
  return __shfl_sync (0xffffffffu, r, first);
}

/* Every thread: the device-side checks of one instruction (the host verifier's second
 * line) and, for the data ops, its resolved operands. Every thread reads the same
 * shared instruction and buffer table, so the verdict is uniform across the block
 * without a barrier. */
static __device__ __forceinline__ int
amk_check (const amk_device_program &prog, const amk_instruction_t *ins, int32_t idx,
           amk_op_ctx *ctx, int32_t *detail, bool many)
{
  if (idx < 0 || idx >= prog.n_instructions)
    {
      *detail = idx;
      return AMK_ABORT_BAD_INDEX;
    }
  if (ins->n_waits > AMK_MAX_WAITS)
    {
      *detail = ins->n_waits;
      return AMK_ABORT_BAD_INDEX;
    }
  const int32_t sc = ins->signal.counter;
  if (sc != AMK_NO_COUNTER && (uint32_t) sc >= (uint32_t) prog.n_counters)
    {
      *detail = sc;
      return AMK_ABORT_BAD_INDEX;
    }
  for (int w = 0; w < ins->n_waits; ++w)
    if ((uint32_t) ins->waits[w].counter >= (uint32_t) prog.n_counters)
      {
        *detail = ins->waits[w].counter;
        return AMK_ABORT_BAD_INDEX;
      }
  return amk_utility_check (ins, prog.buffers, prog.n_buffers, ctx, detail, many);
}

#include "loader.cuh"

/* ---- the check kernel ------------------------------------------------------------------- */

/* One thread per instruction, once per loaded program and buffer table: amk_check's
 * verdict and the resolved operands into the table behind the instructions, where the
 * megakernel fetches them with the instruction (AMK_PROGRAM_CHECKED). The verdicts do
 * not change between launches, and checking in every launch put that work on every
 * instruction's path. */
extern "C" __global__ void
amk_check_program (amk_device_program prog)
{
  const int32_t i = (int32_t) (blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= prog.n_instructions)
    return;
  amk_checked_t r = {};
  r.code = amk_check (prog, prog.instructions + i, i, &r.ctx, &r.detail, true);
#ifdef AMK_MM_HAVE_WGMMA
  if (r.code == AMK_ABORT_NONE)
    amk_mmw_mark_tma (prog, prog.instructions + i, &r.ctx);
#endif
  const_cast<amk_checked_t *> (amk_checked_table (prog))[i] = r;
}

/* ---- the kernel ----------------------------------------------------------------------- */

/* The kernel's body, in three builds: MANY runs MATMUL and ATTN_ROWS as well. Their
 * out-of-line call makes the loop keep fewer registers, which slowed the decode step, so
 * a program without them runs a build without it (the launcher chooses:
 * AMK_PROGRAM_MANY_TOKENS). ROPE_ROWS, small and inline, runs in all (Qwen3's decode
 * step has one). PAGED (a decode build, AMK_PROGRAM_PAGED) has a loader warp behind its
 * op threads that streams MATVEC weights into pages (loader.cuh). */
template <bool MANY, bool PAGED>
static __device__ __forceinline__ void
amk_megakernel_run (const amk_device_program &launched)
{
  __shared__ __align__ (16) amk_buffer_t s_buffers[AMK_SMEM_BUFFERS]; /* the buffer table */
  __shared__ __align__ (16) amk_instruction_t s_ins[AMK_RING]; /* ring of fetched instructions */
  __shared__ int32_t s_idx[AMK_RING];                          /* their table indices */
  __shared__ amk_checked_t s_chk[AMK_RING];                    /* their checked records */
  __shared__ int32_t s_qidx[2 * AMK_CHUNK];                    /* ring of queue entries */
  __shared__ int s_go;
  __shared__ int s_abort;
  __shared__ amk_page_barriers s_pages;
  __shared__ int32_t s_done; /* PAGED: instructions the op threads have finished */
  __shared__ int32_t s_stop; /* PAGED: the op threads have left the queue */

  const int q = (int) blockIdx.x;
  if (q >= launched.num_sms)
    return;

  /* Every instruction reads its operands' table entries before it can start; from
   * global memory that is a round trip queued behind the weight streams of the whole
   * device, from shared memory it is nothing. The table is constant during a launch.
   * (The barrier after the instruction prologue below publishes the copy.) */
  amk_device_program prog = launched;
  if (prog.n_buffers >= 0 && prog.n_buffers <= AMK_SMEM_BUFFERS)
    {
      const uint2 *src = reinterpret_cast<const uint2 *> (launched.buffers);
      uint2 *dst = reinterpret_cast<uint2 *> (s_buffers);
      for (int i = (int) threadIdx.x; i < prog.n_buffers * 3; i += (int) blockDim.x)
        dst[i] = src[i];
      prog.buffers = s_buffers;
    }

  const int tid = (int) threadIdx.x;
  /* the op threads: all but the loader warp */
  const int nt = PAGED ? (int) blockDim.x - 32 : (int) blockDim.x;
  const int pf = tid - (nt - 32); /* lane in the fetch warp (the last op warp), or negative */
  const bool fetching = pf >= 0 && tid < nt;
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

  if (tid == 0)
    {
      s_abort = 0;
      amk_s_roles.op_threads = (uint32_t) nt;
      /* pages need the paged build's op threads and x' room behind them */
      amk_s_roles.paged = PAGED && nt == AMK_PAGED_OP_THREADS && amk_dyn_smem_size () > AMK_PAGES_BYTES;
      amk_s_roles.scratch = amk_s_roles.paged ? AMK_PAGES_BYTES : 0u;
      if (PAGED)
        {
          s_done = 0;
          s_stop = 0;
          for (uint32_t i = 0; i < AMK_PAGES; i++)
            {
              amk_mbar_init (&s_pages.full[i], 1);
              amk_mbar_init (&s_pages.empty[i], AMK_PAGE_READERS);
            }
          asm volatile ("fence.mbarrier_init.release.cluster;" : : : "memory");
        }
    }

  /* The first AMK_DEPTH instructions; afterwards iteration k fetches k + AMK_DEPTH, one
   * cp.async group per iteration, so the fetch latency hides behind AMK_DEPTH
   * instructions instead of one. */
  if (fetching)
    {
      amk_fetch_chunk (prog, s_qidx, qoff, qlen, 0, pf);
      amk_fetch_chunk (prog, s_qidx, qoff, qlen, 1, pf);
      amk_fetch_commit ();
      amk_fetch_wait ();
      __syncwarp ();
      for (int32_t pos = 0; pos < AMK_DEPTH && pos < qlen; ++pos)
        amk_fetch_position (prog, s_ins, s_chk, s_idx, s_qidx, pos, pf);
      amk_fetch_commit ();
      amk_fetch_wait ();
    }
  __syncthreads (); /* the whole block, the loader warp too */

  if (PAGED && tid >= nt)
    {
      amk_loader_run (prog, qoff, qlen, &s_pages, &s_done, &s_stop, tid & 31);
      return;
    }
  uint32_t page_seq = 0; /* PAGED: the pages the op threads have read */

  /* The fast path of an instruction without waits is: read it from shared memory,
   * check it, run it, one barrier, signal. Only waits, GRID_SYNC and aborts need thread
   * 0 to tell the block something, which costs a second barrier. */
  for (int32_t k = 0; k < qlen; ++k)
    {
      const int cur = k % AMK_RING;
      const amk_instruction_t *ins = &s_ins[cur];

      /* Fetch k + AMK_DEPTH into its ring slot; nobody reads that slot before the
       * barrier of iteration k + AMK_DEPTH - 1. Every AMK_CHUNK iterations, also fetch
       * the queue entries of chunk c + 2 into the half that held chunk c, which is no
       * longer needed: they land (wait_group at the end of an iteration, then the
       * barrier) AMK_DEPTH iterations later, long before position k + AMK_DEPTH
       * reaches them. */
      if (fetching)
        {
          if (k % AMK_CHUNK == 0 && k > 0)
            amk_fetch_chunk (prog, s_qidx, qoff, qlen, k / AMK_CHUNK + 1, pf);
          if (k + AMK_DEPTH < qlen)
            amk_fetch_position (prog, s_ins, s_chk, s_idx, s_qidx, k + AMK_DEPTH, pf);
          amk_fetch_commit ();

          /* Weights into L2 ahead of their instruction (l2-prefetch.cuh) */
          if (prog.l2_prefetch > 0)
            amk_l2_prefetch_ahead (prog, s_ins, s_idx, k, qlen, pf);
        }

      const uint32_t opcode = ins->opcode;
      const amk_signal_t sig = ins->signal;
      amk_op_ctx ctx;
      int32_t detail = 0;
      int code;
      bool recorded = false; /* the loader sees the same record */
      if ((prog.flags & AMK_PROGRAM_CHECKED) != 0 && s_idx[cur] >= 0 && s_idx[cur] < prog.n_instructions)
        {
          recorded = true;
          /* checked once at load: the same verdict, without the per-launch cost */
          ctx = s_chk[cur].ctx;
          code = s_chk[cur].code;
          detail = s_chk[cur].detail;
        }
      else
        code = amk_check (prog, ins, s_idx[cur], &ctx, &detail, MANY);
      uint64_t t_start = 0;

      if (code == AMK_ABORT_NONE && opcode == AMK_ABI_OP_TRAP)
        {
          code = AMK_ABORT_TRAP;
          detail = ins->params.trap.code;
        }
      if (code != AMK_ABORT_NONE)
        {
          /* uniform: every thread reached the same verdict */
          if (tid == 0)
            amk_raise_abort (prog.abort_flag, prog.abort_record, code, q, k, -1, 0, 0, detail);
          break;
        }

      /* PAGED: the loader streams this MATVEC's W into the pages */
      const uint32_t page_bytes = PAGED && recorded && opcode == AMK_ABI_OP_MATVEC
                                  ? amk_mv_page_bytes (&ctx) : 0u;

      /* MATVEC with a CONSTANT W: its first loads go out before the waits (W cannot
       * depend on a counter), so they overlap the waits and the staging of x. */
      if (opcode == AMK_ABI_OP_MATVEC && page_bytes == 0 && amk_matvec_early (&ctx))
        amk_matvec_prefetch (&ctx, tid, nt);

      /* ROPE_KV, ATTN_DECODE: the position's load overlaps the waits when it can */
      const int32_t early_pos = opcode == AMK_ABI_OP_ROPE_KV || opcode == AMK_ABI_OP_ATTN_DECODE
                                ? amk_attention_early_pos (ins, prog.buffers, tid) : AMK_ATTN_NO_POS;
      if (opcode == AMK_ABI_OP_ROPE_KV)
        amk_rope_early (ins, early_pos, tid); /* the angles' cos and sin, also before the waits */

      bool run = true;
      if (opcode == AMK_ABI_OP_GRID_SYNC)
        {
          /* one arrival per block: thread 0 waits, arrives, and tells the block */
          if (tid == 0)
            {
              int32_t counter = -1;
              uint32_t observed = 0, target = 0;
              int r = amk_run_waits (prog, ins, &counter, &observed, &target);

              if (r == AMK_ABORT_NONE)
                {
                  const uint64_t pr = amk_grid_barrier (prog.grid_barrier, participants,
                                                        prog.abort_flag, prog.watchdog_ns);
                  const int pr_status = (int) (pr >> 32);
                  if (pr_status == AMK_POLL_TIMEOUT)
                    {
                      r = AMK_ABORT_TIMEOUT;
                      observed = (uint32_t) pr;
                      target = participants;
                    }
                  else if (pr_status != AMK_POLL_OK)
                    r = -1;
                }
              if (r > 0)
                amk_raise_abort (prog.abort_flag, prog.abort_record, r, q, k, counter,
                                 observed, target, 0);
              s_go = r == AMK_ABORT_NONE;
            }
          amk_sync ();
          if (!s_go)
            break;
        }
      else if (ins->n_waits > 0)
        {
          /* Warp 0 polls (a lane per wait) and tells the block through a barrier, which
           * also orders its acquires before every thread's reads: a poller per warp
           * crowds the counters' L2 lines while other SMs work, lengthening the hops.
           * Most ops start with a block barrier anyway. A failed wait (watchdog, or
           * another block aborted) makes the block skip the work and leave together
           * after the end-of-instruction barrier. */
          __shared__ int s_waited;
          if (tid < 32)
            {
              const int r0 = amk_run_waits_warp (prog, ins, q, k, tid);
              if (tid == 0)
                s_waited = r0;
            }
          amk_sync ();
          const int r = *reinterpret_cast<volatile int *> (&s_waited);
          if (r != AMK_ABORT_NONE && (tid & 31) == 0)
            s_abort = 1;
          run = r == AMK_ABORT_NONE;
        }

      if (tid == 0 && prog.trace != nullptr)
        t_start = amk_globaltimer ();

      if (opcode == AMK_ABI_OP_MATVEC)
        {
          /* has barriers: every warp */
          if (!amk_matvec_exec (&ctx, ins, prog.buffers, run, tid, nt, &s_pages, page_seq,
                                page_bytes, prog.watchdog_ns))
            {
              /* a page did not come: the loader is stuck (a bug, never bad input) */
              if ((tid & 31) == 0)
                {
                  amk_raise_abort (prog.abort_flag, prog.abort_record, AMK_ABORT_TIMEOUT, q, k,
                                   -1, page_seq, amk_pages_of (page_bytes), 0);
                  s_abort = 1;
                }
            }
          page_seq += amk_pages_of (page_bytes);
        }
#ifdef AMK_MM_HAVE_WGMMA
      else if (MANY && opcode == AMK_ABI_OP_MATMUL && amk_mmw_takes (&ctx, ins, nt))
        {
          if (run)
            amk_mmw_exec (&ctx, ins, prog, tid); /* inline: see its comment */
        }
#endif
      else if (opcode >= AMK_ABI_OP_RMSNORM && opcode <= AMK_ABI_OP_ATTN_ROWS)
        {
          /* every warp enters (the ops may have block barriers); checks that need device
           * data (a token id, a position) give the same verdict in every thread */
          /* the decode kernel keeps ROPE_ROWS's registers few (ops-attention-rows.cuh) */
          constexpr int rope_inflight = MANY ? AMK_ROPE_ROWS_INFLIGHT : 1;
          int32_t late_detail = ins->buffers[0];
          const int late = opcode <= AMK_ABI_OP_ARGMAX_FINAL
                             ? amk_vector_exec (&ctx, ins, prog, run, tid, nt, &late_detail)
                           : opcode <= AMK_ABI_OP_ATTN_REDUCE
                             ? amk_attention_exec (&ctx, ins, prog, early_pos, run, tid, nt, &late_detail)
                           : opcode == AMK_ABI_OP_ROPE_ROWS
                             ? amk_rope_rows_exec<rope_inflight> (&ctx, ins, prog.buffers, run, tid, nt, &late_detail)
                           : MANY
                             ? amk_many_tokens_exec (&ctx, ins, prog.buffers, run, tid, nt, &late_detail)
                             : AMK_ABORT_BAD_OPCODE;
          if (!MANY && opcode > AMK_ABI_OP_ATTN_REDUCE)
            late_detail = (int32_t) opcode;
          if (late != AMK_ABORT_NONE)
            {
              if (tid == 0)
                amk_raise_abort (prog.abort_flag, prog.abort_record, late, q, k, -1, 0, 0,
                                 late_detail);
              break;
            }
        }
      else if (run)
        amk_utility_exec (opcode, &ctx, tid, nt);

      if (fetching)
        amk_fetch_wait_next ();
      amk_sync ();
      if (s_abort)
        break;
      if (PAGED && tid == 0)
        amk_st_release_shared (&s_done, k + 1);

      if (tid == 0)
        {
          /* The barrier orders the block's writes before thread 0; the release add is
           * cumulative, so a block that acquires the counter sees all of them. */
          if (sig.counter != AMK_NO_COUNTER)
            amk_red_add_release (prog.counters + sig.counter, sig.amount);
          if (prog.trace != nullptr)
            {
              amk_trace_event_t ev;
              ev.queue = q;
              ev.instruction = k;
              ev.sm_id = amk_smid ();
              ev.opcode = opcode;
              ev.start_ns = t_start;
              ev.end_ns = amk_globaltimer ();
              prog.trace[qoff + k] = ev;
            }
        }
    }

  if (fetching)
    amk_fetch_wait (); /* leave no copy in flight */
  if (PAGED && tid == 0)
    amk_st_release_shared (&s_stop, 1);
}

extern "C" __global__ void __launch_bounds__ (512)
amk_megakernel (amk_device_program launched)
{
  amk_megakernel_run<false, false> (launched);
}

extern "C" __global__ void __launch_bounds__ (512)
amk_megakernel_many (amk_device_program launched)
{
  amk_megakernel_run<true, false> (launched);
}

extern "C" __global__ void __launch_bounds__ (AMK_PAGED_OP_THREADS + 32, 1)
amk_megakernel_paged (amk_device_program launched)
{
  amk_megakernel_run<false, true> (launched);
}
