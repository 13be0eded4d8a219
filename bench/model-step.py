#!/usr/bin/env python3
"""model-step.py: where the time of one decode step of a whole model goes, on the megakernel.

For each MATVEC pipeline (direct loads with no dynamic shared memory, and the cp.async
ring with AMK_MATVEC_SMEM_BYTES), loads the model (a GGUF file or a Hugging Face checkpoint
folder) on one queue per SM with 512 threads, times a greedy run (ms per decode step, the
prompt's steps excluded), then traces one step and prints the layers' spans, how far
apart the LM head's tiles end, the stages of the middle layer (durations, and the hops
between them), and a profile of that layer: per 1 us bin, how many SMs run which op. The traces are written to
OUTDIR/step-<bytes>-<lookahead>.json (tools/amk-trace-to-png.py draws them).

With L2 (a comma-separated list of AmkLauncher:l2-prefetch lookaheads, default 0) the ring
runs once per lookahead. MODEL_STEP_RING_ONLY=1 in the environment skips the direct loads;
MODEL_STEP_PAGED=1 runs the ring's configurations on the paged build (AmkLauncher:paged).

With --compare-default it only compares the launcher's own configuration (Amk.Launcher with
nothing set: it chooses threads and shared memory when it loads the program) with the
explicit one above (512 threads, AMK_LAUNCHER_MATVEC_SHARED_MEMORY), ROUNDS times each,
alternating, and prints both medians of the device time per step and their ratio
default/explicit.

Usage (GPU machine): bash .gpu/run.sh python3 bench/model-step.py MODEL OUTDIR [TOKENS [L2]]
                     bash .gpu/run.sh python3 bench/model-step.py --compare-default MODEL [TOKENS [ROUNDS]]"""
import json
import os
import sys
import time

import gi
gi.require_version("Amk", "1.0")
from gi.repository import Amk  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from trace_stages import stage_table  # noqa: E402

RING_BYTES = Amk.LAUNCHER_MATVEC_SHARED_MEMORY   # MATVEC's shared-memory ring
PROMPT = "The capital of France is"


def step_ms(model, launcher, tokens):
    """ms per decode step of a greedy run: (time of prompt + tokens) - (time of the prompt
    alone), over the tokens generated; and the median device time of those steps'
    launches (AmkLauncher.get_last_launch_time after each token: what the GPU spends on
    a step, without the host's work between launches)."""
    generator = Amk.Generator.new(model, launcher)
    generator.generate(PROMPT, 2, None)                 # warm-up: load, first launches
    generator.reset()
    t0 = time.perf_counter()
    generator.prefill(PROMPT, None)
    prefill = time.perf_counter() - t0
    generator.reset()
    device = []
    handler = generator.connect("token", lambda *args: device.append(launcher.get_last_launch_time()))
    t0 = time.perf_counter()
    text = generator.generate(PROMPT, tokens, None)
    total = time.perf_counter() - t0
    generator.disconnect(handler)
    n = generator.props.generated_tokens
    device.sort()
    return (total - prefill) * 1e3 / n, device[len(device) // 2], n, text


def attention_phases(starts):
    """The sorted ATTN_DECODE start times grouped into phases, one per layer: a gap of
    more than 5 us starts the next."""
    phases = []
    for s in starts:
        if not phases or s - phases[-1][-1] > 5:
            phases.append([s])
        else:
            phases[-1].append(s)
    return phases


def layer_profile(events, n_layers):
    """Per 1 us bin of the middle layer: the SMs busy with each op."""
    phases = attention_phases(sorted({round(e["ts"]) for e in events if e["name"] == "attn-decode"}))
    if len(phases) < 3:
        return ["(fewer than 3 attention phases: no layer profile)"]
    mid = len(phases) // 2
    t0, t1 = phases[mid - 1][0], phases[mid][0]      # attention to attention: one layer
    bins = {}
    for e in events:
        a, b = e["ts"], e["ts"] + e["dur"]
        if b < t0 or a > t1:
            continue
        for t in range(int(max(a, t0)), int(min(b, t1)) + 1):
            bins.setdefault(t - int(t0), {}).setdefault(e["name"], set()).add(e["tid"])
    lines = [f"layer {mid} of {len(phases)} attention phases, {t1 - t0:.1f} us from one "
             f"attention phase to the next; SMs busy per op, per us:"]
    prev = None
    run_start = 0
    for t in range(int(t1 - t0) + 2):
        cur = tuple(sorted((k, len(v)) for k, v in bins.get(t, {}).items()))
        if cur != prev:
            if prev is not None:
                lines.append(f"  {run_start:4d}-{t - 1:4d} us  " +
                             (", ".join(f"{k} {n}" for k, n in prev) or "idle"))
            prev, run_start = cur, t
    return lines


def step_summary(events):
    """The layers' spans (attention phase to attention phase) and how far apart the LM
    head's tiles (each queue's last MATVEC) end: a spread there is imbalance or bandwidth
    sharing, a long median span is latency between the stages."""
    phases = attention_phases(sorted(e["ts"] for e in events if e["name"] == "attn-decode"))
    spans = sorted(b[0] - a[0] for a, b in zip(phases, phases[1:]))
    last = {}
    for e in events:
        q = e["tid"]
        if e["name"] == "matvec" and (q not in last or e["ts"] > last[q]["ts"]):
            last[q] = e
    lines = []
    if spans:
        lines.append(f"layers: {len(spans)} spans from one attention phase to the next, median "
                     f"{spans[len(spans) // 2]:.1f} us (min {spans[0]:.1f}, max {spans[-1]:.1f})")
    if last:
        ends = sorted(e["ts"] + e["dur"] for e in last.values())
        durs = sorted(e["dur"] for e in last.values())
        lines.append(f"LM head: {len(last)} tiles end between {ends[0]:.1f} and {ends[-1]:.1f} us, "
                     f"tile durations {durs[0]:.1f} to {durs[-1]:.1f} us")
    return lines


def main(model_path, outdir, tokens, l2_lookaheads):
    os.makedirs(outdir, exist_ok=True)
    model = Amk.Model.new_from_file(model_path, None)
    print(f"{model_path}: {model.props.architecture}, {model.props.n_layers} layers, "
          f"{model.props.weight_bytes / 1e6:.0f} MB of weights, "
          f"{model.props.program.get_num_queues()} queues")
    direct = [] if os.environ.get("MODEL_STEP_RING_ONLY") else [(0, 0)]
    for smem, l2 in direct + [(RING_BYTES, a) for a in l2_lookaheads]:
        launcher = Amk.Launcher(device=0)
        launcher.props.threads_per_block = 512
        launcher.props.dynamic_shared_memory = smem
        launcher.props.l2_prefetch = l2
        launcher.props.paged = smem > 0 and os.environ.get("MODEL_STEP_PAGED") == "1"
        ms, device_ms, n, text = step_ms(model, launcher, tokens)
        floor_ms = model.props.weight_bytes / 4.16e12 * 1e3
        print(f"STEP smem {smem:6d} l2-prefetch {l2} paged {launcher.props.paged}: {ms:.3f} ms per decode step ({n} tokens), "
              f"{floor_ms / ms * 100:.0f} % of the copy-bandwidth floor {floor_ms:.3f} ms; "
              f"device time {device_ms:.3f} ms (median); text {text[:40]!r}")
        launcher.props.trace = True
        generator = Amk.Generator.new(model, launcher)
        generator.generate(PROMPT, 3, None)
        trace = launcher.get_trace_json()
        with open(os.path.join(outdir, f"step-{smem}-{l2}.json"), "w") as f:
            f.write(trace)
        events = json.loads(trace)["traceEvents"]
        end = max(e["ts"] + e["dur"] for e in events)
        print(f"  traced step: {len(events)} instructions, {end:.1f} us span")
        for line in (step_summary(events) + stage_table(events, model.props.n_layers) +
                     layer_profile(events, model.props.n_layers)):
            print("  " + line)
        sys.stdout.flush()


def compare_default(model_path, tokens, rounds):
    """The launcher's default configuration against the explicit one, in one process and
    alternating, so that both see the same clocks and the same state of the device."""
    model = Amk.Model.new_from_file(model_path, None)
    default = Amk.Launcher(device=0)
    explicit = Amk.Launcher(device=0)
    explicit.props.threads_per_block = 512
    explicit.props.dynamic_shared_memory = RING_BYTES
    times = {"default": [], "explicit": []}
    for r in range(rounds):
        for name, launcher in (("default", default), ("explicit", explicit)):
            ms, device_ms, n, _ = step_ms(model, launcher, tokens)
            times[name].append(device_ms)
            print(f"round {r} {name:8s}: {launcher.props.threads_per_block} threads, "
                  f"{launcher.props.dynamic_shared_memory} bytes of dynamic shared memory: "
                  f"device time {device_ms:.4f} ms per step (median of {n}), {ms:.4f} ms wall")
            sys.stdout.flush()
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(f"COMPARE {model_path}: default {med['default']:.4f} ms, explicit {med['explicit']:.4f} ms, "
          f"ratio default/explicit {med['default'] / med['explicit']:.4f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--compare-default":
        compare_default(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 64,
                        int(sys.argv[4]) if len(sys.argv) > 4 else 5)
    else:
        main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 64,
             [int(a) for a in sys.argv[4].split(",")] if len(sys.argv) > 4 else [0])
