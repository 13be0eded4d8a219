/* ops-attention-rows.cuh: the attention ops of many rows (see "The many-token ops" in
 * amk-abi.h): ROPE_ROWS (q/k norm, RoPE and the cache append of each row) and ATTN_ROWS
 * (causal attention of each row over its sequence's cached positions). A prompt chunk
 * and a batch of decoded sequences are the same thing to them: rows with a position
 * and a sequence each.
 *
 * ROPE_ROWS: a warp per (row, head): the head's pairs over the lanes, the norm's sum of
 * squares by shuffles; RoPE's inverse frequencies once per instruction in shared memory.
 * ATTN_ROWS: a warp per (row, query head): positions 32 at a time (a lane each: its
 * score q . k with q's elements broadcast by shuffles), an online softmax over the warp,
 * then each lane accumulates its dimensions of V.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_ATTENTION_ROWS_CUH
#define AMK_OPS_ATTENTION_ROWS_CUH

#include <stdint.h>
#include <cuda_bf16.h>

#include "amk-abi.h"
#include "ops-utility.cuh"
#include "ops-attention.cuh"

#define AMK_ROWS_MAX_HEAD_DIM 256 /* 32 lanes x 8 elements */
#define AMK_ROPE_ROWS_INFLIGHT 4  /* (row, head) items a warp of ROPE_ROWS loads at once
                                   * in the many-token kernel */

/* amk_op_ctx for both ops: ptr[0] = qkv (ROPE_ROWS) or out (ATTN_ROWS), ptr[1] = k cache,
 * ptr[2] = v cache; count = M (rows); esize = S (sequences in the caches); dtype = the
 * caches' dtype | (1 << 8 when seq is given) | (norm dtype << 12, 0xf when absent) |
 * (ATTN_ROWS's output dtype << 20). */

static __device__ __forceinline__ bool
amk_rows_shape_ok (const amk_attn_shape_t &s)
{
  return s.head_dim >= 2 && s.head_dim % 2 == 0 && s.head_dim <= AMK_ROWS_MAX_HEAD_DIM &&
         s.n_q_heads >= 1 && s.n_kv_heads >= 1 && s.n_q_heads % s.n_kv_heads == 0 &&
         s.max_ctx >= 1 && s.n_q_heads <= 4096 && s.n_kv_heads <= 4096;
}

/* One operand: buffer `slot` holds exactly `count` elements (count 0: any positive
 * multiple of `unit`, returned in *count) of a dtype in `mask`, 16-byte aligned. */
static __device__ __forceinline__ int
amk_rows_ref (const amk_instruction_t *ins, int slot, const amk_buffer_t *buffers, int32_t n_buffers,
              uint64_t *count, uint64_t unit, uint32_t mask, uint64_t *addr, uint32_t *dt, int32_t *detail)
{
  const int32_t ref = ins->buffers[slot];
  *detail = ref;
  if (ref < 0 || ref >= n_buffers)
    return AMK_ABORT_BAD_INDEX;
  const amk_buffer_t *b = buffers + ref;
  const uint32_t es = amk_dtype_size (b->dtype);
  if (es == 0 || b->dtype >= 32 || ((mask >> b->dtype) & 1u) == 0 || (b->addr & 15u) != 0)
    return AMK_ABORT_CHECK;
  const uint64_t n = b->size_bytes / es;
  if (*count == 0)
    {
      if (n == 0 || n % unit != 0)
        return AMK_ABORT_CHECK;
      *count = n;
    }
  else if (n != *count)
    return AMK_ABORT_CHECK;
  *addr = b->addr;
  *dt = b->dtype;
  return AMK_ABORT_NONE;
}

static __device__ __noinline__ int
amk_attention_rows_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                          amk_op_ctx *ctx, int32_t *detail)
{
  const bool rope = ins->opcode == AMK_ABI_OP_ROPE_ROWS;
  const amk_attn_shape_t &s = rope ? ins->params.rope_rows.shape : ins->params.attn_rows.shape;
  const int32_t row0 = rope ? ins->params.rope_rows.row0 : ins->params.attn_rows.row0;
  const int32_t n_rows = rope ? ins->params.rope_rows.n_rows : ins->params.attn_rows.n_rows;
  const uint32_t cache_mask = AMK_ATTN_CACHE;
  uint64_t a0, akc, avc, ax, a;
  uint32_t dt0, kdt, vdt, dtx, dt;
  int code;

  *detail = ins->buffers[0];
  if (!amk_rows_shape_ok (s) || row0 < 0 || n_rows < 0 ||
      (rope ? !(ins->params.rope_rows.eps >= 0.0f) : !isfinite (ins->params.attn_rows.scale)) ||
      (!rope && (ins->params.attn_rows.kv_head < 0 || ins->params.attn_rows.kv_head >= s.n_kv_heads)))
    return AMK_ABORT_CHECK;
  const uint64_t d = (uint64_t) s.head_dim, width = (uint64_t) (s.n_q_heads + 2 * s.n_kv_heads) * d;
  const uint64_t pos_slot = rope ? 3 : 4, seq_slot = pos_slot + 1;

  /* the rows: pos [M]; the qkv rows [M, width]; the output [M, n_q d] */
  uint64_t m = 0;
  if ((code = amk_rows_ref (ins, (int) pos_slot, buffers, n_buffers, &m, 1, AMK_ATTN_I32, &a, &dt, detail)))
    return code;
  if ((uint64_t) row0 + (uint64_t) n_rows > m || m >= (1ull << 31))
    return AMK_ABORT_CHECK;
  uint64_t nqkv = m * width;
  if ((code = amk_rows_ref (ins, rope ? 0 : 1, buffers, n_buffers, &nqkv, 1, AMK_ATTN_F32, &ax, &dtx, detail)))
    return code;
  if (!rope)
    {
      uint64_t nout = m * (uint64_t) s.n_q_heads * d;
      if ((code = amk_rows_ref (ins, 0, buffers, n_buffers, &nout, 1, AMK_VEC_MASK_VEC, &a0, &dt0, detail)))
        return code;
      if (a0 < ax + nqkv * 4 && ax < a0 + nout * amk_dtype_size (dt0))
        return AMK_ABORT_CHECK;
    }
  else
    a0 = ax;
  /* the caches: [S, max_ctx, n_kv d], one dtype */
  const uint64_t plane = (uint64_t) s.max_ctx * (uint64_t) s.n_kv_heads * d;
  uint64_t nk = 0, nv = 0;
  if ((code = amk_rows_ref (ins, rope ? 1 : 2, buffers, n_buffers, &nk, plane, cache_mask, &akc, &kdt, detail)) ||
      (code = amk_rows_ref (ins, rope ? 2 : 3, buffers, n_buffers, &nv, plane, cache_mask, &avc, &vdt, detail)))
    return code;
  if (nk != nv || kdt != vdt || nk / plane >= (1ull << 31))
    return AMK_ABORT_CHECK;
  uint32_t packed = kdt;
  if (ins->buffers[seq_slot] != AMK_NO_BUFFER)
    {
      uint64_t ns = m;
      if ((code = amk_rows_ref (ins, (int) seq_slot, buffers, n_buffers, &ns, 1, AMK_ATTN_I32, &a, &dt, detail)))
        return code;
      packed |= 1u << 8;
    }
  packed |= 0xfu << 12;
  if (!rope)
    packed |= dt0 << 20; /* ATTN_ROWS's output: F32 or BF16 */
  if (rope && ins->n_buffers >= 7 && ins->buffers[5] != AMK_NO_BUFFER)
    {
      uint64_t nn = d;
      uint32_t ndt;
      if ((code = amk_rows_ref (ins, 5, buffers, n_buffers, &nn, 1, AMK_VEC_MASK_VEC, &a, &ndt, detail)) ||
          (code = amk_rows_ref (ins, 6, buffers, n_buffers, &nn, 1, AMK_VEC_MASK_VEC, &a, &dt, detail)))
        return code;
      packed = (packed & ~(0xfu << 12)) | (ndt << 12) | (dt << 16);
    }
  else if (rope && ins->n_buffers >= 7 && ins->buffers[6] != AMK_NO_BUFFER)
    {
      *detail = ins->buffers[6];
      return AMK_ABORT_CHECK; /* both norms or neither */
    }
  /* the caches are clear of the rows */
  *detail = ins->buffers[rope ? 1 : 2];
  if ((akc < ax + nqkv * 4 && ax < akc + nk * amk_dtype_size (kdt)) ||
      (avc < ax + nqkv * 4 && ax < avc + nv * amk_dtype_size (vdt)) ||
      (akc < avc + nv * amk_dtype_size (vdt) && avc < akc + nk * amk_dtype_size (kdt)))
    return AMK_ABORT_CHECK;

  ctx->ptr[0] = reinterpret_cast<unsigned char *> (a0);
  ctx->ptr[1] = reinterpret_cast<unsigned char *> (akc);
  ctx->ptr[2] = reinterpret_cast<unsigned char *> (avc);
  ctx->count = (uint32_t) m;
  ctx->esize = (uint32_t) (nk / plane);
  ctx->dtype = packed;
  ctx->pattern = 0;
  return AMK_ABORT_NONE;
}

/* Every thread: the rows' positions and sequences are valid (a negative position is a
 * padding row). The verdict is the same in every thread; *detail the offending buffer. */
static __device__ __forceinline__ int
amk_rows_validate (const amk_op_ctx *ctx, const amk_instruction_t *ins, const int32_t *pos, const int32_t *seq, int32_t row0, int32_t n_rows, int32_t max_ctx,
                   bool run, int tid, int nt, int32_t *detail)
{
  int bad_pos = 0, bad_seq = 0;
  if (run)
    for (int32_t r = row0 + tid; r < row0 + n_rows; r += nt)
      {
        const int32_t p = pos[r];
        bad_pos |= p >= max_ctx;
        if (p >= 0 && seq != nullptr)
          bad_seq |= seq[r] < 0 || (uint32_t) seq[r] >= ctx->esize;
      }
  const int any_pos = amk_sync_or (bad_pos);
  const int any_seq = amk_sync_or (bad_seq);
  if (any_pos || any_seq)
    {
      const bool rope = ins->opcode == AMK_ABI_OP_ROPE_ROWS;
      *detail = ins->buffers[(rope ? 3 : 4) + (any_pos ? 0 : 1)];
      return AMK_ABORT_CHECK;
    }
  return AMK_ABORT_NONE;
}

static __device__ __forceinline__ float
amk_rows_ld (const unsigned char *p, uint32_t dt, uint64_t i)
{
  return dt == AMK_ABI_DTYPE_BF16 ? __bfloat162float (reinterpret_cast<const __nv_bfloat16 *> (p)[i])
                                  : reinterpret_cast<const float *> (p)[i];
}

/* ---- ROPE_ROWS ------------------------------------------------------------------------ */

template <int INFLIGHT>
static __device__ __forceinline__ int
amk_rope_rows_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                    bool run, int tid, int nt, int32_t *detail)
{
  const amk_rope_rows_params_t &p = ins->params.rope_rows;
  const int32_t d = p.shape.head_dim, half = d / 2;
  const int32_t nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads, heads = nq + 2 * nkv;
  const int32_t *pos = reinterpret_cast<const int32_t *> (buffers[ins->buffers[3]].addr);
  const int32_t *seq = (ctx->dtype & (1u << 8)) != 0
                       ? reinterpret_cast<const int32_t *> (buffers[ins->buffers[4]].addr) : nullptr;
  const int code = amk_rows_validate (ctx, ins, pos, seq, p.row0, p.n_rows, p.shape.max_ctx,
                                      run, tid, nt, detail);
  if (code != AMK_ABORT_NONE || !run)
    return code;

  /* the inverse frequencies, once (the shared angles of ROPE_KV's early path are free
   * here: mark them stale) */
  for (int32_t c = tid; c < half; c += nt)
    amk_rope_cs[c].x = amk_rope_inv_freq (c, d, p.freq.theta, p.freq.factor, p.freq.low_freq_factor,
                                          p.freq.high_freq_factor, p.freq.original_context);
  if (tid == 0)
    amk_rope_cs_pos = AMK_ATTN_NO_POS;
  amk_sync ();

  const uint32_t cdt = ctx->dtype & 0xfu;
  const uint32_t qn_dt = (ctx->dtype >> 12) & 0xfu, kn_dt = (ctx->dtype >> 16) & 0xfu;
  const unsigned char *qn = qn_dt == 0xfu ? nullptr
                            : reinterpret_cast<const unsigned char *> (buffers[ins->buffers[5]].addr);
  const unsigned char *kn = qn_dt == 0xfu ? nullptr
                            : reinterpret_cast<const unsigned char *> (buffers[ins->buffers[6]].addr);
  float *qkv = reinterpret_cast<float *> (ctx->ptr[0]);
  const uint64_t width = (uint64_t) heads * d, kvw = (uint64_t) nkv * d;
  const int lane = tid & 31, nw = nt / 32;

  /* a warp per (row, head) item, INFLIGHT items at a time: their loads go out together,
   * then each is rotated and stored (one item after another waits a load's latency each;
   * the decode kernel takes 1, which keeps its registers for the other ops) */
  const int64_t items = (int64_t) p.n_rows * heads;
  for (int64_t base = tid / 32; base < items; base += (int64_t) nw * INFLIGHT)
    {
      float x1[INFLIGHT][4], x2[INFLIGHT][4];
      int32_t rows[INFLIGHT], hs[INFLIGHT], ps[INFLIGHT];
#pragma unroll
      for (int u = 0; u < INFLIGHT; u++)
        {
          const int64_t item = base + (int64_t) u * nw;
          rows[u] = item < items ? p.row0 + (int32_t) (item / heads) : -1;
          hs[u] = (int32_t) (item % heads);
          ps[u] = rows[u] >= 0 ? pos[rows[u]] : -1;
          const float *head = qkv + (uint64_t) max (rows[u], 0) * width + (uint64_t) hs[u] * d;
#pragma unroll
          for (int i = 0; i < 4; i++)
            {
              const int32_t c = lane + 32 * i;
              x1[u][i] = ps[u] >= 0 && c < half ? head[c] : 0.0f;
              x2[u][i] = ps[u] >= 0 && c < half ? head[c + half] : 0.0f;
            }
        }
#pragma unroll
      for (int u = 0; u < INFLIGHT; u++)
        {
          if (ps[u] < 0)
            continue;
          const int32_t r = rows[u], h = hs[u];
          const uint64_t srow = ((uint64_t) (seq != nullptr ? seq[r] : 0) * (uint64_t) p.shape.max_ctx +
                                 (uint64_t) ps[u]) * kvw;
          float *head = qkv + (uint64_t) r * width + (uint64_t) h * d;

          if (h >= nq + nkv)
            {
              /* a value head: into the cache as it is */
              const uint64_t o = srow + (uint64_t) (h - nq - nkv) * d;
#pragma unroll
              for (int i = 0; i < 4; i++)
                {
                  const int32_t c = lane + 32 * i;
                  if (c < half)
                    {
                      amk_attn_store_cache (ctx->ptr[2], cdt, o + c, x1[u][i]);
                      amk_attn_store_cache (ctx->ptr[2], cdt, o + c + half, x2[u][i]);
                    }
                }
              continue;
            }
          float ss = 0.0f;
#pragma unroll
          for (int i = 0; i < 4; i++)
            ss += x1[u][i] * x1[u][i] + x2[u][i] * x2[u][i];
          const unsigned char *nwt = h < nq ? qn : kn;
          const uint32_t ndt = h < nq ? qn_dt : kn_dt;
          float rs = 1.0f;
          if (nwt != nullptr)
            {
              ss = amk_attn_warp_sum (ss);
              rs = rsqrtf (ss / (float) d + p.eps);
            }
          const float fpos = __int2float_rn (ps[u]);
#pragma unroll
          for (int i = 0; i < 4; i++)
            {
              const int32_t c = lane + 32 * i;
              if (c >= half)
                continue;
              float a = x1[u][i], b = x2[u][i];
              if (nwt != nullptr)
                {
                  a = a * rs * amk_rows_ld (nwt, ndt, c);
                  b = b * rs * amk_rows_ld (nwt, ndt, c + half);
                }
              const float2 cs = amk_rope_cos_sin (__fmul_rn (fpos, amk_rope_cs[c].x));
              const float2 rot = amk_rope_rotate (a, b, cs);
              head[c] = rot.x;
              head[c + half] = rot.y;
              if (h >= nq)
                {
                  const uint64_t o = srow + (uint64_t) (h - nq) * d;
                  amk_attn_store_cache (ctx->ptr[1], cdt, o + c, rot.x);
                  amk_attn_store_cache (ctx->ptr[1], cdt, o + c + half, rot.y);
                }
            }
        }
    }
  return AMK_ABORT_NONE;
}

/* ---- ATTN_ROWS ------------------------------------------------------------------------ */

/* A warp: out[r, h] for one row and query head, positions 0 .. ps of sequence slot
 * `srow0` (element offset of its position 0, kv head's columns included). */
static __device__ __forceinline__ void
amk_attn_rows_warp (const float *q, unsigned char *out, uint32_t odt, const unsigned char *kc,
                    const unsigned char *vc, uint32_t cdt, uint64_t srow0, uint64_t kvw, int32_t ps, int32_t d, float scale,
                    int lane)
{
  float qv[8], acc[8];
#pragma unroll
  for (int e = 0; e < 8; e++)
    {
      const int32_t c = lane + 32 * e;
      qv[e] = c < d ? q[c] * scale : 0.0f;
      acc[e] = 0.0f;
    }
  float m = -INFINITY, l = 0.0f;

  for (int32_t base = 0; base <= ps; base += 32)
    {
      const int32_t j = min (base + lane, ps);
      const uint64_t krow = srow0 + (uint64_t) j * kvw;
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; e++)
        {
          if (32 * e >= d)
            break;
          for (int t = 0; t < 32 && 32 * e + t < d; t++)
            dot += __shfl_sync (0xffffffffu, qv[e], t) * amk_rows_ld (kc, cdt, krow + 32 * e + t);
        }
      const bool valid = base + lane <= ps;
      const float s = valid ? dot : -INFINITY;
      const float m_new = fmaxf (m, amk_attn_warp_max (s));
      const float keep = __expf (m - m_new);
      const float pj = valid ? __expf (s - m_new) : 0.0f;
      l = l * keep + amk_attn_warp_sum (pj);
#pragma unroll
      for (int e = 0; e < 8; e++)
        acc[e] *= keep;
      const int32_t n = min (32, ps - base + 1);
      for (int t = 0; t < n; t++)
        {
          const float wt = __shfl_sync (0xffffffffu, pj, t);
          const uint64_t vrow = srow0 + (uint64_t) (base + t) * kvw;
#pragma unroll
          for (int e = 0; e < 8; e++)
            {
              const int32_t c = lane + 32 * e;
              if (c < d)
                acc[e] += wt * amk_rows_ld (vc, cdt, vrow + c);
            }
        }
      m = m_new;
    }
  const float inv = 1.0f / l;
#pragma unroll
  for (int e = 0; e < 8; e++)
    {
      const int32_t c = lane + 32 * e;
      if (c < d)
        amk_vec_st (out, odt, (uint32_t) c, acc[e] * inv);
    }
}

/* ---- ATTN_ROWS on tensor cores ---------------------------------------------------------- */

/* The rows of a prompt chunk share their sequence: then the block streams the keys and
 * values of its kv head through shared memory AMK_ROWS_BKV positions at a time (cp.async,
 * two buffers), and each warp takes 16 query vectors (row, query head) of the group:
 * S = Q K^T and O += P V with mma.sync (bf16 in, fp32 out), an online softmax per query
 * vector in registers, each row masked past its own position. Head dimension 64 and a
 * BF16 cache only (the registers of a d = 128 query do not fit beside S and O); the rest
 * takes the warp path above. */
#define AMK_ROWS_BKV 64 /* key positions per step */
#define AMK_ROWS_LDS 72 /* 16-bit elements per shared row: 64 + 8 of padding (no conflicts) */
static_assert (AMK_ATTN_ROWS_SMEM_BYTES == 2 * 2 * AMK_ROWS_BKV * AMK_ROWS_LDS * 2,
               "amk-abi.h's shared-memory need of ATTN_ROWS matches the tiles");

static __device__ __forceinline__ void
amk_rows_ldmatrix4 (uint32_t (&r)[4], uint32_t saddr, bool trans)
{
  if (trans)
    asm volatile ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                  : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(saddr));
  else
    asm volatile ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                  : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(saddr));
}

static __device__ __forceinline__ void
amk_rows_mma (float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
  asm volatile ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t
amk_rows_pack (float lo, float hi)
{
  const __nv_bfloat162 h = __floats2bfloat162_rn (lo, hi);
  return *reinterpret_cast<const uint32_t *> (&h);
}

/* Positions p0 .. p0 + BKV of the kv head's keys and values into buffer `buf` (zeros past
 * `last`). */
static __device__ __forceinline__ void
amk_rows_load_kv (const unsigned char *kc, const unsigned char *vc, uint64_t srow0, uint64_t kvw,
                  int32_t p0, int32_t last, uint32_t s_kv, int buf, int tid, int nt)
{
  const uint32_t tile = AMK_ROWS_BKV * AMK_ROWS_LDS * 2;
  for (int c = tid; c < 2 * AMK_ROWS_BKV * 8; c += nt)
    {
      const int which = c / (AMK_ROWS_BKV * 8), r = (c / 8) % AMK_ROWS_BKV, q = c % 8;
      const bool in = p0 + r <= last;
      const unsigned char *base = which == 0 ? kc : vc;
      const unsigned char *src = in ? base + (srow0 + (uint64_t) (p0 + r) * kvw + (uint64_t) q * 8) * 2 : base;
      const uint32_t dst = s_kv + (uint32_t) (buf * 2 + which) * tile + (uint32_t) (r * AMK_ROWS_LDS + q * 8) * 2;
      asm volatile ("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                    : : "r"(dst), "l"(src), "r"(in ? 16u : 0u) : "memory");
    }
  asm volatile ("cp.async.commit_group;" ::: "memory");
}

/* The block: query vectors qv = (row - row0) * group + h of the instruction, 16 per warp
 * and pass; every row's sequence is `sq`. */
static __device__ __forceinline__ void
amk_attn_rows_tc (const amk_instruction_t *ins, const int32_t *pos, const float *qkv, unsigned char *out,
                  uint32_t odt, const unsigned char *kc, const unsigned char *vc, int32_t sq, int tid, int nt)
{
  const amk_attn_rows_params_t &p = ins->params.attn_rows;
  const int32_t d = 64, nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads, group = nq / nkv;
  const uint64_t width = (uint64_t) (nq + 2 * nkv) * d, kvw = (uint64_t) nkv * d;
  const uint64_t srow0 = (uint64_t) sq * (uint64_t) p.shape.max_ctx * kvw + (uint64_t) p.kv_head * d;
  const int32_t n_qv = p.n_rows * group;
  const int lane = tid & 31, warp = tid / 32, nw = nt / 32;
  const uint32_t s_kv = (uint32_t) __cvta_generic_to_shared (amk_dyn_smem);
  const uint32_t tile = AMK_ROWS_BKV * AMK_ROWS_LDS * 2;
  __shared__ int32_t s_last;

  for (int32_t pass = 0; pass < n_qv; pass += 16 * nw)
    {
      /* this warp's two query vectors per lane: i = lane / 4 and lane / 4 + 8 */
      int32_t qpos[2];
      const int32_t qv0 = pass + warp * 16 + lane / 4;
#pragma unroll
      for (int i = 0; i < 2; i++)
        {
          const int32_t qv = qv0 + 8 * i;
          qpos[i] = qv < n_qv ? pos[p.row0 + qv / group] : -1;
        }
      int32_t wlast = max (qpos[0], qpos[1]);
#pragma unroll
      for (int o = 1; o < 32; o <<= 1)
        wlast = max (wlast, __shfl_xor_sync (0xffffffffu, wlast, o));
      if (tid == 0)
        s_last = -1;
      amk_sync ();
      if (lane == 0)
        atomicMax (&s_last, wlast);
      amk_sync ();
      const int32_t last = s_last;

      /* Q (scaled, bf16) as A fragments: 4 k16 steps of d = 64 */
      uint32_t qa[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int half = 0; half < 4; half++)
          {
            /* a0: row i0, k lo; a1: row i0 + 8, k lo; a2: row i0, k hi; a3: row i0 + 8, k hi */
            const int i = half & 1, khi = half >> 1;
            const int32_t qv = qv0 + 8 * i;
            const int32_t c = kk * 16 + khi * 8 + (lane % 4) * 2;
            float2 v = make_float2 (0.0f, 0.0f);
            if (qv < n_qv)
              {
                const int32_t r = p.row0 + qv / group, h = p.kv_head * group + qv % group;
                v = *reinterpret_cast<const float2 *> (qkv + (uint64_t) r * width + (uint64_t) h * d + c);
              }
            qa[kk][half] = amk_rows_pack (v.x * p.scale, v.y * p.scale);
          }

      float o[8][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
#pragma unroll
      for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          o[j][e] = 0.0f;

      const int32_t n_blocks = last < 0 ? 0 : last / AMK_ROWS_BKV + 1;
      if (n_blocks > 0)
        amk_rows_load_kv (kc, vc, srow0, kvw, 0, last, s_kv, 0, tid, nt);
      for (int32_t b = 0; b < n_blocks; b++)
        {
          const int buf = b & 1;
          if (b + 1 < n_blocks)
            {
              amk_rows_load_kv (kc, vc, srow0, kvw, (b + 1) * AMK_ROWS_BKV, last, s_kv, buf ^ 1, tid, nt);
              asm volatile ("cp.async.wait_group 1;" ::: "memory");
            }
          else
            asm volatile ("cp.async.wait_group 0;" ::: "memory");
          amk_sync ();

          const int32_t p0 = b * AMK_ROWS_BKV;
          if (p0 <= wlast)
            {
              const uint32_t ks = s_kv + (uint32_t) (buf * 2) * tile, vs = ks + tile;
              float sc[8][4];
#pragma unroll
              for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                  sc[j][e] = 0.0f;
              /* S = Q K^T: K rows are positions (n), d contiguous (k) */
#pragma unroll
              for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int jj = 0; jj < 4; jj++)
                  {
                    uint32_t bf[4];
                    const uint32_t r = (uint32_t) (jj * 16 + lane % 8 + (lane / 16) * 8);
                    amk_rows_ldmatrix4 (bf, ks + (r * AMK_ROWS_LDS + kk * 16 + ((lane / 8) % 2) * 8) * 2, false);
                    amk_rows_mma (sc[2 * jj], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], bf[0], bf[1]);
                    amk_rows_mma (sc[2 * jj + 1], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], bf[2], bf[3]);
                  }
              /* mask, online softmax per query vector (a row's 4 lanes by shuffles) */
              float keep[2];
#pragma unroll
              for (int i = 0; i < 2; i++)
                {
                  float mx = -INFINITY;
#pragma unroll
                  for (int j = 0; j < 8; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                      {
                        const int32_t kp = p0 + j * 8 + (lane % 4) * 2 + e;
                        float &v = sc[j][2 * i + e];
                        v = kp <= qpos[i] ? v : -INFINITY;
                        mx = fmaxf (mx, v);
                      }
                  mx = fmaxf (mx, __shfl_xor_sync (0xffffffffu, mx, 1));
                  mx = fmaxf (mx, __shfl_xor_sync (0xffffffffu, mx, 2));
                  const float m_new = fmaxf (m[i], mx);
                  /* a row with nothing yet (all masked) keeps m = -inf and adds zeros */
                  const float base = m_new == -INFINITY ? 0.0f : m_new;
                  keep[i] = m[i] == -INFINITY ? 0.0f : __expf (m[i] - base);
                  float sum = 0.0f;
#pragma unroll
                  for (int j = 0; j < 8; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                      {
                        float &v = sc[j][2 * i + e];
                        v = __expf (v - base);
                        sum += v;
                      }
                  sum += __shfl_xor_sync (0xffffffffu, sum, 1);
                  sum += __shfl_xor_sync (0xffffffffu, sum, 2);
                  l[i] = l[i] * keep[i] + sum;
                  m[i] = m_new;
                }
#pragma unroll
              for (int j = 0; j < 8; j++)
                {
                  o[j][0] *= keep[0];
                  o[j][1] *= keep[0];
                  o[j][2] *= keep[1];
                  o[j][3] *= keep[1];
                }
              /* O += P V: P's accumulator layout is the A fragment's; V rows are positions
               * (k) with d contiguous (n): transposed ldmatrix */
#pragma unroll
              for (int t = 0; t < 4; t++)
                {
                  const uint32_t a0 = amk_rows_pack (sc[2 * t][0], sc[2 * t][1]);
                  const uint32_t a1 = amk_rows_pack (sc[2 * t][2], sc[2 * t][3]);
                  const uint32_t a2 = amk_rows_pack (sc[2 * t + 1][0], sc[2 * t + 1][1]);
                  const uint32_t a3 = amk_rows_pack (sc[2 * t + 1][2], sc[2 * t + 1][3]);
#pragma unroll
                  for (int jj = 0; jj < 4; jj++)
                    {
                      uint32_t bf[4];
                      const uint32_t r = (uint32_t) (t * 16 + lane % 8 + ((lane / 8) % 2) * 8);
                      amk_rows_ldmatrix4 (bf, vs + (r * AMK_ROWS_LDS + jj * 16 + (lane / 16) * 8) * 2, true);
                      amk_rows_mma (o[2 * jj], a0, a1, a2, a3, bf[0], bf[1]);
                      amk_rows_mma (o[2 * jj + 1], a0, a1, a2, a3, bf[2], bf[3]);
                    }
                }
            }
          amk_sync (); /* buffer `buf` is refilled in step b + 2 */
        }

      /* out = O / l; a padding row (l = 0) gets zeros */
#pragma unroll
      for (int i = 0; i < 2; i++)
        {
          const int32_t qv = qv0 + 8 * i;
          if (qv >= n_qv)
            continue;
          const int32_t r = p.row0 + qv / group, h = p.kv_head * group + qv % group;
          const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
          const uint64_t dst = (uint64_t) r * nq * d + (uint64_t) h * d + (lane % 4) * 2;
#pragma unroll
          for (int j = 0; j < 8; j++)
            {
              const float a = o[j][2 * i] * inv, b = o[j][2 * i + 1] * inv;
              if (odt == AMK_ABI_DTYPE_BF16)
                *reinterpret_cast<__nv_bfloat162 *> (out + (dst + j * 8) * 2) = __floats2bfloat162_rn (a, b);
              else
                *reinterpret_cast<float2 *> (out + (dst + j * 8) * 4) = make_float2 (a, b);
            }
        }
    }
}

static __device__ __noinline__ int
amk_attn_rows_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                    bool run, int tid, int nt, int32_t *detail)
{
  const amk_attn_rows_params_t &p = ins->params.attn_rows;
  const int32_t d = p.shape.head_dim;
  const int32_t nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads, group = nq / nkv;
  const int32_t *pos = reinterpret_cast<const int32_t *> (buffers[ins->buffers[4]].addr);
  const int32_t *seq = (ctx->dtype & (1u << 8)) != 0
                       ? reinterpret_cast<const int32_t *> (buffers[ins->buffers[5]].addr) : nullptr;
  const int code = amk_rows_validate (ctx, ins, pos, seq, p.row0, p.n_rows, p.shape.max_ctx,
                                      run, tid, nt, detail);
  if (code != AMK_ABORT_NONE || !run)
    return code;

  const uint32_t cdt = ctx->dtype & 0xfu;
  const float *qkv = reinterpret_cast<const float *> (buffers[ins->buffers[1]].addr);
  unsigned char *out = ctx->ptr[0];
  const uint32_t odt = (ctx->dtype >> 20) & 0xfu, osize = amk_dtype_size (odt);
  const uint64_t width = (uint64_t) (nq + 2 * nkv) * d, kvw = (uint64_t) nkv * d;
  const int lane = tid & 31, nw = nt / 32;

  /* the tensor-core path when every valid row is in one sequence */
  if (d == 64 && cdt == AMK_ABI_DTYPE_BF16 && amk_dyn_smem_size () >= AMK_ATTN_ROWS_SMEM_BYTES)
    {
      __shared__ int32_t s_seq[2];
      if (tid == 0)
        s_seq[0] = -1, s_seq[1] = 0;
      amk_sync ();
      for (int32_t r = p.row0 + tid; r < p.row0 + p.n_rows; r += nt)
        if (pos[r] >= 0)
          {
            const int32_t sr = seq != nullptr ? seq[r] : 0;
            const int32_t prev = atomicCAS (&s_seq[0], -1, sr);
            if (prev != -1 && prev != sr)
              s_seq[1] = 1;
          }
      amk_sync ();
      const bool one = s_seq[1] == 0;
      const int32_t sq = max (s_seq[0], 0);
      amk_sync ();
      if (one)
        {
          amk_attn_rows_tc (ins, pos, qkv, out, odt, ctx->ptr[1], ctx->ptr[2], sq, tid, nt);
          return AMK_ABORT_NONE;
        }
    }

  /* the rows with the most positions first: they take longest */
  for (int64_t item = tid / 32; item < (int64_t) p.n_rows * group; item += nw)
    {
      const int32_t r = p.row0 + p.n_rows - 1 - (int32_t) (item / group);
      const int32_t h = p.kv_head * group + (int32_t) (item % group);
      const int32_t ps = pos[r];
      unsigned char *o = out + ((uint64_t) r * nq * d + (uint64_t) h * d) * osize;
      if (ps < 0)
        {
          for (int32_t c = lane; c < d; c += 32)
            amk_vec_st (o, odt, (uint32_t) c, 0.0f);
          continue;
        }
      const uint64_t srow0 = (uint64_t) (seq != nullptr ? seq[r] : 0) * (uint64_t) p.shape.max_ctx * kvw +
                             (uint64_t) p.kv_head * d;
      amk_attn_rows_warp (qkv + (uint64_t) r * width + (uint64_t) h * d, o, odt, ctx->ptr[1], ctx->ptr[2], cdt,
                          srow0, kvw, ps, d, p.scale, lane);
    }
  return AMK_ABORT_NONE;
}

/* ---- the many-token ops' entry ---------------------------------------------------------- */

/* MATMUL and ATTN_ROWS behind one call, out of line: the decode step's loop keeps its
 * registers for the ops it runs. */
static __device__ __noinline__ int
amk_many_tokens_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_buffer_t *buffers,
                      bool run, int tid, int nt, int32_t *detail)
{
  switch (ins->opcode)
    {
    case AMK_ABI_OP_MATMUL:
      return amk_matmul_exec (ctx, ins, buffers, run, tid, nt);
    default:
      return amk_attn_rows_exec (ctx, ins, buffers, run, tid, nt, detail);
    }
}

#endif /* AMK_OPS_ATTENTION_ROWS_CUH */
