#!/usr/bin/env python3
"""batch-ops.py: where a Llama-3.2-1B batch step's time goes, op by op: each op alone in
a program of its own over B rows (B sequences), with the launcher's own configuration,
against the decode step's MATVEC of the same weights (one row); the device time of a
launch (AmkLauncher.get_last_launch_time), median of the repeats, and the weights'
bytes over it.

    bash .gpu/run.sh python3 bench/batch-ops.py [B,B,...] [REPEATS]

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import sys

import gi
import numpy as np

gi.require_version("Amk", "1.0")
from gi.repository import Amk, GLib  # noqa: E402
from op_timing import bf16, launch_median_ms  # noqa: E402

HIDDEN, NQ, NKV, D, FFN, VOCAB, POS = 2048, 32, 8, 64, 8192, 128256, 64
F32, BF16, I32 = Amk.DType.F32, Amk.DType.BF16, Amk.DType.I32
rng = np.random.default_rng(0)


def timed(name, build, repeats, nbytes=0):
    ms = launch_median_ms(build, repeats)
    extra = f", {nbytes / (ms * 1e-3) / 1e9:.0f} GB/s of weights" if nbytes else ""
    print(f"OP {name}: {ms:.4f} ms{extra}")
    sys.stdout.flush()
    return ms


def weight(p, n, k):
    w = p.add_buffer("w", BF16, [n, k], Amk.BufferRole.CONSTANT)
    p.set_buffer_data(w, GLib.Bytes.new(bf16(rng.standard_normal(n * k, dtype=np.float32) * 0.05).tobytes()))
    return w


def matmul(b, n, k, xdt, residual):
    def build(p):
        x = p.add_buffer("x", xdt, [b, k], Amk.BufferRole.INPUT)
        w = weight(p, n, k)
        y = p.add_buffer("y", F32, [b, n], Amk.BufferRole.STATE)
        p.op_matmul(y, w, x, -1, y if residual else -1, -1, 0.0)
        xv = rng.standard_normal(b * k, dtype=np.float32)
        return {x: xv if xdt == F32 else bf16(xv)}
    return build


def matvec(n, k, residual):
    def build(p):
        x = p.add_buffer("x", F32, [k], Amk.BufferRole.INPUT)
        w = weight(p, n, k)
        y = p.add_buffer("y", F32, [n], Amk.BufferRole.STATE)
        p.op_matvec(y, w, x, -1, y if residual else -1, -1, 0.0)
        return {x: rng.standard_normal(k, dtype=np.float32)}
    return build


def attention(b):
    width = (NQ + 2 * NKV) * D

    def build(p):
        qkv = p.add_buffer("qkv", F32, [b, width], Amk.BufferRole.STATE)
        kc = p.add_buffer("kc", BF16, [b, 2 * POS, NKV * D], Amk.BufferRole.STATE)
        vc = p.add_buffer("vc", BF16, [b, 2 * POS, NKV * D], Amk.BufferRole.STATE)
        ps = p.add_buffer("pos", I32, [b], Amk.BufferRole.INPUT)
        sq = p.add_buffer("seq", I32, [b], Amk.BufferRole.INPUT)
        out = p.add_buffer("out", F32, [b, NQ * D], Amk.BufferRole.OUTPUT)
        p.op_attention_rows(out, qkv, kc, vc, ps, sq, D, NQ, NKV, 1.0 / np.sqrt(D))
        return {qkv: rng.standard_normal(b * width, dtype=np.float32),
                kc: bf16(rng.standard_normal(b * 2 * POS * NKV * D, dtype=np.float32)),
                vc: bf16(rng.standard_normal(b * 2 * POS * NKV * D, dtype=np.float32)),
                ps: np.full(b, POS, np.int32), sq: np.arange(b, dtype=np.int32)}
    return build


def argmax(b):
    def build(p):
        logits = p.add_buffer("logits", F32, [b, VOCAB], Amk.BufferRole.INPUT)
        out = p.add_buffer("out", I32, [b], Amk.BufferRole.OUTPUT)
        p.op_argmax_rows(out, logits)
        return {logits: rng.standard_normal(b * VOCAB, dtype=np.float32)}
    return build


SHAPES = (("qkv", (NQ + 2 * NKV) * D, HIDDEN, BF16, False), ("o", HIDDEN, NQ * D, F32, True),
          ("gate", FFN, HIDDEN, BF16, False), ("down", HIDDEN, FFN, BF16, True),
          ("lm head", VOCAB, HIDDEN, BF16, False))


def main(sizes, repeats):
    for name, n, k, _, residual in SHAPES:
        timed(f"MATVEC {name} {n}x{k}", matvec(n, k, residual), repeats, nbytes=2 * n * k)
    for b in sizes:
        layer = 0.0
        for name, n, k, xdt, residual in SHAPES:
            ms = timed(f"B={b} MATMUL {name} {n}x{k}", matmul(b, n, k, xdt, residual), repeats, nbytes=2 * n * k)
            layer += ms * (2 if name == "gate" else 1) if name != "lm head" else 0
        layer += timed(f"B={b} ATTN_ROWS at position {POS}", attention(b), repeats)
        timed(f"B={b} ARGMAX rows", argmax(b), repeats)
        print(f"LAYER B={b}: MATMULs and ATTN_ROWS {layer:.4f} ms")


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 8, 32, 64],
         int(sys.argv[2]) if len(sys.argv) > 2 else 5)
