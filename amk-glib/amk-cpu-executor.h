/* amk-cpu-executor.h: runs a verified image on the host with the VM's semantics.
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
#include <amk-glib/amk-executor.h>

G_BEGIN_DECLS

#define AMK_TYPE_CPU_EXECUTOR (amk_cpu_executor_get_type ())

/**
 * AMK_CPU_EXECUTOR_MAX_THREADS:
 *
 * The most worker threads [property@Amk.CpuExecutor:threads] takes.
 */
#define AMK_CPU_EXECUTOR_MAX_THREADS 1024

AMK_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (AmkCpuExecutor, amk_cpu_executor, AMK, CPU_EXECUTOR, GObject)

AMK_AVAILABLE_IN_1_0
AmkCpuExecutor *amk_cpu_executor_new       (AmkProgram      *program,
                                            GError         **error);
AMK_AVAILABLE_IN_1_0
AmkCpuExecutor *amk_cpu_executor_new_empty (void);
AMK_AVAILABLE_IN_1_0
AmkProgram     *amk_cpu_executor_get_program (AmkCpuExecutor *self);
AMK_AVAILABLE_IN_1_0
guint64         amk_cpu_executor_get_seed  (AmkCpuExecutor  *self);
AMK_AVAILABLE_IN_1_0
void            amk_cpu_executor_set_seed  (AmkCpuExecutor  *self,
                                            guint64          seed);
AMK_AVAILABLE_IN_1_0
guint           amk_cpu_executor_get_threads (AmkCpuExecutor *self);
AMK_AVAILABLE_IN_1_0
void            amk_cpu_executor_set_threads (AmkCpuExecutor *self,
                                              guint           threads);
AMK_AVAILABLE_IN_1_0
gboolean        amk_cpu_executor_upload    (AmkCpuExecutor  *self,
                                            guint            buffer,
                                            GBytes          *data,
                                            GError         **error);
AMK_AVAILABLE_IN_1_0
GBytes         *amk_cpu_executor_download  (AmkCpuExecutor  *self,
                                            guint            buffer,
                                            GError         **error);
AMK_AVAILABLE_IN_1_0
gboolean        amk_cpu_executor_run       (AmkCpuExecutor  *self,
                                            GError         **error);
AMK_AVAILABLE_IN_1_0
AmkAbortRecord *amk_cpu_executor_get_last_abort (AmkCpuExecutor *self);

G_END_DECLS
