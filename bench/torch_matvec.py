#!/usr/bin/env python3
"""torch_matvec.py: the PyTorch baseline of bench/amk-matvec-bench on the same shapes.

Run on the GPU machine with the PyTorch virtual environment:
    /opt/torch/.venv/bin/python3 bench/torch_matvec.py [--repeats 50]

For each shape (bf16 W of rows x K): torch.mv(W, x) with a bf16 x (torch.mv wants one
dtype for both; the f32 x of our benchmark is converted once, outside the timing), and
the usual decode-step form F.linear(x[None], W). CUDA-event timing, median of the
repeats after warm-ups. Bytes moved = W + x + y. Also a device-to-device copy of 1 GiB
in the same run, the bandwidth reference (reported both as bytes read + written per
second, the convention of DESIGN.md's 4.16 TB/s, and as bytes copied per second).

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

SHAPES = [(16384, 2048), (28672, 4096), (128256, 2048)]


def time_us(fn, repeats, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)  # ms -> us
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_matvec: no CUDA device")
        return 77
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, "
          f"median of {args.repeats} (CUDA events)")

    # the bandwidth reference: 1 GiB device-to-device copy
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    src.random_(0, 255)
    dst = torch.empty_like(src)
    t = time_us(lambda: dst.copy_(src), args.repeats)
    copy_rw = 2 * n / t / 1e6  # bytes read + written, TB/s
    print(f"COPY 1 GiB device-to-device: {t:.1f} us = {copy_rw:.2f} TB/s read+write "
          f"({n / t / 1e6:.2f} TB/s copied)")
    del src, dst
    torch.cuda.empty_cache()

    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    for rows, k in SHAPES:
        w = (torch.rand((rows, k), device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)
        x32 = torch.rand((k,), device=dev, generator=gen) * 2 - 1
        x = x32.to(torch.bfloat16)
        y = torch.empty((rows,), device=dev, dtype=torch.bfloat16)
        gb = (rows * k * 2 + k * 2 + rows * 2) / 1e9
        print(f"\n== {rows} x {k} bf16 W ({rows * k * 2 / 1e6:.1f} MB), bf16 x and y: {gb * 1e3:.1f} MB moved")
        variants = [
            ("torch.mv(W, x, out=y)", lambda: torch.mv(w, x, out=y)),
            ("W @ x", lambda: w @ x),
            ("F.linear(x[None], W)", lambda: F.linear(x[None], w)),
        ]
        # check once against fp32 on the GPU
        ref = (w.float() @ x.float())
        got = torch.mv(w, x).float()
        rel = ((got - ref).norm() / ref.norm()).item()
        print(f"{'PASS' if rel <= 1e-2 else 'FAIL'} torch.mv vs fp32: rel err {rel:.2e}")
        for name, fn in variants:
            t = time_us(fn, args.repeats)
            tbps = gb / t * 1e3
            print(f"TORCH {rows} x {k} {name:28s}: {t:8.1f} us {tbps:5.2f} TB/s, "
                  f"{tbps / copy_rw:.2f} x copy ({tbps / 4.16:.2f} x 4.16 TB/s)")
        del w, x32, x, y, ref, got
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
