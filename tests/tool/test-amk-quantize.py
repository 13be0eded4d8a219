# SPDX-License-Identifier: LGPL-2.1-or-later
"""`amk quantize` and `amk info --model`, run as a user would, checked with the `gguf`
package (gguf-py, llama.cpp's reader: pip install gguf; exit 77, a skip, without it).

Mode "gguf" (exit 77 without AMK_TEST_GGUF, SmolLM2-135M-Instruct): the model quantized
to q8_0 and q4_k_m; gguf-py reads each back: the tensors in the same order and shapes,
of the types the mix documents, each within its type's error bound of the input (both
decoded by gguf-py); every metadata key kept (general.file_type set); `amk generate`
greedy on each output runs, and q8_0 gives the original's text; `amk info --model`
lists each output's types.

Mode "hf": the Hugging Face checkpoints of tests/data (tiny-llama: llama's q/k order
and Llama 3 RoPE; tiny-qwen3: q/k norms) converted to q8_0 and bf16, and checkpoints
written here (rows of 256 for the K-quants of q4_k_m and q5_k_m; rows of 96, which take
Q5_0, Q5_1 and Q8_0 instead; rows of 48, which fall back to F16), each with llama.cpp's metadata and names; bf16 generates exactly the
folder's text, the others run, and `amk info --model` counts the same device bytes for
the folder and its conversions. Then the errors: a missing input, a file that is not
GGUF, an unknown type, OUT (or OUT.tmp) being IN, a folder that does not exist, a write
that fails half way (a file size limit, as a full disk), a NaN weight: each exits 1 (2
for the type) with one sentence, and leaves no OUT.tmp and any earlier OUT as it was.

Usage: test-amk-quantize.py PATH/TO/amk gguf|hf
"""

import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77
PROMPT = 'The capital of France is'
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data')

# relative RMS error bounds per written type (test-quant.c derives them)
BOUNDS = {'Q8_0': 0.01, 'Q6_K': 0.025, 'Q5_0': 0.05, 'Q5_1': 0.05, 'Q5_K': 0.05, 'Q4_K': 0.1,
          'F16': 1e-3, 'BF16': 5e-3, 'F32': 0.0}


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def run(args, expect=0, **kwargs):
    proc = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if expect is not None and proc.returncode != expect:
        raise Failure(f'{" ".join(args)} exited with {proc.returncode}, not {expect}:\n'
                      f'{proc.stdout}\n{proc.stderr}')
    return proc


def more_bits(layer, n_layers):
    """llama.cpp's layers with more bits in the _M mixes, written out independently."""
    eighth = n_layers // 8
    middle = set(range(eighth, 7 * n_layers // 8))
    return layer not in middle or (layer - eighth) % 3 == 2


def mix_type(mix, name, row, n_layers, tied):
    """The documented type of a matrix (amk-quantize.c's table)."""
    kind = {'q8_0': 'Q8_0', 'q6_k': 'Q6_K', 'f16': 'F16', 'bf16': 'BF16'}.get(mix)
    if kind is None:
        m = re.match(r'blk\.(\d+)\.(attn_v|ffn_down)\.weight$', name)
        high = (name == 'output.weight' or (tied and name == 'token_embd.weight') or
                (m is not None and more_bits(int(m.group(1)), n_layers)))
        kind = 'Q6_K' if high else {'q4_k_m': 'Q4_K', 'q5_k_m': 'Q5_K'}[mix]
    if row % 256:   # no whole K blocks: llama.cpp's types of 32-value blocks
        kind = {'Q4_K': 'Q5_0', 'Q5_K': 'Q5_1', 'Q6_K': 'Q8_0'}.get(kind, kind)
    if row % 32 and kind != 'BF16':
        kind = 'F16'
    return kind


def expected_type(mix, tensor, tensors):
    """tensors: every tensor of the file (the layers and whether output is tied)."""
    if len(tensor.shape) != 2:
        return 'F32'
    layers = [int(m.group(1)) for m in (re.match(r'blk\.(\d+)\.', t.name) for t in tensors) if m]
    tied = not any(t.name == 'output.weight' for t in tensors)
    return mix_type(mix, tensor.name, int(tensor.shape[0]), max(layers, default=-1) + 1, tied)


def decoded(gguf, tensor):
    """A tensor as float64 values in PyTorch order (rows, cols)."""
    import numpy as np
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    shape = [int(d) for d in reversed(tensor.shape)]
    return np.asarray(values, dtype=np.float64).reshape(shape)


def relative_rms(x, y):
    import numpy as np
    ref = float((x * x).sum())
    err = float(((x - y) ** 2).sum())
    return (err / ref) ** 0.5 if ref > 0 else err ** 0.5


def check_errors_bounded(gguf, out_tensor, reference, what):
    y = decoded(gguf, out_tensor)
    check(y.shape == reference.shape, f'{what}: shape {y.shape}, not {reference.shape}')
    err = relative_rms(reference, y)
    bound = BOUNDS[out_tensor.tensor_type.name]
    check(err <= bound, f'{what} ({out_tensor.tensor_type.name}): relative RMS error {err:.5f} '
                        f'over the bound {bound}')
    return err


def field_value(reader, key):
    return reader.fields[key].contents()


def summary_of(stdout, out, mix):
    check(re.search(rf'^Wrote {re.escape(out)} \({mix}\) in [0-9.]+ s$', stdout, re.M),
          f'no "Wrote" line in: {stdout}')
    found = re.search(r'^(\d+) tensors, (\d+) weights: (.+) in, (.+) out \(([0-9.]+) bits per '
                      r'weight\); the file is (.+)$', stdout, re.M)
    check(found, f'no summary line in: {stdout}')
    return found.group(0), float(found.group(5))


def quantize(amk, src, out, mix):
    proc = run([amk, 'quantize', src, out, '--type', mix])
    check(proc.stderr == '', f'amk quantize printed on stderr: {proc.stderr}')
    check(not os.path.exists(out + '.tmp'), f'{out}.tmp was left behind')
    return summary_of(proc.stdout, out, mix)


def generate(amk, model, tokens=8):
    proc = run([amk, 'generate', '--cpu', '-q', '-n', str(tokens), '--seed', '0', '-t', '0',
                '--model', model, PROMPT])
    return proc.stdout


def info_types(amk, model):
    """`amk info --model`: {type: count} and the device bytes."""
    out = run([amk, 'info', '--model', model]).stdout
    types = {m.group(1): int(m.group(2))
             for m in re.finditer(r'^  (\S+)\s+(\d+) tensors?\s', out, re.M) if m.group(1) != 'all'}
    device = re.search(r'^Weights on a GPU: (\d+) bytes', out, re.M)
    check(device, f'no device line in: {out}')
    cpu = re.search(r'^Weights on the CPU executor: (\d+) bytes', out, re.M)
    check(cpu and int(cpu.group(1)) <= int(device.group(1)), f'no CPU line, or more than on a GPU, in: {out}')
    check(re.search(r'^A decode step reads \d+ bytes', out, re.M), f'no decode step line in: {out}')
    return types, int(device.group(1)), out


# ---- mode gguf: SmolLM2 ------------------------------------------------------------------

def test_gguf(amk, model, tmp, gguf):
    original = generate(amk, model)
    source = gguf.GGUFReader(model)
    src_tensors = {t.name: t for t in source.tensors}
    for mix, file_type in (('q8_0', 7), ('q4_k_m', 15)):
        out = os.path.join(tmp, f'smollm2-{mix}.gguf')
        t0 = time.monotonic()
        line, bpw = quantize(amk, model, out, mix)
        print(f'{mix}: {line} ({time.monotonic() - t0:.1f} s)')
        reader = gguf.GGUFReader(out)
        check([t.name for t in reader.tensors] == [t.name for t in source.tensors],
              f'{mix}: the tensors are not those of the input, in its order')
        counts, worst = {}, {}
        for t in reader.tensors:
            s = src_tensors[t.name]
            check(list(t.shape) == list(s.shape), f'{mix}: {t.name} has the shape {t.shape}, not {s.shape}')
            want = expected_type(mix, t, reader.tensors)
            check(t.tensor_type.name == want, f'{mix}: {t.name} is {t.tensor_type.name}, not {want}')
            counts[want] = counts.get(want, 0) + 1
            err = check_errors_bounded(gguf, t, decoded(gguf, s), f'{mix}: {t.name}')
            worst[want] = max(worst.get(want, 0.0), err)
        print(f'{mix}: types {counts}, worst relative RMS error per type '
              + ', '.join(f'{k} {v:.4f}' for k, v in worst.items()))
        for key in source.fields:
            if key.startswith('GGUF.'):
                continue
            check(key in reader.fields, f'{mix}: the key {key} was not kept')
            if key != 'general.file_type':
                check(field_value(reader, key) == field_value(source, key), f'{mix}: {key} changed')
        check(field_value(reader, 'general.file_type') == file_type, f'{mix}: general.file_type')

        text = generate(amk, out)
        print(f'{mix}: {PROMPT!r} -> {text!r} (the input: {original!r})')
        check(text.strip() != '', f'{mix}: no text generated')
        if mix == 'q8_0':
            check(text.split('\n')[0] == original.split('\n')[0],
                  f'q8_0 gave {text!r}, the input {original!r}')
            check('Paris' in text, f'q8_0 does not answer Paris: {text!r}')
        types, _, listing = info_types(amk, out)
        check(types == counts, f'amk info --model lists {types}, the file has {counts}:\n{listing}')


# ---- mode hf: checkpoint folders ---------------------------------------------------------

def bf16_bytes(values):
    import numpy as np
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()


def write_checkpoint(folder, hidden, ffn, heads, kv_heads, layers=2, vocab=512, nan_in=None):
    """A random llama checkpoint (bf16 safetensors) with tiny-llama's tokenizer; returns
    its weights by Hugging Face name, as float32 (what the bf16 file holds)."""
    import numpy as np
    rng = np.random.default_rng(1)
    head_dim = hidden // heads
    shapes = {'model.embed_tokens.weight': (vocab, hidden), 'model.norm.weight': (hidden,),
              'lm_head.weight': (vocab, hidden)}
    for i in range(layers):
        p = f'model.layers.{i}.'
        shapes.update({
            p + 'input_layernorm.weight': (hidden,),
            p + 'self_attn.q_proj.weight': (heads * head_dim, hidden),
            p + 'self_attn.k_proj.weight': (kv_heads * head_dim, hidden),
            p + 'self_attn.v_proj.weight': (kv_heads * head_dim, hidden),
            p + 'self_attn.o_proj.weight': (hidden, heads * head_dim),
            p + 'post_attention_layernorm.weight': (hidden,),
            p + 'mlp.gate_proj.weight': (ffn, hidden),
            p + 'mlp.up_proj.weight': (ffn, hidden),
            p + 'mlp.down_proj.weight': (hidden, ffn)})
    os.makedirs(folder)
    header, blobs, offset, weights = {}, [], 0, {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            w = rng.uniform(0.5, 1.5, shape)
        else:
            w = rng.normal(0.0, shape[1] ** -0.5, shape)
        w = w.astype(np.float32)
        if name == nan_in:
            w.flat[5] = np.nan
        blob = bf16_bytes(w)
        weights[name] = (np.frombuffer(blob, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
        header[name] = {'dtype': 'BF16', 'shape': list(shape), 'data_offsets': [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b' ' * (-len(text) % 8)
    with open(os.path.join(folder, 'model.safetensors'), 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + b''.join(blobs))
    with open(os.path.join(DATA, 'tiny-llama', 'config.json')) as f:
        config = json.load(f)
    config.update(hidden_size=hidden, intermediate_size=ffn, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, head_dim=head_dim, num_hidden_layers=layers,
                  vocab_size=vocab, rope_parameters={'rope_theta': 10000.0, 'rope_type': 'default'})
    with open(os.path.join(folder, 'config.json'), 'w') as f:
        json.dump(config, f)
    for name in ('tokenizer.json', 'tokenizer_config.json', 'generation_config.json'):
        shutil.copy(os.path.join(DATA, 'tiny-llama', name), folder)
    return weights


def permute(w, n_heads):
    """llama.cpp's q/k row order for its interleaved RoPE (convert_hf_to_gguf.py)."""
    return (w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


HF_NAMES = {'model.embed_tokens.weight': 'token_embd.weight', 'model.norm.weight': 'output_norm.weight',
            'lm_head.weight': 'output.weight', 'input_layernorm.weight': 'attn_norm.weight',
            'self_attn.q_proj.weight': 'attn_q.weight', 'self_attn.k_proj.weight': 'attn_k.weight',
            'self_attn.v_proj.weight': 'attn_v.weight', 'self_attn.o_proj.weight': 'attn_output.weight',
            'post_attention_layernorm.weight': 'ffn_norm.weight', 'mlp.gate_proj.weight': 'ffn_gate.weight',
            'mlp.up_proj.weight': 'ffn_up.weight', 'mlp.down_proj.weight': 'ffn_down.weight'}


def gguf_name(hf):
    found = re.match(r'model\.layers\.(\d+)\.(.+)$', hf)
    return f'blk.{found.group(1)}.{HF_NAMES[found.group(2)]}' if found else HF_NAMES[hf]


def check_hf_conversion(gguf, amk, folder, out, mix, weights, heads, kv_heads):
    """The metadata amk's reader needs, every weight under llama.cpp's name in the mix's
    type and within its bound (q and k in llama.cpp's row order)."""
    reader = gguf.GGUFReader(out)
    with open(os.path.join(folder, 'config.json')) as f:
        config = json.load(f)
    for key, want in (('general.architecture', 'llama'),
                      ('llama.block_count', config['num_hidden_layers']),
                      ('llama.context_length', config['max_position_embeddings']),
                      ('llama.embedding_length', config['hidden_size']),
                      ('llama.feed_forward_length', config['intermediate_size']),
                      ('llama.attention.head_count', heads),
                      ('llama.attention.head_count_kv', kv_heads),
                      ('tokenizer.ggml.model', 'gpt2'), ('tokenizer.ggml.pre', 'llama-bpe'),
                      ('tokenizer.ggml.bos_token_id', 510), ('tokenizer.ggml.eos_token_id', 511)):
        check(key in reader.fields and field_value(reader, key) == want,
              f'{out}: {key} is {field_value(reader, key) if key in reader.fields else None}, not {want}')
    check(abs(field_value(reader, 'llama.attention.layer_norm_rms_epsilon') - config['rms_norm_eps']) < 1e-9,
          f'{out}: layer_norm_rms_epsilon')
    check(len(field_value(reader, 'tokenizer.ggml.tokens')) == 512, f'{out}: not 512 tokens')
    check(len(field_value(reader, 'tokenizer.ggml.merges')) > 0, f'{out}: no merges')
    tensors = {t.name: t for t in reader.tensors}
    for hf, w in weights.items():
        name = gguf_name(hf)
        check(name in tensors, f'{out}: no tensor {name}')
        t = tensors[name]
        want = expected_type(mix, t, reader.tensors)
        check(t.tensor_type.name == want, f'{out}: {name} is {t.tensor_type.name}, not {want}')
        if name.endswith('attn_q.weight'):
            w = permute(w, heads)
        elif name.endswith('attn_k.weight'):
            w = permute(w, kv_heads)
        check_errors_bounded(gguf, t, w.astype('float64'), f'{out}: {name}')
    return reader


def quantize_fails(amk, src, out, mix, pattern, status=1, extra_env=None, preexec=None):
    """amk quantize must fail with `status`, one sentence matching `pattern`, and leave
    neither OUT.tmp nor a changed OUT."""
    before = open(out, 'rb').read() if os.path.isfile(out) else None
    tmp_before = os.path.exists(out + '.tmp')
    proc = subprocess.run([amk, 'quantize', src, out, '--type', mix], capture_output=True,
                          text=True, preexec_fn=preexec)
    check(proc.returncode == status, f'quantize {src} {out} --type {mix} exited with '
                                     f'{proc.returncode}, not {status}: {proc.stderr}')
    first = proc.stderr.splitlines()[0] if proc.stderr else ''
    check(re.search(pattern, first), f'the error {first!r} does not match {pattern!r}')
    check(first.startswith('amk quantize: ') and 'domain' not in proc.stderr,
          f'not one plain sentence: {proc.stderr!r}')
    if status == 1:
        check(len(proc.stderr.splitlines()) == 1, f'more than one line: {proc.stderr!r}')
    check(tmp_before or not os.path.exists(out + '.tmp'), f'{out}.tmp was left behind')
    after = open(out, 'rb').read() if os.path.isfile(out) else None
    check(after == before, f'{out} was changed by a failed run')
    check(proc.stdout == '', f'a failed run printed {proc.stdout!r}')


def limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_hf(amk, tmp, gguf):
    # the checkpoints of tests/data: bf16 is exact (the same text), q8_0 runs
    for name in ('tiny-llama', 'tiny-qwen3'):
        folder = os.path.join(DATA, name)
        text = generate(amk, folder, 16)
        _, device, _ = info_types(amk, folder)
        for mix in ('bf16', 'q8_0'):
            out = os.path.join(tmp, f'{name}-{mix}.gguf')
            line, _ = quantize(amk, folder, out, mix)
            reader = gguf.GGUFReader(out)
            arch = field_value(reader, 'general.architecture')
            check(arch == name.split('-')[1], f'{out}: architecture {arch}')
            check(('rope_freqs.weight' in [t.name for t in reader.tensors]) == (name == 'tiny-llama'),
                  f'{out}: a rope_freqs table where there is no Llama 3 scaling, or none where there is')
            got = generate(amk, out, 16)
            print(f'{name} {mix}: {line}; {got!r} (the folder: {text!r})')
            if mix == 'bf16':
                check(got == text, f'{name} as bf16 GGUF gave {got!r}, the folder {text!r}')
            types, out_device, _ = info_types(amk, out)
            check(out_device == device, f'{out}: {out_device} device bytes, the folder {device}')
            for t in reader.tensors:
                check(t.tensor_type.name == expected_type(mix, t, reader.tensors), f'{out}: {t.name} is {t.tensor_type.name}')

    # rows of 256: the K-quants of q4_k_m and q5_k_m, within their bounds
    wide = os.path.join(tmp, 'wide')
    weights = write_checkpoint(wide, hidden=256, ffn=512, heads=4, kv_heads=2)
    _, wide_device, _ = info_types(amk, wide)
    for mix in ('q4_k_m', 'q5_k_m', 'q6_k', 'q8_0'):
        out = os.path.join(tmp, f'wide-{mix}.gguf')
        line, bpw = quantize(amk, wide, out, mix)
        reader = check_hf_conversion(gguf, amk, wide, out, mix, weights, 4, 2)
        types = {}
        for t in reader.tensors:
            types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        print(f'wide {mix}: {line}; types {types}')
        # a GPU keeps Q4_K, Q5_K, Q8_0 of rows of 256 and Q6_K of rows of 2048 as stored
        # even where bf16 fits, expands the others (here Q6_K, rows of 256 and 512)
        _, device, _ = info_types(amk, out)
        if mix in ('q4_k_m', 'q5_k_m', 'q8_0'):
            check(device < wide_device, f'{out}: {device} bytes on a GPU, as many as bf16 ({wide_device})')
        else:
            check(device == wide_device, f'{out}: {device} bytes on a GPU, bf16 takes {wide_device}')
        check(generate(amk, out).strip() != '', f'{out}: no text')
    # rows of 96: no whole K blocks; Q5_0 for q4_k_m's Q4_K, Q5_1 for q5_k_m's Q5_K and
    # Q8_0 for their Q6_K, within their bounds
    mid = os.path.join(tmp, 'mid')
    weights = write_checkpoint(mid, hidden=96, ffn=160, heads=4, kv_heads=2)
    for mix in ('q4_k_m', 'q5_k_m'):
        out = os.path.join(tmp, f'mid-{mix}.gguf')
        line, bpw = quantize(amk, mid, out, mix)
        reader = check_hf_conversion(gguf, amk, mid, out, mix, weights, 4, 2)
        names = {t.tensor_type.name for t in reader.tensors}
        want = {'q4_k_m': 'Q5_0', 'q5_k_m': 'Q5_1'}[mix]
        check(want in names and 'Q8_0' in names, f'{out}: types {names}, no {want} and Q8_0')
        print(f'mid {mix}: {line}; types {sorted(names)}')
        check(generate(amk, out).strip() != '', f'{out}: no text')
    # rows of 48: Q8_0 cannot hold them, F16 does
    narrow = os.path.join(tmp, 'narrow')
    weights = write_checkpoint(narrow, hidden=48, ffn=80, heads=4, kv_heads=2)
    out = os.path.join(tmp, 'narrow-q4_k_m.gguf')
    quantize(amk, narrow, out, 'q4_k_m')
    check_hf_conversion(gguf, amk, narrow, out, 'q4_k_m', weights, 4, 2)
    check(generate(amk, out).strip() != '', f'{out}: no text')

    # the errors
    out = os.path.join(tmp, 'err.gguf')
    src = os.path.join(tmp, 'tiny-llama-q8_0.gguf')
    quantize_fails(amk, os.path.join(tmp, 'missing.gguf'), out, 'q8_0', r'no model file or folder')
    text_file = os.path.join(tmp, 'not-a-model.gguf')
    with open(text_file, 'w') as f:
        f.write('hello, world\n' * 10)
    quantize_fails(amk, text_file, out, 'q8_0', r'Cannot read the GGUF file .*magic')
    quantize_fails(amk, DATA, out, 'q8_0', r'a folder without a config\.json')
    quantize_fails(amk, src, out, 'q3_k_s', r'give one of q8_0, q4_k_m, q5_k_m, q6_k, f16, bf16', status=2)
    quantize_fails(amk, src, src, 'q8_0', r'is the model being quantized')
    tmp_named = os.path.join(tmp, 'input.gguf.tmp')
    shutil.copy(src, tmp_named)
    quantize_fails(amk, tmp_named, os.path.join(tmp, 'input.gguf'), 'q8_0', r'is the model being quantized')
    check(os.path.isfile(tmp_named), 'the input named OUT.tmp was removed')
    quantize_fails(amk, src, os.path.join(tmp, 'no', 'such', 'folder', 'x.gguf'), 'q8_0',
                   r'Cannot create .*x\.gguf\.tmp.*No such file or directory')
    quantize_fails(amk, src, os.path.join(text_file, 'x.gguf'), 'q8_0', r'Cannot create .*Not a directory')
    quantize_fails(amk, src, tmp, 'q8_0', r'is a folder')
    with open(out, 'w') as f:
        f.write('an earlier file')
    quantize_fails(amk, os.path.join(tmp, 'wide-q8_0.gguf'), out, 'q4_k_m',
                   r'Cannot write .*err\.gguf.*File too large', preexec=limit_file_size)
    nan = os.path.join(tmp, 'nan')
    write_checkpoint(nan, hidden=64, ffn=128, heads=4, kv_heads=2, nan_in='model.layers.1.mlp.up_proj.weight')
    quantize_fails(amk, nan, out, 'q8_0', r'blk\.1\.ffn_up\.weight.* element 5 is not a number')
    proc = run([amk, 'info', '--model', os.path.join(tmp, 'missing.gguf')], expect=1)
    check(proc.stderr.startswith('amk info: ') and len(proc.stderr.splitlines()) == 1,
          f'amk info --model on a missing file: {proc.stderr!r}')


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ('gguf', 'hf'):
        print(__doc__, file=sys.stderr)
        return 2
    amk, mode = sys.argv[1], sys.argv[2]
    try:
        import gguf
        import gguf.quants  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        print(f'SKIP: {e} (pip install gguf)')
        return SKIP
    model = os.environ.get('AMK_TEST_GGUF', '')
    if mode == 'gguf' and (not model or not os.path.isfile(model)):
        print('SKIP: set AMK_TEST_GGUF to a llama GGUF file (SmolLM2-135M-Instruct)')
        return SKIP
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix='amk-quantize-') as tmp:
        try:
            if mode == 'gguf':
                test_gguf(amk, model, tmp, gguf)
            else:
                test_hf(amk, tmp, gguf)
        except Failure as e:
            print(f'FAIL: {e}', file=sys.stderr)
            return 1
    print(f'ok: amk quantize ({mode}) in {time.monotonic() - start:.1f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
