"""One Llama-style decoder layer built only from the op API, with random weights, and
the same layer in numpy (float64) as the independent reference.

    x += Wo attention(rope(Wq n(x)), cache + rope(Wk n(x)), cache + Wv n(x))
    x += Wd (silu(Wg n2(x)) * Wu n2(x))

n and n2 are RMSNORMs fused into the matvecs. By default the layer is built like
AmkModel builds a Llama layer: q, k and v from one matvec over the three matrices stacked,
and RoPE inside the attention (op_rope_attention); with fused_rope=False, from three
matvecs and ROPE_KV before ATTENTION. With repeat=N the program runs the layer N times in
a row on the same weights and state (like PyTorch's CUDA graph of N steps in
bench/torch_layer.py), each pass appending at the same position. Used by
tests/python/test_layer.py (small shapes, CPU executor), tests/gpu/test_gpu_layer.py
(Llama-3.2-1B shapes, GPU) and bench/layer-trace.py."""
import numpy as np

from amktest import Amk, GLib, bf16_to_f32, f32_to_bf16, to_bytes

LLAMA_1B = dict(hidden=2048, heads=32, kv_heads=8, head_dim=64, ffn=8192, context=1024,
                theta=500000.0, factor=32.0, low=1.0, high=4.0, original=8192)
SMALL = dict(hidden=256, heads=8, kv_heads=2, head_dim=32, ffn=512, context=24,
             theta=10000.0, factor=0.0, low=1.0, high=4.0, original=8192)


def rope_inv_freq(cfg):
    """Rotary frequencies, with Llama-3 scaling when cfg['factor'] > 0 (as in HF)."""
    hd = cfg["head_dim"]
    inv = 1.0 / (cfg["theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    if cfg["factor"] <= 0:
        return inv
    low_wl = cfg["original"] / cfg["low"]
    high_wl = cfg["original"] / cfg["high"]
    wavelen = 2 * np.pi / inv
    scaled = np.where(wavelen > low_wl, inv / cfg["factor"], inv)
    smooth = (cfg["original"] / wavelen - cfg["low"]) / (cfg["high"] - cfg["low"])
    mid = (1 - smooth) * scaled / cfg["factor"] + smooth * scaled
    between = (wavelen >= high_wl) & (wavelen <= low_wl)
    return np.where(between, mid, scaled)


def rope(x, pos, cfg):
    """Rotate-half RoPE of every head of x ([heads * head_dim]) at position pos."""
    hd = cfg["head_dim"]
    heads = x.reshape(-1, hd)
    ang = pos * rope_inv_freq(cfg)
    cos, sin = np.cos(ang), np.sin(ang)
    a, b = heads[:, : hd // 2], heads[:, hd // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=1).reshape(-1)


class Layer:
    def __init__(self, rng, cfg, queues, pos, fused_rope=True, repeat=1):
        self.cfg, self.pos, self.repeat = cfg, pos, repeat
        h, nq, nkv, hd, f, ctx = (cfg[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "ffn", "context"))
        self.p = p = Amk.Program.new(queues)
        B, F32, BF16 = Amk.BufferRole, Amk.DType.F32, Amk.DType.BF16

        def weight(name, shape, scale):
            bits = f32_to_bf16(rng.standard_normal(int(np.prod(shape))) * scale)
            buf = p.add_buffer(name, BF16, list(shape), B.CONSTANT)
            p.set_buffer_data(buf, to_bytes(bits))
            return buf, bf16_to_f32(bits).astype(np.float64).reshape(shape)

        if fused_rope:
            wqkv, Wqkv = weight("wqkv", ((nq + 2 * nkv) * hd, h), 1 / np.sqrt(h))
            self.Wq, self.Wk, self.Wv = np.split(Wqkv, [nq * hd, (nq + nkv) * hd])
        else:
            wq, self.Wq = weight("wq", (nq * hd, h), 1 / np.sqrt(h))
            wk, self.Wk = weight("wk", (nkv * hd, h), 1 / np.sqrt(h))
            wv, self.Wv = weight("wv", (nkv * hd, h), 1 / np.sqrt(h))
        self.wo, self.Wo = weight("wo", (h, nq * hd), 1 / np.sqrt(nq * hd))
        self.wg, self.Wg = weight("wg", (f, h), 1 / np.sqrt(h))
        self.wu, self.Wu = weight("wu", (f, h), 1 / np.sqrt(h))
        self.wd, self.Wd = weight("wd", (h, f), 1 / np.sqrt(f))
        self.n1, self.N1 = weight("attn_norm", (h,), 0.1)
        self.n2, self.N2 = weight("ffn_norm", (h,), 0.1)
        self.N1, self.N2 = self.N1 + 1.0, self.N2 + 1.0   # about 1, like trained norms
        p.set_buffer_data(self.n1, to_bytes(f32_to_bf16(self.N1)))
        p.set_buffer_data(self.n2, to_bytes(f32_to_bf16(self.N2)))
        self.N1, self.N2 = (bf16_to_f32(f32_to_bf16(a)).astype(np.float64) for a in (self.N1, self.N2))

        self.x = p.add_buffer("x", F32, [h], B.STATE)
        self.pos_buf = p.add_buffer("pos", Amk.DType.I32, [1], B.INPUT)
        self.kc = p.add_buffer("k_cache", BF16, [ctx, nkv * hd], B.STATE)
        self.vc = p.add_buffer("v_cache", BF16, [ctx, nkv * hd], B.STATE)
        attn = p.add_buffer("attn", F32, [nq * hd], B.SCRATCH)
        gate = p.add_buffer("gate", F32, [f], B.SCRATCH)
        up = p.add_buffer("up", F32, [f], B.SCRATCH)
        act = p.add_buffer("act", F32, [f], B.SCRATCH)
        eps = 1e-5

        rope_args = (cfg["theta"], cfg["factor"], cfg["low"], cfg["high"], cfg["original"])
        if fused_rope:
            qkv = p.add_buffer("qkv", F32, [(nq + 2 * nkv) * hd], B.SCRATCH)
        else:
            q = p.add_buffer("q", F32, [nq * hd], B.SCRATCH)
            k = p.add_buffer("k", F32, [nkv * hd], B.SCRATCH)
            v = p.add_buffer("v", F32, [nkv * hd], B.SCRATCH)
        for _ in range(repeat):
            if fused_rope:
                p.op_matvec(qkv, wqkv, self.x, -1, -1, self.n1, eps)
                p.op_rope_attention(attn, qkv, self.kc, self.vc, self.pos_buf, hd, nq, nkv, 0,
                                    1 / np.sqrt(hd), *rope_args)
            else:
                p.op_matvec(q, wq, self.x, -1, -1, self.n1, eps)
                p.op_matvec(k, wk, self.x, -1, -1, self.n1, eps)
                p.op_matvec(v, wv, self.x, -1, -1, self.n1, eps)
                p.op_rope_kv(q, k, v, self.kc, self.vc, self.pos_buf, hd, nq, nkv, *rope_args)
                p.op_attention(attn, q, self.kc, self.vc, self.pos_buf, hd, nq, nkv, 0,
                               1 / np.sqrt(hd))
            p.op_matvec(self.x, self.wo, attn, -1, self.x, -1, 0.0)
            p.op_matvec(gate, self.wg, self.x, -1, -1, self.n2, eps)
            p.op_matvec(up, self.wu, self.x, -1, -1, self.n2, eps)
            p.op_silu_mul(act, gate, up)
            p.op_matvec(self.x, self.wd, act, -1, self.x, -1, 0.0)
        p.compile()

        # the state before the step: a hidden vector and caches filled up to pos - 1
        self.X = rng.standard_normal(h).astype(np.float32)
        cache = lambda: f32_to_bf16(rng.standard_normal(ctx * nkv * hd))
        self.KC, self.VC = cache(), cache()

    def bytes_moved(self):
        """The weights and the attended part of the caches: the floor of one step."""
        c = self.cfg
        h, nq, nkv, hd, f = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"], c["ffn"]
        weights = 2 * (h * nq * hd * 2 + 2 * h * nkv * hd + 3 * h * f + 2 * h)
        return weights + 2 * 2 * (self.pos + 1) * nkv * hd

    def load(self, executor):
        """Uploads the state before the step (works for CpuExecutor and Launcher)."""
        executor.upload(self.x, to_bytes(self.X))
        executor.upload(self.pos_buf, to_bytes(np.array([self.pos], dtype=np.int32)))
        executor.upload(self.kc, to_bytes(self.KC))
        executor.upload(self.vc, to_bytes(self.VC))

    def result(self, executor):
        return np.frombuffer(executor.download(self.x).get_data(), np.float32).astype(np.float64)

    def reference(self):
        """The step (repeated) in float64 numpy, with the caches rounded to bf16 like amk's."""
        c, pos = self.cfg, self.pos
        nq, nkv, hd = c["heads"], c["kv_heads"], c["head_dim"]
        x = self.X.astype(np.float64)
        kc = bf16_to_f32(self.KC).astype(np.float64).reshape(-1, nkv * hd).copy()
        vc = bf16_to_f32(self.VC).astype(np.float64).reshape(-1, nkv * hd).copy()

        def norm(v, w):
            return v / np.sqrt(np.mean(v * v) + 1e-5) * w

        for _ in range(self.repeat):
            xn = norm(x, self.N1)
            q = rope(self.Wq @ xn, pos, c)
            k = rope(self.Wk @ xn, pos, c)
            v = self.Wv @ xn
            kc[pos] = bf16_to_f32(f32_to_bf16(k))
            vc[pos] = bf16_to_f32(f32_to_bf16(v))
            out = np.zeros(nq * hd)
            group = nq // nkv
            for head in range(nq):
                g = head // group
                keys = kc[: pos + 1, g * hd:(g + 1) * hd]
                vals = vc[: pos + 1, g * hd:(g + 1) * hd]
                s = keys @ q[head * hd:(head + 1) * hd] / np.sqrt(hd)
                w = np.exp(s - s.max())
                out[head * hd:(head + 1) * hd] = (w / w.sum()) @ vals
            x = x + self.Wo @ out
            xn = norm(x, self.N2)
            gate, up = self.Wg @ xn, self.Wu @ xn
            x = x + self.Wd @ (gate / (1 + np.exp(-gate)) * up)
        return x


def rel_err(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


__all__ = ["Layer", "LLAMA_1B", "SMALL", "rel_err", "rope", "rope_inv_freq", "GLib"]
