// SPDX-License-Identifier: LGPL-2.1-or-later
//
// GJS: a dependency chain over three queues on the CPU executor, checked against values
// computed here in JavaScript; f32 and i32 data, fresh random inputs, poisoned outputs;
// many seeds give one result; a serialized image runs the same; TRAP aborts.

imports.gi.versions.Amk = '1.0';
const {Amk, GLib} = imports.gi;
imports.searchPath.unshift(GLib.path_get_dirname(imports.system.programPath));
const {test, assert, assertEqual, assertThrows, done} = imports.tap;

const N = 48, TILES = 4, SIZE = N / TILES, OFFSET = 3, OUT_LEN = N + 2 * OFFSET;

function bytesOf(typed) {
    return new GLib.Bytes(new Uint8Array(typed.buffer.slice(0)));
}

function f32Of(gbytes) {
    return new Float32Array(gbytes.toArray().slice().buffer);
}

function i32Of(gbytes) {
    return new Int32Array(gbytes.toArray().slice().buffer);
}

// q0: a[t] = in[t] + in[t];  q1: b[t] = a[t] + w[t];  q2: out[OFFSET + t] = b[t]
// Sets an instruction's integer parameters from {name: value}.
function setParams(p, i, params) {
    for (const [name, value] of Object.entries(params))
        p.set_param_int(i, name, value);
}

function buildChain(dtype, w) {
    const p = Amk.Program.new(3);
    const ids = {
        in: p.add_buffer('in', dtype, [N], Amk.BufferRole.INPUT),
        w: p.add_buffer('w', dtype, [N], Amk.BufferRole.CONSTANT),
        a: p.add_buffer('a', dtype, [N], Amk.BufferRole.SCRATCH),
        b: p.add_buffer('b', dtype, [N], Amk.BufferRole.SCRATCH),
        out: p.add_buffer('out', dtype, [OUT_LEN], Amk.BufferRole.OUTPUT),
    };
    p.set_buffer_data(ids.w, bytesOf(w));
    const c0 = p.add_counter('a-done'), c1 = p.add_counter('b-done');
    for (let t = 0; t < TILES; t++) {
        const lo = t * SIZE;
        let i = p.add_instruction(0, Amk.Opcode.ADD, [ids.a, ids.in, ids.in]);
        setParams(p, i, {dst_offset: lo, a_offset: lo, b_offset: lo, count: SIZE});
        p.set_signal(i, c0, 1);
        i = p.add_instruction(1, Amk.Opcode.ADD, [ids.b, ids.a, ids.w]);
        setParams(p, i, {dst_offset: lo, a_offset: lo, b_offset: lo, count: SIZE});
        p.add_wait(i, c0, t + 1);
        p.set_signal(i, c1, 1);
        i = p.add_instruction(2, Amk.Opcode.COPY, [ids.out, ids.b]);
        setParams(p, i, {dst_offset: OFFSET + lo, src_offset: lo, count: SIZE});
        p.add_wait(i, c1, t + 1);
    }
    return [p, ids];
}

function randomF32(n) {
    const a = new Float32Array(n);
    for (let k = 0; k < n; k++)
        a[k] = (0.25 + Math.random() * 8) * (Math.random() < 0.5 ? -1 : 1);
    return a;
}

function randomI32(n) {
    const a = new Int32Array(n);
    for (let k = 0; k < n; k++)
        a[k] = ((Math.random() * 0x100000000) | 0) || 7;
    return a;
}

function checkChain(label, dtype, random, decode, expectedOf, poisonValue, seeds) {
    const w = random(N);
    const [p, ids] = buildChain(dtype, w);
    const ex = Amk.CpuExecutor.new(p);
    const results = new Set();
    for (const seed of seeds) {
        const x = random(N);
        const before = new x.constructor(OUT_LEN).fill(poisonValue);
        ex.upload(ids.in, bytesOf(x));
        ex.upload(ids.out, bytesOf(before));
        ex.set_seed(seed);
        ex.run();
        const out = decode(ex.download(ids.out));
        for (let k = 0; k < OUT_LEN; k++) {
            const inside = k >= OFFSET && k < OFFSET + N;
            const want = inside ? expectedOf(x[k - OFFSET], w[k - OFFSET]) : before[k];
            if (!(Object.is(out[k], want)))
                throw new Error(`${label} seed ${seed} out[${k}] = ${out[k]}, expected ${want}`);
        }
        results.add(seed);
    }
    assertEqual(results.size, seeds.length, 'runs');
    return [p, ids, ex, w];
}

test('f32 chain over 3 queues matches JavaScript', () => {
    checkChain('f32', Amk.DType.F32, randomF32, f32Of,
        (x, w) => Math.fround(Math.fround(x + x) + w), NaN, [0, 1, 2, 3, 4, 5, 6, 7, 99, 12345]);
});

test('i32 chain over 3 queues wraps like the VM', () => {
    checkChain('i32', Amk.DType.I32, randomI32, i32Of,
        (x, w) => (((x + x) | 0) + w) | 0, 0x5a5a5a5a, [0, 1, 2, 3, 17, 2 ** 40]);
});

test('correct program gives one result for every seed', () => {
    const w = randomF32(N);
    const [p, ids] = buildChain(Amk.DType.F32, w);
    const ex = Amk.CpuExecutor.new(p);
    const x = randomF32(N);
    const seen = new Set();
    for (let seed = 0; seed < 40; seed++) {
        ex.upload(ids.in, bytesOf(x));
        ex.upload(ids.out, bytesOf(new Float32Array(OUT_LEN).fill(NaN)));
        ex.seed = seed;
        ex.run();
        seen.add(ex.download(ids.out).toArray().join(','));
    }
    assertEqual(seen.size, 1, 'distinct results');
});

test('serialized image loads and runs the same', () => {
    const w = randomF32(N);
    const [p, ids] = buildChain(Amk.DType.F32, w);
    const q = Amk.Program.new_from_bytes(p.serialize());
    assert(q.verified, 'loaded program is verified');
    assertEqual(q.get_n_instructions(), 3 * TILES, 'instructions');
    assertEqual(q.get_num_queues(), 3, 'queues');
    assertEqual(q.get_buffer_name(ids.out), 'out', 'buffer name');
    const x = randomF32(N);
    const outs = [p, q].map(prog => {
        const ex = Amk.CpuExecutor.new(prog);
        ex.upload(ids.in, bytesOf(x));
        ex.run();
        return ex.download(ids.out).toArray().join(',');
    });
    assertEqual(outs[0], outs[1], 'results');
});

test('properties and struct sizes', () => {
    const p = new Amk.Program({num_queues: 3});
    assertEqual(p.num_queues, 3, 'num_queues');
    const s = Amk.struct_sizes_get();
    assertEqual(s.instruction, 128, 'instruction size');
    assertEqual(s.device_program, 128, 'device_program size');
    assertEqual(s.abi_version, 1, 'abi version');
    const l = new Amk.Launcher({device: 0});
    assertEqual(l.device, 0, 'device');
});

test('TRAP aborts with its code', () => {
    const code = 1 + Math.floor(Math.random() * 10000);
    const p = Amk.Program.new(2);
    p.add_instruction(0, Amk.Opcode.NOP, []);
    const i = p.add_instruction(1, Amk.Opcode.TRAP, []);
    p.set_param_int(i, 'code', code);
    const ex = Amk.CpuExecutor.new(p);
    assertThrows(Amk.launch_error_quark(), Amk.LaunchError.ABORTED, () => ex.run(), 'trap');
    const record = ex.get_last_abort();
    assertEqual(record.code, Amk.AbortCode.TRAP, 'abort code');
    assertEqual(record.detail, code, 'detail');
    assertEqual(record.queue, 1, 'queue');
});

done();
