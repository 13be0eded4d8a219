# SPDX-License-Identifier: LGPL-2.1-or-later
"""PyGObject overrides for Amk: buffer contents from and to Python objects.

Wherever the C API takes a GLib.Bytes (Amk.Program.new_from_bytes and set_buffer_data,
upload on Amk.Executor, Amk.CpuExecutor and Amk.Launcher), the overrides also take

- bytes, bytearray, memoryview or any other object with the buffer protocol: its bytes,
  as they are;
- a numpy array whose dtype is the buffer's (NUMPY_DTYPES: float32, float16, uint16 for
  bf16, which travels as its bit pattern, int32, uint8), of any shape, copied in C order.
  An array of another dtype raises TypeError rather than being reinterpreted: convert
  it first (``a.astype(np.float32)``), or pass ``a.tobytes()`` to mean its raw bytes.

Anything else raises TypeError. The size is still the library's to check: data of the
wrong size raises its GLib.Error, as with a GLib.Bytes.

``executor.download_array(buffer, dtype=None)`` (all three executors) returns a new,
writable numpy array with the buffer's shape and dtype. A BF16 buffer comes back as
uint16 bit patterns (numpy has no bfloat16); pass ``dtype=np.float32`` (or any other
dtype but uint16) for its values, converted exactly. For other buffers a ``dtype``
converts the values with ``astype``. ``download`` still returns a GLib.Bytes.

numpy is optional: it is imported only by download_array, and a numpy array is
recognised only when numpy has already been imported (it must have been, to make one).
"""

import sys

from ..overrides import override
from ..module import get_introspection_module

from gi.repository import GLib

Amk = get_introspection_module('Amk')

__all__ = ['Program', 'Executor', 'CpuExecutor', 'Launcher']

# The numpy dtype of each Amk.DType, by name so numpy need not be imported. The
# block-quantized types travel as their raw bytes.
NUMPY_DTYPES = {
    Amk.DType.F32: 'float32',
    Amk.DType.F16: 'float16',
    Amk.DType.BF16: 'uint16',
    Amk.DType.I32: 'int32',
    Amk.DType.U8: 'uint8',
    Amk.DType.Q8_0: 'uint8',
    Amk.DType.Q4_K: 'uint8',
    Amk.DType.Q5_K: 'uint8',
    Amk.DType.Q6_K: 'uint8',
    Amk.DType.Q5_0: 'uint8',
    Amk.DType.Q5_1: 'uint8',
}
# values and bytes per block of the block-quantized types (GGUF's layouts)
BLOCKS = {
    Amk.DType.Q8_0: (32, 34),
    Amk.DType.Q4_K: (256, 144),
    Amk.DType.Q5_K: (256, 176),
    Amk.DType.Q6_K: (256, 210),
    Amk.DType.Q5_0: (32, 22),
    Amk.DType.Q5_1: (32, 24),
}


def _buffer_dtype(program, buffer):
    """The Amk.DType of a program's buffer, or None when there is no such buffer (the
    call that follows reports that)."""
    if program is None or not isinstance(buffer, int) or not 0 <= buffer < program.get_n_buffers():
        return None
    return program.get_buffer_dtype(buffer)


def _to_gbytes(data, dtype, caller):
    """data (see the module's docstring) as a GLib.Bytes for a buffer of dtype (an
    Amk.DType, or None when unknown: then a numpy array's dtype is not checked)."""
    if isinstance(data, GLib.Bytes):
        return data
    np = sys.modules.get('numpy')
    if np is not None and isinstance(data, np.ndarray):
        if dtype is not None and data.dtype != NUMPY_DTYPES[dtype]:
            raise TypeError(
                f'{caller}: the buffer holds {dtype.value_nick} elements, which take a numpy '
                f'array of {NUMPY_DTYPES[dtype]}, not {data.dtype} (convert it with '
                f'.astype(), or pass .tobytes() to upload its raw bytes)')
        data = np.ascontiguousarray(data)
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(
            f'{caller}: data must be a GLib.Bytes, a bytes-like object (bytes, bytearray, '
            f'memoryview) or a numpy array, not {type(data).__name__}') from None
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return GLib.Bytes.new(view.cast('B'))    # copies


def _numpy():
    try:
        import numpy
    except ImportError as e:
        raise ImportError('download_array() needs numpy; download() returns the '
                          'contents as a GLib.Bytes without it') from e
    return numpy


def _upload(c_upload):
    """The override of an executor's upload, around its C method c_upload."""
    def upload(self, buffer, data):
        """upload(buffer, data): like the C method, data also bytes-like or a numpy
        array of the buffer's dtype."""
        program = Amk.Executor.get_program(self)
        caller = f'{type(self).__name__}.upload()'
        return c_upload(self, buffer, _to_gbytes(data, _buffer_dtype(program, buffer), caller))
    return upload


def _download_array(self, buffer, dtype=None):
    """download_array(buffer, dtype=None): the buffer's contents as a new numpy array of
    its shape; dtype=None keeps the buffer's dtype (BF16: uint16 bit patterns), another
    dtype converts the values (BF16 to anything but uint16: through float32, exactly)."""
    np = _numpy()
    gbytes = self.download(buffer)                     # GLib.Error for a bad index
    program = Amk.Executor.get_program(self)
    amk_dtype = program.get_buffer_dtype(buffer)
    array = np.frombuffer(gbytes.get_data(), dtype=NUMPY_DTYPES[amk_dtype])
    shape = tuple(program.get_buffer_shape(buffer))
    if amk_dtype in BLOCKS:
        # raw blocks: the last dimension in bytes; no conversion of the values
        values, nbytes = BLOCKS[amk_dtype]
        if dtype is not None and np.dtype(dtype) != np.uint8:
            raise TypeError(f'download_array(): the buffer is {amk_dtype.value_nick}, whose raw '
                            f'blocks come as uint8; converting them to {np.dtype(dtype)} is not done')
        return array.reshape(shape[:-1] + (shape[-1] // values * nbytes,)).copy()
    array = array.reshape(shape)
    if dtype is None:
        return array.copy()                            # frombuffer's array is read-only
    dtype = np.dtype(dtype)
    if amk_dtype == Amk.DType.BF16 and dtype != np.uint16:
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(dtype)


@override
class Program(Amk.Program):
    @classmethod
    def new_from_bytes(cls, data):
        """new_from_bytes(data): a program from its serialized form; data as for
        set_buffer_data."""
        return Amk.Program.new_from_bytes(_to_gbytes(data, None, 'Program.new_from_bytes()'))

    def set_buffer_data(self, buffer, data):
        """set_buffer_data(buffer, data): like the C method, data also bytes-like or a
        numpy array of the buffer's dtype."""
        gbytes = _to_gbytes(data, _buffer_dtype(self, buffer), 'Program.set_buffer_data()')
        return Amk.Program.set_buffer_data(self, buffer, gbytes)


@override
class Executor(Amk.Executor):
    upload = _upload(Amk.Executor.upload)
    download_array = _download_array


@override
class CpuExecutor(Amk.CpuExecutor):
    upload = _upload(Amk.CpuExecutor.upload)
    download_array = _download_array


@override
class Launcher(Amk.Launcher):
    upload = _upload(Amk.Launcher.upload)
    download_array = _download_array
