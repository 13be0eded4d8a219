"""A program of one op_rope_attention (RoPE, the KV append and decode attention as one
stage) on random data, with its numpy reference; shared by the CPU tests
(test_ops_attention.py) and the GPU ones (tests/gpu/test_gpu_rope_attention.py)."""
import math

import numpy as np

from amktest import Amk, from_bytes, from_f32, poison, to_bytes, to_f32
from attention_ref import ref_attention, ref_inv_freq, ref_rope

F32, I32 = Amk.DType.F32, Amk.DType.I32
IN, OUT = Amk.BufferRole.INPUT, Amk.BufferRole.OUTPUT


class RopeAttention:
    """qkv [(n_q + 2 n_kv) d] (the query heads, the key heads, the value heads) at
    position pos against caches of max_ctx positions. With pos_copied, a COPY writes the
    position during the launch (from 'pos source'), so that the GPU cannot load the
    position before the attention's waits."""

    def __init__(self, n_q, n_kv, d, max_ctx, cache, rope, queues=None, n_splits=0,
                 pos_copied=False):
        self.n_q, self.n_kv, self.d, self.max_ctx = n_q, n_kv, d, max_ctx
        self.cache, self.rope = cache, rope
        self.scale = 1.0 / math.sqrt(d)
        # four splits per key/value head by default: contexts up to 1024 fit (4 query heads)
        p = self.program = Amk.Program.new(queues or 4 * n_kv)
        self.qkv = p.add_buffer('qkv', F32, [(n_q + 2 * n_kv) * d], IN)
        self.kc = p.add_buffer('k cache', cache, [max_ctx, n_kv, d], IN)
        self.vc = p.add_buffer('v cache', cache, [max_ctx, n_kv, d], IN)
        self.pos = p.add_buffer('pos', I32, [1], IN)
        self.pos_source = p.add_buffer('pos source', I32, [1], IN) if pos_copied else None
        if pos_copied:
            p.op_copy(self.pos, self.pos_source)
        self.out = p.add_buffer('out', F32, [n_q * d], OUT)
        p.op_rope_attention(self.out, self.qkv, self.kc, self.vc, self.pos, d, n_q, n_kv, n_splits,
                            self.scale, rope['theta'], rope.get('factor', 0.0), rope.get('low', 0.0),
                            rope.get('high', 0.0), rope.get('old_ctx', 0))
        p.compile()

    def random_data(self, rng):
        n, ctx = self.n_q + 2 * self.n_kv, self.max_ctx * self.n_kv * self.d
        self.data = dict(qkv=rng.standard_normal(n * self.d).astype(np.float32),
                         kc=from_f32(self.cache, rng.standard_normal(ctx)),
                         vc=from_f32(self.cache, rng.standard_normal(ctx)))

    def load(self, executor, pos):
        for name in ('qkv', 'kc', 'vc'):
            executor.upload(getattr(self, name), to_bytes(self.data[name]))
        pos_buffer = self.pos if self.pos_source is None else self.pos_source
        executor.upload(pos_buffer, to_bytes(np.array([pos], dtype=np.int32)))
        executor.upload(self.out, to_bytes(poison(F32, self.n_q * self.d)))

    def results(self, executor):
        """out, and the caches as [max_ctx, n_kv, d] arrays of the cache dtype."""
        shape = (self.max_ctx, self.n_kv, self.d)
        return (from_bytes(F32, executor.download(self.out)),
                from_bytes(self.cache, executor.download(self.kc)).reshape(shape),
                from_bytes(self.cache, executor.download(self.vc)).reshape(shape))

    def expected(self, pos):
        """out, and the caches' row pos (float32)."""
        n_q, n_kv, d, ctx = self.n_q, self.n_kv, self.d, self.max_ctx
        qkv = self.data['qkv'].reshape(n_q + 2 * n_kv, d)
        inv = ref_inv_freq(d, **self.rope)
        q = ref_rope(qkv[:n_q], pos, inv)
        k = ref_rope(qkv[n_q:n_q + n_kv], pos, inv)
        kc = to_f32(self.cache, self.data['kc']).reshape(ctx, n_kv, d).copy()
        vc = to_f32(self.cache, self.data['vc']).reshape(ctx, n_kv, d).copy()
        kc[pos] = to_f32(self.cache, from_f32(self.cache, k))
        vc[pos] = to_f32(self.cache, from_f32(self.cache, qkv[n_q + n_kv:]))
        return ref_attention(q, kc, vc, pos, n_kv, self.scale).reshape(-1), kc[pos], vc[pos]
