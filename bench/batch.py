#!/usr/bin/env python3
"""batch.py: batched decode with the library's defaults: the time of one step of an
Amk.Batch with B running sequences, against B = 1 and against the generator's decode
step (one sequence, MATVEC), on the same executor and model, in one run.

    bash .gpu/run.sh python3 bench/batch.py MODEL [B,B,...] [STEPS]

MODEL is a GGUF file or a Hugging Face folder. For each B: a batch of capacity B, B
different prompts of about 16 tokens, each asked for more tokens than the run takes;
after the step that feeds the prompts, STEPS steps are timed one by one (wall time of
amk_batch_step(): the uploads, the launch and the download of B tokens). Prints per B the
median step, tokens/s, and the ratios the issue names (step at B over step at 1,
throughput at B over throughput at 1), then the generator's median step. Also checks
that each sequence's tokens are the same as in a batch of its own (exact).

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import statistics
import sys
import time

import gi

gi.require_version("Amk", "1.0")
from gi.repository import Amk  # noqa: E402

WORDS = ("river mountain city music garden ocean winter paper window story engine "
         "forest planet market bridge candle").split()


def prompts(n):
    return [f"Tell me about the {WORDS[i % len(WORDS)]} number {i} and" for i in range(n)]


def new_executor():
    if Amk.Launcher.get_device_count() > 0:
        return Amk.Launcher(device=0)
    return Amk.CpuExecutor.new_empty()


def run_batch(model, b, steps):
    batch = Amk.Batch.new(model, new_executor(), b)
    ids = [batch.add(p, steps + 8) for p in prompts(b)]
    batch.step(None)  # the prompts, and the first token
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        batch.step(None)
        times.append(time.perf_counter() - t0)
        if batch.get_n_active() < b:
            break
    tokens = [list(batch.get_tokens(i)) for i in ids]
    return statistics.median(times), tokens


def main(path, sizes, steps):
    model = Amk.Model.new_from_file(path, None)
    executor = new_executor()
    base = None
    alone = {}
    for b in sizes:
        step, tokens = run_batch(model, b, steps)
        if b == 1:
            base = step
        if 1 not in alone:
            alone[1] = tokens[0]
        same = tokens[0][: len(alone[1])] == alone[1][: len(tokens[0])]
        line = f"AMK batch B={b}: step {step * 1e3:.3f} ms, {b / step:.0f} tokens/s"
        if base is not None:
            line += f", step/step(B=1) {step / base:.2f}, throughput/throughput(B=1) {b * base / step:.1f}"
        line += f", sequence 0 as alone: {'same' if same else 'DIFFERENT'}"
        print(line)
        sys.stdout.flush()

    generator = Amk.Generator.new(model, executor)
    generator.generate(prompts(1)[0], steps, None)
    gen_step = 1.0 / generator.props.tokens_per_second
    print(f"AMK generator decode step {gen_step * 1e3:.3f} ms ({executor.get_description()})")
    if base is not None:
        print(f"AMK batch B=1 step / generator step {base / gen_step:.2f}")
    gen_tokens = list(generator.get_tokens())
    n = min(len(gen_tokens), len(alone[1]))
    agree = next((i for i in range(n) if gen_tokens[i] != alone[1][i]), n)
    print(f"AMK batch sequence 0 vs generator: first {agree} of {n} tokens equal")


if __name__ == "__main__":
    main(sys.argv[1],
         [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 8, 32, 64],
         int(sys.argv[3]) if len(sys.argv) > 3 else 32)
