/* ops-matvec.cuh: MATVEC, one tile of rows of a matrix-vector product (see the opcode's
 * comment in amk-abi.h and kernels/README.md):
 *
 *   y[r0 + r] = sum_k W[r0 + r, k] x'[k] (+ bias[r0 + r]) (+ residual[r0 + r]),  r < n
 *
 * with x' = x, or x' = (x * rsqrt(mean(x^2) + eps)) * norm (a fused RMSNORM; the ring
 * pipeline computes it as (x * norm) * rsqrt(...), equal up to rounding), or
 * x' = silu(x) * up (a fused SILU_MUL: the down projection reads gate and up itself, one
 * stage less per layer), fp32 accumulation and round-to-nearest-even stores. A split-K
 * tile (k_len > 0) sums only the columns k0 .. k0 + k_len of its rows and adds that share to
 * an F32 y with atomic adds (red.global.add.f32), so that a matvec with fewer rows than
 * the queues can still spread over all of them.
 *
 * Three parts (the utility ops have two):
 *   amk_matvec_check():    every thread, before the waits: operands, ranges, dtypes,
 *                          alignment, aliasing; resolves them into an amk_op_ctx.
 *   amk_matvec_prefetch(): every thread, before the waits, only when W is CONSTANT (its
 *                          bytes cannot depend on a counter): issues the copies of
 *                          each warp's first AMK_MV_STAGES stages of W.
 *   amk_matvec_exec():     the whole block, after the waits (also the warps whose wait
 *                          failed: the op has block barriers, they join them and skip the
 *                          work).
 *
 * Work split: warp w owns the rows r = w, w + nw, w + 2 nw, ... of the tile (nw = warps
 * of the block). A row is C = K * sizeof(W) / 16 chunks of 16 bytes; lane l takes chunks
 * l, l + 32, l + 64, ...; at the end of a row the warp adds its 32 partial sums with
 * shuffles and lane 0 writes y. The chunks of one thread form a stream of T items
 * (its rows x ceil(C / 32)), and W streams through one of two pipelines:
 *
 *  - RING (dynamic shared memory >= threads * AMK_MATVEC_RING_BYTES_PER_THREAD + 4 K):
 *    every warp owns AMK_MV_STAGES stages of AMK_MV_STAGE_BYTES of dynamic shared
 *    memory, each a piece of one of its rows, copied with cp.async (a commit group per
 *    stage) and refilled as soon as the warp has read it: all of the warp's stages are
 *    in flight but the one it reads. x' is staged in shared memory as fp32
 *    behind the ring, laid out so that a warp's reads are conflict-free (for 8 elements
 *    per chunk: x'[8c .. 8c+3] at float4 c, x'[8c+4 .. 8c+7] at float4 C + c).
 *  - DIRECT (less dynamic shared memory, e.g. 0): AMK_MV_DIRECT 16-byte loads per thread
 *    in flight straight into registers (ld.global.cs: streamed once), and x' read from
 *    global memory (L1) and normalised on the fly.
 *
 * A stage holds a row's chunks in order, so the warp's 16-byte reads of it are 512
 * contiguous bytes (no bank conflict).
 *
 * Loads of operands that another block may have written (x, bias, residual, norm, and W
 * unless CONSTANT) are ordinary coherent loads after the warp's acquire, never .nc.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_MATVEC_CUH
#define AMK_OPS_MATVEC_CUH

#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "amk-abi.h"
#include "ops-utility.cuh"
#include "quant-blocks.cuh"

#define AMK_MV_DIRECT  8                     /* register loads in flight per thread */
#define AMK_MV_ABSENT  0xfu                  /* packed dtype of a missing operand */
#define AMK_MV_XBATCH  4                     /* x' staging: float4 groups in flight per thread */
#define AMK_MV_WCONST  0x80000000u           /* packed flag: W is CONSTANT */
#define AMK_MV_SPLIT   0x40000000u           /* packed flag: a split-K tile (atomic adds) */

/* amk_op_ctx for MATVEC, whose tile covers columns k0 .. k0 + kn of its rows (k0 = 0,
 * kn = K unless split-K):
 *   ptr[0] = y + r0, ptr[1] = W + r0 K + k0 (16-byte aligned), ptr[2] = x + k0,
 *   count = n rows, esize = kn, pattern = K (the row stride),
 *   dtype = packed dtypes, 4 bits per buffer slot (slot s at bit 4 s; AMK_MV_ABSENT for
 *           a missing bias / residual / norm / up; a split-K tile marks the residual
 *           absent, it adds onto y, and the bias unless k0 = 0) | AMK_MV_WCONST |
 *           AMK_MV_SPLIT.
 * bias, residual, norm, up and eps are re-resolved by amk_matvec_exec() from the
 * instruction (in shared memory) and the buffer table: no registers across the waits. */

static __device__ __forceinline__ uint32_t
amk_mv_dt (uint32_t packed, int slot)
{
  return (packed >> (4 * slot)) & 0xfu;
}

/* The pipeline: uniform over the block (it depends on the launch and on K only). */
static __device__ __forceinline__ bool
amk_mv_use_ring (uint32_t k, int nt)
{
  return (uint64_t) nt * AMK_MATVEC_RING_BYTES_PER_THREAD + 4ull * k <= amk_dyn_smem_size ();
}

/* ---- check ------------------------------------------------------------------------- */

/* One operand: buffer ref `slot`, elements [off, off + count) (64-bit: W's offset r0 K
 * may pass 2^31), a dtype in the mask `dtypes` (bit per AMK_ABI_DTYPE_*). */
static __device__ __forceinline__ int
amk_mv_ref (const amk_instruction_t *ins, int slot, const amk_buffer_t *buffers,
            int32_t n_buffers, uint64_t off, uint64_t count, uint32_t dtypes, bool align16,
            unsigned char **ptr, uint32_t *dtype, uint32_t *flags, int32_t *detail)
{
  const int32_t ref = ins->buffers[slot];

  *detail = ref;
  if (ref < 0 || ref >= n_buffers)
    return AMK_ABORT_BAD_INDEX;

  const amk_buffer_t *b = buffers + ref;
  const uint64_t addr = b->addr;
  const uint32_t dt = b->dtype;
  const uint32_t es = amk_dtype_size (dt);

  if (es == 0 || dt >= 32 || ((dtypes >> dt) & 1u) == 0)
    return AMK_ABORT_CHECK;
  /* off, count < 2^62; compare in elements so nothing overflows */
  if (off + count > (b->size_bytes >> amk_size_shift (es)))
    return AMK_ABORT_CHECK;
  if ((addr & (align16 ? 15u : es - 1)) != 0)
    return AMK_ABORT_CHECK; /* a misaligned access would kill the context */

  *ptr = reinterpret_cast<unsigned char *> (addr + off * es);
  *dtype = dt;
  *flags = b->flags;
  return AMK_ABORT_NONE;
}

/* W: buffer ref 1, rows [r0, r0 + n) of K values of a dtype in `dtypes`, 16-byte aligned:
 * a plain type as amk_mv_ref, or a block type (K whole blocks; ptr at row r0, which
 * starts on the 2-byte boundary of its blocks only). */
static __device__ __forceinline__ int
amk_mv_ref_w (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
              uint64_t r0, uint64_t n, uint64_t k, uint32_t dtypes, unsigned char **ptr,
              uint32_t *dtype, uint32_t *flags, int32_t *detail)
{
  const int32_t ref = ins->buffers[1];

  *detail = ref;
  if (ref < 0 || ref >= n_buffers)
    return AMK_ABORT_BAD_INDEX;
  if (!amk_qb_is_block (buffers[ref].dtype))
    return amk_mv_ref (ins, 1, buffers, n_buffers, r0 * k, n * k, dtypes, true, ptr, dtype, flags, detail);

  const amk_buffer_t *b = buffers + ref;
  const uint32_t dt = b->dtype, qv = amk_qb_values (dt);
  /* K < 2^31 and rows < 2^31: the product fits 64 bits; K is a whole number of blocks */
  const uint64_t row_bytes = (k / qv) * amk_qb_bytes (dt);

  if (((dtypes >> dt) & 1u) == 0 || k % qv != 0 || (r0 + n) * row_bytes > b->size_bytes ||
      (b->addr & 15u) != 0)
    return AMK_ABORT_CHECK;
  *ptr = reinterpret_cast<unsigned char *> (b->addr + r0 * row_bytes);
  *dtype = dt;
  *flags = b->flags;
  return AMK_ABORT_NONE;
}

/* [a, a + na) and [b, b + nb) share a byte. */
static __device__ __forceinline__ bool
amk_mv_overlap (const unsigned char *a, uint64_t na, const unsigned char *b, uint64_t nb)
{
  return na != 0 && nb != 0 && a < b + nb && b < a + na;
}

/* Every thread: validate MATVEC and resolve it into ctx. Same rules as the host verifier
 * (amk-glib/amk-verifier.c check_matvec): y and the optional operands F32 or BF16, W
 * BF16, F16 or F32 with rows of a multiple of 16 bytes; y may share memory only with the
 * residual, and then exactly. Also: W, x and the norm weight start 16-byte aligned (true
 * for every buffer the launcher places). */
static __device__ __forceinline__ int
amk_matvec_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                  amk_op_ctx *ctx, int32_t *detail)
{
  const uint32_t vec = (1u << AMK_ABI_DTYPE_F32) | (1u << AMK_ABI_DTYPE_BF16);
  const uint32_t mat = vec | (1u << AMK_ABI_DTYPE_F16) | AMK_QB_MASK;
  const amk_matvec_params_t &p = ins->params.matvec;
  const int32_t r0 = p.row0, n = p.rows, k = p.k;
  const int32_t k0 = p.k0, kn = p.k_len;
  const bool split = kn != 0;
  unsigned char *y, *w, *x, *o;
  uint32_t ydt, wdt, xdt, odt, wflags, fl;
  uint32_t packed;
  int code;

  *detail = ins->buffers[1];
  if (r0 < 0 || n < 0 || k < 1 || k0 < 0 || kn < 0 || k0 > k - kn || (!split && k0 != 0))
    return AMK_ABORT_CHECK;
  if ((code = amk_mv_ref (ins, 0, buffers, n_buffers, (uint64_t) r0, (uint64_t) n, vec, false,
                          &y, &ydt, &fl, detail)))
    return code;
  if ((code = amk_mv_ref_w (ins, buffers, n_buffers, (uint64_t) r0, (uint64_t) n, (uint64_t) k, mat,
                            &w, &wdt, &wflags, detail)))
    return code;
  const bool blocks = amk_qb_is_block (wdt);
  const uint32_t wes = amk_dtype_size (wdt), qv = amk_qb_values (wdt);
  const uint64_t row_bytes = blocks ? (uint64_t) (k / qv) * amk_qb_bytes (wdt) : (uint64_t) k * wes;
  /* rows of whole 16-byte chunks (or of whole blocks); the tile's chunks (and a thread's
   * items) fit 32 bits */
  if ((!blocks && row_bytes % 16 != 0) || (uint64_t) n * (row_bytes / 16 + (blocks ? 2 : 0)) >= (1ull << 32))
    return AMK_ABORT_CHECK;
  /* a split: whole chunks (or blocks), onto an F32 y that is its own residual (checked
   * below) */
  if (split && ((blocks ? (k0 % qv != 0 || kn % qv != 0)
                        : (((uint64_t) k0 * wes) % 16 != 0 || ((uint64_t) kn * wes) % 16 != 0)) ||
                ydt != AMK_ABI_DTYPE_F32 || ins->buffers[4] != ins->buffers[0]))
    return AMK_ABORT_CHECK; /* detail: W's buffer index */
  const uint64_t ybytes = (uint64_t) n * amk_dtype_size (ydt);
  if (amk_mv_overlap (y, ybytes, w, (uint64_t) n * row_bytes))
    return AMK_ABORT_CHECK; /* detail: W's buffer index */
  if ((code = amk_mv_ref (ins, 2, buffers, n_buffers, 0, (uint64_t) k, vec, true,
                          &x, &xdt, &fl, detail)))
    return code;
  if (amk_mv_overlap (y, ybytes, x, (uint64_t) k * amk_dtype_size (xdt)))
    return AMK_ABORT_CHECK; /* detail: x's buffer index */

  packed = ydt | (wdt << 4) | (xdt << 8);
  for (int slot = 3; slot < 7; slot++)
    {
      /* slot 6 (up) only in a seven-buffer instruction */
      if (ins->buffers[slot] == AMK_NO_BUFFER || (slot == 6 && ins->n_buffers < 7))
        {
          packed |= AMK_MV_ABSENT << (4 * slot);
          continue;
        }
      const bool is_norm = slot >= 5; /* the norm weight and up: [K], like x */
      const uint64_t off = is_norm ? 0 : (uint64_t) r0;
      const uint64_t cnt = is_norm ? (uint64_t) k : (uint64_t) n;
      if ((code = amk_mv_ref (ins, slot, buffers, n_buffers, off, cnt, vec, is_norm,
                              &o, &odt, &fl, detail)))
        return code;
      /* only the residual may be y itself, and then exactly its rows */
      if (amk_mv_overlap (y, ybytes, o, cnt * amk_dtype_size (odt)) &&
          !(slot == 4 && o == y && odt == ydt))
        return AMK_ABORT_CHECK;
      packed |= odt << (4 * slot);
    }
  if (amk_mv_dt (packed, 5) != AMK_MV_ABSENT && amk_mv_dt (packed, 6) != AMK_MV_ABSENT)
    {
      *detail = ins->buffers[6];
      return AMK_ABORT_CHECK; /* a norm and a gate: one or the other */
    }
  if (split)
    {
      /* y already holds the residual; the bias goes in once, with the first columns */
      packed = (packed & ~(0xfu << 16)) | (AMK_MV_ABSENT << 16) | AMK_MV_SPLIT;
      if (k0 != 0)
        packed = (packed & ~(0xfu << 12)) | (AMK_MV_ABSENT << 12);
    }

  ctx->ptr[0] = y;
  ctx->ptr[1] = w + (blocks ? (uint64_t) (k0 / qv) * amk_qb_bytes (wdt) : (uint64_t) k0 * wes);
  ctx->ptr[2] = x + (uint64_t) k0 * amk_dtype_size (xdt);
  ctx->count = (uint32_t) n;
  ctx->esize = (uint32_t) (split ? kn : k);
  ctx->dtype = packed | ((wflags & AMK_BUFFER_FLAG_CONSTANT) ? AMK_MV_WCONST : 0u);
  ctx->pattern = (uint32_t) k;
  return AMK_ABORT_NONE;
}

/* ---- geometry of a thread's item stream ---------------------------------------------- */

struct amk_mv_geom {
  uint32_t C;    /* 16-byte chunks per row of the tile (its columns only, when split) */
  uint32_t J;    /* items per row per lane: ceil(C / 32) */
  uint32_t T;    /* items of this thread: rows of its warp * J */
  uint64_t rowb; /* bytes per row of W (the stride) */
};

static __device__ __forceinline__ amk_mv_geom
amk_mv_geometry (const amk_op_ctx *ctx, int tid, int nt)
{
  amk_mv_geom g;
  const uint32_t n = ctx->count;
  const uint32_t w = (uint32_t) tid >> 5, nw = (uint32_t) nt >> 5;
  const uint32_t es = amk_dtype_size (amk_mv_dt (ctx->dtype, 1));

  g.rowb = (uint64_t) ctx->pattern * es;
  g.C = (uint32_t) ((uint64_t) ctx->esize * es / 16);
  g.J = (g.C + 31) / 32;
  g.T = n > w ? ((n - 1 - w) / nw + 1) * g.J : 0;
  return g;
}

/* The producer side of the stream: item t is chunk l + 32 j of row w + nw i, t = i J + j. */
struct amk_mv_cursor {
  const unsigned char *p; /* W address of the item */
  uint32_t t, j;
};

static __device__ __forceinline__ amk_mv_cursor
amk_mv_cursor_at (const amk_op_ctx *ctx, const amk_mv_geom &g, uint32_t t, int tid, int nt)
{
  amk_mv_cursor c;
  const uint32_t i = t / g.J;
  const uint32_t row = ((uint32_t) tid >> 5) + i * ((uint32_t) nt >> 5);

  c.t = t;
  c.j = t - i * g.J;
  c.p = ctx->ptr[1] + (uint64_t) row * g.rowb + ((uint64_t) (tid & 31) + 32u * c.j) * 16u;
  return c;
}

static __device__ __forceinline__ void
amk_mv_advance (amk_mv_cursor &c, const amk_mv_geom &g, int64_t wrap)
{
  c.t++;
  c.p += 512;
  if (++c.j == g.J)
    {
      c.j = 0;
      c.p += wrap; /* to the same lane's first chunk of the warp's next row */
    }
}

static __device__ __forceinline__ int64_t
amk_mv_wrap (const amk_mv_geom &g, int nt)
{
  return (int64_t) ((uint32_t) nt >> 5) * (int64_t) g.rowb - (int64_t) g.J * 512;
}

/* ---- the ring: W through shared memory in stages ----------------------------------- */

/* Warp w owns bytes [w, w + 1) * AMK_MV_WARP_RING of the ring: AMK_MV_STAGES stages of
 * AMK_MV_STAGE_BYTES. A stage holds up to AMK_MV_STAGE_BYTES of one of the warp's rows
 * (a row of the tile is C * 16 bytes, in ceil(C / 128) stages); lane l copies the
 * stage's 16-byte chunks l, l + 32, l + 64, l + 96 with cp.async, one commit group per
 * stage, and later reads exactly those chunks: its own copies, so cp.async.wait_group is
 * all the synchronisation the ring needs. A group per stage rather than per 16-byte
 * chunk pays the bookkeeping (slot address, cursor, commit, wait) once per four chunks.
 * The copies stay per thread: with bulk copies (cp.async.bulk) single SMs fell behind. */
#define AMK_MV_STAGE_BYTES 2048u
#define AMK_MV_STAGES      4
#define AMK_MV_WARP_RING   (AMK_MV_STAGES * AMK_MV_STAGE_BYTES)
#define AMK_MV_LANE_CHUNKS (AMK_MV_STAGE_BYTES / 512) /* a lane's chunks per full stage */

static_assert (AMK_MV_WARP_RING == 32 * AMK_MATVEC_RING_BYTES_PER_THREAD, "a warp's share of the ring");
static_assert (AMK_MV_STAGE_BYTES % 512 == 0, "a stage is whole 16-byte chunks of all 32 lanes");

static __device__ __forceinline__ uint32_t
amk_mv_ring_base (void)
{
  return (uint32_t) __cvta_generic_to_shared (amk_dyn_smem);
}

/* The warp's stream of stages. */
struct amk_mv_stream {
  uint64_t step;    /* from one of the warp's rows to the next: nw rows of W */
  uint32_t rb;      /* bytes per row of the tile: C * 16 */
  uint32_t per_row; /* stages per row */
  uint32_t n;       /* stages of the warp */
  uint32_t ring;    /* the warp's share of the ring: byte offset in amk_dyn_smem */
};

static __device__ __forceinline__ amk_mv_stream
amk_mv_stream_of (const amk_mv_geom &g, int tid, int nt)
{
  amk_mv_stream st;
  const uint32_t w = (uint32_t) tid >> 5;

  st.step = (uint64_t) ((uint32_t) nt >> 5) * g.rowb;
  st.rb = g.C * 16u;
  st.per_row = (st.rb + AMK_MV_STAGE_BYTES - 1) / AMK_MV_STAGE_BYTES;
  st.n = (g.T / g.J) * st.per_row; /* the warp's rows: T = rows * J */
  st.ring = w * AMK_MV_WARP_RING;
  return st;
}

/* The 16-byte chunks of the stage that starts `off` bytes into a row of `rb` bytes: a
 * whole stage, or what is left of the row. The copies of a stage (amk_mv_copy_stage)
 * and its reads (amk_mv_run_ring) must cover the same chunks. */
static __device__ __forceinline__ uint32_t
amk_mv_stage_chunks (uint32_t rb, uint32_t off)
{
  return min (AMK_MV_STAGE_BYTES, rb - off) / 16u;
}

/* Where one of the warp's stages starts in W: its row's W and the offset in the row. */
struct amk_mv_stage_cursor {
  const unsigned char *row;
  uint32_t off;
};

/* The warp's stage k. */
static __device__ __forceinline__ amk_mv_stage_cursor
amk_mv_stage_at (const amk_op_ctx *ctx, const amk_mv_geom &g, const amk_mv_stream &st, uint32_t k,
                 int tid)
{
  amk_mv_stage_cursor c;
  const uint32_t i = k / st.per_row;

  c.row = ctx->ptr[1] + (uint64_t) ((uint32_t) tid >> 5) * g.rowb + (uint64_t) i * st.step;
  c.off = (k - i * st.per_row) * AMK_MV_STAGE_BYTES;
  return c;
}

/* This lane's cp.async copies of 16-byte chunks lane, lane + 32, ... (below nc) from src
 * to the shared address dst, marked evict-first in L2. */
static __device__ __forceinline__ void
amk_mv_copy_chunks (uint32_t dst, const unsigned char *src, uint32_t nc, uint32_t lane)
{
  uint64_t policy;

  asm ("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#pragma unroll
  for (uint32_t u = 0; u < AMK_MV_LANE_CHUNKS; u++)
    if (lane + 32u * u < nc)
      asm volatile ("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;"
                    : : "r"(dst + 512u * u), "l"(src + 512u * u), "l"(policy) : "memory");
}

/* This lane's copies of the stage at c into slot `slot`, then the stage's commit group
 * (also for a stage past the warp's last one: group k always holds stage k); moves c to
 * the next stage. W streams through L2 marked evict-first: it is read once per launch,
 * and should not push out what the latency-bound stages read (activations, the KV
 * caches, the counters, the instructions). */
static __device__ __forceinline__ void
amk_mv_copy_stage (const amk_mv_stream &st, amk_mv_stage_cursor &c, bool exists, uint32_t slot,
                   uint32_t lane)
{
  if (exists)
    {
      amk_mv_copy_chunks (amk_mv_ring_base () + st.ring + slot * AMK_MV_STAGE_BYTES + lane * 16u,
                          c.row + c.off + lane * 16u, amk_mv_stage_chunks (st.rb, c.off), lane);
      c.off += AMK_MV_STAGE_BYTES;
      if (c.off >= st.rb)
        {
          c.row += st.step;
          c.off = 0;
        }
    }
  asm volatile ("cp.async.commit_group;" : : : "memory");
}

/* ---- prefetch: the first stages, before the waits --------------------------------------- */

static __device__ __forceinline__ bool
amk_matvec_early (const amk_op_ctx *ctx)
{
  return (ctx->dtype & AMK_MV_WCONST) != 0;
}

/* The warp's first AMK_MV_STAGES stages, a commit group each. */
static __device__ __forceinline__ void
amk_mv_prologue (const amk_op_ctx *ctx, const amk_mv_geom &g, int tid, int nt)
{
  const amk_mv_stream st = amk_mv_stream_of (g, tid, nt);
  amk_mv_stage_cursor c = amk_mv_stage_at (ctx, g, st, 0, tid);

#pragma unroll
  for (uint32_t k = 0; k < AMK_MV_STAGES; k++)
    amk_mv_copy_stage (st, c, k < st.n, k, (uint32_t) tid & 31);
}

/* Every thread, between amk_check and the waits, only when amk_matvec_early(). */
static __device__ __forceinline__ void amk_mvq_prologue (const amk_op_ctx *ctx, int tid, int nt);

static __device__ __forceinline__ void
amk_matvec_prefetch (const amk_op_ctx *ctx, int tid, int nt)
{
  if (!amk_mv_use_ring (ctx->esize, nt))
    return;
  if (amk_qb_is_block (amk_mv_dt (ctx->dtype, 1)))
    {
      amk_mvq_prologue (ctx, tid, nt);
      return;
    }
  const amk_mv_geom g = amk_mv_geometry (ctx, tid, nt);
  if (g.T != 0)
    amk_mv_prologue (ctx, g, tid, nt);
}

/* ---- arithmetic ------------------------------------------------------------------------ */

static __device__ __forceinline__ float
amk_mv_warp_sum (float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  return v;
}

/* One element of an F32 or BF16 vector. */
static __device__ __forceinline__ float
amk_mv_elem (const unsigned char *p, uint32_t dt, uint32_t i)
{
  if (dt == AMK_ABI_DTYPE_F32)
    return reinterpret_cast<const float *> (p)[i];
  return __uint_as_float ((uint32_t) reinterpret_cast<const uint16_t *> (p)[i] << 16);
}

/* The fused SILU_MUL's x'[i], the same arithmetic as SILU_MUL (ops-vector.cuh). */
static __device__ __forceinline__ float
amk_mv_gated (float g, float u)
{
  return __fdividef (g, 1.0f + expf (-g)) * u;
}

/* Elements per 16-byte chunk of W. */
template <uint32_t WDT> struct amk_mv_w {
  static constexpr uint32_t E = WDT == AMK_ABI_DTYPE_F32 ? 4 : 8;
};

/* acc + sum_e W[e] x[e] over one chunk, in element order. */
template <uint32_t WDT>
static __device__ __forceinline__ float
amk_mv_dot (uint4 w, const float (&x)[8], float acc)
{
  if (WDT == AMK_ABI_DTYPE_F32)
    {
      acc = fmaf (__uint_as_float (w.x), x[0], acc);
      acc = fmaf (__uint_as_float (w.y), x[1], acc);
      acc = fmaf (__uint_as_float (w.z), x[2], acc);
      acc = fmaf (__uint_as_float (w.w), x[3], acc);
    }
  else
    {
      const uint32_t u[4] = { w.x, w.y, w.z, w.w };
#pragma unroll
      for (int i = 0; i < 4; i++)
        {
          float lo, hi;
          if (WDT == AMK_ABI_DTYPE_BF16)
            {
              lo = __uint_as_float (u[i] << 16);
              hi = __uint_as_float (u[i] & 0xffff0000u);
            }
          else
            {
              lo = __half2float (__ushort_as_half ((unsigned short) (u[i] & 0xffffu)));
              hi = __half2float (__ushort_as_half ((unsigned short) (u[i] >> 16)));
            }
          acc = fmaf (lo, x[2 * i], acc);
          acc = fmaf (hi, x[2 * i + 1], acc);
        }
    }
  return acc;
}

/* Elements 4 j .. 4 j + 3 of an F32 or BF16 vector with a 16-byte aligned base. */
static __device__ __forceinline__ float4
amk_mv_load4 (const unsigned char *base, uint32_t dt, uint32_t j)
{
  if (dt == AMK_ABI_DTYPE_F32)
    return reinterpret_cast<const float4 *> (base)[j];
  const uint2 a = reinterpret_cast<const uint2 *> (base)[j];
  return make_float4 (__uint_as_float (a.x << 16), __uint_as_float (a.x & 0xffff0000u),
                      __uint_as_float (a.y << 16), __uint_as_float (a.y & 0xffff0000u));
}

/* The float4 of the staged x' that holds elements 4 j .. 4 j + 3 (the layout of
 * amk_matvec_exec: for 8 elements per chunk, the low halves of the chunks first). */
static __device__ __forceinline__ uint32_t
amk_mv_stage_slot (uint32_t j, uint32_t C, uint32_t E)
{
  return E == 8 ? ((j & 1) ? C : 0) + (j >> 1) : j;
}

/* E consecutive elements (chunk c) of an F32 or BF16 vector with a 16-byte aligned base. */
template <uint32_t E>
static __device__ __forceinline__ void
amk_mv_load_vec (const unsigned char *base, uint32_t dt, uint32_t c, float (&v)[8])
{
  if (dt == AMK_ABI_DTYPE_F32)
    {
      const float4 *p = reinterpret_cast<const float4 *> (base) + (E / 4) * c;
      const float4 a = p[0];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
      if (E == 8)
        {
          const float4 b = p[1];
          v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        }
    }
  else if (E == 8)
    {
      const uint4 a = reinterpret_cast<const uint4 *> (base)[c];
      const uint32_t u[4] = { a.x, a.y, a.z, a.w };
#pragma unroll
      for (int i = 0; i < 4; i++)
        {
          v[2 * i] = __uint_as_float (u[i] << 16);
          v[2 * i + 1] = __uint_as_float (u[i] & 0xffff0000u);
        }
    }
  else
    {
      const uint2 a = reinterpret_cast<const uint2 *> (base)[c];
      v[0] = __uint_as_float (a.x << 16);
      v[1] = __uint_as_float (a.x & 0xffff0000u);
      v[2] = __uint_as_float (a.y << 16);
      v[3] = __uint_as_float (a.y & 0xffff0000u);
    }
}

static __device__ __forceinline__ uint4
amk_mv_ld_stream (const unsigned char *p)
{
  uint4 v;
  asm volatile ("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

/* The tile's first column: k0 of a split-K tile, else 0. */
static __device__ __forceinline__ uint32_t
amk_mv_first_column (const amk_op_ctx *ctx, const amk_instruction_t *ins)
{
  return (ctx->dtype & AMK_MV_SPLIT) ? (uint32_t) ins->params.matvec.k0 : 0u;
}

/* A [K] operand (the norm weight in slot 5, up in slot 6) from the tile's first column,
 * as the check already placed x (ctx->ptr[2]). */
static __device__ __forceinline__ const unsigned char *
amk_mv_vector_at (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                  int slot, uint32_t dt)
{
  return reinterpret_cast<const unsigned char *> (buffers[ins->buffers[slot]].addr) +
         (uint64_t) amk_mv_first_column (ctx, ins) * amk_dtype_size (dt);
}

/* Lane 0 at the end of tile row r: add bias and residual (in that order, like the CPU
 * reference), round to y's dtype, store; a split-K tile adds its share to y instead. */
template <bool SPLIT>
static __device__ __forceinline__ void
amk_mv_store_row (const amk_op_ctx *ctx, const amk_instruction_t *ins,
                  const amk_buffer_t *buffers, uint32_t r, float acc)
{
  const uint32_t packed = ctx->dtype;
  const uint32_t row = (uint32_t) ins->params.matvec.row0 + r;
  const uint32_t bdt = amk_mv_dt (packed, 3), rdt = amk_mv_dt (packed, 4);

  if (bdt != AMK_MV_ABSENT)
    acc += amk_mv_elem (reinterpret_cast<const unsigned char *> (buffers[ins->buffers[3]].addr), bdt, row);
  if (rdt != AMK_MV_ABSENT)
    acc += amk_mv_elem (reinterpret_cast<const unsigned char *> (buffers[ins->buffers[4]].addr), rdt, row);
  if (SPLIT) /* one of the row's splits: its share, added in any order */
    atomicAdd (reinterpret_cast<float *> (ctx->ptr[0]) + r, acc);
  else if (amk_mv_dt (packed, 0) == AMK_ABI_DTYPE_F32)
    reinterpret_cast<float *> (ctx->ptr[0])[r] = acc;
  else
    reinterpret_cast<__nv_bfloat16 *> (ctx->ptr[0])[r] = __float2bfloat16_rn (acc);
}

/* The warp at the end of tile row r: its lanes' partial sums added, lane 0 stores. */
template <bool SPLIT>
static __device__ __forceinline__ void
amk_mv_end_row (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                uint32_t r, float acc, uint32_t lane)
{
  acc = amk_mv_warp_sum (acc);
  if (lane == 0)
    amk_mv_store_row<SPLIT> (ctx, ins, buffers, r, acc);
}

/* DIRECT's x' of chunk c (E elements) from global memory: x, normalised (scale, the
 * norm weight) or gated (silu(x) * up) on the fly. */
template <uint32_t E>
static __device__ __forceinline__ void
amk_mv_direct_x (const unsigned char *x, uint32_t xdt, const unsigned char *nw, uint32_t ndt,
                 const unsigned char *up, uint32_t udt, uint32_t c, float scale, float (&xv)[8])
{
  amk_mv_load_vec<E> (x, xdt, c, xv);
  if (nw != nullptr)
    {
      float nv[8];
      amk_mv_load_vec<E> (nw, ndt, c, nv);
#pragma unroll
      for (uint32_t e = 0; e < E; e++)
        xv[e] = xv[e] * scale * nv[e];
    }
  else if (up != nullptr)
    {
      float uv[8];
      amk_mv_load_vec<E> (up, udt, c, uv);
#pragma unroll
      for (uint32_t e = 0; e < E; e++)
        xv[e] = amk_mv_gated (xv[e], uv[e]);
    }
}

/* ---- the two pipelines ----------------------------------------------------------------- */

template <uint32_t WDT, bool SPLIT>
static __device__ __forceinline__ void
amk_mv_run_ring (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                 const amk_mv_geom &g, int tid, int nt)
{
  constexpr uint32_t E = amk_mv_w<WDT>::E;
  constexpr uint32_t SC = AMK_MV_STAGE_BYTES / 16; /* chunks per full stage */
  const uint32_t lane = (uint32_t) tid & 31;
  const float4 *xs = reinterpret_cast<const float4 *> (amk_dyn_smem + (uint32_t) nt * AMK_MATVEC_RING_BYTES_PER_THREAD);
  const amk_mv_stream st = amk_mv_stream_of (g, tid, nt);
  /* the first stage not yet copied (the prologue copied the warp's first STAGES) */
  amk_mv_stage_cursor next = amk_mv_stage_at (ctx, g, st, AMK_MV_STAGES, tid);
  uint32_t c0 = 0, r = (uint32_t) tid >> 5;
  float acc = 0.0f;

  for (uint32_t k = 0; k < st.n; ++k)
    {
      /* groups up to stage k + STAGES - 1 are committed: stage k has landed when at most
       * the newest STAGES - 1 are in flight */
      asm volatile ("cp.async.wait_group %0;" : : "n"(AMK_MV_STAGES - 1) : "memory");
      const uint32_t slot = k % AMK_MV_STAGES;
      const uint4 *ws = reinterpret_cast<const uint4 *> (amk_dyn_smem + st.ring + slot * AMK_MV_STAGE_BYTES);
      const uint32_t nc = amk_mv_stage_chunks (st.rb, c0 * 16u); /* chunks of this stage */

      /* lane l takes chunks l, l + 32, ... of the stage: the same chunks of the row, in
       * the same order, as one 16-byte chunk at a time did, so the sums do not change */
#pragma unroll
      for (uint32_t u = 0; u < AMK_MV_LANE_CHUNKS; u++)
        {
          const uint32_t ci = lane + 32u * u;
          if (ci < nc)
            {
              const uint4 w = ws[ci];
              const uint32_t c = c0 + ci;
              float x[8];
              const float4 a = xs[c];
              x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
              if (E == 8)
                {
                  const float4 b = xs[g.C + c];
                  x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
                }
              acc = amk_mv_dot<WDT> (w, x, acc);
            }
        }

      /* the lane has read its chunks of the slot: refill it with stage k + STAGES */
      amk_mv_copy_stage (st, next, k + AMK_MV_STAGES < st.n, slot, lane);

      c0 += SC;
      if (c0 >= g.C) /* the row's last stage */
        {
          amk_mv_end_row<SPLIT> (ctx, ins, buffers, r, acc, lane);
          acc = 0.0f;
          c0 = 0;
          r += (uint32_t) nt >> 5;
        }
    }
}

template <uint32_t WDT, bool SPLIT>
static __device__ __forceinline__ void
amk_mv_run_direct (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                   const amk_mv_geom &g, float scale, int tid, int nt)
{
  constexpr uint32_t E = amk_mv_w<WDT>::E;
  const uint32_t lane = (uint32_t) tid & 31;
  const uint32_t xdt = amk_mv_dt (ctx->dtype, 2), ndt = amk_mv_dt (ctx->dtype, 5);
  const uint32_t udt = amk_mv_dt (ctx->dtype, 6);
  const unsigned char *x = ctx->ptr[2];
  const unsigned char *nw = ndt != AMK_MV_ABSENT ? amk_mv_vector_at (ctx, ins, buffers, 5, ndt) : nullptr;
  const unsigned char *up = udt != AMK_MV_ABSENT ? amk_mv_vector_at (ctx, ins, buffers, 6, udt) : nullptr;
  const int64_t wrap = amk_mv_wrap (g, nt);
  amk_mv_cursor pc = amk_mv_cursor_at (ctx, g, 0, tid, nt);
  uint32_t j = 0, r = (uint32_t) tid >> 5;
  float acc = 0.0f;

  for (uint32_t t = 0; t < g.T; t += AMK_MV_DIRECT)
    {
      uint4 w[AMK_MV_DIRECT];
#pragma unroll
      for (int u = 0; u < AMK_MV_DIRECT; u++)
        {
          w[u] = make_uint4 (0, 0, 0, 0);
          if (pc.t < g.T && lane + 32u * pc.j < g.C)
            w[u] = amk_mv_ld_stream (pc.p);
          amk_mv_advance (pc, g, wrap);
        }
#pragma unroll
      for (int u = 0; u < AMK_MV_DIRECT; u++)
        {
          if (t + u >= g.T) /* uniform over the warp */
            break;
          const uint32_t c = lane + 32u * j;
          if (c < g.C)
            {
              float xv[8];
              amk_mv_direct_x<E> (x, xdt, nw, ndt, up, udt, c, scale, xv);
              acc = amk_mv_dot<WDT> (w[u], xv, acc);
            }
          if (++j == g.J)
            {
              amk_mv_end_row<SPLIT> (ctx, ins, buffers, r, acc, lane);
              acc = 0.0f;
              j = 0;
              r += (uint32_t) nt >> 5;
            }
        }
    }
}

/* The pipeline for W's dtype; SPLIT (a split-K tile: atomic adds onto y) is a template
 * argument rather than a branch per row, which cost the kernel spill reloads. */
template <bool SPLIT>
static __device__ __forceinline__ void
amk_mv_run (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
            const amk_mv_geom &g, float scale, bool ring, uint32_t wdt, int tid, int nt)
{
  if (ring)
    switch (wdt)
      {
      case AMK_ABI_DTYPE_BF16: amk_mv_run_ring<AMK_ABI_DTYPE_BF16, SPLIT> (ctx, ins, buffers, g, tid, nt); break;
      case AMK_ABI_DTYPE_F16:  amk_mv_run_ring<AMK_ABI_DTYPE_F16, SPLIT> (ctx, ins, buffers, g, tid, nt); break;
      default:                 amk_mv_run_ring<AMK_ABI_DTYPE_F32, SPLIT> (ctx, ins, buffers, g, tid, nt); break;
      }
  else
    switch (wdt)
      {
      case AMK_ABI_DTYPE_BF16: amk_mv_run_direct<AMK_ABI_DTYPE_BF16, SPLIT> (ctx, ins, buffers, g, scale, tid, nt); break;
      case AMK_ABI_DTYPE_F16:  amk_mv_run_direct<AMK_ABI_DTYPE_F16, SPLIT> (ctx, ins, buffers, g, scale, tid, nt); break;
      default:                 amk_mv_run_direct<AMK_ABI_DTYPE_F32, SPLIT> (ctx, ins, buffers, g, scale, tid, nt); break;
      }
}

/* ---- exec ------------------------------------------------------------------------------- */

/* A split-K tile's fused norm: this thread's share of the sum of squares of the groups of
 * four elements of x outside the tile's columns, [0, g0) and [g1, n4). */
static __device__ __noinline__ float
amk_mv_sumsq_outside (const unsigned char *x, uint32_t xdt, uint32_t g0, uint32_t g1, uint32_t n4,
                      int tid, int nt)
{
  float ss = 0.0f;

  for (uint32_t j = (uint32_t) tid; j < n4; j += (uint32_t) nt)
    {
      if (j >= g0 && j < g1) /* the tile's own columns, summed while staging */
        {
          j += (g1 - j + (uint32_t) nt - 1) / (uint32_t) nt * (uint32_t) nt;
          if (j >= n4)
            break;
        }
      const float4 o = amk_mv_load4 (x, xdt, j);
      ss = fmaf (o.x, o.x, fmaf (o.y, o.y, fmaf (o.z, o.z, fmaf (o.w, o.w, ss))));
    }
  return ss;
}

/* The whole block: the fused norm's scale 1 / sqrt(mean(x^2) + eps) from every thread's
 * share of the sum of squares (a block barrier). */
static __device__ __forceinline__ float
amk_mv_norm_scale (float ss, const amk_op_ctx *ctx, const amk_instruction_t *ins, int tid, int nt)
{
  __shared__ float red[32]; /* one partial sum of squares per warp */

  ss = amk_mv_warp_sum (ss);
  if ((tid & 31) == 0)
    red[tid >> 5] = ss;
  amk_sync ();
  float total = 0.0f;
  for (int w = 0; w < (nt >> 5); w++)
    total += red[w];
  return 1.0f / sqrtf (total / (float) ctx->pattern + ins->params.matvec.eps);
}

/* The block-quantized W's pipelines and their exec (they use the helpers above). */
#include "ops-matvec-blocks.cuh"

/* MATVEC on the pages (the paged build) */
#include "ops-matvec-pages.cuh"

/* The whole block, after the waits. run: this warp's waits succeeded (otherwise it only
 * joins the barriers and drains its prefetched loads; the block leaves afterwards).
 * Block-quantized W goes to amk_mvq_exec, out of line: its pipelines' registers here made
 * this function's own loops spill. page_bytes (amk_mv_page_bytes, 0 in the builds without
 * a loader): W is in the pages from page_seq on. Returns false when a page did not come
 * within the watchdog. */
static __device__ __forceinline__ bool
amk_matvec_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                 bool run, int tid, int nt, amk_page_barriers *pb, uint32_t page_seq,
                 uint32_t page_bytes, uint64_t watchdog_ns)
{
  const uint32_t k = ctx->esize;   /* the tile's columns: all K unless split */
  const uint32_t g0 = amk_mv_first_column (ctx, ins) / 4; /* in groups of four elements */
  const uint32_t packed = ctx->dtype;
  const uint32_t wdt = amk_mv_dt (packed, 1), xdt = amk_mv_dt (packed, 2), ndt = amk_mv_dt (packed, 5);
  const uint32_t udt = amk_mv_dt (packed, 6);

  if (amk_qb_is_block (wdt))
    {
      amk_mvq_exec (ctx, ins, buffers, run, tid, nt);
      return true;
    }

  /* the pages take the ring's place: x' is staged where the ring pipeline stages it */
  const bool paged = page_bytes != 0;
  const bool ring = paged || amk_mv_use_ring (k, nt);
  const bool norm = ndt != AMK_MV_ABSENT;
  const uint32_t E = wdt == AMK_ABI_DTYPE_F32 ? 4 : 8;
  float *xs = reinterpret_cast<float *> (amk_dyn_smem + (uint32_t) nt * AMK_MATVEC_RING_BYTES_PER_THREAD);
  amk_mv_geom g = amk_mv_geometry (ctx, tid, nt);
  const uint32_t C = g.C;
  /* this warp has rows (the geometry's items count whole 16-byte chunks only) */
  const bool work = run && ((uint32_t) tid >> 5) < ctx->count;

  if (!run)
    g.T = 0;
  /* W that may depend on the waits starts streaming only now */
  if (ring && !paged && work && !amk_matvec_early (ctx))
    amk_mv_prologue (ctx, g, tid, nt);

  /* x' (RING: staged as fp32; x'[i] at float (i & 4 ? 4 C : 0) + 4 (i / 8) + i % 4 for
   * 8 elements per chunk, at float i for 4), and the norm's scale */
  float scale = 1.0f;
  if (ring || norm)
    {
      /* x, the norm weight and up from the tile's first column */
      const unsigned char *x = ctx->ptr[2];
      /* RING with a norm stages x * weight in the same pass as x (one round trip, not
       * two) and applies the scale once it is known */
      const unsigned char *nwt = norm ? amk_mv_vector_at (ctx, ins, buffers, 5, ndt) : nullptr;
      const unsigned char *up = udt != AMK_MV_ABSENT ? amk_mv_vector_at (ctx, ins, buffers, 6, udt) : nullptr;
      float ss = 0.0f;
      /* four elements per thread and group (K is a multiple of 4: rows are whole 16-byte
       * chunks), AMK_MV_XBATCH groups loaded before any is stored: the loads of a batch
       * are in flight together, one round trip per batch rather than one per element
       * (K = 8192 took 16 round trips, most of a down projection's tile) */
      const uint32_t n4 = k / 4;
      /* the second operand of x' (DIRECT only needs the sum of squares here) */
      const unsigned char *mv = !ring ? nullptr : norm ? nwt : up;
      const uint32_t mdt = norm ? ndt : udt;
      if (run)
        for (uint32_t j0 = (uint32_t) tid; j0 < n4; j0 += (uint32_t) nt * AMK_MV_XBATCH)
          {
            /* every element assigned on every path: one left unassigned on some put the
             * arrays in local memory */
            float4 v[AMK_MV_XBATCH], m[AMK_MV_XBATCH];
#pragma unroll
            for (int b = 0; b < AMK_MV_XBATCH; b++)
              {
                const uint32_t j = j0 + (uint32_t) b * (uint32_t) nt;
                const bool in = j < n4;
                v[b] = in ? amk_mv_load4 (x, xdt, j) : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
                m[b] = in && mv != nullptr ? amk_mv_load4 (mv, mdt, j) : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
              }
#pragma unroll
            for (int b = 0; b < AMK_MV_XBATCH; b++)
              {
                const uint32_t j = j0 + (uint32_t) b * (uint32_t) nt;
                if (j >= n4)
                  break;
                float4 o = v[b];
                if (norm) /* the sum of squares only for a fused norm */
                  ss = fmaf (o.x, o.x, fmaf (o.y, o.y, fmaf (o.z, o.z, fmaf (o.w, o.w, ss))));
                if (!ring)
                  continue;
                if (norm)
                  o = make_float4 (o.x * m[b].x, o.y * m[b].y, o.z * m[b].z, o.w * m[b].w);
                else if (up != nullptr)
                  o = make_float4 (amk_mv_gated (o.x, m[b].x), amk_mv_gated (o.y, m[b].y),
                                   amk_mv_gated (o.z, m[b].z), amk_mv_gated (o.w, m[b].w));
                reinterpret_cast<float4 *> (xs)[amk_mv_stage_slot (j, C, E)] = o;
              }
          }
      if (norm && run && (packed & AMK_MV_SPLIT))
        ss += amk_mv_sumsq_outside (reinterpret_cast<const unsigned char *> (buffers[ins->buffers[2]].addr),
                                    xdt, g0, g0 + n4, ctx->pattern / 4, tid, nt);
      if (norm)
        {
          scale = amk_mv_norm_scale (ss, ctx, ins, tid, nt);
          if (ring && run)
            /* every thread rescales the groups it staged itself: no barrier needed */
            for (uint32_t j = (uint32_t) tid; j < n4; j += (uint32_t) nt)
              {
                float4 *o = reinterpret_cast<float4 *> (xs) + amk_mv_stage_slot (j, C, E);
                *o = make_float4 (o->x * scale, o->y * scale, o->z * scale, o->w * scale);
              }
        }
      if (ring)
        amk_sync ();
    }

  if (paged)
    return !run || amk_mv_run_paged (ctx, ins, buffers, pb, page_seq, page_bytes,
                                     reinterpret_cast<const float4 *> (xs), watchdog_ns, tid, nt);
  if (g.T != 0)
    {
      if (packed & AMK_MV_SPLIT)
        amk_mv_run<true> (ctx, ins, buffers, g, scale, ring, wdt, tid, nt);
      else
        amk_mv_run<false> (ctx, ins, buffers, g, scale, ring, wdt, tid, nt);
    }

  /* A warp that skipped its items may still have prefetched copies in flight; they must
   * land before the slots are reused. Elsewhere only empty groups remain. */
  if (ring && !run)
    asm volatile ("cp.async.wait_all;" : : : "memory");
  return true;
}

#endif /* AMK_OPS_MATVEC_CUH */
