#!/usr/bin/env python3
"""torch_decode.py: the PyTorch baseline of one decode step of a whole model: a Hugging
Face checkpoint folder loaded with transformers (bf16, on the GPU), greedy generation of
N tokens with a static KV cache, eager and then with torch.compile(mode="reduce-overhead"),
which replays each decode step as a CUDA graph. Prints ms per generated token (the
median of 3 timed runs after a warm-up).

Run on the GPU machine with the PyTorch virtual environment:
    /opt/torch/.venv/bin/python3 bench/torch_decode.py CHECKPOINT [--tokens 64] [--no-compile]

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def ms_per_token(model, ids, n, runs=3):
    times = []
    for i in range(runs + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             cache_implementation="static", pad_token_id=0)
        torch.cuda.synchronize()
        if i > 0:  # the first run warms up (and compiles)
            times.append((time.perf_counter() - t0) * 1000.0 / (out.shape[1] - ids.shape[1]))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda")
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.bfloat16).to(dev).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5]], device=dev)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(dev)}, {args.checkpoint}")
    with torch.no_grad():
        print(f"TORCH_DECODE eager, static cache: {ms_per_token(model, ids, args.tokens):.3f} ms/token")
        if not args.no_compile:
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
            print(f"TORCH_DECODE torch.compile reduce-overhead (CUDA graphs), static cache: "
                  f"{ms_per_token(model, ids, args.tokens):.3f} ms/token")


if __name__ == "__main__":
    main()
