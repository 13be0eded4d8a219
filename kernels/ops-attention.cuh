/* ops-attention.cuh: the attention ops of the megakernel (see amk-abi.h for their contract).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef AMK_OPS_ATTENTION_CUH
#define AMK_OPS_ATTENTION_CUH

/* Every thread: operand checks that need no device data. */
static __device__ __forceinline__ int
amk_attention_check (const amk_instruction_t *ins, const amk_buffer_t *buffers, int32_t n_buffers,
                 amk_op_ctx *ctx, int32_t *detail)
{
  *detail = ins->opcode;
  return AMK_ABORT_BAD_OPCODE;
}

/* Every thread of the block (run: this thread's warp passed its waits). Returns
 * AMK_ABORT_NONE, or a code with *detail, the same in every thread. */
static __device__ __forceinline__ int
amk_attention_exec (const amk_op_ctx *ctx, const amk_instruction_t *ins, const amk_device_program &prog,
                bool run, int tid, int nt, int32_t *detail)
{
  *detail = ins->opcode;
  return AMK_ABORT_BAD_OPCODE;
}

#endif
