"""The many-token ops on the GPU against the CPU executor, on random data with the outputs
poisoned: MATMUL on tensor cores (odd shapes, every fusion, bf16 and f16 weights, the
rectangle cut into tiles by the compiler), EMBED of many tokens, ROPE_ROWS (with and
without Qwen3's q/k norm) and ATTN_ROWS over a prompt chunk and over a batch of
sequences. The launcher runs with its own configuration (what users get). Skips without
a GPU."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from amktest import Amk, GLib, download, from_f32, make_rng, poison, to_f32, upload  # noqa: E402

pytestmark = pytest.mark.skipif(Amk.Launcher.get_device_count() == 0, reason="no CUDA device")

F32, BF16, F16, I32 = Amk.DType.F32, Amk.DType.BF16, Amk.DType.F16, Amk.DType.I32
LLAMA3 = dict(theta=500000.0, factor=32.0, low=1.0, high=4.0, old_ctx=8192)


def rel_err(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)


def queues():
    return Amk.Launcher(device=0).get_preferred_queues()


def add(prog, name, dtype, shape, role=Amk.BufferRole.INPUT):
    return prog.add_buffer(name, dtype, list(shape), role)


def run_both(prog, inputs, outputs, poisoned=True):
    """Runs prog on the CPU executor and the launcher with the same inputs (buffer ->
    (dtype, array)) and the outputs (buffer -> (dtype, n)) poisoned first unless an input
    gives them; returns {buffer: (cpu, gpu)} as float32."""
    got = []
    for ex in (Amk.CpuExecutor.new(prog), Amk.Launcher(device=0)):
        if isinstance(ex, Amk.Launcher):
            ex.load(prog)
        for buf, (dtype, array) in inputs.items():
            upload(ex, buf, dtype, array)
        for buf, (dtype, n) in outputs.items():
            if poisoned and buf not in inputs:
                upload(ex, buf, dtype, poison(dtype, n))
        ex.launch(None) if isinstance(ex, Amk.Launcher) else ex.run()
        got.append({buf: to_f32(dtype, download(ex, buf, dtype)) for buf, (dtype, n) in outputs.items()})
    return {buf: (got[0][buf], got[1][buf]) for buf in outputs}


@pytest.mark.parametrize("wdt,xdt,ydt", [(BF16, F32, F32), (F16, F32, F32), (BF16, BF16, F32),
                                         (F16, BF16, BF16), (BF16, BF16, BF16)],
                         ids=["bf16-w", "f16-w", "bf16-x", "f16-w-bf16-x-y", "bf16-all"])
@pytest.mark.parametrize("m,n,k,fused", [
    (1, 200, 64, "none"), (7, 136, 72, "norm"), (100, 300, 264, "bias+residual"),
    (256, 520, 1032, "norm+residual-in-place"), (300, 64, 128, "norm+bias"),
])
def test_matmul_gpu_matches_cpu(wdt, xdt, ydt, m, n, k, fused):
    rng = make_rng()
    prog = Amk.Program.new(queues())
    x = add(prog, "x", xdt, (m, k))
    w = add(prog, "w", wdt, (n, k), Amk.BufferRole.CONSTANT)
    in_place = "in-place" in fused
    y = add(prog, "y", ydt, (m, n), Amk.BufferRole.OUTPUT)
    bias = add(prog, "bias", F32, (n,)) if "bias" in fused else -1
    res = y if in_place else (add(prog, "res", F32, (m, n)) if "residual" in fused else -1)
    norm = add(prog, "norm", BF16, (k,)) if "norm" in fused else -1
    wv = from_f32(wdt, rng.standard_normal(n * k).astype(np.float32) * 0.1)
    prog.set_buffer_data(w, GLib.Bytes.new(wv.tobytes()))
    prog.op_matmul(y, w, x, bias, res, norm, 1e-5)
    prog.compile()
    inputs = {x: (xdt, from_f32(xdt, rng.standard_normal(m * k).astype(np.float32)))}
    if bias >= 0:
        inputs[bias] = (F32, rng.standard_normal(n).astype(np.float32))
    if norm >= 0:
        inputs[norm] = (BF16, from_f32(BF16, rng.uniform(0.5, 1.5, k).astype(np.float32)))
    if res >= 0 and not in_place:
        inputs[res] = (F32, rng.standard_normal(m * n).astype(np.float32))
    if in_place:
        inputs[y] = (ydt, from_f32(ydt, rng.standard_normal(m * n).astype(np.float32)))
    cpu, gpu = run_both(prog, inputs, {y: (ydt, m * n)})[y]
    err = rel_err(gpu, cpu)
    print(f"# MATMUL {m}x{n}x{k} {fused}: GPU vs CPU executor {err:.2e}")
    # the GPU rounds X' to W's 16-bit type before the tensor cores, the CPU does not
    assert np.all(np.isfinite(gpu))
    assert err <= 1e-2


@pytest.mark.parametrize("wdt,xdt,ydt", [(BF16, F32, F32), (BF16, BF16, F32), (F16, BF16, BF16)],
                         ids=["bf16-w", "bf16-x", "f16-w-bf16-x-y"])
@pytest.mark.parametrize("m,n,k,fused", [
    (1, 136, 72, "none"), (5, 520, 1032, "bias+residual"), (8, 64, 2056, "residual-in-place"),
    (9, 300, 264, "bias"), (16, 2048, 128, "none"), (17, 136, 72, "residual"),
    (33, 520, 1032, "bias+residual-in-place"), (64, 1000, 136, "none"),
])
def test_matmul_few_rows_gpu_matches_cpu(wdt, xdt, ydt, m, n, k, fused):
    """Up to 64 rows without a fused norm: the tiles that stream W into registers, with
    K split over the warps (row counts around each multiple of 8, K not a multiple of
    the 64-column step)."""
    test_matmul_gpu_matches_cpu(wdt, xdt, ydt, m, n, k, fused)


@pytest.mark.parametrize("ydt", [F32, BF16], ids=["f32-y", "bf16-y"])
@pytest.mark.parametrize("m,n,k,fused", [
    (65, 136, 72, "none"), (100, 300, 264, "bias+residual"), (256, 520, 1032, "residual-in-place"),
    (300, 264, 2056, "bias"), (513, 129, 136, "bias+residual"), (2048, 384, 2048, "none"),
])
def test_matmul_wgmma_gpu_matches_cpu(ydt, m, n, k, fused):
    """Many rows of bf16 X and W without a norm: the warpgroup tiles (64 rows a
    warpgroup, rows, columns and K past the tile's edges zero-filled, tiles whose last
    warpgroups have no rows)."""
    test_matmul_gpu_matches_cpu(BF16, BF16, ydt, m, n, k, fused)


def test_matmul_one_x_read_with_two_k_gpu_matches_cpu():
    """One X buffer read by two MATMULs as [2048, 128] and [1024, 256]: its tensor map
    can fit only one k, so both read X without one (the mma.sync tile), and agree."""
    rng = make_rng()
    prog = Amk.Program.new(queues())
    x = add(prog, "x", BF16, (2048, 128))
    ws, ys = [], []
    for k, m in ((128, 2048), (256, 1024)):
        w = add(prog, f"w{k}", BF16, (136, k), Amk.BufferRole.CONSTANT)
        prog.set_buffer_data(w, GLib.Bytes.new(from_f32(BF16, rng.standard_normal(136 * k).astype(np.float32) * 0.1).tobytes()))
        y = add(prog, f"y{k}", F32, (m, 136), Amk.BufferRole.OUTPUT)
        prog.op_matmul(y, w, x, -1, -1, -1, 1e-5)
        ws.append(w), ys.append((y, m))
    prog.compile()
    inputs = {x: (BF16, from_f32(BF16, rng.standard_normal(2048 * 128).astype(np.float32)))}
    got = run_both(prog, inputs, {y: (F32, m * 136) for y, m in ys})
    for y, m in ys:
        cpu, gpu = got[y]
        assert np.all(np.isfinite(gpu))
        assert rel_err(gpu, cpu) <= 1e-2


def test_matmul_refuses_a_hand_set_configuration():
    """MATMUL's tiles need a multiple of 128 threads and their shared memory: a launcher
    set by hand below that says so before the launch."""
    prog = Amk.Program.new(queues())
    x = add(prog, "x", F32, (4, 64))
    w = add(prog, "w", BF16, (16, 64), Amk.BufferRole.CONSTANT)
    y = add(prog, "y", F32, (4, 16), Amk.BufferRole.OUTPUT)
    prog.set_buffer_data(w, GLib.Bytes.new(np.zeros(16 * 64, np.uint16).tobytes()))
    prog.op_matmul(y, w, x, -1, -1, -1, 0.0)
    prog.compile()
    gpu = Amk.Launcher(device=0)
    gpu.props.threads_per_block = 512
    gpu.props.dynamic_shared_memory = 1024
    gpu.load(prog)
    with pytest.raises(GLib.Error) as e:
        gpu.launch(None)
    assert e.value.matches(Amk.launch_error_quark(), Amk.LaunchError.REJECTED)
    assert "MATMUL" in e.value.message


def test_embed_rows_gpu_matches_cpu():
    rng = make_rng()
    vocab, dim, m = 300, 96, 37
    prog = Amk.Program.new(queues())
    tokens = add(prog, "tokens", I32, (m,))
    table = add(prog, "table", BF16, (vocab, dim), Amk.BufferRole.CONSTANT)
    out = add(prog, "out", F32, (m, dim), Amk.BufferRole.OUTPUT)
    prog.set_buffer_data(table, GLib.Bytes.new(from_f32(BF16, rng.standard_normal(vocab * dim)).tobytes()))
    prog.op_embed_rows(out, table, tokens)
    prog.compile()
    r = run_both(prog, {tokens: (I32, rng.integers(0, vocab, m).astype(np.int32))}, {out: (F32, m * dim)})
    cpu, gpu = r[out]
    assert cpu.tobytes() == gpu.tobytes()


def attention_case(rng, n_q, n_kv, d, max_ctx, n_seq, rows, cache_dt, qk_norm, rope, out_dt=F32):
    """A ROPE_ROWS + ATTN_ROWS program over `rows` (list of (seq, pos)) with random qkv
    and random earlier cache rows; returns (prog, inputs, outputs, buffers)."""
    m = len(rows)
    width = (n_q + 2 * n_kv) * d
    prog = Amk.Program.new(queues())
    qkv = add(prog, "qkv", F32, (m, width), Amk.BufferRole.STATE)
    shape = (n_seq, max_ctx, n_kv * d) if n_seq > 1 else (max_ctx, n_kv * d)
    kc = add(prog, "k_cache", cache_dt, shape, Amk.BufferRole.STATE)
    vc = add(prog, "v_cache", cache_dt, shape, Amk.BufferRole.STATE)
    pos = add(prog, "pos", I32, (m,))
    seq = add(prog, "seq", I32, (m,)) if n_seq > 1 else -1
    qn = add(prog, "q_norm", F32, (d,)) if qk_norm else -1
    kn = add(prog, "k_norm", F32, (d,)) if qk_norm else -1
    out = add(prog, "out", out_dt, (m, n_q * d), Amk.BufferRole.OUTPUT)
    prog.op_rope_rows(qkv, kc, vc, pos, seq, qn, kn, d, n_q, n_kv, 1e-6, rope["theta"],
                      rope.get("factor", 0.0), rope.get("low", 0.0), rope.get("high", 0.0),
                      rope.get("old_ctx", 0))
    prog.op_attention_rows(out, qkv, kc, vc, pos, seq, d, n_q, n_kv, 1.0 / np.sqrt(d))
    prog.compile()
    n_cache = n_seq * max_ctx * n_kv * d
    inputs = {
        qkv: (F32, rng.standard_normal(m * width).astype(np.float32)),
        kc: (cache_dt, from_f32(cache_dt, rng.standard_normal(n_cache).astype(np.float32))),
        vc: (cache_dt, from_f32(cache_dt, rng.standard_normal(n_cache).astype(np.float32))),
        pos: (I32, np.array([p for s, p in rows], np.int32)),
    }
    if seq >= 0:
        inputs[seq] = (I32, np.array([s for s, p in rows], np.int32))
    if qk_norm:
        inputs[qn] = (F32, rng.uniform(0.5, 1.5, d).astype(np.float32))
        inputs[kn] = (F32, rng.uniform(0.5, 1.5, d).astype(np.float32))
    outputs = {out: (out_dt, m * n_q * d), kc: (cache_dt, n_cache)}
    return prog, inputs, outputs, out, kc


@pytest.mark.parametrize("out_dt", [F32, BF16], ids=["f32-out", "bf16-out"])
@pytest.mark.parametrize("cache_dt", [F32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name,n_q,n_kv,d,rows_kind,qk_norm,rope", [
    ("llama-chunk", 32, 8, 64, "chunk", False, LLAMA3),
    ("qwen3-chunk", 16, 8, 128, "chunk", True, dict(theta=1000000.0)),
    ("llama-batch", 32, 8, 64, "batch", False, LLAMA3),
    ("smollm2-padded", 9, 3, 64, "padded", False, dict(theta=10000.0)),
])
def test_attention_rows_gpu_matches_cpu(out_dt, cache_dt, name, n_q, n_kv, d, rows_kind, qk_norm, rope):
    rng = make_rng()
    max_ctx = 512
    if rows_kind == "chunk":
        n_seq, rows = 1, [(0, 37 + i) for i in range(100)]
    elif rows_kind == "padded":
        n_seq, rows = 1, [(0, 5 + i) for i in range(20)] + [(0, -1)] * 12
    else:
        n_seq = 6
        rows = [(s, int(p)) for s, p in zip(range(n_seq), rng.integers(0, max_ctx, n_seq))]
    prog, inputs, outputs, out, kc = attention_case(rng, n_q, n_kv, d, max_ctx, n_seq, rows, cache_dt,
                                                    qk_norm, rope, out_dt)
    # the caches keep their random earlier rows: uploaded as inputs, not poisoned
    r = run_both(prog, inputs, outputs)
    (cpu_out, gpu_out), (cpu_k, gpu_k) = r[out], r[kc]
    tol = 1e-4 if cache_dt == F32 and out_dt == F32 else 2e-2
    err_out, err_k = rel_err(gpu_out, cpu_out), rel_err(gpu_k, cpu_k)
    print(f"# {name}: out {err_out:.2e}, k cache {err_k:.2e}")
    assert np.all(np.isfinite(gpu_out))
    assert err_out <= tol and err_k <= tol
