# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The CPU executor's worker threads (Amk.CpuExecutor:threads): programs of several
# queues give on 2 to 8 workers the bits numpy and the seeded scheduler give, through
# counters and split-K's atomic adds (GRID_SYNCs: test_cpu_executor.py); a TRAP stops
# every worker with its record; a cancelled run ends; the workers are threads; the
# property.

import os
import threading
import time

import numpy as np
import pytest

from gi.repository import Gio

from amktest import Amk, GLib, Chain, add_op, make_rng, random_data, same_bits
from test_matvec import MatvecCase

THREADS = [2, 3, 8]


@pytest.fixture
def rng():
    return make_rng()


@pytest.mark.parametrize('threads', THREADS)
@pytest.mark.parametrize('dtype', [Amk.DType.F32, Amk.DType.BF16], ids=['f32', 'bf16'])
def test_chain(rng, dtype, threads):
    chain = Chain(dtype, rng, n=960, tiles=40)
    ex = Amk.CpuExecutor.new(chain.program)
    for _ in range(10):
        inp = random_data(rng, dtype, chain.n)
        out, want = chain.run(ex, inp, threads=threads)
        assert same_bits(out, want)


@pytest.mark.parametrize('threads', THREADS)
def test_split_k_adds(rng, threads):
    # 7 queues' split-K slices add onto y at once; the sum is numpy's, up to the order
    case = MatvecCase(rng, rows=96, k=512, wdt=Amk.DType.F32, residual="in-place",
                      tile=8, queues=7, splits=4)
    for _ in range(5):
        got, want = case.run(rng, threads=threads)
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_same_bits_as_the_seeded_scheduler(rng):
    # no split-K: every order gives the same bits
    case = MatvecCase(rng, rows=200, k=96, wdt=Amk.DType.BF16, norm=True, tile=8, queues=9)
    first, _ = case.run(np.random.default_rng(3), threads=1)
    for threads in (1, 2, 4, 2):
        again, _ = case.run(np.random.default_rng(3), threads=threads)
        np.testing.assert_array_equal(again, first)


def test_many_queues_chain():
    # 20,000 queues, each waiting for the queue before it: every step crosses to the
    # other worker's queues, which must be woken, not found by a scan
    n = 20000
    p = Amk.Program.new(n)
    before = None
    for q in range(n):
        c = p.add_counter(None)
        i = p.add_instruction(n - 1 - q, Amk.Opcode.NOP, [])
        if before is not None:
            p.add_wait(i, before, 1)
        p.set_signal(i, c, 1)
        before = c
    ex = Amk.CpuExecutor.new(p)
    ex.props.threads = 2
    start = time.monotonic()
    ex.run()
    assert time.monotonic() - start < 10


@pytest.mark.parametrize('threads', THREADS)
def test_trap_stops_every_worker(threads):
    # queue 5 traps after the FILL it waits for; the other queues loop on long work
    Q, n = 8, 1 << 16
    p = Amk.Program.new(Q)
    x = p.add_buffer('x', Amk.DType.F32, [n], Amk.BufferRole.OUTPUT)
    y = p.add_buffer('y', Amk.DType.F32, [Q, n], Amk.BufferRole.SCRATCH)
    c = p.add_counter('filled')
    add_op(p, 0, Amk.Opcode.FILL, [x], dict(count=n, value=1.0), signal=(c, 1))
    add_op(p, 5, Amk.Opcode.NOP, [])
    add_op(p, 5, Amk.Opcode.TRAP, [], dict(code=4242), waits=[(c, 1)])
    for q in (1, 2, 3, 4, 6, 7):
        for _ in range(2000):
            add_op(p, q, Amk.Opcode.FILL, [y], dict(offset=q * n, count=n, value=2.0))
    ex = Amk.CpuExecutor.new(p)
    ex.props.threads = threads
    start = time.monotonic()
    with pytest.raises(GLib.Error) as info:
        ex.run()
    assert info.value.matches(Amk.launch_error_quark(), Amk.LaunchError.ABORTED)
    assert time.monotonic() - start < 5   # not all 12,000 FILLs
    record = ex.get_last_abort()
    assert (record.code, record.detail, record.queue, record.instruction) == \
        (Amk.AbortCode.TRAP, 4242, 5, 1)
    # the next run starts clean
    p2 = Amk.Program.new(2)
    add_op(p2, 0, Amk.Opcode.NOP, [])
    add_op(p2, 1, Amk.Opcode.NOP, [])
    assert Amk.Executor.load(ex, p2) and ex.run() and ex.get_last_abort() is None


def test_cancelled_run_ends():
    # two queues that each fill 100 times and wait on each other; cancelled at once
    Q, n, rounds = 2, 1 << 20, 400
    p = Amk.Program.new(Q)
    y = p.add_buffer('y', Amk.DType.F32, [Q, n], Amk.BufferRole.SCRATCH)
    done = [p.add_counter(f'q{q}') for q in range(Q)]
    for r in range(rounds):
        for q in range(Q):
            add_op(p, q, Amk.Opcode.FILL, [y], dict(offset=q * n, count=n, value=float(r)),
                   waits=[(done[1 - q], r)] if r > 0 else [], signal=(done[q], 1))
    ex = Amk.CpuExecutor.new(p)
    ex.props.threads = 2
    cancellable = Gio.Cancellable()
    timer = threading.Timer(0.05, cancellable.cancel)
    timer.start()
    start = time.monotonic()
    with pytest.raises(GLib.Error) as info:
        Amk.Executor.run(ex, cancellable)
    timer.join()
    assert info.value.matches(Gio.io_error_quark(), Gio.IOErrorEnum.CANCELLED)
    assert time.monotonic() - start < 5


def test_threads_property():
    p = Amk.Program.new(2)
    add_op(p, 0, Amk.Opcode.NOP, [])
    ex = Amk.CpuExecutor.new(p)
    assert ex.props.threads == 0 and ex.get_threads() == 0   # one per core
    seen = []
    ex.connect('notify::threads', lambda *a: seen.append(ex.props.threads))
    ex.set_threads(3)
    ex.set_threads(3)
    ex.props.threads = 1
    assert seen == [3, 1]
    sibling = Amk.Executor.new_sibling(ex)
    assert sibling.props.threads == 1
    ex.props.threads = Amk.CPU_EXECUTOR_MAX_THREADS   # more threads than queues: two run
    ex.run()


def worker_threads_seen(ex):
    """Runs ex in a Python thread (the call releases the GIL) and returns the most
    threads named amk-cpu-worker seen in /proc meanwhile."""
    runner = threading.Thread(target=ex.run)
    most = 0
    runner.start()
    while runner.is_alive():
        names = []
        for task in os.listdir('/proc/self/task'):
            try:
                with open(f'/proc/self/task/{task}/comm') as f:
                    names.append(f.read().strip())
            except OSError:
                pass   # the thread ended meanwhile
        most = max(most, names.count('amk-cpu-worker'))
        time.sleep(0.001)
    runner.join()
    return most


@pytest.mark.skipif(not os.path.isdir('/proc/self/task'), reason='no /proc')
def test_workers_are_threads():
    # three queues of long FILLs: threads - 1 workers beside the calling thread, and
    # none with one thread (the seeded scheduler)
    Q, n = 3, 1 << 20
    p = Amk.Program.new(Q)
    y = p.add_buffer('y', Amk.DType.F32, [Q, n], Amk.BufferRole.SCRATCH)
    for q in range(Q):
        for _ in range(80):
            add_op(p, q, Amk.Opcode.FILL, [y], dict(offset=q * n, count=n, value=1.0))
    ex = Amk.CpuExecutor.new(p)
    for threads, want in ((3, 2), (2, 1), (1, 0), (8, 2)):
        ex.props.threads = threads
        assert worker_threads_seen(ex) == want, f'threads {threads}'
