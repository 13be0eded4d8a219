# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Every AmkProgramError code reaches Python as a GLib.Error that matches its domain and
# code; bad images are refused, never crash; the launcher without a GPU says why.

import struct

import numpy as np
import pytest

from amktest import Amk, GLib, Chain, add_op, make_rng, random_data

PE = Amk.ProgramError
LE = Amk.LaunchError


@pytest.fixture
def rng():
    return make_rng()


def program_error(code, call, *args):
    """Runs call(*args), which must raise the program error `code`; returns the error."""
    with pytest.raises(GLib.Error) as info:
        call(*args)
    error = info.value
    assert error.domain == 'amk-program-error-quark', error.message
    assert error.matches(Amk.program_error_quark(), code), (error.code, error.message)
    assert error.message
    return error


# INVALID ------------------------------------------------------------------------------

def test_invalid_dtype_mismatch():
    p = Amk.Program.new(1)
    dst = p.add_buffer('dst', Amk.DType.I32, [4], Amk.BufferRole.OUTPUT)
    src = p.add_buffer('src', Amk.DType.F32, [4], Amk.BufferRole.INPUT)
    add_op(p, 0, Amk.Opcode.COPY, [dst, src], dict(count=4))
    e = program_error(PE.INVALID, p.verify)
    assert 'dst' in e.message and 'src' in e.message
    assert p.props.verified is False
    program_error(PE.INVALID, Amk.CpuExecutor.new, p)


def test_invalid_write_to_constant():
    p = Amk.Program.new(1)
    w = p.add_buffer('weights', Amk.DType.F32, [4], Amk.BufferRole.CONSTANT)
    add_op(p, 0, Amk.Opcode.FILL, [w], dict(count=4, value=3.0))
    e = program_error(PE.INVALID, p.verify)
    assert 'weights' in e.message


def test_invalid_duplicate_name():
    p = Amk.Program.new(1)
    p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.INPUT)
    program_error(PE.INVALID, p.add_buffer, 'x', Amk.DType.I32, [2], Amk.BufferRole.OUTPUT)
    program_error(PE.INVALID, p.add_buffer, '', Amk.DType.I32, [2], Amk.BufferRole.OUTPUT)
    assert p.get_n_buffers() == 1


def test_invalid_buffer_count_for_opcode():
    p = Amk.Program.new(1)
    x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    add_op(p, 0, Amk.Opcode.ADD, [x, x], dict(count=4))
    program_error(PE.INVALID, p.verify)


def test_invalid_data_size(rng):
    p = Amk.Program.new(1)
    x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.INPUT)
    s = p.add_buffer('s', Amk.DType.F32, [4], Amk.BufferRole.SCRATCH)
    program_error(PE.INVALID, p.set_buffer_data, x, GLib.Bytes.new(b'\x01' * 15))
    program_error(PE.INVALID, p.set_buffer_data, s, GLib.Bytes.new(b'\x01' * 16))
    add_op(p, 0, Amk.Opcode.NOP, [])
    ex = Amk.CpuExecutor.new(p)
    program_error(PE.INVALID, ex.upload, x, GLib.Bytes.new(b'\x01' * 17))


# OUT_OF_RANGE -------------------------------------------------------------------------

def test_out_of_range_copy_past_the_end():
    p = Amk.Program.new(1)
    dst = p.add_buffer('dst', Amk.DType.F32, [8], Amk.BufferRole.OUTPUT)
    src = p.add_buffer('src', Amk.DType.F32, [16], Amk.BufferRole.INPUT)
    add_op(p, 0, Amk.Opcode.COPY, [dst, src], dict(dst_offset=4, count=5))
    e = program_error(PE.OUT_OF_RANGE, p.verify)
    assert 'dst' in e.message


@pytest.mark.parametrize('params', [dict(src_offset=12, count=5), dict(src_offset=-1, count=2),
                                    dict(count=-3)])
def test_out_of_range_bad_offsets(params):
    p = Amk.Program.new(1)
    dst = p.add_buffer('dst', Amk.DType.F32, [8], Amk.BufferRole.OUTPUT)
    src = p.add_buffer('src', Amk.DType.F32, [16], Amk.BufferRole.INPUT)
    add_op(p, 0, Amk.Opcode.COPY, [dst, src], params)
    program_error(PE.OUT_OF_RANGE, p.verify)


def test_out_of_range_indices():
    p = Amk.Program.new(2)
    x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    c = p.add_counter('c')
    i = add_op(p, 0, Amk.Opcode.FILL, [x], dict(count=4, value=1.0))
    program_error(PE.OUT_OF_RANGE, p.add_wait, i, c + 1, 1)          # bad counter
    program_error(PE.OUT_OF_RANGE, p.set_signal, i, 7, 1)            # bad counter
    program_error(PE.OUT_OF_RANGE, p.add_instruction, 2, Amk.Opcode.NOP, [])  # bad queue
    program_error(PE.OUT_OF_RANGE, p.add_instruction, 0, Amk.Opcode.FILL, [x + 1])
    program_error(PE.OUT_OF_RANGE, p.add_wait, i + 5, c, 1)          # bad instruction
    program_error(PE.OUT_OF_RANGE, p.set_param_int, i + 5, 'count', 1)     # bad instruction
    program_error(PE.OUT_OF_RANGE, p.set_param_float, i + 5, 'value', 1.0)
    program_error(PE.INVALID, p.set_param_int, i, 'rows', 1)               # not FILL's
    program_error(PE.INVALID, p.set_param_float, i, 'no_such', 1.0)
    program_error(PE.INVALID, p.set_param_int, i, 'value', 1)              # a float
    program_error(PE.INVALID, p.set_param_float, i, 'count', 1.0)          # an integer
    program_error(PE.OUT_OF_RANGE, p.add_buffer, 'y', Amk.DType.F32, [0], Amk.BufferRole.INPUT)
    program_error(PE.OUT_OF_RANGE, p.add_buffer, 'z', Amk.DType.F32, [], Amk.BufferRole.INPUT)
    for _ in range(4):
        p.add_wait(i, c, 0)
    program_error(PE.OUT_OF_RANGE, p.add_wait, i, c, 0)              # fifth wait
    ex = Amk.CpuExecutor.new(p)
    program_error(PE.OUT_OF_RANGE, ex.download, x + 1)
    program_error(PE.OUT_OF_RANGE, ex.upload, 9, GLib.Bytes.new(b'\0' * 16))


# DEADLOCK -----------------------------------------------------------------------------

def test_deadlock_two_queue_cycle():
    p = Amk.Program.new(2)
    x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    c0, c1 = p.add_counter('zero'), p.add_counter('one')
    add_op(p, 0, Amk.Opcode.FILL, [x], dict(count=4, value=1.0), waits=[(c1, 1)], signal=(c0, 1))
    add_op(p, 1, Amk.Opcode.NOP, [], waits=[(c0, 1)], signal=(c1, 1))
    e = program_error(PE.DEADLOCK, p.verify)
    assert e.matches(Amk.ProgramError.quark(), Amk.ProgramError.DEADLOCK)
    assert 'queue' in e.message and 'counter' in e.message
    program_error(PE.DEADLOCK, Amk.CpuExecutor.new, p)
    assert p.props.verified is False


def test_deadlock_wait_nobody_signals():
    p = Amk.Program.new(3)
    x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    c = p.add_counter('lonely')
    p.add_counter('unused')
    add_op(p, 0, Amk.Opcode.NOP, [])
    add_op(p, 2, Amk.Opcode.NOP, [])
    add_op(p, 2, Amk.Opcode.FILL, [x], dict(count=4, value=1.0), waits=[(c, 1)])
    e = program_error(PE.DEADLOCK, p.verify)
    assert 'queue 2' in e.message, e.message
    assert 'lonely' in e.message, e.message


def test_deadlock_target_too_high():
    # the counter is signalled, but only up to 2
    p = Amk.Program.new(2)
    c = p.add_counter('twice')
    add_op(p, 0, Amk.Opcode.NOP, [], signal=(c, 1))
    add_op(p, 0, Amk.Opcode.NOP, [], signal=(c, 1))
    add_op(p, 1, Amk.Opcode.NOP, [], waits=[(c, 3)])
    e = program_error(PE.DEADLOCK, p.verify)
    assert 'twice' in e.message


def test_deadlock_uneven_grid_sync():
    p = Amk.Program.new(3)
    for q in range(3):
        p.add_instruction(q, Amk.Opcode.GRID_SYNC, [])
    p.add_instruction(1, Amk.Opcode.GRID_SYNC, [])
    e = program_error(PE.DEADLOCK, p.verify)
    assert 'GRID_SYNC' in e.message


# CORRUPT, VERSION, damaged images -----------------------------------------------------

def _image(rng):
    chain = Chain(Amk.DType.F32, rng, n=16, tiles=2)
    return chain, bytes(chain.program.serialize().get_data())


def _header_offsets(blob):
    """Offsets of the ABI version (u), queue count (u) and scratch size (t) that follow
    the magic string at the start of the "(suut...)" GVariant."""
    magic = b'amk-image\x00'
    start = blob.find(magic)
    assert start == 0, 'the image starts with its magic string'
    end = start + len(magic)
    version = (end + 3) & ~3
    queues = version + 4
    scratch = (queues + 4 + 7) & ~7
    return version, queues, scratch


def _patched(blob, offset, fmt, value):
    b = bytearray(blob)
    struct.pack_into(fmt, b, offset, value)
    return GLib.Bytes.new(bytes(b))


def test_header_layout_is_what_the_tests_patch(rng):
    chain, blob = _image(rng)
    version, queues, scratch = _header_offsets(blob)
    assert struct.unpack_from('<I', blob, version)[0] == Amk.struct_sizes_get().abi_version
    assert struct.unpack_from('<I', blob, queues)[0] == chain.program.get_num_queues()
    assert struct.unpack_from('<Q', blob, scratch)[0] == chain.program.get_scratch_size()


def test_version(rng):
    _, blob = _image(rng)
    version, _, _ = _header_offsets(blob)
    e = program_error(PE.VERSION, Amk.Program.new_from_bytes, _patched(blob, version, '<I', 99))
    assert '99' in e.message


def test_corrupt_random_bytes(rng):
    for size in (0, 1, 7, 64, 1000, 4096):
        junk = GLib.Bytes.new(rng.integers(0, 256, size=size, dtype=np.uint8).tobytes())
        program_error(PE.CORRUPT, Amk.Program.new_from_bytes, junk)


def test_corrupt_bad_magic(rng):
    _, blob = _image(rng)
    b = bytearray(blob)
    b[0:3] = b'xyz'
    program_error(PE.CORRUPT, Amk.Program.new_from_bytes, GLib.Bytes.new(bytes(b)))


def test_corrupt_truncated(rng):
    _, blob = _image(rng)
    program_error(PE.CORRUPT, Amk.Program.new_from_bytes, GLib.Bytes.new(blob[:len(blob) // 2]))
    # any truncation is refused with an error of the domain, never a crash
    for cut in sorted(set(rng.integers(0, len(blob), size=40).tolist()) | {1, len(blob) - 1}):
        with pytest.raises(GLib.Error) as info:
            Amk.Program.new_from_bytes(GLib.Bytes.new(blob[:cut]))
        assert info.value.matches(Amk.program_error_quark(), PE.CORRUPT), (cut, info.value.message)


def test_corrupt_file(tmp_path, rng):
    path = tmp_path / 'junk.amk'
    path.write_bytes(rng.integers(0, 256, size=300, dtype=np.uint8).tobytes())
    program_error(PE.CORRUPT, Amk.Program.new_from_file, str(path))


def test_out_of_range_scratch_overflow_in_image(rng):
    # shrink the image's scratch arena below what its scratch buffers need
    chain, blob = _image(rng)
    assert chain.program.get_scratch_size() > 0
    _, queues, scratch = _header_offsets(blob)
    e = program_error(PE.OUT_OF_RANGE, Amk.Program.new_from_bytes, _patched(blob, scratch, '<Q', 8))
    assert 'scratch' in e.message.lower()
    program_error(PE.OUT_OF_RANGE, Amk.Program.new_from_bytes, _patched(blob, queues, '<I', 0))


def test_random_bit_flips_never_crash(rng):
    _, blob = _image(rng)
    # the scratch size field is left alone here: see test_huge_scratch_size_is_an_error
    _, _, scratch = _header_offsets(blob)
    positions = [p for p in range(len(blob)) if not scratch <= p < scratch + 8]
    for _ in range(300):
        b = bytearray(blob)
        for pos in rng.choice(positions, size=int(rng.integers(1, 4))):
            b[pos] ^= 1 << int(rng.integers(0, 8))
        try:
            q = Amk.Program.new_from_bytes(GLib.Bytes.new(bytes(b)))
        except GLib.Error as e:
            assert e.domain == 'amk-program-error-quark', e.message
            continue
        # whatever loads is verified and runs
        assert q.props.verified is True
        ex = Amk.CpuExecutor.new(q)
        ex.run()


_HUGE_SCRATCH = r"""
import struct, sys
sys.path.insert(0, {here!r})
from amktest import Amk, GLib, make_rng, Chain
chain = Chain(Amk.DType.F32, make_rng(), n=16, tiles=2)
blob = bytearray(chain.program.serialize().get_data())
struct.pack_into('<Q', blob, {offset}, 1 << 62)
try:
    prog = Amk.Program.new_from_bytes(GLib.Bytes.new(bytes(blob)))
    Amk.CpuExecutor.new(prog)
except GLib.Error as e:
    print('GError', e.domain, e.code)
    sys.exit(0)
print('no error')
sys.exit(3)
"""


def test_huge_scratch_size_is_an_error(rng):
    # In a child process, so that a regression (an abort in g_malloc0) fails one test only.
    import os
    import subprocess
    import sys
    _, blob = _image(rng)
    _, _, scratch = _header_offsets(blob)
    code = _HUGE_SCRATCH.format(here=os.path.dirname(os.path.abspath(__file__)), offset=scratch)
    child = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                           timeout=60)
    assert child.returncode == 0, (child.returncode, child.stdout, child.stderr[-500:])
    assert 'GError amk-program-error-quark' in child.stdout


# NOT_VERIFIED -------------------------------------------------------------------------

def test_not_verified_after_change(rng):
    chain = Chain(Amk.DType.F32, rng)
    ex = Amk.CpuExecutor.new(chain.program)
    inp = random_data(rng, Amk.DType.F32, chain.n)
    out, want = chain.run(ex, inp)
    add_op(chain.program, 0, Amk.Opcode.NOP, [])
    program_error(PE.NOT_VERIFIED, ex.run)
    # verifying again does not help this executor: it was made for the old program
    chain.program.verify()
    program_error(PE.NOT_VERIFIED, ex.run)
    ex2 = Amk.CpuExecutor.new(chain.program)
    out2, want2 = chain.run(ex2, inp)
    assert out2.tobytes() == want2.tobytes()


def test_not_verified_after_param_change(rng):
    chain = Chain(Amk.DType.F32, rng)
    ex = Amk.CpuExecutor.new(chain.program)
    chain.program.set_param_int(0, 'count', 1)
    program_error(PE.NOT_VERIFIED, ex.run)


# The launcher without a GPU -----------------------------------------------------------

def _expected_launch_error():
    if not Amk.Launcher.get_have_cuda():
        return LE.UNSUPPORTED
    if Amk.Launcher.get_device_count() == 0:
        return LE.NO_DEVICE
    pytest.skip('a CUDA device is present: tests/gpu covers the launcher')


def _launch_error(code, call, *args):
    with pytest.raises(GLib.Error) as info:
        call(*args)
    error = info.value
    assert error.domain == 'amk-launch-error-quark', error.message
    assert error.matches(Amk.launch_error_quark(), code), (error.code, error.message)
    assert error.message
    return error


def _small_program():
    p = Amk.Program.new(1)
    x = p.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    add_op(p, 0, Amk.Opcode.FILL, [x], dict(count=4, value=1.0))
    return p


def test_launcher_load_without_gpu():
    code = _expected_launch_error()
    p = _small_program()
    launcher = Amk.Launcher.new(0)
    e = _launch_error(code, launcher.load, p)
    assert 'CPU' in e.message or 'cuda' in e.message.lower()
    _launch_error(code, launcher.load_unverified, p)
    assert launcher.get_program() is None
    # a program that does not verify still fails verification first
    bad = Amk.Program.new(1)
    add_op(bad, 0, Amk.Opcode.NOP, [], waits=[(bad.add_counter('never'), 1)])
    program_error(PE.DEADLOCK, launcher.load, bad)


@pytest.mark.parametrize('method,args', [
    ('supports_cooperative', []),
    ('kernel_attributes', [256, 0]),
    ('max_coresident_blocks', [256, 0]),
    ('memory_info', []),
    ('get_device_name', []),
    ('launch', [None]),
    ('upload', [0, GLib.Bytes.new(b'\0' * 16)]),
    ('download', [0]),
    ('bind_buffer', [0, 0x1000, 16]),
    ('get_buffer_address', [0]),
])
def test_launcher_calls_without_gpu(method, args):
    code = _expected_launch_error()
    launcher = Amk.Launcher(device=0)
    _launch_error(code, getattr(launcher, method), *args)
    assert launcher.get_last_abort() is None


def test_launch_async_without_gpu():
    code = _expected_launch_error()
    launcher = Amk.Launcher.new(0)
    loop = GLib.MainLoop()
    outcome = {}

    def done(source, result, data):
        outcome['data'] = data
        try:
            outcome['value'] = source.launch_finish(result)
        except GLib.Error as e:
            outcome['error'] = e
        loop.quit()

    launcher.launch_async(None, done, 'token')
    GLib.timeout_add_seconds(30, loop.quit)
    loop.run()
    assert outcome.get('data') == 'token'
    assert 'error' in outcome, outcome
    assert outcome['error'].matches(Amk.launch_error_quark(), code)
