"""MATVEC on the paged build (AmkLauncher:paged: a loader warp streams W into shared-memory
pages, kernels/loader.cuh) against numpy and against the decode build, on random data:
rows of 2 KiB to 28 KiB (a page holds several rows, one, or part of one; rows crossing
page edges; a short last page), every fusion, several tiles per queue (the pages run on
from one instruction into the next), and queues that mix paged tiles with MATVECs the
loader must not overlap (a K that is no multiple of 1024, split-K tiles). Skips without
a GPU."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from amktest import Amk, add_op, make_rng, to_bytes  # noqa: E402
from test_matvec import MatvecCase, rel_err  # noqa: E402

pytestmark = pytest.mark.skipif(Amk.Launcher.get_device_count() == 0, reason="no CUDA device")

BF16, F32 = Amk.DType.BF16, Amk.DType.F32

CASES = {
    "k2048-norm-bias-residual": dict(rows=300, k=2048, norm=True, bias=True, residual="in-place"),
    "k8192-silu-up": dict(rows=40, k=8192, up=BF16, tile=5),
    "k3072-rows-cross-pages": dict(rows=77, k=3072, tile=13, residual="separate"),
    "k1024-short-last-page-bf16-y": dict(rows=50, k=1024, tile=13, ydt=BF16),
    "k14336-up-f32": dict(rows=24, k=14336, tile=3, up=F32),
    "k2304-not-paged": dict(rows=40, k=2304, tile=8),
    "k2048-split-k": dict(rows=64, k=2048, tile=16, splits=3, residual="in-place"),
}


def run_gpu(case, y_before, paged):
    gpu = Amk.Launcher(device=0, paged=paged)
    gpu.load(case.program)
    case.upload(gpu, y_before)
    gpu.launch(None)
    return case.output(gpu)


@pytest.mark.parametrize("name", CASES)
def test_paged_matvec(name):
    rng = make_rng()
    case = MatvecCase(rng, **CASES[name])
    y_before = case.y_before(rng)
    want = case.expected(y_before)
    paged = run_gpu(case, y_before, True)
    decode = run_gpu(case, y_before, False)
    tol = 1e-2 if case.dt["y"] == BF16 else 1e-5
    print(f"# {name}: paged vs numpy {rel_err(paged, want):.2e}, vs decode build "
          f"{rel_err(paged, decode):.2e}")
    assert rel_err(paged, want) < 1e-2
    assert rel_err(paged, decode) < tol


def test_paged_build_ran():
    """The paged build adds a row's products in another order than the decode build's
    ring (2 KiB spans, then the spans): some f32 sums differ in their last bits, which
    would not happen if the launcher had quietly run the decode build."""
    rng = make_rng()
    case = MatvecCase(rng, rows=64, k=8192, tile=8)
    y_before = case.y_before(rng)
    paged, decode = run_gpu(case, y_before, True), run_gpu(case, y_before, False)
    assert rel_err(paged, decode) < 1e-5
    assert np.any(paged != decode)


def test_paged_and_ring_matvecs_in_one_queue():
    """Tiles of four matrices interleaved on one queue, two of them paged (K = 2048,
    4096) and two on the ring's shared memory (K = 2304): the loader waits for each of
    those before it streams the pages after it."""
    rng = make_rng()
    cases = [MatvecCase(rng, rows=48, k=k, tile=8, queues=1) for k in (2048, 2304, 4096, 2304)]
    p = Amk.Program.new(1)
    refs = []
    for j, c in enumerate(cases):
        y = p.add_buffer(f"y{j}", F32, [c.rows], Amk.BufferRole.OUTPUT)
        w = p.add_buffer(f"w{j}", BF16, [c.rows, c.k], Amk.BufferRole.CONSTANT)
        x = p.add_buffer(f"x{j}", F32, [c.k], Amk.BufferRole.INPUT)
        p.set_buffer_data(w, to_bytes(c.data["w"]))
        refs.append((y, w, x))
    for r0 in range(0, 48, 8):
        for (y, w, x), c in zip(refs, cases):
            add_op(p, 0, Amk.Opcode.MATVEC, [y, w, x, -1, -1, -1],
                   dict(row0=r0, rows=8, k=c.k, eps=1e-5, k0=0, k_len=0))
    p.verify()
    gpu = Amk.Launcher(device=0, paged=True)
    gpu.load(p)
    for (y, w, x), c in zip(refs, cases):
        gpu.upload(x, to_bytes(c.data["x"]))
    gpu.launch(None)
    for (y, w, x), c in zip(refs, cases):
        got = np.frombuffer(gpu.download(y).get_data(), np.float32).astype(np.float64)
        err = rel_err(got, c.expected(None))
        print(f"# one queue, K = {c.k}: vs numpy {err:.2e}")
        assert err < 1e-2
