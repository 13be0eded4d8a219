/* amk-types.h: the enumerations of the public API.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <glib-object.h>

G_BEGIN_DECLS

/**
 * AmkDType:
 * @AMK_DTYPE_F32: 32-bit IEEE float
 * @AMK_DTYPE_F16: 16-bit IEEE float
 * @AMK_DTYPE_BF16: bfloat16
 * @AMK_DTYPE_I32: 32-bit signed integer
 * @AMK_DTYPE_U8: raw bytes
 * @AMK_DTYPE_Q8_0: blocks of 32 values: an f16 scale and 32 signed bytes (GGUF's
 *   Q8_0), 34 bytes
 * @AMK_DTYPE_Q4_K: blocks of 256 values in 4 bits with 6-bit sub-block scales and
 *   minimums (GGUF's Q4_K), 144 bytes
 * @AMK_DTYPE_Q5_K: blocks of 256 values in 5 bits, as Q4_K otherwise (GGUF's Q5_K),
 *   176 bytes
 * @AMK_DTYPE_Q6_K: blocks of 256 values in 6 bits with 8-bit sub-block scales (GGUF's
 *   Q6_K), 210 bytes
 * @AMK_DTYPE_Q5_0: blocks of 32 values in 5 bits with an f16 scale (GGUF's Q5_0),
 *   22 bytes
 * @AMK_DTYPE_Q5_1: blocks of 32 values in 5 bits with an f16 scale and minimum (GGUF's
 *   Q5_1), 24 bytes
 *
 * Element type of a buffer. The values are those of the ABI (`AMK_ABI_DTYPE_*`).
 *
 * The block-quantized types store a buffer's values in blocks laid out as in a GGUF
 * file: the last dimension must be a whole number of blocks. Only the matrix of
 * [method@Amk.Program.op_matvec] and [method@Amk.Program.op_matmul] and the table of
 * [method@Amk.Program.op_embed] and [method@Amk.Program.op_embed_rows] may have them,
 * and only where the executor runs them
 * ([method@Amk.Executor.supports_dtype]).
 */
typedef enum {
  AMK_DTYPE_F32 = 0,
  AMK_DTYPE_F16 = 1,
  AMK_DTYPE_BF16 = 2,
  AMK_DTYPE_I32 = 3,
  AMK_DTYPE_U8 = 4,
  AMK_DTYPE_Q8_0 = 5,
  AMK_DTYPE_Q4_K = 6,
  AMK_DTYPE_Q5_K = 7,
  AMK_DTYPE_Q6_K = 8,
  AMK_DTYPE_Q5_0 = 9,
  AMK_DTYPE_Q5_1 = 10
} AmkDType;

/**
 * AmkBufferRole:
 * @AMK_BUFFER_ROLE_INPUT: written by the host before a launch, read by instructions
 * @AMK_BUFFER_ROLE_OUTPUT: written by instructions, read back by the host
 * @AMK_BUFFER_ROLE_CONSTANT: never written during a launch (weights); its loads may be
 *   issued before an instruction's waits are satisfied
 * @AMK_BUFFER_ROLE_SCRATCH: intermediate values, placed in the scratch arena
 * @AMK_BUFFER_ROLE_STATE: kept across launches (a KV cache, a position)
 *
 * What a buffer is for; decides where it lives and who may write it.
 */
typedef enum {
  AMK_BUFFER_ROLE_INPUT = 0,
  AMK_BUFFER_ROLE_OUTPUT = 1,
  AMK_BUFFER_ROLE_CONSTANT = 2,
  AMK_BUFFER_ROLE_SCRATCH = 3,
  AMK_BUFFER_ROLE_STATE = 4
} AmkBufferRole;

/**
 * AmkOpcode:
 * @AMK_OPCODE_NOP: does nothing (still waits and signals)
 * @AMK_OPCODE_COPY: `dst[i0 + k] = src[i1 + k]` for `k < i2`; buffers dst, src of one dtype
 * @AMK_OPCODE_FILL: `dst[i0 + k] = f2` for `k < i1`
 * @AMK_OPCODE_ADD: `dst[i0 + k] = a[i1 + k] + b[i2 + k]` for `k < i3`, in fp32 for floats
 * @AMK_OPCODE_TRAP: aborts the launch with code `i0` (tests of the abort path)
 * @AMK_OPCODE_GRID_SYNC: whole-grid barrier: every queue must reach its n-th GRID_SYNC
 * @AMK_OPCODE_MATVEC: a tile of rows of a matrix-vector product: `y[i0 + r] = W[i0 + r, :] x'
 *   (+ bias) (+ residual)` for `r < i1` over `K = i2` columns, fp32 accumulation; buffers
 *   y, W, x, bias, residual, norm (the last three may be -1); with a norm weight, `x' =
 *   x / sqrt(mean(x²) + f3) * norm` (a fused RMSNORM), else `x' = x`; with `i5 > 0` only
 *   the columns `i4 .. i4 + i5`, added onto an f32 y that is its own residual (split-K)
 * @AMK_OPCODE_RMSNORM: RMS normalisation of one vector or of every head (see amk-abi.h)
 * @AMK_OPCODE_SILU_MUL: `out = silu(gate) * up` (SwiGLU)
 * @AMK_OPCODE_EMBED: a row of an embedding table, for a token id read on the device
 * @AMK_OPCODE_ARGMAX_PARTIAL: the largest element of a tile and its index
 * @AMK_OPCODE_ARGMAX_FINAL: the index of the largest partial maximum: the next token
 * @AMK_OPCODE_ROPE_KV: rotary embedding of query and key heads, and the key/value cache append
 * @AMK_OPCODE_ATTN_DECODE: decode attention over one split of the cached positions
 * @AMK_OPCODE_ATTN_REDUCE: merges the splits of decode attention
 * @AMK_OPCODE_MATMUL: a tile of a matrix product `Y = X' W^T (+ bias) (+ residual)` of
 *   many rows on tensor cores, with MATVEC's fusions (see amk-abi.h)
 * @AMK_OPCODE_ROPE_ROWS: q/k norm, rotary embedding and the cache append of many rows,
 *   each with its own position and sequence
 * @AMK_OPCODE_ATTN_ROWS: causal attention of many rows (a prompt chunk, or one token of
 *   each of several sequences) over their sequences' cached positions
 *
 * Instruction opcodes of the VM. The values are those of the ABI (`AMK_ABI_OP_*`);
 * `i0`... name the instruction's integer parameter slots and `f2` its float slot 2.
 */
typedef enum {
  AMK_OPCODE_NOP = 0,
  AMK_OPCODE_COPY = 1,
  AMK_OPCODE_FILL = 2,
  AMK_OPCODE_ADD = 3,
  AMK_OPCODE_TRAP = 4,
  AMK_OPCODE_GRID_SYNC = 5,
  AMK_OPCODE_MATVEC = 6,
  AMK_OPCODE_RMSNORM = 7,
  AMK_OPCODE_SILU_MUL = 8,
  AMK_OPCODE_EMBED = 9,
  AMK_OPCODE_ARGMAX_PARTIAL = 10,
  AMK_OPCODE_ARGMAX_FINAL = 11,
  AMK_OPCODE_ROPE_KV = 12,
  AMK_OPCODE_ATTN_DECODE = 13,
  AMK_OPCODE_ATTN_REDUCE = 14,
  AMK_OPCODE_MATMUL = 15,
  AMK_OPCODE_ROPE_ROWS = 16,
  AMK_OPCODE_ATTN_ROWS = 17
} AmkOpcode;

/**
 * AmkAbortCode:
 * @AMK_ABORT_CODE_NONE: no abort
 * @AMK_ABORT_CODE_TIMEOUT: a wait outlived the watchdog budget
 * @AMK_ABORT_CODE_TRAP: a TRAP instruction ran; the detail is its code
 * @AMK_ABORT_CODE_BAD_OPCODE: an unknown opcode; the detail is the opcode
 * @AMK_ABORT_CODE_BAD_INDEX: a counter or buffer index out of range; the detail is the index
 * @AMK_ABORT_CODE_CHECK: a device-side check failed; the detail is the buffer index
 * @AMK_ABORT_CODE_CANCELLED: the launch was cancelled from the host
 *
 * Why a launch was aborted, as recorded in an [struct@Amk.AbortRecord].
 */
typedef enum {
  AMK_ABORT_CODE_NONE = 0,
  AMK_ABORT_CODE_TIMEOUT = 1,
  AMK_ABORT_CODE_TRAP = 2,
  AMK_ABORT_CODE_BAD_OPCODE = 3,
  AMK_ABORT_CODE_BAD_INDEX = 4,
  AMK_ABORT_CODE_CHECK = 5,
  AMK_ABORT_CODE_CANCELLED = 6
} AmkAbortCode;

G_END_DECLS
