/* amk-op-cpu.c: the split of an instruction of the CPU executor's dot-product ops
 * (MATMUL, MATVEC) over two threads (when the CPU executor runs one instruction at a
 * time), and split-K's atomic adds.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <fenv.h>
#include <pthread.h>
#include <string.h>

#include "amk-op-private.h"

/* The second thread is one long-lived helper that, after each share, keeps polling for
 * the next one a little while before it sleeps: an instruction lasts tens of
 * microseconds, about what waking a sleeping thread costs. A caller that finds the
 * helper taken (another executor's thread) runs both shares itself. */
#define SPLIT_SPIN_USEC  200

enum { HELPER_IDLE, HELPER_CLAIMED, HELPER_POSTED, HELPER_DONE };

typedef struct {
  gint         state;     /* HELPER_*, atomic */
  GThreadFunc  work;
  gpointer     data;
  fenv_t       env;       /* the caller's floating-point modes, for the same arithmetic */
  GMutex       lock;      /* sleeping: waits on wake for state POSTED */
  GCond        wake;
  gboolean     sleeping;
} SplitHelper;

static SplitHelper helper;

static gpointer
helper_main (gpointer unused)
{
  for (;;)
    {
      gint64 spin_until = g_get_monotonic_time () + SPLIT_SPIN_USEC;

      while (g_atomic_int_get (&helper.state) != HELPER_POSTED)
        {
          if (g_get_monotonic_time () < spin_until)
            {
              g_thread_yield ();   /* lets a runnable thread of this core go first */
              continue;
            }
          g_mutex_lock (&helper.lock);
          helper.sleeping = TRUE;
          while (g_atomic_int_get (&helper.state) != HELPER_POSTED)
            g_cond_wait (&helper.wake, &helper.lock);
          helper.sleeping = FALSE;
          g_mutex_unlock (&helper.lock);
        }
      fesetenv (&helper.env);
      helper.work (helper.data);
      g_atomic_int_set (&helper.state, HELPER_DONE);
    }
  return NULL;
}

static GMutex start_lock;
static gint   started;   /* atomic: 0 not yet, 1 running, 2 no thread could start */

/* A child after fork() has none of its parent's threads, and maybe a copy of the lock
 * held at that moment: it starts from nothing. */
static void
helper_forget (void)
{
  memset (&helper, 0, sizeof helper);
  memset (&start_lock, 0, sizeof start_lock);   /* a static GMutex's unlocked state */
  started = 0;
}

/* The helper, started on first use; FALSE where no thread could start. */
static gboolean
helper_ready (void)
{
  static gboolean forget_registered;
  gboolean ok;

  if (g_atomic_int_get (&started) == 1)
    return TRUE;
  g_mutex_lock (&start_lock);
  if (started == 0)
    {
      GThread *thread;

      g_mutex_init (&helper.lock);
      g_cond_init (&helper.wake);
      thread = g_thread_try_new ("amk-cpu-split", helper_main, NULL, NULL);
      if (thread != NULL)
        g_thread_unref (thread);
      if (thread != NULL && !forget_registered)
        forget_registered = pthread_atfork (NULL, NULL, helper_forget) == 0;
      g_atomic_int_set (&started, thread != NULL ? 1 : 2);
    }
  ok = started == 1;
  g_mutex_unlock (&start_lock);
  return ok;
}

static __thread gboolean split_forbidden;

gboolean
amk_cpu_split_allow_here (gboolean allowed)
{
  const gboolean before = !split_forbidden;

  split_forbidden = !allowed;
  return before;
}

void
amk_cpu_atomic_add_f32 (float *p,
                        float  v)
{
  guint32 old = __atomic_load_n ((guint32 *) p, __ATOMIC_RELAXED), sum;

  do
    {
      float f;

      memcpy (&f, &old, 4);
      f += v;
      memcpy (&sum, &f, 4);
    }
  while (!__atomic_compare_exchange_n ((guint32 *) p, &old, sum, TRUE,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED));
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
  gboolean posted = FALSE;

  b->start = a->end - half;
  b->end = a->end;
  if (half > 0 && !split_forbidden && helper_ready () &&
      g_atomic_int_compare_and_exchange (&helper.state, HELPER_IDLE, HELPER_CLAIMED))
    {
      helper.work = work;
      helper.data = b;
      fegetenv (&helper.env);
      g_mutex_lock (&helper.lock);
      g_atomic_int_set (&helper.state, HELPER_POSTED);
      if (helper.sleeping)
        g_cond_signal (&helper.wake);
      g_mutex_unlock (&helper.lock);
      a->end = b->start;
      posted = TRUE;
    }
  work (a);
  if (posted)
    {
      while (g_atomic_int_get (&helper.state) != HELPER_DONE)
        g_thread_yield ();
      g_atomic_int_set (&helper.state, HELPER_IDLE);
    }
}
