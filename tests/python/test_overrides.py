# SPDX-License-Identifier: LGPL-2.1-or-later
"""The PyGObject overrides (introspection/python/gi/overrides/Amk.py).

Where the API takes a GLib.Bytes it also takes numpy arrays (of the buffer's dtype),
bytes, bytearray and memoryview; download_array gives a numpy array of the buffer's
dtype and shape; wrong types raise TypeError, a wrong size the library's GLib.Error;
numpy stays optional. numpy is the reference (amktest.py's conversions).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, GLib  # noqa: E402

from amktest import DTYPES, add_op, bf16_to_f32, f32_to_bf16, make_rng, random_data  # noqa: E402

PE = Amk.ProgramError
SOURCE_OVERRIDES = os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), '..', '..', 'introspection', 'python', 'gi', 'overrides'))


def program_error(code, call, *args):
    with pytest.raises(GLib.Error) as info:
        call(*args)
    assert info.value.matches(Amk.program_error_quark(), code), (info.value.code, info.value.message)
    return info.value


def test_overrides_come_from_the_source_tree():
    # An Amk.py installed into the system Python's own gi/overrides would come first
    # (pkgutil.extend_path appends): the tests must run this tree's.
    module = sys.modules.get('gi.overrides.Amk')
    assert module is not None, 'gi.overrides.Amk was not loaded: is introspection/python on PYTHONPATH?'
    assert os.path.dirname(os.path.abspath(module.__file__)) == SOURCE_OVERRIDES, module.__file__
    assert Amk.CpuExecutor.__module__ == 'gi.overrides.Amk'
    assert isinstance(Amk.CpuExecutor.new_empty(), Amk.Executor)


def _add_program(dtype, shape):
    """z = x + y over buffers of shape; returns (program, x, y, z)."""
    n = int(np.prod(shape))
    p = Amk.Program.new(1)
    x = p.add_buffer('x', dtype, list(shape), Amk.BufferRole.INPUT)
    y = p.add_buffer('y', dtype, list(shape), Amk.BufferRole.CONSTANT)
    z = p.add_buffer('z', dtype, list(shape), Amk.BufferRole.OUTPUT)
    add_op(p, 0, Amk.Opcode.ADD, [z, x, y], dict(count=n))
    return p, x, y, z


def test_numpy_in_and_out():
    rng = make_rng()
    p, x, y, z = _add_program(Amk.DType.F32, (3, 8))
    xs = random_data(rng, Amk.DType.F32, 24).reshape(3, 8)
    ys = random_data(rng, Amk.DType.F32, 24).reshape(8, 3).T      # not C-contiguous
    p.set_buffer_data(y, ys)
    p.verify()
    ex = Amk.CpuExecutor.new(p)
    ex.upload(x, xs)
    ex.run()
    out = ex.download_array(z)
    assert out.dtype == np.float32 and out.shape == (3, 8)
    assert np.array_equal(out, xs + ys)
    out[0, 0] = 0.0                                    # a writable array of its own
    # the plain download keeps returning a GLib.Bytes
    raw = ex.download(z)
    assert isinstance(raw, GLib.Bytes)
    assert raw.get_data() == (xs + ys).tobytes()
    # the interface's methods take the same
    Amk.Executor.upload(ex, x, np.zeros((3, 8), np.float32))
    assert np.array_equal(Amk.Executor.download_array(ex, x), np.zeros((3, 8), np.float32))


@pytest.mark.parametrize('dtype', list(DTYPES), ids=lambda d: d.value_nick)
def test_download_array_has_the_buffer_dtype_and_shape(dtype):
    rng = make_rng()
    p = Amk.Program.new(1)
    a = p.add_buffer('a', dtype, [2, 3, 4], Amk.BufferRole.INPUT)
    ex = Amk.CpuExecutor.new(p)
    data = random_data(rng, dtype, 24).reshape(2, 3, 4)
    ex.upload(a, data)
    out = ex.download_array(a)
    assert out.dtype == DTYPES[dtype] and out.shape == (2, 3, 4)
    assert out.tobytes() == data.tobytes()


@pytest.mark.parametrize('dtype,values,nbytes', [(Amk.DType.Q8_0, 32, 34), (Amk.DType.Q4_K, 256, 144),
                                                 (Amk.DType.Q5_K, 256, 176), (Amk.DType.Q6_K, 256, 210),
                                                 (Amk.DType.Q5_0, 32, 22), (Amk.DType.Q5_1, 32, 24)],
                         ids=lambda d: getattr(d, 'value_nick', str(d)))
def test_quantized_buffers_are_raw_blocks(dtype, values, nbytes):
    """A block-quantized buffer takes and gives its raw blocks as uint8, the last
    dimension in bytes; a conversion of its values is refused."""
    rng = make_rng()
    p = Amk.Program.new(1)
    w = p.add_buffer('w', dtype, [3, 2 * values], Amk.BufferRole.INPUT)
    ex = Amk.CpuExecutor.new(p)
    data = rng.integers(0, 256, size=(3, 2 * nbytes), dtype=np.uint8)
    ex.upload(w, data)
    out = ex.download_array(w)
    assert out.dtype == np.uint8 and out.shape == (3, 2 * nbytes)
    assert np.array_equal(out, data)
    with pytest.raises(TypeError, match='raw'):
        ex.download_array(w, np.float32)
    with pytest.raises(TypeError, match='uint8'):
        ex.upload(w, data.astype(np.float32))


def test_bf16_is_bit_patterns_or_values():
    p = Amk.Program.new(1)
    w = p.add_buffer('w', Amk.DType.BF16, [4], Amk.BufferRole.INPUT)
    h = p.add_buffer('h', Amk.DType.F16, [2], Amk.BufferRole.INPUT)
    ex = Amk.CpuExecutor.new(p)
    values = np.array([1.0, -2.5, 3.140625, 65280.0], np.float32)   # exact in bf16
    ex.upload(w, f32_to_bf16(values))
    bits = ex.download_array(w)
    assert bits.dtype == np.uint16 and np.array_equal(bits, f32_to_bf16(values))
    assert np.array_equal(ex.download_array(w, np.uint16), bits)
    as_f32 = ex.download_array(w, dtype=np.float32)
    assert as_f32.dtype == np.float32 and np.array_equal(as_f32, values)
    assert np.array_equal(as_f32, bf16_to_f32(bits))
    assert ex.download_array(w, 'float64').dtype == np.float64
    # other dtypes convert their values
    ex.upload(h, np.array([0.5, -1.0], np.float16))
    assert np.array_equal(ex.download_array(h, np.float32), np.array([0.5, -1.0], np.float32))
    # a float array for a bf16 buffer is not guessed at
    with pytest.raises(TypeError, match='bf16.*uint16.*float32'):
        ex.upload(w, values)


@pytest.mark.parametrize('kind', ['bytes', 'bytearray', 'memoryview', 'strided-memoryview', 'glib-bytes'])
def test_bytes_like_in(kind):
    values = np.array([1.5, -2.0, 3.25, 4.0], np.float32)
    raw = values.tobytes()
    data = {
        'bytes': raw,
        'bytearray': bytearray(raw),
        'memoryview': memoryview(raw),
        'strided-memoryview': memoryview(np.repeat(values, 2))[::2],   # not contiguous
        'glib-bytes': GLib.Bytes.new(raw),
    }[kind]
    p, x, y, z = _add_program(Amk.DType.F32, (4,))
    p.set_buffer_data(y, data)
    assert p.get_buffer_data(y).get_data() == raw
    p.verify()
    ex = Amk.CpuExecutor.new(p)
    ex.upload(x, data)
    ex.run()
    assert np.array_equal(ex.download_array(z), values + values)


def test_new_from_bytes_takes_bytes():
    p, x, y, z = _add_program(Amk.DType.I32, (5,))
    p.set_buffer_data(y, np.arange(5, dtype=np.int32))
    blob = p.serialize().get_data()
    for data in (blob, bytearray(blob), memoryview(blob), GLib.Bytes.new(blob)):
        q = Amk.Program.new_from_bytes(data)
        assert isinstance(q, Amk.Program) and q.get_n_buffers() == 3
        assert q.get_buffer_data(y).get_data() == np.arange(5, dtype=np.int32).tobytes()
    program_error(PE.CORRUPT, Amk.Program.new_from_bytes, blob[:7])


BAD = [('str', 'abcd'), ('list', [1.0, 2.0, 3.0, 4.0]), ('NoneType', None), ('int', 16),
       ('float', 1.0)]


@pytest.mark.parametrize('name,data', BAD, ids=[b[0] for b in BAD])
def test_wrong_types_raise_type_error(name, data):
    p, x, y, z = _add_program(Amk.DType.F32, (4,))
    ex = Amk.CpuExecutor.new(p)
    message = rf'data must be a GLib\.Bytes, a bytes-like object .* or a numpy array, not {name}$'
    with pytest.raises(TypeError, match=r'CpuExecutor\.upload\(\): ' + message):
        ex.upload(x, data)
    with pytest.raises(TypeError, match=r'Program\.set_buffer_data\(\): ' + message):
        p.set_buffer_data(y, data)
    with pytest.raises(TypeError, match=r'Program\.new_from_bytes\(\): ' + message):
        Amk.Program.new_from_bytes(data)
    with pytest.raises(TypeError, match=message):
        Amk.Launcher.new(0).upload(0, data)


def test_numpy_dtype_must_match():
    p, x, y, z = _add_program(Amk.DType.F32, (4,))
    ex = Amk.CpuExecutor.new(p)
    for wrong in (np.zeros(2, np.float64), np.zeros(4, np.int32), np.zeros(16, np.uint8),
                  np.zeros(4, '>f4')):
        with pytest.raises(TypeError, match=r'f32 elements, which take a numpy array of float32, '
                                            rf'not {wrong.dtype}'):
            ex.upload(x, wrong)
        with pytest.raises(TypeError, match='numpy array of float32'):
            p.set_buffer_data(y, wrong)
        # its raw bytes are taken as they are
        ex.upload(x, wrong.tobytes())
        ex.upload(x, memoryview(wrong))


def test_size_mismatch_is_the_library_error():
    p, x, y, z = _add_program(Amk.DType.F32, (4,))
    e = program_error(PE.INVALID, p.set_buffer_data, y, np.zeros(3, np.float32))
    assert '16 bytes' in e.message and '12 bytes' in e.message
    ex = Amk.CpuExecutor.new(p)
    for data in (np.zeros(5, np.float32), np.zeros((2, 3), np.float32), b'\0' * 15, bytearray(17),
                 memoryview(b'')):
        program_error(PE.INVALID, ex.upload, x, data)
        program_error(PE.INVALID, Amk.Executor.upload, ex, x, data)
    # a buffer that does not exist: the library's error too, from both directions
    program_error(PE.OUT_OF_RANGE, ex.upload, 9, np.zeros(4, np.float32))
    program_error(PE.OUT_OF_RANGE, ex.download_array, 9)


def test_launcher_passes_arrays_on():
    if Amk.Launcher.get_have_cuda() and Amk.Launcher.get_device_count() > 0:
        p, x, y, z = _add_program(Amk.DType.F32, (2, 4))
        ys = np.arange(8, dtype=np.float32).reshape(2, 4)
        p.set_buffer_data(y, ys)
        launcher = Amk.Launcher.new(0)
        launcher.load(p)
        launcher.upload(x, np.ones((2, 4), np.float32))
        launcher.launch(None)
        assert np.array_equal(launcher.download_array(z), ys + 1)
        return
    code = Amk.LaunchError.UNSUPPORTED if not Amk.Launcher.get_have_cuda() else Amk.LaunchError.NO_DEVICE
    launcher = Amk.Launcher.new(0)
    for call, args in ((launcher.upload, (0, np.zeros(4, np.float32))), (launcher.upload, (0, b'\0' * 16)),
                       (launcher.download_array, (0,))):
        with pytest.raises(GLib.Error) as info:
            call(*args)
        assert info.value.matches(Amk.launch_error_quark(), code), info.value.message


NO_NUMPY = r'''
import sys
sys.modules['numpy'] = None                 # import numpy fails from here on
import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, GLib
p = Amk.Program.new(1)
x = p.add_buffer('x', Amk.DType.U8, [4], Amk.BufferRole.INPUT)
p.set_buffer_data(x, b'\x01\x02\x03\x04')
ex = Amk.CpuExecutor.new(p)
ex.upload(x, bytearray(b'\x05\x06\x07\x08'))
ex.upload(x, memoryview(b'\x09\x0a\x0b\x0c'))
assert ex.download(x).get_data() == b'\x09\x0a\x0b\x0c'
try:
    ex.download_array(x)
except ImportError as e:
    assert 'download_array() needs numpy' in str(e), e
else:
    raise AssertionError('download_array without numpy')
print('ok without numpy')
'''


def test_numpy_is_optional():
    result = subprocess.run([sys.executable, '-c', NO_NUMPY], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'ok without numpy'
    assert result.stderr == ''
