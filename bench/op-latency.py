#!/usr/bin/env python3
"""op-latency.py: how long one instruction of each op of a Llama-3.2-1B layer takes on
the device, alone and repeated, from traces (median over the op's tiles).

Each program runs one op REPEAT times in a row on its own fresh operands (so the data is
cold every time: only the code path is shared); the trace shows whether the first
repetition costs more than the later ones (cold instruction cache, first touch), and
what one instruction of the op costs at all.

Usage (GPU machine): bash .gpu/run.sh python3 bench/op-latency.py [KIND ...]"""
import collections
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from amktest import Amk, make_rng, to_bytes  # noqa: E402
from llama_layer import LLAMA_1B  # noqa: E402

import json  # noqa: E402
import numpy as np  # noqa: E402

REPEAT = 4
POS = int(os.environ.get("AMK_POS", "-1")) % 1024  # the attended position (default: the last)
H, NQ, NKV, HD, CTX = (LLAMA_1B[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "context"))


def program(kind):
    p = Amk.Program.new(132)
    B, F32, BF16, I32 = Amk.BufferRole, Amk.DType.F32, Amk.DType.BF16, Amk.DType.I32
    pos = p.add_buffer("pos", I32, [1], B.INPUT)
    p.set_buffer_data(pos, to_bytes(np.array([POS], dtype=np.int32)))
    rng = np.random.default_rng(1)
    for r in range(REPEAT):
        def buf(name, dtype, shape, role=B.STATE):
            b = p.add_buffer(f"{name}{r}", dtype, shape, role)
            n = int(np.prod(shape))
            data = rng.standard_normal(n).astype(np.float32)
            p.set_buffer_data(b, to_bytes(data if dtype == F32 else (data.view(np.uint32) >> 16).astype(np.uint16)))
            return b
        if kind == "matvec-norm":
            p.op_matvec(buf("y", F32, [NQ * HD]), buf("w", BF16, [NQ * HD, H], B.CONSTANT),
                        buf("x", F32, [H]), -1, -1, buf("n", BF16, [H], B.CONSTANT), 1e-5)
        elif kind == "matvec":
            p.op_matvec(buf("y", F32, [H]), buf("w", BF16, [H, NQ * HD], B.CONSTANT),
                        buf("x", F32, [NQ * HD]), -1, -1, -1, 0.0)
        elif kind == "rope-kv":
            p.op_rope_kv(buf("q", F32, [NQ * HD]), buf("k", F32, [NKV * HD]), buf("v", F32, [NKV * HD]),
                         buf("kc", BF16, [CTX, NKV * HD]), buf("vc", BF16, [CTX, NKV * HD]), pos,
                         HD, NQ, NKV, 500000.0, 32.0, 1.0, 4.0, 8192)
        elif kind == "attention":
            p.op_attention(buf("out", F32, [NQ * HD]), buf("q", F32, [NQ * HD]),
                           buf("kc", BF16, [CTX, NKV * HD]), buf("vc", BF16, [CTX, NKV * HD]), pos,
                           HD, NQ, NKV, 0, 1 / np.sqrt(HD))
        elif kind == "rope-attention":
            p.op_rope_attention(buf("out", F32, [NQ * HD]), buf("qkv", F32, [(NQ + 2 * NKV) * HD]),
                                buf("kc", BF16, [CTX, NKV * HD]), buf("vc", BF16, [CTX, NKV * HD]), pos,
                                HD, NQ, NKV, 0, 1 / np.sqrt(HD), 500000.0, 32.0, 1.0, 4.0, 8192)
        elif kind == "silu-mul":
            p.op_silu_mul(buf("act", F32, [8192]), buf("g", F32, [8192]), buf("u", F32, [8192]))
    p.compile()
    return p


def main():
    gpu = Amk.Launcher(device=0)
    gpu.props.threads_per_block = int(os.environ.get("AMK_THREADS", "512"))
    gpu.props.dynamic_shared_memory = 196608
    for kind in sys.argv[1:] or ("matvec-norm", "matvec", "rope-kv", "attention", "rope-attention",
                                 "silu-mul"):
        p = program(kind)
        gpu.load(p)
        gpu.props.trace = False
        gpu.launch(None)
        gpu.props.trace = True
        gpu.launch(None)
        events = json.loads(gpu.get_trace_json())["traceEvents"]
        by_queue = collections.defaultdict(list)
        for e in events:
            by_queue[e["args"]["queue"]].append(e)
        # the n-th instruction of the op's name on each queue = its n-th repetition
        # (the stages are ordered, the NOP wait carriers are skipped)
        reps = collections.defaultdict(lambda: collections.defaultdict(list))
        for q, evs in by_queue.items():
            seen = collections.Counter()
            for e in sorted(evs, key=lambda e: e["ts"]):
                reps[e["name"]][seen[e["name"]]].append(e["dur"])
                seen[e["name"]] += 1
        end = max(e["ts"] + e["dur"] for e in events)
        print(f"{kind}: {len(events)} instructions, {end:.1f} us")
        for name, by_rep in reps.items():
            row = "  ".join(f"#{i} {statistics.median(d):5.2f} us (n={len(d)})" for i, d in sorted(by_rep.items()))
            print(f"  {name:12s} {row}")


if __name__ == "__main__":
    main()
