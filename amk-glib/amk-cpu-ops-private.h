/* amk-cpu-ops-private.h: the plain reference implementation of every opcode.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-program-private.h"

G_BEGIN_DECLS

typedef struct {
  guint8              *data;
  const AmkBufferInfo *info;
} AmkCpuBuffer;

/* Runs one verified instruction. Returns AMK_ABORT_CODE_NONE, or why it aborted with
 * *detail set (TRAP: its code). counters: the run's, for ATTN_DECODE's arrival counter
 * (its fused merge). */
AmkAbortCode amk_cpu_op_run (const amk_instruction_t *ins,
                             AmkCpuBuffer            *buffers,
                             guint32                 *counters,
                             gint                    *detail);

/* The op families (amk-cpu-ops-vector.c, amk-cpu-ops-attention.c), same contract. */
AmkAbortCode amk_cpu_vector_op    (const amk_instruction_t *ins,
                                   AmkCpuBuffer            *buffers,
                                   gint                    *detail);
AmkAbortCode amk_cpu_attention_op (const amk_instruction_t *ins,
                                   AmkCpuBuffer            *buffers,
                                   guint32                 *counters,
                                   gint                    *detail);

G_END_DECLS
