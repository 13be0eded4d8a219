#!/usr/bin/env python3
"""torch_layer.py: the PyTorch baseline of bench/layer-trace.py: the same Llama-3.2-1B
layer (tests/python/llama_layer.py: hidden 2048, 32 query / 8 key-value heads of 64,
FFN 8192, bf16 weights and KV caches, position 1023 of a 1024 context, Llama-3 RoPE
scaling) as one decode step in PyTorch, captured once as a CUDA graph and replayed.

Run on the GPU machine with the PyTorch virtual environment:
    /opt/torch/.venv/bin/python3 bench/torch_layer.py [--repeats 200] [--compile]
    /opt/torch/.venv/bin/python3 bench/torch_layer.py --model [--pos 64]

--model times the whole decode step of a Llama-3.2-1B-shaped model instead: the token's
embedding row, 16 such layers (each with its own weights and caches, attending to
positions 0 .. --pos), the final norm, the 128256 x 2048 output matrix and the argmax,
captured as one CUDA graph and replayed.

Activations are bf16 (the usual decode setting; amk keeps them in fp32), matmuls go
through cuBLAS (F.linear), attention through scaled_dot_product_attention with GQA.
--compile also times torch.compile(mode="max-autotune-no-cudagraphs") of the same step
(the layer, or with --model the whole decode step) inside the graph (minutes of
autotuning). The time per step is CUDA-event time of
replaying a graph that holds 20 steps, divided by 20, median of the repeats. Bytes are
those of llama_layer.Layer.bytes_moved: weights plus the attended cache.

SPDX-License-Identifier: LGPL-2.1-or-later
"""
import argparse
import math
import statistics

import torch
import torch.nn.functional as F

CFG = dict(hidden=2048, heads=32, kv_heads=8, head_dim=64, ffn=8192, context=1024,
           theta=500000.0, factor=32.0, low=1.0, high=4.0, original=8192)
COPY_TBPS = 4.16
STEPS_PER_GRAPH = 20


def inv_freq(c):
    hd = c["head_dim"]
    inv = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    wavelen = 2 * math.pi / inv
    low_wl, high_wl = c["original"] / c["low"], c["original"] / c["high"]
    scaled = torch.where(wavelen > low_wl, inv / c["factor"], inv)
    smooth = (c["original"] / wavelen - c["low"]) / (c["high"] - c["low"])
    mid = (1 - smooth) * scaled / c["factor"] + smooth * scaled
    between = (wavelen >= high_wl) & (wavelen <= low_wl)
    return torch.where(between, mid, scaled)


class Layer:
    def __init__(self, dev, seed=1, pos=None):
        c = CFG
        h, nq, nkv, hd, f, ctx = (c[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "ffn", "context"))
        if pos is not None:
            ctx = pos + 1      # the cache holds exactly the attended positions
        g = torch.Generator(device=dev).manual_seed(seed)
        w = lambda r, k: (torch.randn(r, k, device=dev, generator=g) / math.sqrt(k)).to(torch.bfloat16)
        self.wq, self.wk, self.wv, self.wo = w(nq * hd, h), w(nkv * hd, h), w(nkv * hd, h), w(h, nq * hd)
        self.wg, self.wu, self.wd = w(f, h), w(f, h), w(h, f)
        self.n1 = torch.ones(h, device=dev, dtype=torch.bfloat16)
        self.n2 = torch.ones(h, device=dev, dtype=torch.bfloat16)
        self.kc = torch.randn(1, nkv, ctx, hd, device=dev, generator=g).to(torch.bfloat16)
        self.vc = torch.randn(1, nkv, ctx, hd, device=dev, generator=g).to(torch.bfloat16)
        self.x = torch.randn(1, h, device=dev, generator=g).to(torch.bfloat16)
        self.ctx = ctx
        self.pos = torch.tensor([ctx - 1], device=dev)
        ang = (ctx - 1) * inv_freq(c)
        self.cos = torch.cat([ang.cos(), ang.cos()]).to(dev, torch.float32)
        self.sin = torch.cat([ang.sin(), ang.sin()]).to(dev, torch.float32)

    def weight_bytes(self):
        ws = [self.wq, self.wk, self.wv, self.wo, self.wg, self.wu, self.wd, self.n1, self.n2]
        return sum(t.numel() * t.element_size() for t in ws)

    def bytes_moved(self):
        c = CFG
        return self.weight_bytes() + 2 * 2 * self.ctx * c["kv_heads"] * c["head_dim"]

    def rope(self, t):
        hd = CFG["head_dim"]
        a, b = t[..., : hd // 2], t[..., hd // 2:]
        rot = torch.cat([-b, a], dim=-1)
        return (t.float() * self.cos + rot.float() * self.sin).to(torch.bfloat16)

    def step(self, x):
        c = CFG
        nq, nkv, hd = c["heads"], c["kv_heads"], c["head_dim"]
        xn = F.rms_norm(x, (c["hidden"],), self.n1, 1e-5)
        q = self.rope(F.linear(xn, self.wq).view(1, nq, 1, hd))
        k = self.rope(F.linear(xn, self.wk).view(1, nkv, 1, hd))
        v = F.linear(xn, self.wv).view(1, nkv, 1, hd)
        self.kc.index_copy_(2, self.pos, k)
        self.vc.index_copy_(2, self.pos, v)
        a = F.scaled_dot_product_attention(q, self.kc, self.vc, enable_gqa=True)
        x = x + F.linear(a.reshape(1, nq * hd), self.wo)
        xn = F.rms_norm(x, (c["hidden"],), self.n2, 1e-5)
        return x + F.linear(F.silu(F.linear(xn, self.wg)) * F.linear(xn, self.wu), self.wd)


class Model:
    """Embedding, 16 layers, final norm, output matrix, argmax: one decode step."""
    VOCAB, LAYERS = 128256, 16

    def __init__(self, dev, pos):
        h = CFG["hidden"]
        g = torch.Generator(device=dev).manual_seed(99)
        self.layers = [Layer(dev, seed=i + 1, pos=pos) for i in range(self.LAYERS)]
        self.embed = (torch.randn(self.VOCAB, h, device=dev, generator=g) / 4).to(torch.bfloat16)
        self.norm = torch.ones(h, device=dev, dtype=torch.bfloat16)
        self.token = torch.tensor([7], device=dev)

    def bytes_moved(self):
        return sum(l.bytes_moved() for l in self.layers) + 2 * self.embed.numel() + 2 * 2048

    def step(self, token):
        x = self.embed[token]
        for layer in self.layers:
            x = layer.step(x)
        x = F.rms_norm(x, (CFG["hidden"],), self.norm, 1e-5)
        return torch.argmax(F.linear(x, self.embed), dim=-1)   # tied, as Llama-3.2-1B


def graph_time_us(fn, x, repeats):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x
        for _ in range(STEPS_PER_GRAPH):
            y = fn(y)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / STEPS_PER_GRAPH)
    return statistics.median(times)


def copy_tbps(dev):
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(10):
        dst.copy_(src)
    b.record()
    b.synchronize()
    return 2 * n * 10 / (a.elapsed_time(b) / 1000.0) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--model", action="store_true")
    ap.add_argument("--pos", type=int, default=64)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_layer: no CUDA device")
        return 77
    dev = torch.device("cuda")
    if args.model:
        model = Model(dev, args.pos)
        print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}")
        variants = [("eager, CUDA graph", model.step)]
        if args.compile:
            variants.append(("torch.compile max-autotune, CUDA graph",
                             torch.compile(model.step, mode="max-autotune-no-cudagraphs")))
        with torch.no_grad():
            for name, fn in variants:
                us = graph_time_us(fn, model.token, max(args.repeats // 10, 10))
                tbps = model.bytes_moved() / (us * 1e-6) / 1e12
                print(f"TORCH_MODEL {name}: {us / 1000:.3f} ms per decode step at position "
                      f"{args.pos}, {tbps:.2f} TB/s over {model.bytes_moved() / 1e6:.1f} MB",
                      flush=True)
        return 0
    layer = Layer(dev)
    mb = layer.bytes_moved() / 1e6
    copy = copy_tbps(dev)
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}")
    print(f"COPY {copy:.2f} TB/s (read + write, 1 GiB device-to-device)")
    variants = [("eager, CUDA graph", layer.step)]
    if args.compile:
        variants.append(("torch.compile max-autotune, CUDA graph",
                         torch.compile(layer.step, mode="max-autotune-no-cudagraphs")))
    with torch.no_grad():
        for name, fn in variants:
            us = graph_time_us(fn, layer.x, args.repeats)
            tbps = layer.bytes_moved() / (us * 1e-6) / 1e12
            print(f"TORCH_LAYER {name}: {us:.1f} us per step, {tbps:.2f} TB/s over {mb:.1f} MB, "
                  f"{tbps / copy:.2f} x copy")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
