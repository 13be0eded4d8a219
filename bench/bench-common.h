/* bench-common.h: what the benchmarks share: the median time of launches, wall clock
 * or device.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <stdlib.h>
#include <amk-glib/amk-glib.h>

static inline int
bench_cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

/* Median time in microseconds of `repeats` launches (after 3 warm-ups): the host's wall
 * time of the launch call, or with `device` the launch's device time
 * (amk_launcher_get_last_launch_time()). */
static inline double
bench_median_launch_us (AmkLauncher *launcher, int repeats, gboolean device)
{
  g_autofree double *t = g_new (double, repeats);
  g_autoptr(GError) error = NULL;

  for (int i = 0; i < 3 + repeats; i++)
    {
      gint64 start = g_get_monotonic_time ();
      if (!amk_launcher_launch (launcher, NULL, &error))
        g_error ("launch failed: %s", error->message);
      if (i >= 3)
        t[i - 3] = device ? amk_launcher_get_last_launch_time (launcher) * 1000.0
                          : (double) (g_get_monotonic_time () - start);
    }
  qsort (t, repeats, sizeof *t, bench_cmp_double);
  return t[repeats / 2];
}

/* Median wall time in microseconds of `repeats` launches (after 3 warm-ups). */
static inline double
bench_time_launches (AmkLauncher *launcher, int repeats)
{
  return bench_median_launch_us (launcher, repeats, FALSE);
}

/* Median device time in microseconds (amk_launcher_get_last_launch_time()) of `repeats`
 * launches (after 3 warm-ups). */
static inline double
bench_device_time_launches (AmkLauncher *launcher, int repeats)
{
  return bench_median_launch_us (launcher, repeats, TRUE);
}
