"""MATMUL on the CPU executor against numpy in float64: random data, M from 1 to past
one row tile, N and K off the tile sizes (K a multiple of 8), bf16 and f16 weights, f32
and bf16 inputs and outputs, bias, residual (also in place), the fused RMSNORM; the tile
grid the compiler cuts; a chain of two MATMULs (dependencies between their tiles); and
the op API's errors.

Tolerance: the reference takes the same bf16/f16-rounded inputs as the VM, so with an
f32 output the only difference is fp32 accumulation: a relative error (norm of the
difference over norm of the result) of at most 1e-5. A bf16 output adds its own
rounding (2^-9 relative per element): 1e-2."""
import numpy as np
import pytest

from amktest import Amk, GLib, add_op, from_bytes, from_f32, make_rng, poison, to_bytes, to_f32

NONE = -1
VEC = (Amk.DType.F32, Amk.DType.BF16)


@pytest.fixture
def rng():
    return make_rng()


def values(rng, dtype, n, scale=1.0):
    return from_f32(dtype, (rng.standard_normal(n) * scale).astype(np.float32))


def rel_err(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


class MatmulCase:
    """Y[M, N] = X'[M, K] W[N, K]^T (+ bias) (+ residual), recorded with the op API and
    compiled for `queues` queues."""

    def __init__(self, rng, m, n, k, wdt=Amk.DType.BF16, xdt=Amk.DType.F32, ydt=Amk.DType.F32,
                 bias=False, residual=None, norm=False, queues=4, eps=1e-5):
        self.m, self.n, self.k, self.eps = m, n, k, eps
        self.dt = dict(w=wdt, x=xdt, y=ydt)
        p = Amk.Program.new(queues)
        self.y = p.add_buffer("y", ydt, [m, n], Amk.BufferRole.OUTPUT)
        self.w = p.add_buffer("w", wdt, [n, k], Amk.BufferRole.CONSTANT)
        self.x = p.add_buffer("x", xdt, [m, k], Amk.BufferRole.INPUT)
        self.data = {"w": values(rng, wdt, n * k, 1 / np.sqrt(k)), "x": values(rng, xdt, m * k)}
        p.set_buffer_data(self.w, to_bytes(self.data["w"]))
        self.b = self.r = self.g = NONE
        if bias:
            self.b = p.add_buffer("bias", Amk.DType.BF16, [n], Amk.BufferRole.INPUT)
            self.data["bias"] = values(rng, Amk.DType.BF16, n)
        if residual == "separate":
            self.r = p.add_buffer("res", Amk.DType.F32, [m * n], Amk.BufferRole.INPUT)
            self.data["res"] = values(rng, Amk.DType.F32, m * n)
        elif residual == "in-place":
            self.r = self.y
        if norm:
            self.g = p.add_buffer("gamma", Amk.DType.BF16, [k], Amk.BufferRole.CONSTANT)
            self.data["gamma"] = values(rng, Amk.DType.BF16, k)
            p.set_buffer_data(self.g, to_bytes(self.data["gamma"]))
        self.residual = residual
        p.op_matmul(self.y, self.w, self.x, self.b, self.r, self.g, eps)
        p.compile()
        self.program = p

    def expected(self, y_before):
        w = to_f32(self.dt["w"], self.data["w"]).astype(np.float64).reshape(self.n, self.k)
        x = to_f32(self.dt["x"], self.data["x"]).astype(np.float64).reshape(self.m, self.k)
        if self.g != NONE:
            gamma = to_f32(Amk.DType.BF16, self.data["gamma"]).astype(np.float64)
            x = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + self.eps) * gamma
        y = x @ w.T
        if self.b != NONE:
            y += to_f32(Amk.DType.BF16, self.data["bias"])
        if self.residual == "separate":
            y += self.data["res"].reshape(self.m, self.n)
        elif self.residual == "in-place":
            y += to_f32(self.dt["y"], y_before).reshape(self.m, self.n)
        return y.ravel()

    def run(self, rng, seed=0):
        ex = Amk.CpuExecutor.new(self.program)
        ex.props.seed = seed
        ex.upload(self.x, to_bytes(self.data["x"]))
        if self.b != NONE:
            ex.upload(self.b, to_bytes(self.data["bias"]))
        if self.residual == "separate":
            ex.upload(self.r, to_bytes(self.data["res"]))
        y_before = values(rng, self.dt["y"], self.m * self.n) if self.residual == "in-place" \
            else poison(self.dt["y"], self.m * self.n)
        ex.upload(self.y, to_bytes(y_before))
        ex.run()
        got = to_f32(self.dt["y"], from_bytes(self.dt["y"], ex.download(self.y))).astype(np.float64)
        return got, self.expected(y_before)


def tolerance(ydt):
    return 1e-5 if ydt == Amk.DType.F32 else 1e-2


@pytest.mark.parametrize("m", [1, 7, 100, 256])
@pytest.mark.parametrize("n,k", [(200, 104), (72, 40), (17, 8)])
def test_shapes(rng, m, n, k):
    case = MatmulCase(rng, m, n, k, queues=5)
    got, want = case.run(rng)
    assert rel_err(got, want) <= 1e-5


@pytest.mark.parametrize("wdt", [Amk.DType.BF16, Amk.DType.F16])
@pytest.mark.parametrize("xdt", VEC)
@pytest.mark.parametrize("ydt", VEC)
def test_dtypes(rng, wdt, xdt, ydt):
    case = MatmulCase(rng, m=7, n=72, k=40, wdt=wdt, xdt=xdt, ydt=ydt, queues=3)
    got, want = case.run(rng)
    assert rel_err(got, want) <= tolerance(ydt)


@pytest.mark.parametrize("residual", [None, "separate", "in-place"])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("m", [1, 100])
def test_fused(rng, residual, norm, bias, m):
    case = MatmulCase(rng, m=m, n=88, k=72, bias=bias, residual=residual, norm=norm, queues=6)
    got, want = case.run(rng)
    assert rel_err(got, want) <= 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_many_row_tiles(rng, seed):
    # 300 rows: row tiles of 256 and 44, in place, run in random queue orders
    case = MatmulCase(rng, m=300, n=136, k=64, bias=True, residual="in-place", norm=True,
                      queues=7)
    got, want = case.run(rng, seed)
    assert rel_err(got, want) <= 1e-5


def tiles(program):
    """(m0, m_count, n0, n_count) of every MATMUL instruction of a compiled program."""
    out = []
    for i in range(program.get_n_instructions()):
        try:
            out.append(tuple(program.get_param_int(i, f)[1] for f in ("m0", "m_count", "n0", "n_count")))
        except GLib.Error:
            pass  # a NOP that carries waits
    return sorted(out)


ROWS = 256  # rows of a full tile (the device's wgmma tile at 512 threads)


def grid(m_tiles, n, n_tile, rows=ROWS):
    return sorted((r * rows, min(rows, m_tiles[1] - r * rows), c, min(n_tile, n - c))
                  for r in range(m_tiles[0]) for c in range(0, n, n_tile))


def test_tile_grid(rng):
    # enough tiles of 256 x 128 for every queue: full tiles, the last ones smaller
    case = MatmulCase(rng, m=1000, n=200, k=16, queues=4)
    assert tiles(case.program) == grid((4, 1000), 200, 128)
    # the rows per tile that take the fewest rounds of the queues: 4 tiles of 256 rows
    # and 4 of 192 rows both take one round, the tiles of 192 rows take less
    case = MatmulCase(rng, m=300, n=200, k=16, queues=4)
    assert tiles(case.program) == grid((2, 300), 200, 128, rows=192)
    # Llama-3.2-1B's q/k/v on 132 queues: 8 x 24 tiles of 256 rows take two rounds,
    # 11 x 24 of 192 rows two shorter ones
    case = MatmulCase(rng, m=2048, n=3072, k=8, queues=132)
    assert tiles(case.program) == grid((11, 2048), 3072, 128, rows=192)
    # few rows, many queues: columns in multiples of 16 for about one tile per queue
    # (ceil(200 / 64) = 4 columns, rounded up to 16)
    case = MatmulCase(rng, m=7, n=200, k=16, queues=64)
    assert tiles(case.program) == grid((1, 7), 200, 16)
    # 2 x 8 tiles leave queues idle: ceil(2 * 1000 / 20) = 100 columns, rounded up to 112
    case = MatmulCase(rng, m=257, n=1000, k=16, queues=20)
    assert tiles(case.program) == grid((2, 257), 1000, 112)


def test_chain(rng):
    # h = X W1^T, then Y = h W2^T: the second op's tiles wait for the rows they read
    m, k, f, n = 130, 48, 96, 40
    p = Amk.Program.new(8)
    x = p.add_buffer("x", Amk.DType.F32, [m, k], Amk.BufferRole.INPUT)
    w1 = p.add_buffer("w1", Amk.DType.BF16, [f, k], Amk.BufferRole.CONSTANT)
    w2 = p.add_buffer("w2", Amk.DType.BF16, [n, f], Amk.BufferRole.CONSTANT)
    h = p.add_buffer("h", Amk.DType.F32, [m, f], Amk.BufferRole.SCRATCH)
    y = p.add_buffer("y", Amk.DType.F32, [m, n], Amk.BufferRole.OUTPUT)
    W1, W2 = values(rng, Amk.DType.BF16, f * k, 0.2), values(rng, Amk.DType.BF16, n * f, 0.1)
    p.set_buffer_data(w1, to_bytes(W1))
    p.set_buffer_data(w2, to_bytes(W2))
    p.op_matmul(h, w1, x, -1, -1, -1, 0.0)
    p.op_matmul(y, w2, h, -1, -1, -1, 0.0)
    p.compile()
    X = values(rng, Amk.DType.F32, m * k)
    want = (X.astype(np.float64).reshape(m, k) @ to_f32(Amk.DType.BF16, W1).reshape(f, k).T
            @ to_f32(Amk.DType.BF16, W2).reshape(n, f).T).ravel()
    for seed in range(3):
        ex = Amk.CpuExecutor.new(p)
        ex.props.seed = seed
        ex.upload(x, to_bytes(X))
        ex.upload(y, to_bytes(poison(Amk.DType.F32, m * n)))
        ex.run()
        got = from_bytes(Amk.DType.F32, ex.download(y)).astype(np.float64)
        assert rel_err(got, want) <= 1e-5


def op_error(fn, *args):
    with pytest.raises(GLib.Error) as info:
        fn(*args)
    return info.value


def test_op_errors():
    p = Amk.Program.new(2)
    w = p.add_buffer("w", Amk.DType.BF16, [6, 16], Amk.BufferRole.CONSTANT)
    w32 = p.add_buffer("w32", Amk.DType.F32, [6, 16], Amk.BufferRole.CONSTANT)
    w12 = p.add_buffer("w12", Amk.DType.BF16, [6, 12], Amk.BufferRole.CONSTANT)
    x = p.add_buffer("x", Amk.DType.F32, [3, 16], Amk.BufferRole.INPUT)
    x_odd = p.add_buffer("x_odd", Amk.DType.F32, [40], Amk.BufferRole.INPUT)
    y = p.add_buffer("y", Amk.DType.F32, [3, 6], Amk.BufferRole.OUTPUT)
    y_small = p.add_buffer("y_small", Amk.DType.F32, [6], Amk.BufferRole.OUTPUT)
    invalid = (Amk.program_error_quark(), Amk.ProgramError.INVALID)

    e = op_error(p.op_matmul, y, w32, x, -1, -1, -1, 0.0)
    assert e.matches(*invalid) and "16-bit" in e.message and "w32" in e.message
    e = op_error(p.op_matmul, y, w12, x, -1, -1, -1, 0.0)
    assert e.matches(*invalid) and "multiple of 8" in e.message
    e = op_error(p.op_matmul, y, w, x_odd, -1, -1, -1, 0.0)
    assert e.matches(*invalid) and "x_odd" in e.message
    e = op_error(p.op_matmul, y_small, w, x, -1, -1, -1, 0.0)
    assert e.matches(*invalid) and "y_small" in e.message and "18" in e.message
    e = op_error(p.op_matmul, y, w, x, -1, -1, 99, 0.0)
    assert e.matches(Amk.program_error_quark(), Amk.ProgramError.OUT_OF_RANGE)
    for eps in (float('nan'), float('inf'), -1.0):  # the GPU checks it even without a norm
        e = op_error(p.op_matmul, y, w, x, -1, -1, -1, eps)
        assert e.matches(*invalid) and "epsilon" in e.message
    assert p.get_n_ops() == 0
    p.op_matmul(y, w, x, -1, y, -1, 0.0)  # y += X W^T is fine
    assert p.get_n_ops() == 1


def raw_matmul_error(bias_len, eps):
    """verify's error for one raw MATMUL tile of y [3, 6] = x [3, 16] w [6, 16]^T with a
    bias of bias_len elements, or None when it verifies."""
    p = Amk.Program.new(1)
    w = p.add_buffer("w", Amk.DType.BF16, [6, 16], Amk.BufferRole.CONSTANT)
    x = p.add_buffer("x", Amk.DType.F32, [3, 16], Amk.BufferRole.INPUT)
    y = p.add_buffer("y", Amk.DType.F32, [3, 6], Amk.BufferRole.OUTPUT)
    b = p.add_buffer("b", Amk.DType.F32, [bias_len], Amk.BufferRole.INPUT)
    add_op(p, 0, Amk.Opcode.MATMUL, [y, w, x, b, NONE, NONE],
           dict(m_count=3, n_count=6, k=16, eps=float(eps)))
    try:
        p.verify()
    except GLib.Error as e:
        return e
    return None


def test_verify_as_the_gpu():
    """The verifier refuses what the GPU's check refuses: a bias of other than N
    elements (more too), an epsilon that is NaN, infinite or negative even without a
    norm."""
    assert raw_matmul_error(6, 0.0) is None
    e = raw_matmul_error(16, 0.0)
    assert e.matches(Amk.program_error_quark(), Amk.ProgramError.OUT_OF_RANGE)
    assert "“b” has 16 elements; it must have exactly 6" in e.message
    for eps in (float('nan'), float('inf'), -1.0):
        e = raw_matmul_error(6, eps)
        assert e.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
        assert "epsilon" in e.message


@pytest.mark.parametrize("live", ["first-rows", "scattered", "none"])
def test_padding_rows(rng, live):
    """op_matmul_rows: the rows at a negative position are padding, whose output rows are
    unspecified (the CPU executor leaves them as they were); every other row is the
    plain MATMUL's."""
    m, n, k = 37, 72, 40
    pos = np.arange(m, dtype=np.int32) + 5
    if live == "first-rows":
        pos[20:] = -1
    elif live == "scattered":
        pos[rng.random(m) < 0.5] = -1
    else:
        pos[:] = -1
    case = MatmulCase(rng, m, n, k, bias=True, norm=True, queues=3)
    p = Amk.Program.new(3)
    bufs = {}
    for name in ("y", "w", "x", "bias", "gamma"):
        b = getattr(case, dict(bias="b", gamma="g").get(name, name))
        info = case.program
        bufs[name] = p.add_buffer(name, info.get_buffer_dtype(b), info.get_buffer_shape(b),
                                  info.get_buffer_role(b))
    p.set_buffer_data(bufs["w"], to_bytes(case.data["w"]))
    p.set_buffer_data(bufs["gamma"], to_bytes(case.data["gamma"]))
    pos_buf = p.add_buffer("pos", Amk.DType.I32, [m], Amk.BufferRole.INPUT)
    p.op_matmul_rows(bufs["y"], bufs["w"], bufs["x"], bufs["bias"], -1, bufs["gamma"], case.eps, pos_buf)
    p.compile()
    ex = Amk.CpuExecutor.new(p)
    ex.upload(bufs["x"], to_bytes(case.data["x"]))
    ex.upload(bufs["bias"], to_bytes(case.data["bias"]))
    ex.upload(pos_buf, pos.tobytes())
    before = poison(Amk.DType.F32, m * n)
    ex.upload(bufs["y"], to_bytes(before))
    ex.run()
    raw = from_bytes(Amk.DType.F32, ex.download(bufs["y"])).reshape(m, n)
    want = case.expected(None).reshape(m, n)
    kept = pos >= 0
    if kept.any():
        assert rel_err(raw[kept].astype(np.float64), want[kept]) <= 1e-5
    # skipped, not computed: the CPU executor's own choice, which the ABI allows
    assert raw[~kept].tobytes() == before.reshape(m, n)[~kept].tobytes()


def test_rows_op_errors():
    p = Amk.Program.new(2)
    w = p.add_buffer("w", Amk.DType.BF16, [6, 16], Amk.BufferRole.CONSTANT)
    x = p.add_buffer("x", Amk.DType.F32, [3, 16], Amk.BufferRole.INPUT)
    y = p.add_buffer("y", Amk.DType.F32, [3, 6], Amk.BufferRole.OUTPUT)
    pos_f32 = p.add_buffer("pos_f32", Amk.DType.F32, [3], Amk.BufferRole.INPUT)
    pos_short = p.add_buffer("pos_short", Amk.DType.I32, [2], Amk.BufferRole.INPUT)
    pos_long = p.add_buffer("pos_long", Amk.DType.I32, [4], Amk.BufferRole.INPUT)
    invalid = (Amk.program_error_quark(), Amk.ProgramError.INVALID)

    e = op_error(p.op_matmul_rows, y, w, x, -1, -1, -1, 0.0, pos_f32)
    assert e.matches(*invalid) and "pos_f32" in e.message and "i32" in e.message
    e = op_error(p.op_matmul_rows, y, w, x, -1, -1, -1, 0.0, pos_short)
    assert e.matches(*invalid) and "pos_short" in e.message
    e = op_error(p.op_matmul_rows, y, w, x, -1, -1, -1, 0.0, pos_long)
    assert e.matches(*invalid) and "pos_long" in e.message and "one element per input row" in e.message
    e = op_error(p.op_matmul_rows, y, w, x, -1, -1, -1, 0.0, 99)
    assert e.matches(Amk.program_error_quark(), Amk.ProgramError.OUT_OF_RANGE)
    assert p.get_n_ops() == 0


def test_verify_positions():
    """A raw MATMUL's seventh operand: i32 with M elements, or refused."""
    for dtype, n, ok in ((Amk.DType.I32, 3, True), (Amk.DType.F32, 3, False), (Amk.DType.I32, 5, False)):
        p = Amk.Program.new(1)
        w = p.add_buffer("w", Amk.DType.BF16, [6, 16], Amk.BufferRole.CONSTANT)
        x = p.add_buffer("x", Amk.DType.F32, [3, 16], Amk.BufferRole.INPUT)
        y = p.add_buffer("y", Amk.DType.F32, [3, 6], Amk.BufferRole.OUTPUT)
        pos = p.add_buffer("pos", dtype, [n], Amk.BufferRole.INPUT)
        add_op(p, 0, Amk.Opcode.MATMUL, [y, w, x, NONE, NONE, NONE, pos],
               dict(m_count=3, n_count=6, k=16, eps=0.0))
        if ok:
            p.verify()
        else:
            with pytest.raises(GLib.Error) as info:
                p.verify()
            assert "positions" in info.value.message


def test_split_after_fork(rng):
    """A MATMUL large enough for two threads, run in a process and then in its forked
    child (which has none of the parent's threads): the child gets the same output and
    does not hang."""
    import os
    import signal
    case = MatmulCase(rng, m=64, n=256, k=128, queues=1)
    got, want = case.run(rng)
    assert rel_err(got, want) <= 1e-5
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)
        try:
            child, _ = case.run(rng)
            os._exit(0 if np.array_equal(child, got) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
