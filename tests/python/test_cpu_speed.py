# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The CPU executor's generation speed against this machine's memory bandwidth, in one
# run (bench/cpu_bandwidth.py): SmolLM2-135M (AMK_TEST_GGUF; skipped without it) must
# read its weights at 40% or more of the rate a plain copy reaches. Meson runs it alone.

import importlib.util
import os

import pytest

GGUF = os.environ.get('AMK_TEST_GGUF', '')
BENCH = os.path.join(os.path.dirname(__file__), '..', '..', 'bench', 'cpu_bandwidth.py')


@pytest.mark.skipif(not os.path.isfile(GGUF), reason='AMK_TEST_GGUF names no model file')
def test_generation_reads_weights_near_copy_speed():
    spec = importlib.util.spec_from_file_location('cpu_bandwidth', BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    best = 0.0
    for _ in range(3):   # a busy machine may slow one run
        rate, speed, weight_bytes = bench.measure(GGUF, 32)
        best = max(best, weight_bytes * speed / rate)
        print(f'copy {rate / 1e9:.2f} GB/s, {speed:.1f} tokens/s x {weight_bytes / 1e6:.1f} MB: '
              f'{100 * weight_bytes * speed / rate:.0f}% of the copy')
        if best >= 0.4:
            return
    pytest.fail(f'generation read its weights at {100 * best:.0f}% of the copy rate, under 40%')
