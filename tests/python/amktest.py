# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Helpers shared by the pytest files: numpy as the independent reference for every
# dtype (round-to-nearest-even conversions written here, not taken from the library),
# random data that is never all zeros, poison for outputs, and small program builders.

import os

import numpy as np

import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, GLib  # noqa: E402

DTYPES = {
    Amk.DType.F32: np.float32,
    Amk.DType.F16: np.float16,
    Amk.DType.BF16: np.uint16,   # bf16 travels as its bit pattern
    Amk.DType.I32: np.int32,
    Amk.DType.U8: np.uint8,
}

ELEMENT_SIZE = {Amk.DType.F32: 4, Amk.DType.F16: 2, Amk.DType.BF16: 2,
                Amk.DType.I32: 4, Amk.DType.U8: 1}


# The block-quantized dtypes: values and bytes per block, and where the block's f16
# scales sit.
BLOCK_TYPES = {
    Amk.DType.Q8_0: (32, 34, (0,)),
    Amk.DType.Q4_K: (256, 144, (0, 2)),
    Amk.DType.Q5_K: (256, 176, (0, 2)),
    Amk.DType.Q6_K: (256, 210, (208,)),
    Amk.DType.Q5_0: (32, 22, (0,)),
    Amk.DType.Q5_1: (32, 24, (0, 2)),
}


def random_blocks(rng, dtype, rows, cols):
    """rows × cols values of a block-quantized dtype as raw blocks (uint8, a row per
    block): every bit random but the f16 scales, a few thousandths of either sign."""
    values, nbytes, scales = BLOCK_TYPES[dtype]
    n_blocks = rows * cols // values
    raw = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    for at in scales:
        d = (rng.uniform(0.5e-3, 4e-3, n_blocks) * rng.choice([-1, 1], n_blocks)).astype(np.float16)
        raw[:, at:at + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return raw


def make_rng():
    """A generator seeded fresh each run; the seed is printed (pytest shows it on failure)
    and AMK_TEST_SEED replays a run."""
    seed = os.environ.get('AMK_TEST_SEED')
    seed = int(seed) if seed else int.from_bytes(os.urandom(8), 'little')
    print(f'AMK_TEST_SEED={seed}')
    return np.random.default_rng(seed)


# bfloat16, round to nearest even, with uint32 arithmetic.
def f32_to_bf16(values):
    f = np.asarray(values, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    quiet = ((u >> 16) | 0x40).astype(np.uint16)
    return np.where(np.isnan(f), quiet, rounded)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_f32(dtype, array):
    """Elements of a buffer as float32 (what the VM computes with)."""
    if dtype == Amk.DType.BF16:
        return bf16_to_f32(array)
    return np.asarray(array).astype(np.float32)


def from_f32(dtype, values):
    """float32 values stored into a buffer of dtype, the way the VM stores them: RNE for
    floats, truncation with saturation for integers (u8 keeps the low byte)."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == Amk.DType.F32:
        return values.copy()
    if dtype == Amk.DType.F16:
        return values.astype(np.float16)
    if dtype == Amk.DType.BF16:
        return f32_to_bf16(values)
    ints = np.nan_to_num(np.trunc(values.astype(np.float64)), nan=0.0)
    ints = np.clip(ints, -2.0 ** 31, 2.0 ** 31 - 1).astype(np.int64)
    if dtype == Amk.DType.I32:
        return ints.astype(np.int32)
    return (ints & 0xFF).astype(np.uint8)


def random_data(rng, dtype, n):
    """n random elements of dtype, as the numpy array that is uploaded."""
    if dtype == Amk.DType.I32:
        while True:
            a = rng.integers(-2 ** 31, 2 ** 31, size=n, dtype=np.int64).astype(np.int32)
            if np.count_nonzero(a) == n:
                return a
    if dtype == Amk.DType.U8:
        return rng.integers(1, 256, size=n).astype(np.uint8)
    values = rng.uniform(0.25, 8.0, size=n) * rng.choice([-1.0, 1.0], size=n)
    return from_f32(dtype, values.astype(np.float32))


def poison(dtype, n):
    """A pattern no correct result has: NaN for floats, 0x5a... for integers."""
    if dtype == Amk.DType.F32:
        return np.full(n, np.nan, dtype=np.float32)
    if dtype == Amk.DType.F16:
        return np.full(n, np.nan, dtype=np.float16)
    if dtype == Amk.DType.BF16:
        return np.full(n, 0x7FC1, dtype=np.uint16)
    if dtype == Amk.DType.I32:
        return np.full(n, 0x5A5A5A5A, dtype=np.int32)
    return np.full(n, 0x5A, dtype=np.uint8)


def to_bytes(array):
    return GLib.Bytes.new(np.ascontiguousarray(array).tobytes())


def from_bytes(dtype, gbytes):
    return np.frombuffer(gbytes.get_data(), dtype=DTYPES[dtype]).copy()


def upload(executor, buffer, dtype, array):
    assert array.dtype == DTYPES[dtype]
    executor.upload(buffer, to_bytes(array))


def download(executor, buffer, dtype):
    return from_bytes(dtype, executor.download(buffer))


def same_bits(a, b):
    """Equality that treats NaN poison like any other bit pattern."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def ref_add(dtype, a, b):
    if dtype == Amk.DType.I32:
        return (a.astype(np.int64) + b.astype(np.int64)).astype(np.uint64).astype(np.uint32).view(np.int32)
    if dtype == Amk.DType.U8:
        return ((a.astype(np.int32) + b.astype(np.int32)) & 0xFF).astype(np.uint8)
    return from_f32(dtype, to_f32(dtype, a) + to_f32(dtype, b))


def set_params(prog, i, params):
    """Sets instruction i's parameters from a dict of name: value; a Python float goes to
    a float parameter, anything else to an integer one."""
    for name, value in (params or {}).items():
        if isinstance(value, (float, np.floating)):
            prog.set_param_float(i, name, float(value))
        else:
            prog.set_param_int(i, name, int(value))


def add_op(prog, queue, opcode, buffers, params=None, waits=(), signal=None):
    """Appends one instruction; params is a dict of name: value (set_params), waits a list
    of (counter, target), signal (counter, amount)."""
    i = prog.add_instruction(queue, opcode, list(buffers))
    set_params(prog, i, params)
    for counter, target in waits:
        prog.add_wait(i, counter, target)
    if signal is not None:
        prog.set_signal(i, signal[0], signal[1])
    return i


class Chain:
    """A four-stage pipeline over four queues, one stage per queue, each stage split into
    tiles: tile t of stage k waits until stage k - 1 finished tile t (its counter reaches
    t + 1), so the stages overlap.

        q0: a[t]   = COPY in[t]
        q1: b[t]   = ADD a[t] + w[t]        (w is CONSTANT with default contents)
        q2: c[t]   = ADD b[t] + in[t]
        q3: out[OFF + t] = COPY c[t]        (the rest of out keeps its poison)
    """

    QUEUES = 4

    def __init__(self, dtype, rng, n=64, tiles=4, out_offset=5):
        assert n % tiles == 0
        self.dtype, self.n, self.tiles, self.offset = dtype, n, tiles, out_offset
        self.out_len = n + 2 * out_offset
        p = self.program = Amk.Program.new(self.QUEUES)
        self.inp = p.add_buffer('in', dtype, [n], Amk.BufferRole.INPUT)
        self.w = p.add_buffer('w', dtype, [n // 8, 8], Amk.BufferRole.CONSTANT)
        self.a = p.add_buffer('a', dtype, [n], Amk.BufferRole.SCRATCH)
        self.b = p.add_buffer('b', dtype, [n], Amk.BufferRole.SCRATCH)
        self.c = p.add_buffer('c', dtype, [n], Amk.BufferRole.SCRATCH)
        self.out = p.add_buffer('out', dtype, [self.out_len], Amk.BufferRole.OUTPUT)
        self.w_data = random_data(rng, dtype, n)
        p.set_buffer_data(self.w, to_bytes(self.w_data))
        done = [p.add_counter(f'stage{k}') for k in range(self.QUEUES - 1)]

        size = n // tiles
        for t in range(tiles):
            lo = t * size
            add_op(p, 0, Amk.Opcode.COPY, [self.a, self.inp],
                   dict(dst_offset=lo, src_offset=lo, count=size),
                   signal=(done[0], 1))
            add_op(p, 1, Amk.Opcode.ADD, [self.b, self.a, self.w],
                   dict(dst_offset=lo, a_offset=lo, b_offset=lo, count=size),
                   waits=[(done[0], t + 1)], signal=(done[1], 1))
            add_op(p, 2, Amk.Opcode.ADD, [self.c, self.b, self.inp],
                   dict(dst_offset=lo, a_offset=lo, b_offset=lo, count=size),
                   waits=[(done[1], t + 1)], signal=(done[2], 1))
            add_op(p, 3, Amk.Opcode.COPY, [self.out, self.c],
                   dict(dst_offset=out_offset + lo, src_offset=lo, count=size),
                   waits=[(done[2], t + 1)])

    def expected(self, inp, out_before):
        b = ref_add(self.dtype, inp, self.w_data)
        c = ref_add(self.dtype, b, inp)
        out = out_before.copy()
        out[self.offset:self.offset + self.n] = c
        return out

    def run(self, executor, inp, seed=0, threads=1):
        """Uploads inp, poisons out, runs with seed (threads 1: the seeded scheduler)
        or on threads workers; returns (result, expected)."""
        before = poison(self.dtype, self.out_len)
        upload(executor, self.inp, self.dtype, inp)
        upload(executor, self.out, self.dtype, before)
        for scratch in (self.a, self.b, self.c):
            upload(executor, scratch, self.dtype, poison(self.dtype, self.n))
        executor.props.seed = seed
        executor.props.threads = threads
        executor.run()
        return download(executor, self.out, self.dtype), self.expected(inp, before)
