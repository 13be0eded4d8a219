/* amk-model.h: a language model loaded from a file as one compiled decode step.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <gio/gio.h>
#include <amk-glib/amk-version-macros.h>
#include <amk-glib/amk-types.h>
#include <amk-glib/amk-program.h>
#include <amk-glib/amk-tokenizer.h>

G_BEGIN_DECLS

#define AMK_TYPE_MODEL (amk_model_get_type ())

AMK_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (AmkModel, amk_model, AMK, MODEL, GObject)

AMK_AVAILABLE_IN_1_0
AmkModel     *amk_model_new_from_file        (const char           *path,
                                              GCancellable         *cancellable,
                                              GError              **error);
AMK_AVAILABLE_IN_1_0
void          amk_model_new_from_file_async  (const char           *path,
                                              GCancellable         *cancellable,
                                              GAsyncReadyCallback   callback,
                                              gpointer              user_data);
AMK_AVAILABLE_IN_1_0
AmkModel     *amk_model_new_from_file_finish (GAsyncResult         *result,
                                              GError              **error);

AMK_AVAILABLE_IN_1_0
const char   *amk_model_get_path             (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
gboolean      amk_model_get_loaded           (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
const char   *amk_model_get_architecture     (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_n_layers         (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_hidden_size      (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_vocab_size       (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_context_length   (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint         amk_model_get_n_queues         (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
AmkDType      amk_model_get_dtype            (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
guint64       amk_model_get_weight_bytes     (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
AmkTokenizer *amk_model_get_tokenizer        (AmkModel             *self);
AMK_AVAILABLE_IN_1_0
AmkProgram   *amk_model_get_program          (AmkModel             *self);

G_END_DECLS
