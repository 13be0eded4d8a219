/* ops-matvec-pages.cuh: MATVEC on the second VM's pages (pages.cuh). The loader warp has
 * streamed the tile's rows of W, in order, into pages seq, seq + 1, ... before or while
 * the op threads waited; here they stage x' as the ring pipeline does (the pages take
 * the ring's place, so x' lies where it always does) and read the pages. Page q goes to
 * warp group q % AMK_PAGE_GROUPS, so a page waits for its own group only while the other
 * group reads the next; each warp of the group reads a 2 KiB span of the page, lane l
 * the span's 16-byte chunks l, l + 32, l + 64, l + 96. A span lies in one row (rows are
 * multiples of 2 KiB) and its warp sum goes to a slot of its own; after the pages the
 * block adds each row's slots in order, so the result does not depend on which warp ran
 * first.
 *
 * Included by ops-matvec.cuh (it uses its helpers).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_MATVEC_PAGES_CUH
#define AMK_OPS_MATVEC_PAGES_CUH

#include "pages.cuh"


static_assert (AMK_PAGE_SPAN == 2048, "a warp's span is 2 KiB: rows of K % 1024 == 0 hold whole spans");

/* The bytes of W this MATVEC tile streams through the pages, or 0 when it takes the first
 * VM's pipelines: a CONSTANT bf16 W, whole rows (not split-K) of K % 1024 == 0, and room
 * behind the pages for x' (4 K bytes) and a slot per span (bytes / 512). The loader and
 * the op threads both decide it from the instruction's checked record. */
static __device__ __forceinline__ uint32_t
amk_mv_page_bytes (const amk_op_ctx *ctx)
{
  const uint32_t packed = ctx->dtype, k = ctx->esize;

  if (!amk_s_roles.paged || (packed & AMK_MV_WCONST) == 0 || (packed & AMK_MV_SPLIT) != 0 ||
      amk_mv_dt (packed, 1) != AMK_ABI_DTYPE_BF16 || k % 1024 != 0 || k != ctx->pattern)
    return 0;
  const uint64_t bytes = (uint64_t) ctx->count * k * 2;
  if (bytes == 0 || bytes > 0x40000000ull ||
      (uint64_t) AMK_PAGES_BYTES + 4ull * k + bytes / 512 > amk_dyn_smem_size ())
    return 0;
  return (uint32_t) bytes;
}

/* A MATVEC that is not paged but would use the ring's place (the pages): the loader
 * issues nothing past it until the op threads have finished it. */
static __device__ __forceinline__ bool
amk_mv_needs_ring (const amk_op_ctx *ctx)
{
  return amk_mv_page_bytes (ctx) == 0 && amk_mv_use_ring (ctx->esize, AMK_PAGED_OP_THREADS);
}

/* This warp's share of the tile's pages; false when a page did not arrive within the
 * watchdog (the caller aborts with TIMEOUT). */
static __device__ __forceinline__ bool
amk_mv_read_pages (const amk_op_ctx *ctx, amk_page_barriers *pb, uint32_t seq, uint32_t bytes,
                   const float4 *xs, float *slots, uint64_t watchdog_ns, int tid)
{
  const uint32_t lane = (uint32_t) tid & 31, warp = (uint32_t) tid >> 5;
  const uint32_t grp = warp / AMK_PAGE_READERS, wi = warp % AMK_PAGE_READERS;
  const uint32_t rowb = ctx->esize * 2, C = ctx->esize / 8;
  const uint32_t pages = amk_pages_of (bytes);

  for (uint32_t q = grp; q < pages; q += AMK_PAGE_GROUPS)
    {
      const uint32_t s = seq + q;
      if (!amk_mbar_wait (&pb->full[s % AMK_PAGES], amk_page_parity (s), watchdog_ns))
        return false;
      const uint32_t off = q * AMK_PAGE_BYTES + wi * AMK_PAGE_SPAN;
      float acc = 0.0f;
      if (off < bytes) /* uniform over the warp */
        {
          const uint4 *w = reinterpret_cast<const uint4 *> (amk_page (s) + wi * AMK_PAGE_SPAN);
          const uint32_t row = off / rowb, c0 = (off - row * rowb) / 16;
#pragma unroll
          for (uint32_t u = 0; u < AMK_PAGE_SPAN / 512; u++)
            {
              const uint32_t c = c0 + lane + 32u * u;
              const uint4 wv = w[lane + 32u * u];
              const float4 a = xs[c], b = xs[C + c];
              const float x[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
              acc = amk_mv_dot<AMK_ABI_DTYPE_BF16> (wv, x, acc);
            }
        }
      /* the page's reads are done (the release orders them before the loader's refill):
       * hand it back before the reduction */
      __syncwarp ();
      if (lane == 0)
        amk_mbar_arrive (&pb->empty[s % AMK_PAGES]);
      if (off < bytes)
        {
          acc = amk_mv_warp_sum (acc);
          if (lane == 0)
            slots[off / AMK_PAGE_SPAN] = acc;
        }
    }
  return true;
}

/* Every op thread, after x' is staged and published: the warps' spans, a barrier, then a
 * thread per row adds its slots in order and stores. */
static __device__ __forceinline__ bool
amk_mv_run_paged (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                  amk_page_barriers *pb, uint32_t seq, uint32_t bytes, const float4 *xs,
                  uint64_t watchdog_ns, int tid, int nt)
{
  float *slots = reinterpret_cast<float *> (amk_dyn_smem + AMK_PAGES_BYTES + 4u * ctx->esize);
  const bool ok = amk_mv_read_pages (ctx, pb, seq, bytes, xs, slots, watchdog_ns, tid);
  amk_sync ();
  const uint32_t per_row = ctx->esize * 2 / AMK_PAGE_SPAN;
  for (uint32_t r = (uint32_t) tid; r < ctx->count; r += (uint32_t) nt)
    {
      float acc = 0.0f;
      for (uint32_t j = 0; j < per_row; j++)
        acc += slots[r * per_row + j];
      amk_mv_store_row<false> (ctx, ins, buffers, r, acc);
    }
  return ok;
}

#endif /* AMK_OPS_MATVEC_PAGES_CUH */
