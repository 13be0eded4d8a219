#!/usr/bin/env python3
"""make-quant-fixtures.py: writes tests/data/quants.gguf, the reference of test-gguf's
dequantization test: for each block-quantized type amk-glib reads, a tensor of random
blocks ("q.<TYPE>", two rows of two to four blocks each) and beside it "ref.<TYPE>", the
same values as bf16: the gguf package's numpy dequantization (gguf.quants.dequantize, the
reference the GGUF format's maintainers keep), rounded to bf16 to nearest even.

Needs numpy and the gguf package (pip install gguf; 0.19.0 wrote the file in the tree).
The block scales are random finite f16 values; every other byte is random.

    python3 tests/data/make-quant-fixtures.py tests/data/quants.gguf

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES, GGUFWriter, quants

# type: byte offsets of its f16 scales inside a block
SCALES = {
    T.Q8_0: (0,), T.Q4_0: (0,), T.Q4_1: (0, 2), T.Q5_0: (0,), T.Q5_1: (0, 2),
    T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,),
}


def bf16_bits(f32):
    u = np.asarray(f32, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main(out):
    rng = np.random.default_rng(20261204)
    writer = GGUFWriter(out, "amk-quant-fixtures")
    for qtype, offsets in SCALES.items():
        block, size = GGML_QUANT_SIZES[qtype]
        per_row = 2 if block == 256 else 4
        rows = 2
        raw = rng.integers(0, 256, (rows * per_row, size), dtype=np.uint8)
        for off in offsets:
            scale = (rng.standard_normal(rows * per_row) * (0.05 if block == 256 else 0.5)).astype(np.float16)
            raw[:, off:off + 2] = scale.view(np.uint8).reshape(-1, 2)
        values = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(rows, per_row * block)
        assert np.isfinite(values).all()
        # (the writer takes a quantized tensor's shape in bytes)
        writer.add_tensor(f"q.{qtype.name}", raw.reshape(rows, per_row * size), raw_dtype=qtype)
        writer.add_tensor(f"ref.{qtype.name}", bf16_bits(values).view(np.uint8), raw_dtype=T.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1])
