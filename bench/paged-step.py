#!/usr/bin/env python3
"""paged-step.py: device time per decode step with and without the paged build
(AmkLauncher:paged), each model's two launchers alternating in one process, the
launcher's defaults otherwise; prints the medians, their ratio paged / decode build, and
whether the greedy texts agree.

Usage (GPU machine): bash .gpu/run.sh python3 bench/paged-step.py PATH[,PATH...] [TOKENS]
[ROUNDS]  (TOKENS per timed generation, default 64; ROUNDS, default 3)

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


def main(paths, tokens, rounds):
    for p in paths:
        model = Amk.Model(path=p)
        model.init(None)
        launchers = {paged: Amk.Launcher(device=0, paged=paged) for paged in (False, True)}
        times = {False: [], True: []}
        texts = {}
        for r in range(rounds):
            for paged, launcher in launchers.items():
                ms, dev, n, text = step_ms(model, launcher, tokens)
                times[paged].append(dev)
                texts[paged] = text
                print(f"round {r} {os.path.basename(p)} paged={paged}: device {dev:.4f} ms/step "
                      f"(median of {n}), wall {ms:.4f}, {launcher.props.threads_per_block} threads, "
                      f"{launcher.props.dynamic_shared_memory} B; {text[:50]!r}", flush=True)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        print(f"STEP {os.path.basename(p)}: decode build {med[False]:.4f} ms, paged {med[True]:.4f} ms, "
              f"paged / decode {med[True] / med[False]:.3f}; texts "
              f"{'agree' if texts[True] == texts[False] else 'DIFFER'}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]) if len(sys.argv) > 2 else 64,
         int(sys.argv[3]) if len(sys.argv) > 3 else 3)
