/* amk-abort-record.h: why a launch was aborted.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <glib-object.h>
#include <amk-glib/amk-version-macros.h>
#include <amk-glib/amk-types.h>

G_BEGIN_DECLS

#define AMK_TYPE_ABORT_RECORD (amk_abort_record_get_type ())

/**
 * AmkAbortRecord:
 * @code: why the launch stopped
 * @queue: the queue (thread block) that aborted first
 * @instruction: the position of the instruction inside that queue
 * @counter: the counter it waited on, or -1
 * @observed: the counter's value when the wait gave up
 * @target: the value the wait needed
 * @detail: the trap code, the opcode or the index, depending on @code
 * @sm_id: the multiprocessor the block ran on
 *
 * The record the first aborting block writes on the device. Returned by
 * [method@Amk.Launcher.get_last_abort] after a launch failed with
 * %AMK_LAUNCH_ERROR_TIMEOUT or %AMK_LAUNCH_ERROR_ABORTED.
 */
typedef struct {
  AmkAbortCode code;
  gint queue;
  gint instruction;
  gint counter;
  guint observed;
  guint target;
  gint detail;
  gint sm_id;
} AmkAbortRecord;

AMK_AVAILABLE_IN_1_0
GType amk_abort_record_get_type (void) G_GNUC_CONST;
AMK_AVAILABLE_IN_1_0
AmkAbortRecord *amk_abort_record_copy (const AmkAbortRecord *record);
AMK_AVAILABLE_IN_1_0
void amk_abort_record_free (AmkAbortRecord *record);
AMK_AVAILABLE_IN_1_0
char *amk_abort_record_to_string (const AmkAbortRecord *record);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (AmkAbortRecord, amk_abort_record_free)

G_END_DECLS
