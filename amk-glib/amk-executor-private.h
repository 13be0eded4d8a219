/* amk-executor-private.h: what every AmkExecutor keeps of the program it loaded, and the
 * one check that the program is still the one it loaded.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "amk-executor.h"
#include "amk-dtype-private.h"

G_BEGIN_DECLS

/* The loaded program and its shape when it was loaded: an executor's memory (buffers,
 * counters, the scratch arena, the instructions on a device) was sized from it. */
typedef struct {
  AmkProgram *program;
  guint       n_buffers;
  guint       n_counters;
  guint       n_instructions;
  guint64     scratch_size;
  gboolean    verified;
} AmkLoadedProgram;

void     amk_loaded_program_set     (AmkLoadedProgram  *loaded,
                                     AmkProgram        *program);
void     amk_loaded_program_clear   (AmkLoadedProgram  *loaded);
gboolean amk_loaded_program_require (const AmkLoadedProgram *loaded,
                                     GError           **error);
gboolean amk_loaded_program_check   (const AmkLoadedProgram *loaded,
                                     GError           **error);

/* Every buffer of program has a type the executor runs (amk_executor_supports_dtype()),
 * or AMK_LAUNCH_ERROR_UNSUPPORTED naming the first that has not. */
gboolean amk_executor_check_dtypes  (AmkExecutor       *self,
                                     AmkProgram        *program,
                                     GError           **error);

/* The block-quantized dtypes the executor runs (amk_executor_supports_dtype()), as a
 * mask of 1 << dtype: the weights a model keeps as stored for it. Inline, for the tools
 * too (they link the public API and the internal library). */
static inline guint32
amk_executor_block_dtypes (AmkExecutor *self)
{
  guint32 mask = 0;

  for (guint d = AMK_DTYPE_Q8_0; amk_dtype_is_valid (d); d++)
    if (amk_executor_supports_dtype (self, (AmkDType) d))
      mask |= 1u << d;
  return mask;
}

/* amk_executor_load_shared(): for each buffer of program, the index of the buffer of
 * the owner's loaded program whose memory it uses (same name, dtype and size, neither in
 * the scratch arena), or -1. A name match of another dtype or size is an error. */
gint    *amk_loaded_program_match   (const AmkLoadedProgram *owner,
                                     AmkProgram       *program,
                                     GError           **error);

G_END_DECLS
