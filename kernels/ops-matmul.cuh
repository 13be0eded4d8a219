/* ops-matmul.cuh: MATMUL, one tile of a matrix product of many rows on tensor cores (see
 * the opcode's comment in amk-abi.h):
 *
 *   Y[m, n] = sum_c X'[m, c] W[n, c] (+ bias[n]) (+ R[m, n])
 *
 * with X' = X or X' = X[m] * rsqrt(mean(X[m]^2) + eps) * norm (a fused RMSNORM per row),
 * rounded to W's 16-bit type, and fp32 accumulation on tensor cores.
 *
 * Many rows of bf16 X and W without a norm (the GPU prefill's) run on the warpgroup
 * tensor cores (ops-matmul-wgmma.cuh). Otherwise the tile is BM x
 * AMK_MM_BN (BM = 8 x warps: the warps form a (warps / 4) x 4 grid, each computing 32 x 32
 * outputs with mma.sync) and walks K in steps of AMK_MM_BK columns through
 * AMK_MM_SYNC_STAGES shared-memory stages: W's and X's steps stream into their stage with
 * cp.async (zero-filled past N, M and K), so no load waits in registers; F32 X (or a
 * norm) is converted, once its step landed, into one more 16-bit buffer. Shared-memory
 * rows are padded to AMK_MM_LDS elements, which makes every ldmatrix free of bank
 * conflicts. A few rows (a batch's step) stream W instead (amk_mm_few_rows()).
 *
 * Operands that another block may have written (X, R, bias, norm) are read after the
 * block's acquire, by cp.async.cg (through L2) or ordinary coherent loads, never .nc.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_MATMUL_CUH
#define AMK_OPS_MATMUL_CUH

#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "amk-abi.h"
#include "ops-utility.cuh"
#include "ops-vector.cuh"
#include "quant-blocks.cuh"

#define AMK_MM_BN     128 /* columns (W rows) of a block tile */
#define AMK_MM_BK     64  /* K columns per pipeline step */
#define AMK_MM_LDS    72  /* 16-bit elements per shared-memory row: BK + 8 of padding */
#define AMK_MM_ABSENT 0xfu
#define AMK_MM_FEW_ROWS 64 /* rows up to which a tile streams W (amk_mm_few_rows()) */

#define AMK_MM_SYNC_STAGES 3 /* stages of amk_mm_block_tile() */

/* amk_mm_block_tile()'s stages, X buffer and norms for BM = threads / 4 rows */
#define AMK_MM_SYNC_SMEM_BYTES(threads) \
  (AMK_MM_SYNC_STAGES * (AMK_MM_BN * AMK_MM_LDS * 2 + ((threads) / 4) * AMK_MM_BK * 4) + \
   ((threads) / 4) * (AMK_MM_LDS * 2 + 4))
static_assert (AMK_MM_SYNC_SMEM_BYTES (128) <= AMK_MATMUL_SMEM_BYTES (128) &&
               AMK_MM_SYNC_SMEM_BYTES (512) <= AMK_MATMUL_SMEM_BYTES (512),
               "amk-abi.h's shared-memory need of MATMUL covers the mma.sync tile");
static_assert (AMK_MATMUL_SMEM_BYTES (512) == AMK_MATMUL_STAGES * (256 + AMK_MM_BN) * AMK_MM_BK * 2 + 1024,
               "amk-abi.h's shared-memory need of MATMUL matches the wgmma tile");

static __device__ __forceinline__ uint32_t
amk_mm_dt (uint32_t packed, int slot)
{
  return (packed >> (4 * slot)) & 0xfu;
}

/* ---- check ------------------------------------------------------------------------- */

/* amk_op_ctx for MATMUL: ptr[0] = Y, ptr[1] = W, ptr[2] = X (buffer starts);
 * count = N; esize = K; pattern = M; dtype = packed dtypes, 4 bits per slot (slot s at
 * bit 4 s, AMK_MM_ABSENT for a missing bias / residual / norm). */
static __device__ __noinline__ int
amk_matmul_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                  amk_op_ctx *ctx, int32_t *detail)
{
  const uint32_t vec = (1u << AMK_ABI_DTYPE_F32) | (1u << AMK_ABI_DTYPE_BF16);
  const uint32_t mat = (1u << AMK_ABI_DTYPE_BF16) | (1u << AMK_ABI_DTYPE_F16) | AMK_QB_MASK;
  const amk_matmul_params_t &p = ins->params.matmul;
  uint64_t elems[6] = { 0, 0, 0, 0, 0, 0 };
  uint64_t addr[6] = { 0, 0, 0, 0, 0, 0 };
  uint32_t packed = 0;

  *detail = ins->buffers[1];
  if (p.m0 < 0 || p.m_count < 1 || p.n0 < 0 || p.n_count < 1 || p.k < 8 || p.k % 8 != 0 ||
      !(p.eps >= 0.0f) || !isfinite (p.eps))
    return AMK_ABORT_CHECK;
  for (int s = 0; s < 6; s++)
    {
      const int32_t ref = ins->buffers[s];
      *detail = ref;
      if (s >= 3 && ref == AMK_NO_BUFFER)
        {
          packed |= AMK_MM_ABSENT << (4 * s);
          continue;
        }
      if (ref < 0 || ref >= n_buffers)
        return AMK_ABORT_BAD_INDEX;
      const amk_buffer_t *b = buffers + ref;
      const uint32_t dt = b->dtype, es = amk_dtype_size (dt);
      if (dt >= 32 || (((s == 1 ? mat : vec) >> dt) & 1u) == 0 || (b->addr & 15u) != 0)
        return AMK_ABORT_CHECK;
      /* a block type's whole blocks in values (rows of whole blocks: checked below) */
      elems[s] = es != 0 ? b->size_bytes / es : b->size_bytes / amk_qb_bytes (dt) * amk_qb_values (dt);
      addr[s] = b->addr;
      packed |= dt << (4 * s);
    }
  const uint64_t k = (uint64_t) p.k;
  const uint64_t n_all = elems[1] / k, m_all = elems[2] / k;
  const uint32_t wqv = amk_qb_values (amk_mm_dt (packed, 1));
  *detail = ins->buffers[1];
  if (wqv != 0 && k % wqv != 0)
    return AMK_ABORT_CHECK; /* a row of W is whole blocks */
  *detail = ins->buffers[2];
  if (n_all * k != elems[1] || m_all * k != elems[2] ||
      (uint64_t) p.m0 + (uint64_t) p.m_count > m_all || (uint64_t) p.n0 + (uint64_t) p.n_count > n_all ||
      n_all >= (1ull << 31) || m_all >= (1ull << 31))
    return AMK_ABORT_CHECK;
  *detail = ins->buffers[0];
  if (elems[0] != m_all * n_all)
    return AMK_ABORT_CHECK;
  /* bias [N], residual [M, N] (Y itself or clear of it), norm [K]; Y clear of W, X */
  const uint64_t want[6] = { 0, 0, 0, n_all, m_all * n_all, k };
  const uint64_t ybytes = elems[0] * amk_dtype_size (amk_mm_dt (packed, 0));
  for (int s = 1; s < 6; s++)
    {
      if (amk_mm_dt (packed, s) == AMK_MM_ABSENT)
        continue;
      *detail = ins->buffers[s];
      if (s >= 3 && elems[s] != want[s])
        return AMK_ABORT_CHECK;
      const uint32_t dts = amk_mm_dt (packed, s);
      const uint64_t bytes = amk_qb_is_block (dts) ? elems[s] / amk_qb_values (dts) * amk_qb_bytes (dts)
                                                   : elems[s] * amk_dtype_size (dts);
      const bool same = s == 4 && addr[s] == addr[0] && amk_mm_dt (packed, 4) == amk_mm_dt (packed, 0);
      if (!same && addr[s] < addr[0] + ybytes && addr[0] < addr[s] + bytes)
        return AMK_ABORT_CHECK;
    }

  ctx->ptr[0] = reinterpret_cast<unsigned char *> (addr[0]);
  ctx->ptr[1] = reinterpret_cast<unsigned char *> (addr[1]);
  ctx->ptr[2] = reinterpret_cast<unsigned char *> (addr[2]);
  ctx->count = (uint32_t) n_all;
  ctx->esize = (uint32_t) k;
  ctx->pattern = (uint32_t) m_all;
  ctx->dtype = packed;
  return AMK_ABORT_NONE;
}

/* ---- tensor-core pieces ------------------------------------------------------------ */

template <bool F16>
static __device__ __forceinline__ uint32_t
amk_mm_pack2 (float lo, float hi)
{
  if (F16)
    {
      const __half2 h = __floats2half2_rn (lo, hi);
      return *reinterpret_cast<const uint32_t *> (&h);
    }
  const __nv_bfloat162 h = __floats2bfloat162_rn (lo, hi);
  return *reinterpret_cast<const uint32_t *> (&h);
}

template <bool F16>
static __device__ __forceinline__ void
amk_mm_mma (float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
  if (F16)
    asm volatile ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                  "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                  : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                  "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                  : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ void
amk_mm_ldmatrix4 (uint32_t (&r)[4], uint32_t saddr)
{
  asm volatile ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(saddr));
}

/* 16 bytes global -> shared; src_bytes 0 fills zeros (rows past N, columns past K). */
static __device__ __forceinline__ void
amk_mm_cp16 (uint32_t saddr, const void *src, uint32_t src_bytes)
{
  asm volatile ("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                : : "r"(saddr), "l"(src), "r"(src_bytes) : "memory");
}

/* ---- exec -------------------------------------------------------------------------- */

/* Operand `slot` (3 bias, 4 residual, 5 norm) of a checked MATMUL, or nullptr when the
 * instruction has none. */
static __device__ __forceinline__ const unsigned char *
amk_mm_operand (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers, int slot)
{
  return amk_mm_dt (ctx->dtype, slot) == AMK_MM_ABSENT
         ? nullptr : reinterpret_cast<const unsigned char *> (buffers[ins->buffers[slot]].addr);
}


struct amk_mm_tile {
  uint32_t m0, m_end, n0, n_end; /* the block tile, clipped to the instruction */
};

/* Step `kt` of `rows` rows of a 16-bit matrix (W, or X when it needs no conversion)
 * into the stage at `dst`: 16-byte chunks, zeros past `row_end` and past K. */
static __device__ __forceinline__ void
amk_mm_load_rows (const unsigned char *src, uint32_t K, uint32_t row0, uint32_t row_end, uint32_t rows,
                  uint32_t kt, uint32_t dst, int tid, int nt)
{
  for (int c = tid; c < (int) rows * (AMK_MM_BK / 8); c += nt)
    {
      const uint32_t r = (uint32_t) c / (AMK_MM_BK / 8), q = (uint32_t) c % (AMK_MM_BK / 8);
      const uint32_t row = row0 + r, kc = kt * AMK_MM_BK + q * 8;
      const bool in = row < row_end && kc < K;
      amk_mm_cp16 (dst + (r * AMK_MM_LDS + q * 8) * 2, in ? src + ((uint64_t) row * K + kc) * 2 : src,
                   in ? 16u : 0u);
    }
}

/* Step `kt` of `rows` rows of a block-quantized W (rows of `rowb` bytes) into the stage
 * at `dst` as bf16, decoded in registers and stored (no copy in flight: the barrier
 * before the step's products orders the stores), zeros past `row_end` and past K. */
static __device__ __forceinline__ void
amk_mm_decode_rows (const unsigned char *src, uint32_t dt, uint64_t rowb, uint32_t K, uint32_t row0,
                    uint32_t row_end, uint32_t rows, uint32_t kt, unsigned char *dst, int tid, int nt)
{
  for (int c = tid; c < (int) rows * (AMK_MM_BK / 8); c += nt)
    {
      const uint32_t r = (uint32_t) c / (AMK_MM_BK / 8), q = (uint32_t) c % (AMK_MM_BK / 8);
      const uint32_t row = row0 + r, kc = kt * AMK_MM_BK + q * 8;
      uint4 o = make_uint4 (0, 0, 0, 0);
      if (row < row_end && kc < K)
        {
          float v[8];
          amk_qb_row8 (dt, src + (uint64_t) row * rowb, kc / 8, v);
          o = make_uint4 (amk_mm_pack2<false> (v[0], v[1]), amk_mm_pack2<false> (v[2], v[3]),
                          amk_mm_pack2<false> (v[4], v[5]), amk_mm_pack2<false> (v[6], v[7]));
        }
      *reinterpret_cast<uint4 *> (dst + (r * AMK_MM_LDS + q * 8) * 2) = o;
    }
}

/* Step `kt` of X as F32 (16-byte chunks of 4 floats, rows of AMK_MM_BK floats) into the
 * stage at `dst`, zeros past `row_end` and past K. */
static __device__ __forceinline__ void
amk_mm_load_rows_f32 (const unsigned char *src, uint32_t K, uint32_t row0, uint32_t row_end, uint32_t rows,
                      uint32_t kt, uint32_t dst, int tid, int nt)
{
  for (int c = tid; c < (int) rows * (AMK_MM_BK / 4); c += nt)
    {
      const uint32_t r = (uint32_t) c / (AMK_MM_BK / 4), q = (uint32_t) c % (AMK_MM_BK / 4);
      const uint32_t row = row0 + r, kc = kt * AMK_MM_BK + q * 4;
      const bool in = row < row_end && kc < K;
      amk_mm_cp16 (dst + (r * AMK_MM_BK + q * 4) * 4, in ? src + ((uint64_t) row * K + kc) * 4 : src,
                   in ? 16u : 0u);
    }
}

/* The landed F32 step `kt` of X (or BF16 with a norm, staged as 16-bit) into the 16-bit
 * buffer the tensor cores read: normalised (s_rs: the rows' 1 / rms, norm: the weight)
 * and packed, 8 elements per thread and round. */
template <bool F16>
static __device__ __forceinline__ void
amk_mm_convert_x (const unsigned char *staged, uint32_t xdt, unsigned char *xb, const unsigned char *norm,
                  uint32_t ndt, const float *s_rs, uint32_t K, uint32_t BM, uint32_t kt, int tid, int nt)
{
  for (int c = tid; c < (int) BM * (AMK_MM_BK / 8); c += nt)
    {
      const uint32_t r = (uint32_t) c / (AMK_MM_BK / 8), q = (uint32_t) c % (AMK_MM_BK / 8);
      const uint32_t kc = kt * AMK_MM_BK + q * 8;
      float v[8];
      if (xdt == AMK_ABI_DTYPE_F32)
        amk_vec_ld8 (staged + r * AMK_MM_BK * 4, AMK_ABI_DTYPE_F32, q, v);
      else
        amk_vec_ld8 (staged + r * AMK_MM_LDS * 2, xdt, q, v);
      if (norm != nullptr && kc < K)
        {
          float g[8];
          const float rs = s_rs[r];
          amk_vec_ld8 (norm, ndt, kc / 8, g);
#pragma unroll
          for (int e = 0; e < 8; e++)
            v[e] = v[e] * rs * g[e];
        }
      *reinterpret_cast<uint4 *> (xb + (r * AMK_MM_LDS + q * 8) * 2) =
        make_uint4 (amk_mm_pack2<F16> (v[0], v[1]), amk_mm_pack2<F16> (v[2], v[3]),
                    amk_mm_pack2<F16> (v[4], v[5]), amk_mm_pack2<F16> (v[6], v[7]));
    }
}

template <bool F16>
static __device__ __forceinline__ void
amk_mm_block_tile (const amk_op_ctx *ctx, const amk_instruction_t *ins,
                   const amk_buffer_t *buffers, const amk_mm_tile &t, int tid, int nt)
{
  const uint32_t packed = ctx->dtype;
  const uint32_t N = ctx->count, K = ctx->esize;
  const uint32_t ydt = amk_mm_dt (packed, 0), xdt = amk_mm_dt (packed, 2);
  const uint32_t bdt = amk_mm_dt (packed, 3), rdt = amk_mm_dt (packed, 4), ndt = amk_mm_dt (packed, 5);
  const unsigned char *w = ctx->ptr[1], *x = ctx->ptr[2];
  unsigned char *y = ctx->ptr[0];
  const unsigned char *bias = amk_mm_operand (ctx, ins, buffers, 3);
  const unsigned char *res = amk_mm_operand (ctx, ins, buffers, 4);
  const unsigned char *norm = amk_mm_operand (ctx, ins, buffers, 5);
  const int nw = nt / 32, warp = tid / 32, lane = tid % 32;
  const uint32_t BM = (uint32_t) nw * 8;
  const int wm = warp / 4, wn = warp % 4; /* the warp's 32 x 32 outputs */
  /* X of W's 16-bit type without a norm goes to the tensor cores from its stage;
   * otherwise each landed step is converted into one more 16-bit buffer first */
  const bool x_direct = norm == nullptr && xdt == (F16 ? AMK_ABI_DTYPE_F16 : AMK_ABI_DTYPE_BF16);
  const bool x_f32 = xdt == AMK_ABI_DTYPE_F32;
  /* a block-quantized W is decoded to bf16 into the stage (F16 is false for it) */
  const uint32_t wdt = amk_mm_dt (packed, 1);
  const bool wq = amk_qb_is_block (wdt);
  const uint64_t wrowb = wq ? (uint64_t) (K / amk_qb_values (wdt)) * amk_qb_bytes (wdt) : 0;

  /* shared memory: per stage W's rows then X's rows (F32: BM x BK floats; 16-bit: BM
   * padded rows), the 16-bit X buffer, the rows' 1 / rms */
  const uint32_t w_bytes = AMK_MM_BN * AMK_MM_LDS * 2, stage = w_bytes + BM * AMK_MM_BK * 4;
  const uint32_t s_base = (uint32_t) __cvta_generic_to_shared (amk_dyn_smem);
  unsigned char *xbuf = amk_dyn_smem + AMK_MM_SYNC_STAGES * stage;
  float *s_rs = reinterpret_cast<float *> (xbuf + BM * AMK_MM_LDS * 2);

  /* the rows' 1 / rms over all K columns, a warp per row */
  if (norm != nullptr)
    {
      const float eps = ins->params.matmul.eps;
      for (uint32_t r = (uint32_t) warp; r < BM; r += (uint32_t) nw)
        {
          const uint32_t m = t.m0 + r;
          float ss = 0.0f;
          if (m < t.m_end)
            for (uint32_t c = (uint32_t) lane; c < K / 8; c += 32)
              {
                float v[8];
                amk_vec_ld8 (x + (uint64_t) m * K * amk_dtype_size (xdt), xdt, c, v);
#pragma unroll
                for (int i = 0; i < 8; i++)
                  ss += v[i] * v[i];
              }
#pragma unroll
          for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync (0xffffffffu, ss, o);
          if (lane == 0)
            s_rs[r] = rsqrtf (ss / (float) K + eps);
        }
      amk_sync ();
    }

  const uint32_t steps = (K + AMK_MM_BK - 1) / AMK_MM_BK;
  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        acc[i][j][e] = 0.0f;

  /* prologue: steps 0 .. STAGES - 2 in flight */
  for (uint32_t s = 0; s < AMK_MM_SYNC_STAGES - 1; s++)
    {
      if (s < steps)
        {
          if (wq)
            amk_mm_decode_rows (w, wdt, wrowb, K, t.n0, t.n_end, AMK_MM_BN, s, amk_dyn_smem + s * stage, tid, nt);
          else
            amk_mm_load_rows (w, K, t.n0, t.n_end, AMK_MM_BN, s, s_base + s * stage, tid, nt);
          if (x_f32)
            amk_mm_load_rows_f32 (x, K, t.m0, t.m_end, BM, s, s_base + s * stage + w_bytes, tid, nt);
          else
            amk_mm_load_rows (x, K, t.m0, t.m_end, BM, s, s_base + s * stage + w_bytes, tid, nt);
        }
      asm volatile ("cp.async.commit_group;" ::: "memory");
    }

  for (uint32_t kt = 0; kt < steps; kt++)
    {
      const uint32_t st = s_base + (kt % AMK_MM_SYNC_STAGES) * stage;
      asm volatile ("cp.async.wait_group %0;" : : "n"(AMK_MM_SYNC_STAGES - 2) : "memory");
      amk_sync ();
      /* the stage of step kt - 1 is free for step kt + STAGES - 1 */
      const uint32_t next = kt + AMK_MM_SYNC_STAGES - 1;
      if (next < steps)
        {
          const uint32_t ns = s_base + (next % AMK_MM_SYNC_STAGES) * stage;
          if (wq)
            amk_mm_decode_rows (w, wdt, wrowb, K, t.n0, t.n_end, AMK_MM_BN, next,
                                amk_dyn_smem + (next % AMK_MM_SYNC_STAGES) * stage, tid, nt);
          else
            amk_mm_load_rows (w, K, t.n0, t.n_end, AMK_MM_BN, next, ns, tid, nt);
          if (x_f32)
            amk_mm_load_rows_f32 (x, K, t.m0, t.m_end, BM, next, ns + w_bytes, tid, nt);
          else
            amk_mm_load_rows (x, K, t.m0, t.m_end, BM, next, ns + w_bytes, tid, nt);
        }
      asm volatile ("cp.async.commit_group;" ::: "memory");
      if (!x_direct)
        {
          amk_mm_convert_x<F16> (amk_dyn_smem + (kt % AMK_MM_SYNC_STAGES) * stage + w_bytes, xdt, xbuf, norm,
                                 ndt, s_rs, K, BM, kt, tid, nt);
          amk_sync ();
        }

      const uint32_t ws = st, xs = x_direct ? st + w_bytes : s_base + AMK_MM_SYNC_STAGES * stage;
#pragma unroll
      for (int kk = 0; kk < AMK_MM_BK; kk += 16)
        {
          uint32_t a[2][4], b[2][4];
#pragma unroll
          for (int i = 0; i < 2; i++)
            {
              const uint32_t r = (uint32_t) (wm * 32 + i * 16 + lane % 16);
              amk_mm_ldmatrix4 (a[i], xs + (r * AMK_MM_LDS + kk + (lane / 16) * 8) * 2);
            }
#pragma unroll
          for (int j = 0; j < 2; j++)
            {
              const uint32_t r = (uint32_t) (wn * 32 + j * 16 + lane % 8 + (lane / 16) * 8);
              amk_mm_ldmatrix4 (b[j], ws + (r * AMK_MM_LDS + kk + ((lane / 8) % 2) * 8) * 2);
            }
#pragma unroll
          for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
              amk_mm_mma<F16> (acc[i][j], a[i], b[j / 2][(j % 2) * 2], b[j / 2][(j % 2) * 2 + 1]);
        }
    }
  asm volatile ("cp.async.wait_all;" ::: "memory");

  /* epilogue: bias, residual (read before the store: it may be Y itself), store */
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        {
          const uint32_t m = t.m0 + (uint32_t) (wm * 32 + i * 16 + lane / 4 + (e / 2) * 8);
          const uint32_t n = t.n0 + (uint32_t) (wn * 32 + j * 8 + (lane % 4) * 2 + e % 2);
          if (m >= t.m_end || n >= t.n_end)
            continue;
          const uint64_t o = (uint64_t) m * N + n;
          float v = acc[i][j][e];
          if (bias != nullptr)
            v += amk_vec_ld (bias, bdt, n);
          if (res != nullptr)
            v += amk_vec_ld (res + o * amk_dtype_size (rdt), rdt, 0);
          amk_vec_st (y + o * amk_dtype_size (ydt), ydt, 0, v);
        }
  amk_sync (); /* the next block tile reuses the shared memory */
}

/* ---- few rows: W streamed like a matrix-vector product ------------------------------ */

/* An mma the compiler may schedule (no side effects): the few-rows loop lets it issue
 * the loads of later steps before the products of earlier ones. */
template <bool F16>
static __device__ __forceinline__ void
amk_mm_mma_free (float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
  if (F16)
    asm ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Elements k .. k + 15 of a 16-bit row as 8 pairs: zeros past K (K is a multiple of 8)
 * or for a row that does not exist. */
static __device__ __forceinline__ void
amk_mm_row16 (const unsigned char *row, bool live, uint32_t k, uint32_t K, bool stream, uint32_t (&v)[8])
{
#pragma unroll
  for (int h = 0; h < 2; h++)
    {
      uint4 q = make_uint4 (0, 0, 0, 0);
      if (live && k + 8 * h < K)
        {
          const uint4 *src = reinterpret_cast<const uint4 *> (row + (uint64_t) (k + 8 * h) * 2);
          q = stream ? __ldcs (src) : *src;
        }
      v[4 * h] = q.x, v[4 * h + 1] = q.y, v[4 * h + 2] = q.z, v[4 * h + 3] = q.w;
    }
}

/* The same of a row of the other 16-bit type (bf16 X with f16 W, or the reverse),
 * rounded to W's. */
template <bool F16>
static __device__ __forceinline__ void
amk_mm_row16_other (const unsigned char *row, bool live, uint32_t k, uint32_t K, uint32_t (&v)[8])
{
  amk_mm_row16 (row, live, k, K, false, v);
#pragma unroll
  for (int i = 0; i < 8; i++)
    {
      float lo, hi;
      if (F16) /* the row is bf16 */
        lo = __uint_as_float (v[i] << 16), hi = __uint_as_float (v[i] & 0xffff0000u);
      else
        {
          const float2 f = __half22float2 (*reinterpret_cast<const __half2 *> (&v[i]));
          lo = f.x, hi = f.y;
        }
      v[i] = amk_mm_pack2<F16> (lo, hi);
    }
}

/* The same of a row of block-quantized W, decoded and rounded to bf16. */
static __device__ __forceinline__ void
amk_mm_row16_blocks (const unsigned char *row, uint32_t dt, bool live, uint32_t k, uint32_t K, uint32_t (&v)[8])
{
#pragma unroll
  for (int h = 0; h < 2; h++)
    {
      float f[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
      if (live && k + 8 * h < K)
        amk_qb_row8 (dt, row, k / 8 + (uint32_t) h, f);
#pragma unroll
      for (int i = 0; i < 4; i++)
        v[4 * h + i] = amk_mm_pack2<false> (f[2 * i], f[2 * i + 1]);
    }
}

/* The same of an F32 row, rounded to the 16-bit type. */
template <bool F16>
static __device__ __forceinline__ void
amk_mm_row16_f32 (const unsigned char *row, bool live, uint32_t k, uint32_t K, uint32_t (&v)[8])
{
#pragma unroll
  for (int h = 0; h < 4; h++)
    {
      float4 f = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
      if (live && k + 4 * h < K)
        f = *reinterpret_cast<const float4 *> (row + (uint64_t) (k + 4 * h) * 4);
      v[2 * h] = amk_mm_pack2<F16> (f.x, f.y);
      v[2 * h + 1] = amk_mm_pack2<F16> (f.z, f.w);
    }
}

/* A tile of at most 8 NF rows (M) and 128 columns without a fused norm. Compute is no
 * bound here, the stream of W is: so W takes the tensor cores' 16-row side (Y^T = W X^T)
 * and goes from global memory straight into registers, as in a matrix-vector product,
 * with no shared-memory stage and no barrier per step. A warp takes 16 W rows over a
 * slice of K (the block's warps split the tile's rows and K between them); in each step
 * of 64 columns lane (r, q) holds columns 16 q .. 16 q + 15 of W rows r and r + 8 and of
 * X row r: any order of k serves a dot product as long as W and X agree on it. The K
 * slices' sums meet in shared memory at the end. */
template <bool F16, int NF>
static __device__ __forceinline__ void
amk_mm_few_rows (const amk_op_ctx *ctx, const amk_instruction_t *ins,
                 const amk_buffer_t *buffers, const amk_mm_tile &t, int tid, int nt)
{
  const uint32_t packed = ctx->dtype;
  const uint32_t N = ctx->count, K = ctx->esize;
  const uint32_t ydt = amk_mm_dt (packed, 0), xdt = amk_mm_dt (packed, 2);
  const uint32_t bdt = amk_mm_dt (packed, 3), rdt = amk_mm_dt (packed, 4);
  const unsigned char *w = ctx->ptr[1], *x = ctx->ptr[2];
  unsigned char *y = ctx->ptr[0];
  const unsigned char *bias = amk_mm_operand (ctx, ins, buffers, 3);
  const unsigned char *res = amk_mm_operand (ctx, ins, buffers, 4);
  const bool x_f32 = xdt == AMK_ABI_DTYPE_F32;
  const bool x_other = !x_f32 && xdt != (F16 ? AMK_ABI_DTYPE_F16 : AMK_ABI_DTYPE_BF16);
  const uint32_t xsize = x_f32 ? 4 : 2;
  const int nw = nt / 32, warp = tid / 32, lane = tid % 32;
  const uint32_t groups = (t.n_end - t.n0 + 15) / 16;
  const uint32_t slices = max (1u, (uint32_t) nw / groups);
  const uint32_t g = (uint32_t) warp % groups, s = (uint32_t) warp / groups;
  const uint32_t q = (uint32_t) lane & 3u, r = (uint32_t) lane >> 2;
  const uint32_t steps = (K + 63) / 64;
  const uint32_t first = s * steps / slices, last = (s + 1) * steps / slices;
  const uint32_t na = t.n0 + g * 16 + r, nb = na + 8;
  /* a block-quantized W is decoded to bf16 in registers (F16 is false for it) */
  const uint32_t wdt = amk_mm_dt (packed, 1);
  const bool wq = amk_qb_is_block (wdt);
  const uint64_t wrowb = wq ? (uint64_t) (K / amk_qb_values (wdt)) * amk_qb_bytes (wdt) : (uint64_t) K * 2;
  const unsigned char *wa = w + (uint64_t) na * wrowb, *wb = w + (uint64_t) nb * wrowb;
  float acc[NF][4];

#pragma unroll
  for (int f = 0; f < NF; f++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      acc[f][e] = 0.0f;

  if (s < slices)
#pragma unroll (NF <= 2 ? 2 : 1)
    for (uint32_t c = first; c < last; c++)
      {
        const uint32_t k = c * 64 + q * 16;
        uint32_t va[8], vb[8];

        if (wq)
          {
            amk_mm_row16_blocks (wa, wdt, na < t.n_end, k, K, va);
            amk_mm_row16_blocks (wb, wdt, nb < t.n_end, k, K, vb);
          }
        else
          {
            amk_mm_row16 (wa, na < t.n_end, k, K, true, va);
            amk_mm_row16 (wb, nb < t.n_end, k, K, true, vb);
          }
#pragma unroll
        for (int f = 0; f < NF; f++)
          {
            const uint32_t m = t.m0 + (uint32_t) f * 8 + r;
            const unsigned char *xr = x + (uint64_t) m * K * xsize;
            uint32_t vx[8];

            if (x_f32)
              amk_mm_row16_f32<F16> (xr, m < t.m_end, k, K, vx);
            else if (x_other)
              amk_mm_row16_other<F16> (xr, m < t.m_end, k, K, vx);
            else
              amk_mm_row16 (xr, m < t.m_end, k, K, false, vx);
#pragma unroll
            for (int kb = 0; kb < 4; kb++)
              amk_mm_mma_free<F16> (acc[f], va[2 * kb], vb[2 * kb], va[2 * kb + 1], vb[2 * kb + 1],
                                    vx[2 * kb], vx[2 * kb + 1]);
          }
      }

  /* the K slices' sums: partial [slice][group][f][lane][4] in shared memory */
  float *part = reinterpret_cast<float *> (amk_dyn_smem);
  if (s < slices)
#pragma unroll
    for (int f = 0; f < NF; f++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        part[(((s * groups + g) * NF + (uint32_t) f) * 32 + (uint32_t) lane) * 4 + (uint32_t) e] = acc[f][e];
  amk_sync ();
  for (uint32_t i = (uint32_t) tid; i < groups * NF * 128; i += (uint32_t) nt)
    {
      const uint32_t gi = i / (NF * 128), f = i / 128 % NF, l = i / 4 % 32, e = i % 4;
      /* C of m16n8: rows (W rows, Y's columns) l / 4 and + 8, columns (Y's rows) 2 (l % 4) + e % 2 */
      const uint32_t n = t.n0 + gi * 16 + l / 4 + (e / 2) * 8;
      const uint32_t m = t.m0 + f * 8 + (l % 4) * 2 + e % 2;
      if (n >= t.n_end || m >= t.m_end)
        continue;
      float v = 0.0f;
      for (uint32_t sl = 0; sl < slices; sl++)
        v += part[(((sl * groups + gi) * NF + f) * 32 + l) * 4 + e];
      const uint64_t o = (uint64_t) m * N + n;
      if (bias != nullptr)
        v += amk_vec_ld (bias, bdt, n);
      if (res != nullptr)
        v += amk_vec_ld (res + o * amk_dtype_size (rdt), rdt, 0);
      amk_vec_st (y + o * amk_dtype_size (ydt), ydt, 0, v);
    }
  amk_sync (); /* the next tile reuses the shared memory */
}

/* amk_mm_few_rows() for the tile's row count. */
template <bool F16>
static __device__ __forceinline__ void
amk_mm_few_rows_any (const amk_op_ctx *ctx, const amk_instruction_t *ins,
                     const amk_buffer_t *buffers, const amk_mm_tile &t, int tid, int nt)
{
  const uint32_t m = t.m_end - t.m0;

  if (m <= 8)
    amk_mm_few_rows<F16, 1> (ctx, ins, buffers, t, tid, nt);
  else if (m <= 16)
    amk_mm_few_rows<F16, 2> (ctx, ins, buffers, t, tid, nt);
  else if (m <= 32)
    amk_mm_few_rows<F16, 4> (ctx, ins, buffers, t, tid, nt);
  else
    amk_mm_few_rows<F16, 8> (ctx, ins, buffers, t, tid, nt);
}

/* the wgmma tile builds on the pieces above */
#include "ops-matmul-wgmma.cuh"

/* The whole block, after the waits (run is uniform over the block). Returns
 * AMK_ABORT_CHECK when the launch gave too little dynamic shared memory or a warp count
 * that is not a multiple of 4 (the launcher's configuration never does). */
static __device__ __noinline__ int
amk_matmul_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                 bool run, int tid, int nt)
{
  if (nt % 128 != 0 || amk_dyn_smem_size () < AMK_MATMUL_SMEM_BYTES (nt))
    return AMK_ABORT_CHECK;
  if (!run)
    return AMK_ABORT_NONE;

  const amk_matmul_params_t &p = ins->params.matmul;
  const uint32_t m_end = (uint32_t) p.m0 + (uint32_t) p.m_count;
  const uint32_t n_end = (uint32_t) p.n0 + (uint32_t) p.n_count;
  const uint32_t BM = (uint32_t) nt / 4;
  const bool f16 = amk_mm_dt (ctx->dtype, 1) == AMK_ABI_DTYPE_F16;

  /* a few rows without a fused norm (a batch's step): W streamed, see amk_mm_few_rows();
   * many rows of bf16 X and W without a norm go to amk_mmw_exec() where the build has it */
  const bool few = p.m_count <= AMK_MM_FEW_ROWS && amk_mm_dt (ctx->dtype, 5) == AMK_MM_ABSENT;

  for (uint32_t m = (uint32_t) p.m0; m < m_end; m += BM)
    for (uint32_t n = (uint32_t) p.n0; n < n_end; n += AMK_MM_BN)
      {
        const amk_mm_tile t = { m, min (m + BM, m_end), n, min (n + AMK_MM_BN, n_end) };
        if (few && f16)
          amk_mm_few_rows_any<true> (ctx, ins, buffers, t, tid, nt);
        else if (few)
          amk_mm_few_rows_any<false> (ctx, ins, buffers, t, tid, nt);
        else if (f16)
          amk_mm_block_tile<true> (ctx, ins, buffers, t, tid, nt);
        else
          amk_mm_block_tile<false> (ctx, ins, buffers, t, tid, nt);
      }
  return AMK_ABORT_NONE;
}

#endif /* AMK_OPS_MATMUL_CUH */
