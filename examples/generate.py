#!/usr/bin/python3
# generate.py: load a GGUF model and stream a few greedy tokens from the CPU executor.
# Run from a build: GI_TYPELIB_PATH=$B/introspection LD_LIBRARY_PATH=$B/amk-glib \
#   ./generate.py SmolLM2-135M-Instruct.Q4_1.gguf "The capital of France is"
# Without a model file (argv[1], else $AMK_TEST_GGUF) it exits with 77 ("skipped").
# SPDX-License-Identifier: LGPL-2.1-or-later
import os
import sys
import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk

path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get('AMK_TEST_GGUF', '')
prompt = sys.argv[2] if len(sys.argv) > 2 else 'The capital of France is'
if not os.path.isfile(path):
    print('usage: generate.py MODEL.gguf [PROMPT]  (or set AMK_TEST_GGUF)', file=sys.stderr)
    sys.exit(77)

model = Amk.Model.new_from_file(path, None)   # weights to bf16, one compiled decode step
print(f'{model.props.architecture}: {model.props.n_layers} layers, '
      f'{model.props.weight_bytes / 2**20:.0f} MiB of weights', file=sys.stderr)
generator = Amk.Generator.new(model, None)     # None: the CPU executor; or an Amk.Launcher
streamed = []


def on_token(gen, token_id, piece):
    streamed.append(piece)
    print(piece, end='', flush=True)


generator.connect('token', on_token)
print(prompt, end='', flush=True)
text = generator.generate(prompt, 6, None)     # greedy (temperature 0), at most 6 tokens
print(f'\n{generator.props.generated_tokens} tokens; prompt {generator.props.prompt_tokens} '
      f'tokens at {generator.props.prefill_tokens_per_second:.1f} tokens/s, generation at '
      f'{generator.props.tokens_per_second:.1f} tokens/s', file=sys.stderr)
assert ''.join(streamed) == text
