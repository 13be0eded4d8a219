/* block-roles.cuh: which threads of a block run the ops. In amk_megakernel and
 * amk_megakernel_many every thread does; amk_megakernel_paged (the second VM's decode
 * build) adds a loader warp behind the op threads, which walks the queue on its own and
 * streams MATVEC weights into shared-memory pages (pages.cuh, loader.cuh) while the op
 * threads wait or compute. So the ops' barriers count the op threads only: every op
 * synchronises with amk_sync () or amk_sync_or (), never __syncthreads ().
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_BLOCK_ROLES_CUH
#define AMK_BLOCK_ROLES_CUH

#include <stdint.h>

/* The block's dynamic shared memory. Without a loader: [MATVEC's ring] [x'] (ops-matvec.cuh);
 * with one: [the pages, where the ring would be] [x' or an op's scratch]. It starts behind
 * the static shared memory, whose size moves with the code, hence the 128-byte
 * alignment: copies of W are fastest when W's 128-byte lines land on 128-byte lines of
 * shared memory. */
extern __shared__ __align__ (128) unsigned char amk_dyn_smem[];

struct amk_block_roles {
  uint32_t op_threads; /* threads 0 .. op_threads - 1 run the ops (a multiple of 32) */
  uint32_t scratch;    /* where an op may use amk_dyn_smem between matvecs: past the pages */
  uint32_t paged;      /* nonzero: a loader warp owns the pages */
};

/* Written by thread 0 before the block's first barrier. */
static __shared__ amk_block_roles amk_s_roles;

/* The op threads' barrier (barrier 1; barrier 0 is the whole block's, used only before
 * the roles part). */
static __device__ __forceinline__ void
amk_sync (void)
{
  asm volatile ("bar.sync 1, %0;" : : "r"(amk_s_roles.op_threads) : "memory");
}

/* The op threads' barrier, returning whether any of them passed a nonzero value. */
static __device__ __forceinline__ int
amk_sync_or (int v)
{
  uint32_t r;
  asm volatile ("{\n\t.reg .pred p, q;\n\t"
                "setp.ne.s32 p, %1, 0;\n\t"
                "bar.red.or.pred q, 1, %2, p;\n\t"
                "selp.u32 %0, 1, 0, q;\n\t}"
                : "=r"(r) : "r"(v), "r"(amk_s_roles.op_threads) : "memory");
  return (int) r;
}

static __device__ __forceinline__ uint32_t
amk_dyn_smem_size (void)
{
  uint32_t r;
  asm ("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}

/* The dynamic shared memory an op other than MATVEC may use while it runs (the MATVEC
 * ring's without a loader; behind the pages with one, which stream on meanwhile). */
static __device__ __forceinline__ unsigned char *
amk_scratch_smem (void)
{
  return amk_dyn_smem + amk_s_roles.scratch;
}

static __device__ __forceinline__ uint32_t
amk_scratch_bytes (void)
{
  const uint32_t d = amk_dyn_smem_size ();
  return d > amk_s_roles.scratch ? d - amk_s_roles.scratch : 0u;
}

#endif /* AMK_BLOCK_ROLES_CUH */
