/* amk-launcher.h: uploads an image to a CUDA device and runs the megakernel.
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
#include <amk-glib/amk-kernel-attributes.h>
#include <amk-glib/amk-struct-sizes.h>

G_BEGIN_DECLS

/**
 * AMK_LAUNCHER_MATVEC_SHARED_MEMORY:
 *
 * A dynamic shared memory per block ([property@Amk.Launcher:dynamic-shared-memory]) at
 * which MATVEC streams its weights through a shared-memory ring (`cp.async`) with up to
 * 512 threads per block and 16384 columns; with less it loads them straight into
 * registers. The launcher sizes the ring for the loaded program by itself; this fixed
 * size is for comparisons with an explicit configuration.
 */
#define AMK_LAUNCHER_MATVEC_SHARED_MEMORY 196608

#define AMK_TYPE_LAUNCHER (amk_launcher_get_type ())

AMK_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (AmkLauncher, amk_launcher, AMK, LAUNCHER, GObject)

AMK_AVAILABLE_IN_1_0
AmkLauncher         *amk_launcher_new                   (gint            device);
AMK_AVAILABLE_IN_1_0
gint                 amk_launcher_get_device_count      (void);
AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_get_have_cuda         (void);

AMK_AVAILABLE_IN_1_0
gint                 amk_launcher_get_device            (AmkLauncher    *self);
AMK_AVAILABLE_IN_1_0
guint                amk_launcher_get_threads_per_block (AmkLauncher    *self);
AMK_AVAILABLE_IN_1_0
void                 amk_launcher_set_threads_per_block (AmkLauncher    *self,
                                                         guint           threads);
AMK_AVAILABLE_IN_1_0
guint                amk_launcher_get_dynamic_shared_memory (AmkLauncher *self);
AMK_AVAILABLE_IN_1_0
void                 amk_launcher_set_dynamic_shared_memory (AmkLauncher *self,
                                                         guint           bytes);
AMK_AVAILABLE_IN_1_0
guint                amk_launcher_get_l2_prefetch       (AmkLauncher    *self);
AMK_AVAILABLE_IN_1_0
void                 amk_launcher_set_l2_prefetch       (AmkLauncher    *self,
                                                         guint           ahead);
AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_get_paged             (AmkLauncher    *self);
AMK_AVAILABLE_IN_1_0
void                 amk_launcher_set_paged             (AmkLauncher    *self,
                                                         gboolean        paged);
AMK_AVAILABLE_IN_1_0
guint                amk_launcher_get_watchdog_ms       (AmkLauncher    *self);
AMK_AVAILABLE_IN_1_0
void                 amk_launcher_set_watchdog_ms       (AmkLauncher    *self,
                                                         guint           ms);
AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_get_trace             (AmkLauncher    *self);
AMK_AVAILABLE_IN_1_0
void                 amk_launcher_set_trace             (AmkLauncher    *self,
                                                         gboolean        trace);
AMK_AVAILABLE_IN_1_0
AmkProgram          *amk_launcher_get_program           (AmkLauncher    *self);

AMK_AVAILABLE_IN_1_0
char                *amk_launcher_get_device_name       (AmkLauncher    *self,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_supports_cooperative  (AmkLauncher    *self,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
gint64               amk_launcher_max_coresident_blocks (AmkLauncher    *self,
                                                         guint           threads,
                                                         guint           dynamic_shared_memory,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
AmkKernelAttributes *amk_launcher_kernel_attributes     (AmkLauncher    *self,
                                                         guint           threads,
                                                         guint           dynamic_shared_memory,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
AmkStructSizes      *amk_launcher_struct_sizes          (AmkLauncher    *self);
AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_memory_info           (AmkLauncher    *self,
                                                         guint64        *free_bytes,
                                                         guint64        *total_bytes,
                                                         GError        **error);

AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_load                  (AmkLauncher    *self,
                                                         AmkProgram     *program,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_load_unverified       (AmkLauncher    *self,
                                                         AmkProgram     *program,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_upload                (AmkLauncher    *self,
                                                         guint           buffer,
                                                         GBytes         *data,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
GBytes              *amk_launcher_download              (AmkLauncher    *self,
                                                         guint           buffer,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_bind_buffer           (AmkLauncher    *self,
                                                         guint           buffer,
                                                         guint64         device_address,
                                                         guint64         size,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
guint64              amk_launcher_get_buffer_address    (AmkLauncher    *self,
                                                         guint           buffer,
                                                         GError        **error);

AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_launch                (AmkLauncher    *self,
                                                         GCancellable   *cancellable,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
void                 amk_launcher_launch_async          (AmkLauncher    *self,
                                                         GCancellable   *cancellable,
                                                         GAsyncReadyCallback callback,
                                                         gpointer        user_data);
AMK_AVAILABLE_IN_1_0
gboolean             amk_launcher_launch_finish         (AmkLauncher    *self,
                                                         GAsyncResult   *result,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
char                *amk_launcher_get_trace_json        (AmkLauncher    *self,
                                                         GError        **error);
AMK_AVAILABLE_IN_1_0
AmkAbortRecord      *amk_launcher_get_last_abort        (AmkLauncher    *self);
AMK_AVAILABLE_IN_1_0
double               amk_launcher_get_last_launch_time  (AmkLauncher    *self);

G_END_DECLS
