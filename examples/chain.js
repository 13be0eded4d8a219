// chain.js: three queues, each stage waits on the previous stage's counter.
//   q0: a = x + x      q1: b = a + 1 (FILL then ADD)      q2: y = b
// Run from a build: GI_TYPELIB_PATH=$B/introspection LD_LIBRARY_PATH=$B/amk-glib gjs chain.js
// SPDX-License-Identifier: LGPL-2.1-or-later
imports.gi.versions.Amk = '1.0';
const {Amk, GLib} = imports.gi;

const N = 8, F32 = Amk.DType.F32, R = Amk.BufferRole;
const p = Amk.Program.new(3);
const x = p.add_buffer('x', F32, [N], R.INPUT), a = p.add_buffer('a', F32, [N], R.SCRATCH);
const one = p.add_buffer('one', F32, [N], R.SCRATCH), b = p.add_buffer('b', F32, [N], R.SCRATCH);
const y = p.add_buffer('y', F32, [N], R.OUTPUT);
const c0 = p.add_counter('a-ready'), c1 = p.add_counter('b-ready');

let i = p.add_instruction(0, Amk.Opcode.ADD, [a, x, x]);
p.set_param_int(i, 'count', N); p.set_signal(i, c0, 1);
i = p.add_instruction(1, Amk.Opcode.FILL, [one]);
p.set_param_int(i, 'count', N); p.set_param_float(i, 'value', 1.0);
i = p.add_instruction(1, Amk.Opcode.ADD, [b, a, one]);
p.set_param_int(i, 'count', N); p.add_wait(i, c0, 1); p.set_signal(i, c1, 1);
i = p.add_instruction(2, Amk.Opcode.COPY, [y, b]);
p.set_param_int(i, 'count', N); p.add_wait(i, c1, 1);

const ex = Amk.CpuExecutor.new(p);     // verifies the program: no deadlock, no bad index
const xs = Float32Array.from({length: N}, () => Math.round(Math.random() * 200 - 100));
ex.upload(x, new GLib.Bytes(new Uint8Array(xs.buffer)));
ex.run();
const ys = new Float32Array(ex.download(y).toArray().slice().buffer);
print(`x = ${xs.join(', ')}`);
print(`y = ${ys.join(', ')}`);
if (!ys.every((v, k) => v === 2 * xs[k] + 1))
    throw new Error('unexpected result');
