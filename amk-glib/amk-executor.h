/* amk-executor.h: the interface of what runs a program: the CPU executor and the launcher.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#if !defined(__AMK_GLIB_INSIDE__) && !defined(AMK_GLIB_COMPILATION)
#error "Only <amk-glib/amk-glib.h> can be included directly."
#endif

#include <gio/gio.h>
#include <amk-glib/amk-version-macros.h>
#include <amk-glib/amk-program.h>
#include <amk-glib/amk-abort-record.h>

G_BEGIN_DECLS

#define AMK_TYPE_EXECUTOR (amk_executor_get_type ())

AMK_AVAILABLE_IN_1_0
G_DECLARE_INTERFACE (AmkExecutor, amk_executor, AMK, EXECUTOR, GObject)

/**
 * AmkExecutorInterface:
 * @g_iface: the parent interface
 * @load: verifies a program and makes it the one that runs, with fresh buffers
 * @get_program: the loaded program, or %NULL
 * @upload: replaces a buffer's contents
 * @download: copies a buffer's contents out
 * @run: runs the loaded program once and waits for it
 * @run_async: starts @run; the interface's default runs @run in a worker thread
 * @run_finish: finishes @run_async
 * @get_last_abort: the abort record of the last run, or %NULL
 * @get_preferred_queues: the queue count a program for this executor should have
 * @get_description: a short human-readable name of what runs the programs
 * @load_shared: like @load, with the buffers of the same name as a buffer of @owner's
 *   program using @owner's memory; @owner is another executor of the same type, with a
 *   program loaded (the wrapper checks both). %NULL where the executor cannot share.
 * @get_preferred_rows: the rows a many-token program (a prefill chunk) for this executor
 *   should have; %NULL: 256
 * @new_sibling: a new executor of the same kind and settings (the same device), with no
 *   program, to load a second program that shares this one's buffers; %NULL where the
 *   executor cannot make one
 * @get_activation_dtype: the type a many-token program should keep MATMUL's inputs in;
 *   %NULL: %AMK_DTYPE_F32
 * @supports_dtype: whether programs may have buffers of a block-quantized type; %NULL:
 *   none
 *
 * The virtual methods of [iface@Amk.Executor]. Call them through the `amk_executor_*`
 * functions, which check the arguments and the loaded program first.
 */
struct _AmkExecutorInterface
{
  GTypeInterface g_iface;

  gboolean        (*load)                 (AmkExecutor          *self,
                                           AmkProgram           *program,
                                           GError              **error);
  AmkProgram     *(*get_program)          (AmkExecutor          *self);
  gboolean        (*upload)               (AmkExecutor          *self,
                                           guint                 buffer,
                                           GBytes               *data,
                                           GError              **error);
  GBytes         *(*download)             (AmkExecutor          *self,
                                           guint                 buffer,
                                           GError              **error);
  gboolean        (*run)                  (AmkExecutor          *self,
                                           GCancellable         *cancellable,
                                           GError              **error);
  void            (*run_async)            (AmkExecutor          *self,
                                           GCancellable         *cancellable,
                                           GAsyncReadyCallback   callback,
                                           gpointer              user_data);
  gboolean        (*run_finish)           (AmkExecutor          *self,
                                           GAsyncResult         *result,
                                           GError              **error);
  AmkAbortRecord *(*get_last_abort)       (AmkExecutor          *self);
  guint           (*get_preferred_queues) (AmkExecutor          *self,
                                           GError              **error);
  char           *(*get_description)      (AmkExecutor          *self);
  gboolean        (*load_shared)          (AmkExecutor          *self,
                                           AmkProgram           *program,
                                           AmkExecutor          *owner,
                                           GError              **error);
  guint           (*get_preferred_rows)   (AmkExecutor          *self);
  AmkExecutor    *(*new_sibling)          (AmkExecutor          *self);
  AmkDType        (*get_activation_dtype) (AmkExecutor          *self);
  gboolean        (*supports_dtype)       (AmkExecutor          *self,
                                           AmkDType              dtype);

  /*< private >*/
  gpointer padding[3];
};

AMK_AVAILABLE_IN_1_0
gboolean        amk_executor_load                 (AmkExecutor          *self,
                                                   AmkProgram           *program,
                                                   GError              **error);
AMK_AVAILABLE_IN_1_0
gboolean        amk_executor_load_shared          (AmkExecutor          *self,
                                                   AmkProgram           *program,
                                                   AmkExecutor          *owner,
                                                   GError              **error);
AMK_AVAILABLE_IN_1_0
AmkProgram     *amk_executor_get_program          (AmkExecutor          *self);
AMK_AVAILABLE_IN_1_0
gboolean        amk_executor_upload               (AmkExecutor          *self,
                                                   guint                 buffer,
                                                   GBytes               *data,
                                                   GError              **error);
AMK_AVAILABLE_IN_1_0
GBytes         *amk_executor_download             (AmkExecutor          *self,
                                                   guint                 buffer,
                                                   GError              **error);
AMK_AVAILABLE_IN_1_0
gboolean        amk_executor_run                  (AmkExecutor          *self,
                                                   GCancellable         *cancellable,
                                                   GError              **error);
AMK_AVAILABLE_IN_1_0
void            amk_executor_run_async            (AmkExecutor          *self,
                                                   GCancellable         *cancellable,
                                                   GAsyncReadyCallback   callback,
                                                   gpointer              user_data);
AMK_AVAILABLE_IN_1_0
gboolean        amk_executor_run_finish           (AmkExecutor          *self,
                                                   GAsyncResult         *result,
                                                   GError              **error);
AMK_AVAILABLE_IN_1_0
AmkAbortRecord *amk_executor_get_last_abort       (AmkExecutor          *self);
AMK_AVAILABLE_IN_1_0
guint           amk_executor_get_preferred_queues (AmkExecutor          *self,
                                                   GError              **error);
AMK_AVAILABLE_IN_1_0
guint           amk_executor_get_preferred_rows   (AmkExecutor          *self);
AMK_AVAILABLE_IN_1_0
AmkExecutor    *amk_executor_new_sibling          (AmkExecutor          *self);
AMK_AVAILABLE_IN_1_0
AmkDType        amk_executor_get_activation_dtype (AmkExecutor          *self);
AMK_AVAILABLE_IN_1_0
gboolean        amk_executor_supports_dtype       (AmkExecutor          *self,
                                                   AmkDType              dtype);
AMK_AVAILABLE_IN_1_0
char           *amk_executor_get_description      (AmkExecutor          *self);

G_END_DECLS
