/* ops-attention.cuh: the attention ops of the megakernel (see amk-abi.h for their contract):
 *
 *   ROPE_KV      rotary embedding of query and key heads in place, and the append of k
 *                and v at row pos of the caches. A warp per head, a lane per pair
 *                (c, c + D/2).
 *   ATTN_DECODE  the query heads of one key/value head group over one split of the cached
 *                positions, as (acc, m, l) with an online softmax in fp32.
 *   ATTN_REDUCE  merges the splits of each query head. A warp per head. With a sixth
 *                buffer ATTN_DECODE does it itself: the last split of a key/value head to
 *                finish (an arrival counter) merges the group's heads, one stage less.
 *
 * Two halves per op, like the other families:
 *   amk_attention_check(): every thread, before the waits: parameters, dtypes, sizes
 *     (64-bit), alignment and aliasing, the same rules as the host verifier
 *     (amk-glib/amk-verifier-attention.c). A failure is CHECK with the buffer's index.
 *   amk_attention_exec(): every thread of the block after the waits (run: this warp's
 *     waits held). ROPE_KV and ATTN_DECODE read the position from device memory: the
 *     warps that ran write it to shared memory and an amk_sync_or hands every thread
 *     the same value, so the verdict (CHECK with the pos buffer's index for a position
 *     outside [0, max_ctx)) and the number of barriers are uniform over the block even if
 *     a warp's wait failed. ATTN_DECODE has further block barriers; ATTN_REDUCE none.
 *
 * ATTN_DECODE. Short splits (the decode case: D of 32 to 256 and a split that fits the
 * staging area) take amk_attn_decode_short, two exact passes with three barriers; the
 * general path below takes the rest. Head dimension D <= 256 (AMK_ATTN_MAX_HEAD_DIM).
 * General path: a cache row of D elements is NC chunks of VE elements (VE = 8 for
 * bf16 / 4 for f32: 16-byte loads, when D allows; otherwise VE = 2); L = the power of
 * two >= NC (at most 32) lanes share a position, lane i of the group taking chunks i,
 * i + L, ...; a warp works on P = 32 / L
 * positions at once, warp w on positions start + w P + k nw P. Per position a lane loads
 * its K and V chunks, dots K with the staged q of up to AMK_ATTN_HEADS query heads (q is
 * copied to shared memory once per pass), the group sums with xor shuffles, and every
 * lane updates its heads' running (m, l, acc[its elements]). Then the P groups of a warp
 * merge with shuffles, the warps publish (m, l) per head in shared memory, and each warp
 * scales its acc by e^(m_w - M); the acc of all warps are summed in a fixed order
 * through a shared staging area (AMK_ATTN_STAGE floats, in rounds when nw * heads * D
 * does not fit), so the result does not depend on timing. A group of more than
 * AMK_ATTN_HEADS query heads takes several passes over K and V.
 *
 * The RoPE angle is computed like the CPU reference (amk-glib/amk-cpu-ops-attention.c)
 * and HF transformers: every fp32 step rounded on its own (__fmul_rn & co: no FMA
 * contraction), theta^e in double rounded once, cos and sin in double rounded once.
 *
 * Loads of buffers written during the launch are ordinary coherent loads.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_ATTENTION_CUH
#define AMK_OPS_ATTENTION_CUH

#include <stdint.h>
#include <cuda_bf16.h>

#include "amk-abi.h"
#include "ops-utility.cuh"
#include "ops-matvec.cuh" /* the ring's dynamic shared memory, where V rows are staged */

#define AMK_ATTN_MAX_HEAD_DIM 256  /* ATTN_DECODE: 32 lanes x 8 elements */
#define AMK_ATTN_HEADS        2    /* query heads per ATTN_DECODE pass */
#define AMK_ATTN_STAGE        2048 /* floats of shared staging (q, then the warps' acc) */
#define AMK_ATTN_MAX_WARPS    16   /* 512 threads, __launch_bounds__ */
#define AMK_ATTN_SHORT_REGS   8    /* ATTN_DECODE short path: query floats per lane */
#define AMK_ATTN_SHORT_SUMS   1024 /* ATTN_DECODE short path: floats of the V slices' sums */

static_assert (AMK_ATTN_STAGE >= AMK_ATTN_HEADS * AMK_ATTN_MAX_HEAD_DIM, "q must fit the stage");
static_assert (AMK_ATTN_STAGE / AMK_ATTN_MAX_WARPS >= 1, "a round must hold an element per warp");
static_assert (AMK_ATTN_SHORT_REGS == 8 && AMK_ATTN_STAGE - AMK_ATTN_SHORT_SUMS == 1024 &&
               AMK_ATTN_MAX_WARPS * 32 <= AMK_ATTN_SHORT_SUMS,
               "amk_abi_rope_attn_fits must describe amk_attn_short_fits");

/* amk_op_ctx for the attention ops: ptr[0..2] = b0, b1, b2; dtype = the caches' dtype
 * (ROPE_KV, ATTN_DECODE). The other operands are re-read from the buffer table (constant
 * during a launch, checked by amk_attention_check). */

/* ---- check --------------------------------------------------------------------------- */

/* a * b * c for non-negative int32s, saturated at UINT64_MAX */
static __device__ __forceinline__ uint64_t
amk_attn_mul3 (int32_t a, int32_t b, int32_t c)
{
  const uint64_t ab = (uint64_t) (uint32_t) a * (uint32_t) b;
  if (__umul64hi (ab, (uint32_t) c) != 0)
    return ~0ull;
  return ab * (uint32_t) c;
}

static __device__ __forceinline__ bool
amk_attn_finite_positive (float v)
{
  return v > 0.0f && v <= 3.402823466e38f;
}

#define AMK_ATTN_F32   (1u << AMK_ABI_DTYPE_F32)
#define AMK_ATTN_I32   (1u << AMK_ABI_DTYPE_I32)
#define AMK_ATTN_CACHE ((1u << AMK_ABI_DTYPE_F32) | (1u << AMK_ABI_DTYPE_BF16))

/* ATTN_DECODE with the merge fused (a sixth buffer, out). */
static __device__ __forceinline__ bool
amk_attn_merges (const amk_instruction_t *ins)
{
  return ins->opcode == AMK_ABI_OP_ATTN_DECODE && ins->n_buffers >= 6;
}

/* ATTN_DECODE with RoPE fused (a seventh buffer, the cos/sin table). */
static __device__ __forceinline__ bool
amk_attn_ropes (const amk_instruction_t *ins)
{
  return ins->opcode == AMK_ABI_OP_ATTN_DECODE && ins->n_buffers >= 7;
}

/* The parameters of the instruction (what needs no buffer). */
static __device__ __forceinline__ bool
amk_attn_params_ok (const amk_instruction_t *ins)
{
  switch (ins->opcode)
    {
    case AMK_ABI_OP_ROPE_KV:
      {
        const amk_rope_kv_params_t &p = ins->params.rope_kv;
        const int32_t d = p.shape.head_dim, nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads;
        const amk_rope_freq_t &f = p.freq;
        return d >= 2 && !(d & 1) && nq >= 1 && nkv >= 1 && nq % nkv == 0 &&
               p.shape.max_ctx >= 1 && p.head0 >= 0 && p.n_heads >= 0 &&
               (int64_t) p.head0 + p.n_heads <= (int64_t) nq + nkv &&
               amk_attn_finite_positive (f.theta) &&
               (f.factor == 0.0f ||
                (amk_attn_finite_positive (f.factor) && amk_attn_finite_positive (f.low_freq_factor) &&
                 amk_attn_finite_positive (f.high_freq_factor) &&
                 f.high_freq_factor > f.low_freq_factor && f.original_context >= 1));
      }
    case AMK_ABI_OP_ATTN_DECODE:
      {
        const amk_attn_decode_params_t &p = ins->params.attn_decode;
        const int32_t d = p.shape.head_dim, nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads;
        return d >= 2 && !(d & 1) && nq >= 1 && d <= AMK_ATTN_MAX_HEAD_DIM && nkv >= 1 &&
               nq % nkv == 0 && p.shape.max_ctx >= 1 && p.kv_head >= 0 && p.kv_head < nkv &&
               p.n_splits >= 1 && p.split >= 0 && p.split < p.n_splits && p.min_split >= 0 &&
               fabsf (p.scale) <= 3.402823466e38f &&
               (!amk_attn_ropes (ins) ||
                amk_abi_rope_attn_fits (d, nq / nkv, p.shape.max_ctx, p.n_splits, p.min_split));
      }
    default: /* ATTN_REDUCE */
      {
        const amk_attn_reduce_params_t &p = ins->params.attn_reduce;
        return p.head_dim >= 2 && !(p.head_dim & 1) && p.n_q_heads >= 1 && p.n_splits >= 1 &&
               p.head0 >= 0 && p.n_heads >= 0 && (int64_t) p.head0 + p.n_heads <= p.n_q_heads;
      }
    }
}

/* What operand `slot` must be: elements from its start, dtypes (mask), base alignment. */
static __device__ __forceinline__ void
amk_attn_operand_spec (const amk_instruction_t *ins, int slot, uint64_t *count, uint32_t *dtypes,
                       uint32_t *align)
{
  *align = 4;
  if (ins->opcode == AMK_ABI_OP_ROPE_KV)
    {
      const amk_attn_shape_t &sh = ins->params.rope_kv.shape;
      const int32_t d = sh.head_dim;
      /* q, k, v, k cache, v cache, pos */
      *dtypes = slot <= 2 ? AMK_ATTN_F32 : slot == 5 ? AMK_ATTN_I32 : AMK_ATTN_CACHE;
      *count = slot == 0 ? (uint64_t) sh.n_q_heads * d : slot <= 2 ? (uint64_t) sh.n_kv_heads * d
             : slot == 5 ? 1 : amk_attn_mul3 (sh.max_ctx, sh.n_kv_heads, d);
    }
  else if (ins->opcode == AMK_ABI_OP_ATTN_DECODE)
    {
      const amk_attn_decode_params_t &p = ins->params.attn_decode;
      const int32_t d = p.shape.head_dim, nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads;
      /* partial, q (with RoPE fused: qkv), k cache, v cache, pos, out (fused merge),
       * cos_sin (fused RoPE); the caches are read 16 bytes at a time */
      *dtypes = slot <= 1 || slot >= 5 ? AMK_ATTN_F32 : slot == 4 ? AMK_ATTN_I32 : AMK_ATTN_CACHE;
      *count = slot == 0 ? amk_attn_mul3 (nq, p.n_splits, d + 2)
             : slot == 1 ? ((uint64_t) nq + (amk_attn_ropes (ins) ? 2ull * nkv : 0ull)) * d
             : slot == 5 ? (uint64_t) nq * d : slot == 6 ? (uint64_t) p.shape.max_ctx * d
             : slot == 4 ? 1 : amk_attn_mul3 (p.shape.max_ctx, nkv, d);
      if (slot == 2 || slot == 3)
        *align = 16;
    }
  else
    {
      const amk_attn_reduce_params_t &p = ins->params.attn_reduce;
      /* out, partial */
      *dtypes = AMK_ATTN_F32;
      *count = slot == 0 ? (uint64_t) p.n_q_heads * p.head_dim
                         : amk_attn_mul3 (p.n_q_heads, p.n_splits, p.head_dim + 2);
    }
}

/* Every thread: operand checks that need no device data. The same rules as the host
 * verifier: parameters, then each operand's index, dtype, size and alignment, caches of
 * one dtype, and no written buffer sharing a byte with another operand. Loops stay
 * rolled: this runs before every attention instruction and must stay light on
 * registers. */
static __device__ __forceinline__ int
amk_attention_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                     amk_op_ctx *ctx, int32_t *detail)
{
  const uint32_t op = ins->opcode;
  const bool merges = amk_attn_merges (ins);
  const int n = op == AMK_ABI_OP_ROPE_KV ? 6
              : op == AMK_ABI_OP_ATTN_DECODE ? (amk_attn_ropes (ins) ? 7 : merges ? 6 : 5) : 2;
  const uint32_t written = amk_abi_written_slots (op, ins->n_buffers);
  const int cache_slot = op == AMK_ABI_OP_ROPE_KV ? 3 : 2;

  if (op < AMK_ABI_OP_ROPE_KV || op > AMK_ABI_OP_ATTN_REDUCE)
    {
      *detail = (int32_t) op;
      return AMK_ABORT_BAD_OPCODE;
    }
  *detail = ins->buffers[0];
  if (!amk_attn_params_ok (ins))
    return AMK_ABORT_CHECK;

#pragma unroll 1
  for (int s = 0; s < n; s++)
    {
      const int32_t ref = ins->buffers[s];
      uint64_t count;
      uint32_t dtypes, align;

      *detail = ref;
      if (ref < 0 || ref >= n_buffers)
        return AMK_ABORT_BAD_INDEX;
      amk_attn_operand_spec (ins, s, &count, &dtypes, &align);
      const amk_buffer_t *b = buffers + ref;
      const uint32_t dt = b->dtype;
      const uint32_t es = amk_dtype_size (dt);
      /* align is a power of two */
      if (es == 0 || dt >= 32 || ((dtypes >> dt) & 1u) == 0 ||
          count > (b->size_bytes >> amk_size_shift (es)) ||
          (b->addr & (align - 1)) != 0 || (b->addr & (es - 1)) != 0)
        return AMK_ABORT_CHECK;
    }
  if (op != AMK_ABI_OP_ATTN_REDUCE &&
      buffers[ins->buffers[cache_slot]].dtype != buffers[ins->buffers[cache_slot + 1]].dtype)
    {
      *detail = ins->buffers[cache_slot + 1];
      return AMK_ABORT_CHECK;
    }
#pragma unroll 1
  for (int i = 0; i < n; i++)
    {
      if (!((written >> i) & 1u))
        continue;
      const uint64_t a0 = buffers[ins->buffers[i]].addr, a1 = a0 + buffers[ins->buffers[i]].size_bytes;
#pragma unroll 1
      for (int j = 0; j < n; j++)
        {
          const uint64_t b0 = buffers[ins->buffers[j]].addr, b1 = b0 + buffers[ins->buffers[j]].size_bytes;
          if (j != i && a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1)
            {
              *detail = ins->buffers[i];
              return AMK_ABORT_CHECK;
            }
        }
    }
  ctx->ptr[0] = reinterpret_cast<unsigned char *> (buffers[ins->buffers[0]].addr);
  ctx->ptr[1] = reinterpret_cast<unsigned char *> (buffers[ins->buffers[1]].addr);
  ctx->ptr[2] = reinterpret_cast<unsigned char *> (op == AMK_ABI_OP_ATTN_REDUCE ? 0ull
                                                   : buffers[ins->buffers[2]].addr);
  ctx->dtype = op == AMK_ABI_OP_ATTN_REDUCE ? 0u : buffers[ins->buffers[cache_slot]].dtype;
  return AMK_ABORT_NONE;
}

/* ---- shared helpers ------------------------------------------------------------------- */

static __device__ __forceinline__ unsigned char *
amk_attn_buffer (const amk_device_program &prog, const amk_instruction_t *ins, int slot)
{
  return reinterpret_cast<unsigned char *> (prog.buffers[ins->buffers[slot]].addr);
}

#define AMK_ATTN_NO_POS INT32_MIN /* amk_attention_early_pos: not loaded early */

/* Every thread, before the waits of ROPE_KV and ATTN_DECODE: in each warp's lane 0, the
 * position, when no instruction of the launch writes its buffer (the launcher flags it
 * CONSTANT), so that its round trip overlaps the waits instead of following them. */
static __device__ __forceinline__ int32_t
amk_attention_early_pos (const amk_instruction_t *ins, const amk_buffer_t *buffers, int tid)
{
  const amk_buffer_t *b = buffers + ins->buffers[ins->opcode == AMK_ABI_OP_ROPE_KV ? 5 : 4];

  if ((tid & 31) != 0 || (b->flags & AMK_BUFFER_FLAG_CONSTANT) == 0)
    return AMK_ATTN_NO_POS;
  return *reinterpret_cast<const int32_t *> (b->addr);
}

/* The position, the same in every thread: the warps that passed their waits read it (or
 * take the one loaded before the waits) and publish it in shared memory. Returns false
 * (in every thread) when no warp ran. */
static __device__ __forceinline__ bool
amk_attn_read_pos (const int32_t *pos_ptr, int32_t early, bool run, int tid, int32_t *s_pos,
                   int32_t *pos)
{
  if (run && (tid & 31) == 0)
    *s_pos = early != AMK_ATTN_NO_POS ? early : *reinterpret_cast<const volatile int32_t *> (pos_ptr);
  const int any = amk_sync_or (run ? 1 : 0);
  *pos = *reinterpret_cast<volatile int32_t *> (s_pos);
  return any != 0;
}

static __device__ __forceinline__ float
amk_attn_warp_sum (float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  return v;
}

static __device__ __forceinline__ float
amk_attn_warp_max (float v)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf (v, __shfl_xor_sync (0xffffffffu, v, o));
  return v;
}

/* ---- ROPE_KV -------------------------------------------------------------------------- */

/* inv_freq[c] for head dimension d, each fp32 step rounded as in HF transformers'
 * _compute_default_rope_parameters / _compute_llama3_parameters. */
static __device__ __forceinline__ float
amk_rope_inv_freq (int32_t c, int32_t d, float theta, float factor, float low, float high,
                   int32_t old_ctx)
{
  const float exponent = __fdiv_rn (__int2float_rn (2 * c), __int2float_rn (d));
  const float base_pow = __double2float_rn (pow ((double) theta, (double) exponent));
  float inv = __fdiv_rn (1.0f, base_pow);

  if (factor > 0.0f)
    {
      const float two_pi = __double2float_rn (6.283185307179586);
      const float wavelen = __fdiv_rn (two_pi, inv);
      const float low_freq_wavelen = __double2float_rn ((double) old_ctx / (double) low);
      const float high_freq_wavelen = __double2float_rn ((double) old_ctx / (double) high);

      if (wavelen > low_freq_wavelen)
        inv = __fdiv_rn (inv, factor);
      else if (!(wavelen < high_freq_wavelen))
        {
          const float smooth = __fdiv_rn (__fsub_rn (__fdiv_rn (__int2float_rn (old_ctx), wavelen), low),
                                          __fsub_rn (high, low));
          inv = __fadd_rn (__fdiv_rn (__fmul_rn (__fsub_rn (1.0f, smooth), inv), factor),
                           __fmul_rn (smooth, inv));
        }
    }
  return inv;
}

/* cos and sin of an fp32 angle, each rounded once from double (no local memory: sincospi
 * reduces its argument exactly). */
static __device__ __forceinline__ float2
amk_rope_cos_sin (float angle)
{
  double s, c;
  sincospi ((double) angle * 0.318309886183790671538, &s, &c);
  return make_float2 (__double2float_rn (c), __double2float_rn (s));
}

/* cos and sin of the angle of pair c of a head of dimension d at position fpos, with a
 * ROPE_KV instruction's frequencies. */
static __device__ __forceinline__ float2
amk_rope_angle_cs (const amk_rope_freq_t &f, int32_t c, int32_t d, float fpos)
{
  return amk_rope_cos_sin (__fmul_rn (fpos, amk_rope_inv_freq (c, d, f.theta, f.factor, f.low_freq_factor,
                                                               f.high_freq_factor, f.original_context)));
}

/* cos and sin of the position's angles, computed by warp 0 before the waits when the
 * position is known then (amk_rope_early): the double-precision pow and sincospi were
 * most of the instruction's time after its waits. amk_rope_cs_pos says for which
 * position they hold (AMK_ATTN_NO_POS: none); every ROPE_KV rewrites it before its
 * waits, so it never describes another instruction's angles. */
#define AMK_ROPE_EARLY_MAX 128 /* half head dimensions that fit */
static __shared__ float2 amk_rope_cs[AMK_ROPE_EARLY_MAX];
static __shared__ int32_t amk_rope_cs_pos;

/* Every thread, before the waits of ROPE_KV, with amk_attention_early_pos's result. */
static __device__ __forceinline__ void
amk_rope_early (const amk_instruction_t *ins, int32_t early_pos, int tid)
{
  if (tid >= 32)
    return;
  const amk_rope_kv_params_t &p = ins->params.rope_kv;
  const int32_t d = p.shape.head_dim, half = d >> 1;
  const int32_t pos = __shfl_sync (0xffffffffu, early_pos, 0);

  if (pos < 0 || pos >= p.shape.max_ctx || half > AMK_ROPE_EARLY_MAX)
    {
      if (tid == 0)
        amk_rope_cs_pos = AMK_ATTN_NO_POS;
      return;
    }
  const float fpos = __int2float_rn (pos);
  for (int32_t c = tid; c < half; c += 32)
    amk_rope_cs[c] = amk_rope_angle_cs (p.freq, c, d, fpos);
  if (tid == 0)
    amk_rope_cs_pos = pos;
}

static __device__ __forceinline__ void
amk_attn_store_cache (unsigned char *cache, uint32_t dt, uint64_t i, float v)
{
  if (dt == AMK_ABI_DTYPE_BF16)
    reinterpret_cast<__nv_bfloat16 *> (cache)[i] = __float2bfloat16_rn (v);
  else
    reinterpret_cast<float *> (cache)[i] = v;
}

/* RoPE of the pair (x1, x2) of a head by (cos, sin): the fp32 steps of the CPU executor's
 * ROPE_KV, for ROPE_KV and the attention's fused rotation alike. */
static __device__ __forceinline__ float2
amk_rope_rotate (float x1, float x2, float2 cs)
{
  return make_float2 (__fsub_rn (__fmul_rn (x1, cs.x), __fmul_rn (x2, cs.y)),
                      __fadd_rn (__fmul_rn (x2, cs.x), __fmul_rn (x1, cs.y)));
}

/* Pair c of the new row of the caches (element offset `row`): the rotated key r and the
 * value's pair c. */
static __device__ __forceinline__ void
amk_rope_append_pair (unsigned char *kc, unsigned char *vc, uint32_t cdt, uint64_t row, int32_t c,
                      int32_t half, float2 r, const float *vh)
{
  amk_attn_store_cache (kc, cdt, row + c, r.x);
  amk_attn_store_cache (kc, cdt, row + c + half, r.y);
  amk_attn_store_cache (vc, cdt, row + c, vh[c]);
  amk_attn_store_cache (vc, cdt, row + c + half, vh[c + half]);
}

static __device__ __forceinline__ int
amk_rope_kv_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_device_program &prog,
                  int32_t early_pos, bool run, int tid, int nt, int32_t *s_pos, int32_t *detail)
{
  const amk_rope_kv_params_t &p = ins->params.rope_kv;
  const int32_t d = p.shape.head_dim, nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads, max_ctx = p.shape.max_ctx;
  const uint32_t first = (uint32_t) p.head0, end = first + (uint32_t) p.n_heads;
  const int32_t half = d >> 1;
  float *q = reinterpret_cast<float *> (ctx->ptr[0]);
  float *k = reinterpret_cast<float *> (ctx->ptr[1]);
  const float *v = reinterpret_cast<const float *> (ctx->ptr[2]);
  unsigned char *kc = amk_attn_buffer (prog, ins, 3);
  unsigned char *vc = amk_attn_buffer (prog, ins, 4);
  const uint32_t cdt = ctx->dtype;
  int32_t pos;

  if (!amk_attn_read_pos (reinterpret_cast<const int32_t *> (amk_attn_buffer (prog, ins, 5)),
                          early_pos, run, tid, s_pos, &pos))
    return AMK_ABORT_NONE;
  if (pos < 0 || pos >= max_ctx)
    {
      *detail = ins->buffers[5];
      return AMK_ABORT_CHECK;
    }
  if (!run)
    return AMK_ABORT_NONE;

  const float fpos = __int2float_rn (pos);
  const int lane = tid & 31;
  /* published before the barrier in amk_attn_read_pos */
  const bool early_cs = *reinterpret_cast<volatile int32_t *> (&amk_rope_cs_pos) == pos;
  for (uint32_t h = first + ((uint32_t) tid >> 5); h < end; h += (uint32_t) nt >> 5)
    {
      const bool is_key = h >= (uint32_t) nq;
      const uint32_t hh = is_key ? h - (uint32_t) nq : h;
      float *x = (is_key ? k : q) + (uint64_t) hh * d;
      const uint64_t row = ((uint64_t) pos * nkv + hh) * d;

      for (int32_t c = lane; c < half; c += 32)
        {
          const float2 cs = early_cs ? amk_rope_cs[c]
                            : amk_rope_angle_cs (p.freq, c, d, fpos);
          const float2 r = amk_rope_rotate (x[c], x[c + half], cs);

          x[c] = r.x;
          x[c + half] = r.y;
          if (is_key)
            amk_rope_append_pair (kc, vc, cdt, row, c, half, r, v + (uint64_t) hh * d);
        }
    }
  return AMK_ABORT_NONE;
}

/* ---- ATTN_DECODE with RoPE fused -------------------------------------------------------- */

/* ATTN_DECODE with RoPE fused, in shared memory that exists anyway (when this was
 * written, growing the static shared memory misaligned the MATVEC ring, which starts
 * behind it, and slowed every MATVEC; amk_dyn_smem's alignment has fixed that since), so
 * the rotated query heads of the block's group go where ROPE_KV keeps its angles (every
 * ROPE_KV rewrites those, and their tag, before its waits), and the position and the
 * cos/sin table's address into s_ml's unused tail (AMK_ATTN_SML_*: the short path uses
 * 2 floats per query head of its group, at most 16). */
#define AMK_ATTN_SML_TABLE 60 /* two 32-bit words (s_ml is only 4-byte aligned): the table's address */
#define AMK_ATTN_SML_POS   62 /* the position (amk_attn_read_pos) */
static_assert (2 * AMK_ROPE_EARLY_MAX >= AMK_ATTN_SHORT_REGS * 32, "the rotated query heads must fit");
static_assert (AMK_ATTN_MAX_WARPS * AMK_ATTN_HEADS * 2 > AMK_ATTN_SML_POS && AMK_ATTN_SML_TABLE >= 2 * 16,
               "s_ml's tail must be free");

static __device__ __forceinline__ float *
amk_attn_q_rot (void)
{
  return reinterpret_cast<float *> (amk_rope_cs);
}

/* Every thread of the block, after the waits: the group's query heads rotated into
 * amk_attn_q_rot (head h of the group at h * D), and, when this split holds position pos
 * (holds), key head g rotated and value head g stored at row pos of the caches: ROPE_KV's
 * rotation (amk_rope_rotate), the cos and sin from the table (b6). The caller's barrier
 * publishes them. Inlined into the short path: a call there would cost the megakernel
 * registers. */
static __device__ __forceinline__ void
amk_attn_rope_stage (const amk_instruction_t *ins, const float *qkv, const float2 *cos_sin,
                     unsigned char *kc, unsigned char *vc, uint32_t cdt, int32_t pos, bool holds,
                     int tid, int nt)
{
  const amk_attn_decode_params_t &p = ins->params.attn_decode;
  const int32_t d = p.shape.head_dim, nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads, g = p.kv_head;
  const int32_t group = nq / nkv, half = d >> 1;
  const float2 *cs_pos = cos_sin + (uint64_t) pos * half;
  const int32_t pairs = (group + (holds ? 1 : 0)) * half; /* the query heads', then the key's */
  const uint64_t row = ((uint64_t) pos * nkv + g) * d;

  for (int32_t i = tid; i < pairs; i += nt)
    {
      const int32_t h = i / half, c = i - h * half;
      const bool key = h == group;
      const float2 cs = cs_pos[c];
      const float *x = qkv + (uint64_t) (key ? nq + g : g * group + h) * d;
      const float2 r = amk_rope_rotate (x[c], x[c + half], cs);

      if (!key)
        {
          amk_attn_q_rot ()[h * d + c] = r.x;
          amk_attn_q_rot ()[h * d + c + half] = r.y;
          continue;
        }
      amk_rope_append_pair (kc, vc, cdt, row, c, half, r, qkv + (uint64_t) (nq + nkv + g) * d);
    }
}

/* ---- ATTN_DECODE ---------------------------------------------------------------------- */

/* One chunk of VE cache elements (VE * ES bytes, aligned to its size) as 32-bit words. */
template <bool BF, int VE>
struct amk_attn_chunk {
  static constexpr int ES = BF ? 2 : 4;
  static constexpr int WORDS = VE * ES / 4;
  uint32_t w[WORDS];

  __device__ __forceinline__ void load (const unsigned char *p)
  {
    if (WORDS == 4)
      {
        const uint4 u = *reinterpret_cast<const uint4 *> (p);
        w[0] = u.x, w[1] = u.y, w[2 % WORDS] = u.z, w[3 % WORDS] = u.w;
      }
    else if (WORDS == 2)
      {
        const uint2 u = *reinterpret_cast<const uint2 *> (p);
        w[0] = u.x, w[1 % WORDS] = u.y;
      }
    else
      w[0] = *reinterpret_cast<const uint32_t *> (p);
  }

  __device__ __forceinline__ void zero ()
  {
#pragma unroll
    for (int i = 0; i < WORDS; i++)
      w[i] = 0;
  }

  __device__ __forceinline__ float get (int e) const
  {
    if (BF)
      return __uint_as_float ((e & 1) ? (w[e >> 1] & 0xffff0000u) : (w[e >> 1] << 16));
    return __uint_as_float (w[e]);
  }
};

/* part + q . k over one chunk: the staged q of one head (VE floats, aligned), read 4 (or
 * 2) at a time so that few registers are live. */
template <int VE, typename C>
static __device__ __forceinline__ float
amk_attn_q_dot (const float *sq, const C &k, float part)
{
  if (VE >= 4)
    {
#pragma unroll
      for (int i = 0; i < VE / 4; i++)
        {
          const float4 a = reinterpret_cast<const float4 *> (sq)[i];
          part = fmaf (a.x, k.get (4 * i), part);
          part = fmaf (a.y, k.get (4 * i + 1), part);
          part = fmaf (a.z, k.get (4 * i + 2), part);
          part = fmaf (a.w, k.get (4 * i + 3), part);
        }
    }
  else
    {
      const float2 a = *reinterpret_cast<const float2 *> (sq);
      part = fmaf (a.x, k.get (0), part);
      part = fmaf (a.y, k.get (1), part);
    }
  return part;
}

/* Merges (mo, lo, acc_o) into (m, l, acc) with weights e^(m - M), e^(mo - M); an empty
 * side (m = -inf) weighs 0. */
static __device__ __forceinline__ void
amk_attn_weights (float m, float mo, float *a, float *b, float *big)
{
  const float mx = fmaxf (m, mo);
  *a = m == -INFINITY ? 0.0f : expf (m - mx);
  *b = mo == -INFINITY ? 0.0f : expf (mo - mx);
  *big = mx;
}

template <bool BF, int VE>
static __device__ __forceinline__ void
amk_attn_decode_run (const amk_instruction_t *ins, float *partial, const float *q,
                     const unsigned char *kc, const unsigned char *vc, int32_t start, int32_t end,
                     bool run, int tid, int nt, float *s_stage, float *s_ml)
{
  typedef amk_attn_chunk<BF, VE> chunk_t;
  constexpr int ES = BF ? 2 : 4;
  constexpr int HG = AMK_ATTN_HEADS;
  constexpr int JMAX = 8 / VE;         /* chunks per lane: D <= 256 = 32 lanes x 8 */
  constexpr int EPL = JMAX * VE;       /* elements per lane and head: 8 */
  const amk_attn_decode_params_t &p = ins->params.attn_decode;
  const int32_t d = p.shape.head_dim, nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads, g = p.kv_head, split = p.split, n_splits = p.n_splits;
  const float scale = p.scale;
  const int32_t group = nq / nkv;
  const int lane = tid & 31, w = tid >> 5, nw = nt >> 5;
  const int nc = d / VE;
  int L = 1;
  while (L < nc && L < 32)
    L <<= 1;
  const int P = 32 / L;
  const int J = (nc + L - 1) / L;
  const int sub = lane / L, li = lane & (L - 1);
  const uint64_t rowb = (uint64_t) nkv * d * ES;
  const unsigned char *kbase = kc + (uint64_t) g * d * ES + (uint64_t) li * VE * ES;
  const unsigned char *vbase = vc + (uint64_t) g * d * ES + (uint64_t) li * VE * ES;
  const int R = AMK_ATTN_STAGE / nw; /* staged floats per warp and round */

  for (int32_t h0 = 0; h0 < group; h0 += HG)
    {
      const int hc = min (HG, group - h0);
      const int64_t qh = (int64_t) g * group + h0; /* first query head of the pass */
      float m[HG], l[HG], acc[HG][EPL];

      for (int i = tid; i < hc * d; i += nt)
        s_stage[i] = q[qh * d + i];
      amk_sync ();

#pragma unroll
      for (int hh = 0; hh < HG; hh++)
        {
          m[hh] = -INFINITY;
          l[hh] = 0.0f;
#pragma unroll
          for (int e = 0; e < EPL; e++)
            acc[hh][e] = 0.0f;
        }

      if (run)
        for (int32_t t0 = start + w * P; t0 < end; t0 += nw * P) /* uniform over the warp */
          {
            const int32_t t = t0 + sub;
            const bool valid = t < end;
            chunk_t kk[JMAX], vv[JMAX];

#pragma unroll
            for (int j = 0; j < JMAX; j++)
              {
                if (valid && j < J && li + j * L < nc)
                  {
                    const uint64_t off = (uint64_t) t * rowb + (uint64_t) j * L * VE * ES;
                    kk[j].load (kbase + off);
                    vv[j].load (vbase + off);
                  }
                else
                  {
                    kk[j].zero ();
                    vv[j].zero ();
                  }
              }

            float s[HG];
#pragma unroll
            for (int hh = 0; hh < HG; hh++)
              {
                float part = 0.0f;
                if (hh < hc)
#pragma unroll
                  for (int j = 0; j < JMAX; j++)
                    if (j < J && li + j * L < nc)
                      part = amk_attn_q_dot<VE> (s_stage + hh * d + (li + j * L) * VE, kk[j], part);
                s[hh] = part;
              }
            for (int off = L >> 1; off > 0; off >>= 1)
#pragma unroll
              for (int hh = 0; hh < HG; hh++)
                if (hh < hc)
                  s[hh] += __shfl_xor_sync (0xffffffffu, s[hh], off);

            if (valid)
#pragma unroll
              for (int hh = 0; hh < HG; hh++)
                if (hh < hc)
                  {
                    const float sc = s[hh] * scale;
                    const float mn = fmaxf (m[hh], sc);
                    const float corr = expf (m[hh] - mn);
                    const float pe = expf (sc - mn);
                    l[hh] = fmaf (l[hh], corr, pe);
#pragma unroll
                    for (int j = 0; j < JMAX; j++)
#pragma unroll
                      for (int e = 0; e < VE; e++)
                        acc[hh][j * VE + e] = fmaf (acc[hh][j * VE + e], corr, pe * vv[j].get (e));
                    m[hh] = mn;
                  }
          }

      /* the P position groups of the warp */
      for (int off = L; off < 32; off <<= 1)
#pragma unroll
        for (int hh = 0; hh < HG; hh++)
          if (hh < hc)
            {
              const float mo = __shfl_xor_sync (0xffffffffu, m[hh], off);
              const float lo = __shfl_xor_sync (0xffffffffu, l[hh], off);
              float a, b;
              amk_attn_weights (m[hh], mo, &a, &b, &m[hh]);
              l[hh] = l[hh] * a + lo * b;
#pragma unroll
              for (int e = 0; e < EPL; e++)
                acc[hh][e] = acc[hh][e] * a + __shfl_xor_sync (0xffffffffu, acc[hh][e], off) * b;
            }

      /* the warps: (m, l) through shared memory, then acc summed in a fixed order */
      if (lane == 0)
#pragma unroll
        for (int hh = 0; hh < HG; hh++)
          if (hh < hc)
            {
              s_ml[(w * HG + hh) * 2] = m[hh];
              s_ml[(w * HG + hh) * 2 + 1] = l[hh];
            }
      amk_sync ();

      float cw[HG];
#pragma unroll
      for (int hh = 0; hh < HG; hh++)
        {
          cw[hh] = 0.0f;
          if (hh < hc)
            {
              float big = -INFINITY;
              for (int u = 0; u < nw; u++)
                big = fmaxf (big, s_ml[(u * HG + hh) * 2]);
              cw[hh] = m[hh] == -INFINITY ? 0.0f : expf (m[hh] - big);
              if (tid == hh && run)
                {
                  float sum = 0.0f;
                  for (int u = 0; u < nw; u++)
                    {
                      const float mu = s_ml[(u * HG + hh) * 2];
                      if (mu != -INFINITY)
                        sum += expf (mu - big) * s_ml[(u * HG + hh) * 2 + 1];
                    }
                  float *out = partial + ((uint64_t) (qh + hh) * n_splits + split) * (d + 2);
                  out[d] = big;
                  out[d + 1] = sum;
                }
            }
        }

      const int X = hc * d;
      for (int r0 = 0; r0 < X; r0 += R)
        {
          if (sub == 0)
#pragma unroll
            for (int hh = 0; hh < HG; hh++)
              if (hh < hc)
#pragma unroll
                for (int j = 0; j < JMAX; j++)
                  if (j < J && li + j * L < nc)
#pragma unroll
                    for (int e = 0; e < VE; e++)
                      {
                        const int x = hh * d + (li + j * L) * VE + e - r0;
                        if (x >= 0 && x < R)
                          s_stage[w * R + x] = acc[hh][j * VE + e] * cw[hh];
                      }
          amk_sync ();
          const int n = min (R, X - r0);
          for (int x = tid; x < n; x += nt)
            {
              float sum = 0.0f;
              for (int u = 0; u < nw; u++)
                sum += s_stage[u * R + x];
              const int hh = (r0 + x) / d, c = (r0 + x) - hh * d;
              if (run)
                partial[((uint64_t) (qh + hh) * n_splits + split) * (d + 2) + c] = sum;
            }
          amk_sync ();
        }
    }
}

/* ATTN_DECODE for a short split (the decode case): two exact passes instead of an online
 * softmax per warp and a merge of the warps' partial results, whose serial loops made
 * the instruction cost several microseconds even with no position at all. Lane l holds
 * elements l E .. l E + E - 1 of a row (E = D / 32) and the group's query heads in
 * registers. (1) warp w scores positions w, w + nw, ...: one K load, a dot per head,
 * a warp sum; the scores go to shared memory. (2) warp h takes head h's maximum m and
 * sum l of e^(s - m), and leaves e^(s - m) in place. (3) e^(s_t - m) V[t] in slices of
 * the positions: when a row is whole 16-byte chunks, at most 32 of them, warp (h, sh)
 * takes head h and lane l the chunk l mod NC of the positions of slice
 * sh (32 / NC) + l / NC, one 16-byte load per position, and shuffles add the warp's
 * slices (the splits of a short context are a few hundred positions: a thread's loads
 * stay in one round trip); otherwise thread (slice, h, c) sums element c over the slice
 * (S = nt / (G D) slices). Then thread (h, c) adds the slices in order and writes the
 * partial, and, when `out` is set (the only split with positions of a fused merge), the
 * result acc / l too. Three barriers, the K and V loads of a thread independent of each
 * other. Same partial layout as amk_attn_decode_run. */
template <bool BF, int E>
static __device__ __noinline__ void
amk_attn_decode_short (const amk_instruction_t *ins, float *partial, float *out, const float *q,
                       const unsigned char *kc, const unsigned char *vc, int32_t start,
                       int32_t end, bool run, int tid, int nt, float *s_stage, float *s_ml)
{
  constexpr int ES = BF ? 2 : 4;
  const amk_attn_decode_params_t &p = ins->params.attn_decode;
  const int32_t d = p.shape.head_dim, nq = p.shape.n_q_heads, nkv = p.shape.n_kv_heads, g = p.kv_head, split = p.split, n_splits = p.n_splits;
  const float scale = p.scale;
  const int group = nq / nkv;
  const int lane = tid & 31, w = tid >> 5, nw = nt >> 5;
  const int n = end - start;
  const uint64_t rowb = (uint64_t) nkv * d * ES;
  const int64_t qh0 = (int64_t) g * group;
  float *s_sc = s_stage;                /* [group][n] scores, then e^(s - m) */
  float *s_sum = s_stage + group * n;   /* [S][group D] partial sums */
  float qv[AMK_ATTN_SHORT_REGS];
  constexpr int VE = BF ? 8 : 4;        /* V elements per 16-byte chunk */
  const int nc = d / VE;
  const bool chunked = d % VE == 0 && nc <= 32 && 32 % nc == 0; /* uniform */

  /* (0) the split's V rows into the scratch shared memory (block-roles.cuh) with
   * cp.async: their round trip overlaps the K loads of (1) instead of following the
   * softmax. Uniform over the block. */
  const uint32_t vrow = (uint32_t) d * ES; /* bytes of this head's part of a row */
  const unsigned char *vsrc = vc + (uint64_t) start * rowb + (uint64_t) g * vrow;
  const bool vpre = chunked && vrow % 16 == 0 && rowb % 16 == 0 &&
                    (reinterpret_cast<uintptr_t> (vsrc) & 15) == 0 &&
                    (uint64_t) n * vrow <= amk_scratch_bytes ();

  /* RoPE fused (q is qkv; only this path rotates, amk_abi_rope_attn_fits): the rotated
   * query heads in shared memory, indexed like q (the group's first head at qh0 D); the
   * split that holds pos appends the new row to the caches, and its stores reach L2
   * before the barrier (__threadfence), since it reads the row back from there (keeping
   * the row in shared memory instead cost the megakernel's MATVEC registers). */
  if (amk_attn_ropes (ins))
    {
      const int32_t pos = reinterpret_cast<volatile int32_t *> (s_ml)[AMK_ATTN_SML_POS];
      const bool holds = start <= pos && pos < end;
      const volatile uint32_t *at = reinterpret_cast<volatile uint32_t *> (s_ml + AMK_ATTN_SML_TABLE);
      const float2 *cos_sin = reinterpret_cast<const float2 *> ((uint64_t) at[0] | (uint64_t) at[1] << 32);
      if (run)
        amk_attn_rope_stage (ins, q, cos_sin, const_cast<unsigned char *> (kc),
                             const_cast<unsigned char *> (vc), BF ? AMK_ABI_DTYPE_BF16 : AMK_ABI_DTYPE_F32,
                             pos, holds, tid, nt);
      if (holds)
        __threadfence ();
      amk_sync ();
      q = amk_attn_q_rot () - (ptrdiff_t) qh0 * d;
    }
  if (vpre && run)
    {
      const uint32_t per = vrow / 16, total = (uint32_t) n * per;
      const uint32_t dst = (uint32_t) __cvta_generic_to_shared (amk_scratch_smem ());
      for (uint32_t i = (uint32_t) tid; i < total; i += (uint32_t) nt)
        {
          const uint32_t t = i / per, c = i - t * per;
          asm volatile ("cp.async.cg.shared.global [%0], [%1], 16;"
                        : : "r"(dst + t * vrow + c * 16u), "l"(vsrc + (uint64_t) t * rowb + c * 16u)
                        : "memory");
        }
      asm volatile ("cp.async.commit_group;" : : : "memory");
    }

  /* (1) scores */
#pragma unroll
  for (int i = 0; i < AMK_ATTN_SHORT_REGS; i++)
    qv[i] = i / E < group ? q[(qh0 + i / E) * d + lane * E + i % E] : 0.0f;
  /* U positions per warp and round, their K loads in flight together: the rows of a
   * 128-position split cost one round trip (E = 2), not eight. The dot products of UP
   * positions at a time with the H query heads that fit the registers are summed over
   * the warp by a transposed butterfly: each step halves the values a lane holds and
   * sends the other half across, so that NV values cost about NV shuffles instead of
   * 5 NV, and the code, which runs once per layer and must come into the instruction
   * cache each time, is much shorter than a warp sum per value. The pairs are
   * amk_attn_warp_sum's, in the same order. */
  constexpr int U = E <= 2 ? 8 : E == 4 ? 4 : 2;
  constexpr int H = AMK_ATTN_SHORT_REGS / E;
  constexpr int UP = 8 / H < U ? (8 / H > 0 ? 8 / H : 1) : U;
  constexpr int NV = UP * H;           /* 8, 8, 8 or 2 values per part */
  constexpr int L = 32 / NV;           /* lanes that end with the same sum */
  static_assert (U % UP == 0 && NV * L == 32, "one sum per lane group");
  if (run)
    for (int t0 = w; t0 < n; t0 += U * nw)
      {
        float k[U][E];
#pragma unroll
        for (int u = 0; u < U; u++)
          {
            const int t = t0 + u * nw;
            const unsigned char *kp = kc + (uint64_t) (start + min (t, n - 1)) * rowb + ((uint64_t) g * d + lane * E) * ES;
#pragma unroll
            for (int e = 0; e < E; e++)
              k[u][e] = BF ? __uint_as_float ((uint32_t) reinterpret_cast<const uint16_t *> (kp)[e] << 16)
                           : reinterpret_cast<const float *> (kp)[e];
          }
#pragma unroll
        for (int u0 = 0; u0 < U; u0 += UP)
          {
            if (t0 + u0 * nw >= n) /* uniform over the warp */
              break;
            float v[NV];                 /* v[u H + h]: this lane's share of q_h . k_(u0 + u) */
#pragma unroll
            for (int u = 0; u < UP; u++)
#pragma unroll
              for (int h = 0; h < H; h++)
                {
                  float part = 0.0f;
#pragma unroll
                  for (int e = 0; e < E; e++)
                    part = fmaf (qv[h * E + e], k[u0 + u][e], part);
                  v[u * H + h] = part;
                }
#pragma unroll
            for (int step = 0; step < 5; step++)
              {
                const int o = 16 >> step, m = NV >> step; /* values held before the step */
                if (m > 1)
                  {
                    const bool upper = (lane & o) != 0;
#pragma unroll
                    for (int i = 0; i < m / 2; i++)
                      {
                        const float send = upper ? v[i] : v[i + m / 2];
                        const float keep = upper ? v[i + m / 2] : v[i];
                        v[i] = keep + __shfl_xor_sync (0xffffffffu, send, o);
                      }
                  }
                else
                  v[0] += __shfl_xor_sync (0xffffffffu, v[0], o);
              }
            /* every lane of group lane / L now holds the sum of value lane / L */
            const int u = lane / L / H, h = lane / L % H, t = t0 + (u0 + u) * nw;
            if (lane % L == 0 && h < group && t < n)
              s_sc[h * n + t] = v[0] * scale;
          }
      }
  amk_sync ();

  /* (2) softmax statistics, a warp per head */
  if (run)
    for (int h = w; h < group; h += nw)
      {
        float m = -INFINITY, l = 0.0f;
        for (int t = lane; t < n; t += 32)
          m = fmaxf (m, s_sc[h * n + t]);
        m = amk_attn_warp_max (m);
        for (int t = lane; t < n; t += 32)
          {
            const float e = expf (s_sc[h * n + t] - m);
            s_sc[h * n + t] = e;
            l += e;
          }
        l = amk_attn_warp_sum (l);
        if (lane == 0)
          {
            s_ml[2 * h] = m;
            s_ml[2 * h + 1] = l;
          }
      }
  if (vpre && run)
    asm volatile ("cp.async.wait_all;" : : : "memory"); /* (0)'s rows, published by the barrier */
  amk_sync ();

  /* (3) e^(s - m) V, in slices of the positions */
  const int G = group * d;
  int S;                         /* slices to add in phase (4), s_sum[S][G] */
  if (chunked)
    {
      const int lo = 32 / nc;    /* slices of one warp */
      const int SH = max (1, min (nw / group, AMK_ATTN_SHORT_SUMS / G));
      const int ST = SH * lo;
      S = SH;
      if (run)
        for (int task = w; task < group * SH; task += nw)
          {
            const int h = task % group, sh = task / group;
            const int cc = lane % nc;
            const unsigned char *vp = (vpre ? amk_scratch_smem () : vsrc) + cc * VE * ES;
            const uint64_t vstride = vpre ? vrow : rowb;
            float acc[VE] = {};
#pragma unroll 8
            for (int t = sh * lo + lane / nc; t < n; t += ST)
              {
                amk_attn_chunk<BF, VE> v;
                v.load (vp + (uint64_t) t * vstride);
                const float e = s_sc[h * n + t];
#pragma unroll
                for (int i = 0; i < VE; i++)
                  acc[i] = fmaf (e, v.get (i), acc[i]);
              }
            for (int o = nc; o < 32; o <<= 1)
#pragma unroll
              for (int i = 0; i < VE; i++)
                acc[i] += __shfl_xor_sync (0xffffffffu, acc[i], o);
            if (lane < nc)
#pragma unroll
              for (int i = 0; i < VE; i++)
                s_sum[sh * G + h * d + cc * VE + i] = acc[i];
          }
    }
  else
    {
      S = max (1, nt / G);
      if (run)
        for (int k = tid; k < S * G; k += nt)
          {
            const int slice = k / G, j = k - slice * G, h = j / d, c = j - h * d;
            const unsigned char *vp = vc + ((uint64_t) g * d + c) * ES;
            float acc = 0.0f;
#pragma unroll 8
            for (int t = slice; t < n; t += S)
              {
                const unsigned char *v = vp + (uint64_t) (start + t) * rowb;
                const float x = BF ? __uint_as_float ((uint32_t) *reinterpret_cast<const uint16_t *> (v) << 16)
                                   : *reinterpret_cast<const float *> (v);
                acc = fmaf (s_sc[h * n + t], x, acc);
              }
            s_sum[slice * G + j] = acc;
          }
    }
  amk_sync ();

  /* (4) the slices in order */
  if (run)
    for (int j = tid; j < G; j += nt)
      {
        const int h = j / d, c = j - h * d;
        float acc = 0.0f;
        for (int slice = 0; slice < S; slice++)
          acc += s_sum[slice * G + j];
        if (out != nullptr)
          out[(qh0 + h) * d + c] = acc / s_ml[2 * h + 1]; /* the merge of one split */
        float *o = partial + ((uint64_t) (qh0 + h) * n_splits + split) * (d + 2);
        o[c] = acc;
        if (c == 0)
          {
            o[d] = s_ml[2 * h];
            o[d + 1] = s_ml[2 * h + 1];
          }
      }
}

/* Whether amk_attn_decode_short takes the instruction: D of 32, 64, 128 or 256, the group's
 * query heads in AMK_ATTN_SHORT_REGS registers per lane, the scores and the slices in
 * the staging area (the slices' sums: at most max(nt, G D, AMK_ATTN_SHORT_SUMS)), at most
 * 16 heads (s_ml). */
static __device__ __forceinline__ bool
amk_attn_short_fits (int32_t d, int32_t group, int32_t n, int nt)
{
  const int32_t e = d / 32;

  return d % 32 == 0 && (e == 1 || e == 2 || e == 4 || e == 8) && group >= 1 && group <= 16 &&
         group * (d / 32) <= AMK_ATTN_SHORT_REGS &&
         (int64_t) group * n + max (max (nt, group * d), AMK_ATTN_SHORT_SUMS) <= AMK_ATTN_STAGE;
}

static __device__ __forceinline__ int
amk_attn_decode_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_device_program &prog,
                      int32_t early_pos, bool run, int tid, int nt, int32_t *s_pos, float *s_stage, float *s_ml,
                      int32_t *to_merge, int32_t *detail)
{
  const amk_attn_decode_params_t &p = ins->params.attn_decode;
  const int32_t d = p.shape.head_dim, max_ctx = p.shape.max_ctx, split = p.split, n_splits = p.n_splits;
  float *partial = reinterpret_cast<float *> (ctx->ptr[0]);
  const float *q = reinterpret_cast<const float *> (ctx->ptr[1]);
  const unsigned char *kc = ctx->ptr[2];
  const unsigned char *vc = amk_attn_buffer (prog, ins, 3);
  const int32_t group = p.shape.n_q_heads / p.shape.n_kv_heads;
  const bool bf = ctx->dtype == AMK_ABI_DTYPE_BF16;
  int32_t pos;

  *to_merge = 0;
  if (tid == 0 && amk_attn_ropes (ins)) /* published by amk_attn_read_pos's barrier */
    {
      const uint64_t table = reinterpret_cast<uint64_t> (amk_attn_buffer (prog, ins, 6));
      reinterpret_cast<uint32_t *> (s_ml)[AMK_ATTN_SML_TABLE] = (uint32_t) table;
      reinterpret_cast<uint32_t *> (s_ml)[AMK_ATTN_SML_TABLE + 1] = (uint32_t) (table >> 32);
    }
  if (!amk_attn_read_pos (reinterpret_cast<const int32_t *> (amk_attn_buffer (prog, ins, 4)),
                          early_pos, run, tid, s_pos, &pos))
    return AMK_ABORT_NONE;
  if (pos < 0 || pos >= max_ctx)
    {
      *detail = ins->buffers[4];
      return AMK_ABORT_CHECK;
    }

  /* positions 0 .. pos in chunks of max(ceil((pos + 1) / n_splits), min_split); this split's
   * share. 32-bit division (n <= 2^31, so the sum fits): a 64-bit one is a long call */
  const uint32_t n32 = (uint32_t) pos + 1u;
  const int64_t n = n32;
  const uint32_t chunk = max ((n32 + (uint32_t) n_splits - 1u) / (uint32_t) n_splits,
                              (uint32_t) max (p.min_split, 1));
  const int32_t start = (int32_t) min ((int64_t) split * chunk, n);
  const int32_t end = (int32_t) min ((int64_t) start + chunk, n);
  /* the splits that hold positions: the fused merge combines only those; when there is
   * one and it takes the short path, it writes the result itself and nobody merges
   * (every split of the group reaches the same verdict: the active split's length is n) */
  const int32_t active = (int32_t) ((n32 - 1u) / chunk + 1u);
  const bool direct = amk_attn_merges (ins) && active == 1 && amk_attn_short_fits (d, group, (int32_t) n32, nt);
  *to_merge = direct ? 0 : active;

  if (amk_attn_short_fits (d, group, end - start, nt))
    {
      float *out = direct && split == 0 ? reinterpret_cast<float *> (amk_attn_buffer (prog, ins, 5)) : nullptr;
      switch (d / 32)
        {
        case 2:  if (bf) amk_attn_decode_short<true, 2> (ins, partial, out, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
                 else amk_attn_decode_short<false, 2> (ins, partial, out, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
                 break;
        case 4:  if (bf) amk_attn_decode_short<true, 4> (ins, partial, out, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
                 else amk_attn_decode_short<false, 4> (ins, partial, out, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
                 break;
        case 8:  if (bf) amk_attn_decode_short<true, 8> (ins, partial, out, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
                 else amk_attn_decode_short<false, 8> (ins, partial, out, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
                 break;
        default: if (bf) amk_attn_decode_short<true, 1> (ins, partial, out, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
                 else amk_attn_decode_short<false, 1> (ins, partial, out, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
                 break;
        }
      return AMK_ABORT_NONE;
    }
  if (ctx->dtype == AMK_ABI_DTYPE_BF16)
    {
      if (d % 8 == 0)
        amk_attn_decode_run<true, 8> (ins, partial, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
      else
        amk_attn_decode_run<true, 2> (ins, partial, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
    }
  else
    {
      if (d % 4 == 0)
        amk_attn_decode_run<false, 4> (ins, partial, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
      else
        amk_attn_decode_run<false, 2> (ins, partial, q, kc, vc, start, end, run, tid, nt, s_stage, s_ml);
    }
  return AMK_ABORT_NONE;
}

/* ---- ATTN_REDUCE ---------------------------------------------------------------------- */

/* Merges the first n_used of the n_splits partials of query heads first .. end into out
 * (the others hold no position). Up to 32 splits: a warp per (head, 32 columns), lane s
 * holding split s's weight, so that a task costs one round trip whatever the head
 * dimension: its columns of every split load together with the weights' maxima and sums,
 * before the warp reductions need them (issued after them, they would add a second
 * round trip to the attention's critical path). More splits: a warp per head. The
 * partials were written by other blocks: loaded from L2 (.cg), never from a line this
 * SM's L1 may still hold from an earlier layer. */
static __device__ __forceinline__ void
amk_attn_merge (float *out, const float *partial, int32_t d, int32_t n_splits, int32_t n_used,
                uint32_t first, uint32_t end, int tid, int nt)
{
  const int lane = tid & 31;
  const uint64_t stride = (uint64_t) d + 2;

  if (n_used <= 32)
    {
      const uint32_t chunks = ((uint32_t) d + 31) / 32, tasks = (end - first) * chunks;
      for (uint32_t task = (uint32_t) tid >> 5; task < tasks; task += (uint32_t) nt >> 5)
        {
          const uint32_t h = first + task / chunks;
          const int32_t c = (int32_t) (task % chunks) * 32 + lane;
          const float *ph = partial + (uint64_t) h * n_splits * stride;
          const float m = lane < n_used ? __ldcg (ph + lane * stride + d) : -INFINITY;
          const float l = lane < n_used ? __ldcg (ph + lane * stride + d + 1) : 0.0f;
          float v[32];
#pragma unroll
          for (int32_t s = 0; s < 32; s++)
            v[s] = s < n_used && c < d ? __ldcg (ph + s * stride + c) : 0.0f;
          const float big = amk_attn_warp_max (m);
          const float wgt = m == -INFINITY ? 0.0f : expf (m - big);
          const float den = amk_attn_warp_sum (wgt * l);
          float num = 0.0f;
#pragma unroll
          for (int32_t s = 0; s < 32; s++)
            num = fmaf (__shfl_sync (0xffffffffu, wgt, s), v[s], num);
          if (c < d)
            out[(uint64_t) h * d + c] = num / den;
        }
      return;
    }
  for (uint32_t h = first + ((uint32_t) tid >> 5); h < end; h += (uint32_t) nt >> 5)
    {
      const float *ph = partial + (uint64_t) h * n_splits * stride;
      float big = -INFINITY, den = 0.0f;

      for (int32_t s = lane; s < n_used; s += 32)
        big = fmaxf (big, __ldcg (ph + s * stride + d));
      big = amk_attn_warp_max (big);
      for (int32_t s = lane; s < n_used; s += 32)
        {
          const float m = __ldcg (ph + s * stride + d);
          if (m != -INFINITY)
            den += expf (m - big) * __ldcg (ph + s * stride + d + 1);
        }
      den = amk_attn_warp_sum (den);
      for (int32_t c = lane; c < d; c += 32)
        {
          float num = 0.0f;
          for (int32_t s = 0; s < n_used; s++)
            {
              const float m = __ldcg (ph + s * stride + d);
              if (m != -INFINITY)
                num = fmaf (expf (m - big), __ldcg (ph + s * stride + c), num);
            }
          out[(uint64_t) h * d + c] = num / den;
        }
    }
}

static __device__ __forceinline__ void
amk_attn_reduce_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, int tid, int nt)
{
  const amk_attn_reduce_params_t &p = ins->params.attn_reduce;
  const uint32_t first = (uint32_t) p.head0;

  amk_attn_merge (reinterpret_cast<float *> (ctx->ptr[0]), reinterpret_cast<const float *> (ctx->ptr[1]),
                  p.head_dim, p.n_splits, p.n_splits, first, first + (uint32_t) p.n_heads, tid, nt);
}

/* ATTN_DECODE with the merge fused, after the block wrote its partial: one arrival on
 * counters[arrival_counter]; the block that completes the count (every split of this key/value head
 * has written its partial: each released it with its arrival) merges the first to_merge
 * splits (those with positions) of the group's heads. When the only split with positions
 * wrote the result itself, nobody arrives (a round trip saved). Uniform: thread 0 tells
 * the block through shared memory. */
static __device__ __forceinline__ void
amk_attn_arrive_and_merge (const amk_instruction_t *ins, const amk_device_program &prog, bool run,
                           int32_t to_merge, int tid, int nt, int32_t *s_last)
{
  const amk_attn_decode_params_t &p = ins->params.attn_decode;
  const int32_t n_splits = p.n_splits, group = p.shape.n_q_heads / p.shape.n_kv_heads;

  if (to_merge == 0)
    return; /* uniform: the result is written (or no warp ran); no arrival needed */
  amk_sync (); /* the whole partial is written */
  if (tid == 0)
    {
      int32_t last = 0;
      if (run)
        {
          uint32_t old;
          asm volatile ("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                        : "=r"(old) : "l"(prog.counters + p.arrival_counter) : "memory");
          last = old + 1u == (uint32_t) n_splits;
        }
      *s_last = last;
    }
  amk_sync ();
  if (*reinterpret_cast<volatile int32_t *> (s_last) && to_merge > 0)
    amk_attn_merge (reinterpret_cast<float *> (prog.buffers[ins->buffers[5]].addr),
                    reinterpret_cast<const float *> (prog.buffers[ins->buffers[0]].addr),
                    p.shape.head_dim, n_splits, to_merge, (uint32_t) (p.kv_head * group), (uint32_t) ((p.kv_head + 1) * group),
                    tid, nt);
}

/* ---- exec ------------------------------------------------------------------------------ */

/* Every thread of the block (run: this thread's warp passed its waits). Returns
 * AMK_ABORT_NONE, or a code with *detail, the same in every thread. */
static __device__ __forceinline__ int
amk_attention_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_device_program &prog,
                    int32_t early_pos, bool run, int tid, int nt, int32_t *detail)
{
  __shared__ __align__ (16) float s_stage[AMK_ATTN_STAGE];
  __shared__ float s_ml[AMK_ATTN_MAX_WARPS * AMK_ATTN_HEADS * 2];
  __shared__ int32_t s_pos;

  switch (ins->opcode)
    {
    case AMK_ABI_OP_ROPE_KV:
      return amk_rope_kv_exec (ctx, ins, prog, early_pos, run, tid, nt, &s_pos, detail);
    case AMK_ABI_OP_ATTN_DECODE:
      {
        const bool merges = amk_attn_merges (ins);
        if (merges && (uint32_t) ins->params.attn_decode.arrival_counter >= (uint32_t) prog.n_counters)
          {
            *detail = ins->params.attn_decode.arrival_counter;
            return AMK_ABORT_BAD_INDEX;
          }
        int32_t to_merge = 0;
        /* RoPE fused: the position in s_ml's tail, where the short path finds it (the
         * general path, never taken then, uses all of s_ml) */
        int32_t *pos_at = amk_attn_ropes (ins) ? reinterpret_cast<int32_t *> (s_ml + AMK_ATTN_SML_POS) : &s_pos;
        const int r = amk_attn_decode_exec (ctx, ins, prog, early_pos, run, tid, nt, pos_at, s_stage, s_ml,
                                            &to_merge, detail);
        if (r == AMK_ABORT_NONE && merges)
          amk_attn_arrive_and_merge (ins, prog, run, to_merge, tid, nt, &s_pos);
        return r;
      }
    case AMK_ABI_OP_ATTN_REDUCE:
      if (run)
        amk_attn_reduce_exec (ctx, ins, tid, nt);
      return AMK_ABORT_NONE;
    default:
      return AMK_ABORT_NONE;
    }
}

#endif /* AMK_OPS_ATTENTION_CUH */
