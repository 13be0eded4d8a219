"""A whole Llama-style layer from the op API, compiled, on the CPU executor, against
numpy in float64 (small shapes; Llama-3.2-1B shapes run in the gpu suite)."""
import pytest

from amktest import Amk, make_rng
from llama_layer import SMALL, Layer, rel_err


@pytest.mark.parametrize("fused_rope", [True, False], ids=["rope-attention", "rope-kv"])
@pytest.mark.parametrize("pos", [0, 1, 17, SMALL["context"] - 1])
@pytest.mark.parametrize("queues", [1, 7, 32])
def test_layer_matches_numpy(pos, queues, fused_rope):
    rng = make_rng()
    layer = Layer(rng, SMALL, queues, pos, fused_rope)
    cpu = Amk.CpuExecutor.new(layer.p)
    layer.load(cpu)
    cpu.run()
    assert rel_err(layer.result(cpu), layer.reference()) < 1e-2


@pytest.mark.parametrize("fused_rope", [True, False], ids=["rope-attention", "rope-kv"])
def test_layer_with_llama3_rope_scaling(fused_rope):
    cfg = dict(SMALL, theta=500000.0, factor=32.0, low=1.0, high=4.0, original=8192)
    layer = Layer(make_rng(), cfg, 16, 11, fused_rope)
    cpu = Amk.CpuExecutor.new(layer.p)
    layer.load(cpu)
    cpu.run()
    assert rel_err(layer.result(cpu), layer.reference()) < 1e-2


@pytest.mark.parametrize("fused_rope", [True, False], ids=["rope-attention", "rope-kv"])
def test_layer_schedule_is_near_its_bound(fused_rope):
    layer = Layer(make_rng(), SMALL, 32, 5, fused_rope)
    ok, makespan, total, path = layer.p.estimate_schedule()
    assert ok
    assert makespan <= 1.15 * max(total / 32, path)


@pytest.mark.parametrize("fused_rope", [True, False], ids=["rope-attention", "rope-kv"])
def test_layer_repeated_matches_numpy(fused_rope):
    """Three passes of the layer in one program, each appending at the same position."""
    layer = Layer(make_rng(), SMALL, 16, 9, fused_rope, repeat=3)
    cpu = Amk.CpuExecutor.new(layer.p)
    layer.load(cpu)
    cpu.run()
    assert rel_err(layer.result(cpu), layer.reference()) < 1e-2
