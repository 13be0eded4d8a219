# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The CPU executor against numpy: dependency chains over several queues, every utility
# op on every dtype, GRID_SYNC phases, schedule independence of a correct program, a
# visible race in a program that forgot a wait, and TRAP.

import os

import numpy as np
import pytest

from amktest import (Amk, GLib, Chain, add_op, download, from_f32, make_rng, poison,
                     random_data, ref_add, same_bits, upload)

ALL_DTYPES = [Amk.DType.F32, Amk.DType.F16, Amk.DType.BF16, Amk.DType.I32, Amk.DType.U8]
IDS = ['f32', 'f16', 'bf16', 'i32', 'u8']


@pytest.fixture
def rng():
    return make_rng()


@pytest.mark.parametrize('dtype', [Amk.DType.F32, Amk.DType.BF16, Amk.DType.I32],
                         ids=['f32', 'bf16', 'i32'])
def test_chain_across_four_queues(rng, dtype):
    chain = Chain(dtype, rng, n=96, tiles=6)
    ex = Amk.CpuExecutor.new(chain.program)
    assert [chain.program.get_queue_length(q) for q in range(4)] == [6] * 4
    for seed in range(12):
        inp = random_data(rng, dtype, chain.n)   # fresh input every run
        out, want = chain.run(ex, inp, seed=seed)
        assert same_bits(out, want), f'seed {seed}'


def _one_op_program(dtype, n_dst, n_src):
    p = Amk.Program.new(1)
    dst = p.add_buffer('dst', dtype, [n_dst], Amk.BufferRole.OUTPUT)
    a = p.add_buffer('a', dtype, [n_src], Amk.BufferRole.INPUT)
    b = p.add_buffer('b', dtype, [n_src], Amk.BufferRole.INPUT)
    return p, dst, a, b


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=IDS)
def test_copy(rng, dtype):
    n_dst, n_src = 50, 40
    p, dst, a, _ = _one_op_program(dtype, n_dst, n_src)
    # two copies with different offsets
    add_op(p, 0, Amk.Opcode.COPY, [dst, a], dict(dst_offset=3, src_offset=7, count=20))
    add_op(p, 0, Amk.Opcode.COPY, [dst, a], dict(dst_offset=30, count=5))
    ex = Amk.CpuExecutor.new(p)

    src = random_data(rng, dtype, n_src)
    before = poison(dtype, n_dst)
    upload(ex, a, dtype, src)
    upload(ex, dst, dtype, before)
    ex.run()

    want = before.copy()
    want[3:23] = src[7:27]
    want[30:35] = src[0:5]
    assert same_bits(download(ex, dst, dtype), want)


def _fill_value(rng, dtype):
    if dtype == Amk.DType.U8:
        return float(rng.uniform(1.0, 255.9))
    if dtype == Amk.DType.I32:
        return float(rng.uniform(1.0, 1.0e6) * rng.choice([-1, 1]))
    # not representable in the narrow float types, so their rounding is exercised
    return float(np.float32(rng.uniform(0.1, 100.0) * rng.choice([-1, 1])))


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=IDS)
def test_fill(rng, dtype):
    n = 33
    p, dst, _, _ = _one_op_program(dtype, n, 1)
    v1, v2 = _fill_value(rng, dtype), _fill_value(rng, dtype)
    add_op(p, 0, Amk.Opcode.FILL, [dst], dict(offset=4, count=10, value=v1))
    add_op(p, 0, Amk.Opcode.FILL, [dst], dict(offset=20, count=13, value=v2))
    ex = Amk.CpuExecutor.new(p)

    before = poison(dtype, n)
    upload(ex, dst, dtype, before)
    ex.run()

    want = before.copy()
    want[4:14] = from_f32(dtype, np.full(10, v1, dtype=np.float32))
    want[20:33] = from_f32(dtype, np.full(13, v2, dtype=np.float32))
    assert same_bits(download(ex, dst, dtype), want)


def test_fill_f16_rounds_to_nearest_even():
    # 1 + 2^-11 lies halfway between two f16 values: ties go to the even one (1.0);
    # 1 + 3 * 2^-11 ties up to 1 + 2^-9.
    p, dst, _, _ = _one_op_program(Amk.DType.F16, 2, 1)
    add_op(p, 0, Amk.Opcode.FILL, [dst], dict(count=1, value=1.0 + 2.0 ** -11))
    add_op(p, 0, Amk.Opcode.FILL, [dst], dict(offset=1, count=1, value=1.0 + 3 * 2.0 ** -11))
    ex = Amk.CpuExecutor.new(p)
    ex.run()
    assert list(download(ex, dst, Amk.DType.F16)) == [1.0, 1.0 + 2.0 ** -9]


def test_fill_bf16_rounds_to_nearest_even():
    p, dst, _, _ = _one_op_program(Amk.DType.BF16, 2, 1)
    add_op(p, 0, Amk.Opcode.FILL, [dst], dict(count=1, value=1.0 + 2.0 ** -8))  # tie, even is 1.0
    add_op(p, 0, Amk.Opcode.FILL, [dst], dict(offset=1, count=1, value=1.0 + 3 * 2.0 ** -8))  # tie, up
    ex = Amk.CpuExecutor.new(p)
    ex.run()
    assert list(download(ex, dst, Amk.DType.BF16)) == [0x3F80, 0x3F82]


@pytest.mark.parametrize('dtype', ALL_DTYPES, ids=IDS)
def test_add(rng, dtype):
    n_dst, n_src = 64, 48
    p, dst, a, b = _one_op_program(dtype, n_dst, n_src)
    add_op(p, 0, Amk.Opcode.ADD, [dst, a, b], dict(dst_offset=2, a_offset=5, b_offset=9, count=30))
    add_op(p, 0, Amk.Opcode.ADD, [dst, b, b], dict(dst_offset=40, b_offset=1, count=17))
    ex = Amk.CpuExecutor.new(p)

    xa, xb = random_data(rng, dtype, n_src), random_data(rng, dtype, n_src)
    before = poison(dtype, n_dst)
    upload(ex, a, dtype, xa)
    upload(ex, b, dtype, xb)
    upload(ex, dst, dtype, before)
    ex.run()

    want = before.copy()
    want[2:32] = ref_add(dtype, xa[5:35], xb[9:39])
    want[40:57] = ref_add(dtype, xb[0:17], xb[1:18])
    assert same_bits(download(ex, dst, dtype), want)


def test_add_integers_wrap():
    p, dst, a, b = _one_op_program(Amk.DType.I32, 2, 2)
    add_op(p, 0, Amk.Opcode.ADD, [dst, a, b], dict(count=2))
    ex = Amk.CpuExecutor.new(p)
    upload(ex, a, Amk.DType.I32, np.array([2 ** 31 - 1, -2 ** 31], dtype=np.int32))
    upload(ex, b, Amk.DType.I32, np.array([1, -1], dtype=np.int32))
    ex.run()
    assert list(download(ex, dst, Amk.DType.I32)) == [-2 ** 31, 2 ** 31 - 1]


def test_grid_sync_phases(rng):
    Q, m = 8, 6
    dtype = Amk.DType.F32
    p = Amk.Program.new(Q)
    inp = p.add_buffer('in', dtype, [Q * m], Amk.BufferRole.INPUT)
    a = p.add_buffer('a', dtype, [Q * m], Amk.BufferRole.SCRATCH)
    b = p.add_buffer('b', dtype, [Q * m], Amk.BufferRole.SCRATCH)
    out = p.add_buffer('out', dtype, [Q * m], Amk.BufferRole.OUTPUT)
    for q in range(Q):
        # phase 1: a[q] = in[q]; phase 2: b[q] = a[q] + a[q+1]; phase 3: out[q] = b[q+3]
        add_op(p, q, Amk.Opcode.COPY, [a, inp], dict(dst_offset=q * m, src_offset=q * m, count=m))
        p.add_instruction(q, Amk.Opcode.GRID_SYNC, [])
        add_op(p, q, Amk.Opcode.ADD, [b, a, a],
               dict(dst_offset=q * m, a_offset=q * m, b_offset=((q + 1) % Q) * m, count=m))
        p.add_instruction(q, Amk.Opcode.GRID_SYNC, [])
        add_op(p, q, Amk.Opcode.COPY, [out, b],
               dict(dst_offset=q * m, src_offset=((q + 3) % Q) * m, count=m))
    ex = Amk.CpuExecutor.new(p)

    # twenty orders of the seeded scheduler, then worker threads
    for seed, threads in [(s, 1) for s in range(20)] + [(0, t) for t in (2, 3, 8) * 3]:
        x = random_data(rng, dtype, Q * m)
        for buf in (a, b, out):
            upload(ex, buf, dtype, poison(dtype, Q * m))
        upload(ex, inp, dtype, x)
        ex.props.seed = seed
        ex.props.threads = threads
        ex.run()

        blocks = x.reshape(Q, m)
        summed = blocks + np.roll(blocks, -1, axis=0)
        want = np.roll(summed, -3, axis=0).reshape(-1)
        assert same_bits(download(ex, out, dtype), want), f'seed {seed}, threads {threads}'


def test_correct_program_is_schedule_independent(rng):
    chain = Chain(Amk.DType.BF16, rng, n=48, tiles=8)
    ex = Amk.CpuExecutor.new(chain.program)
    inp = random_data(rng, Amk.DType.BF16, chain.n)
    results = set()
    for seed in list(range(60)) + [2 ** 64 - 1, 2 ** 32, 123456789123]:
        out, want = chain.run(ex, inp, seed=seed)
        assert same_bits(out, want), f'seed {seed}'
        results.add(out.tobytes())
    assert len(results) == 1


def test_missing_wait_races(rng):
    # queue 0 overwrites x; queue 1 copies x to y without waiting for it: y would get the
    # old or the new x depending on the schedule, so the verifier's race proof refuses it
    n = 16
    p = Amk.Program.new(2)
    x = p.add_buffer('x', Amk.DType.F32, [n], Amk.BufferRole.STATE)
    y = p.add_buffer('y', Amk.DType.F32, [n], Amk.BufferRole.OUTPUT)
    c = p.add_counter('x-written')
    add_op(p, 0, Amk.Opcode.FILL, [x], dict(count=n, value=1.0), signal=(c, 1))
    add_op(p, 1, Amk.Opcode.COPY, [y, x], dict(count=n))     # forgot: waits=[(c, 1)]
    with pytest.raises(GLib.Error) as info:
        Amk.CpuExecutor.new(p)
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.RACE)
    assert 'queue 1 instruction 0 (COPY)' in info.value.message and '“x”' in info.value.message


def test_trap_aborts_with_record(rng):
    code = int(rng.integers(1, 100000))
    p = Amk.Program.new(3)
    x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    c = p.add_counter('filled')
    add_op(p, 0, Amk.Opcode.FILL, [x], dict(count=4, value=1.0), signal=(c, 1))
    add_op(p, 2, Amk.Opcode.NOP, [])
    add_op(p, 2, Amk.Opcode.TRAP, [], dict(code=code), waits=[(c, 1)])
    ex = Amk.CpuExecutor.new(p)

    with pytest.raises(GLib.Error) as info:
        ex.run()
    error = info.value
    assert error.matches(Amk.launch_error_quark(), Amk.LaunchError.ABORTED)
    assert error.matches(Amk.LaunchError.quark(), Amk.LaunchError.ABORTED)
    assert error.domain == 'amk-launch-error-quark'

    record = ex.get_last_abort()
    assert record is not None
    assert record.code == Amk.AbortCode.TRAP
    assert record.detail == code
    assert record.queue == 2
    assert record.instruction == 1
    assert isinstance(record.to_string(), str) and record.to_string()

    # a clean run clears the record
    p2 = Amk.Program.new(1)
    add_op(p2, 0, Amk.Opcode.NOP, [])
    ex2 = Amk.CpuExecutor.new(p2)
    assert ex2.run() is True
    assert ex2.get_last_abort() is None


def test_executor_keeps_state_between_runs(rng):
    # STATE buffers keep their contents across runs: out = state; state = state + inc
    dtype = Amk.DType.I32
    n = 8
    p = Amk.Program.new(2)
    st = p.add_buffer('state', dtype, [n], Amk.BufferRole.STATE)
    inc = p.add_buffer('inc', dtype, [n], Amk.BufferRole.CONSTANT)
    out = p.add_buffer('out', dtype, [n], Amk.BufferRole.OUTPUT)
    c = p.add_counter('copied')
    incs = random_data(rng, dtype, n)
    start = random_data(rng, dtype, n)
    p.set_buffer_data(inc, GLib.Bytes.new(incs.tobytes()))
    p.set_buffer_data(st, GLib.Bytes.new(start.tobytes()))
    add_op(p, 0, Amk.Opcode.COPY, [out, st], dict(count=n), signal=(c, 1))
    add_op(p, 1, Amk.Opcode.ADD, [st, st, inc], dict(count=n), waits=[(c, 1)])
    ex = Amk.CpuExecutor.new(p)

    want = start
    for run in range(5):
        upload(ex, out, dtype, poison(dtype, n))
        ex.props.seed = run
        ex.run()
        assert same_bits(download(ex, out, dtype), want)
        want = ref_add(dtype, want, incs)


def test_through_the_executor_interface(rng):
    # the calls the generator makes, as Amk.Executor methods on Amk.CpuExecutor()
    n = 16
    p = Amk.Program.new(2)
    x = p.add_buffer('x', Amk.DType.F32, [n], Amk.BufferRole.INPUT)
    two = p.add_buffer('two', Amk.DType.F32, [n], Amk.BufferRole.SCRATCH)
    y = p.add_buffer('y', Amk.DType.F32, [n], Amk.BufferRole.OUTPUT)
    c = p.add_counter('filled')
    add_op(p, 0, Amk.Opcode.FILL, [two], dict(count=n, value=2.0), signal=(c, 1))
    add_op(p, 1, Amk.Opcode.ADD, [y, x, two], dict(count=n), waits=[(c, 1)])

    ex = Amk.CpuExecutor()
    assert isinstance(ex, Amk.Executor)
    assert Amk.Executor.get_program(ex) is None
    assert Amk.Executor.get_preferred_queues(ex) == (os.cpu_count() or 1)   # one per core
    ex.props.threads = 5
    assert Amk.Executor.get_preferred_queues(ex) == 5
    assert Amk.Executor.get_description(ex) == 'CPU executor'
    with pytest.raises(GLib.Error) as info:
        Amk.Executor.run(ex, None)
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.NOT_VERIFIED)

    assert Amk.Executor.load(ex, p)
    assert Amk.Executor.get_program(ex) is p and ex.props.program is p
    inp = rng.standard_normal(n).astype(np.float32)
    assert Amk.Executor.upload(ex, x, GLib.Bytes.new(inp.tobytes()))
    assert Amk.Executor.run(ex, None)
    out = np.frombuffer(Amk.Executor.download(ex, y).get_data(), dtype=np.float32)
    assert out.tobytes() == (inp + np.float32(2.0)).tobytes()
    assert Amk.Executor.get_last_abort(ex) is None

    # the interface's run_async: in a worker thread, finished in this main context
    loop = GLib.MainLoop()
    state = {}

    def done(source, result):
        state['ok'] = Amk.Executor.run_finish(source, result)
        loop.quit()

    Amk.Executor.run_async(ex, None, done)
    loop.run()
    assert state['ok'] is True

    # a TRAP through the interface leaves its record there
    trap = Amk.Program.new(1)
    add_op(trap, 0, Amk.Opcode.TRAP, [], dict(code=42))
    Amk.Executor.load(ex, trap)
    with pytest.raises(GLib.Error) as info:
        Amk.Executor.run(ex, None)
    assert info.value.matches(Amk.launch_error_quark(), Amk.LaunchError.ABORTED)
    assert Amk.Executor.get_last_abort(ex).detail == 42
