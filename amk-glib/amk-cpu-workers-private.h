/* amk-cpu-workers-private.h: the CPU executor's worker threads (amk-cpu-workers.c).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gio/gio.h>

#include "amk-abort-record.h"
#include "amk-op-private.h"
#include "amk-program.h"

G_BEGIN_DECLS

typedef enum {
  AMK_CPU_WORKERS_DONE,
  AMK_CPU_WORKERS_ABORTED,
  AMK_CPU_WORKERS_CANCELLED,
  AMK_CPU_WORKERS_DEADLOCK,
  AMK_CPU_WORKERS_NO_THREADS,
} AmkCpuWorkersResult;

AmkCpuWorkersResult amk_cpu_workers_run (AmkProgram     *program,
                                         AmkCpuBuffer   *buffers,
                                         guint32        *counters,
                                         guint           n_threads,
                                         GCancellable   *cancellable,
                                         AmkAbortRecord *abort_record);

G_END_DECLS
