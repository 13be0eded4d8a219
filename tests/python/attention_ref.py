"""numpy references of the attention ops, written from HF transformers' formulas:
rotate-half RoPE (plain and with Llama-3 frequency scaling) and GQA decode attention."""
import math

import numpy as np


def ref_inv_freq(head_dim, theta, factor=0.0, low=0.0, high=0.0, old_ctx=0):
    """HF's inv_freq in float32: 1 / theta^(arange(0, D, 2) / D), then Llama-3's
    _compute_llama3_parameters. theta^e is taken in float64 and rounded once."""
    f32 = np.float32
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(f32) / f32(head_dim)
    inv = f32(1.0) / (np.float64(theta) ** exponent.astype(np.float64)).astype(f32)
    if factor <= 0:
        return inv
    wavelen = f32(2 * math.pi) / inv
    low_freq_wavelen = f32(old_ctx / low)
    high_freq_wavelen = f32(old_ctx / high)
    scaled = np.where(wavelen > low_freq_wavelen, inv / f32(factor), inv).astype(f32)
    smooth = ((f32(old_ctx) / wavelen - f32(low)) / (f32(high) - f32(low))).astype(f32)
    smoothed = ((f32(1.0) - smooth) * scaled / f32(factor) + smooth * scaled).astype(f32)
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, scaled).astype(f32)


def ref_rope(x, pos, inv):
    """x [heads, D] float32 rotated like HF's apply_rotary_pos_emb: x cos + rotate_half(x) sin,
    with the angle pos * inv_freq in float32 and cos/sin rounded to float32."""
    angle = (np.float32(pos) * inv).astype(np.float32)
    emb = np.concatenate([angle, angle])
    cos = np.cos(emb.astype(np.float64)).astype(np.float32)
    sin = np.sin(emb.astype(np.float64)).astype(np.float32)
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return (x * cos + rotated * sin).astype(np.float32)


def ref_attention(q, kcache, vcache, pos, n_kv, scale):
    """softmax(scale q K^T) V over positions 0 .. pos, query head h on kv head h // group."""
    n_q, d = q.shape
    group = n_q // n_kv
    out = np.zeros((n_q, d))
    for h in range(n_q):
        k = kcache[:pos + 1, h // group].astype(np.float64)
        v = vcache[:pos + 1, h // group].astype(np.float64)
        s = scale * (k @ q[h].astype(np.float64))
        p = np.exp(s - s.max())
        out[h] = (p / p.sum()) @ v
    return out
