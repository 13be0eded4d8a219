#!/usr/bin/env python3
"""One Llama-3.2-1B-shaped layer (tests/python/llama_layer.py) on the GPU: its time per
launch configuration (host wall and device time, state reloaded and back to back), then
one traced launch: writes the trace JSON and prints the layer's stages (trace_stages.py:
per stage the instructions, their median and longest time, the hop before it, its span).

The layer is built like AmkModel builds a Llama layer (one q/k/v matvec, RoPE inside the
attention); with --rope-kv, from three q/k/v matvecs and ROPE_KV before ATTENTION. With
--repeat N one launch runs the layer N times in a row (like bench/torch_layer.py's CUDA
graph of 20 steps) and the times printed are per layer.

Usage (GPU machine):
    bash .gpu/run.sh python3 bench/layer-trace.py [--rope-kv] [--repeat N] OUT.json"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from amktest import Amk, make_rng  # noqa: E402
from llama_layer import LLAMA_1B, Layer  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from trace_stages import stage_table  # noqa: E402


def time_launches(gpu, layer, reload, n=20):
    """Medians of the host wall time of a launch call and of its device time. With
    reload, the state before the step is uploaded again before every launch (the same
    step each time); without, the launches follow each other like PyTorch's graph of 20
    steps (the hidden vector then changes from launch to launch, the bytes do not)."""
    times, device = [], []
    layer.load(gpu)
    for _ in range(n + 3):
        if reload:
            layer.load(gpu)
        t0 = time.perf_counter()
        gpu.launch(None)
        times.append(time.perf_counter() - t0)
        device.append(gpu.get_last_launch_time() * 1e-3)
    return statistics.median(times[3:]), statistics.median(device[3:])


def main(path, fused_rope, repeat):
    layer = Layer(make_rng(), LLAMA_1B, 132, LLAMA_1B["context"] - 1, fused_rope, repeat)
    gpu = Amk.Launcher(device=0)
    gpu.load(layer.p)
    best = None
    mb = layer.bytes_moved() / 1e6
    for smem in (0, 196608):               # direct MATVEC loads, or the shared-memory ring
        for ahead in (0, 1, 2):            # MATVEC weights streamed into L2 ahead
            gpu.props.threads_per_block = 512
            gpu.props.dynamic_shared_memory = smem
            gpu.props.l2_prefetch = ahead
            for reload in (True, False):
                t, dev = (v / repeat for v in time_launches(gpu, layer, reload))
                tbps = layer.bytes_moved() / t / 1e12
                how = "state reloaded" if reload else "back to back  "
                what = f"layer (x{repeat}, per layer)" if repeat > 1 else "layer"
                print(f"{what}, 512 threads, {smem:6d} B dynamic shared memory, "
                      f"l2-prefetch {ahead}, {how}: {t * 1e6:6.1f} us host wall "
                      f"({tbps / 4.16:.2f} x copy over {mb:.1f} MB), device time "
                      f"{dev * 1e6:5.1f} us ({layer.bytes_moved() / dev / 4.16e12:.2f} x copy)")
                if reload and (best is None or t < best[0]):
                    best = (t, smem, ahead)
    gpu.props.dynamic_shared_memory = best[1]
    gpu.props.l2_prefetch = best[2]
    print(f"traced with 512 threads, {best[1]} B dynamic shared memory, l2-prefetch {best[2]}")
    layer.load(gpu)
    gpu.props.trace = True
    gpu.launch(None)
    traced_device_us = gpu.get_last_launch_time() * 1e3
    text = gpu.get_trace_json()
    with open(path, "w") as f:
        f.write(text)
    events = json.loads(text)["traceEvents"]
    end = max(e["ts"] + e["dur"] for e in events)
    print(f"{repeat} layer(s): {len(events)} instructions, {end:.1f} us from the first start "
          f"to the last end (device time of this traced launch {traced_device_us:.1f} us)")
    for line in stage_table(events, repeat, tail=0):
        print("  " + line)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rope-kv", action="store_true",
                    help="ROPE_KV and ATTENTION as two ops")
    ap.add_argument("--repeat", type=int, default=1, help="layers in a row in one launch")
    ap.add_argument("out", help="where to write the trace JSON")
    a = ap.parse_args()
    main(a.out, fused_rope=not a.rope_kv, repeat=max(a.repeat, 1))
