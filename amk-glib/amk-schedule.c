/* amk-schedule.c: what an image will cost, estimated from its instructions alone (so
 * it works for compiled programs and loaded files alike): a timed abstract run of the
 * queues with the compiler's cost model, giving the makespan, the work per queue and the
 * critical path.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "config.h"

#include <glib/gi18n-lib.h>

#include "amk-program.h"
#include "amk-program-private.h"

typedef struct {
  double time;
  guint  amount;
  gint   instruction;  /* the signalling instruction (global index) */
} Signal;

typedef struct {
  guint   n;              /* instructions */
  double *start, *finish;
  gint   *reason;         /* instruction whose end let this one start, or -1 */
  gint   *queue_of;
  gint   *pos_of;
  double *busy;           /* per queue */
  double  makespan, total;
  gint    last;           /* the instruction that finishes last */
} Estimate;

static int
compare_signals (gconstpointer a, gconstpointer b)
{
  double x = ((const Signal *) a)->time, y = ((const Signal *) b)->time;
  return (x > y) - (x < y);
}

/* Earliest time `counter` reaches `target` from the signals so far, or -1 if they do not
 * add up to it yet; *who is the signal that got it there. */
static double
reached_at (GArray *signals, guint target, gint *who)
{
  guint64 sum = 0;

  *who = -1;
  if (target == 0)
    return 0;
  g_array_sort (signals, compare_signals);
  for (guint i = 0; i < signals->len; i++)
    {
      const Signal *s = &g_array_index (signals, Signal, i);
      sum += s->amount;
      if (sum >= target)
        {
          *who = s->instruction;
          return s->time;
        }
    }
  return -1;
}

static void
estimate_clear (Estimate *e)
{
  g_free (e->start);
  g_free (e->finish);
  g_free (e->reason);
  g_free (e->queue_of);
  g_free (e->pos_of);
  g_free (e->busy);
}

/* Repeatedly starts, among the queue heads that can start, the one that starts first.
 * GRID_SYNC starts when every queue stands at one. Returns FALSE if the queues stall
 * (an unverified image). */
static gboolean
estimate (AmkProgram *self, Estimate *e)
{
  const guint nq = self->num_queues, nc = self->counter_names->len;
  g_autofree guint *pc = g_new0 (guint, nq);
  g_autofree double *free_at = g_new0 (double, nq);
  g_autofree gint *last_on = g_new (gint, nq);
  g_autoptr(GPtrArray) signals = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  guint done = 0;

  e->n = self->instructions->len;
  e->start = g_new0 (double, e->n + 1);
  e->finish = g_new0 (double, e->n + 1);
  e->reason = g_new (gint, e->n + 1);
  e->queue_of = g_new0 (gint, e->n + 1);
  e->pos_of = g_new0 (gint, e->n + 1);
  e->busy = g_new0 (double, nq);
  e->makespan = e->total = 0;
  e->last = -1;
  for (guint c = 0; c < nc; c++)
    g_ptr_array_add (signals, g_array_new (FALSE, FALSE, sizeof (Signal)));
  for (guint q = 0; q < nq; q++)
    last_on[q] = -1;

  while (done < e->n)
    {
      gint best = -1, best_reason = -1;
      double best_start = G_MAXDOUBLE;
      guint at_barrier = 0;
      double barrier_start = 0;

      for (guint q = 0; q < nq; q++)
        {
          GArray *queue = g_ptr_array_index (self->queues, q);
          const amk_instruction_t *ins;
          double start = free_at[q];
          gint reason = last_on[q];
          gboolean ready = TRUE;

          if (pc[q] >= queue->len)
            continue;
          ins = &g_array_index (self->instructions, amk_instruction_t, g_array_index (queue, gint32, pc[q]));
          for (guint w = 0; w < ins->n_waits && ready; w++)
            {
              gint who;
              double t = reached_at (g_ptr_array_index (signals, ins->waits[w].counter),
                                     ins->waits[w].target, &who);
              if (t < 0)
                ready = FALSE;
              else if (t > start)
                start = t, reason = who;
            }
          if (!ready)
            continue;
          if (ins->opcode == AMK_ABI_OP_GRID_SYNC)
            {
              at_barrier++;
              barrier_start = MAX (barrier_start, start);
              continue;
            }
          if (start < best_start)
            best = (gint) q, best_start = start, best_reason = reason;
        }

      if (best < 0 && at_barrier == nq)
        {
          /* every queue at its barrier: all pass together */
          for (guint q = 0; q < nq; q++)
            {
              GArray *queue = g_ptr_array_index (self->queues, q);
              gint i = g_array_index (queue, gint32, pc[q]);
              e->start[i] = barrier_start;
              e->finish[i] = barrier_start + amk_instruction_cost_ns (self, &g_array_index (self->instructions, amk_instruction_t, i));
              e->reason[i] = last_on[q];
              e->queue_of[i] = q;
              e->pos_of[i] = pc[q]++;
              free_at[q] = e->finish[i];
              last_on[q] = i;
              done++;
            }
          continue;
        }
      if (best < 0)
        return FALSE;

      {
        GArray *queue = g_ptr_array_index (self->queues, best);
        gint i = g_array_index (queue, gint32, pc[best]);
        const amk_instruction_t *ins = &g_array_index (self->instructions, amk_instruction_t, i);
        double cost = amk_instruction_cost_ns (self, ins);

        e->start[i] = best_start;
        e->finish[i] = best_start + cost;
        e->reason[i] = best_reason;
        e->queue_of[i] = best;
        e->pos_of[i] = pc[best]++;
        e->busy[best] += cost;
        e->total += cost;
        free_at[best] = e->finish[i];
        last_on[best] = i;
        if (ins->signal.counter != AMK_NO_COUNTER)
          {
            Signal s = { e->finish[i], ins->signal.amount, i };
            g_array_append_val ((GArray *) g_ptr_array_index (signals, ins->signal.counter), s);
          }
        if (e->finish[i] > e->makespan)
          e->makespan = e->finish[i], e->last = i;
        done++;
      }
    }
  return TRUE;
}

/**
 * amk_program_estimate_schedule:
 * @self: a program
 * @makespan_ns: (out) (optional): the estimated time of one launch
 * @total_ns: (out) (optional): the estimated work summed over all queues
 * @critical_path_ns: (out) (optional): the longest chain of instructions that wait for
 *   each other (through counters or their queue)
 *
 * Runs the queues in a timed abstract run with the compiler's cost model (a fixed
 * dispatch cost per instruction plus the bytes it moves at one SM's share of the memory
 * bandwidth). A good schedule has a makespan close to `max (total / queues, critical
 * path)`.
 *
 * Returns: %FALSE if the queues cannot finish (an unverified program)
 */
gboolean
amk_program_estimate_schedule (AmkProgram *self,
                               gdouble    *makespan_ns,
                               gdouble    *total_ns,
                               gdouble    *critical_path_ns)
{
  Estimate e = { 0 };
  double path = 0;
  gboolean ok;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), FALSE);

  ok = estimate (self, &e);
  if (ok)
    for (gint i = e.last; i >= 0; i = e.reason[i])
      path += e.finish[i] - e.start[i];
  if (makespan_ns != NULL)
    *makespan_ns = ok ? e.makespan : 0;
  if (total_ns != NULL)
    *total_ns = ok ? e.total : 0;
  if (critical_path_ns != NULL)
    *critical_path_ns = path;
  estimate_clear (&e);
  return ok;
}

/**
 * amk_program_get_schedule_report:
 * @self: a program
 *
 * Describes the estimated schedule (see [method@Amk.Program.estimate_schedule]): the
 * makespan against its lower bound, per queue the instructions and the busy time, and
 * the critical path, so that a slow program shows why.
 *
 * Returns: (transfer full): the report, several lines of text
 */
char *
amk_program_get_schedule_report (AmkProgram *self)
{
  Estimate e = { 0 };
  GString *out;
  double bound, path = 0;
  guint steps = 0;

  g_return_val_if_fail (AMK_IS_PROGRAM (self), NULL);

  out = g_string_new (NULL);
  if (!estimate (self, &e))
    {
      g_string_append (out, _("The queues cannot finish: verify the program first.\n"));
      estimate_clear (&e);
      return g_string_free (out, FALSE);
    }
  for (gint i = e.last; i >= 0; i = e.reason[i])
    path += e.finish[i] - e.start[i], steps++;
  bound = MAX (e.total / self->num_queues, path);

  g_string_append_printf (out, _("Estimated schedule (%.0f ns per instruction plus its bytes at %.0f B/ns per SM):\n"),
                          500.0, 30.0);
  g_string_append_printf (out, _("  makespan %.1f us; work %.1f us over %u queues (%.1f us each on average); critical path %.1f us in %u instructions\n"),
                          e.makespan / 1000, e.total / 1000, self->num_queues,
                          e.total / self->num_queues / 1000, path / 1000, steps);
  g_string_append_printf (out, _("  makespan / max(work per queue, critical path) = %.2f\n"),
                          bound > 0 ? e.makespan / bound : 1.0);
  g_string_append (out, _("  queue  instructions  busy us\n"));
  for (guint q = 0; q < self->num_queues; q++)
    g_string_append_printf (out, "  %5u  %12u  %7.1f\n", q,
                            ((GArray *) g_ptr_array_index (self->queues, q))->len, e.busy[q] / 1000);
  g_string_append (out, _("  critical path, last instruction first:\n"));
  steps = 0;
  for (gint i = e.last; i >= 0 && steps < 12; i = e.reason[i], steps++)
    g_string_append_printf (out, _("    queue %d instruction %d (%s): %.1f us to %.1f us\n"),
                            e.queue_of[i], e.pos_of[i],
                            amk_opcode_nick (g_array_index (self->instructions, amk_instruction_t, i).opcode),
                            e.start[i] / 1000, e.finish[i] / 1000);
  estimate_clear (&e);
  return g_string_free (out, FALSE);
}
