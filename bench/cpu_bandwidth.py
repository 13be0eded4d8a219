#!/usr/bin/env python3
"""cpu_bandwidth.py: the CPU executor's generation against this machine's memory
bandwidth, in one run: a plain copy of 256 MiB (numpy, best of five) gives the bytes a
second the memory moves; the generator then decodes TOKENS tokens of MODEL on the CPU
executor, and the weight bytes a step reads (Amk.Model:weight-bytes) times its tokens a
second, over the copy's rate, is the fraction of the bandwidth floor it reaches.

    python3 bench/cpu_bandwidth.py MODEL [TOKENS]

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import sys
import time

import gi
import numpy as np

gi.require_version("Amk", "1.0")
from gi.repository import Amk  # noqa: E402


def copy_rate():
    a = np.ones(64 << 20, np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return a.nbytes / best   # bytes copied a second (each read once and written once)


def measure(path, tokens):
    """Returns (copy bytes a second, generation tokens a second, weight bytes a step)."""
    rate = copy_rate()
    model = Amk.Model.new_from_file(path, None)
    generator = Amk.Generator.new(model, Amk.CpuExecutor.new_empty())
    generator.generate("The quick brown fox", tokens, None)
    return rate, generator.props.tokens_per_second, model.props.weight_bytes


def main(path, tokens):
    rate, speed, weight_bytes = measure(path, tokens)
    read = weight_bytes * speed
    print(f"CPU copy {rate / 1e9:.2f} GB/s; generation {speed:.1f} tokens/s x "
          f"{weight_bytes / 1e6:.1f} MB of weights = {read / 1e9:.2f} GB/s, "
          f"{100 * read / rate:.0f}% of the copy's rate")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 32)
