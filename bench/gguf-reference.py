#!/usr/bin/env python3
"""gguf-reference.py: Hugging Face transformers' reference for a GGUF file (e.g. a random
checkpoint of tools/make-random-checkpoint.py quantized by `amk quantize`), as transformers
reads it through the gguf package (every tensor decoded to float32; the configuration from
the checkpoint's config.json, which the file's metadata renders only in part): the greedy run of the
checkpoint's prompt and the logits of every step, written as OUTDIR/reference.json and
OUTDIR/reference-logits.npy in make-random-checkpoint.py's format, with "model_file"
naming the GGUF. test-hf-model's env-checkpoints test then loads that file, keeping its
quantized matrices, and compares amk's logits with these:

  python3 bench/gguf-reference.py /tmp/llama-3.2-1b /tmp/l1b-q8_0.gguf /tmp/l1b-q8_0-ref [TOKENS]
  AMK_TEST_HF_CHECKPOINTS=/tmp/l1b-q8_0-ref G_TEST_SRCDIR=$PWD/tests \\
    bash .gpu/run.sh build-gpu/tests/unit/test-hf-model -p /amk/hf-model/env-checkpoints

Needs torch, transformers and gguf (a GPU when there is one)."""
import json
import os
import sys

import numpy as np
import torch
import transformers


def main(checkpoint, gguf_path, out, new_tokens):
    with open(os.path.join(checkpoint, "reference.json")) as f:
        base = json.load(f)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gguf_path = os.path.abspath(gguf_path)
    # the weights from the GGUF, the configuration from the checkpoint: transformers' GGUF
    # reader drops Llama 3's RoPE scaling and Qwen3's head size when it is not hidden / heads
    config = transformers.AutoConfig.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path), config=config,
        dtype=torch.float32)
    model = model.to(device).eval()
    ids = list(base["prompt_ids"])
    generated = []
    with torch.no_grad():
        for _ in range(new_tokens):
            nxt = int(torch.argmax(model(torch.tensor([ids], device=device)).logits[0, -1]))
            generated.append(nxt)
            ids.append(nxt)
        tokens = ids[:-1]
        logits = model(torch.tensor([tokens], device=device)).logits[0].float().cpu().numpy()
    os.makedirs(out, exist_ok=True)
    np.save(os.path.join(out, "reference-logits.npy"), logits.astype("<f4"))
    ref = dict(prompt=base["prompt"], prompt_ids=base["prompt_ids"], generated=generated,
               tokens=tokens, logits_file="reference-logits.npy", logits_shape=list(logits.shape),
               model_file=gguf_path, device=str(device), dtype="float32",
               transformers=transformers.__version__, torch=torch.__version__,
               command=" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]))
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print("reference of %s: prompt %s, generated %s" % (gguf_path, base["prompt_ids"], generated))


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 32)
