"""A Llama-3.2-1B-shaped layer (random bf16 weights, context 1024) built from the op API:
the GPU against the CPU executor and numpy, then its time against the bytes it must move.
Skips without a GPU."""
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from amktest import Amk, make_rng  # noqa: E402
from llama_layer import LLAMA_1B, Layer, rel_err  # noqa: E402

pytestmark = pytest.mark.skipif(Amk.Launcher.get_device_count() == 0, reason="no CUDA device")

COPY_TBPS = 4.16   # device copy bandwidth measured on the H200 (docs/performance.md)


@pytest.fixture(scope="module", params=[True, False], ids=["rope-attention", "rope-kv"])
def layer(request):
    return Layer(make_rng(), LLAMA_1B, 132, LLAMA_1B["context"] - 1, request.param)


def test_layer_gpu_matches_cpu_and_numpy(layer):
    gpu = Amk.Launcher(device=0)
    gpu.load(layer.p)
    layer.load(gpu)
    gpu.launch(None)
    got = layer.result(gpu)

    cpu = Amk.CpuExecutor.new(layer.p)
    layer.load(cpu)
    cpu.run()
    want_cpu = layer.result(cpu)
    want = layer.reference()
    e_cpu, e_ref = rel_err(got, want_cpu), rel_err(got, want)
    print(f"# PASS layer: GPU vs CPU executor {e_cpu:.2e}, vs numpy {e_ref:.2e}")
    assert e_cpu < 1e-2 and e_ref < 1e-2


def test_layer_time(layer):
    gpu = Amk.Launcher(device=0)
    gpu.load(layer.p)
    times = []
    for i in range(23):
        layer.load(gpu)   # the same step again: position and caches restored
        t0 = time.perf_counter()
        gpu.launch(None)
        times.append(time.perf_counter() - t0)
    t = float(np.median(times[3:]))
    tbps = layer.bytes_moved() / t / 1e12
    ok, makespan, total, path = layer.p.estimate_schedule()
    print(f"# layer: {layer.bytes_moved() / 1e6:.1f} MB in {t * 1e6:.1f} us = {tbps:.2f} TB/s, "
          f"{tbps / COPY_TBPS:.2f} x copy; estimated makespan {makespan / 1000:.1f} us, "
          f"critical path {path / 1000:.1f} us")
    attr = gpu.kernel_attributes(gpu.props.threads_per_block, 0)
    print(f"# megakernel: {attr.num_regs} registers, {attr.static_smem_bytes} B static smem, "
          f"{attr.local_bytes} B local, {attr.blocks_per_sm} blocks/SM")
