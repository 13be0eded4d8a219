#!/usr/bin/env python3
"""prefill-ops.py: where a Llama-3.2-1B prefill chunk's time goes, op by op: each op of
one layer alone in a program of its own over M rows at positions 0 .. M-1 (the shapes
and dtypes of the GPU's whole-prompt chunk: RMSNORM into bf16, MATMULs of bf16 X,
attention output, gate and up in bf16), with the launcher's own configuration; the
device time of a launch (AmkLauncher.get_last_launch_time), median of the repeats. A
layer's sum times 16 layers approximates a chunk without the waits between its ops.

    bash .gpu/run.sh python3 bench/prefill-ops.py [M] [REPEATS]

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import sys

import gi
import numpy as np

gi.require_version("Amk", "1.0")
from gi.repository import Amk, GLib  # noqa: E402
from op_timing import bf16, launch_median_ms  # noqa: E402

HIDDEN, NQ, NKV, D, FFN = 2048, 32, 8, 64, 8192
F32, BF16, I32 = Amk.DType.F32, Amk.DType.BF16, Amk.DType.I32


def timed(name, build, inputs, repeats, flops=0.0):
    ms = launch_median_ms(lambda p: inputs(build(p)), repeats)
    extra = f", {flops / (ms * 1e-3) / 1e12:.1f} TFLOP/s" if flops else ""
    print(f"OP {name}: {ms:.4f} ms{extra}")
    sys.stdout.flush()
    return ms


def main(m, repeats):
    rng = np.random.default_rng(0)
    width = (NQ + 2 * NKV) * D
    pos = np.arange(m, dtype=np.int32)

    def attention(rope):
        def build(p):
            qkv = p.add_buffer("qkv", F32, [m, width], Amk.BufferRole.STATE)
            kc = p.add_buffer("kc", BF16, [m, NKV * D], Amk.BufferRole.STATE)
            vc = p.add_buffer("vc", BF16, [m, NKV * D], Amk.BufferRole.STATE)
            ps = p.add_buffer("pos", I32, [m], Amk.BufferRole.INPUT)
            out = p.add_buffer("out", BF16, [m, NQ * D], Amk.BufferRole.OUTPUT)
            if rope:
                p.op_rope_rows(qkv, kc, vc, ps, -1, -1, -1, D, NQ, NKV, 1e-5, 500000.0, 32.0, 1.0, 4.0, 8192)
            else:
                p.op_attention_rows(out, qkv, kc, vc, ps, -1, D, NQ, NKV, 1.0 / np.sqrt(D))
            return qkv, kc, vc, ps

        def inputs(b):
            qkv, kc, vc, ps = b
            return {qkv: rng.standard_normal(m * width, dtype=np.float32),
                    kc: bf16(rng.standard_normal(m * NKV * D, dtype=np.float32)),
                    vc: bf16(rng.standard_normal(m * NKV * D, dtype=np.float32)), ps: pos}
        return build, inputs

    def matmul(n, k, ydt):
        def build(p):
            x = p.add_buffer("x", BF16, [m, k], Amk.BufferRole.INPUT)
            w = p.add_buffer("w", BF16, [n, k], Amk.BufferRole.CONSTANT)
            y = p.add_buffer("y", ydt, [m, n], Amk.BufferRole.OUTPUT)
            p.set_buffer_data(w, GLib.Bytes.new(bf16(rng.standard_normal(n * k, dtype=np.float32) * 0.05).tobytes()))
            p.op_matmul(y, w, x, -1, -1, -1, 0.0)
            return (x,)

        def inputs(b):
            return {b[0]: bf16(rng.standard_normal(m * k, dtype=np.float32))}
        return build, inputs

    def rmsnorm():
        def build(p):
            x = p.add_buffer("x", F32, [m, HIDDEN], Amk.BufferRole.INPUT)
            g = p.add_buffer("g", F32, [HIDDEN], Amk.BufferRole.INPUT)
            xn = p.add_buffer("xn", BF16, [m, HIDDEN], Amk.BufferRole.OUTPUT)
            p.op_rmsnorm(xn, x, g, HIDDEN, 1e-5)
            return x, g

        def inputs(b):
            return {b[0]: rng.standard_normal(m * HIDDEN, dtype=np.float32), b[1]: np.ones(HIDDEN, np.float32)}
        return build, inputs

    def silu_mul():
        def build(p):
            g = p.add_buffer("gate", BF16, [m, FFN], Amk.BufferRole.INPUT)
            u = p.add_buffer("up", BF16, [m, FFN], Amk.BufferRole.INPUT)
            a = p.add_buffer("act", BF16, [m, FFN], Amk.BufferRole.OUTPUT)
            p.op_silu_mul(a, g, u)
            return g, u

        def inputs(b):
            return {b[0]: bf16(rng.standard_normal(m * FFN, dtype=np.float32)),
                    b[1]: bf16(rng.standard_normal(m * FFN, dtype=np.float32))}
        return build, inputs

    total = 0.0
    total += timed("ROPE_ROWS", *attention(True), repeats)
    # causal: about m^2 / 2 scores of 2 D flops each, twice (scores and values), per query head
    total += timed("ATTN_ROWS", *attention(False), repeats, flops=2.0 * 2 * D * NQ * m * m / 2)
    total += 2 * timed("RMSNORM (into bf16, twice a layer)", *rmsnorm(), repeats)
    for name, n, k, ydt in (("qkv", width, HIDDEN, F32), ("o", HIDDEN, NQ * D, F32),
                            ("gate", FFN, HIDDEN, BF16), ("up", FFN, HIDDEN, BF16),
                            ("down", HIDDEN, FFN, F32)):
        total += timed(f"MATMUL {name}", *matmul(n, k, ydt), repeats, flops=2.0 * m * n * k)
    total += timed("SILU_MUL (bf16)", *silu_mul(), repeats)
    print(f"LAYER sum {total:.3f} ms, x16 layers {16 * total:.1f} ms (M = {m})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2048, int(sys.argv[2]) if len(sys.argv) > 2 else 5)
