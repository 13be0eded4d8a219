/* amk-op-cpu.c: the split of an instruction of the CPU executor's dot-product ops
 * (MATMUL, MATVEC) over two threads (the CPU executor runs one instruction at a time).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-op-private.h"

void
amk_cpu_run_split (GThreadFunc  work,
                   AmkCpuRange *a,
                   AmkCpuRange *b,
                   gint32       block,
                   double       macs)
{
  const gint32 n = a->end - a->start;
  const gint32 half = macs >= AMK_CPU_THREAD_MACS && g_get_num_processors () > 1 ? n / 2 / block * block : 0;
  GThread *helper = NULL;

  b->start = a->end - half;
  b->end = a->end;
  if (half > 0 && (helper = g_thread_try_new ("amk-cpu-op", work, b, NULL)) != NULL)
    a->end = b->start;
  work (a);
  if (helper != NULL)
    g_thread_join (helper);
}
