"""The block-quantized weight types (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) on the GPU against
the CPU executor (which tests/python/test_quantized_ops.py holds to the gguf package's
numpy reference), random blocks with sane scales, outputs poisoned: MATVEC on both of its
pipelines (the shared-memory ring the launcher's defaults give, and direct loads without
dynamic shared memory) with every fusion and split columns, MATMUL on its few-rows and
block tiles, and EMBED.

Tolerances: MATVEC decodes the same values and accumulates in another order, so each
output is within 1e-5 of the sum of its terms' magnitudes, plus, for the ring, which holds
x' as 15-bit integers of each 32 columns' maximum, sum |W| times half that step; MATMUL
rounds the decoded weights and X' to bf16 for the tensor cores (1e-2 relative, as for bf16
weights); EMBED gives the CPU executor's bits. Skips without a GPU."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from amktest import (Amk, BLOCK_TYPES, GLib, add_op, download, from_f32,  # noqa: E402
                     make_rng, poison, random_blocks, to_f32, upload)

pytestmark = pytest.mark.skipif(Amk.Launcher.get_device_count() == 0, reason="no CUDA device")

F32, BF16, I32 = Amk.DType.F32, Amk.DType.BF16, Amk.DType.I32
NONE = -1
IDS = [Amk.DType(t).value_nick for t in BLOCK_TYPES]


def run_both(prog, inputs, outputs, smem=None):
    """prog on the CPU executor and the launcher (its own configuration, or `smem` bytes
    of dynamic shared memory); {buffer: (cpu, gpu)} as float64."""
    got = []
    for ex in (Amk.CpuExecutor.new(prog), Amk.Launcher(device=0)):
        if isinstance(ex, Amk.Launcher):
            if smem is not None:
                ex.props.dynamic_shared_memory = smem
            ex.load(prog)
        for buf, (dtype, array) in inputs.items():
            upload(ex, buf, dtype, array)
        for buf, (dtype, n) in outputs.items():
            if buf not in inputs:
                upload(ex, buf, dtype, poison(dtype, n))
        ex.launch(None) if isinstance(ex, Amk.Launcher) else ex.run()
        got.append({buf: to_f32(dtype, download(ex, buf, dtype)).astype(np.float64)
                    for buf, (dtype, n) in outputs.items()})
    return {buf: (got[0][buf], got[1][buf]) for buf in outputs}


def weights(rng, prog, dtype, n, k):
    w = prog.add_buffer("w", dtype, [n, k], Amk.BufferRole.CONSTANT)
    prog.set_buffer_data(w, GLib.Bytes.new(random_blocks(rng, dtype, n, k).tobytes()))
    return w


def decoded(prog, w, dtype, n, k):
    """W's values as the CPU executor decodes them (EMBED of every row), float64."""
    p = Amk.Program.new(1)
    t = p.add_buffer("t", dtype, [n, k], Amk.BufferRole.CONSTANT)
    p.set_buffer_data(t, prog.get_buffer_data(w))
    ids = p.add_buffer("ids", I32, [n], Amk.BufferRole.INPUT)
    out = p.add_buffer("out", F32, [n, k], Amk.BufferRole.OUTPUT)
    p.op_embed_rows(out, t, ids)
    p.compile()
    ex = Amk.CpuExecutor.new(p)
    upload(ex, ids, I32, np.arange(n, dtype=np.int32))
    ex.run()
    return to_f32(F32, download(ex, out, F32)).astype(np.float64).reshape(n, k)


def matvec_case(rng, dtype, rows, blocks, fused, tile=16, splits=1):
    """A MATVEC over raw instructions (tiles of `tile` rows, each row's blocks split in
    `splits` column ranges, round robin over the queues), its inputs, and the terms'
    magnitude |W| |x'| + |bias| + |residual| for the bound."""
    k = blocks * BLOCK_TYPES[dtype][0]
    prog = Amk.Program.new(Amk.Launcher(device=0).get_preferred_queues())
    w = weights(rng, prog, dtype, rows, k)
    x = prog.add_buffer("x", BF16, [k], Amk.BufferRole.INPUT)
    in_place = splits > 1
    y = prog.add_buffer("y", F32, [rows], Amk.BufferRole.STATE if in_place else Amk.BufferRole.OUTPUT)
    vec = {}
    bias = res = norm = up = NONE
    if "bias" in fused:
        bias = vec["bias"] = prog.add_buffer("bias", F32, [rows], Amk.BufferRole.INPUT)
    if in_place:
        res = y
    elif "residual" in fused:
        res = vec["res"] = prog.add_buffer("res", BF16, [rows], Amk.BufferRole.INPUT)
    if "norm" in fused:
        norm = vec["norm"] = prog.add_buffer("norm", BF16, [k], Amk.BufferRole.INPUT)
    if "gate" in fused:
        up = vec["up"] = prog.add_buffer("up", BF16, [k], Amk.BufferRole.INPUT)
    refs = [y, w, x, bias, res, norm] + ([up] if up != NONE else [])
    t = 0
    for r0 in range(0, rows, tile):
        for s in range(splits):
            b0, b1 = s * blocks // splits, (s + 1) * blocks // splits
            v = BLOCK_TYPES[dtype][0]
            cols = [b0 * v, (b1 - b0) * v] if splits > 1 else [0, 0]
            add_op(prog, t % prog.get_num_queues(), Amk.Opcode.MATVEC, refs,
                   dict(row0=r0, rows=min(tile, rows - r0), k=k, eps=1e-5, k0=cols[0], k_len=cols[1]))
            t += 1
    prog.verify()
    data = {x: from_f32(BF16, rng.standard_normal(k).astype(np.float32))}
    for name, b in vec.items():
        n = k if name in ("norm", "up") else rows
        dt = F32 if name == "bias" else BF16
        data[b] = from_f32(dt, rng.uniform(0.5, 1.5, n).astype(np.float32) * rng.choice([-1, 1], n))
    if in_place:
        data[y] = rng.standard_normal(rows).astype(np.float32)
    xv = to_f32(BF16, data[x]).astype(np.float64)
    if norm != NONE:
        xv = xv / np.sqrt(np.mean(xv * xv) + 1e-5) * to_f32(BF16, data[norm])
    if up != NONE:
        xv = xv / (1 + np.exp(-xv)) * to_f32(BF16, data[up])
    wd = np.abs(decoded(prog, w, dtype, rows, k))
    # the ring holds x' as 15-bit integers of each 32 columns' maximum: half a step each
    # (times 1e5: the bound is 1e-5 of size)
    step = np.repeat(np.abs(xv).reshape(-1, 32).max(axis=1), 32) / 32766
    size = wd @ np.abs(xv) + 1e5 * (wd @ step)
    for b in (bias, res):
        if b != NONE:
            size = size + np.abs(to_f32(F32 if b in (bias, y) else BF16, data[b]))
    inputs = {b: (F32 if b in (bias, y) else BF16, a) for b, a in data.items()}
    return prog, y, inputs, size


@pytest.mark.parametrize("dtype", list(BLOCK_TYPES), ids=IDS)
@pytest.mark.parametrize("rows,blocks,fused,smem,tile", [
    (1, 2, "none", None, 16), (13, 3, "norm", None, 16), (64, 8, "bias+residual", None, 16),
    (300, 9, "gate", None, 16), (40, 70, "norm+bias", None, 16),
    (13, 3, "norm", 0, 16), (64, 9, "gate", 0, 16), (300, 2, "bias+residual", 0, 16),
    # many rows a warp: the ring's stages run on from one row into the next (rows of 70
    # blocks), or hold several short rows (3 blocks)
    (200, 70, "norm", None, 100), (96, 3, "gate", None, 96), (130, 9, "bias+residual", None, 65),
])
def test_matvec_gpu_matches_cpu(dtype, rows, blocks, fused, smem, tile):
    prog, y, inputs, size = matvec_case(make_rng(), dtype, rows, blocks, fused, tile=tile)
    cpu, gpu = run_both(prog, inputs, {y: (F32, rows)}, smem)[y]
    err = np.max(np.abs(gpu - cpu) / size)
    print(f"# MATVEC {dtype.value_nick} {rows}x{blocks} blocks, tiles of {tile} rows, {fused}, "
          f"smem={smem}: max |gpu - cpu| / |terms| {err:.3g}")
    assert np.all(np.isfinite(gpu)) and err <= 1e-5


@pytest.mark.parametrize("dtype", list(BLOCK_TYPES), ids=IDS)
@pytest.mark.parametrize("fused,smem", [("none", None), ("norm+bias", None), ("gate", 0)])
def test_matvec_split_k_gpu_matches_cpu(dtype, fused, smem):
    """Each row's blocks in three column ranges on different queues, adding onto y
    (its own residual) atomically."""
    prog, y, inputs, size = matvec_case(make_rng(), dtype, 24, 40, fused, tile=8, splits=3)
    cpu, gpu = run_both(prog, inputs, {y: (F32, 24)}, smem)[y]
    assert np.all(np.isfinite(gpu)) and np.max(np.abs(gpu - cpu) / size) <= 1e-5


Q8_0, Q6_K = Amk.DType.Q8_0, Amk.DType.Q6_K


@pytest.mark.parametrize("dtype,rows,blocks,fused,tile,splits", [
    (Q8_0, 40, 64, "norm", 16, 1), (Q8_0, 37, 72, "gate", 16, 1),
    (Q8_0, 130, 136, "bias+residual", 65, 1), (Q8_0, 24, 256, "norm", 8, 1),
    (Q8_0, 24, 48, "none", 8, 3), (Q8_0, 24, 16, "norm+bias", 8, 3),
    (Q6_K, 40, 8, "norm", 16, 1), (Q6_K, 37, 16, "gate", 16, 1),
    (Q6_K, 130, 32, "bias+residual", 65, 1), (Q6_K, 24, 56, "norm", 8, 1),
    (Q6_K, 24, 24, "none", 8, 3), (Q6_K, 24, 12, "norm+bias", 8, 3),
], ids=lambda v: v.value_nick if isinstance(v, Amk.DType) else None)
def test_matvec_unaligned_columns_gpu_matches_cpu(dtype, rows, blocks, fused, tile, splits):
    """The 2-byte aligned blocks run COLUMNS where the tile's rows and first column are
    whole groups of 8 blocks (Q8_0: 256 columns, lanes owning two blocks; Q6_K: 2048, four
    lanes a block, block b 2 b bytes into its words): one slice, a last short slice (Q8_0)
    or two slices (Q6_K), many rows a warp, K = 8192 (Q6_K also 14336), split columns of
    whole groups; the last case's ranges start mid-group and run the ring."""
    prog, y, inputs, size = matvec_case(make_rng(), dtype, rows, blocks, fused,
                                        tile=tile, splits=splits)
    cpu, gpu = run_both(prog, inputs, {y: (F32, rows)})[y]
    err = np.max(np.abs(gpu - cpu) / size)
    print(f"# MATVEC {dtype.value_nick} {rows}x{blocks} blocks, tiles of {tile}, {splits} ranges, "
          f"{fused}: max |gpu - cpu| / |terms| {err:.3g}")
    assert np.all(np.isfinite(gpu)) and err <= 1e-5


@pytest.mark.parametrize("dtype", [Amk.DType.Q4_K, Amk.DType.Q5_K], ids=lambda v: v.value_nick)
@pytest.mark.parametrize("rows,blocks,fused,tile,splits", [
    (40, 1, "norm", 16, 1), (64, 1, "gate", 64, 1), (24, 3, "none", 8, 3),
])
def test_matvec_one_block_tiles_gpu_matches_cpu(dtype, rows, blocks, fused, tile, splits):
    """Q4_K and Q5_K tiles of one block (256 columns, also as split ranges of a row) run
    the ring: COLUMNS' x' record of 512 columns would not fit the room staged for them."""
    prog, y, inputs, size = matvec_case(make_rng(), dtype, rows, blocks, fused,
                                        tile=tile, splits=splits)
    cpu, gpu = run_both(prog, inputs, {y: (F32, rows)})[y]
    assert np.all(np.isfinite(gpu)) and np.max(np.abs(gpu - cpu) / size) <= 1e-5


@pytest.mark.parametrize("dtype", list(BLOCK_TYPES), ids=IDS)
@pytest.mark.parametrize("m,n,blocks,fused", [
    (1, 40, 2, "none"), (7, 136, 3, "bias"), (37, 200, 2, "residual"),
    (100, 136, 3, "norm"), (256, 264, 2, "none"),
])
def test_matmul_gpu_matches_cpu(dtype, m, n, blocks, fused):
    rng = make_rng()
    k = blocks * BLOCK_TYPES[dtype][0]
    prog = Amk.Program.new(Amk.Launcher(device=0).get_preferred_queues())
    w = weights(rng, prog, dtype, n, k)
    x = prog.add_buffer("x", BF16, [m, k], Amk.BufferRole.INPUT)
    y = prog.add_buffer("y", F32, [m, n], Amk.BufferRole.OUTPUT)
    bias = prog.add_buffer("bias", F32, [n], Amk.BufferRole.INPUT) if "bias" in fused else NONE
    res = prog.add_buffer("res", F32, [m, n], Amk.BufferRole.INPUT) if "residual" in fused else NONE
    norm = prog.add_buffer("norm", BF16, [k], Amk.BufferRole.INPUT) if "norm" in fused else NONE
    prog.op_matmul(y, w, x, bias, res, norm, 1e-5)
    prog.compile()
    inputs = {x: (BF16, from_f32(BF16, rng.standard_normal(m * k).astype(np.float32)))}
    if bias != NONE:
        inputs[bias] = (F32, rng.standard_normal(n).astype(np.float32))
    if res != NONE:
        inputs[res] = (F32, rng.standard_normal(m * n).astype(np.float32))
    if norm != NONE:
        inputs[norm] = (BF16, from_f32(BF16, rng.uniform(0.5, 1.5, k).astype(np.float32)))
    cpu, gpu = run_both(prog, inputs, {y: (F32, m * n)})[y]
    err = np.linalg.norm(gpu - cpu) / np.linalg.norm(cpu)
    print(f"# MATMUL {dtype.value_nick} {m}x{n}x{k} {fused}: GPU vs CPU executor {err:.2e}")
    assert np.all(np.isfinite(gpu)) and err <= 1e-2


@pytest.mark.parametrize("dtype", list(BLOCK_TYPES), ids=IDS)
@pytest.mark.parametrize("rows_op", [False, True])
def test_embed_gpu_matches_cpu(dtype, rows_op):
    rng = make_rng()
    vocab, dim = 50, 3 * BLOCK_TYPES[dtype][0]
    prog = Amk.Program.new(Amk.Launcher(device=0).get_preferred_queues())
    table = prog.add_buffer("table", dtype, [vocab, dim], Amk.BufferRole.CONSTANT)
    prog.set_buffer_data(table, GLib.Bytes.new(random_blocks(rng, dtype, vocab, dim).tobytes()))
    n = 9 if rows_op else 1
    ids = prog.add_buffer("ids", I32, [n], Amk.BufferRole.INPUT)
    out = prog.add_buffer("out", F32, [n, dim] if rows_op else [dim], Amk.BufferRole.OUTPUT)
    if rows_op:
        prog.op_embed_rows(out, table, ids)
    else:
        prog.op_embed(out, table, ids, 0)
    prog.compile()
    r = run_both(prog, {ids: (I32, rng.integers(0, vocab, n).astype(np.int32))}, {out: (F32, n * dim)})
    cpu, gpu = r[out]
    assert cpu.tobytes() == gpu.tobytes()


def test_launcher_supports_them():
    launcher = Amk.Launcher(device=0)
    for dtype in BLOCK_TYPES:
        assert launcher.supports_dtype(dtype)


GGUF = os.environ.get('AMK_TEST_GGUF', '')


@pytest.mark.skipif(not os.path.isfile(GGUF), reason="set AMK_TEST_GGUF to SmolLM2-135M-Instruct's GGUF")
def test_model_expands_them_where_bf16_fits():
    """The GPU's MATVEC streams bf16 faster than it decodes blocks on the ring: a model
    that fits in bf16 is expanded (SmolLM2's Q4_1 matrices, and its Q8_0 token embedding,
    whose rows of 576 COLUMNS does not take), unless keep-quantized. (Q4_K, Q5_K and
    Q8_0 of rows of 256 stay: tool-quantize-hf checks `amk info`'s count.)"""
    sizes = {}
    for keep in (False, True):
        m = Amk.Model(path=GGUF, keep_quantized=keep)
        gen = Amk.Generator.new(m, Amk.Launcher(device=0))
        assert gen.generate("The capital of France is", 3, None).startswith("The capital of France is")
        sizes[keep] = m.props.weight_bytes
    cpu = Amk.Model(path=GGUF)
    Amk.Generator.new(cpu, Amk.CpuExecutor.new_empty()).prefill("Hi", None)
    assert sizes[False] > sizes[True] == cpu.props.weight_bytes > 0

