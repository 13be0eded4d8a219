"""The verifier's race proof as a property: random programs of FILL, COPY and ADD over a
few buffers on a few queues, with random waits; every program that verifies gives the
same bytes on the CPU executor under every seed and on worker threads, and the ones it
refuses are refused as races (each names two instructions and a buffer)."""
import numpy as np
import pytest

from amktest import Amk, GLib, add_op, make_rng, to_bytes

N = 8          # elements per buffer
BUFFERS = 4
QUEUES = 3


def random_program(rng):
    p = Amk.Program.new(QUEUES)
    bufs = [p.add_buffer(f"b{k}", Amk.DType.F32, [N], Amk.BufferRole.STATE) for k in range(BUFFERS)]
    made = []   # (counter, queue) of the instructions so far
    for k in range(int(rng.integers(3, 9))):
        q = int(rng.integers(0, QUEUES))
        kind = int(rng.integers(0, 3))
        dst = bufs[int(rng.integers(0, BUFFERS))]
        off, count = int(rng.integers(0, N // 2)), int(rng.integers(1, N // 2 + 1))
        a, b = bufs[int(rng.integers(0, BUFFERS))], bufs[int(rng.integers(0, BUFFERS))]
        # sources never the destination itself: in place is another rule of the verifier
        while a == dst:
            a = bufs[int(rng.integers(0, BUFFERS))]
        while b == dst:
            b = bufs[int(rng.integers(0, BUFFERS))]
        waits = [(c, 1) for c, _ in made if rng.random() < 0.5]
        counter = p.add_counter(f"c{k}")
        if kind == 0:
            add_op(p, q, Amk.Opcode.FILL, [dst], dict(offset=off, count=count, value=float(k + 1)),
                   waits=waits[:4], signal=(counter, 1))
        elif kind == 1:
            add_op(p, q, Amk.Opcode.COPY, [dst, a], dict(dst_offset=off, src_offset=N // 2 - off,
                                                         count=count), waits=waits[:4], signal=(counter, 1))
        else:
            add_op(p, q, Amk.Opcode.ADD, [dst, a, b], dict(dst_offset=off, a_offset=0, b_offset=N - count,
                                                           count=count), waits=waits[:4], signal=(counter, 1))
        made.append((counter, q))
    return p, bufs


def test_verified_programs_are_schedule_independent():
    rng = make_rng()
    verified = refused = 0
    for _ in range(300):
        p, bufs = random_program(rng)
        try:
            p.verify()
        except GLib.Error as e:
            assert e.matches(Amk.program_error_quark(), Amk.ProgramError.RACE), e.message
            assert e.message.startswith("Race: ") and "instruction" in e.message
            refused += 1
            continue
        verified += 1
        start = [rng.standard_normal(N).astype(np.float32) for _ in bufs]
        results = set()
        # eight orders of the seeded scheduler, then worker threads
        for seed, threads in [(s, 1) for s in range(8)] + [(0, 2), (0, 3), (0, 4), (0, 4)]:
            ex = Amk.CpuExecutor.new(p)
            ex.props.seed = seed
            ex.props.threads = threads
            for b, v in zip(bufs, start):
                ex.upload(b, to_bytes(v))
            ex.run()
            results.add(b"".join(bytes(ex.download(b).get_data()) for b in bufs))
        assert len(results) == 1, "a verified program gave different bytes under different orders"
    print(f"{verified} verified, {refused} refused as races")
    assert verified >= 30 and refused >= 30


def test_either_order_makes_a_race_sound():
    """An unordered FILL of x and COPY of x is refused; a counter that puts either one
    first makes the same program verify."""
    for first in (0, 1):
        p = Amk.Program.new(2)
        x = p.add_buffer("x", Amk.DType.F32, [N], Amk.BufferRole.STATE)
        y = p.add_buffer("y", Amk.DType.F32, [N], Amk.BufferRole.STATE)
        c = p.add_counter("c")
        fill = add_op(p, 0, Amk.Opcode.FILL, [x], dict(count=N, value=1.0))
        copy = add_op(p, 1, Amk.Opcode.COPY, [y, x], dict(count=N))
        with pytest.raises(GLib.Error) as info:
            p.verify()
        assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.RACE)
        earlier, later = (fill, copy) if first == 0 else (copy, fill)
        p.set_signal(earlier, c, 1)
        p.add_wait(later, c, 1)
        p.verify()
