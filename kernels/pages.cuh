/* pages.cuh: the second VM's weight pages. The loader warp of amk_megakernel_paged
 * (loader.cuh) fills a ring of AMK_PAGES pages of AMK_PAGE_BYTES (a 2 KiB span for each
 * warp of a group) in dynamic shared memory with one bulk copy each, in queue order, as
 * soon as a page is empty; the op threads (ops-matvec-pages.cuh) read them. Page
 * sequence number s (counted over the whole launch, the same on both sides) lives in
 * slot s % AMK_PAGES; each slot has a full barrier (the loader's arrival with the copy's
 * byte count, completed by the copy) and an empty barrier (one arrival per op warp that
 * reads the page), and the s / AMK_PAGES-th phase of both belongs to s.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_PAGES_CUH
#define AMK_PAGES_CUH

#include <stdint.h>

#include "amk-abi.h"
#include "block-roles.cuh"

#define AMK_PAGE_GROUPS     2u   /* op warp groups taking turns on the pages */
#define AMK_PAGE_READERS    (AMK_PAGED_OP_THREADS / 32 / AMK_PAGE_GROUPS) /* warps reading each page */
#define AMK_PAGE_SPAN       2048u /* bytes of a page one warp reads */
#define AMK_PAGE_BYTES      (AMK_PAGE_READERS * AMK_PAGE_SPAN)
#define AMK_PAGES           8u
#define AMK_PAGES_BYTES     (AMK_PAGES * AMK_PAGE_BYTES)

/* the pages sit where MATVEC's ring does without a loader, so x' stays behind them */
static_assert (AMK_PAGES_BYTES == AMK_PAGED_OP_THREADS * AMK_MATVEC_RING_BYTES_PER_THREAD,
               "the pages take the ring's place");

struct amk_page_barriers {
  uint64_t full[AMK_PAGES];
  uint64_t empty[AMK_PAGES];
};

static __device__ __forceinline__ uint32_t
amk_smem_addr (const void *p)
{
  return (uint32_t) __cvta_generic_to_shared (p);
}

static __device__ __forceinline__ void
amk_mbar_init (uint64_t *b, uint32_t count)
{
  asm volatile ("mbarrier.init.shared::cta.b64 [%0], %1;" : : "r"(amk_smem_addr (b)), "r"(count) : "memory");
}

static __device__ __forceinline__ bool
amk_mbar_try (uint64_t *b, uint32_t parity)
{
  uint32_t ok;
  asm volatile ("{\n\t.reg .pred p;\n\t"
                "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                "selp.u32 %0, 1, 0, p;\n\t}"
                : "=r"(ok) : "r"(amk_smem_addr (b)), "r"(parity) : "memory");
  return ok != 0;
}

static __device__ __forceinline__ void
amk_mbar_arrive (uint64_t *b)
{
  asm volatile ("mbarrier.arrive.shared::cta.b64 _, [%0];" : : "r"(amk_smem_addr (b)) : "memory");
}

static __device__ __forceinline__ uint64_t
amk_globaltimer (void)
{
  uint64_t t;
  asm volatile ("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Waits for a barrier's phase; false once watchdog_ns (0: none) have passed. */
static __device__ __forceinline__ bool
amk_mbar_wait (uint64_t *b, uint32_t parity, uint64_t watchdog_ns)
{
  if (amk_mbar_try (b, parity))
    return true;
  const uint64_t t0 = amk_globaltimer ();
  while (!amk_mbar_try (b, parity))
    if (watchdog_ns != 0 && amk_globaltimer () - t0 > watchdog_ns)
      return false;
  return true;
}

/* the phase of page s, as a parity */
static __device__ __forceinline__ uint32_t
amk_page_parity (uint32_t s)
{
  return (s / AMK_PAGES) & 1u;
}

static __device__ __forceinline__ unsigned char *
amk_page (uint32_t s)
{
  return amk_dyn_smem + (s % AMK_PAGES) * AMK_PAGE_BYTES;
}

/* The bytes of a tile's rows [0, bytes) a page sequence of an instruction covers. */
static __device__ __forceinline__ uint32_t
amk_pages_of (uint32_t bytes)
{
  return (bytes + AMK_PAGE_BYTES - 1) / AMK_PAGE_BYTES;
}

#endif /* AMK_PAGES_CUH */
