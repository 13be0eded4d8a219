/* amk-abi.h: the plain-old-data layout shared by the host library (gcc) and the
 * megakernel (nvcc). Plain C11, fixed-width types only, no GLib. Every struct size is
 * pinned below so a change on one side cannot silently drift from the other.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_ABI_H
#define AMK_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever any struct below or the meaning of a field changes. */
#define AMK_ABI_VERSION 1

#define AMK_MAX_WAITS        4   /* waits per instruction */
#define AMK_MAX_BUFFER_REFS  8   /* buffer-table indices per instruction */
#define AMK_PARAM_SLOTS      12  /* 32-bit parameter slots per instruction */
#define AMK_NO_COUNTER       (-1)
#define AMK_NO_BUFFER        (-1)

/* Element types. The numbers are part of the ABI (AmkDType mirrors them). */
enum {
  AMK_ABI_DTYPE_F32  = 0,
  AMK_ABI_DTYPE_F16  = 1,
  AMK_ABI_DTYPE_BF16 = 2,
  AMK_ABI_DTYPE_I32  = 3,
  AMK_ABI_DTYPE_U8   = 4,
  /* block-quantized, laid out as GGUF's types of the same names: blocks of 32 (Q8_0,
   * Q5_0, Q5_1) or 256 values along a buffer's last dimension; no per-element size */
  AMK_ABI_DTYPE_Q8_0 = 5,
  AMK_ABI_DTYPE_Q4_K = 6,
  AMK_ABI_DTYPE_Q5_K = 7,
  AMK_ABI_DTYPE_Q6_K = 8,
  AMK_ABI_DTYPE_Q5_0 = 9,
  AMK_ABI_DTYPE_Q5_1 = 10,
  AMK_ABI_N_DTYPES
};

/* Opcodes. The numbers are part of the ABI (AmkOpcode mirrors them). What each op does
 * and what its operands b0, b1, ... (the instruction's buffer-table indices) are is said
 * at its parameter struct below. */
enum {
  AMK_ABI_OP_NOP            = 0,
  AMK_ABI_OP_COPY           = 1,
  AMK_ABI_OP_FILL           = 2,
  AMK_ABI_OP_ADD            = 3,
  AMK_ABI_OP_TRAP           = 4,
  AMK_ABI_OP_GRID_SYNC      = 5, /* whole-grid barrier; no parameters */
  AMK_ABI_OP_MATVEC         = 6,
  AMK_ABI_OP_RMSNORM        = 7,
  AMK_ABI_OP_SILU_MUL       = 8,
  AMK_ABI_OP_EMBED          = 9,
  AMK_ABI_OP_ARGMAX_PARTIAL = 10,
  AMK_ABI_OP_ARGMAX_FINAL   = 11,
  AMK_ABI_OP_ROPE_KV        = 12,
  AMK_ABI_OP_ATTN_DECODE    = 13,
  AMK_ABI_OP_ATTN_REDUCE    = 14,
  AMK_ABI_OP_MATMUL         = 15,
  AMK_ABI_OP_ROPE_ROWS      = 16,
  AMK_ABI_OP_ATTN_ROWS      = 17,
  AMK_ABI_N_OPS
};

/* The parameters of each op: one struct per op, a member of amk_params_t. Offsets are
 * element counts unless said otherwise. */

/* COPY: b0[dst_offset + i] = b1[src_offset + i] for i < count. */
typedef struct {
  int32_t dst_offset;
  int32_t src_offset;
  int32_t count;
} amk_copy_params_t;

/* FILL: b0[offset + i] = value for i < count. */
typedef struct {
  int32_t offset;
  int32_t count;
  float   value;
} amk_fill_params_t;

/* ADD: b0[dst_offset + i] = b1[a_offset + i] + b2[b_offset + i] for i < count. */
typedef struct {
  int32_t dst_offset;
  int32_t a_offset;
  int32_t b_offset;
  int32_t count;
} amk_add_params_t;

/* TRAP: aborts the launch; code is reported in the abort record. */
typedef struct {
  int32_t code;
} amk_trap_params_t;

/* MATVEC: y[row0 .. row0+rows) = W[row0 .. row0+rows, 0 .. k) x' (+ bias) (+ residual),
 * fp32 accumulation. b0 = y (F32 or BF16), b1 = W (BF16, F16 or F32, row-major [rows, k];
 * or block-quantized, CPU executor only),
 * b2 = x (F32 or BF16, [k]), b3 = bias or AMK_NO_BUFFER, b4 = residual or AMK_NO_BUFFER
 * (may be y itself: y += W x), b5 = RMSNORM weight or AMK_NO_BUFFER: then
 * x' = x / sqrt(mean(x^2) + eps) * b5, else x' = x. bias, residual and b5 are F32 or
 * BF16. k * sizeof(W elem) must be a multiple of 16 (a whole number of blocks for a
 * block-quantized W). A seventh buffer (n_buffers 7),
 * b6 = up (F32 or BF16, [k]) or AMK_NO_BUFFER, gates the input instead of a norm:
 * x' = silu(x) * b6, SILU_MUL fused into the matvec (b5 must then be absent).
 * Split-K: with k_len > 0 the tile covers only the columns k0 .. k0+k_len (whole 16-byte
 * chunks of a row, or whole blocks) and adds its share to y with atomic fp32 adds, so that the splits of
 * a row may run on several queues at once, in any order: y must be F32 and b4 y itself;
 * the bias is added by the slice with k0 = 0; x' is still normalised over all k columns.
 * k_len = 0: the whole row (k0 = 0). */
typedef struct {
  int32_t row0;
  int32_t rows;
  int32_t k;
  float   eps;
  int32_t k0;
  int32_t k_len;
} amk_matvec_params_t;

/* The vector ops (ops-vector.cuh). F32 or BF16 vectors unless said otherwise. */

/* RMSNORM: out[v*n + c] = x[v*n + c] / sqrt(mean_c x[v*n + c]^2 + eps) * w[c] for the
 * vectors v = vec0 .. vec0+n_vecs of length n (one vector, or one per head for Qwen3's
 * q/k norm). b0 = out, b1 = x (out may be x itself: in place), b2 = w [n]. */
typedef struct {
  int32_t n;
  int32_t vec0;
  int32_t n_vecs;
  float   eps;
} amk_rmsnorm_params_t;

/* SILU_MUL: out[offset + i] = silu(gate[offset + i]) * up[offset + i] for i < count;
 * silu(g) = g / (1 + e^-g). b0 = out, b1 = gate, b2 = up. */
typedef struct {
  int32_t offset;
  int32_t count;
} amk_silu_mul_params_t;

/* EMBED: out[col0 + c] = table[t * dim + col0 + c] for c < n_cols, t = tokens[token_index]
 * read on the device; b0 = out, b1 = table (BF16, F16 or F32, [vocab, dim]; or
 * block-quantized, CPU executor only), b2 = tokens
 * (I32). A token outside [0, vocab) aborts with AMK_ABORT_CHECK (detail = b2's index).
 * With n_tokens > 0, the rows of many tokens: out[j * dim + col0 + c] = table[tokens[j] *
 * dim + col0 + c] for j = token_index .. token_index+n_tokens (out [n, dim] beside tokens
 * [n]); n_tokens 0 is the one-token form above. */
typedef struct {
  int32_t token_index;
  int32_t col0;
  int32_t n_cols;
  int32_t dim;
  int32_t n_tokens;
} amk_embed_params_t;

/* ARGMAX_PARTIAL: val[slot], idx[slot] = the largest x[offset + i] for i < count and its
 * index (offset + i - index_base; the lowest index on ties; NaN counts as smaller than
 * everything). index_base (at most offset) makes the index one within a row of x: the
 * argmax of each row of logits [rows, vocab]; 0 in images that predate it.
 * b0 = val (F32), b1 = idx (I32), b2 = x (F32 or BF16). */
typedef struct {
  int32_t offset;
  int32_t count;
  int32_t slot;
  int32_t index_base;
} amk_argmax_partial_params_t;

/* ARGMAX_FINAL: out[out_index] = idx[j] of the largest val[j], first <= j < first +
 * n_partials (the lowest j on ties): the next token id, left on the device. first picks
 * one row's partials when several rows share val and idx; 0 in images that predate it.
 * b0 = out (I32), b1 = val (F32), b2 = idx (I32). */
typedef struct {
  int32_t n_partials;
  int32_t out_index;
  int32_t first;
} amk_argmax_final_params_t;

/* The attention ops (ops-attention.cuh). Heads of head_dim elements; n_q_heads query
 * heads, n_kv_heads key/value heads (GQA: query head h reads kv head h / (n_q_heads /
 * n_kv_heads)); caches hold max_ctx positions of n_kv_heads * head_dim elements; the
 * position is pos[0] (I32), read on the device; a position outside [0, max_ctx) aborts
 * with AMK_ABORT_CHECK. */
typedef struct {
  int32_t head_dim;
  int32_t n_q_heads;
  int32_t n_kv_heads;
  int32_t max_ctx;
} amk_attn_shape_t;

/* RoPE frequencies: angle pos * theta^(-2c/head_dim) for the rotate-half pair
 * (c, c + head_dim/2), with Llama-3 frequency scaling when factor > 0 (low_freq_factor,
 * high_freq_factor, original_context). */
typedef struct {
  float   theta;
  float   factor;
  float   low_freq_factor;
  float   high_freq_factor;
  int32_t original_context;
} amk_rope_freq_t;

/* ROPE_KV: rotates heads head0 .. head0+n_heads of the index space [query heads, then key
 * heads] in place, and for each key head in the range appends k and v at row pos of the
 * caches. b0 = q (F32), b1 = k (F32), b2 = v (F32), b3 = k cache, b4 = v cache (BF16 or
 * F32), b5 = pos (I32). */
typedef struct {
  amk_attn_shape_t shape;
  int32_t          head0;
  int32_t          n_heads;
  amk_rope_freq_t  freq;
} amk_rope_kv_params_t;

/* ATTN_DECODE: split `split` of n_splits of the positions 0 .. pos (chunks of
 * max(ceil((pos+1)/n_splits), min_split): min_split is the fewest positions worth a split
 * of their own, 0 or 1 for none) for the query heads of kv head kv_head: per query head
 * h, m = max score, l = sum e^(s - m), acc = sum e^(s - m) v with s = scale * q.k. Writes
 * partial[(h * n_splits + split) * (head_dim + 2) + ...] = acc[head_dim], m, l (an empty
 * split: m = -inf, l = 0, acc = 0). b0 = partial (F32), b1 = q (F32), b2 = k cache,
 * b3 = v cache, b4 = pos (I32). With a sixth buffer b5 = out (F32, [n_q_heads head_dim])
 * ATTN_REDUCE is fused: after writing its partial the block adds 1 to
 * counters[arrival_counter] (a counter that no instruction waits on or signals, used by
 * the n_splits splits of this key/value head only), and the block that brings it to
 * n_splits merges the splits of the group's query heads into out like ATTN_REDUCE. With
 * a seventh buffer b6 = inv_freq (F32, [head_dim/2]) RoPE is fused as well (the merge
 * must be): b1 is then qkv (F32, [(n_q_heads + 2 n_kv_heads) head_dim]: the query heads,
 * the key heads, the value heads, not rotated), the block rotates its group's query
 * heads (angle pos * inv_freq[c], as ROPE_KV), and the split that holds position pos
 * rotates key head kv_head and appends it and value head kv_head at row pos of the
 * caches before it attends; ROPE_KV and its stage are gone. Needs
 * amk_abi_rope_attn_fits (below). */
typedef struct {
  amk_attn_shape_t shape;
  int32_t          kv_head;
  int32_t          split;
  int32_t          n_splits;
  float            scale;
  int32_t          arrival_counter;
  int32_t          min_split;
} amk_attn_decode_params_t;

/* The many-token ops: a chunk of a prompt (prefill) or one token of each of several
 * sequences (batched decode) as M rows. Row r has its own position pos[r] (I32 [M]; a
 * negative position marks a padding row, which these ops skip) and its own sequence
 * seq[r] (I32 [M], or AMK_NO_BUFFER: every row is sequence 0), whose key/value cache is
 * the slot seq[r] of caches shaped [S, max_ctx, n_kv_heads * head_dim] (S = 1: the
 * decode step's [max_ctx, n_kv_heads * head_dim]). A position >= max_ctx or a sequence
 * outside [0, S) aborts with AMK_ABORT_CHECK. */

/* MATMUL: Y[m, n] = sum_c X'[m, c] W[n, c] (+ bias[n]) (+ R[m, n]) for the rows
 * m = m0 .. m0+m_count and the columns n = n0 .. n0+n_count, fp32 accumulation on tensor
 * cores (X' rounded to W's type first). b0 = Y (F32 or BF16, [M, N]), b1 = W (BF16 or
 * F16, row-major [N, k]; or block-quantized, CPU executor only), b2 = X (F32 or BF16, [M, k]), b3 = bias (F32 or BF16, [N]) or
 * AMK_NO_BUFFER, b4 = R (F32 or BF16, [M, N]) or AMK_NO_BUFFER (may be Y itself: Y += W X),
 * b5 = RMSNORM weight (F32 or BF16, [k]) or AMK_NO_BUFFER: then row by row
 * X'[m] = X[m] / sqrt(mean(X[m]^2) + eps) * b5, else X' = X; b6 = pos (I32 [M]), or
 * absent (n_buffers 6) or AMK_NO_BUFFER: a row whose position is negative is padding, and
 * its row of Y is unspecified afterwards (the CPU executor skips it, the GPU computes
 * it). M and N follow from the sizes of X and W; k must be a multiple of 8. */
typedef struct {
  int32_t m0;
  int32_t m_count;
  int32_t n0;
  int32_t n_count;
  int32_t k;
  float   eps;
} amk_matmul_params_t;

/* ROPE_ROWS: for the rows r = row0 .. row0+n_rows with pos[r] >= 0: optionally
 * normalises each query and key head (Qwen3's q/k norm: head / sqrt(mean(head^2) + eps)
 * * w), rotates them (RoPE at angle pos[r] as ROPE_KV, in place) and writes key head g
 * and value head g at row pos[r] of the caches' slot seq[r]. b0 = qkv (F32, [M,
 * (n_q_heads + 2 n_kv_heads) * head_dim]: per row the query heads, the key heads, the
 * value heads), b1 = k cache, b2 = v cache (BF16 or F32), b3 = pos, b4 = seq or
 * AMK_NO_BUFFER, b5 = q norm weight, b6 = k norm weight (F32 or BF16, [head_dim]; both or
 * neither AMK_NO_BUFFER). */
typedef struct {
  amk_attn_shape_t shape;
  int32_t          row0;
  int32_t          n_rows;
  amk_rope_freq_t  freq;
  float            eps;
} amk_rope_rows_params_t;

/* ATTN_ROWS: causal attention of many rows: for the rows r = row0 .. row0+n_rows with
 * pos[r] >= 0 and the query heads h of key/value head kv_head,
 * out[r, h] = sum_{p <= pos[r]} softmax_p(scale * q[r, h] . K[seq[r], p, kv_head]) V[...]
 * over the cached positions 0 .. pos[r] of the row's sequence (a prompt chunk's own keys
 * are appended by ROPE_ROWS before); a padding row gets zeros. b0 = out (F32, [M,
 * n_q_heads * head_dim]), b1 = qkv (F32, as ROPE_ROWS, rotated; only the query heads are
 * read), b2 = k cache, b3 = v cache, b4 = pos, b5 = seq or AMK_NO_BUFFER. */
typedef struct {
  amk_attn_shape_t shape;
  int32_t          kv_head;
  int32_t          row0;
  int32_t          n_rows;
  float            scale;
} amk_attn_rows_params_t;

/* ATTN_REDUCE: merges the n_splits splits of query heads head0 .. head0+n_heads:
 * out[h * head_dim + c] = sum_s e^(m_s - M) acc_s[c] / sum_s e^(m_s - M) l_s,
 * M = max_s m_s. b0 = out (F32), b1 = partial. */
typedef struct {
  int32_t head_dim;
  int32_t n_q_heads;
  int32_t n_splits;
  int32_t head0;
  int32_t n_heads;
} amk_attn_reduce_params_t;


/* The buffer slots an instruction writes, bit s for slot s (every slot for an unknown
 * opcode). The one table for the host verifier (no write to a constant buffer, the
 * aliasing rules), the launcher (a buffer that no instruction writes is CONSTANT for the
 * launch, so its loads may go out before an instruction's waits) and the device checks. */
#ifdef __CUDACC__
#define AMK_ABI_INLINE static __host__ __device__ __forceinline__
#else
#define AMK_ABI_INLINE static inline
#endif

AMK_ABI_INLINE uint32_t
amk_abi_written_slots (uint32_t opcode, uint32_t n_buffers)
{
  switch (opcode)
    {
    case AMK_ABI_OP_NOP:
    case AMK_ABI_OP_TRAP:
    case AMK_ABI_OP_GRID_SYNC:
      return 0;
    case AMK_ABI_OP_ARGMAX_PARTIAL:
      return 0x3u;  /* the values, the indices */
    case AMK_ABI_OP_ROPE_KV:
      return 0x1bu; /* q, k, the k and v caches */
    case AMK_ABI_OP_ROPE_ROWS:
      return 0x7u;  /* qkv, the k and v caches */
    case AMK_ABI_OP_ATTN_DECODE:
      /* the partials; the fused merge's output; with RoPE fused the caches too */
      return n_buffers >= 7 ? 0x2du : n_buffers >= 6 ? 0x21u : 0x1u;
    case AMK_ABI_OP_COPY:
    case AMK_ABI_OP_FILL:
    case AMK_ABI_OP_ADD:
    case AMK_ABI_OP_MATVEC:
    case AMK_ABI_OP_RMSNORM:
    case AMK_ABI_OP_SILU_MUL:
    case AMK_ABI_OP_EMBED:
    case AMK_ABI_OP_ARGMAX_FINAL:
    case AMK_ABI_OP_ATTN_REDUCE:
    case AMK_ABI_OP_MATMUL:
    case AMK_ABI_OP_ATTN_ROWS:
      return 0x1u;
    default:
      return (1u << AMK_MAX_BUFFER_REFS) - 1u;
    }
}

/* Whether an ATTN_DECODE with RoPE fused takes the GPU's short path at every position
 * (the only one that rotates): head dimension d of 32, 64, 128 or 256, a group of at
 * most 256 query elements (8 floats per lane), and a split of the longest context
 * (max(ceil(max_ctx / n_splits), min_split) positions) whose scores fit 1024 floats. */
AMK_ABI_INLINE int
amk_abi_rope_attn_fits (int64_t d, int64_t group, int64_t max_ctx, int64_t n_splits, int64_t min_split)
{
  const int64_t e = d / 32;
  int64_t chunk;

  if (d % 32 != 0 || !(e == 1 || e == 2 || e == 4 || e == 8) || group < 1 || group * e > 8 ||
      max_ctx < 1 || n_splits < 1)
    return 0;
  chunk = (max_ctx + n_splits - 1) / n_splits;
  if (chunk < min_split)
    chunk = min_split;
  return group * chunk <= 1024;
}

/* MATVEC's shared-memory pipeline (kernels/ops-matvec.cuh). With at least
 *   threads_per_block * AMK_MATVEC_RING_BYTES_PER_THREAD + 4 * K
 * bytes of dynamic shared memory (AmkLauncher:dynamic-shared-memory), W streams through
 * a ring in shared memory, 8 KiB per warp, that the warp's threads fill with cp.async
 * 2 KiB at a time, with x' staged as fp32, and a CONSTANT W starts loading before the
 * instruction's waits. With less (the default 0) W is loaded straight into registers,
 * 8 loads in flight per thread, and x' is read from global memory: correct, slower.
 * AMK_MATVEC_SMEM_BYTES (192 KiB) is the recommendation for 512 threads (the kernel's
 * maximum, __launch_bounds__(512)) and K <= 16384. These are tuning constants, not part
 * of any struct layout. */
#define AMK_MATVEC_RING_BYTES_PER_THREAD 256
#define AMK_MATVEC_SMEM_BYTES            (512 * AMK_MATVEC_RING_BYTES_PER_THREAD + 4 * 16384)

/* MATMUL's shared-memory need (kernels/ops-matmul.cuh) for a block of `threads`
 * threads (a multiple of 128): AMK_MATMUL_STAGES stages of a step of 64 K columns of
 * the block tile's threads / 2 rows of X and 128 rows of W in 16 bits, and 1 KiB to
 * align them to the tensor cores' swizzle. The launcher gives at least this much to a
 * program with a MATMUL. Tuning constants, not struct layout. */
#define AMK_MATMUL_STAGES 4
#define AMK_MATMUL_SMEM_BYTES(threads) (AMK_MATMUL_STAGES * ((threads) / 2 + 128) * 64 * 2 + 1024)

/* ATTN_ROWS's tensor-core path (kernels/ops-attention-rows.cuh): two buffers of 64 key
 * and 64 value rows of a 64-dimensional head, padded to 72 elements. With less dynamic
 * shared memory the op takes its warp path. */
#define AMK_ATTN_ROWS_SMEM_BYTES (2 * 2 * 64 * 72 * 2)

/* amk_buffer_t.flags */
#define AMK_BUFFER_FLAG_CONSTANT 0x1u /* never written during a launch: loads may run before waits */
#define AMK_BUFFER_FLAG_SCRATCH  0x2u /* lives in the scratch arena; addr is the arena offset in images */

/* Abort codes, written by the first block that aborts (first writer wins). */
enum {
  AMK_ABORT_NONE        = 0,
  AMK_ABORT_TIMEOUT     = 1, /* a wait outlived the watchdog budget */
  AMK_ABORT_TRAP        = 2, /* a TRAP instruction ran; detail = its code */
  AMK_ABORT_BAD_OPCODE  = 3, /* detail = the opcode */
  AMK_ABORT_BAD_INDEX   = 4, /* a counter or buffer index out of range; detail = the index */
  AMK_ABORT_CHECK       = 5, /* a device-side bounds / dtype check failed; detail = buffer index */
  AMK_ABORT_CANCELLED   = 6  /* the host raised the abort flag (GCancellable) */
};

typedef uint32_t amk_counter_t;

typedef struct {
  uint64_t addr;        /* device address (or arena offset in a serialized image) */
  uint64_t size_bytes;
  uint32_t dtype;       /* AMK_ABI_DTYPE_* */
  uint32_t flags;       /* AMK_BUFFER_FLAG_* */
} amk_buffer_t;

typedef struct {
  int32_t  counter;     /* index into the counter array */
  uint32_t target;      /* satisfied once counters[counter] >= target */
} amk_wait_t;

typedef struct {
  int32_t  counter;     /* AMK_NO_COUNTER for none */
  uint32_t amount;      /* added after the whole block finished the instruction */
} amk_signal_t;

/* An instruction's parameters: the member of its opcode. raw is for code that moves
 * parameters without reading them (copies, serialization, hashing). */
typedef union {
  uint32_t                    raw[AMK_PARAM_SLOTS];
  amk_copy_params_t           copy;
  amk_fill_params_t           fill;
  amk_add_params_t            add;
  amk_trap_params_t           trap;
  amk_matvec_params_t         matvec;
  amk_rmsnorm_params_t        rmsnorm;
  amk_silu_mul_params_t       silu_mul;
  amk_embed_params_t          embed;
  amk_argmax_partial_params_t argmax_partial;
  amk_argmax_final_params_t   argmax_final;
  amk_rope_kv_params_t        rope_kv;
  amk_attn_decode_params_t    attn_decode;
  amk_attn_reduce_params_t    attn_reduce;
  amk_matmul_params_t         matmul;
  amk_rope_rows_params_t      rope_rows;
  amk_attn_rows_params_t      attn_rows;
} amk_params_t;

typedef struct {
  uint16_t     opcode;
  uint16_t     flags;
  uint8_t      n_waits;
  uint8_t      n_buffers;
  uint16_t     reserved;
  amk_wait_t   waits[AMK_MAX_WAITS];
  amk_signal_t signal;
  int32_t      buffers[AMK_MAX_BUFFER_REFS];
  amk_params_t params;
} amk_instruction_t;

typedef struct {
  int32_t  code;        /* AMK_ABORT_* */
  int32_t  queue;       /* queue (block) that aborted */
  int32_t  instruction; /* position inside that queue */
  int32_t  counter;     /* counter waited on, or -1 */
  uint32_t observed;    /* its value when the wait gave up */
  uint32_t target;      /* the value it waited for */
  int32_t  detail;      /* trap code, opcode or index, by code */
  int32_t  sm_id;       /* SM the block ran on */
} amk_abort_record_t;

typedef struct {
  int32_t  queue;
  int32_t  instruction; /* position inside the queue */
  uint32_t sm_id;
  uint32_t opcode;
  uint64_t start_ns;    /* %globaltimer */
  uint64_t end_ns;
} amk_trace_event_t;

/* A tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned) of a bf16 matrix of
 * `rows` rows of k elements, in boxes of 64 columns by AMK_MATMUL_TMA_X_ROWS (X) or
 * AMK_MATMUL_TMA_W_ROWS (W) rows in the 128-byte swizzle. k = AMK_TENSOR_MAP_CONFLICT:
 * MATMULs read the buffer with different k, none through a map. */
typedef struct {
  uint64_t map[16];
  uint32_t k;
  uint32_t rows;
  uint32_t reserved[14];
} amk_tensor_map_t;

#define AMK_MATMUL_TMA_X_ROWS   256
#define AMK_MATMUL_TMA_W_ROWS   128
#define AMK_TENSOR_MAP_CONFLICT 0xffffffffu

/* The POD the kernel receives by value. */
typedef struct {
  const amk_buffer_t      *buffers;
  amk_counter_t           *counters;
  const amk_instruction_t *instructions;
  const int32_t           *sm_queue_flat;  /* instruction indices, queue after queue */
  const int32_t           *sm_queue_off;   /* start of queue q in sm_queue_flat */
  const int32_t           *sm_queue_len;   /* length of queue q */
  unsigned char           *scratch;
  int32_t                 *abort_flag;     /* non-zero: every block leaves */
  amk_abort_record_t      *abort_record;
  uint32_t                *grid_barrier;   /* two words: arrived, generation */
  amk_trace_event_t       *trace;          /* NULL: tracing off */
  uint64_t                 scratch_bytes;
  uint64_t                 watchdog_ns;    /* budget of one wait; 0 = no watchdog */
  int32_t                  n_buffers;
  int32_t                  n_counters;
  int32_t                  n_instructions;
  int32_t                  num_sms;        /* number of queues */
  uint32_t                 l2_prefetch;    /* instructions whose weights stream into L2
                                            * ahead: 0 none, 1 the current one before its
                                            * waits, 2 also the next (AMK_L2_PREFETCH_MAX) */
  uint32_t                 flags;          /* AMK_PROGRAM_* */
} amk_device_program;

/* amk_device_program.flags. CHECKED: the instruction table is followed by n_instructions
 * records of AMK_CHECKED_RECORD_BYTES that amk_check_program (scheduler.cu) wrote for
 * this buffer table: each instruction's verdict and resolved operands. The megakernel
 * then reads them (prefetched with the instruction) instead of checking every
 * instruction again in every launch; the verdicts are the same, so a bad instruction
 * still aborts the launch when its queue reaches it. */
#define AMK_PROGRAM_CHECKED      1u
/* MANY_TOKENS: the program has MATMUL or ATTN_ROWS: it runs on the kernel's build with
 * them (amk_megakernel_many); the other build aborts with BAD_OPCODE there. */
#define AMK_PROGRAM_MANY_TOKENS  2u
#define AMK_CHECKED_RECORD_BYTES 48
/* TENSOR_MAPS: the checked records are followed, at the next 128-byte boundary, by
 * 2 n_buffers amk_tensor_map_t the launcher wrote for this buffer table: [2 b] maps
 * buffer b as a MATMUL's X, [2 b + 1] as its W (k = 0: no map). The check kernel marks
 * the MATMULs whose two maps fit (AMK_MM_TMA in their resolved dtypes); those read X and W
 * with the tensor memory accelerator. */
#define AMK_PROGRAM_TENSOR_MAPS  4u
/* Run a program without MANY_TOKENS on the paged build when the launch has 512 threads:
 * a loader warp behind them streams MATVEC weights into shared-memory pages ahead of
 * their instructions (kernels/loader.cuh). */
#define AMK_PROGRAM_PAGED        8u
/* A launch of AMK_PAGED_LAUNCH_THREADS runs the paged build as AMK_PAGED_OP_THREADS op
 * threads and the loader warp: 15 warps of 128 registers fill the register file (17 warps
 * would get 96 each, the register file being handed out to warps in fours). */
#define AMK_PAGED_LAUNCH_THREADS 512
#define AMK_PAGED_OP_THREADS     448
/* Bytes from the instruction table's start (allocated 256-byte aligned) to the maps. */
#define AMK_TENSOR_MAPS_OFFSET(n_instructions) \
  (((uint64_t) (n_instructions) * (128 + AMK_CHECKED_RECORD_BYTES) + 127) & ~(uint64_t) 127)

#define AMK_L2_PREFETCH_MAX 2

#ifdef __cplusplus
#define AMK_STATIC_ASSERT(c, m) static_assert (c, m)
#else
#define AMK_STATIC_ASSERT(c, m) _Static_assert (c, m)
#endif

AMK_STATIC_ASSERT (sizeof (amk_buffer_t) == 24, "amk_buffer_t must be 24 bytes");
AMK_STATIC_ASSERT (sizeof (amk_wait_t) == 8, "amk_wait_t must be 8 bytes");
AMK_STATIC_ASSERT (sizeof (amk_signal_t) == 8, "amk_signal_t must be 8 bytes");
AMK_STATIC_ASSERT (sizeof (amk_params_t) == 48, "amk_params_t must be 48 bytes");
AMK_STATIC_ASSERT (sizeof (amk_instruction_t) == 128, "amk_instruction_t must be 128 bytes");
AMK_STATIC_ASSERT (sizeof (amk_abort_record_t) == 32, "amk_abort_record_t must be 32 bytes");
AMK_STATIC_ASSERT (sizeof (amk_trace_event_t) == 32, "amk_trace_event_t must be 32 bytes");
AMK_STATIC_ASSERT (sizeof (amk_device_program) == 128, "amk_device_program must be 128 bytes");
AMK_STATIC_ASSERT (sizeof (amk_tensor_map_t) == 192, "amk_tensor_map_t must be 192 bytes");

/* Each parameter stays in the 32-bit slot it had when the ops read numbered slots, so
 * images made then load unchanged. */
#define AMK_PARAM_AT(field, slot) \
  AMK_STATIC_ASSERT (offsetof (amk_params_t, field) == 4 * (slot), #field " must be slot " #slot)
AMK_PARAM_AT (copy.dst_offset, 0);
AMK_PARAM_AT (copy.src_offset, 1);
AMK_PARAM_AT (copy.count, 2);
AMK_PARAM_AT (fill.offset, 0);
AMK_PARAM_AT (fill.count, 1);
AMK_PARAM_AT (fill.value, 2);
AMK_PARAM_AT (add.dst_offset, 0);
AMK_PARAM_AT (add.a_offset, 1);
AMK_PARAM_AT (add.b_offset, 2);
AMK_PARAM_AT (add.count, 3);
AMK_PARAM_AT (trap.code, 0);
AMK_PARAM_AT (matvec.row0, 0);
AMK_PARAM_AT (matvec.rows, 1);
AMK_PARAM_AT (matvec.k, 2);
AMK_PARAM_AT (matvec.eps, 3);
AMK_PARAM_AT (matvec.k0, 4);
AMK_PARAM_AT (matvec.k_len, 5);
AMK_PARAM_AT (rmsnorm.n, 0);
AMK_PARAM_AT (rmsnorm.vec0, 1);
AMK_PARAM_AT (rmsnorm.n_vecs, 2);
AMK_PARAM_AT (rmsnorm.eps, 3);
AMK_PARAM_AT (silu_mul.offset, 0);
AMK_PARAM_AT (silu_mul.count, 1);
AMK_PARAM_AT (embed.token_index, 0);
AMK_PARAM_AT (embed.col0, 1);
AMK_PARAM_AT (embed.n_cols, 2);
AMK_PARAM_AT (embed.dim, 3);
AMK_PARAM_AT (embed.n_tokens, 4);
AMK_PARAM_AT (argmax_partial.offset, 0);
AMK_PARAM_AT (argmax_partial.count, 1);
AMK_PARAM_AT (argmax_partial.slot, 2);
AMK_PARAM_AT (argmax_final.n_partials, 0);
AMK_PARAM_AT (argmax_final.out_index, 1);
AMK_PARAM_AT (rope_kv.shape.head_dim, 0);
AMK_PARAM_AT (rope_kv.shape.n_q_heads, 1);
AMK_PARAM_AT (rope_kv.shape.n_kv_heads, 2);
AMK_PARAM_AT (rope_kv.shape.max_ctx, 3);
AMK_PARAM_AT (rope_kv.head0, 4);
AMK_PARAM_AT (rope_kv.n_heads, 5);
AMK_PARAM_AT (rope_kv.freq.theta, 6);
AMK_PARAM_AT (rope_kv.freq.factor, 7);
AMK_PARAM_AT (rope_kv.freq.low_freq_factor, 8);
AMK_PARAM_AT (rope_kv.freq.high_freq_factor, 9);
AMK_PARAM_AT (rope_kv.freq.original_context, 10);
AMK_PARAM_AT (attn_decode.shape.head_dim, 0);
AMK_PARAM_AT (attn_decode.shape.n_q_heads, 1);
AMK_PARAM_AT (attn_decode.shape.n_kv_heads, 2);
AMK_PARAM_AT (attn_decode.shape.max_ctx, 3);
AMK_PARAM_AT (attn_decode.kv_head, 4);
AMK_PARAM_AT (attn_decode.split, 5);
AMK_PARAM_AT (attn_decode.n_splits, 6);
AMK_PARAM_AT (attn_decode.scale, 7);
AMK_PARAM_AT (attn_decode.arrival_counter, 8);
AMK_PARAM_AT (attn_decode.min_split, 9);
AMK_PARAM_AT (attn_reduce.head_dim, 0);
AMK_PARAM_AT (attn_reduce.n_q_heads, 1);
AMK_PARAM_AT (attn_reduce.n_splits, 2);
AMK_PARAM_AT (attn_reduce.head0, 3);
AMK_PARAM_AT (attn_reduce.n_heads, 4);
AMK_PARAM_AT (matmul.m0, 0);
AMK_PARAM_AT (matmul.m_count, 1);
AMK_PARAM_AT (matmul.n0, 2);
AMK_PARAM_AT (matmul.n_count, 3);
AMK_PARAM_AT (matmul.k, 4);
AMK_PARAM_AT (matmul.eps, 5);
AMK_PARAM_AT (rope_rows.shape.head_dim, 0);
AMK_PARAM_AT (rope_rows.shape.max_ctx, 3);
AMK_PARAM_AT (rope_rows.row0, 4);
AMK_PARAM_AT (rope_rows.n_rows, 5);
AMK_PARAM_AT (rope_rows.freq.theta, 6);
AMK_PARAM_AT (rope_rows.freq.original_context, 10);
AMK_PARAM_AT (rope_rows.eps, 11);
AMK_PARAM_AT (attn_rows.shape.head_dim, 0);
AMK_PARAM_AT (attn_rows.kv_head, 4);
AMK_PARAM_AT (attn_rows.row0, 5);
AMK_PARAM_AT (attn_rows.n_rows, 6);
AMK_PARAM_AT (attn_rows.scale, 7);

#ifdef __cplusplus
}
#endif

#endif /* AMK_ABI_H */
