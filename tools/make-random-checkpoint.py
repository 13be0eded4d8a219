#!/usr/bin/env python3
# make-random-checkpoint.py: a random-weight Hugging Face checkpoint of a named preset,
# written with transformers' save_pretrained, and optionally transformers' reference
# logits of a greedy run, to compare amk-glib's decode step against.
#
# Needs torch and transformers (5.x; 4.4x works too) and their tokenizers package; no
# network: the config is built in code and the tokenizer is either a local
# tokenizer.json (--tokenizer) or a byte-level BPE trained here on a small corpus
# (tests/data/tokenizer-corpus.txt, or --corpus), padded to the preset's vocabulary.
#
#   # the CI checkpoints under tests/data (float32 reference on the CPU):
#   python3 tools/make-random-checkpoint.py tiny-llama tests/data/tiny-llama --reference
#   python3 tools/make-random-checkpoint.py tiny-qwen3 tests/data/tiny-qwen3 --reference
#
#   # real sizes, reference in bf16 on a GPU:
#   python3 tools/make-random-checkpoint.py llama-3.2-1b /tmp/llama-1b --reference \
#       --device cuda --reference-dtype bfloat16
#
# Presets: tiny-llama, tiny-qwen3 (2 layers, hidden 64, vocabulary 512, under 400 kB),
# llama-3.2-1b, llama-3.1-8b, qwen3-0.6b, smollm2-135m (the real models' shapes).
# Weights: seeded (--seed), each matrix N(0, 1/fan_in), the embedding N(0, 1/16), every
# norm weight U(0.5, 1.5), so that attention, RoPE and the norms all shape the logits;
# saved as --dtype (bf16).
#
# --reference writes, into the checkpoint folder:
#   reference.json        {"prompt", "prompt_ids", "generated", "tokens", "logits_shape",
#                          "device", "dtype", "transformers", "torch", ...}: the prompt's
#                          ids (tokenizer.json, add_special_tokens=True), the greedy
#                          continuation of --new-tokens tokens (EOS ignored), and "tokens",
#                          the sequence fed one token a step: prompt + generated[:-1];
#                          "encodings": a few texts (accents decomposed, emoji, CJK,
#                          spaces) and their ids, to check amk's tokenizer against
#   reference-logits.npy  float32 [len(tokens), vocab]: row t is the logits after token
#                          t at position t, i.e. the prediction of token t + 1
# --reference-only recomputes them for an existing folder (e.g. bf16 on a GPU).
#
# SPDX-License-Identifier: LGPL-2.1-or-later

import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
                 r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Llama 3's tokenizer, as the 1B and 8B presets make it
LLAMA3_TOKENIZER = dict(style="llama3", specials={128000: "<|begin_of_text|>", 128001: "<|end_of_text|>",
                                                  128009: "<|eot_id|>"},
                        bos="<|begin_of_text|>", eos="<|end_of_text|>")

# transformers config arguments per preset; "tokenizer" says how to make one
PRESETS = {
    "tiny-llama": dict(
        arch="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=512, rms_norm_eps=1e-5,
        max_position_embeddings=256, tie_word_embeddings=False,
        rope=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                  high_freq_factor=4.0, original_max_position_embeddings=64),
        tokenizer=dict(style="llama3", specials={510: "<|begin_of_text|>", 511: "<|end_of_text|>"},
                       bos="<|begin_of_text|>", eos="<|end_of_text|>")),
    "tiny-qwen3": dict(
        arch="qwen3", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=512,
        rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=True,
        rope=dict(rope_type="default", rope_theta=1000000.0),
        tokenizer=dict(style="qwen2", specials={509: "<|endoftext|>", 510: "<|im_start|>",
                                                511: "<|im_end|>"},
                       bos=None, eos="<|im_end|>")),
    "llama-3.2-1b": dict(
        arch="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
        rms_norm_eps=1e-5, max_position_embeddings=131072, tie_word_embeddings=True,
        rope=dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0,
                  high_freq_factor=4.0, original_max_position_embeddings=8192),
        tokenizer=LLAMA3_TOKENIZER),
    "llama-3.1-8b": dict(
        arch="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
        rms_norm_eps=1e-5, max_position_embeddings=131072, tie_word_embeddings=False,
        rope=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                  high_freq_factor=4.0, original_max_position_embeddings=8192),
        tokenizer=LLAMA3_TOKENIZER),
    "smollm2-135m": dict(
        arch="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
        rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=True,
        rope=dict(rope_type="default", rope_theta=100000.0),
        tokenizer=dict(style="llama3", specials={49149: "<|endoftext|>", 49150: "<|im_start|>",
                                                 49151: "<|im_end|>"},
                       bos=None, eos="<|im_end|>")),
    "qwen3-0.6b": dict(
        arch="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
        rms_norm_eps=1e-6, max_position_embeddings=40960, tie_word_embeddings=True,
        rope=dict(rope_type="default", rope_theta=1000000.0),
        tokenizer=dict(style="qwen2", specials={151643: "<|endoftext|>", 151644: "<|im_start|>",
                                                151645: "<|im_end|>"},
                       bos=None, eos="<|im_end|>")),
}

# texts whose ids (tokenizer.json through transformers) go into reference.json too
ENCODING_CHECKS = ["Hello, world! It's 12345 o'clock.", "Cafe\u0301 de\u0301ja\u0300 vu, caf\u00e9",
                   "  two  spaces\n\nand\ttabs ", "\U0001F44B\U0001F3FD \u65e5\u672c\u8a9e \u00fcber"]

DEFAULT_CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                              "tests", "data", "tokenizer-corpus.txt")
FALLBACK_TEXT = ("The quick brown fox jumps over the lazy dog. It's a dog's life, isn't it? "
                 "Numbers like 12345 and 3.14159 appear in text; so do names, places and "
                 "the capital of France, which is Paris.\n")


def transformers_major():
    return int(transformers.__version__.split(".")[0])


def corpus_lines(path):
    """The corpus: tests/data/tokenizer-corpus.txt holds one JSON string literal a line."""
    if path and os.path.exists(path):
        lines = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    lines.append(line)
        return lines
    return FALLBACK_TEXT.split(". ")


def make_tokenizer(spec, vocab_size, corpus):
    """A byte-level BPE of exactly vocab_size tokens: the ids below the first special
    token are the trained vocabulary (256 bytes and merges) padded with unreachable
    "<unused_N>" tokens; from the first special on, added special tokens (the preset's,
    the rest "<|reserved_special_token_N|>")."""
    first_special = min(spec["specials"])
    tok = Tokenizer(models.BPE())
    pattern = LLAMA3_PATTERN if spec["style"] == "llama3" else QWEN2_PATTERN
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=first_special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)

    data = json.loads(tok.to_str())
    if spec["style"] == "qwen2":
        data["normalizer"] = {"type": "NFC"}   # as Qwen 2 and 3 ship it
    vocab = data["model"]["vocab"]
    used = set(vocab.values())
    free = [i for i in range(first_special) if i not in used]
    for n, i in enumerate(free):
        vocab["<unused_%d>" % n] = i
    added = []
    reserved = 0
    for i in range(first_special, vocab_size):
        content = spec["specials"].get(i)
        if content is None:
            content = "<|reserved_special_token_%d|>" % reserved
            reserved += 1
        added.append(dict(id=i, content=content, single_word=False, lstrip=False, rstrip=False,
                          normalized=False, special=True))
    data["added_tokens"] = added
    if spec["bos"] is not None:
        bos_id = [i for i, c in spec["specials"].items() if c == spec["bos"]][0]
        data["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": spec["bos"], "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": spec["bos"], "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": spec["bos"], "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {spec["bos"]: {"id": spec["bos"], "ids": [bos_id],
                                             "tokens": [spec["bos"]]}},
        }
    else:
        data["post_processor"] = None
    tok = Tokenizer.from_str(json.dumps(data, ensure_ascii=False))
    assert tok.get_vocab_size(with_added_tokens=True) == vocab_size, tok.get_vocab_size()
    return tok


def make_config(preset, dtype):
    p = {k: v for k, v in PRESETS[preset].items() if k not in ("arch", "rope", "tokenizer")}
    rope = dict(PRESETS[preset]["rope"])
    spec = PRESETS[preset]["tokenizer"]
    ids = {c: i for i, c in spec["specials"].items()}
    p["bos_token_id"] = ids.get(spec["bos"]) if spec["bos"] else None
    p["eos_token_id"] = ids[spec["eos"]]
    p["hidden_act"] = "silu"
    if transformers_major() >= 5:
        p["rope_parameters"] = rope
    else:
        p["rope_theta"] = rope.pop("rope_theta")
        p["rope_scaling"] = None if rope["rope_type"] == "default" else rope
    if PRESETS[preset]["arch"] == "llama":
        cls, name = transformers.LlamaConfig, "LlamaForCausalLM"
    else:
        cls, name = transformers.Qwen3Config, "Qwen3ForCausalLM"
    config = cls(**p)
    config.architectures = [name]
    return config


def dtype_kwargs(dtype):
    return {"dtype" if transformers_major() >= 5 else "torch_dtype": dtype}


def randomize(model, seed):
    """Seeded weights that make every part of a layer matter (see the header)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                v = torch.rand(param.shape, generator=gen) + 0.5
            elif "embed_tokens" in name:
                v = torch.randn(param.shape, generator=gen) * 0.25
            else:
                v = torch.randn(param.shape, generator=gen) / (param.shape[-1] ** 0.5)
            param.copy_(v.to(param.dtype))


def write_checkpoint(args):
    preset = PRESETS[args.preset]
    dtype = getattr(torch, args.dtype)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    config = make_config(args.preset, args.dtype)
    with torch.device("cpu"):
        model = transformers.AutoModelForCausalLM.from_config(config, **dtype_kwargs(torch.float32))
    randomize(model, args.seed)
    if config.tie_word_embeddings:
        model.tie_weights()
    model = model.to(dtype)
    kwargs = {}
    if args.max_shard_size:
        kwargs["max_shard_size"] = args.max_shard_size
    model.save_pretrained(args.out, **kwargs)

    spec = preset["tokenizer"]
    if args.tokenizer:
        tok = Tokenizer.from_file(args.tokenizer)
    else:
        tok = make_tokenizer(spec, config.vocab_size, corpus_lines(args.corpus))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=spec["bos"],
                                                eos_token=spec["eos"])
    fast.save_pretrained(args.out)
    print("wrote %s: %s, %.1f M parameters, %s" %
          (args.out, config.architectures[0], sum(p.numel() for p in model.parameters()) / 1e6,
           args.dtype))


def write_reference(args):
    device = torch.device(args.device)
    dtype = getattr(torch, args.reference_dtype)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.out, **dtype_kwargs(dtype))
    model = model.to(device).eval()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(args.out, "tokenizer.json"))
    prompt_ids = tok(args.prompt, add_special_tokens=True)["input_ids"]
    ids = list(prompt_ids)
    generated = []
    with torch.no_grad():
        for _ in range(args.new_tokens):
            logits = model(torch.tensor([ids], device=device)).logits[0, -1]
            nxt = int(torch.argmax(logits.float()))
            generated.append(nxt)
            ids.append(nxt)
        tokens = ids[:-1]
        logits = model(torch.tensor([tokens], device=device)).logits[0].float().cpu().numpy()
    np.save(os.path.join(args.out, "reference-logits.npy"), logits.astype("<f4"))
    encodings = [dict(text=t, ids=tok(t, add_special_tokens=True)["input_ids"])
                 for t in ENCODING_CHECKS + [tok.decode(generated)]]
    ref = dict(prompt=args.prompt, prompt_ids=prompt_ids, generated=generated, tokens=tokens,
               encodings=encodings,
               logits_file="reference-logits.npy", logits_shape=list(logits.shape),
               device=args.device, dtype=args.reference_dtype,
               transformers=transformers.__version__, torch=torch.__version__,
               command=" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]))
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print("reference: prompt %s, generated %s" % (prompt_ids, generated))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("preset", choices=sorted(PRESETS))
    ap.add_argument("out", help="the checkpoint folder to write")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                    help="the saved weights' dtype (default bfloat16)")
    ap.add_argument("--max-shard-size", help="e.g. 200MB: shards and an index")
    ap.add_argument("--tokenizer", help="a tokenizer.json to use instead of a trained one")
    ap.add_argument("--corpus", default=DEFAULT_CORPUS, help="text to train the tokenizer on")
    ap.add_argument("--reference", action="store_true", help="also write reference logits")
    ap.add_argument("--reference-only", action="store_true",
                    help="only (re)write the reference of an existing folder")
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--reference-dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args()

    if not args.reference_only:
        write_checkpoint(args)
    if args.reference or args.reference_only:
        write_reference(args)


if __name__ == "__main__":
    main()
