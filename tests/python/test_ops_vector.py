"""The vector ops (RMSNORM, SILU_MUL, EMBED, ARGMAX_PARTIAL, ARGMAX_FINAL) on the CPU
executor against numpy in float64, through raw instructions: random data fresh per run,
odd shapes (hidden 2304, heads of 128, 2 KV heads), bf16 and f32, in-place RMSNORM, work
split over queues ordered by counters, an EMBED token outside the vocabulary, ARGMAX ties
and NaN; and the verifier's rules for the ops, one test per error."""
import numpy as np
import pytest

from amktest import (Amk, GLib, add_op, from_bytes, from_f32, make_rng, poison, same_bits,
                     to_bytes, to_f32)

F32, BF16, F16, I32 = Amk.DType.F32, Amk.DType.BF16, Amk.DType.F16, Amk.DType.I32
VEC = (F32, BF16)
INPUT, OUTPUT, CONSTANT, SCRATCH = (Amk.BufferRole.INPUT, Amk.BufferRole.OUTPUT,
                                    Amk.BufferRole.CONSTANT, Amk.BufferRole.SCRATCH)
PAD = 3  # poisoned elements around every output range


@pytest.fixture
def rng():
    return make_rng()


def values(rng, dtype, n, scale=1.0):
    """n random normal values stored as dtype (never all zero)."""
    return from_f32(dtype, (rng.standard_normal(n) * scale).astype(np.float32))


def tolerance(*dtypes):
    return 1e-5 if all(d == F32 for d in dtypes) else 1e-2


def rel_err(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def run(program, inputs, outputs, seed=0):
    """Runs on a fresh CPU executor: inputs {buffer: array}, outputs {buffer: (dtype, n)}
    poisoned first; returns {buffer: array} of the outputs and the poison they started
    with."""
    ex = Amk.CpuExecutor.new(program)
    ex.props.seed = seed
    for b, a in inputs.items():
        ex.upload(b, to_bytes(a))
    before = {}
    for b, (dtype, n) in outputs.items():
        before[b] = poison(dtype, n)
        ex.upload(b, to_bytes(before[b]))
    ex.run()
    return {b: from_bytes(dtype, ex.download(b)) for b, (dtype, n) in outputs.items()}, before


# ---- RMSNORM ---------------------------------------------------------------------------

def ref_rmsnorm(x, w, n, eps):
    """x: float64 [vectors * n], w: float64 [n]."""
    v = x.reshape(-1, n)
    return (v / np.sqrt(np.mean(v * v, axis=1, keepdims=True) + eps) * w).reshape(-1)


@pytest.mark.parametrize("odt", VEC)
@pytest.mark.parametrize("xdt", VEC)
@pytest.mark.parametrize("wdt", VEC)
def test_rmsnorm_hidden(rng, odt, xdt, wdt):
    # vector 1 of x (the hidden size 2304) into vector 1 of out; out's vector 0 and its
    # tail keep their poison
    n, eps = 2304, 1e-6
    p = Amk.Program.new(1)
    out = p.add_buffer("out", odt, [2 * n + PAD], OUTPUT)
    x = p.add_buffer("x", xdt, [3 * n], INPUT)
    w = p.add_buffer("w", wdt, [n], CONSTANT)
    xd = values(rng, xdt, 3 * n, 3.0)
    wd = values(rng, wdt, n)
    p.set_buffer_data(w, to_bytes(wd))
    add_op(p, 0, Amk.Opcode.RMSNORM, [out, x, w], dict(n=n, vec0=1, n_vecs=1, eps=eps))
    p.verify()
    got, before = run(p, {x: xd}, {out: (odt, 2 * n + PAD)})
    want = ref_rmsnorm(to_f32(xdt, xd[n:2 * n]).astype(np.float64), to_f32(wdt, wd).astype(np.float64), n, eps)
    g = got[out]
    assert rel_err(to_f32(odt, g[n:2 * n]).astype(np.float64), want) <= tolerance(odt, xdt, wdt)
    assert same_bits(g[:n], before[out][:n]) and same_bits(g[2 * n:], before[out][2 * n:])


@pytest.mark.parametrize("dt", VEC)
def test_rmsnorm_rounding(rng, dt):
    # f32 math, one RNE store: the result is exactly what numpy gives in float32 for a
    # short vector (the sum of 8 squares is exact enough to compare bit for bit after
    # rounding to bf16, and within 2 ulp in f32)
    n, eps = 8, 1e-5
    p = Amk.Program.new(1)
    out = p.add_buffer("out", dt, [n], OUTPUT)
    x = p.add_buffer("x", F32, [n], INPUT)
    w = p.add_buffer("w", F32, [n], INPUT)
    xd, wd = values(rng, F32, n), values(rng, F32, n)
    add_op(p, 0, Amk.Opcode.RMSNORM, [out, x, w], dict(n=n, n_vecs=1, eps=eps))
    got, _ = run(p, {x: xd, w: wd}, {out: (dt, n)})
    want = ref_rmsnorm(xd.astype(np.float64), wd.astype(np.float64), n, eps)
    np.testing.assert_allclose(to_f32(dt, got[out]), want, rtol=4e-7 if dt == F32 else 2 ** -8)


@pytest.mark.parametrize("dt", VEC)
def test_rmsnorm_heads_over_queues(rng, dt):
    # Qwen3's q/k norm: 16 query heads and 2 KV heads of 128, one shared weight each;
    # the query heads are normalised by three instructions on three queues (5 + 7 + 4
    # heads), the KV heads on a fourth after a counter says k is ready
    hd, nq, nkv, eps = 128, 16, 2, 1e-6
    p = Amk.Program.new(4)
    q = p.add_buffer("q", dt, [nq * hd], INPUT)
    qn = p.add_buffer("q normed", dt, [nq * hd], OUTPUT)
    k_in = p.add_buffer("k in", dt, [nkv * hd], INPUT)
    k = p.add_buffer("k", dt, [nkv * hd], SCRATCH)
    kn = p.add_buffer("k normed", F32, [nkv * hd], OUTPUT)
    wq = p.add_buffer("q_norm", BF16, [hd], CONSTANT)
    wk = p.add_buffer("k_norm", BF16, [hd], CONSTANT)
    data = {q: values(rng, dt, nq * hd, 2.0), k_in: values(rng, dt, nkv * hd, 0.5)}
    wqd, wkd = values(rng, BF16, hd), values(rng, BF16, hd)
    p.set_buffer_data(wq, to_bytes(wqd))
    p.set_buffer_data(wk, to_bytes(wkd))
    ready = p.add_counter("k ready")
    for queue, (h0, nh) in enumerate([(0, 5), (5, 7), (12, 4)]):
        add_op(p, queue, Amk.Opcode.RMSNORM, [qn, q, wq], dict(n=hd, vec0=h0, n_vecs=nh, eps=eps))
    add_op(p, 1, Amk.Opcode.COPY, [k, k_in], dict(count=nkv * hd), signal=(ready, 1))
    add_op(p, 3, Amk.Opcode.RMSNORM, [kn, k, wk], dict(n=hd, n_vecs=nkv, eps=eps),
           waits=[(ready, 1)])
    p.verify()
    for seed in (0, 1, 5):
        got, _ = run(p, data, {qn: (dt, nq * hd), kn: (F32, nkv * hd)}, seed=seed)
        want_q = ref_rmsnorm(to_f32(dt, data[q]).astype(np.float64), to_f32(BF16, wqd), hd, eps)
        want_k = ref_rmsnorm(to_f32(dt, data[k_in]).astype(np.float64), to_f32(BF16, wkd), hd, eps)
        for h in range(nq):  # head by head: none left out, none mixed up
            s = slice(h * hd, (h + 1) * hd)
            assert rel_err(to_f32(dt, got[qn][s]), want_q[s]) <= tolerance(dt, BF16)
        assert rel_err(got[kn], want_k) <= tolerance(dt, BF16)


@pytest.mark.parametrize("dt", VEC)
def test_rmsnorm_in_place(rng, dt):
    n, heads, eps = 128, 6, 1e-5
    p = Amk.Program.new(2)
    x = p.add_buffer("x", dt, [heads * n], OUTPUT)
    w = p.add_buffer("w", F32, [n], INPUT)
    xd, wd = values(rng, dt, heads * n, 4.0), values(rng, F32, n)
    add_op(p, 0, Amk.Opcode.RMSNORM, [x, x, w], dict(n=n, n_vecs=4, eps=eps))
    add_op(p, 1, Amk.Opcode.RMSNORM, [x, x, w], dict(n=n, vec0=4, n_vecs=2, eps=eps))
    p.verify()
    ex = Amk.CpuExecutor.new(p)
    ex.upload(x, to_bytes(xd))
    ex.upload(w, to_bytes(wd))
    ex.run()
    got = to_f32(dt, from_bytes(dt, ex.download(x)))
    want = ref_rmsnorm(to_f32(dt, xd).astype(np.float64), wd.astype(np.float64), n, eps)
    assert rel_err(got, want) <= tolerance(dt)


def test_rmsnorm_epsilon(rng):
    # a large epsilon must show: x tiny, so the result is about x / sqrt(eps) * w
    n, eps = 64, 0.25
    p = Amk.Program.new(1)
    out = p.add_buffer("out", F32, [n], OUTPUT)
    x = p.add_buffer("x", F32, [n], INPUT)
    w = p.add_buffer("w", F32, [n], INPUT)
    xd, wd = values(rng, F32, n, 1e-3), values(rng, F32, n)
    add_op(p, 0, Amk.Opcode.RMSNORM, [out, x, w], dict(n=n, n_vecs=1, eps=eps))
    got, _ = run(p, {x: xd, w: wd}, {out: (F32, n)})
    want = ref_rmsnorm(xd.astype(np.float64), wd.astype(np.float64), n, eps)
    assert rel_err(got[out], want) <= 1e-6


# ---- SILU_MUL ------------------------------------------------------------------------

def ref_silu_mul(g, u):
    return g / (1.0 + np.exp(-g)) * u


@pytest.mark.parametrize("odt", VEC)
@pytest.mark.parametrize("gdt", VEC)
@pytest.mark.parametrize("udt", VEC)
def test_silu_mul(rng, odt, gdt, udt):
    # 8192 elements (Llama-3.2-1B's intermediate size) in tiles of 1000 (odd, the last
    # one short) over 3 queues; element 0 and the tail beyond the last tile are not
    # covered and keep their poison
    n, tile, start = 8192, 1000, 1
    p = Amk.Program.new(3)
    out = p.add_buffer("out", odt, [n + PAD], OUTPUT)
    gate = p.add_buffer("gate", gdt, [n + PAD], INPUT)
    up = p.add_buffer("up", udt, [n + PAD], INPUT)
    gd = values(rng, gdt, n + PAD, 4.0)
    gd[:8] = from_f32(gdt, np.array([-100.0, -30.0, -1.0, 0.0, 1.0, 30.0, 100.0, 5.0], np.float32))
    ud = values(rng, udt, n + PAD)
    for t, k0 in enumerate(range(start, n, tile)):
        add_op(p, t % 3, Amk.Opcode.SILU_MUL, [out, gate, up],
               dict(offset=k0, count=min(tile, n - k0)))
    p.verify()
    got, before = run(p, {gate: gd, up: ud}, {out: (odt, n + PAD)})
    g = to_f32(gdt, gd).astype(np.float64)
    u = to_f32(udt, ud).astype(np.float64)
    want = ref_silu_mul(g[start:n], u[start:n])
    assert rel_err(to_f32(odt, got[out][start:n]).astype(np.float64), want) <= tolerance(odt, gdt, udt)
    assert same_bits(got[out][:start], before[out][:start])
    assert same_bits(got[out][n:], before[out][n:])
    if odt == F32 and gdt == F32 and udt == F32:
        # element by element too: no sign or large-|g| trouble
        np.testing.assert_allclose(got[out][start:n], want, rtol=1e-5, atol=1e-30)


# ---- EMBED ---------------------------------------------------------------------------

@pytest.mark.parametrize("tdt", [BF16, F16, F32])
@pytest.mark.parametrize("odt", VEC)
def test_embed(rng, tdt, odt):
    # vocabulary 37, rows of 2304; columns 16 .. 16 + 2200 of the row of tokens[2] land in
    # out[16 ..]: out is as long as the row, so the columns it does not get keep poison
    vocab, row, col, count = 37, 2304, 16, 2200
    p = Amk.Program.new(2)
    out = p.add_buffer("out", odt, [row], OUTPUT)
    table = p.add_buffer("table", tdt, [vocab, row], CONSTANT)
    tokens = p.add_buffer("tokens", I32, [4], INPUT)
    td = values(rng, tdt, vocab * row)
    p.set_buffer_data(table, to_bytes(td))
    add_op(p, 1, Amk.Opcode.EMBED, [out, table, tokens],
           dict(token_index=2, col0=col, n_cols=count, dim=row))
    p.verify()
    for t in (0, int(rng.integers(1, vocab - 1)), vocab - 1):
        tok = rng.integers(-5, 5, size=4).astype(np.int32)
        tok[2] = t
        got, before = run(p, {tokens: tok}, {out: (odt, row)})
        src = td[t * row + col:t * row + col + count]
        want = src.copy() if tdt == odt else from_f32(odt, to_f32(tdt, src))
        assert same_bits(got[out][col:col + count], want)
        assert same_bits(got[out][:col], before[out][:col])
        assert same_bits(got[out][col + count:], before[out][col + count:])


@pytest.mark.parametrize("token", [-1, 37, 2 ** 31 - 1, -2 ** 31])
def test_embed_token_out_of_range(rng, token):
    vocab, row = 37, 64
    p = Amk.Program.new(1)
    out = p.add_buffer("out", F32, [row], OUTPUT)
    table = p.add_buffer("table", BF16, [vocab, row], CONSTANT)
    tokens = p.add_buffer("tokens", I32, [1], INPUT)
    p.set_buffer_data(table, to_bytes(values(rng, BF16, vocab * row)))
    add_op(p, 0, Amk.Opcode.NOP, [])
    add_op(p, 0, Amk.Opcode.EMBED, [out, table, tokens], dict(n_cols=row, dim=row))
    p.verify()
    ex = Amk.CpuExecutor.new(p)
    ex.upload(tokens, to_bytes(np.array([token], np.int32)))
    with pytest.raises(GLib.Error) as info:
        ex.run()
    assert info.value.matches(Amk.launch_error_quark(), Amk.LaunchError.ABORTED)
    record = ex.get_last_abort()
    assert record is not None
    assert record.code == Amk.AbortCode.CHECK
    assert record.detail == tokens
    assert record.queue == 0 and record.instruction == 1
    # the executor stays usable: a good token runs
    ex.upload(tokens, to_bytes(np.array([vocab - 1], np.int32)))
    ex.run()
    assert ex.get_last_abort() is None


# ---- ARGMAX --------------------------------------------------------------------------

def ref_argmax(x):
    """x: float values; NaN below everything, ties to the lowest index."""
    x = np.asarray(x, dtype=np.float64)
    if np.all(np.isnan(x)):
        return 0
    m = np.nanmax(x)
    return int(np.flatnonzero(x == m)[0])


class Argmax:
    """x[vocab] in tiles of `tile` (dealt over the queues), partials at val/idx[t], and
    a final instruction on queue 0 once every tile signalled."""

    def __init__(self, xdt, vocab, tile, queues=4):
        self.xdt, self.vocab, self.tile = xdt, vocab, tile
        self.tiles = (vocab + tile - 1) // tile
        p = self.program = Amk.Program.new(queues)
        self.x = p.add_buffer("logits", xdt, [vocab], INPUT)
        self.val = p.add_buffer("val", F32, [self.tiles + PAD], OUTPUT)
        self.idx = p.add_buffer("idx", I32, [self.tiles + PAD], OUTPUT)
        self.out = p.add_buffer("next", I32, [4], OUTPUT)
        done = p.add_counter("tiles done")
        for t in range(self.tiles):
            k0 = t * tile
            add_op(p, (t + 1) % queues, Amk.Opcode.ARGMAX_PARTIAL, [self.val, self.idx, self.x],
                   dict(offset=k0, count=min(tile, vocab - k0), slot=t), signal=(done, 1))
        add_op(p, 0, Amk.Opcode.ARGMAX_FINAL, [self.out, self.val, self.idx],
               dict(n_partials=self.tiles, out_index=1),
               waits=[(done, self.tiles)])
        p.verify()

    def check(self, xd, seed=0):
        got, before = run(self.program, {self.x: xd},
                          {self.val: (F32, self.tiles + PAD), self.idx: (I32, self.tiles + PAD),
                           self.out: (I32, 4)}, seed=seed)
        xf = to_f32(self.xdt, xd)
        for t in range(self.tiles):
            k0 = t * self.tile
            part = xf[k0:k0 + self.tile]
            j = ref_argmax(part)
            assert got[self.idx][t] == k0 + j, f"tile {t}"
            assert same_bits(got[self.val][t:t + 1], part[j:j + 1]), f"tile {t}"
        assert same_bits(got[self.val][self.tiles:], before[self.val][self.tiles:])
        assert same_bits(got[self.idx][self.tiles:], before[self.idx][self.tiles:])
        want = ref_argmax(xf)
        assert got[self.out][1] == want
        assert same_bits(got[self.out][[0, 2, 3]], before[self.out][[0, 2, 3]])
        return want


@pytest.mark.parametrize("xdt", VEC)
@pytest.mark.parametrize("vocab,tile", [(128256, 1000), (151936, 151936), (5000, 7), (1, 1)])
def test_argmax_random(rng, xdt, vocab, tile):
    a = Argmax(xdt, vocab, tile)
    xd = values(rng, xdt, vocab, 3.0)
    a.check(xd)
    # a unique maximum planted in a random place
    k = int(rng.integers(0, vocab))
    xd[k] = from_f32(xdt, np.array([100.0], np.float32))[0]
    assert a.check(xd, seed=3) == k


@pytest.mark.parametrize("xdt", VEC)
def test_argmax_ties(rng, xdt):
    vocab, tile = 3000, 256
    a = Argmax(xdt, vocab, tile)
    xd = values(rng, xdt, vocab)
    big = from_f32(xdt, np.array([50.0], np.float32))[0]
    # the same maximum in tiles 9, 2 (twice) and 11: the lowest index wins, in every tile
    for k in (2400, 700, 600, 2900):
        xd[k] = big
    assert a.check(xd) == 600
    # +0 and -0 are equal: the lowest index wins
    zeros = np.full(vocab, from_f32(xdt, np.array([-1.0], np.float32))[0], dtype=xd.dtype)
    zeros[1500] = from_f32(xdt, np.array([-0.0], np.float32))[0]
    zeros[1501] = from_f32(xdt, np.array([0.0], np.float32))[0]
    zeros[40] = from_f32(xdt, np.array([0.0], np.float32))[0]
    assert a.check(zeros) == 40


@pytest.mark.parametrize("xdt", VEC)
def test_argmax_nan(rng, xdt):
    vocab, tile = 2000, 500
    a = Argmax(xdt, vocab, tile)
    nan = from_f32(xdt, np.array([np.nan], np.float32))[0]
    ninf = from_f32(xdt, np.array([-np.inf], np.float32))[0]
    xd = values(rng, xdt, vocab)
    xd[::3] = nan                       # NaN is smaller than everything
    xd[0] = nan
    xd[1234] = from_f32(xdt, np.array([9.0], np.float32))[0]
    assert a.check(xd) == 1234
    # a tile of NaN only: its partial is its first NaN, and the final ignores it;
    # -inf beats NaN
    xd[500:1000] = nan
    xd[1000:1500] = ninf
    xd[1500:2000] = nan
    xd[:500] = nan
    xd[1200] = ninf
    assert a.check(xd) == 1000
    # all NaN: index 0
    assert a.check(np.full(vocab, nan, dtype=xd.dtype)) == 0


# ---- the verifier --------------------------------------------------------------------

def expect_error(p, code, *words):
    with pytest.raises(GLib.Error) as info:
        p.verify()
    assert info.value.matches(Amk.program_error_quark(), code), info.value.message
    for w in words:
        assert w in info.value.message, info.value.message
    return info.value.message


def small_program(dt=F32, xdt=None, wdt=None, n=64, out_role=OUTPUT):
    p = Amk.Program.new(2)
    out = p.add_buffer("out", dt, [n], out_role)
    x = p.add_buffer("x", xdt if xdt is not None else dt, [n], INPUT)
    w = p.add_buffer("w", wdt if wdt is not None else dt, [n], CONSTANT)
    add_op(p, 0, Amk.Opcode.NOP, [])
    return p, out, x, w


# dtype: INVALID

@pytest.mark.parametrize("case", ["rmsnorm-x-i32", "silu-out-f16", "embed-tokens-f32",
                                  "embed-table-i32", "argmax-val-bf16", "argmax-idx-f32",
                                  "final-out-f32"])
def test_verifier_dtype(case):
    p = Amk.Program.new(1)
    f = p.add_buffer("f32", F32, [64], OUTPUT)
    b = p.add_buffer("bf16", BF16, [64], OUTPUT)
    i = p.add_buffer("i32", I32, [64], OUTPUT)
    h = p.add_buffer("f16", F16, [64], OUTPUT)
    f2 = p.add_buffer("f32 b", F32, [64], INPUT)
    i2 = p.add_buffer("i32 b", I32, [64], INPUT)
    ops = {
        "rmsnorm-x-i32": (Amk.Opcode.RMSNORM, [f, i, f2], dict(n=8, n_vecs=1), "RMSNORM"),
        "silu-out-f16": (Amk.Opcode.SILU_MUL, [h, f, f2], dict(count=8), "SILU_MUL"),
        "embed-tokens-f32": (Amk.Opcode.EMBED, [f, b, f2], dict(n_cols=8, dim=8), "EMBED"),
        "embed-table-i32": (Amk.Opcode.EMBED, [f, i2, i], dict(n_cols=8, dim=8), "EMBED"),
        "argmax-val-bf16": (Amk.Opcode.ARGMAX_PARTIAL, [b, i, f2], dict(count=8), "ARGMAX_PARTIAL"),
        "argmax-idx-f32": (Amk.Opcode.ARGMAX_PARTIAL, [f, f2, b], dict(count=8), "ARGMAX_PARTIAL"),
        "final-out-f32": (Amk.Opcode.ARGMAX_FINAL, [f, f2, i2], dict(n_partials=4), "ARGMAX_FINAL"),
    }
    op, bufs, params, name = ops[case]
    add_op(p, 0, op, bufs, params)
    expect_error(p, Amk.ProgramError.INVALID, name, "Queue 0 instruction 0", "cannot be")


# ranges and parameters: OUT_OF_RANGE

@pytest.mark.parametrize("case", ["rmsnorm-vectors", "rmsnorm-weight", "rmsnorm-n0",
                                  "silu-count", "silu-negative", "embed-columns",
                                  "embed-token-slot", "embed-no-row", "argmax-tile",
                                  "argmax-empty", "argmax-slot", "final-count"])
def test_verifier_range(case):
    p = Amk.Program.new(1)
    f = p.add_buffer("f", F32, [64], OUTPUT)
    f2 = p.add_buffer("f2", F32, [64], INPUT)
    w = p.add_buffer("w", F32, [16], CONSTANT)
    i = p.add_buffer("i", I32, [4], OUTPUT)
    i2 = p.add_buffer("i2", I32, [4], INPUT)
    table = p.add_buffer("table", BF16, [10, 8], CONSTANT)
    small = p.add_buffer("small table", BF16, [6], CONSTANT)
    ops = {
        "rmsnorm-vectors": (Amk.Opcode.RMSNORM, [f, f2, w], dict(n=16, vec0=2, n_vecs=3, eps=1e-5)),  # 5 x 16 > 64
        "rmsnorm-weight": (Amk.Opcode.RMSNORM, [f, f2, w], dict(n=32, n_vecs=2, eps=1e-5)),  # w has 16
        "rmsnorm-n0": (Amk.Opcode.RMSNORM, [f, f2, w], dict(n_vecs=1, eps=1e-5)),
        "silu-count": (Amk.Opcode.SILU_MUL, [f, f2, f2], dict(offset=60, count=5)),
        "silu-negative": (Amk.Opcode.SILU_MUL, [f, f2, f2], dict(count=-1)),
        "embed-columns": (Amk.Opcode.EMBED, [f, table, i2], dict(col0=4, n_cols=5, dim=8)),  # 4 + 5 > 8
        "embed-token-slot": (Amk.Opcode.EMBED, [f, table, i2], dict(token_index=4, n_cols=8, dim=8)),
        "embed-no-row": (Amk.Opcode.EMBED, [f, small, i2], dict(n_cols=8, dim=8)),
        "argmax-tile": (Amk.Opcode.ARGMAX_PARTIAL, [f, i, f2], dict(offset=10, count=60)),
        "argmax-empty": (Amk.Opcode.ARGMAX_PARTIAL, [f, i, f2], dict()),
        "argmax-slot": (Amk.Opcode.ARGMAX_PARTIAL, [f, i, f2], dict(count=8, slot=4)),  # idx has 4
        "final-count": (Amk.Opcode.ARGMAX_FINAL, [i, f2, i2], dict(n_partials=5)),  # idx has 4
    }
    op, bufs, params = ops[case]
    add_op(p, 0, op, bufs, params)
    expect_error(p, Amk.ProgramError.OUT_OF_RANGE, "Queue 0 instruction 0")


def test_verifier_range_message():
    p, out, x, w = small_program()
    add_op(p, 1, Amk.Opcode.SILU_MUL, [out, x, w], dict(offset=60, count=5))
    msg = expect_error(p, Amk.ProgramError.OUT_OF_RANGE, "SILU_MUL", "Queue 1 instruction 0", "“out”")
    assert "64" in msg and "65" in msg


@pytest.mark.parametrize("eps", [-1e-6, float("nan"), float("inf")])
def test_verifier_epsilon(eps):
    p, out, x, w = small_program()
    add_op(p, 0, Amk.Opcode.RMSNORM, [out, x, w], dict(n=64, n_vecs=1, eps=eps))
    expect_error(p, Amk.ProgramError.INVALID, "RMSNORM", "epsilon")


# writes to CONSTANT buffers: INVALID

@pytest.mark.parametrize("op", ["rmsnorm", "silu", "embed", "argmax-val", "argmax-idx", "final"])
def test_verifier_constant_write(op):
    p = Amk.Program.new(1)
    f = p.add_buffer("f", F32, [64], INPUT)
    fc = p.add_buffer("frozen", F32, [64], CONSTANT)
    i = p.add_buffer("i", I32, [64], OUTPUT)
    ic = p.add_buffer("frozen ints", I32, [64], CONSTANT)
    table = p.add_buffer("table", BF16, [4, 16], CONSTANT)
    ops = {
        "rmsnorm": (Amk.Opcode.RMSNORM, [fc, f, f], dict(n=16, n_vecs=1), "frozen"),
        "silu": (Amk.Opcode.SILU_MUL, [fc, f, f], dict(count=8), "frozen"),
        "embed": (Amk.Opcode.EMBED, [fc, table, i], dict(n_cols=16, dim=16), "frozen"),
        "argmax-val": (Amk.Opcode.ARGMAX_PARTIAL, [fc, i, f], dict(count=8), "frozen"),
        "argmax-idx": (Amk.Opcode.ARGMAX_PARTIAL, [f, ic, fc], dict(count=8), "frozen ints"),
        "final": (Amk.Opcode.ARGMAX_FINAL, [ic, f, i], dict(n_partials=4), "frozen ints"),
    }
    o, bufs, params, name = ops[op]
    add_op(p, 0, o, bufs, params)
    expect_error(p, Amk.ProgramError.INVALID, "constant", f"“{name}”")


# aliasing: INVALID

@pytest.mark.parametrize("case", ["silu-out-gate", "silu-out-up", "rmsnorm-out-w",
                                  "embed-out-table", "argmax-val-x",
                                  "final-out-idx"])
def test_verifier_aliasing(case):
    p = Amk.Program.new(1)
    f = p.add_buffer("f", F32, [256], OUTPUT)
    g = p.add_buffer("g", F32, [256], INPUT)
    i = p.add_buffer("i", I32, [64], OUTPUT)
    ops = {
        # other elements of the same buffer are fine; these overlap
        "silu-out-gate": (Amk.Opcode.SILU_MUL, [f, f, g], dict(count=8)),
        "silu-out-up": (Amk.Opcode.SILU_MUL, [f, g, f], dict(count=8)),
        "rmsnorm-out-w": (Amk.Opcode.RMSNORM, [f, g, f], dict(n=16, n_vecs=1, eps=1e-5)),
        "embed-out-table": (Amk.Opcode.EMBED, [f, f, i], dict(n_cols=16, dim=16)),
        "argmax-val-x": (Amk.Opcode.ARGMAX_PARTIAL, [f, i, f], dict(count=16, slot=5)),
        "final-out-idx": (Amk.Opcode.ARGMAX_FINAL, [i, g, i], dict(n_partials=4, out_index=2)),
    }
    op, bufs, params = ops[case]
    add_op(p, 0, op, bufs, params)
    expect_error(p, Amk.ProgramError.INVALID, "overlap")


def test_verifier_disjoint_parts_of_one_buffer():
    # one buffer as output and input is fine where the elements do not overlap
    p = Amk.Program.new(1)
    f = p.add_buffer("f", F32, [256], OUTPUT)
    i = p.add_buffer("i", I32, [256], OUTPUT)
    add_op(p, 0, Amk.Opcode.RMSNORM, [f, f, f], dict(n=16, vec0=4, n_vecs=2, eps=1e-5))  # w = f[0:16]
    add_op(p, 0, Amk.Opcode.SILU_MUL, [f, f, f], dict())                                  # nothing
    add_op(p, 0, Amk.Opcode.ARGMAX_PARTIAL, [f, i, f], dict(count=100, slot=200))         # val f[200]
    add_op(p, 0, Amk.Opcode.ARGMAX_FINAL, [i, f, i], dict(n_partials=8, out_index=10))
    p.verify()
    # but RMSNORM's weight may not be its output, even in place
    p = Amk.Program.new(1)
    f = p.add_buffer("f", F32, [256], OUTPUT)
    add_op(p, 0, Amk.Opcode.RMSNORM, [f, f, f], dict(n=16, n_vecs=2, eps=1e-5))
    expect_error(p, Amk.ProgramError.INVALID, "overlap", "“f”")


def _rewrite_arena(p, offsets, scratch_size):
    """The image of p with scratch buffers moved: offsets {buffer index: arena offset}."""
    image_type = "(suuta(syyaxtmay)amsayaai)"
    v = GLib.Variant.new_from_bytes(GLib.VariantType.new(image_type), p.serialize(), False)
    magic, abi, queues, _, buffers, counters, raw, qs = v.unpack()
    buffers = [(n, d, r, s, offsets.get(k, off), data) for k, (n, d, r, s, off, data) in enumerate(buffers)]
    rebuilt = GLib.Variant(image_type, (magic, abi, queues, scratch_size, buffers, counters, raw, qs))
    return Amk.Program.new_from_bytes(GLib.Bytes.new(rebuilt.get_data_as_bytes().get_data()))


def test_verifier_scratch_aliasing():
    # two scratch buffers that share arena bytes: RMSNORM's out over exactly its x is in
    # place (fine); half a vector off it is a partial overlap; SILU_MUL may not write its
    # gate at all
    def program(op):
        p = Amk.Program.new(1)
        a = p.add_buffer("a", F32, [128], SCRATCH)
        b = p.add_buffer("b", F32, [128], SCRATCH)
        w = p.add_buffer("w", F32, [64], CONSTANT)
        if op == "rmsnorm":
            add_op(p, 0, Amk.Opcode.RMSNORM, [b, a, w], dict(n=64, n_vecs=2, eps=1e-5))
        else:
            add_op(p, 0, Amk.Opcode.SILU_MUL, [b, a, w], dict(count=64))
        p.verify()
        return p, a, b

    p, a, b = program("rmsnorm")
    _rewrite_arena(p, {b: 0}, 512).verify()          # b == a: in place through the arena
    with pytest.raises(GLib.Error) as info:
        _rewrite_arena(p, {b: 256}, 768).verify()     # b starts in the middle of a
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
    assert "overlap" in info.value.message
    p, a, b = program("silu")
    with pytest.raises(GLib.Error) as info:
        _rewrite_arena(p, {b: 0}, 512).verify()
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)


@pytest.mark.parametrize("op", ["embed", "argmax"])
def test_verifier_scratch_aliasing_across_dtypes(op):
    # buffers of different dtypes meet only in the arena: EMBED's output over its token,
    # ARGMAX_PARTIAL's two outputs over each other
    p = Amk.Program.new(1)
    a = p.add_buffer("a", F32, [64], SCRATCH)
    b = p.add_buffer("b", I32, [64], SCRATCH)
    if op == "embed":
        table = p.add_buffer("table", BF16, [4, 16], CONSTANT)
        add_op(p, 0, Amk.Opcode.EMBED, [a, table, b], dict(token_index=3, n_cols=16, dim=16))
    else:
        x = p.add_buffer("x", F32, [64], INPUT)
        add_op(p, 0, Amk.Opcode.ARGMAX_PARTIAL, [a, b, x], dict(count=64, slot=2))
    p.verify()
    with pytest.raises(GLib.Error) as info:
        _rewrite_arena(p, {b: 0}, 256).verify()  # loading verifies
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
    assert "overlap" in info.value.message


def test_verifier_buffer_count():
    # the generic check: three buffers for every vector op
    p, out, x, w = small_program()
    add_op(p, 0, Amk.Opcode.SILU_MUL, [out, x])
    expect_error(p, Amk.ProgramError.INVALID, "SILU_MUL")


def test_everything_verified_runs_on_the_cpu(rng):
    # an instruction of each op, back to back on one queue, ordered by the queue alone
    p = Amk.Program.new(1)
    tokens = p.add_buffer("tokens", I32, [1], INPUT)
    table = p.add_buffer("table", BF16, [50, 256], CONSTANT)
    h = p.add_buffer("h", F32, [256], SCRATCH)
    w = p.add_buffer("w", BF16, [256], CONSTANT)
    gate = p.add_buffer("gate", F32, [256], INPUT)
    act = p.add_buffer("act", BF16, [256], SCRATCH)
    val = p.add_buffer("val", F32, [2], SCRATCH)
    idx = p.add_buffer("idx", I32, [2], SCRATCH)
    nxt = p.add_buffer("next", I32, [1], OUTPUT)
    td, wd, gd = values(rng, BF16, 50 * 256), values(rng, BF16, 256), values(rng, F32, 256)
    p.set_buffer_data(table, to_bytes(td))
    p.set_buffer_data(w, to_bytes(wd))
    add_op(p, 0, Amk.Opcode.EMBED, [h, table, tokens], dict(n_cols=256, dim=256))
    add_op(p, 0, Amk.Opcode.RMSNORM, [h, h, w], dict(n=256, n_vecs=1, eps=1e-5))
    add_op(p, 0, Amk.Opcode.SILU_MUL, [act, gate, h], dict(count=256))
    add_op(p, 0, Amk.Opcode.ARGMAX_PARTIAL, [val, idx, act], dict(count=100))
    add_op(p, 0, Amk.Opcode.ARGMAX_PARTIAL, [val, idx, act], dict(offset=100, count=156, slot=1))
    add_op(p, 0, Amk.Opcode.ARGMAX_FINAL, [nxt, val, idx], dict(n_partials=2))
    p.verify()
    t = int(rng.integers(0, 50))
    got, _ = run(p, {tokens: np.array([t], np.int32), gate: gd}, {nxt: (I32, 1)})
    hh = to_f32(BF16, td[t * 256:(t + 1) * 256]).astype(np.float64)
    hh = ref_rmsnorm(hh, to_f32(BF16, wd), 256, 1e-5)
    a = to_f32(BF16, from_f32(BF16, ref_silu_mul(gd.astype(np.float64), hh)))
    assert got[nxt][0] == ref_argmax(a)
