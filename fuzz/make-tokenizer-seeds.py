#!/usr/bin/env python3
"""Writes seed inputs for fuzz-tokenizer into a folder: a small tokenizer.json, a NUL
byte, then a text to encode (see fuzz-tokenizer.c).

    python3 fuzz/make-tokenizer-seeds.py DIR

The tokenizers are small on purpose (a fast seed runs thousands of times a second): the
tiny vocabulary of tests/unit/test-tokenizer.c in several configurations (template
post-processor, ByteLevel post-processor, Digits + ByteLevel pre-tokenizer like
SmolLM2's, merges as strings and as pairs, added tokens), and the first 400 tokens of
SmolLM2's vocabulary with the merges among them (tests/data/smollm2-tokenizer.json).

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

TINY_VOCAB = {"a": 0, "b": 1, "c": 2, "\u0120": 3, "ab": 4, "abc": 5, "\u0120ab": 6,
              "<s>": 7, "</s>": 8, "\u010a": 9}
TINY_ADDED = [{"id": 7, "content": "<s>", "special": True},
              {"id": 8, "content": "</s>", "special": True}]
BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
SEQUENCE = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
TEMPLATE = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]},
                               "</s>": {"id": "</s>", "ids": [8], "tokens": ["</s>"]}}}
POST_BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                  "use_regex": True}

TEXTS = [b"abc ab", b"Hello world! 123", "caf\u00e9 \u65e5\u672c \U0001F600".encode(),
         b"<s>ab</s>\n\n  c", b"", b"\xff\xfe invalid"]


def tokenizer(vocab, merges, added, pre, post):
    return {"version": "1.0", "added_tokens": added, "normalizer": None,
            "pre_tokenizer": pre, "post_processor": post,
            "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": vocab, "merges": merges}}


def smollm2_subset(n=400):
    path = os.path.join(HERE, "..", "tests", "data", "smollm2-tokenizer.json")
    with open(path, encoding="utf-8") as f:
        full = json.load(f)
    vocab = {t: i for t, i in full["model"]["vocab"].items() if i < n}
    merges = []
    for m in full["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    added = [t for t in full["added_tokens"] if t["id"] < n]
    return tokenizer(vocab, merges, added, full["pre_tokenizer"], full["post_processor"])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    configs = [
        tokenizer(TINY_VOCAB, ["a b", ["ab", "c"], "\u0120 ab"], TINY_ADDED, BYTELEVEL, None),
        tokenizer(TINY_VOCAB, [["a", "b"], ["ab", "c"], ["\u0120", "ab"]], TINY_ADDED,
                  SEQUENCE, TEMPLATE),
        tokenizer(TINY_VOCAB, ["a b", "ab c"], [], BYTELEVEL, POST_BYTELEVEL),
        tokenizer(TINY_VOCAB, [], TINY_ADDED, None, None),
        smollm2_subset(),
    ]
    n = 0
    for i, config in enumerate(configs):
        data = json.dumps(config, ensure_ascii=(i % 2 == 0)).encode()
        texts = TEXTS if i != len(configs) - 1 else TEXTS[:3]
        for text in texts:
            blob = data + b"\0" + text
            name = hashlib.sha1(blob).hexdigest()
            with open(os.path.join(out, name), "wb") as f:
                f.write(blob)
            n += 1
    print(f"{n} seeds in {out}")


if __name__ == "__main__":
    main()
