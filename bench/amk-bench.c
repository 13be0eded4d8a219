/* amk-bench.c: the VM's fixed costs on the GPU, each against a baseline measured in the
 * same run: launch overhead (132 NOP queues vs an empty plain kernel), dependency
 * latency (a chain of NOPs alternating between two SMs, ns per hop) and instruction
 * dispatch (independent NOPs, ns per instruction).
 *
 * Usage: amk-bench [--repeats N]
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench-common.h"

int amk_bench_empty_launch (int grid, int threads);
double amk_bench_empty_device_us (int grid, int threads, int dyn_smem, int clear, int repeats);

static int repeats = 50;

static double
time_empty (int grid, int threads)
{
  g_autofree double *t = g_new (double, repeats);

  for (int i = 0; i < 3 + repeats; i++)
    {
      gint64 start = g_get_monotonic_time ();
      if (amk_bench_empty_launch (grid, threads) != 0)
        g_error ("empty kernel launch failed");
      if (i >= 3)
        t[i - 3] = (double) (g_get_monotonic_time () - start);
    }
  qsort (t, repeats, sizeof *t, bench_cmp_double);
  return t[repeats / 2];
}

static void
load (AmkLauncher *launcher, AmkProgram *program)
{
  g_autoptr(GError) error = NULL;
  if (!amk_launcher_load (launcher, program, &error))
    g_error ("load failed: %s", error->message);
}

static AmkProgram *
nops_per_queue (guint queues, guint per_queue)
{
  AmkProgram *p = amk_program_new (queues);
  for (guint q = 0; q < queues; q++)
    for (guint k = 0; k < per_queue; k++)
      amk_program_add_instruction (p, q, AMK_OPCODE_NOP, NULL, 0, NULL);
  return p;
}

/* Instruction j runs on queue j % 2 and waits for instruction j - 1: every hop crosses
 * from one block (SM) to the other through one counter in global memory. */
static AmkProgram *
ping_pong (guint hops)
{
  AmkProgram *p = amk_program_new (2);
  gint c = amk_program_add_counter (p, "hops");

  for (guint j = 0; j < hops; j++)
    {
      gint i = amk_program_add_instruction (p, j % 2, AMK_OPCODE_NOP, NULL, 0, NULL);
      if (j > 0)
        amk_program_add_wait (p, i, c, j, NULL);
      amk_program_set_signal (p, i, c, 1, NULL);
    }
  return p;
}

/* From a trace of `program`: the mean time inside an instruction (start to end) and
 * between the end of one and the start of the next on queue 0, in ns. */
static void
trace_stats (AmkLauncher *launcher, AmkProgram *program, const char *what)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *json = NULL;
  g_auto(GStrv) lines = NULL;
  double sum_dur = 0, sum_gap = 0, prev_end = -1;
  guint n_dur = 0, n_gap = 0;

  load (launcher, program);
  amk_launcher_set_trace (launcher, TRUE);
  if (!amk_launcher_launch (launcher, NULL, &error) ||
      (json = amk_launcher_get_trace_json (launcher, &error)) == NULL)
    g_error ("traced launch failed: %s", error->message);
  amk_launcher_set_trace (launcher, FALSE);

  lines = g_strsplit (json, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *ts = strstr (lines[i], "\"ts\": "), *q = strstr (lines[i], "\"queue\": ");
      double t, d;
      if (ts == NULL || q == NULL || atoi (q + 9) != 0)
        continue;
      if (sscanf (ts, "\"ts\": %lf, \"dur\": %lf", &t, &d) != 2)
        continue;
      sum_dur += d, n_dur++;
      if (prev_end >= 0)
        sum_gap += t - prev_end, n_gap++;
      prev_end = t + d;
    }
  g_print ("trace of %s, queue 0: %u instructions, mean %.0f ns inside, mean %.0f ns between\n",
           what, n_dur, n_dur ? sum_dur * 1000 / n_dur : 0, n_gap ? sum_gap * 1000 / n_gap : 0);
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(AmkLauncher) launcher = amk_launcher_new (0);
  g_autoptr(AmkKernelAttributes) attr = NULL;
  g_autofree char *name = NULL;
  const guint threads = amk_launcher_get_threads_per_block (launcher);
  const guint hops = 20000, dispatch = 20000;
  double t_empty, t_nop, t_chain0, t_chain, t_disp0, t_disp;

  if (argc == 3 && g_str_equal (argv[1], "--repeats"))
    repeats = MAX (atoi (argv[2]), 1);
  if (argc == 2 && g_str_equal (argv[1], "--dispatch-only"))
    {
      /* one program to profile: 132 queues of independent NOPs, launched 3 times */
      g_autoptr(AmkProgram) p = nops_per_queue (132, 2000);
      load (launcher, p);
      for (int i = 0; i < 3; i++)
        if (!amk_launcher_launch (launcher, NULL, &error))
          g_error ("launch failed: %s", error->message);
      return 0;
    }

  name = amk_launcher_get_device_name (launcher, &error);
  if (name == NULL)
    {
      g_printerr ("amk-bench: %s\n", error->message);
      return 77;
    }
  attr = amk_launcher_kernel_attributes (launcher, threads, 0, &error);
  g_print ("device: %s, %d SMs; megakernel: %d registers, %d B static smem, %d B local, "
           "%d blocks/SM at %u threads\n",
           name, attr->num_sms, attr->num_regs, attr->static_smem_bytes, attr->local_bytes,
           attr->blocks_per_sm, threads);

  {
    g_autoptr(AmkProgram) p = nops_per_queue (132, 1);
    load (launcher, p);
    t_nop = bench_time_launches (launcher, repeats);
    t_empty = time_empty (132, threads);
    g_print ("launch overhead: 132 NOP queues %.2f us, empty plain kernel %.2f us, ratio %.2f\n",
             t_nop, t_empty, t_nop / t_empty);
  }
  {
    /* device time (events) at the shape the model launches: where the fixed cost of a
     * launch lies between the hardware's launch, the counters' clearing and the VM */
    g_autoptr(AmkProgram) p = nops_per_queue (132, 1);
    const int smem = AMK_LAUNCHER_MATVEC_SHARED_MEMORY;
    amk_launcher_set_threads_per_block (launcher, 512);
    amk_launcher_set_dynamic_shared_memory (launcher, smem);
    load (launcher, p);
    const double nop = bench_device_time_launches (launcher, repeats);
    const double coop = amk_bench_empty_device_us (132, 512, smem, FALSE, repeats);
    const double cleared = amk_bench_empty_device_us (132, 512, smem, TRUE, repeats);
    g_print ("launch device time at 512 threads, %d B dynamic shared memory: 132 NOP queues "
             "%.2f us; empty cooperative kernel %.2f us, with a memset first %.2f us\n",
             smem, nop, coop, cleared);
    amk_launcher_set_threads_per_block (launcher, threads);
    amk_launcher_set_dynamic_shared_memory (launcher, 0);
  }
  {
    g_autoptr(AmkProgram) p0 = ping_pong (2);
    g_autoptr(AmkProgram) p = ping_pong (hops + 2);
    load (launcher, p0);
    t_chain0 = bench_time_launches (launcher, repeats);
    load (launcher, p);
    t_chain = bench_time_launches (launcher, repeats);
    g_print ("dependency latency: %u hops between 2 SMs in %.1f us (baseline 1 hop %.1f us): %.0f ns per hop\n",
             hops, t_chain, t_chain0, (t_chain - t_chain0) * 1000.0 / hops);
  }
  {
    g_autoptr(AmkProgram) p0 = nops_per_queue (132, 1);
    g_autoptr(AmkProgram) p = nops_per_queue (132, dispatch + 1);
    load (launcher, p0);
    t_disp0 = bench_time_launches (launcher, repeats);
    load (launcher, p);
    t_disp = bench_time_launches (launcher, repeats);
    g_print ("instruction dispatch: %u independent NOPs per queue on 132 queues in %.1f us "
             "(baseline 1 NOP %.1f us): %.1f ns per instruction per queue\n",
             dispatch, t_disp, t_disp0, (t_disp - t_disp0) * 1000.0 / dispatch);
  }
  {
    g_autoptr(AmkProgram) p = nops_per_queue (132, 2000);
    g_autoptr(AmkProgram) q = ping_pong (2000);
    trace_stats (launcher, p, "dispatch (132 queues x 2000 NOPs)");
    trace_stats (launcher, q, "dependency chain (2 queues, 2000 hops)");
  }
  return 0;
}
