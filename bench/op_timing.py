"""op_timing.py: what the per-op benches (batch-ops.py, prefill-ops.py, matmul.py) share:
bf16 rounding for numpy arrays, and the median device time of a one-op program's
launches with the launcher's own configuration.

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import statistics

import gi
import numpy as np

gi.require_version("Amk", "1.0")
from gi.repository import Amk, GLib  # noqa: E402


def bf16(a):
    """float32 values rounded to bf16 (to nearest even), as uint16 bits."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def launch_median_ms(build, repeats):
    """build(program) adds the ops and returns {buffer: array} to upload; the program is
    compiled and loaded on a new launcher, launched repeats + 2 times, and the median of
    the last `repeats` launches' device times (AmkLauncher.get_last_launch_time) returned
    in ms."""
    launcher = Amk.Launcher(device=0)
    prog = Amk.Program.new(launcher.get_preferred_queues())
    inputs = build(prog)
    prog.compile()
    launcher.load(prog)
    for key, array in inputs.items():
        launcher.upload(key, GLib.Bytes.new(np.ascontiguousarray(array).tobytes()))
    times = []
    for _ in range(repeats + 2):
        launcher.launch(None)
        times.append(launcher.get_last_launch_time())
    return statistics.median(times[2:])
