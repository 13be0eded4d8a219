# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Amk.Executor.load_shared on the CPU executor: a second program that uses the first
# executor's weights and cache (buffers of the same names), from Python.

import numpy as np
import pytest

from amktest import Amk, GLib, add_op, download, make_rng, to_bytes, upload

N = 24
F32 = Amk.DType.F32


def owner_program(weights):
    """FILL cache = 3; "w" holds the weights."""
    p = Amk.Program.new(1)
    w = p.add_buffer('w', F32, [N], Amk.BufferRole.CONSTANT)
    p.set_buffer_data(w, to_bytes(weights))
    cache = p.add_buffer('cache', F32, [N], Amk.BufferRole.STATE)
    add_op(p, 0, Amk.Opcode.FILL, [cache], dict(count=N, value=3.0))
    return p


def sharer_program(cache_shape=(N,), cache_dtype=F32):
    """out = cache + w, with "w" without data of its own."""
    p = Amk.Program.new(1)
    out = p.add_buffer('out', F32, [N], Amk.BufferRole.OUTPUT)
    cache = p.add_buffer('cache', cache_dtype, list(cache_shape), Amk.BufferRole.STATE)
    w = p.add_buffer('w', F32, [N], Amk.BufferRole.CONSTANT)
    if cache_dtype == F32 and cache_shape == (N,):
        add_op(p, 0, Amk.Opcode.ADD, [out, cache, w], dict(count=N))
    else:
        add_op(p, 0, Amk.Opcode.NOP, [])
    return p, out, cache


@pytest.fixture
def weights():
    return make_rng().standard_normal(N).astype(np.float32)


def test_shared_weights_and_cache(weights):
    # the owner made the binding's way: its program loads on first use
    owner = Amk.CpuExecutor(program=owner_program(weights))
    sharer = Amk.CpuExecutor()
    p, out, cache = sharer_program()
    Amk.Executor.load_shared(sharer, p, owner)

    sharer.run()
    assert np.array_equal(download(sharer, out, F32), weights)        # cache is 0
    owner.run()
    sharer.run()
    assert np.array_equal(download(sharer, out, F32), weights + np.float32(3.0))

    # an upload through the sharer is what the owner holds
    upload(sharer, cache, F32, np.full(N, 5.0, np.float32))
    assert np.array_equal(download(owner, 1, F32), np.full(N, 5.0, np.float32))

    # the sharer keeps the memory when the owner goes
    del owner
    sharer.run()
    assert np.array_equal(download(sharer, out, F32), weights + np.float32(5.0))


@pytest.mark.parametrize('shape, dtype', [((N,), Amk.DType.I32), ((2, N), F32)],
                         ids=['dtype', 'size'])
def test_mismatch(weights, shape, dtype):
    owner = Amk.CpuExecutor.new(owner_program(weights))
    sharer = Amk.CpuExecutor()
    p, _, _ = sharer_program(shape, dtype)
    with pytest.raises(GLib.Error) as info:
        Amk.Executor.load_shared(sharer, p, owner)
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
    assert '“cache”' in info.value.message
    assert sharer.get_program() is None


def test_owner_of_another_type(weights):
    sharer = Amk.CpuExecutor()
    p, _, _ = sharer_program()
    with pytest.raises(GLib.Error) as info:
        Amk.Executor.load_shared(sharer, p, Amk.Launcher.new(0))
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)


def test_no_owner_is_a_plain_load(weights):
    sharer = Amk.CpuExecutor()
    p, out, _ = sharer_program()
    Amk.Executor.load_shared(sharer, p, None)
    sharer.run()
    assert np.array_equal(download(sharer, out, F32), np.zeros(N, np.float32))
