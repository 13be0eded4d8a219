/* amk-op-cpu.c: what the CPU executor's dot-product ops (MATMUL, MATVEC) share: the
 * conversion of weight rows into fp32 blocks, and the split of an instruction over two
 * threads (the CPU executor runs one instruction at a time).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <string.h>

#include "amk-op-private.h"
#include "amk-dtype-private.h"

void
amk_cpu_load_columns (const AmkCpuBuffer *w, gint32 k, gint32 n0, gint32 nc, float *wt)
{
  memset (wt, 0, sizeof (float) * AMK_CPU_COLS * k);
  for (gint32 j = 0; j < nc; j++)
    {
      const guint64 row = (guint64) (n0 + j) * k;
      if (w->info->dtype == AMK_DTYPE_BF16)
        {
          const guint8 *src = w->data + row * 2;
          for (gint32 c = 0; c < k; c++)
            {
              guint16 h;
              guint32 bits;
              memcpy (&h, src + 2 * (guint64) c, 2);
              bits = (guint32) h << 16;
              memcpy (&wt[(guint64) c * AMK_CPU_COLS + j], &bits, 4);
            }
        }
      else
        for (gint32 c = 0; c < k; c++)
          wt[(guint64) c * AMK_CPU_COLS + j] = amk_dtype_load (w->info->dtype, w->data, row + c);
    }
}

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
