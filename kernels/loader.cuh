/* loader.cuh: the loader warp of amk_megakernel_paged (the second VM's decode build).
 * It walks the block's queue on its own, 32 instructions at a time (lane l reads the
 * checked record of instruction base + l, so a chunk costs one round trip), and streams
 * the W tile of every paged MATVEC (amk_mv_page_bytes) into the pages in queue order, a
 * bulk copy per page, as soon as the page is empty: the weights of the next instructions
 * arrive while the op threads wait for counters or compute, across instruction
 * boundaries. W is CONSTANT, so no counter orders its copies.
 *
 * A MATVEC that takes the ring (amk_mv_needs_ring) uses the pages' shared memory: the
 * loader issues nothing past it until the op threads have finished it (s_done). When the
 * op threads leave (the queue's end, or an abort) they raise s_stop; the loader stops
 * issuing and waits for its copies in flight, so that the block never exits with a copy
 * still writing its shared memory.
 *
 * Included by scheduler.cu after amk_checked_table.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_LOADER_CUH
#define AMK_LOADER_CUH

#include "pages.cuh"

static __device__ __forceinline__ int32_t
amk_ld_acquire_shared (const int32_t *p)
{
  int32_t v;
  asm volatile ("ld.acquire.cta.shared::cta.s32 %0, [%1];" : "=r"(v) : "r"(amk_smem_addr (p)) : "memory");
  return v;
}

static __device__ __forceinline__ void
amk_st_release_shared (int32_t *p, int32_t v)
{
  asm volatile ("st.release.cta.shared::cta.s32 [%0], %1;" : : "r"(amk_smem_addr (p)), "r"(v) : "memory");
}

/* What lane `lane` finds for instruction k of the queue: the bytes its MATVEC streams
 * through the pages (and W's address), or whether it needs the ring. */
struct amk_loader_item {
  const unsigned char *w;
  uint32_t bytes;
  bool ring;
};

static __device__ __forceinline__ amk_loader_item
amk_loader_classify (const amk_device_program &prog, int32_t qoff, int32_t qlen, int32_t k)
{
  amk_loader_item it = { nullptr, 0, false };
  if (k >= qlen)
    return it;
  const int32_t idx = prog.sm_queue_flat[qoff + k];
  if (idx < 0 || idx >= prog.n_instructions || prog.instructions[idx].opcode != AMK_ABI_OP_MATVEC)
    return it;
  const amk_checked_t *r = amk_checked_table (prog) + idx;
  if (r->code != AMK_ABORT_NONE)
    return it;
  const amk_op_ctx ctx = r->ctx;
  it.bytes = amk_mv_page_bytes (&ctx);
  it.w = ctx.ptr[1];
  it.ring = amk_mv_needs_ring (&ctx);
  return it;
}

/* Every lane: waits until the op threads have finished instruction k; false (in every
 * lane: the warp's shuffles need one answer) when they left instead. */
static __device__ __forceinline__ bool
amk_loader_wait_done (int32_t *s_done, int32_t *s_stop, int32_t k)
{
  bool ok = true;
  while (ok && amk_ld_acquire_shared (s_done) <= k)
    {
      ok = !amk_ld_acquire_shared (s_stop);
      __nanosleep (64);
    }
  /* the op threads' accesses to that shared memory before the copies that overwrite it */
  asm volatile ("fence.proxy.async.shared::cta;" : : : "memory");
  return __all_sync (~0u, ok);
}

/* Every lane: waits until page s's slot is empty; false in every lane when the op
 * threads left instead. */
static __device__ __forceinline__ bool
amk_loader_wait_empty (amk_page_barriers *pb, int32_t *s_stop, uint32_t s)
{
  bool ok = true;
  if (s >= AMK_PAGES)
    while (ok && !amk_mbar_try (&pb->empty[s % AMK_PAGES], amk_page_parity (s - AMK_PAGES)))
      ok = !amk_ld_acquire_shared (s_stop);
  return __all_sync (~0u, ok);
}

static __device__ void
amk_loader_run (const amk_device_program &prog, int32_t qoff, int32_t qlen, amk_page_barriers *pb,
                int32_t *s_done, int32_t *s_stop, int lane)
{
  uint64_t pol;
  asm volatile ("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  uint32_t seq = 0; /* pages issued */
  bool go = amk_s_roles.paged && (prog.flags & AMK_PROGRAM_CHECKED) != 0;

  for (int32_t base = 0; go && base < qlen; base += 32)
    {
      const amk_loader_item it = amk_loader_classify (prog, qoff, qlen, base + lane);
      const uint32_t streams = __ballot_sync (~0u, it.bytes != 0);
      const uint32_t rings = __ballot_sync (~0u, it.ring);
      uint32_t todo = streams | rings;
      while (go && todo != 0)
        {
          const int j = __ffs ((int) todo) - 1;
          todo &= todo - 1;
          if (rings >> j & 1u)
            {
              go = amk_loader_wait_done (s_done, s_stop, base + j);
              continue;
            }
          const uint32_t bytes = __shfl_sync (~0u, it.bytes, j);
          const unsigned char *w = reinterpret_cast<const unsigned char *> (
            __shfl_sync (~0u, reinterpret_cast<uintptr_t> (it.w), j));
          for (uint32_t off = 0; off < bytes; off += AMK_PAGE_BYTES)
            {
              if (!(go = amk_loader_wait_empty (pb, s_stop, seq)))
                break;
              if (lane == 0)
                {
                  const uint32_t len = min (AMK_PAGE_BYTES, bytes - off);
                  uint64_t *full = &pb->full[seq % AMK_PAGES];
                  asm volatile ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                                : : "r"(amk_smem_addr (full)), "r"(len) : "memory");
                  asm volatile ("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                                " [%0], [%1], %2, [%3], %4;"
                                : : "r"(amk_smem_addr (amk_page (seq))), "l"(w + off), "r"(len),
                                    "r"(amk_smem_addr (full)), "l"(pol) : "memory");
                }
              __syncwarp ();
              seq++;
            }
        }
    }

  /* the copies in flight land before the block may exit */
  for (uint32_t s = seq > AMK_PAGES ? seq - AMK_PAGES : 0; s < seq; s++)
    while (!amk_mbar_try (&pb->full[s % AMK_PAGES], amk_page_parity (s)))
      ;
}

#endif /* AMK_LOADER_CUH */
