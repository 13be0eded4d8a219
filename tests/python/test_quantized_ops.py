"""The block-quantized weight types (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) in MATVEC, MATMUL and EMBED
on the CPU executor, against the gguf package's numpy dequantization (an independent
reference) followed by float64 products: random blocks (every bit pattern of the
quantized values and sub-block scales, scales of sane size), odd shapes, split columns.

Tolerance: the VM decodes the blocks exactly as the reference does and accumulates in
fp32, so an f32 output differs by rounding alone: each output's error at most 1e-5 of
the sum of its terms' magnitudes (the bound of an fp32 dot product, which a relative
error of the result is not when the terms cancel)."""
import numpy as np
import pytest

from amktest import Amk, BLOCK_TYPES, GLib, from_bytes, make_rng, poison, random_blocks, to_bytes

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize  # noqa: E402

NONE = -1


def gguf_type(dtype):
    """The gguf package's type of a block-quantized dtype (nick q8-0: Q8_0)."""
    return getattr(gguf.GGMLQuantizationType, Amk.DType(dtype).value_nick.upper().replace("-", "_"))


# dtype: the gguf type, values and bytes per block (amktest.BLOCK_TYPES)
TYPES = {t: (gguf_type(t),) + v[:2] for t, v in BLOCK_TYPES.items()}


@pytest.fixture
def rng():
    return make_rng()


def blocks_and_reference(rng, dtype, rows, cols):
    """rows × cols values of dtype as raw blocks (amktest.random_blocks), and their float64
    reference."""
    qtype, values, nbytes = TYPES[dtype]
    raw = random_blocks(rng, dtype, rows, cols)
    ref = dequantize(raw.reshape(rows, cols // values * nbytes), qtype).astype(np.float64)
    return raw.tobytes(), ref.reshape(rows, cols)


def close(got, w, x):
    """got against w @ x (float64), error relative to |w| @ |x|, row by row."""
    x = np.asarray(x, dtype=np.float64)
    return np.max(np.abs(got - (w @ x.T).T) / ((np.abs(w) @ np.abs(x).T).T + 1e-30)) <= 1e-5


def run(program, inputs, out, n):
    ex = Amk.CpuExecutor.new(program)
    for buf, data in inputs:
        ex.upload(buf, data)
    ex.upload(out, to_bytes(poison(Amk.DType.F32, n)))
    ex.run()
    return from_bytes(Amk.DType.F32, ex.download(out)).astype(np.float64)


@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("rows", [1, 13, 64])
@pytest.mark.parametrize("norm", [False, True])
def test_matvec(rng, dtype, rows, norm):
    k = 2 * TYPES[dtype][1]
    raw, w = blocks_and_reference(rng, dtype, rows, k)
    x = rng.standard_normal(k).astype(np.float32)
    p = Amk.Program.new(3)
    wb = p.add_buffer("w", dtype, [rows, k], Amk.BufferRole.CONSTANT)
    xb = p.add_buffer("x", Amk.DType.F32, [k], Amk.BufferRole.INPUT)
    yb = p.add_buffer("y", Amk.DType.F32, [rows], Amk.BufferRole.OUTPUT)
    p.set_buffer_data(wb, GLib.Bytes.new(raw))
    xr = x.astype(np.float64)
    g = NONE
    if norm:
        gamma = rng.standard_normal(k).astype(np.float32)
        g = p.add_buffer("g", Amk.DType.F32, [k], Amk.BufferRole.CONSTANT)
        p.set_buffer_data(g, to_bytes(gamma))
        xr = xr / np.sqrt(np.mean(xr * xr) + 1e-5) * gamma
    p.op_matvec(yb, wb, xb, NONE, NONE, g, 1e-5)
    p.compile()
    got = run(p, [(xb, to_bytes(x))], yb, rows)
    assert close(got, w, xr)


@pytest.mark.parametrize("dtype", list(TYPES))
def test_matvec_split_k(rng, dtype):
    """y += W x with the columns split over queues (split-K slices of whole blocks)."""
    rows, k = 8, 64 * TYPES[dtype][1]   # 64 blocks a row: two slices of 32
    raw, w = blocks_and_reference(rng, dtype, rows, k)
    x = rng.standard_normal(k).astype(np.float32)
    y0 = rng.standard_normal(rows).astype(np.float32)
    p = Amk.Program.new(64)
    wb = p.add_buffer("w", dtype, [rows, k], Amk.BufferRole.CONSTANT)
    xb = p.add_buffer("x", Amk.DType.F32, [k], Amk.BufferRole.INPUT)
    yb = p.add_buffer("y", Amk.DType.F32, [rows], Amk.BufferRole.STATE)
    p.set_buffer_data(wb, GLib.Bytes.new(raw))
    p.op_matvec(yb, wb, xb, NONE, yb, NONE, 0.0)
    p.compile()
    slices = [i for i in range(p.get_num_queues()) for _ in range(p.get_queue_length(i))]
    assert len(slices) > 1   # the compiler split the columns
    ex = Amk.CpuExecutor.new(p)
    ex.upload(xb, to_bytes(x))
    ex.upload(yb, to_bytes(y0))
    ex.run()
    got = from_bytes(Amk.DType.F32, ex.download(yb)).astype(np.float64)
    assert close(got - y0, w, x)


@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("m", [1, 7, 37])
def test_matmul(rng, dtype, m):
    n, k = 40, 2 * TYPES[dtype][1]
    raw, w = blocks_and_reference(rng, dtype, n, k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    p = Amk.Program.new(3)
    wb = p.add_buffer("w", dtype, [n, k], Amk.BufferRole.CONSTANT)
    xb = p.add_buffer("x", Amk.DType.F32, [m, k], Amk.BufferRole.INPUT)
    yb = p.add_buffer("y", Amk.DType.F32, [m, n], Amk.BufferRole.OUTPUT)
    p.set_buffer_data(wb, GLib.Bytes.new(raw))
    p.op_matmul(yb, wb, xb, NONE, NONE, NONE, 0.0)
    p.compile()
    got = run(p, [(xb, to_bytes(x))], yb, m * n)
    assert close(got.reshape(m, n), w, x)


@pytest.mark.parametrize("dtype", list(TYPES))
def test_matvec_equals_matmul(rng, dtype):
    """A MATMUL row and a MATVEC of the same quantized weights give the same bits (a
    batch and a single sequence agree)."""
    n, k = 24, 3 * TYPES[dtype][1]
    raw, _ = blocks_and_reference(rng, dtype, n, k)
    x = rng.standard_normal(k).astype(np.float32)
    outs = []
    for op in ("matvec", "matmul"):
        p = Amk.Program.new(2)
        wb = p.add_buffer("w", dtype, [n, k], Amk.BufferRole.CONSTANT)
        xb = p.add_buffer("x", Amk.DType.F32, [k], Amk.BufferRole.INPUT)
        yb = p.add_buffer("y", Amk.DType.F32, [n], Amk.BufferRole.OUTPUT)
        p.set_buffer_data(wb, GLib.Bytes.new(raw))
        getattr(p, "op_" + op)(yb, wb, xb, NONE, NONE, NONE, 0.0)
        p.compile()
        outs.append(run(p, [(xb, to_bytes(x))], yb, n))
    assert outs[0].tobytes() == outs[1].tobytes()


@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("rows_op", [False, True])
def test_embed(rng, dtype, rows_op):
    vocab, dim = 5, 2 * TYPES[dtype][1]
    raw, table = blocks_and_reference(rng, dtype, vocab, dim)
    ids = np.array([3, 0, 4], dtype=np.int32)
    p = Amk.Program.new(2)
    tb = p.add_buffer("table", dtype, [vocab, dim], Amk.BufferRole.CONSTANT)
    p.set_buffer_data(tb, GLib.Bytes.new(raw))
    if rows_op:
        ib = p.add_buffer("ids", Amk.DType.I32, [3], Amk.BufferRole.INPUT)
        ob = p.add_buffer("out", Amk.DType.F32, [3, dim], Amk.BufferRole.OUTPUT)
        p.op_embed_rows(ob, tb, ib)
        want = table[ids].ravel()
    else:
        ib = p.add_buffer("ids", Amk.DType.I32, [1], Amk.BufferRole.INPUT)
        ob = p.add_buffer("out", Amk.DType.F32, [dim], Amk.BufferRole.OUTPUT)
        p.op_embed(ob, tb, ib, 0)
        ids = ids[:1]
        want = table[ids[0]]
    p.compile()
    got = run(p, [(ib, ids.tobytes())], ob, want.size)
    # each value decoded and then rounded to f32 once
    assert np.array_equal(got, want.astype(np.float32).astype(np.float64))


def test_buffer_errors():
    p = Amk.Program.new(1)
    with pytest.raises(GLib.Error) as info:
        p.add_buffer("w", Amk.DType.Q4_K, [4, 100], Amk.BufferRole.CONSTANT)
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
    assert "q4_k" in info.value.message and "256" in info.value.message
    w = p.add_buffer("w8", Amk.DType.Q8_0, [4, 64], Amk.BufferRole.CONSTANT)
    assert p.get_buffer_size(w) == 4 * 2 * 34
    with pytest.raises(GLib.Error) as info:   # the wrong byte count
        p.set_buffer_data(w, GLib.Bytes.new(bytes(4 * 64)))
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.OUT_OF_RANGE) or \
        info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
    # only matrices and tables: an elementwise op refuses a quantized operand
    y = p.add_buffer("y", Amk.DType.F32, [256], Amk.BufferRole.OUTPUT)
    with pytest.raises(GLib.Error) as info:
        p.op_rmsnorm(y, y, w, 256, 1e-5)
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)


def test_elementwise_ops_refuse_them():
    """COPY, FILL and ADD work on elements, which a block-quantized buffer does not hold
    one by one: refused when recorded and, as raw instructions, by the verifier."""
    from amktest import add_op
    p = Amk.Program.new(1)
    a = p.add_buffer("a", Amk.DType.Q8_0, [64], Amk.BufferRole.STATE)
    b = p.add_buffer("b", Amk.DType.Q8_0, [64], Amk.BufferRole.STATE)
    for record in (lambda: p.op_copy(a, b), lambda: p.op_fill(a, 1.0), lambda: p.op_add(a, a, b)):
        with pytest.raises(GLib.Error) as info:
            record()
        assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
        assert "“a” is q8_0" in info.value.message and "blocks" in info.value.message
    assert p.get_n_ops() == 0
    for opcode, bufs, params in ((Amk.Opcode.COPY, [a, b], dict(count=32)),
                                 (Amk.Opcode.FILL, [a], dict(count=32)),
                                 (Amk.Opcode.ADD, [a, a, b], dict(count=32))):
        q = Amk.Program.new(1)
        qa = q.add_buffer("a", Amk.DType.Q8_0, [64], Amk.BufferRole.STATE)
        qb = q.add_buffer("b", Amk.DType.Q8_0, [64], Amk.BufferRole.STATE)
        add_op(q, 0, opcode, [qa, qb, qa][:len(bufs)] if opcode != Amk.Opcode.ADD else [qa, qa, qb], params)
        with pytest.raises(GLib.Error) as info:
            q.verify()
        assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
        assert "packed in blocks" in info.value.message


def test_cpu_executor_supports_them():
    ex = Amk.CpuExecutor.new_empty()
    for dtype in list(TYPES) + [Amk.DType.BF16, Amk.DType.F32]:
        assert ex.supports_dtype(dtype)


def test_launcher_supports_them():
    """The GPU executor reads them too (tests/gpu/test_gpu_quantized.py runs them), so a
    model keeps a file's quantized weights on the device; said without a device."""
    launcher = Amk.Launcher.new(0)
    for dtype in list(TYPES) + [Amk.DType.BF16]:
        assert launcher.supports_dtype(dtype)
