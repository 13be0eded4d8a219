#!/usr/bin/env python3
"""prefill.py: how fast amk reads a prompt, with the library's defaults: the prompt goes
through the model's prefill program a chunk per launch (the last token through the
decode step), and the time to the first generated token.

    bash .gpu/run.sh python3 bench/prefill.py MODEL [TOKENS] [ROUNDS]

MODEL is a GGUF file or a Hugging Face folder; the prompt is at most TOKENS tokens with
the BOS the generator adds (a sentence repeated, cut to length). Prints "AMK round R:
..." per round (wall time, prefill tokens/s, time to first token) and a median line
"AMK prefill N tokens: ...". bench/prefill.sh runs transformers' eager prefill of the
same checkpoint in the same session.

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import statistics
import sys
import time

import gi

gi.require_version("Amk", "1.0")
from gi.repository import Amk  # noqa: E402

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank. "


def prompt_of(tokenizer, n):
    text = SENTENCE * (n // 8 + 2)
    ids = tokenizer.encode(text, False)
    while len(ids) > n:
        text = text[: int(len(text) * n / len(ids)) - 1]
        ids = tokenizer.encode(text, False)
    return text, len(ids)


def main(path, n, rounds):
    executor = Amk.Launcher(device=0) if Amk.Launcher.get_device_count() > 0 else Amk.CpuExecutor.new_empty()
    model = Amk.Model.new_from_file(path, None)
    generator = Amk.Generator.new(model, executor)
    text, n_tok = prompt_of(model.get_tokenizer(), n - 1)  # the generator adds BOS
    generator.generate("Hello", 1, None)  # loads the programs
    rates, ttfts = [], []
    for r in range(rounds):
        generator.reset()
        t0 = time.perf_counter()
        generator.generate(text, 1, None)
        wall = time.perf_counter() - t0
        rate = generator.props.prefill_tokens_per_second
        ttft = generator.props.time_to_first_token
        rates.append(rate)
        ttfts.append(ttft)
        print(f"AMK round {r}: prompt {n_tok} tokens, {wall:.4f} s wall, prefill {rate:.0f} tokens/s, "
              f"time to first token {ttft * 1e3:.2f} ms")
        sys.stdout.flush()
    print(f"AMK prefill {n_tok} tokens: median {statistics.median(rates):.0f} tokens/s, "
          f"time to first token {statistics.median(ttfts) * 1e3:.2f} ms ({executor.get_description()})")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2048,
         int(sys.argv[3]) if len(sys.argv) > 3 else 5)
