#!/usr/bin/python3
# batch.py: several prompts generated together (greedy) on the CPU executor, one launch
# per step for all of them; a fourth prompt joins once the first sequence has finished.
# Run from a build: GI_TYPELIB_PATH=$B/introspection LD_LIBRARY_PATH=$B/amk-glib \
#   ./batch.py SmolLM2-135M-Instruct.Q4_1.gguf
# Without a model file (argv[1], else $AMK_TEST_GGUF) it exits with 77 ("skipped").
# SPDX-License-Identifier: LGPL-2.1-or-later
import os
import sys
import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk

path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get('AMK_TEST_GGUF', '')
if not os.path.isfile(path):
    print('usage: batch.py MODEL.gguf  (or set AMK_TEST_GGUF)', file=sys.stderr)
    sys.exit(77)

model = Amk.Model.new_from_file(path, None)
batch = Amk.Batch.new(model, None, 4)    # None: a CPU executor; at most 4 sequences at once
prompts = {}                             # id -> (prompt, max_tokens)
streamed = {}                            # id -> the pieces of its token signals


def add(prompt, max_tokens):
    prompts[batch.add(prompt, max_tokens)] = (prompt, max_tokens)


def on_token(b, seq, token_id, piece):
    streamed[seq] = streamed.get(seq, '') + piece
    print(f'[{seq}] {piece!r}')


def on_finished(b, seq, reason):
    print(f'[{seq}] finished: {reason.value_nick}')
    if len(prompts) == 3:                # the first to finish: one more joins, between steps
        add('The sun rises in the', 5)


batch.connect('token', on_token)
batch.connect('finished', on_finished)
add('The capital of France is', 8)
add('Once upon a time', 12)
add('1, 2, 3,', 6)
batch.run(None)                          # steps until every sequence has finished

for seq, (prompt, max_tokens) in prompts.items():
    text = batch.get_text(seq)
    reason = batch.get_finish_reason(seq)
    print(f'{seq}: {prompt!r} -> {text!r} ({reason.value_nick})')
    assert streamed.get(seq, '') == text
    assert reason in (Amk.FinishReason.LENGTH, Amk.FinishReason.STOP)
    assert 0 < len(batch.get_tokens(seq)) <= max_tokens
n_tokens = sum(len(batch.get_tokens(seq)) for seq in prompts)
print(f'{n_tokens} tokens in {batch.props.steps} launches', file=sys.stderr)
assert len(prompts) == 4 and batch.props.n_active == 0
assert batch.props.steps < n_tokens      # the sequences shared their launches
