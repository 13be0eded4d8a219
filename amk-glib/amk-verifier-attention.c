/* amk-verifier-attention.c: the verifier's checks of the attention ops.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <glib/gi18n-lib.h>

#include "amk-program-private.h"
#include "amk-error.h"

gboolean
amk_verify_attention_op (AmkProgram              *self,
                     guint                    queue,
                     guint                    pos,
                     const amk_instruction_t *ins,
                     GError                 **error)
{
  g_set_error (error, AMK_PROGRAM_ERROR, AMK_PROGRAM_ERROR_INVALID,
               _("Queue %u instruction %u: opcode %u is not implemented yet"), queue, pos, ins->opcode);
  return FALSE;
}
