#!/usr/bin/env python3
"""torch_matmul.py: the cuBLAS baseline of bench/matmul.py on the same shapes:
torch.matmul of a bf16 X [M, K] and a bf16 W^T, CUDA-event timing, median after
warm-ups. Prints "TORCH name M N K ms TFLOP/s".

    /opt/torch/.venv/bin/python3 bench/torch_matmul.py [--m 2048] [--repeats 50]

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import argparse
import statistics

import torch

SHAPES = [("qkv", 3072, 2048), ("o", 2048, 2048), ("gate", 8192, 2048), ("down", 2048, 8192)]


def time_ms(fn, repeats, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        return 77
    for name, n, k in SHAPES:
        x = torch.randn(args.m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        ms = time_ms(lambda: torch.matmul(x, w.t()), args.repeats)
        print(f"TORCH {name} {args.m} {n} {k} {ms:.4f} ms {2.0 * args.m * n * k / (ms * 1e-3) / 1e12:.1f} TFLOP/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
