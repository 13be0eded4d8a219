/* amk-cpu-ops-attention.c: reference implementations of the attention ops.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-cpu-ops-private.h"

AmkAbortCode
amk_cpu_attention_op (const amk_instruction_t *ins,
                  AmkCpuBuffer            *buffers,
                  gint                    *detail)
{
  *detail = ins->opcode;
  return AMK_ABORT_CODE_BAD_OPCODE;
}
