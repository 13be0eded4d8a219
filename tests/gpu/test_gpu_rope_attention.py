"""op_rope_attention (RoPE, the KV append and decode attention as one stage) on the GPU
against the CPU executor, on random data with the output poisoned: Llama-3.2-1B,
SmolLM2 and head-dim-128 shapes, bf16 and f32 caches, positions on one split and on
several, with the default launch (no dynamic shared memory: V read from the caches)
and with the MATVEC ring's (V staged in shared memory), there also with the position
written during the launch by a COPY (so that it cannot be read before the waits).
Skips without a GPU."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from amktest import Amk, make_rng, to_f32  # noqa: E402
from rope_attention import RopeAttention  # noqa: E402

pytestmark = pytest.mark.skipif(Amk.Launcher.get_device_count() == 0, reason="no CUDA device")

LLAMA3 = dict(theta=500000.0, factor=32.0, low=1.0, high=4.0, old_ctx=8192)
CASES = [
    pytest.param(32, 8, 64, 1024, LLAMA3, id="llama-3.2-1b"),
    pytest.param(9, 3, 64, 300, dict(theta=10000.0), id="smollm2"),
    pytest.param(4, 2, 128, 512, dict(theta=1000000.0), id="head-dim-128"),
]
RING_SMEM = 512 * 16 * 16 + 4 * 16384   # AMK_MATVEC_SMEM_BYTES


def rel_err(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.linalg.norm(got - want) / np.linalg.norm(want)


@pytest.mark.parametrize("ring,pos_copied", [(False, False), (True, False), (True, True)],
                         ids=["default", "ring-smem", "ring-smem-pos-copied"])
@pytest.mark.parametrize("cache", [Amk.DType.F32, Amk.DType.BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("n_q,n_kv,d,max_ctx,rope", CASES)
def test_rope_attention_gpu_matches_cpu(ring, pos_copied, cache, n_q, n_kv, d, max_ctx, rope):
    rng = make_rng()
    case = RopeAttention(n_q, n_kv, d, max_ctx, cache, rope, pos_copied=pos_copied)
    gpu = Amk.Launcher(device=0)
    if ring:
        gpu.props.threads_per_block = 512
        gpu.props.dynamic_shared_memory = RING_SMEM
    gpu.load(case.program)
    tol = 1e-5 if cache == Amk.DType.F32 else 1e-2
    for pos in (0, 64, max_ctx // 2 + 3, max_ctx - 1):
        case.random_data(rng)
        cpu = Amk.CpuExecutor.new(case.program)
        case.load(cpu, pos)
        cpu.run()
        case.load(gpu, pos)
        gpu.launch(None)
        (out, kc, vc), (want, kw, vw) = case.results(gpu), case.results(cpu)
        err = rel_err(out, want)
        print(f"# pos {pos}: GPU vs CPU executor {err:.2e}")
        assert err <= tol
        assert rel_err(to_f32(cache, kc[pos]), to_f32(cache, kw[pos])) <= tol
        assert rel_err(to_f32(cache, vc[pos]), to_f32(cache, vw[pos])) <= tol
        others = np.arange(max_ctx) != pos
        assert kc[others].tobytes() == kw[others].tobytes()
        assert vc[others].tobytes() == vw[others].tobytes()
