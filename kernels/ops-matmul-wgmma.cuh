/* ops-matmul-wgmma.cuh: MATMUL's block tile on Hopper's warpgroup tensor cores (wgmma,
 * sm_90a), for bf16 X and W without a fused norm (the GPU prefill's inputs; X is never
 * f16, so f16 weights take the mma.sync tile, which converts X).
 *
 * A block tile is 256 rows of X by AMK_MM_BN rows of W (512 threads). Each warpgroup owns
 * 64 of the rows and keeps their 64 x 128 fp32 sums in registers (64 per thread): the
 * tensor cores read both operands from shared memory, so no ldmatrix and no fragment
 * registers stand between the stages and the products. K goes in steps of 64 columns
 * through AMK_MATMUL_STAGES stages, filled by cp.async in the 128-byte swizzle that
 * wgmma's descriptors name (a row of 64 elements is 128 bytes; its 16-byte chunk c lands
 * at c XOR row % 8, which spreads every read of 8 rows over all banks). Two steps are in
 * flight while the tensor cores work on a third, and the products of one step still run
 * while the block waits for the next: a stage is refilled only after every warpgroup's
 * products of it have retired (wgmma.wait_group 1, then the block's barrier).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_MATMUL_WGMMA_CUH
#define AMK_OPS_MATMUL_WGMMA_CUH

#include <stdint.h>
#include <cuda_bf16.h>

#include "amk-abi.h"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AMK_MM_HAVE_WGMMA 1

/* The shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle:
 * start address, leading offset (unused by this swizzle: 16 bytes), stride between
 * groups of 8 rows (1024 bytes), swizzle mode 1. */
static __device__ __forceinline__ uint64_t
amk_mmw_desc (uint32_t saddr)
{
  return (uint64_t) ((saddr & 0x3ffffu) >> 4) | ((uint64_t) 1 << 16) | ((uint64_t) (1024 >> 4) << 32) |
         ((uint64_t) 1 << 62);
}

/* d += A B^T for A 64 x 16 and B 128 x 16, bf16, both K-major in shared memory. */
static __device__ __forceinline__ void
amk_mmw_mma (float (&d)[64], uint64_t da, uint64_t db)
{
#define AMK_MMW_D(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define AMK_MMW_D16(i) AMK_MMW_D (i), AMK_MMW_D (i + 4), AMK_MMW_D (i + 8), AMK_MMW_D (i + 12)
  asm volatile ("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,"
                "%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,"
                "%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,"
                "%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                : AMK_MMW_D16 (0), AMK_MMW_D16 (16), AMK_MMW_D16 (32), AMK_MMW_D16 (48)
                : "l"(da), "l"(db), "r"(1));
#undef AMK_MMW_D16
#undef AMK_MMW_D
}

/* Keeps the compiler from moving reads or writes of the sums across the asynchronous
 * products' issue and wait. */
static __device__ __forceinline__ void
amk_mmw_fence_sums (float (&d)[64])
{
#pragma unroll
  for (int i = 0; i < 64; i++)
    asm volatile ("" : "+f"(d[i]) : : "memory");
}

/* A thread's share of a step's loads at 512 threads: 4 of X's 256 rows and 2 of W's 128,
 * 64 rows apart, each at the same 16-byte column group q, so that a step only moves the
 * sources 128 bytes on. In shared memory a row is 128 bytes and the chunk's place in
 * it, q XOR row % 8, is the same for all six rows. */
#define AMK_MMW_THREADS 512
#define AMK_MMW_BM      (AMK_MMW_THREADS / 2) /* 64 rows per warpgroup */
#define AMK_MMW_X_BYTES (AMK_MMW_BM * 128)
#define AMK_MMW_STAGE   (AMK_MMW_X_BYTES + AMK_MM_BN * 128)
#define AMK_MMW_APART   (AMK_MMW_THREADS / 8 * 128) /* bytes between a thread's rows in a stage */

struct amk_mmw_loads {
  const unsigned char *src[6]; /* X's rows, then W's, at column 8 q of step 0 */
  uint32_t live;               /* bit i: row i exists (not past M or N) */
  uint32_t q;                  /* the thread's 16-byte column group */
  uint32_t dst;                /* the first row's chunk in stage 0 */
};

static __device__ __forceinline__ amk_mmw_loads
amk_mmw_loads_init (const unsigned char *x, const unsigned char *w, uint32_t K, const amk_mm_tile &t,
                    uint32_t s_base, int tid)
{
  amk_mmw_loads l;
  const uint32_t r = (uint32_t) tid / 8;

  l.q = (uint32_t) tid % 8;
  l.live = 0;
  l.dst = s_base + r * 128 + ((l.q ^ (r % 8)) << 4);
#pragma unroll
  for (int i = 0; i < 6; i++)
    {
      const uint32_t row = (i < 4 ? t.m0 : t.n0) + r + (uint32_t) (i % 4) * (AMK_MMW_THREADS / 8);
      const bool in = row < (i < 4 ? t.m_end : t.n_end);
      l.src[i] = (i < 4 ? x : w) + (in ? ((uint64_t) row * K + l.q * 8) * 2 : 0);
      l.live |= (in ? 1u : 0u) << i;
    }
  return l;
}

/* Step `kt` into stage `st` (0 .. AMK_MATMUL_STAGES - 1): zeros past M, N and K. */
static __device__ __forceinline__ void
amk_mmw_load_step (const amk_mmw_loads &l, uint32_t K, uint32_t kt, uint32_t st)
{
  const bool k_in = kt * 64 + l.q * 8 < K;
#pragma unroll
  for (int i = 0; i < 6; i++)
    {
      const bool in = k_in && ((l.live >> i) & 1u);
      const uint32_t dst = l.dst + st * AMK_MMW_STAGE + (i < 4 ? 0u : (uint32_t) AMK_MMW_X_BYTES) +
                           (uint32_t) (i % 4) * AMK_MMW_APART;
      amk_mm_cp16 (dst, in ? l.src[i] + (uint64_t) kt * 128 : l.src[i], in ? 16u : 0u);
    }
}

/* v += elements o and o + 1 (o even) of an F32 or BF16 matrix, in one load. */
static __device__ __forceinline__ void
amk_mmw_add2 (const unsigned char *m, uint32_t dt, uint64_t o, float (&v)[2])
{
  if (dt == AMK_ABI_DTYPE_BF16)
    {
      const float2 f = __bfloat1622float2 (*reinterpret_cast<const __nv_bfloat162 *> (m + o * 2));
      v[0] += f.x, v[1] += f.y;
    }
  else
    {
      const float2 f = *reinterpret_cast<const float2 *> (m + o * 4);
      v[0] += f.x, v[1] += f.y;
    }
}

/* Elements o and o + 1 (o even) of an F32 or BF16 matrix, in one store. */
static __device__ __forceinline__ void
amk_mmw_store2 (unsigned char *m, uint32_t dt, uint64_t o, const float (&v)[2])
{
  if (dt == AMK_ABI_DTYPE_BF16)
    *reinterpret_cast<__nv_bfloat162 *> (m + o * 2) = __floats2bfloat162_rn (v[0], v[1]);
  else
    *reinterpret_cast<float2 *> (m + o * 4) = make_float2 (v[0], v[1]);
}

static __device__ __forceinline__ void
amk_mmw_block_tile (const amk_op_ctx *ctx, const amk_instruction_t *ins,
                    const amk_buffer_t *buffers, const amk_mm_tile &t, int tid)
{
  const uint32_t packed = ctx->dtype;
  const uint32_t N = ctx->count, K = ctx->esize;
  const uint32_t ydt = amk_mm_dt (packed, 0), bdt = amk_mm_dt (packed, 3), rdt = amk_mm_dt (packed, 4);
  const unsigned char *w = ctx->ptr[1], *x = ctx->ptr[2];
  unsigned char *y = ctx->ptr[0];
  const unsigned char *bias = amk_mm_operand (ctx, ins, buffers, 3);
  const unsigned char *res = amk_mm_operand (ctx, ins, buffers, 4);
  const uint32_t wg = (uint32_t) tid / 128, wt = (uint32_t) tid % 128;
  /* a warpgroup whose rows all lie past M has nothing to multiply */
  const bool live = t.m0 + wg * 64 < t.m_end;

  /* per stage X's rows, then W's; stages 1024-byte aligned (the swizzle repeats every 8
   * rows of 128 bytes) */
  const uint32_t s_base = ((uint32_t) __cvta_generic_to_shared (amk_dyn_smem) + 1023u) & ~1023u;
  const uint32_t steps = (K + 63) / 64;
  const amk_mmw_loads loads = amk_mmw_loads_init (x, w, K, t, s_base, tid);
  float acc[64];

#pragma unroll
  for (int i = 0; i < 64; i++)
    acc[i] = 0.0f;

  /* prologue: steps 0 .. STAGES - 3 in flight */
#pragma unroll
  for (uint32_t s = 0; s < AMK_MATMUL_STAGES - 2; s++)
    {
      if (s < steps)
        amk_mmw_load_step (loads, K, s, s);
      asm volatile ("cp.async.commit_group;" ::: "memory");
    }

  for (uint32_t kt = 0; kt < steps; kt++)
    {
      const uint32_t st = s_base + (kt % AMK_MATMUL_STAGES) * AMK_MMW_STAGE;
      asm volatile ("cp.async.wait_group %0;" : : "n"(AMK_MATMUL_STAGES - 3) : "memory");
      /* the stage was written through the generic proxy, the tensor cores read it
       * through the async one */
      asm volatile ("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads ();
      /* every warpgroup's products of step kt - 2 have retired: its stage takes step
       * kt + STAGES - 2 */
      const uint32_t next = kt + AMK_MATMUL_STAGES - 2;
      if (next < steps)
        amk_mmw_load_step (loads, K, next, next % AMK_MATMUL_STAGES);
      asm volatile ("cp.async.commit_group;" ::: "memory");

      if (live)
        {
          const uint64_t da = amk_mmw_desc (st + wg * 64 * 128), db = amk_mmw_desc (st + AMK_MMW_X_BYTES);
          amk_mmw_fence_sums (acc);
          asm volatile ("wgmma.fence.sync.aligned;" ::: "memory");
          /* 16 columns are 32 bytes further along the (swizzled) rows: 2 in the
           * descriptor's 16-byte units */
#pragma unroll
          for (int kk = 0; kk < 4; kk++)
            amk_mmw_mma (acc, da + 2 * kk, db + 2 * kk);
          asm volatile ("wgmma.commit_group.sync.aligned;" ::: "memory");
          asm volatile ("wgmma.wait_group.sync.aligned 1;" ::: "memory");
          amk_mmw_fence_sums (acc);
        }
    }
  asm volatile ("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  amk_mmw_fence_sums (acc);
  asm volatile ("cp.async.wait_all;" ::: "memory");

  /* epilogue: sums 4 j + 2 h and 4 j + 2 h + 1 of a thread are columns 8 j + 2 (lane %
   * 4) and the next of row lane / 4 + 8 h of its warp's 16; bias, residual (read before
   * the store: it may be Y itself), stored as pairs where Y's rows have an even length */
  if (live)
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
      for (int h = 0; h < 2; h++)
        {
          const uint32_t m = t.m0 + wg * 64 + (wt / 32) * 16 + (wt % 32) / 4 + (uint32_t) h * 8;
          const uint32_t n = t.n0 + (uint32_t) j * 8 + (wt % 4) * 2;
          if (m >= t.m_end || n >= t.n_end)
            continue;
          const uint64_t o = (uint64_t) m * N + n;
          float v[2] = { acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1] };
          const int count = n + 1 < t.n_end ? 2 : 1;
          if (count == 2 && N % 2 == 0)
            {
              if (bias != nullptr)
                v[0] += amk_vec_ld (bias, bdt, n), v[1] += amk_vec_ld (bias, bdt, n + 1);
              if (res != nullptr)
                amk_mmw_add2 (res, rdt, o, v);
              amk_mmw_store2 (y, ydt, o, v);
              continue;
            }
          for (int e = 0; e < count; e++)
            {
              float x = v[e];
              if (bias != nullptr)
                x += amk_vec_ld (bias, bdt, n + (uint32_t) e);
              if (res != nullptr)
                x += amk_vec_ld (res + (o + (uint64_t) e) * amk_dtype_size (rdt), rdt, 0);
              amk_vec_st (y + (o + (uint64_t) e) * amk_dtype_size (ydt), ydt, 0, x);
            }
        }
  __syncthreads (); /* the next block tile reuses the shared memory */
}

/* Whether the block runs the MATMUL `ins` (checked: ctx holds its dtypes) here: many
 * rows of bf16 X and W without a norm, and the launch's threads and shared
 * memory fit the tile (512 threads: 4 warpgroups). amk_matmul_exec() takes the others. */
static __device__ __forceinline__ bool
amk_mmw_takes (const amk_op_ctx *ctx, const amk_instruction_t *ins, int nt)
{
  return ins->params.matmul.m_count > AMK_MM_FEW_ROWS && amk_mm_dt (ctx->dtype, 5) == AMK_MM_ABSENT &&
         amk_mm_dt (ctx->dtype, 1) == AMK_ABI_DTYPE_BF16 && amk_mm_dt (ctx->dtype, 2) == AMK_ABI_DTYPE_BF16 &&
         nt == AMK_MMW_THREADS && amk_mv_dyn_smem_bytes () >= AMK_MATMUL_SMEM_BYTES (nt);
}

/* The instruction's block tiles, after the waits. The scheduler calls this inline: ptxas
 * serializes the asynchronous products of a function that is called, not inlined, into
 * the kernel. */
static __device__ __forceinline__ void
amk_mmw_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers, int tid)
{
  const amk_matmul_params_t &p = ins->params.matmul;
  const uint32_t m_end = (uint32_t) p.m0 + (uint32_t) p.m_count;
  const uint32_t n_end = (uint32_t) p.n0 + (uint32_t) p.n_count;

  for (uint32_t m = (uint32_t) p.m0; m < m_end; m += AMK_MMW_BM)
    for (uint32_t n = (uint32_t) p.n0; n < n_end; n += AMK_MM_BN)
      {
        const amk_mm_tile t = { m, min (m + AMK_MMW_BM, m_end), n, min (n + AMK_MM_BN, n_end) };
        amk_mmw_block_tile (ctx, ins, buffers, t, tid);
      }
}

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */
#endif /* AMK_OPS_MATMUL_WGMMA_CUH */
