/* amk-batch.h: several sequences generated together, one launch per step for all of them.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <gio/gio.h>
#include <amk-glib/amk-version-macros.h>
#include <amk-glib/amk-executor.h>
#include <amk-glib/amk-model.h>

G_BEGIN_DECLS

/**
 * AMK_BATCH_ERROR:
 *
 * Error domain of [class@Amk.Batch]. Errors in this domain are from the
 * [error@Amk.BatchError] enumeration.
 */
#define AMK_BATCH_ERROR (amk_batch_error_quark ())

/**
 * AmkBatchError:
 * @AMK_BATCH_ERROR_FULL: every sequence slot of the batch is taken: wait for a sequence
 *   to finish, or make the batch with a larger capacity
 * @AMK_BATCH_ERROR_EMPTY_PROMPT: the prompt is empty or encodes to no tokens
 * @AMK_BATCH_ERROR_CONTEXT_FULL: the prompt does not fit in the model's context
 * @AMK_BATCH_ERROR_UNKNOWN_SEQUENCE: no sequence of the batch has this id
 * @AMK_BATCH_ERROR_EXECUTOR_TAKEN: another program was loaded on the batch's executor,
 *   so the batch's KV caches are gone
 * @AMK_BATCH_ERROR_BUSY: an asynchronous step is running
 * @AMK_BATCH_ERROR_NO_MODEL: the batch was made without a model (its
 *   [property@Amk.Batch:model] is unset)
 *
 * Error codes of the %AMK_BATCH_ERROR domain.
 */
typedef enum {
  AMK_BATCH_ERROR_FULL,
  AMK_BATCH_ERROR_EMPTY_PROMPT,
  AMK_BATCH_ERROR_CONTEXT_FULL,
  AMK_BATCH_ERROR_UNKNOWN_SEQUENCE,
  AMK_BATCH_ERROR_EXECUTOR_TAKEN,
  AMK_BATCH_ERROR_BUSY,
  AMK_BATCH_ERROR_NO_MODEL
} AmkBatchError;

AMK_AVAILABLE_IN_1_0
GQuark amk_batch_error_quark (void);

/**
 * AmkFinishReason:
 * @AMK_FINISH_REASON_NONE: the sequence is still generating
 * @AMK_FINISH_REASON_STOP: the model gave an end-of-sequence token
 * @AMK_FINISH_REASON_LENGTH: the sequence has the most tokens it was asked for
 * @AMK_FINISH_REASON_CONTEXT: the sequence filled the model's context
 * @AMK_FINISH_REASON_CANCELLED: [method@Amk.Batch.cancel] stopped it
 * @AMK_FINISH_REASON_ERROR: a step gave it no valid token (its logits were not finite,
 *   or the tokenizer has no text for the id); the other sequences go on
 *
 * Why a sequence of an [class@Amk.Batch] ended.
 */
typedef enum {
  AMK_FINISH_REASON_NONE,
  AMK_FINISH_REASON_STOP,
  AMK_FINISH_REASON_LENGTH,
  AMK_FINISH_REASON_CONTEXT,
  AMK_FINISH_REASON_CANCELLED,
  AMK_FINISH_REASON_ERROR
} AmkFinishReason;

/**
 * AMK_BATCH_MAX_CAPACITY:
 *
 * The most sequences one [class@Amk.Batch] holds.
 */
#define AMK_BATCH_MAX_CAPACITY 64

#define AMK_TYPE_BATCH (amk_batch_get_type ())

AMK_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (AmkBatch, amk_batch, AMK, BATCH, GObject)

AMK_AVAILABLE_IN_1_0
AmkBatch        *amk_batch_new               (AmkModel      *model,
                                              AmkExecutor   *executor,
                                              guint          capacity);
AMK_AVAILABLE_IN_1_0
AmkModel        *amk_batch_get_model         (AmkBatch      *self);
AMK_AVAILABLE_IN_1_0
AmkExecutor     *amk_batch_get_executor      (AmkBatch      *self);
AMK_AVAILABLE_IN_1_0
guint            amk_batch_get_capacity      (AmkBatch      *self);
AMK_AVAILABLE_IN_1_0
guint            amk_batch_get_n_active      (AmkBatch      *self);
AMK_AVAILABLE_IN_1_0
guint            amk_batch_get_steps         (AmkBatch      *self);

AMK_AVAILABLE_IN_1_0
guint            amk_batch_add               (AmkBatch      *self,
                                              const char    *prompt,
                                              guint          max_tokens,
                                              GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean         amk_batch_cancel            (AmkBatch      *self,
                                              guint          id,
                                              GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean         amk_batch_remove            (AmkBatch      *self,
                                              guint          id,
                                              GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean         amk_batch_step              (AmkBatch      *self,
                                              GCancellable  *cancellable,
                                              GError       **error);
AMK_AVAILABLE_IN_1_0
void             amk_batch_step_async        (AmkBatch      *self,
                                              GCancellable  *cancellable,
                                              GAsyncReadyCallback callback,
                                              gpointer       user_data);
AMK_AVAILABLE_IN_1_0
gboolean         amk_batch_step_finish       (AmkBatch      *self,
                                              GAsyncResult  *result,
                                              GError       **error);
AMK_AVAILABLE_IN_1_0
gboolean         amk_batch_run               (AmkBatch      *self,
                                              GCancellable  *cancellable,
                                              GError       **error);

AMK_AVAILABLE_IN_1_0
AmkFinishReason  amk_batch_get_finish_reason (AmkBatch      *self,
                                              guint          id,
                                              GError       **error);
AMK_AVAILABLE_IN_1_0
char            *amk_batch_get_text          (AmkBatch      *self,
                                              guint          id,
                                              GError       **error);
AMK_AVAILABLE_IN_1_0
GArray          *amk_batch_get_tokens        (AmkBatch      *self,
                                              guint          id,
                                              GError       **error);

G_END_DECLS
