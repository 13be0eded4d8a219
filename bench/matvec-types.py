#!/usr/bin/env python3
"""matvec-types.py: one MATVEC alone (a fused RMS norm, CONSTANT W of random bf16 values or
random blocks of a quantized type) over a Llama-3.2-1B shape, one tile of TILE rows per
queue, the launcher's defaults: the device span of a traced launch and the median tile's
duration (medians of 7 launches), and W's bytes over the span.

Usage (GPU machine): bash .gpu/run.sh python3 bench/matvec-types.py [ROWSxK] [TILE] [TYPES]
  defaults 16384x2048 (gate/up), 128, bf16,q8_0,q4_k; o is 2048x2048 16, down 2048x8192 16.
  --once TYPE: load that type and launch four times untraced (for a profiler).
  QMV_DRY=1: build the programs and run them on the CPU executor (no GPU).

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from amktest import Amk, GLib, add_op, from_f32, random_blocks, upload  # noqa: E402

F32, BF16 = Amk.DType.F32, Amk.DType.BF16
args = [a for a in sys.argv[1:] if not a.startswith("--")]
once = sys.argv[sys.argv.index("--once") + 1] if "--once" in sys.argv else None
rows, k = (int(v) for v in (args[0] if args else "16384x2048").split("x"))
tile = int(args[1]) if len(args) > 1 else 128
names = (args[2] if len(args) > 2 else "bf16,q8_0,q4_k").split(",")
if once:
    names = [once]
dry = os.environ.get("QMV_DRY")  # no GPU: build and run the programs on the CPU executor
rng = np.random.default_rng(1)
for name in names:
    dt = BF16 if name == "bf16" else getattr(Amk.DType, name.upper())
    launcher = None if dry else Amk.Launcher(device=0)
    prog = Amk.Program.new(132 if dry else launcher.get_preferred_queues())
    w = prog.add_buffer("w", dt, [rows, k], Amk.BufferRole.CONSTANT)
    if dt == BF16:
        data = from_f32(BF16, rng.standard_normal(rows * k).astype(np.float32) * 0.02).tobytes()
    else:
        data = random_blocks(rng, dt, rows, k).tobytes()
    prog.set_buffer_data(w, GLib.Bytes.new(data))
    x = prog.add_buffer("x", BF16, [k], Amk.BufferRole.INPUT)
    y = prog.add_buffer("y", F32, [rows], Amk.BufferRole.OUTPUT)
    nw = prog.add_buffer("nw", BF16, [k], Amk.BufferRole.INPUT)
    for t, r0 in enumerate(range(0, rows, tile)):
        add_op(prog, t % prog.get_num_queues(), Amk.Opcode.MATVEC, [y, w, x, -1, -1, nw],
               dict(row0=r0, rows=min(tile, rows - r0), k=k, eps=1e-5, k0=0, k_len=0))
    prog.verify()
    if dry:
        ex = Amk.CpuExecutor.new(prog)
        upload(ex, x, BF16, from_f32(BF16, rng.standard_normal(k).astype(np.float32)))
        upload(ex, nw, BF16, from_f32(BF16, np.ones(k, np.float32)))
        ex.run()
        print(f"{name}: dry run on the CPU executor done")
        continue
    launcher.load(prog)
    upload(launcher, x, BF16, from_f32(BF16, rng.standard_normal(k).astype(np.float32)))
    upload(launcher, nw, BF16, from_f32(BF16, np.ones(k, np.float32)))
    for _ in range(3):
        launcher.launch(None)
    if once:
        launcher.launch(None)
        print(f"{name}: one launch done")
        continue
    spans, durs = [], []
    launcher.props.trace = True
    for _ in range(7):
        launcher.launch(None)
        ev = [e for e in json.loads(launcher.get_trace_json())["traceEvents"] if e["name"] == "matvec"]
        spans.append(max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev))
        durs.append(sorted(e["dur"] for e in ev)[len(ev) // 2])
    span, dur = sorted(spans)[3], sorted(durs)[3]
    print(f"MV {name} {rows}x{k} tiles of {tile}: span {span:.2f} us, tile median {dur:.2f} us, "
          f"W {len(data) / 1e6:.1f} MB -> {len(data) / span / 1e6:.2f} TB/s", flush=True)
