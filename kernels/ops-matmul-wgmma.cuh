/* ops-matmul-wgmma.cuh: MATMUL's block tile on Hopper's warpgroup tensor cores (wgmma,
 * sm_90a), for bf16 X and W without a fused norm (the GPU prefill's inputs; X is never
 * f16, so f16 weights take the mma.sync tile, which converts X).
 *
 * A block tile is 256 rows of X by AMK_MM_BN rows of W (512 threads). Each warpgroup owns
 * 64 of the rows and keeps their 64 x 128 fp32 sums in registers (64 per thread): the
 * tensor cores read both operands from shared memory, so no ldmatrix and no fragment
 * registers stand between the stages and the products. K goes in steps of 64 columns
 * through AMK_MATMUL_STAGES stages, which the tensor memory accelerator fills from the
 * tensor maps the launcher made for the MATMUL's X and W (AMK_PROGRAM_TENSOR_MAPS), in
 * the 128-byte swizzle that wgmma's descriptors name (a row of 64 elements is 128 bytes;
 * its 16-byte chunk c lands at c XOR row % 8, which spreads every read of 8 rows over all
 * banks). One thread issues a step's two copies; the others only wait for a stage's
 * barrier and multiply, so the loads cost the warps no instructions and no block barrier
 * stands between steps (the cp.async loaders this replaced spent most of the tile's
 * issue slots on addresses and barriers).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_MATMUL_WGMMA_CUH
#define AMK_OPS_MATMUL_WGMMA_CUH

#include <stdint.h>
#include <cuda_bf16.h>

#include "amk-abi.h"
#include "block-roles.cuh"

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

#define AMK_MMW_THREADS 512
#define AMK_MMW_BM      (AMK_MMW_THREADS / 2) /* 64 rows per warpgroup */
#define AMK_MMW_X_BYTES (AMK_MMW_BM * 128)
#define AMK_MMW_STAGE   (AMK_MMW_X_BYTES + AMK_MM_BN * 128)
static_assert (AMK_MMW_BM == AMK_MATMUL_TMA_X_ROWS && AMK_MM_BN == AMK_MATMUL_TMA_W_ROWS,
               "the tensor maps' boxes are the tile's X and W steps");

/* ctx->dtype bit of a MATMUL whose X and W have tensor maps (amk_check_program) */
#define AMK_MM_TMA (1u << 24)

static __device__ __forceinline__ const amk_tensor_map_t *
amk_tensor_maps (const amk_device_program &prog)
{
  return reinterpret_cast<const amk_tensor_map_t *> (
    reinterpret_cast<const unsigned char *> (prog.instructions) + AMK_TENSOR_MAPS_OFFSET (prog.n_instructions));
}

/* The check kernel's mark: the MATMUL's X and W have maps of its k. */
static __device__ __forceinline__ void
amk_mmw_mark_tma (const amk_device_program &prog, const amk_instruction_t *ins, amk_op_ctx *ctx)
{
  if ((prog.flags & AMK_PROGRAM_TENSOR_MAPS) == 0 || ins->opcode != AMK_ABI_OP_MATMUL ||
      amk_mm_dt (ctx->dtype, 5) != AMK_MM_ABSENT)
    return;
  const amk_tensor_map_t *maps = amk_tensor_maps (prog);
  if (maps[2 * ins->buffers[2]].k == ctx->esize && maps[2 * ins->buffers[1] + 1].k == ctx->esize)
    ctx->dtype |= AMK_MM_TMA;
}

/* ---- mbarriers and the tensor memory accelerator ---- */

static __device__ __forceinline__ void
amk_mbar_init (uint32_t bar, uint32_t count)
{
  asm volatile ("mbarrier.init.shared::cta.b64 [%0], %1;" : : "r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void
amk_mbar_inval (uint32_t bar)
{
  asm volatile ("mbarrier.inval.shared::cta.b64 [%0];" : : "r"(bar) : "memory");
}

static __device__ __forceinline__ void
amk_mbar_arrive (uint32_t bar)
{
  asm volatile ("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" : : "r"(bar) : "memory");
}

static __device__ __forceinline__ void
amk_mbar_expect_tx (uint32_t bar, uint32_t bytes)
{
  asm volatile ("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                : : "r"(bar), "r"(bytes) : "memory");
}

/* Until the barrier's phase of parity `parity` has completed. */
static __device__ __forceinline__ void
amk_mbar_wait (uint32_t bar, uint32_t parity)
{
  uint32_t done;
  do
    asm volatile ("{\n.reg .pred p;\n"
                  "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
                  "selp.u32 %0, 1, 0, p;\n}\n"
                  : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  while (!done);
}

/* The box at (column c, row r) of the map into shared memory at dst; its bytes count
 * toward bar's transaction. Columns and rows past the matrix land as zeros. */
static __device__ __forceinline__ void
amk_tma_load (uint32_t dst, const amk_tensor_map_t *map, uint32_t c, uint32_t r, uint32_t bar)
{
  asm volatile ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                " [%0], [%1, {%2, %3}], [%4];"
                : : "r"(dst), "l"(reinterpret_cast<uint64_t> (map)), "r"(c), "r"(r), "r"(bar) : "memory");
}

/* Step kt (columns 64 kt ..) of the tile's X and W rows into the stage at st. */
static __device__ __forceinline__ void
amk_mmw_load_step (const amk_tensor_map_t *xm, const amk_tensor_map_t *wm, const amk_mm_tile &t,
                   uint32_t kt, uint32_t st, uint32_t full)
{
  amk_mbar_expect_tx (full, AMK_MMW_STAGE);
  amk_tma_load (st, xm, kt * 64, t.m0, full);
  amk_tma_load (st + AMK_MMW_X_BYTES, wm, kt * 64, t.n0, full);
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

/* A stage is full when its two boxes have landed (full[s]: thread 0's expect_tx, then
 * the bytes), empty when every working warpgroup's products of it have retired
 * (empty[s]: one arrival per warpgroup). Thread 0 refills a stage as soon as it is
 * empty, AMK_MATMUL_STAGES steps ahead; no block barrier stands between steps. */
static __device__ __forceinline__ void
amk_mmw_block_tile (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_device_program &prog,
                    const amk_mm_tile &t, int tid)
{
  __shared__ __align__ (8) uint64_t s_bars[2 * AMK_MATMUL_STAGES];
  const uint32_t packed = ctx->dtype;
  const uint32_t N = ctx->count, K = ctx->esize;
  const uint32_t ydt = amk_mm_dt (packed, 0), bdt = amk_mm_dt (packed, 3), rdt = amk_mm_dt (packed, 4);
  unsigned char *y = ctx->ptr[0];
  const unsigned char *bias = amk_mm_operand (ctx, ins, prog.buffers, 3);
  const unsigned char *res = amk_mm_operand (ctx, ins, prog.buffers, 4);
  const amk_tensor_map_t *maps = amk_tensor_maps (prog);
  const amk_tensor_map_t *xm = &maps[2 * ins->buffers[2]], *wm = &maps[2 * ins->buffers[1] + 1];
  const uint32_t wg = (uint32_t) tid / 128, wt = (uint32_t) tid % 128;
  /* a warpgroup whose rows all lie past M has nothing to multiply */
  const uint32_t working = min (4u, (t.m_end - t.m0 + 63) / 64);
  const bool live = wg < working;

  /* stages 1024-byte aligned (the swizzle repeats every 8 rows of 128 bytes) */
  const uint32_t s_base = ((uint32_t) __cvta_generic_to_shared (amk_dyn_smem) + 1023u) & ~1023u;
  const uint32_t bars = (uint32_t) __cvta_generic_to_shared (s_bars);
  const uint32_t steps = (K + 63) / 64;
  float acc[64];

#pragma unroll
  for (int i = 0; i < 64; i++)
    acc[i] = 0.0f;

  /* The shared memory was last written by other ops through the generic proxy; the
   * tensor memory accelerator writes it through the async one. X was written by other
   * blocks, ordered before this one by the waits' acquire. */
  asm volatile ("fence.proxy.async.shared::cta;" ::: "memory");
  if (tid == 0)
    {
      for (uint32_t s = 0; s < AMK_MATMUL_STAGES; s++)
        {
          amk_mbar_init (bars + 8 * s, 1);
          amk_mbar_init (bars + 8 * (AMK_MATMUL_STAGES + s), working);
        }
      asm volatile ("fence.mbarrier_init.release.cluster;" ::: "memory");
      asm volatile ("fence.proxy.async.global;" ::: "memory");
      asm volatile ("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" : : "l"(xm) : "memory");
      asm volatile ("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" : : "l"(wm) : "memory");
    }
  amk_sync ();
  if (tid == 0)
    for (uint32_t s = 0; s < AMK_MATMUL_STAGES && s < steps; s++)
      amk_mmw_load_step (xm, wm, t, s, s_base + s * AMK_MMW_STAGE, bars + 8 * s);

  if (live)
    for (uint32_t kt = 0; kt < steps; kt++)
      {
        const uint32_t s = kt % AMK_MATMUL_STAGES;
        const uint32_t st = s_base + s * AMK_MMW_STAGE;
        amk_mbar_wait (bars + 8 * s, (kt / AMK_MATMUL_STAGES) & 1u);

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

        /* step kt - 1's products have retired: its stage is free for step kt - 1 + STAGES */
        if (kt > 0)
          {
            const uint32_t ps = (kt - 1) % AMK_MATMUL_STAGES;
            if (wt == 0)
              amk_mbar_arrive (bars + 8 * (AMK_MATMUL_STAGES + ps));
            const uint32_t next = kt - 1 + AMK_MATMUL_STAGES;
            if (tid == 0 && next < steps)
              {
                amk_mbar_wait (bars + 8 * (AMK_MATMUL_STAGES + ps), ((kt - 1) / AMK_MATMUL_STAGES) & 1u);
                amk_mmw_load_step (xm, wm, t, next, s_base + ps * AMK_MMW_STAGE, bars + 8 * ps);
              }
            __syncwarp (); /* the products are warp-aligned: thread 0's warp together again */
          }
      }
  asm volatile ("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  amk_mmw_fence_sums (acc);

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
  amk_sync (); /* every load has landed and been read: the stages and barriers go */
  if (tid == 0)
    for (uint32_t s = 0; s < 2 * AMK_MATMUL_STAGES; s++)
      amk_mbar_inval (bars + 8 * s);
}

/* Whether the block runs the MATMUL `ins` (checked: ctx holds its dtypes) here: many
 * rows of bf16 X and W without a norm, and the launch's threads and shared
 * memory fit the tile (512 threads: 4 warpgroups). amk_matmul_exec() takes the others. */
static __device__ __forceinline__ bool
amk_mmw_takes (const amk_op_ctx *ctx, const amk_instruction_t *ins, int nt)
{
  return ins->params.matmul.m_count > AMK_MM_FEW_ROWS && (ctx->dtype & AMK_MM_TMA) != 0 &&
         amk_mm_dt (ctx->dtype, 5) == AMK_MM_ABSENT && amk_mm_dt (ctx->dtype, 1) == AMK_ABI_DTYPE_BF16 &&
         amk_mm_dt (ctx->dtype, 2) == AMK_ABI_DTYPE_BF16 && nt == AMK_MMW_THREADS &&
         amk_dyn_smem_size () >= AMK_MATMUL_SMEM_BYTES (nt);
}

/* The instruction's block tiles, after the waits. The scheduler calls this inline: ptxas
 * serializes the asynchronous products of a function that is called, not inlined, into
 * the kernel. */
static __device__ __forceinline__ void
amk_mmw_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_device_program &prog, int tid)
{
  const amk_matmul_params_t &p = ins->params.matmul;
  const uint32_t m_end = (uint32_t) p.m0 + (uint32_t) p.m_count;
  const uint32_t n_end = (uint32_t) p.n0 + (uint32_t) p.n_count;

  for (uint32_t m = (uint32_t) p.m0; m < m_end; m += AMK_MMW_BM)
    for (uint32_t n = (uint32_t) p.n0; n < n_end; n += AMK_MM_BN)
      {
        const amk_mm_tile t = { m, min (m + AMK_MMW_BM, m_end), n, min (n + AMK_MM_BN, n_end) };
        amk_mmw_block_tile (ctx, ins, prog, t, tid);
      }
}

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */
#endif /* AMK_OPS_MATMUL_WGMMA_CUH */
