/* amk-op-cpu.c: the split of an instruction of the CPU executor's dot-product ops
 * (MATMUL, MATVEC) over two threads (the CPU executor runs one instruction at a time).
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include "amk-op-private.h"

/* The second thread's share, handed to a pooled thread: starting a thread per
 * instruction cost as much as a small instruction's work. */
typedef struct {
  GThreadFunc  work;
  gpointer     data;
  GMutex       lock;
  GCond        done_cond;
  gboolean     done;
} SplitJob;

static void
split_job_run (gpointer data,
               gpointer user_data)
{
  SplitJob *job = data;

  job->work (job->data);
  g_mutex_lock (&job->lock);
  job->done = TRUE;
  g_cond_signal (&job->done_cond);
  g_mutex_unlock (&job->lock);
}

/* Shared by every executor of the process; its threads stay a while after their last
 * job, so that the next instructions find them started. */
static GThreadPool *
split_pool (void)
{
  static GThreadPool *pool;

  if (g_once_init_enter (&pool))
    g_once_init_leave (&pool, g_thread_pool_new (split_job_run, NULL, -1, FALSE, NULL));
  return pool;
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
  SplitJob job = { work, b, { 0 }, { 0 }, FALSE };
  gboolean pushed = FALSE;

  b->start = a->end - half;
  b->end = a->end;
  if (half > 0)
    {
      g_mutex_init (&job.lock);
      g_cond_init (&job.done_cond);
      pushed = g_thread_pool_push (split_pool (), &job, NULL);
      if (pushed)
        a->end = b->start;
    }
  work (a);
  if (pushed)
    {
      g_mutex_lock (&job.lock);
      while (!job.done)
        g_cond_wait (&job.done_cond, &job.lock);
      g_mutex_unlock (&job.lock);
    }
  if (half > 0)
    {
      g_mutex_clear (&job.lock);
      g_cond_clear (&job.done_cond);
    }
}
