/* amk-abort-record.c: the boxed abort record.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <glib/gi18n-lib.h>

#include "amk-abort-record.h"

G_DEFINE_BOXED_TYPE (AmkAbortRecord, amk_abort_record, amk_abort_record_copy, amk_abort_record_free)

/**
 * amk_abort_record_copy:
 * @record: an abort record
 *
 * Copies @record.
 *
 * Returns: (transfer full): a newly allocated copy of @record
 */
AmkAbortRecord *
amk_abort_record_copy (const AmkAbortRecord *record)
{
  g_return_val_if_fail (record != NULL, NULL);
  return g_memdup2 (record, sizeof *record);
}

/**
 * amk_abort_record_free:
 * @record: (nullable): an abort record
 *
 * Frees @record.
 */
void
amk_abort_record_free (AmkAbortRecord *record)
{
  g_free (record);
}

/**
 * amk_abort_record_to_string:
 * @record: an abort record
 *
 * Describes @record in one line, for messages and logs.
 *
 * Returns: (transfer full): a newly allocated string
 */
char *
amk_abort_record_to_string (const AmkAbortRecord *record)
{
  g_return_val_if_fail (record != NULL, NULL);

  switch (record->code)
    {
    case AMK_ABORT_CODE_NONE:
      return g_strdup (_("no abort"));
    case AMK_ABORT_CODE_TIMEOUT:
      if (record->counter < 0)
        return g_strdup_printf (_("queue %d instruction %d waited at a grid barrier for longer than the watchdog budget"),
                                record->queue, record->instruction);
      return g_strdup_printf (_("queue %d instruction %d waited on counter %d (observed %u, target %u) for longer than the watchdog budget"),
                              record->queue, record->instruction, record->counter,
                              record->observed, record->target);
    case AMK_ABORT_CODE_TRAP:
      return g_strdup_printf (_("queue %d instruction %d trapped with code %d"),
                              record->queue, record->instruction, record->detail);
    case AMK_ABORT_CODE_BAD_OPCODE:
      return g_strdup_printf (_("queue %d instruction %d has the unknown opcode %d"),
                              record->queue, record->instruction, record->detail);
    case AMK_ABORT_CODE_BAD_INDEX:
      return g_strdup_printf (_("queue %d instruction %d uses the out-of-range index %d"),
                              record->queue, record->instruction, record->detail);
    case AMK_ABORT_CODE_CHECK:
      return g_strdup_printf (_("queue %d instruction %d failed a device-side check on buffer %d"),
                              record->queue, record->instruction, record->detail);
    case AMK_ABORT_CODE_CANCELLED:
      return g_strdup (_("the launch was cancelled"));
    default:
      return g_strdup_printf (_("queue %d instruction %d aborted with the unknown code %d"),
                              record->queue, record->instruction, record->code);
    }
}
