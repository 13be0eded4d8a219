/* amk-cpu-workers.c: the CPU executor's worker threads. Each worker owns the queues
 * q with q mod n = its index and runs them in order; the counters are real atomics, as
 * on the device.
 *
 * A queue whose head waits is parked on the first counter it still waits for; the
 * thread whose signal moves that counter hands the parked queues to their workers'
 * inboxes, which place them again. So no worker scans its queues to find work, however
 * many it owns. A worker with nothing to run polls its inbox a little, then sleeps.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <fenv.h>
#include <string.h>

#include "amk-cpu-workers-private.h"
#include "amk-program-private.h"

/* An instruction lasts microseconds to milliseconds; waking a sleeping thread costs
 * tens of microseconds: an idle worker polls this long before it sleeps. A sleeper
 * looks at the cancellable every SLEEP_USEC. */
#define IDLE_SPIN_USEC  200
#define SLEEP_USEC      (50 * 1000)

enum { GATE_WAIT, GATE_RUN, GATE_LEAVE };

typedef struct Workers Workers;

typedef struct {
  Workers *w;
  guint    index;
  GArray  *runnable;   /* of guint: its queues whose head may run, in order from `next`
                          (first in, first out: every queue moves, as on the device) */
  guint    next;       /* its own */
  guint    unfinished; /* its own */
  GArray  *inbox;      /* of guint: queues handed back to it, under lock */
  GArray  *spare;      /* the inbox's other array, its own: the two take turns */
  gint     n_inbox;    /* atomic: inbox->len */
  gboolean sleeping;   /* under lock */
  GCond    wake;
} Worker;

struct Workers {
  AmkProgram       *program;
  AmkCpuBuffer     *buffers;
  GCancellable     *cancellable;
  Worker           *workers;
  guint             n_workers;
  guint32          *counters;      /* atomic */
  guint            *pc;            /* per queue, its worker's own */
  gint32           *parked;        /* per counter: the last queue parked on it, or -1; set under lock */
  gint32           *next_parked;   /* per queue, under lock */
  gboolean         *released;      /* per queue, under lock: its GRID_SYNC was released */
  guint             arrived;       /* under lock: queues at the current GRID_SYNC */
  fenv_t            env;           /* the caller's floating-point modes */
  gint              gate;          /* atomic: GATE_* */
  gint              stop;          /* atomic, set under lock: an AmkCpuWorkersResult, DONE while running */
  GMutex            lock;
  guint             n_sleeping;    /* under lock */
  guint             n_finished;    /* under lock */
  AmkAbortRecord   *abort_record;  /* under lock: the first abort */
};

static const amk_instruction_t *
head (Workers *w, guint q)
{
  return amk_program_queue_instruction (w->program, q, w->pc[q]);
}

static guint32
counter_value (Workers *w, gint32 c)
{
  return (guint32) g_atomic_int_get ((gint *) &w->counters[c]);
}

/* Under lock: wakes @worker if it sleeps; it counts as awake from here, so that a
 * worker that looks for a deadlock before it runs again does not take it for asleep. */
static void
wake_locked (Workers *w, Worker *worker)
{
  if (!worker->sleeping)
    return;
  worker->sleeping = FALSE;
  w->n_sleeping--;
  g_cond_signal (&worker->wake);
}

static void
deliver_locked (Workers *w, guint q)
{
  Worker *owner = &w->workers[q % w->n_workers];

  g_array_append_val (owner->inbox, q);
  g_atomic_int_set (&owner->n_inbox, (gint) owner->inbox->len);
  wake_locked (w, owner);
}

/* Under lock: ends the run for every worker with @why, unless it has already ended. */
static void
stop_locked (Workers *w, AmkCpuWorkersResult why)
{
  g_atomic_int_compare_and_exchange (&w->stop, AMK_CPU_WORKERS_DONE, why);
  for (guint i = 0; i < w->n_workers; i++)
    wake_locked (w, &w->workers[i]);
}

static gboolean
running (Workers *w)
{
  return g_atomic_int_get (&w->stop) == AMK_CPU_WORKERS_DONE;
}

static void
signal_counter (Workers *w, const amk_instruction_t *ins)
{
  const gint32 c = ins->signal.counter;
  gint32 p;

  if (c == AMK_NO_COUNTER)
    return;
  g_atomic_int_add ((gint *) &w->counters[c], ins->signal.amount);
  /* a queue is parked before its worker looks at the counter a last time */
  if (g_atomic_int_get (&w->parked[c]) < 0)
    return;
  g_mutex_lock (&w->lock);
  p = w->parked[c];
  g_atomic_int_set (&w->parked[c], -1);
  while (p >= 0)
    {
      const gint32 next = w->next_parked[p];

      deliver_locked (w, (guint) p);
      p = next;
    }
  g_mutex_unlock (&w->lock);
}

/* Queue q (of @me, in no place) into the place its head calls for: finished, parked on
 * a counter, arrived at its GRID_SYNC, or runnable. */
static void
place (Worker *me, guint q)
{
  Workers *w = me->w;
  const amk_instruction_t *ins = head (w, q);
  guint i = 0;

  if (ins == NULL)
    {
      me->unfinished--;
      return;
    }
  while (i < ins->n_waits)
    {
      const gint32 c = ins->waits[i].counter;

      if (counter_value (w, c) >= ins->waits[i].target)
        {
          i++;
          continue;
        }
      g_mutex_lock (&w->lock);
      w->next_parked[q] = w->parked[c];
      g_atomic_int_set (&w->parked[c], (gint32) q);
      if (counter_value (w, c) < ins->waits[i].target)
        {
          g_mutex_unlock (&w->lock);
          return;
        }
      /* signalled meanwhile, and no signaller has taken the list yet: q is its head */
      g_atomic_int_set (&w->parked[c], w->next_parked[q]);
      g_mutex_unlock (&w->lock);
      i++;
    }
  if (ins->opcode == AMK_ABI_OP_GRID_SYNC)
    {
      g_mutex_lock (&w->lock);
      if (++w->arrived == w->program->num_queues)
        {
          /* the last to arrive releases them all */
          w->arrived = 0;
          for (guint r = 0; r < w->program->num_queues; r++)
            {
              w->released[r] = TRUE;
              deliver_locked (w, r);
            }
        }
      g_mutex_unlock (&w->lock);
      return;
    }
  g_array_append_val (me->runnable, q);
}

/* Places again the queues handed to @me. */
static void
drain_inbox (Worker *me)
{
  Workers *w = me->w;
  GArray *got;

  if (g_atomic_int_get (&me->n_inbox) == 0)
    return;
  g_mutex_lock (&w->lock);
  got = me->inbox;
  me->inbox = me->spare;
  g_atomic_int_set (&me->n_inbox, 0);
  g_mutex_unlock (&w->lock);
  for (guint i = 0; i < got->len; i++)
    {
      const guint q = g_array_index (got, guint, i);
      gboolean passed;

      g_mutex_lock (&w->lock);
      passed = w->released[q];
      w->released[q] = FALSE;
      g_mutex_unlock (&w->lock);
      if (passed)
        {
          const amk_instruction_t *sync = head (w, q);

          w->pc[q]++;
          signal_counter (w, sync);
        }
      place (me, q);
    }
  g_array_set_size (got, 0);
  me->spare = got;
}

/* Runs queue q's head; FALSE when the run must end. */
static gboolean
run_head (Worker *me, guint q)
{
  Workers *w = me->w;
  const amk_instruction_t *ins = head (w, q);
  AmkAbortCode code;
  gint detail = 0;

  if (w->cancellable != NULL && g_cancellable_is_cancelled (w->cancellable))
    {
      g_mutex_lock (&w->lock);
      stop_locked (w, AMK_CPU_WORKERS_CANCELLED);
      g_mutex_unlock (&w->lock);
      return FALSE;
    }
  code = amk_op_run_cpu (ins, w->buffers, w->counters, &detail);
  if (code != AMK_ABORT_CODE_NONE)
    {
      g_mutex_lock (&w->lock);
      if (running (w))
        *w->abort_record = (AmkAbortRecord) { code, (gint) q, (gint) w->pc[q], -1, 0, 0, detail, -1 };
      stop_locked (w, AMK_CPU_WORKERS_ABORTED);
      g_mutex_unlock (&w->lock);
      return FALSE;
    }
  w->pc[q]++;
  signal_counter (w, ins);
  place (me, q);
  return TRUE;
}

/* Sleeps until a queue is handed to @me or the run ends. */
static void
sleep_until_woken (Worker *me)
{
  Workers *w = me->w;

  g_mutex_lock (&w->lock);
  if (me->inbox->len > 0 || !running (w))
    {
      g_mutex_unlock (&w->lock);
      return;
    }
  if (w->n_sleeping + w->n_finished + 1 == w->n_workers)
    {
      /* every other worker sleeps or has finished: no one is left to signal */
      stop_locked (w, AMK_CPU_WORKERS_DEADLOCK);
      g_mutex_unlock (&w->lock);
      return;
    }
  me->sleeping = TRUE;
  w->n_sleeping++;
  while (me->sleeping)
    if (!g_cond_wait_until (&me->wake, &w->lock, g_get_monotonic_time () + SLEEP_USEC) &&
        me->sleeping && w->cancellable != NULL && g_cancellable_is_cancelled (w->cancellable))
      stop_locked (w, AMK_CPU_WORKERS_CANCELLED);
  g_mutex_unlock (&w->lock);
}

static gpointer
worker_main (gpointer data)
{
  Worker *me = data;
  Workers *w = me->w;
  gint64 idle_since = 0;
  gboolean split_allowed;

  while (g_atomic_int_get (&w->gate) == GATE_WAIT)
    g_thread_yield ();
  if (g_atomic_int_get (&w->gate) == GATE_LEAVE)
    return NULL;
  fesetenv (&w->env);
  split_allowed = amk_cpu_split_allow_here (FALSE);   /* the other cores have workers */

  for (guint q = me->index; q < w->program->num_queues; q += w->n_workers)
    place (me, q);
  while (me->unfinished > 0 && running (w))
    {
      drain_inbox (me);
      if (me->next < me->runnable->len)
        {
          const guint q = g_array_index (me->runnable, guint, me->next++);

          if (me->next * 2 >= me->runnable->len)
            {
              /* the taken front goes once it is half the array: each entry moves at
               * most about once */
              g_array_remove_range (me->runnable, 0, me->next);
              me->next = 0;
            }
          if (!run_head (me, q))
            break;
          idle_since = 0;
          continue;
        }
      if (me->unfinished == 0 || g_atomic_int_get (&me->n_inbox) > 0)
        continue;
      if (idle_since == 0)
        idle_since = g_get_monotonic_time ();
      if (g_get_monotonic_time () - idle_since < IDLE_SPIN_USEC)
        {
          g_thread_yield ();
          continue;
        }
      sleep_until_woken (me);
      idle_since = 0;
    }

  g_mutex_lock (&w->lock);
  w->n_finished++;
  if (running (w) && w->n_sleeping > 0 && w->n_sleeping + w->n_finished == w->n_workers)
    stop_locked (w, AMK_CPU_WORKERS_DEADLOCK);   /* the sleepers wait for no one */
  g_mutex_unlock (&w->lock);
  amk_cpu_split_allow_here (split_allowed);
  return NULL;
}

/**
 * amk_cpu_workers_run:
 * @program: a verified program with at least two queues
 * @buffers: the executor's buffers
 * @counters: the program's counters plus one, zero
 * @n_threads: how many workers, 2 or more (no more than one per queue run)
 * @cancellable: (nullable): checked before each instruction and by sleepers
 * @abort_record: (out caller-allocates): set when the result is ABORTED
 *
 * Runs @program once on worker threads, the calling thread being one of them.
 *
 * Returns: how the run ended; NO_THREADS when no thread could start (nothing ran)
 */
AmkCpuWorkersResult
amk_cpu_workers_run (AmkProgram     *program,
                     AmkCpuBuffer   *buffers,
                     guint32        *counters,
                     guint           n_threads,
                     GCancellable   *cancellable,
                     AmkAbortRecord *abort_record)
{
  const guint n_queues = program->num_queues;
  const guint n_counters = program->counter_names->len + 1;
  const guint n_workers = MIN (n_threads, n_queues);
  g_autofree guint *pc = g_new0 (guint, n_queues);
  g_autofree gint32 *parked = g_new (gint32, n_counters);
  g_autofree gint32 *next_parked = g_new0 (gint32, n_queues);
  g_autofree gboolean *released = g_new0 (gboolean, n_queues);
  g_autofree Worker *workers = g_new0 (Worker, n_workers);
  g_autofree GThread **threads = g_new0 (GThread *, n_workers);
  Workers w = {
    .program = program, .buffers = buffers, .cancellable = cancellable,
    .workers = workers, .n_workers = n_workers, .counters = counters, .pc = pc,
    .parked = parked, .next_parked = next_parked, .released = released,
    .gate = GATE_WAIT, .stop = AMK_CPU_WORKERS_DONE, .abort_record = abort_record,
  };
  guint started = 1;
  AmkCpuWorkersResult result;

  g_return_val_if_fail (n_workers >= 2, AMK_CPU_WORKERS_NO_THREADS);

  g_mutex_init (&w.lock);
  fegetenv (&w.env);
  memset (parked, 0xff, n_counters * sizeof (gint32));
  for (guint i = 0; i < n_workers; i++)
    {
      Worker *worker = &workers[i];

      worker->w = &w;
      worker->index = i;
      worker->runnable = g_array_new (FALSE, FALSE, sizeof (guint));
      worker->inbox = g_array_new (FALSE, FALSE, sizeof (guint));
      worker->spare = g_array_new (FALSE, FALSE, sizeof (guint));
      worker->unfinished = (n_queues - i + n_workers - 1) / n_workers;
      g_cond_init (&worker->wake);
    }
  for (; started < n_workers; started++)
    {
      threads[started] = g_thread_try_new ("amk-cpu-worker", worker_main, &workers[started], NULL);
      if (threads[started] == NULL)
        break;
    }
  g_atomic_int_set (&w.gate, started == n_workers ? GATE_RUN : GATE_LEAVE);
  if (started == n_workers)
    worker_main (&workers[0]);
  for (guint i = 1; i < started; i++)
    g_thread_join (threads[i]);
  result = started == n_workers ? (AmkCpuWorkersResult) g_atomic_int_get (&w.stop)
                                : AMK_CPU_WORKERS_NO_THREADS;
  for (guint i = 0; i < n_workers; i++)
    {
      g_array_unref (workers[i].runnable);
      g_array_unref (workers[i].inbox);
      g_array_unref (workers[i].spare);
      g_cond_clear (&workers[i].wake);
    }
  g_mutex_clear (&w.lock);
  return result;
}
