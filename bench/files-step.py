#!/usr/bin/env python3
"""files-step.py: device time per decode step of several model files of one model (a bf16
checkpoint folder and GGUF files quantized from it by `amk quantize`), quantized matrices
kept as stored (AmkModel:keep-quantized; with --default, as the model chooses on its own),
the launcher's defaults, rounds alternating
between the files in one process; prints the median per file and the weights it reads
per second.

Usage (GPU machine): bash .gpu/run.sh python3 bench/files-step.py PATH[,PATH...] [TOKENS]
[ROUNDS] [--default]  (TOKENS per timed generation, default 64; ROUNDS, default 3)

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import os
import sys
from importlib import import_module

sys.path.insert(0, os.path.dirname(__file__))
import gi  # noqa: E402
gi.require_version("Amk", "1.0")
from gi.repository import Amk  # noqa: E402

step_ms = import_module("model-step").step_ms


def main(paths, tokens, rounds, keep=True):
    models, launchers = {}, {}
    for p in paths:
        launchers[p] = Amk.Launcher(device=0)
        models[p] = Amk.Model(path=p, keep_quantized=keep)
        models[p].init(None)
    times = {p: [] for p in paths}
    for r in range(rounds):
        for p in paths:
            ms, dev, n, text = step_ms(models[p], launchers[p], tokens)
            times[p].append(dev)
            print(f"round {r} {os.path.basename(p)}: device {dev:.4f} ms/step (median of {n}), "
                  f"wall {ms:.4f}; {text[:60]!r}", flush=True)
    for p in paths:
        med = sorted(times[p])[len(times[p]) // 2]
        gbs = models[p].props.weight_bytes / med / 1e6
        print(f"STEP {os.path.basename(p)}: {med:.4f} ms, weights "
              f"{models[p].props.weight_bytes / 1e9:.3f} GB -> {gbs:.0f} GB/s")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--default"]
    main(args[0].split(","), int(args[1]) if len(args) > 1 else 64,
         int(args[2]) if len(args) > 2 else 3, keep="--default" not in sys.argv)
