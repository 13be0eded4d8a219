"""The op API and compile() from Python: a two-layer MLP-like graph against numpy,
the schedule report, and the op API's errors."""
import numpy as np
import pytest

from amktest import Amk, GLib, bf16_to_f32, f32_to_bf16, from_bytes, make_rng, to_bytes


@pytest.fixture
def rng():
    return make_rng()


def test_mlp_against_numpy(rng):
    h, f, queues = 128, 384, 12
    p = Amk.Program(num_queues=queues)
    w_up = p.add_buffer("w_up", Amk.DType.F32, [f, h], Amk.BufferRole.CONSTANT)
    w_down = p.add_buffer("w_down", Amk.DType.F32, [h, f], Amk.BufferRole.CONSTANT)
    gamma = p.add_buffer("gamma", Amk.DType.F32, [h], Amk.BufferRole.CONSTANT)
    x = p.add_buffer("x", Amk.DType.F32, [h], Amk.BufferRole.STATE)
    u = p.add_buffer("u", Amk.DType.F32, [f], Amk.BufferRole.SCRATCH)
    v = p.add_buffer("v", Amk.DType.F32, [f], Amk.BufferRole.SCRATCH)
    W_up = (rng.standard_normal((f, h)) / np.sqrt(h)).astype(np.float32)
    W_down = (rng.standard_normal((h, f)) / np.sqrt(f)).astype(np.float32)
    G = rng.uniform(0.5, 1.5, h).astype(np.float32)
    for buf, arr in ((w_up, W_up), (w_down, W_down), (gamma, G)):
        p.set_buffer_data(buf, to_bytes(arr))

    p.op_matvec(u, w_up, x, -1, -1, gamma, 1e-6)   # u = W_up rmsnorm(x)
    p.op_add(v, u, u)                              # v = 2u
    p.op_matvec(x, w_down, v, -1, x, -1, 0.0)      # x += W_down v
    assert p.get_n_ops() == 3
    p.compile()
    assert p.props.verified

    X = rng.standard_normal(h).astype(np.float32)
    xn = X.astype(np.float64) / np.sqrt(np.mean(X.astype(np.float64) ** 2) + 1e-6) * G
    want = X + W_down.astype(np.float64) @ (2 * (W_up.astype(np.float64) @ xn))

    ex = Amk.CpuExecutor.new(p)
    ex.upload(x, to_bytes(X))
    ex.run()
    got = from_bytes(Amk.DType.F32, ex.download(x)).astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5

    ok, makespan, total, path = p.estimate_schedule()
    assert ok and makespan > 0 and path > 0
    assert makespan <= 1.15 * max(total / queues, path)
    report = p.get_schedule_report()
    assert "critical path" in report and "makespan" in report


def test_op_errors():
    p = Amk.Program.new(2)
    w = p.add_buffer("w", Amk.DType.BF16, [4, 6], Amk.BufferRole.CONSTANT)   # 12-byte rows
    x = p.add_buffer("x", Amk.DType.F32, [6], Amk.BufferRole.INPUT)
    y = p.add_buffer("y", Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    with pytest.raises(GLib.Error) as info:
        p.op_matvec(y, w, x, -1, -1, -1, 0.0)
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
    assert "16 bytes" in info.value.message
    with pytest.raises(GLib.Error) as info:
        p.op_copy(y, x)
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)


def test_op_wide_counter_waits_for_every_tile(rng):
    """A MATMUL tile reads a few of the RMSNORM's row tiles but waits for whole groups of
    them (tiles that share a counter): the schedule must put it after every tile of
    those groups (here, 64 queues and 600 rows once left a norm tile behind a MATMUL tile
    on its queue, a deadlock the verifier refused)."""
    m, n, h, queues = 600, 3072, 64, 64
    p = Amk.Program(num_queues=queues)
    x = p.add_buffer("x", Amk.DType.F32, [m, h], Amk.BufferRole.INPUT)
    g = p.add_buffer("g", Amk.DType.F32, [h], Amk.BufferRole.CONSTANT)
    xn = p.add_buffer("xn", Amk.DType.BF16, [m, h], Amk.BufferRole.SCRATCH)
    w = p.add_buffer("w", Amk.DType.BF16, [n, h], Amk.BufferRole.CONSTANT)
    y = p.add_buffer("y", Amk.DType.F32, [m, n], Amk.BufferRole.OUTPUT)
    G = rng.uniform(0.5, 1.5, h).astype(np.float32)
    W = f32_to_bf16(rng.standard_normal((n, h)) / np.sqrt(h))
    p.set_buffer_data(g, to_bytes(G))
    p.set_buffer_data(w, to_bytes(W))
    p.op_rmsnorm(xn, x, g, h, 1e-5)
    p.op_matmul(y, w, xn, -1, -1, -1, 0.0)
    p.compile()
    assert p.props.verified

    X = rng.standard_normal((m, h)).astype(np.float32)
    xn_want = X / np.sqrt(np.mean(X.astype(np.float64) ** 2, axis=1, keepdims=True) + 1e-5) * G
    xn_bf16 = bf16_to_f32(f32_to_bf16(xn_want)).astype(np.float64)
    w_f64 = bf16_to_f32(W).T.astype(np.float64)
    want = xn_bf16 @ w_f64
    # x' rounds to bf16 from fp32 sums: an element may land one bf16 step (2^-8 of it)
    # away from the float64 reference's
    bound = 2.0 ** -8 * (np.abs(xn_bf16) @ np.abs(w_f64)) + 1e-5
    ex = Amk.CpuExecutor.new(p)
    ex.upload(x, to_bytes(X))
    ex.run()
    got = from_bytes(Amk.DType.F32, ex.download(y)).reshape(m, n)
    assert np.all(np.abs(got - want) <= bound)


def test_compile_needs_an_op_only_program():
    p = Amk.Program.new(1)
    y = p.add_buffer("y", Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    p.add_instruction(0, Amk.Opcode.NOP, [])
    p.op_fill(y, 1.0)
    with pytest.raises(GLib.Error) as info:
        p.compile()
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
