#!/usr/bin/env python3
"""Writes a 132-queue image for `amk trace`: 12 stages; in each stage queue q adds the
slices of q and q-1 of the last stage (64 Ki floats each), so every instruction waits on
a neighbour's counter and the timeline shows the dependency wave crossing the SMs.

Usage: make-trace-demo.py OUT.amk"""
import sys

import gi

gi.require_version("Amk", "1.0")
from gi.repository import Amk  # noqa: E402

QUEUES, STAGES, WIDTH = 132, 12, 1 << 16


def set_params(p, i, **params):
    for name, value in params.items():
        p.set_param_int(i, name, value)


def main(path):
    p = Amk.Program.new(QUEUES)
    n = QUEUES * WIDTH
    inp = p.add_buffer("in", Amk.DType.F32, [n], Amk.BufferRole.INPUT)
    acc = [p.add_buffer(name, Amk.DType.F32, [n], Amk.BufferRole.SCRATCH) for name in ("even", "odd")]
    out = p.add_buffer("out", Amk.DType.F32, [n], Amk.BufferRole.OUTPUT)
    done = [p.add_counter(f"q{q}") for q in range(QUEUES)]
    for q in range(QUEUES):
        i = p.add_instruction(q, Amk.Opcode.COPY, [acc[0], inp])
        set_params(p, i, dst_offset=q * WIDTH, src_offset=q * WIDTH, count=WIDTH)
        p.set_signal(i, done[q], 1)
    for k in range(1, STAGES):
        for q in range(QUEUES):
            prev, nxt = (q - 1) % QUEUES, (q + 1) % QUEUES
            i = p.add_instruction(q, Amk.Opcode.ADD, [acc[k % 2], acc[(k - 1) % 2], acc[(k - 1) % 2]])
            set_params(p, i, dst_offset=q * WIDTH, a_offset=q * WIDTH, b_offset=prev * WIDTH,
                       count=WIDTH)
            p.add_wait(i, done[prev], k)
            p.add_wait(i, done[nxt], k)
            p.set_signal(i, done[q], 1)
    for q in range(QUEUES):
        i = p.add_instruction(q, Amk.Opcode.COPY, [out, acc[(STAGES - 1) % 2]])
        set_params(p, i, dst_offset=q * WIDTH, src_offset=q * WIDTH, count=WIDTH)
    p.verify()
    p.save(path)
    print(f"{path}: {p.get_n_instructions()} instructions on {QUEUES} queues")


if __name__ == "__main__":
    main(sys.argv[1])
