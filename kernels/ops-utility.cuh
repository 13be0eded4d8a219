/* ops-utility.cuh: the utility op family of the megakernel (NOP, COPY, FILL, ADD).
 * TRAP and GRID_SYNC are control ops: they need the scheduler's abort and polling
 * machinery and live in scheduler.cu; this file only accepts their opcodes.
 *
 * Every op comes in two halves:
 *   amk_utility_check(): run by thread 0 before the instruction's waits; validates the
 *     buffer refs, element ranges, dtypes and alignment and resolves the pointers into an
 *     amk_op_ctx in shared memory. Returns an AMK_ABORT_* code (0 = fine) and a detail.
 *   amk_utility_exec(): run by the whole block after the waits; never fails.
 *
 * Loads of buffers written during the launch use ordinary coherent loads (never
 * ld.global.nc / __ldg): another block may have produced the data after this block's
 * L1 was filled, and only the acquire on the counter makes it visible.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_UTILITY_CUH
#define AMK_OPS_UTILITY_CUH

#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "amk-abi.h"
#include "block-roles.cuh"

/* What every thread resolved for the block. MATVEC (ops-matvec.cuh) reuses the same
 * fields with its own meaning, so the context stays this small across the waits. */
struct amk_op_ctx {
  unsigned char *ptr[3];  /* b0, b1, b2 already offset to the first element */
  uint32_t       count;   /* elements (checked non-negative int32) */
  uint32_t       dtype;
  uint32_t       esize;
  uint32_t       pattern; /* FILL: the converted value, replicated over 32 bits */
};

/* The op families' checks, in ops-vector.cuh and ops-attention.cuh (included after this
 * file by scheduler.cu): every thread validates the instruction's operands (what does not
 * depend on device data) and resolves what it can into ctx. */
static __device__ __forceinline__ int
amk_vector_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                  amk_op_ctx *ctx, int32_t *detail);
static __device__ __forceinline__ int
amk_attention_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                     amk_op_ctx *ctx, int32_t *detail);

/* MATVEC's check, in ops-matvec.cuh (included after this file by scheduler.cu). */
static __device__ __forceinline__ int
amk_matvec_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                  amk_op_ctx *ctx, int32_t *detail);

/* The many-token ops' checks, in ops-matmul.cuh and ops-attention-rows.cuh. */
static __device__ __noinline__ int
amk_matmul_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                  amk_op_ctx *ctx, int32_t *detail);
static __device__ __noinline__ int
amk_attention_rows_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                          amk_op_ctx *ctx, int32_t *detail);

static __device__ __forceinline__ uint32_t
amk_dtype_size (uint32_t dtype)
{
  switch (dtype)
    {
    case AMK_ABI_DTYPE_F32:
    case AMK_ABI_DTYPE_I32:
      return 4;
    case AMK_ABI_DTYPE_F16:
    case AMK_ABI_DTYPE_BF16:
      return 2;
    case AMK_ABI_DTYPE_U8:
      return 1;
    default:
      return 0;
    }
}

/* log2 of an element size of 1, 2 or 4: the checks divide by shifting (a 64-bit
 * division is a long call on the GPU, and every warp runs every check) */
static __device__ __forceinline__ uint32_t
amk_size_shift (uint32_t es)
{
  return es >> 1;
}

#define AMK_ANY_DTYPE 0xffffffffu

/* Resolves buffer ref `slot` of `ins` for elements [off, off + count). want_dtype is the
 * dtype the op requires (AMK_ANY_DTYPE: take the buffer's). */
static __device__ __forceinline__ int
amk_resolve_ref (const amk_instruction_t *ins, int slot,
                 const amk_buffer_t *buffers, int32_t n_buffers,
                 int32_t off, int32_t count, uint32_t want_dtype,
                 unsigned char **ptr, uint32_t *dtype, int32_t *detail)
{
  const int32_t ref = ins->buffers[slot];

  if (ref < 0 || ref >= n_buffers)
    {
      *detail = ref;
      return AMK_ABORT_BAD_INDEX;
    }
  *detail = ref;

  const amk_buffer_t *b = buffers + ref;
  const uint64_t addr = b->addr;
  const uint64_t size = b->size_bytes;
  const uint32_t dt = b->dtype;
  const uint32_t es = amk_dtype_size (dt);

  if (es == 0 || (want_dtype != AMK_ANY_DTYPE && dt != want_dtype))
    return AMK_ABORT_CHECK;
  if (off < 0 || count < 0)
    return AMK_ABORT_CHECK;
  if (((uint64_t) off + (uint64_t) count) * es > size)
    return AMK_ABORT_CHECK;
  if ((addr & (es - 1)) != 0)
    return AMK_ABORT_CHECK; /* a misaligned access would kill the context */

  *ptr = reinterpret_cast<unsigned char *> (addr + (uint64_t) off * es);
  *dtype = dt;
  return AMK_ABORT_NONE;
}

/* Partially overlapping byte ranges: the parallel ops would race. Identical ranges
 * (in-place) are fine. */
static __device__ __forceinline__ bool
amk_ranges_conflict (const unsigned char *x, const unsigned char *y, uint64_t n)
{
  return n != 0 && x != y && x < y + n && y < x + n;
}

static __device__ __forceinline__ uint32_t
amk_fill_pattern (uint32_t dtype, float v)
{
  uint32_t e;

  switch (dtype)
    {
    case AMK_ABI_DTYPE_F32:
      return __float_as_uint (v);
    case AMK_ABI_DTYPE_F16:
      e = __half_as_ushort (__float2half_rn (v));
      return e | (e << 16);
    case AMK_ABI_DTYPE_BF16:
      e = __bfloat16_as_ushort (__float2bfloat16_rn (v));
      return e | (e << 16);
    case AMK_ABI_DTYPE_I32:
      return (uint32_t) __float2int_rz (v); /* toward zero; saturates, NaN -> 0 */
    case AMK_ABI_DTYPE_U8:
      e = (uint32_t) __float2int_rz (v) & 0xffu;
      return e * 0x01010101u;
    default:
      return 0;
    }
}

/* Thread 0: validate and resolve. Returns AMK_ABORT_NONE or an abort code. */
static __device__ __forceinline__ int
amk_utility_check (const amk_instruction_t *ins,
                   const amk_buffer_t *buffers, int32_t n_buffers,
                   amk_op_ctx *ctx, int32_t *detail, bool many)
{
  const amk_params_t *p = &ins->params;
  uint32_t dt = 0;
  int code;

  switch (ins->opcode)
    {
    case AMK_ABI_OP_NOP:
    case AMK_ABI_OP_TRAP:
    case AMK_ABI_OP_GRID_SYNC:
      return AMK_ABORT_NONE;

    case AMK_ABI_OP_COPY:
      {
        unsigned char *d, *s;
        if ((code = amk_resolve_ref (ins, 0, buffers, n_buffers, p->copy.dst_offset, p->copy.count,
                                     AMK_ANY_DTYPE, &d, &dt, detail)))
          return code;
        if ((code = amk_resolve_ref (ins, 1, buffers, n_buffers, p->copy.src_offset, p->copy.count,
                                     dt, &s, &dt, detail)))
          return code;
        const uint32_t es = amk_dtype_size (dt);
        if (amk_ranges_conflict (d, s, (uint64_t) p->copy.count * es))
          {
            *detail = ins->buffers[0];
            return AMK_ABORT_CHECK;
          }
        ctx->ptr[0] = d;
        ctx->ptr[1] = s;
        ctx->count = (uint32_t) p->copy.count;
        ctx->dtype = dt;
        ctx->esize = es;
        return AMK_ABORT_NONE;
      }

    case AMK_ABI_OP_FILL:
      {
        unsigned char *d;
        if ((code = amk_resolve_ref (ins, 0, buffers, n_buffers, p->fill.offset, p->fill.count,
                                     AMK_ANY_DTYPE, &d, &dt, detail)))
          return code;
        ctx->ptr[0] = d;
        ctx->count = (uint32_t) p->fill.count;
        ctx->dtype = dt;
        ctx->esize = amk_dtype_size (dt);
        ctx->pattern = amk_fill_pattern (dt, p->fill.value);
        return AMK_ABORT_NONE;
      }

    case AMK_ABI_OP_ADD:
      {
        unsigned char *d, *a, *b;
        if ((code = amk_resolve_ref (ins, 0, buffers, n_buffers, p->add.dst_offset, p->add.count,
                                     AMK_ANY_DTYPE, &d, &dt, detail)))
          return code;
        if ((code = amk_resolve_ref (ins, 1, buffers, n_buffers, p->add.a_offset, p->add.count,
                                     dt, &a, &dt, detail)))
          return code;
        if ((code = amk_resolve_ref (ins, 2, buffers, n_buffers, p->add.b_offset, p->add.count,
                                     dt, &b, &dt, detail)))
          return code;
        const uint32_t es = amk_dtype_size (dt);
        const uint64_t n = (uint64_t) p->add.count * es;
        if (amk_ranges_conflict (d, a, n) || amk_ranges_conflict (d, b, n))
          {
            *detail = ins->buffers[0];
            return AMK_ABORT_CHECK;
          }
        ctx->ptr[0] = d;
        ctx->ptr[1] = a;
        ctx->ptr[2] = b;
        ctx->count = (uint32_t) p->add.count;
        ctx->dtype = dt;
        ctx->esize = es;
        return AMK_ABORT_NONE;
      }

    case AMK_ABI_OP_MATVEC:
      return amk_matvec_check (ins, buffers, n_buffers, ctx, detail);

    case AMK_ABI_OP_RMSNORM:
    case AMK_ABI_OP_SILU_MUL:
    case AMK_ABI_OP_EMBED:
    case AMK_ABI_OP_ARGMAX_PARTIAL:
    case AMK_ABI_OP_ARGMAX_FINAL:
      return amk_vector_check (ins, buffers, n_buffers, ctx, detail);

    case AMK_ABI_OP_ROPE_KV:
    case AMK_ABI_OP_ATTN_DECODE:
    case AMK_ABI_OP_ATTN_REDUCE:
      return amk_attention_check (ins, buffers, n_buffers, ctx, detail);

    case AMK_ABI_OP_MATMUL:
      if (many)
        return amk_matmul_check (ins, buffers, n_buffers, ctx, detail);
      break;

    case AMK_ABI_OP_ROPE_ROWS:
      return amk_attention_rows_check (ins, buffers, n_buffers, ctx, detail);

    case AMK_ABI_OP_ATTN_ROWS:
      if (many)
        return amk_attention_rows_check (ins, buffers, n_buffers, ctx, detail);
      break;

    default:
      break;
    }
  /* an unknown opcode, or a many-token op in the build without them */
  *detail = ins->opcode;
  return AMK_ABORT_BAD_OPCODE;
}

/* ---- element helpers ------------------------------------------------------------ */

template <uint32_t ES>
static __device__ __forceinline__ uint32_t
amk_ld_elem (const unsigned char *p, uint32_t i)
{
  if (ES == 4)
    return reinterpret_cast<const uint32_t *> (p)[i];
  else if (ES == 2)
    return reinterpret_cast<const uint16_t *> (p)[i];
  else
    return p[i];
}

template <uint32_t ES>
static __device__ __forceinline__ void
amk_st_elem (unsigned char *p, uint32_t i, uint32_t v)
{
  if (ES == 4)
    reinterpret_cast<uint32_t *> (p)[i] = v;
  else if (ES == 2)
    reinterpret_cast<uint16_t *> (p)[i] = (uint16_t) v;
  else
    p[i] = (unsigned char) v;
}

/* ---- COPY: byte-exact; 16-byte vectors when both sides share the alignment mod 16,
 * otherwise one element (ES bytes, always aligned) at a time. Counts fit in int32, so
 * element and vector indices are 32-bit. */

template <uint32_t ES>
static __device__ __forceinline__ void
amk_copy_run (unsigned char *d, const unsigned char *s, uint32_t n, int tid, int nt)
{
  const uintptr_t da = reinterpret_cast<uintptr_t> (d);
  const uintptr_t sa = reinterpret_cast<uintptr_t> (s);

  if (((da ^ sa) & 15) != 0)
    {
#pragma unroll 4
      for (uint32_t i = tid; i < n; i += nt)
        amk_st_elem<ES> (d, i, amk_ld_elem<ES> (s, i));
      return;
    }

  constexpr uint32_t PER_VEC = 16 / ES;
  const uint32_t head = min ((uint32_t) (((16 - (da & 15)) & 15) / ES), n);
  if ((uint32_t) tid < head)
    amk_st_elem<ES> (d, tid, amk_ld_elem<ES> (s, tid));
  const uint32_t body = (n - head) / PER_VEC;
  int4 *d4 = reinterpret_cast<int4 *> (d + head * ES);
  const int4 *s4 = reinterpret_cast<const int4 *> (s + head * ES);
  uint32_t i = tid;
  /* four 16-byte loads in flight per thread */
  for (; i + 3u * nt < body; i += 4u * nt)
    {
      const int4 v0 = s4[i];
      const int4 v1 = s4[i + nt];
      const int4 v2 = s4[i + 2u * nt];
      const int4 v3 = s4[i + 3u * nt];
      d4[i] = v0;
      d4[i + nt] = v1;
      d4[i + 2u * nt] = v2;
      d4[i + 3u * nt] = v3;
    }
  for (; i < body; i += nt)
    d4[i] = s4[i];
  const uint32_t t0 = head + body * PER_VEC;
  if ((uint32_t) tid < n - t0)
    amk_st_elem<ES> (d, t0 + tid, amk_ld_elem<ES> (s, t0 + tid));
}

/* ---- FILL ------------------------------------------------------------------------ */

template <uint32_t ES>
static __device__ __forceinline__ void
amk_fill_run (unsigned char *d, uint32_t n_elems, uint32_t pattern, int tid, int nt)
{
  const uintptr_t da = reinterpret_cast<uintptr_t> (d);
  /* d is aligned to ES, so the head to the next 16-byte boundary is whole elements */
  const uint32_t head = min ((uint32_t) (((16 - (da & 15)) & 15) / ES), n_elems);
  if ((uint32_t) tid < head)
    amk_st_elem<ES> (d, tid, pattern);
  const uint32_t body = (n_elems - head) / (16 / ES);
  uint4 *d4 = reinterpret_cast<uint4 *> (d + head * ES);
  const uint4 v = make_uint4 (pattern, pattern, pattern, pattern);
#pragma unroll 4
  for (uint32_t i = tid; i < body; i += nt)
    d4[i] = v;
  const uint32_t t0 = head + body * (16 / ES);
  if ((uint32_t) tid < n_elems - t0)
    amk_st_elem<ES> (d, t0 + tid, pattern);
}

/* ---- ADD: floats through fp32 with RNE stores, integers wrapping ----------------- */

template <uint32_t DT> struct amk_add_op;

template <> struct amk_add_op<AMK_ABI_DTYPE_F32> {
  static constexpr uint32_t ES = 4;
  static __device__ __forceinline__ uint32_t elem (uint32_t a, uint32_t b)
  { return __float_as_uint (__uint_as_float (a) + __uint_as_float (b)); }
  static __device__ __forceinline__ uint32_t word (uint32_t a, uint32_t b) { return elem (a, b); }
};

template <> struct amk_add_op<AMK_ABI_DTYPE_I32> {
  static constexpr uint32_t ES = 4;
  static __device__ __forceinline__ uint32_t elem (uint32_t a, uint32_t b) { return a + b; }
  static __device__ __forceinline__ uint32_t word (uint32_t a, uint32_t b) { return a + b; }
};

template <> struct amk_add_op<AMK_ABI_DTYPE_F16> {
  static constexpr uint32_t ES = 2;
  static __device__ __forceinline__ uint32_t elem (uint32_t a, uint32_t b)
  {
    const float s = __half2float (__ushort_as_half ((unsigned short) a)) +
                    __half2float (__ushort_as_half ((unsigned short) b));
    return __half_as_ushort (__float2half_rn (s));
  }
  static __device__ __forceinline__ uint32_t word (uint32_t a, uint32_t b)
  { return elem (a & 0xffffu, b & 0xffffu) | (elem (a >> 16, b >> 16) << 16); }
};

template <> struct amk_add_op<AMK_ABI_DTYPE_BF16> {
  static constexpr uint32_t ES = 2;
  static __device__ __forceinline__ uint32_t elem (uint32_t a, uint32_t b)
  {
    const float s = __bfloat162float (__ushort_as_bfloat16 ((unsigned short) a)) +
                    __bfloat162float (__ushort_as_bfloat16 ((unsigned short) b));
    return __bfloat16_as_ushort (__float2bfloat16_rn (s));
  }
  static __device__ __forceinline__ uint32_t word (uint32_t a, uint32_t b)
  { return elem (a & 0xffffu, b & 0xffffu) | (elem (a >> 16, b >> 16) << 16); }
};

template <> struct amk_add_op<AMK_ABI_DTYPE_U8> {
  static constexpr uint32_t ES = 1;
  static __device__ __forceinline__ uint32_t elem (uint32_t a, uint32_t b) { return (a + b) & 0xffu; }
  static __device__ __forceinline__ uint32_t word (uint32_t a, uint32_t b) { return __vadd4 (a, b); }
};

template <uint32_t DT>
static __device__ __forceinline__ void
amk_add_run (unsigned char *d, const unsigned char *a, const unsigned char *b,
             uint32_t n, int tid, int nt)
{
  typedef amk_add_op<DT> op;
  constexpr uint32_t ES = op::ES;
  constexpr uint32_t PER_VEC = 16 / ES;
  const uintptr_t da = reinterpret_cast<uintptr_t> (d);
  const uintptr_t aa = reinterpret_cast<uintptr_t> (a);
  const uintptr_t ba = reinterpret_cast<uintptr_t> (b);

  if ((((da ^ aa) | (da ^ ba)) & 15) != 0)
    {
      for (uint32_t i = tid; i < n; i += nt)
        amk_st_elem<ES> (d, i, op::elem (amk_ld_elem<ES> (a, i), amk_ld_elem<ES> (b, i)));
      return;
    }

  const uint32_t head = min ((uint32_t) (((16 - (da & 15)) & 15) / ES), n);
  if ((uint32_t) tid < head)
    amk_st_elem<ES> (d, tid, op::elem (amk_ld_elem<ES> (a, tid), amk_ld_elem<ES> (b, tid)));

  const uint32_t body = (n - head) / PER_VEC;
  uint4 *d4 = reinterpret_cast<uint4 *> (d + head * ES);
  const uint4 *a4 = reinterpret_cast<const uint4 *> (a + head * ES);
  const uint4 *b4 = reinterpret_cast<const uint4 *> (b + head * ES);
#pragma unroll 2
  for (uint32_t i = tid; i < body; i += nt)
    {
      const uint4 x = a4[i];
      const uint4 y = b4[i];
      uint4 r;
      r.x = op::word (x.x, y.x);
      r.y = op::word (x.y, y.y);
      r.z = op::word (x.z, y.z);
      r.w = op::word (x.w, y.w);
      d4[i] = r;
    }

  const uint32_t t0 = head + body * PER_VEC;
  if ((uint32_t) tid < n - t0)
    {
      const uint32_t i = t0 + tid;
      amk_st_elem<ES> (d, i, op::elem (amk_ld_elem<ES> (a, i), amk_ld_elem<ES> (b, i)));
    }
}

/* Whole block: run the op thread 0 resolved into ctx. */
static __device__ __forceinline__ void
amk_utility_exec (uint32_t opcode, const amk_op_ctx *sctx, int tid, int nt)
{
  switch (opcode)
    {
    case AMK_ABI_OP_COPY:
      {
        unsigned char *d = sctx->ptr[0];
        const unsigned char *s = sctx->ptr[1];
        const uint32_t n = sctx->count;
        switch (sctx->esize)
          {
          case 4: amk_copy_run<4> (d, s, n, tid, nt); break;
          case 2: amk_copy_run<2> (d, s, n, tid, nt); break;
          default: amk_copy_run<1> (d, s, n, tid, nt); break;
          }
        break;
      }

    case AMK_ABI_OP_FILL:
      {
        unsigned char *d = sctx->ptr[0];
        const uint32_t n = sctx->count;
        const uint32_t pat = sctx->pattern;
        switch (sctx->esize)
          {
          case 4: amk_fill_run<4> (d, n, pat, tid, nt); break;
          case 2: amk_fill_run<2> (d, n, pat, tid, nt); break;
          default: amk_fill_run<1> (d, n, pat, tid, nt); break;
          }
        break;
      }

    case AMK_ABI_OP_ADD:
      {
        unsigned char *d = sctx->ptr[0];
        const unsigned char *a = sctx->ptr[1];
        const unsigned char *b = sctx->ptr[2];
        const uint32_t n = sctx->count;
        switch (sctx->dtype)
          {
          case AMK_ABI_DTYPE_F32:  amk_add_run<AMK_ABI_DTYPE_F32> (d, a, b, n, tid, nt); break;
          case AMK_ABI_DTYPE_F16:  amk_add_run<AMK_ABI_DTYPE_F16> (d, a, b, n, tid, nt); break;
          case AMK_ABI_DTYPE_BF16: amk_add_run<AMK_ABI_DTYPE_BF16> (d, a, b, n, tid, nt); break;
          case AMK_ABI_DTYPE_I32:  amk_add_run<AMK_ABI_DTYPE_I32> (d, a, b, n, tid, nt); break;
          default:                 amk_add_run<AMK_ABI_DTYPE_U8> (d, a, b, n, tid, nt); break;
          }
        break;
      }

    default: /* NOP; TRAP and GRID_SYNC ran in the scheduler, MATVEC has its own exec */
      break;
    }
}

#endif /* AMK_OPS_UTILITY_CUH */
