#!/usr/bin/python3
# chain.py: three queues, each stage waits on the previous stage's counter.
#   q0: a = x + x      q1: b = a + 1 (FILL then ADD)      q2: y = b
# Run from a build: GI_TYPELIB_PATH=$B/introspection LD_LIBRARY_PATH=$B/amk-glib ./chain.py
# SPDX-License-Identifier: LGPL-2.1-or-later
import random
import struct
import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, GLib

N = 8
p = Amk.Program.new(3)
x = p.add_buffer('x', Amk.DType.F32, [N], Amk.BufferRole.INPUT)
a = p.add_buffer('a', Amk.DType.F32, [N], Amk.BufferRole.SCRATCH)
one = p.add_buffer('one', Amk.DType.F32, [N], Amk.BufferRole.SCRATCH)
b = p.add_buffer('b', Amk.DType.F32, [N], Amk.BufferRole.SCRATCH)
y = p.add_buffer('y', Amk.DType.F32, [N], Amk.BufferRole.OUTPUT)
c0, c1 = p.add_counter('a-ready'), p.add_counter('b-ready')

i = p.add_instruction(0, Amk.Opcode.ADD, [a, x, x]); p.set_param_int(i, 'count', N)
p.set_signal(i, c0, 1)
i = p.add_instruction(1, Amk.Opcode.FILL, [one]); p.set_param_int(i, 'count', N)
p.set_param_float(i, 'value', 1.0)
i = p.add_instruction(1, Amk.Opcode.ADD, [b, a, one]); p.set_param_int(i, 'count', N)
p.add_wait(i, c0, 1); p.set_signal(i, c1, 1)
i = p.add_instruction(2, Amk.Opcode.COPY, [y, b]); p.set_param_int(i, 'count', N)
p.add_wait(i, c1, 1)

ex = Amk.CpuExecutor.new(p)              # verifies the program: no deadlock, no bad index
xs = [float(random.randint(-100, 100)) for _ in range(N)]
ex.upload(x, GLib.Bytes.new(struct.pack(f'{N}f', *xs)))
ex.run()
ys = struct.unpack(f'{N}f', ex.download(y).get_data())
print('x =', xs)
print('y =', list(ys))
assert list(ys) == [2 * v + 1 for v in xs]
