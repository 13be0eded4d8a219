#!/usr/bin/env python3
"""matmul.py: MATMUL's tensor-core throughput on Llama-3.2-1B's projection shapes, with
the launcher's own configuration. Run on the GPU machine through bench/matmul.sh, which
runs torch_matmul.py (cuBLAS) in the same session and prints the ratio.

    bash .gpu/run.sh python3 bench/matmul.py [--m 2048] [--repeats 10]

For each shape: one program of a single MATMUL op (the compiler's tiling), random bf16
W, bf16 X (what the GPU prefill feeds its MATMULs; --x-dtype f32 times the tile that
converts X); the device time of each launch (AmkLauncher.get_last_launch_time), median;
then the same launches traced, and the op's time inside the launch: from the first tile's
start to the last tile's end, median (what the op costs inside a prefill's megakernel,
without the launch's own fixed cost). Prints "AMK name M N K ms TFLOP/s ... in-launch ms
TFLOP/s". A check of three rows against numpy comes first.

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import argparse
import json
import statistics

import gi
import numpy as np

gi.require_version("Amk", "1.0")
from gi.repository import Amk, GLib  # noqa: E402
from op_timing import bf16  # noqa: E402

# Llama-3.2-1B: hidden 2048, q + 2 kv = 3072, ffn 8192
SHAPES = [("qkv", 3072, 2048), ("o", 2048, 2048), ("gate", 8192, 2048), ("down", 2048, 8192)]


def run_shape(name, m, n, k, repeats, rng, x_f32):
    launcher = Amk.Launcher(device=0)
    prog = Amk.Program.new(launcher.get_preferred_queues())
    x = prog.add_buffer("x", Amk.DType.F32 if x_f32 else Amk.DType.BF16, [m, k], Amk.BufferRole.INPUT)
    w = prog.add_buffer("w", Amk.DType.BF16, [n, k], Amk.BufferRole.CONSTANT)
    y = prog.add_buffer("y", Amk.DType.F32, [m, n], Amk.BufferRole.OUTPUT)
    wv = bf16(rng.standard_normal(n * k, dtype=np.float32) * 0.05)
    prog.set_buffer_data(w, GLib.Bytes.new(wv.tobytes()))
    prog.op_matmul(y, w, x, -1, -1, -1, 0.0)
    prog.compile()
    launcher.load(prog)
    xv = rng.standard_normal(m * k, dtype=np.float32)
    launcher.upload(x, GLib.Bytes.new(xv.tobytes() if x_f32 else bf16(xv).tobytes()))
    times = []
    for _ in range(repeats + 2):
        launcher.launch(None)
        times.append(launcher.get_last_launch_time())
    out = np.frombuffer(launcher.download(y).get_data(), np.float32).reshape(m, n)
    wf = (wv.astype(np.uint32) << 16).view(np.float32).reshape(n, k)
    xb = (bf16(xv).astype(np.uint32) << 16).view(np.float32).reshape(m, k)
    rows = [0, m // 2, m - 1]
    want = xb[rows].astype(np.float64) @ wf.T.astype(np.float64)
    err = np.linalg.norm(out[rows] - want) / np.linalg.norm(want)
    ms = statistics.median(times[2:])
    tflops = 2.0 * m * n * k / (ms * 1e-3) / 1e12
    launcher.props.trace = True
    spans = []
    for _ in range(repeats + 2):
        launcher.launch(None)
        events = json.loads(launcher.get_trace_json())["traceEvents"]
        spans.append((max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) * 1e-3)
    span = statistics.median(spans[2:])
    print(f"CHECK {name} rel err {err:.2e} {'ok' if err < 1e-3 else 'FAIL'}")
    print(f"AMK {name} {m} {n} {k} {ms:.4f} ms {tflops:.1f} TFLOP/s "
          f"(threads {launcher.props.threads_per_block}, smem {launcher.props.dynamic_shared_memory}) "
          f"in-launch {span:.4f} ms {2.0 * m * n * k / (span * 1e-3) / 1e12:.1f} TFLOP/s")
    return err < 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--x-dtype", choices=["bf16", "f32"], default="bf16")
    args = ap.parse_args()
    if Amk.Launcher.get_device_count() == 0:
        print("matmul.py: no CUDA device")
        return 77
    rng = np.random.default_rng(0)
    ok = all([run_shape(name, args.m, n, k, args.repeats, rng, args.x_dtype == "f32") for name, n, k in SHAPES])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
