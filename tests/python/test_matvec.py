"""MATVEC on the CPU executor against numpy in float64: random data, odd shapes (rows
not a multiple of the tile, K = 2304), every weight dtype, bias, residual (also in place),
the fused RMSNORM, split-K tiles, tiles spread over queues; and the verifier's rules for
the op."""
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


def tolerance(*dtypes):
    return 1e-5 if all(d == Amk.DType.F32 for d in dtypes) else 1e-2


def rel_err(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


class MatvecCase:
    """rows x k matvec split into tiles of `tile` rows, dealt round-robin over `queues`;
    with `splits` > 1 each tile's columns are cut into that many split-K slices of whole
    16-byte chunks (y in place), each a tile of its own."""

    def __init__(self, rng, rows, k, wdt=Amk.DType.BF16, xdt=Amk.DType.F32, ydt=Amk.DType.F32,
                 bias=False, residual=None, norm=False, up=None, tile=16, queues=4, eps=1e-5,
                 splits=1):
        self.rows, self.k, self.eps = rows, k, eps
        self.dt = dict(w=wdt, x=xdt, y=ydt, up=up)
        p = Amk.Program.new(queues)
        self.y = p.add_buffer("y", ydt, [rows], Amk.BufferRole.OUTPUT)
        self.w = p.add_buffer("w", wdt, [rows, k], Amk.BufferRole.CONSTANT)
        self.x = p.add_buffer("x", xdt, [k], Amk.BufferRole.INPUT)
        self.data = {
            "w": values(rng, wdt, rows * k, 1 / np.sqrt(k)),
            "x": values(rng, xdt, k),
        }
        p.set_buffer_data(self.w, to_bytes(self.data["w"]))
        self.b = self.r = self.g = NONE
        if bias:
            self.b = p.add_buffer("bias", Amk.DType.F32, [rows], Amk.BufferRole.INPUT)
            self.data["bias"] = values(rng, Amk.DType.F32, rows)
        if residual == "separate":
            self.r = p.add_buffer("res", Amk.DType.BF16, [rows], Amk.BufferRole.INPUT)
            self.data["res"] = values(rng, Amk.DType.BF16, rows)
        elif residual == "in-place":
            self.r = self.y
        if norm:
            self.g = p.add_buffer("gamma", Amk.DType.BF16, [k], Amk.BufferRole.CONSTANT)
            self.data["gamma"] = values(rng, Amk.DType.BF16, k)
            p.set_buffer_data(self.g, to_bytes(self.data["gamma"]))
        self.u = NONE
        if up is not None:  # the fused SILU_MUL: x' = silu(x) * up
            self.u = p.add_buffer("up", up, [k], Amk.BufferRole.INPUT)
            self.data["up"] = values(rng, up, k)
        self.residual = residual
        refs = [self.y, self.w, self.x, self.b, self.r, self.g] + ([self.u] if up is not None else [])
        per = 4 if wdt == Amk.DType.F32 else 8  # elements per 16-byte chunk
        chunks = k // per
        t = 0
        for r0 in range(0, rows, tile):
            n = min(tile, rows - r0)
            for s in range(splits):
                cols = [0, 0]
                if splits > 1:
                    c0, c1 = s * chunks // splits, (s + 1) * chunks // splits
                    cols = [c0 * per, (c1 - c0) * per]
                add_op(p, t % queues, Amk.Opcode.MATVEC, refs,
                       dict(row0=r0, rows=n, k=k, eps=eps, k0=cols[0], k_len=cols[1]))
                t += 1
        p.verify()
        self.program = p

    def expected(self, y_before):
        w = to_f32(self.dt["w"], self.data["w"]).astype(np.float64).reshape(self.rows, self.k)
        x = to_f32(self.dt["x"], self.data["x"]).astype(np.float64)
        if self.g != NONE:
            x = x / np.sqrt(np.mean(x * x) + self.eps) * to_f32(Amk.DType.BF16, self.data["gamma"])
        if self.u != NONE:
            x = x / (1 + np.exp(-x)) * to_f32(self.dt["up"], self.data["up"])
        y = w @ x
        if self.b != NONE:
            y += self.data["bias"]
        if self.residual == "separate":
            y += to_f32(Amk.DType.BF16, self.data["res"])
        elif self.residual == "in-place":
            y += to_f32(self.dt["y"], y_before)
        return y

    def y_before(self, rng):
        """y's contents before the run: random for an in-place residual, else poison."""
        return values(rng, self.dt["y"], self.rows) if self.residual == "in-place" \
            else poison(self.dt["y"], self.rows)

    def upload(self, ex, y_before):
        """The inputs into an executor (a CpuExecutor or a Launcher)."""
        ex.upload(self.x, to_bytes(self.data["x"]))
        if self.b != NONE:
            ex.upload(self.b, to_bytes(self.data["bias"]))
        if self.residual == "separate":
            ex.upload(self.r, to_bytes(self.data["res"]))
        if self.u != NONE:
            ex.upload(self.u, to_bytes(self.data["up"]))
        ex.upload(self.y, to_bytes(y_before))

    def output(self, ex):
        return to_f32(self.dt["y"], from_bytes(self.dt["y"], ex.download(self.y))).astype(np.float64)

    def run(self, rng, seed=0, threads=1):
        ex = Amk.CpuExecutor.new(self.program)
        ex.props.seed = seed
        ex.props.threads = threads
        y_before = self.y_before(rng)
        self.upload(ex, y_before)
        ex.run()
        return self.output(ex), self.expected(y_before)


@pytest.mark.parametrize("wdt", [Amk.DType.BF16, Amk.DType.F16, Amk.DType.F32])
@pytest.mark.parametrize("xdt", VEC)
@pytest.mark.parametrize("ydt", VEC)
def test_dtypes(rng, wdt, xdt, ydt):
    case = MatvecCase(rng, rows=53, k=64, wdt=wdt, xdt=xdt, ydt=ydt, tile=7, queues=3)
    got, want = case.run(rng)
    assert rel_err(got, want) <= tolerance(wdt, xdt, ydt)


@pytest.mark.parametrize("rows,k,tile", [(130, 2304, 16), (257, 128, 32), (16, 2048, 16), (1, 8, 1)])
def test_shapes(rng, rows, k, tile):
    case = MatvecCase(rng, rows=rows, k=k, tile=tile, queues=5)
    got, want = case.run(rng)
    assert rel_err(got, want) <= 1e-2


@pytest.mark.parametrize("residual", [None, "separate", "in-place"])
@pytest.mark.parametrize("norm", [False, True])
def test_fused(rng, residual, norm):
    case = MatvecCase(rng, rows=96, k=256, wdt=Amk.DType.F32, bias=True, residual=residual,
                      norm=norm, tile=8, queues=4)
    got, want = case.run(rng)
    assert rel_err(got, want) <= (1e-2 if residual == "separate" or norm else 1e-5)


@pytest.mark.parametrize("up", VEC)
@pytest.mark.parametrize("residual", [None, "in-place"])
def test_fused_silu_mul(rng, up, residual):
    # a seventh buffer gates x: x' = silu(x) * up (the down projection of a layer)
    case = MatvecCase(rng, rows=72, k=160, wdt=Amk.DType.F32, residual=residual, up=up,
                      tile=8, queues=4)
    got, want = case.run(rng)
    assert rel_err(got, want) <= (1e-2 if up == Amk.DType.BF16 else 1e-5)


@pytest.mark.parametrize("wdt", [Amk.DType.BF16, Amk.DType.F16, Amk.DType.F32])
@pytest.mark.parametrize("fused", [None, "norm", "up"])
@pytest.mark.parametrize("splits", [2, 3, 5])
def test_split_k(rng, wdt, fused, splits):
    # the slices of a row add onto y (in place) in queue order; the bias comes once, with
    # the first columns; a fused norm still normalises over all K
    case = MatvecCase(rng, rows=37, k=320, wdt=wdt, bias=True, residual="in-place",
                      norm=fused == "norm", up=Amk.DType.F32 if fused == "up" else None,
                      tile=8, queues=7, splits=splits)
    got, want = case.run(rng)
    assert rel_err(got, want) <= (1e-2 if fused == "norm" or wdt != Amk.DType.F32 else 1e-5)


def test_same_for_every_seed(rng):
    case = MatvecCase(rng, rows=64, k=128, tile=4, queues=8)
    first, _ = case.run(rng, seed=1)
    for seed in (2, 3, 77):
        again, _ = case.run(rng, seed=seed)
        np.testing.assert_array_equal(again, first)


def matvec_program(rows=8, k=16, wdt=Amk.DType.BF16, xdt=Amk.DType.F32, ydt=Amk.DType.F32,
                   wrole=Amk.BufferRole.CONSTANT):
    p = Amk.Program.new(1)
    y = p.add_buffer("y", ydt, [rows], Amk.BufferRole.OUTPUT)
    w = p.add_buffer("w", wdt, [rows, k], wrole)
    x = p.add_buffer("x", xdt, [k], Amk.BufferRole.INPUT)
    return p, y, w, x


def expect_error(p, code):
    with pytest.raises(GLib.Error) as info:
        p.verify()
    assert info.value.matches(Amk.program_error_quark(), code), info.value.message
    return info.value.message


def test_verifier_rows_past_the_end():
    p, y, w, x = matvec_program()
    add_op(p, 0, Amk.Opcode.MATVEC, [y, w, x, NONE, NONE, NONE], dict(row0=4, rows=5, k=16))
    assert "MATVEC" in expect_error(p, Amk.ProgramError.OUT_OF_RANGE)


def test_verifier_row_alignment():
    p, y, w, x = matvec_program(k=12)
    add_op(p, 0, Amk.Opcode.MATVEC, [y, w, x, NONE, NONE, NONE], dict(rows=8, k=12))
    assert "16 bytes" in expect_error(p, Amk.ProgramError.INVALID)


def test_verifier_dtypes():
    p, y, w, x = matvec_program(xdt=Amk.DType.I32)
    add_op(p, 0, Amk.Opcode.MATVEC, [y, w, x, NONE, NONE, NONE], dict(rows=8, k=16))
    expect_error(p, Amk.ProgramError.INVALID)


def test_verifier_output_must_not_alias_inputs():
    p, y, w, x = matvec_program(rows=16, k=16, xdt=Amk.DType.F32)
    add_op(p, 0, Amk.Opcode.MATVEC, [x, w, x, NONE, NONE, NONE], dict(rows=16, k=16))
    assert "overlaps" in expect_error(p, Amk.ProgramError.INVALID)


def test_verifier_norm_and_up_exclusive():
    p, y, w, x = matvec_program()
    g = p.add_buffer("gamma", Amk.DType.F32, [16], Amk.BufferRole.CONSTANT)
    u = p.add_buffer("up", Amk.DType.F32, [16], Amk.BufferRole.INPUT)
    add_op(p, 0, Amk.Opcode.MATVEC, [y, w, x, NONE, NONE, g, u], dict(rows=8, k=16, eps=1e-5))
    assert "cannot be combined" in expect_error(p, Amk.ProgramError.INVALID)


def test_verifier_up_too_short():
    p, y, w, x = matvec_program()
    u = p.add_buffer("up", Amk.DType.F32, [8], Amk.BufferRole.INPUT)
    add_op(p, 0, Amk.Opcode.MATVEC, [y, w, x, NONE, NONE, NONE, u], dict(rows=8, k=16))
    assert "up vector" in expect_error(p, Amk.ProgramError.OUT_OF_RANGE)


def split_program(ydt=Amk.DType.F32):
    p, y, w, x = matvec_program(k=32, ydt=ydt)  # bf16 rows of 4 chunks of 8 elements
    return p, y, w, x


@pytest.mark.parametrize("cols", [[-8, 8], [8, -8], [24, 16], [8, 0], [0, 40]])
def test_verifier_split_out_of_range(cols):
    p, y, w, x = split_program()
    add_op(p, 0, Amk.Opcode.MATVEC, [y, w, x, NONE, y, NONE],
           dict(rows=8, k=32, k0=cols[0], k_len=cols[1]))
    assert "split-K" in expect_error(p, Amk.ProgramError.OUT_OF_RANGE)


@pytest.mark.parametrize("cols", [[4, 8], [8, 12]])
def test_verifier_split_alignment(cols):
    p, y, w, x = split_program()
    add_op(p, 0, Amk.Opcode.MATVEC, [y, w, x, NONE, y, NONE],
           dict(rows=8, k=32, k0=cols[0], k_len=cols[1]))
    assert "16-byte boundaries" in expect_error(p, Amk.ProgramError.INVALID)


@pytest.mark.parametrize("ydt,residual", [(Amk.DType.BF16, "y"), (Amk.DType.F32, None),
                                          (Amk.DType.F32, "other")])
def test_verifier_split_adds_onto_f32_y(ydt, residual):
    p, y, w, x = split_program(ydt)
    r = {"y": y, None: NONE}.get(residual)
    if residual == "other":
        r = p.add_buffer("r", Amk.DType.F32, [8], Amk.BufferRole.INPUT)
    add_op(p, 0, Amk.Opcode.MATVEC, [y, w, x, NONE, r, NONE], dict(rows=8, k=32, k0=8, k_len=16))
    assert "atomic adds" in expect_error(p, Amk.ProgramError.INVALID)


def test_needs_y_w_x():
    # only bias, residual and norm weight are optional
    p, y, w, x = matvec_program()
    with pytest.raises(GLib.Error) as info:
        p.add_instruction(0, Amk.Opcode.MATVEC, [y, w, NONE, NONE, NONE, NONE])
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.OUT_OF_RANGE)


def test_verifier_constant_output():
    p, y, w, x = matvec_program()
    c = p.add_buffer("c", Amk.DType.F32, [8], Amk.BufferRole.CONSTANT)
    add_op(p, 0, Amk.Opcode.MATVEC, [c, w, x, NONE, NONE, NONE], dict(rows=8, k=16))
    assert "constant" in expect_error(p, Amk.ProgramError.INVALID)
