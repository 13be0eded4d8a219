"""A Llama-3.2-1B-shaped layer (random bf16 weights, context 1024) built from the op API:
the GPU against the CPU executor and numpy, then its time against the bytes it must move.
Skips without a GPU."""
import os
import sys

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


@pytest.mark.parametrize("paged", [False, True], ids=["decode-build", "paged"])
def test_layer_gpu_matches_cpu_and_numpy(layer, paged):
    gpu = Amk.Launcher(device=0, paged=paged)
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
    print(f"# PASS layer (paged {paged}): GPU vs CPU executor {e_cpu:.2e}, vs numpy {e_ref:.2e}")
    assert e_cpu < 1e-2 and e_ref < 1e-2


def test_layer_time(layer):
    """Both builds alternating (AmkLauncher:paged), so the ratio is of one run."""
    gpus = {paged: Amk.Launcher(device=0, paged=paged) for paged in (False, True)}
    times = {paged: [] for paged in gpus}
    for gpu in gpus.values():
        gpu.load(layer.p)
    for i in range(23):
        for paged, gpu in gpus.items():
            layer.load(gpu)   # the same step again: position and caches restored
            gpu.launch(None)
            times[paged].append(gpu.get_last_launch_time() * 1e-3)  # device time, ms -> s
    ok, makespan, total, path = layer.p.estimate_schedule()
    for paged in gpus:
        t = float(np.median(times[paged][3:]))
        tbps = layer.bytes_moved() / t / 1e12
        print(f"# layer (paged {paged}): {layer.bytes_moved() / 1e6:.1f} MB in {t * 1e6:.1f} us "
              f"(device time) = "
              f"{tbps:.2f} TB/s, {tbps / COPY_TBPS:.2f} x copy; estimated makespan "
              f"{makespan / 1000:.1f} us, critical path {path / 1000:.1f} us")
    print(f"# layer: paged / decode build "
          f"{np.median(times[True][3:]) / np.median(times[False][3:]):.3f}")
    gpu = gpus[False]
    attr = gpu.kernel_attributes(gpu.props.threads_per_block, 0)
    print(f"# megakernel: {attr.num_regs} registers, {attr.static_smem_bytes} B static smem, "
          f"{attr.local_bytes} B local, {attr.blocks_per_sm} blocks/SM")
