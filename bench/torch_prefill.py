#!/usr/bin/env python3
"""torch_prefill.py: the baseline of bench/prefill.py: Hugging Face transformers, eager
PyTorch, bf16, one forward pass over a prompt of TOKENS random token ids (the KV cache
filled, the last position's logits), CUDA-event timing, median after warm-ups.

    /opt/torch/.venv/bin/python3 bench/torch_prefill.py FOLDER [TOKENS] [ROUNDS]

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import statistics
import sys

import torch
from transformers import AutoModelForCausalLM


def main(folder, n, rounds):
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.bfloat16).cuda().eval()
    ids = torch.randint(0, model.config.vocab_size, (1, n), device="cuda")
    times = []
    with torch.no_grad():
        for r in range(rounds + 3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            model(ids, use_cache=True, logits_to_keep=1)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    ms = statistics.median(times[3:])
    print(f"TORCH prefill {n} tokens: {ms:.2f} ms, {n / ms * 1e3:.0f} tokens/s (transformers eager, bf16)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2048,
         int(sys.argv[3]) if len(sys.argv) > 3 else 10)
