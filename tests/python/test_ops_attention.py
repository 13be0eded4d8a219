"""The attention ops (ROPE_KV, ATTN_DECODE, ATTN_REDUCE) on the CPU executor against a numpy
reference written here from HF transformers' formulas: rotate-half RoPE (plain and with
Llama-3 frequency scaling), GQA decode attention split over the cached positions and
merged, for Llama-3.2-1B shapes (32 query / 8 key-value heads of 64), Qwen-like ones
(16 / 8 of 128) and 2 key/value heads; bf16 and f32 caches; positions 0, 1, 37 and the
last one; splits that are empty. Then the device-side position check and the verifier's
rules, one test per error."""
import math

import numpy as np
import pytest

from amktest import Amk, GLib, add_op, from_bytes, from_f32, make_rng, poison, to_bytes, to_f32
from attention_ref import ref_attention, ref_inv_freq, ref_rope
from rope_attention import RopeAttention

F32, BF16, I32 = Amk.DType.F32, Amk.DType.BF16, Amk.DType.I32
IN, OUT, SCRATCH, CONST = (Amk.BufferRole.INPUT, Amk.BufferRole.OUTPUT, Amk.BufferRole.SCRATCH,
                           Amk.BufferRole.CONSTANT)
PE = Amk.ProgramError

LLAMA3 = dict(theta=500000.0, factor=32.0, low=1.0, high=4.0, old_ctx=8192)  # Llama-3.2-1B
PLAIN = dict(theta=10000.0)
QWEN = dict(theta=1000000.0)


@pytest.fixture
def rng():
    return make_rng()


def rel_err(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def tolerance(cache_dtype):
    return 1e-5 if cache_dtype == F32 else 1e-2


def rope_params(d, n_q, n_kv, max_ctx, first, count, rope):
    return dict(head_dim=d, n_q_heads=n_q, n_kv_heads=n_kv, max_ctx=max_ctx, head0=first,
                n_heads=count, theta=float(rope['theta']), factor=float(rope.get('factor', 0.0)),
                low_freq_factor=float(rope.get('low', 0.0)),
                high_freq_factor=float(rope.get('high', 0.0)),
                original_context=rope.get('old_ctx', 0))


# ---- a decode step ----------------------------------------------------------------------

class DecodeStep:
    """ROPE_KV over all q and k heads (in `rope_parts` instructions), then ATTN_DECODE, one
    instruction per (kv head, split), dealt over the queues and waiting for the rotation,
    then ATTN_REDUCE over head ranges waiting for every split."""

    def __init__(self, rng, n_q, n_kv, d, max_ctx, n_splits, cache, rope, queues=5,
                 rope_parts=3, reduce_parts=3, partial_role=SCRATCH, merge=False, min_split=0):
        self.n_q, self.n_kv, self.d, self.max_ctx, self.n_splits = n_q, n_kv, d, max_ctx, n_splits
        self.cache, self.rope = cache, rope
        self.scale = 1.0 / math.sqrt(d)
        p = self.program = Amk.Program.new(queues)
        self.q = p.add_buffer('q', F32, [n_q * d], IN)
        self.k = p.add_buffer('k', F32, [n_kv * d], IN)
        self.v = p.add_buffer('v', F32, [n_kv * d], IN)
        self.kc = p.add_buffer('k cache', cache, [max_ctx, n_kv, d], IN)
        self.vc = p.add_buffer('v cache', cache, [max_ctx, n_kv, d], IN)
        self.pos = p.add_buffer('pos', I32, [1], IN)
        self.partial = p.add_buffer('partial', F32, [n_q * n_splits * (d + 2)], partial_role)
        self.out = p.add_buffer('out', F32, [n_q * d], OUT)
        rotated = p.add_counter('rotated')
        decoded = p.add_counter('decoded')

        heads = n_q + n_kv
        bounds = np.linspace(0, heads, rope_parts + 1).astype(int)
        n_rope = 0
        for i in range(rope_parts):
            first, count = int(bounds[i]), int(bounds[i + 1] - bounds[i])
            add_op(p, i % queues, Amk.Opcode.ROPE_KV, [self.q, self.k, self.v, self.kc, self.vc, self.pos],
                   rope_params(d, n_q, n_kv, max_ctx, first, count, rope),
                   signal=(rotated, 1))
            n_rope += 1
        n = 0
        for g in range(n_kv):
            # merge: the last split of kv head g to arrive on its counter merges (no REDUCE)
            arrival = p.add_counter(f'arrivals {g}') if merge else 0
            for s in range(n_splits):
                add_op(p, (3 * n + 1) % queues, Amk.Opcode.ATTN_DECODE,
                       [self.partial, self.q, self.kc, self.vc, self.pos] + ([self.out] if merge else []),
                       dict(head_dim=d, n_q_heads=n_q, n_kv_heads=n_kv, max_ctx=max_ctx, kv_head=g,
                            split=s, n_splits=n_splits, scale=self.scale, arrival_counter=arrival,
                            min_split=min_split),
                       waits=[(rotated, n_rope)], signal=(decoded, 1))
                n += 1
        if merge:
            p.verify()
            return
        bounds = np.linspace(0, n_q, reduce_parts + 1).astype(int)
        for i in range(reduce_parts):
            add_op(p, (queues - 1 - i) % queues, Amk.Opcode.ATTN_REDUCE, [self.out, self.partial],
                   dict(head_dim=d, n_q_heads=n_q, n_splits=n_splits, head0=int(bounds[i]),
                        n_heads=int(bounds[i + 1] - bounds[i])),
                   waits=[(decoded, n)])
        p.verify()

    def run(self, rng, pos, seed=0):
        n_q, n_kv, d, ctx = self.n_q, self.n_kv, self.d, self.max_ctx
        data = dict(
            q=rng.standard_normal(n_q * d).astype(np.float32),
            k=rng.standard_normal(n_kv * d).astype(np.float32),
            v=rng.standard_normal(n_kv * d).astype(np.float32),
            kc=from_f32(self.cache, rng.standard_normal(ctx * n_kv * d)),
            vc=from_f32(self.cache, rng.standard_normal(ctx * n_kv * d)))
        ex = Amk.CpuExecutor.new(self.program)
        ex.props.seed = seed
        for name in ('q', 'k', 'v', 'kc', 'vc'):
            ex.upload(getattr(self, name), to_bytes(data[name]))
        ex.upload(self.pos, to_bytes(np.array([pos], dtype=np.int32)))
        ex.upload(self.out, to_bytes(poison(F32, n_q * d)))
        if self.program.get_buffer_role(self.partial) != SCRATCH:
            ex.upload(self.partial, to_bytes(poison(F32, n_q * self.n_splits * (d + 2))))
        ex.run()
        self.ex, self.data = ex, data
        return from_bytes(F32, ex.download(self.out))

    def expected(self, pos):
        n_q, n_kv, d, ctx = self.n_q, self.n_kv, self.d, self.max_ctx
        inv = ref_inv_freq(d, **self.rope)
        q = ref_rope(self.data['q'].reshape(n_q, d), pos, inv)
        k = ref_rope(self.data['k'].reshape(n_kv, d), pos, inv)
        kc = to_f32(self.cache, self.data['kc']).reshape(ctx, n_kv, d).copy()
        vc = to_f32(self.cache, self.data['vc']).reshape(ctx, n_kv, d).copy()
        kc[pos] = to_f32(self.cache, from_f32(self.cache, k))
        vc[pos] = to_f32(self.cache, from_f32(self.cache, self.data['v'].reshape(n_kv, d)))
        return q, k, kc, vc, ref_attention(q, kc, vc, pos, n_kv, self.scale).reshape(-1)


STEP_CASES = [
    # n_q, n_kv, d, max_ctx, n_splits, rope
    pytest.param(32, 8, 64, 64, 4, LLAMA3, id='llama-3.2-1b'),
    pytest.param(16, 8, 128, 48, 3, QWEN, id='qwen'),
    pytest.param(8, 2, 32, 40, 8, PLAIN, id='2-kv-heads'),
]


@pytest.mark.parametrize('cache', [F32, BF16], ids=['f32', 'bf16'])
@pytest.mark.parametrize('n_q,n_kv,d,max_ctx,n_splits,rope', STEP_CASES)
@pytest.mark.parametrize('where', ['0', '1', '37', 'last'])
@pytest.mark.parametrize('merge', [False, True], ids=['reduce', 'fused-merge'])
def test_decode_step(rng, cache, n_q, n_kv, d, max_ctx, n_splits, rope, where, merge):
    pos = max_ctx - 1 if where == 'last' else int(where)
    step = DecodeStep(rng, n_q, n_kv, d, max_ctx, n_splits, cache, rope, merge=merge)
    got = step.run(rng, pos)
    q, k, kc, vc, want = step.expected(pos)
    err = rel_err(got, want)
    print(f'pos {pos}: out rel err {err:.3g}')
    assert err <= tolerance(cache)

    # q and k rotated in place; the caches hold the new row at pos and nothing else changed
    ex = step.ex
    assert rel_err(from_bytes(F32, ex.download(step.q)), q.reshape(-1)) <= 1e-6
    assert rel_err(from_bytes(F32, ex.download(step.k)), k.reshape(-1)) <= 1e-6
    for buf, before, ref in ((step.kc, step.data['kc'], kc), (step.vc, step.data['vc'], vc)):
        after = from_bytes(cache, ex.download(buf)).reshape(max_ctx, n_kv, d)
        before = before.reshape(max_ctx, n_kv, d)
        others = np.arange(max_ctx) != pos
        assert after[others].tobytes() == before[others].tobytes()
        assert rel_err(to_f32(cache, after[pos]), ref[pos]) <= tolerance(cache)


@pytest.mark.parametrize('cache', [F32, BF16], ids=['f32', 'bf16'])
def test_decode_step_long_context(rng, cache):
    """Llama-3 scaling at positions past the original context's low-frequency wavelength,
    many splits, every seed alike."""
    step = DecodeStep(rng, 4, 2, 64, 1024, 5, cache, LLAMA3, queues=7, rope_parts=2)
    for pos in (1023, 700):
        got = step.run(rng, pos, seed=pos)
        err = rel_err(got, step.expected(pos)[4])
        print(f'pos {pos}: out rel err {err:.3g}')
        assert err <= tolerance(cache)
    first = step.run(np.random.default_rng(5), 999, seed=1)
    for seed in (2, 3):
        assert step.run(np.random.default_rng(5), 999, seed=seed).tobytes() == first.tobytes()


@pytest.mark.parametrize('merge', [False, True], ids=['reduce', 'fused-merge'])
def test_min_split(rng, merge):
    """pos 10 over 4 splits of at least 8 positions: split 0 takes 0..7, split 1 8..10,
    splits 2 and 3 are empty; the result is the same as without the minimum."""
    n_q, n_kv, d, splits = 4, 2, 16, 4
    step = DecodeStep(rng, n_q, n_kv, d, 16, splits, F32, PLAIN, queues=3, partial_role=OUT,
                      merge=merge, min_split=8)
    got = step.run(rng, 10)
    assert rel_err(got, step.expected(10)[4]) <= 1e-5
    part = from_bytes(F32, step.ex.download(step.partial)).reshape(n_q, splits, d + 2)
    assert np.all(part[:, 2:, d] == -np.inf) and np.all(part[:, 2:, d + 1] == 0)
    assert np.all(part[:, 0, d + 1] >= 1.0) and np.all(part[:, 1, d + 1] >= 1.0)
    # split 0 holds exactly 8 positions: its l is a sum of 8 terms of at most 1
    assert np.all(part[:, 0, d + 1] <= 8.0) and np.all(part[:, 1, d + 1] <= 3.0)


def test_empty_splits(rng):
    """pos 1 over 6 splits: chunks of 1, splits 2..5 are empty: m = -inf, l = 0, acc = 0."""
    n_q, n_kv, d, splits = 4, 2, 16, 6
    step = DecodeStep(rng, n_q, n_kv, d, 8, splits, F32, PLAIN, queues=3, partial_role=OUT)
    got = step.run(rng, 1)
    assert rel_err(got, step.expected(1)[4]) <= 1e-5
    part = from_bytes(F32, step.ex.download(step.partial)).reshape(n_q, splits, d + 2)
    assert np.all(part[:, 2:, :d] == 0)
    assert np.all(part[:, 2:, d] == -np.inf)
    assert np.all(part[:, 2:, d + 1] == 0)
    assert np.all(np.isfinite(part[:, :2])) and np.all(part[:, :2, d + 1] >= 1.0)


@pytest.mark.parametrize('cache', [F32, BF16], ids=['f32', 'bf16'])
@pytest.mark.parametrize('rope', [PLAIN, LLAMA3, QWEN], ids=['plain', 'llama3', 'qwen'])
@pytest.mark.parametrize('pos', [0, 1, 37, 8191])
def test_rope_kv(rng, cache, rope, pos):
    """ROPE_KV alone: a few head ranges over queues, q and k rotated, row pos appended."""
    n_q, n_kv, d, ctx = 6, 2, 64, 8192
    p = Amk.Program.new(3)
    q = p.add_buffer('q', F32, [n_q * d], IN)
    k = p.add_buffer('k', F32, [n_kv * d], IN)
    v = p.add_buffer('v', F32, [n_kv * d], IN)
    kc = p.add_buffer('kc', cache, [ctx, n_kv, d], OUT)
    vc = p.add_buffer('vc', cache, [ctx, n_kv, d], OUT)
    pb = p.add_buffer('pos', I32, [1], IN)
    for i, (first, count) in enumerate([(0, 3), (3, 4), (7, 1)]):
        add_op(p, i, Amk.Opcode.ROPE_KV, [q, k, v, kc, vc, pb],
               rope_params(d, n_q, n_kv, ctx, first, count, rope))
    ex = Amk.CpuExecutor.new(p)
    qd = rng.standard_normal((n_q, d)).astype(np.float32)
    kd = rng.standard_normal((n_kv, d)).astype(np.float32)
    vd = rng.standard_normal((n_kv, d)).astype(np.float32)
    for buf, data in ((q, qd), (k, kd), (v, vd), (pb, np.array([pos], dtype=np.int32))):
        ex.upload(buf, to_bytes(data))
    for buf in (kc, vc):
        ex.upload(buf, to_bytes(poison(cache, ctx * n_kv * d)))
    ex.run()

    inv = ref_inv_freq(d, **rope)
    assert rel_err(from_bytes(F32, ex.download(q)).reshape(n_q, d), ref_rope(qd, pos, inv)) <= 1e-6
    k_want = ref_rope(kd, pos, inv)
    assert rel_err(from_bytes(F32, ex.download(k)).reshape(n_kv, d), k_want) <= 1e-6
    for buf, want in ((kc, k_want), (vc, vd)):
        got = from_bytes(cache, ex.download(buf)).reshape(ctx, n_kv, d)
        assert rel_err(to_f32(cache, got[pos]), want) <= (1e-6 if cache == F32 else 4e-3)
        rest = np.delete(got, pos, axis=0)
        assert rest.tobytes() == poison(cache, rest.size).tobytes()


def test_llama3_frequencies():
    """The reference itself against what Llama-3 scaling means: high frequencies (wavelength
    under 8192 / 4) unchanged, low ones (over 8192) divided by 32, the band between
    interpolated and monotonic."""
    plain = ref_inv_freq(64, 500000.0)
    scaled = ref_inv_freq(64, **LLAMA3)
    wavelen = 2 * np.pi / plain
    assert np.array_equal(scaled[wavelen < 2048], plain[wavelen < 2048])
    np.testing.assert_allclose(scaled[wavelen > 8192], plain[wavelen > 8192] / 32, rtol=1e-6)
    band = (wavelen >= 2048) & (wavelen <= 8192)
    assert band.any()
    assert np.all(scaled[band] <= plain[band]) and np.all(scaled[band] >= plain[band] / 32)
    assert np.all(np.diff(scaled) < 0)


# ---- the position check ---------------------------------------------------------------

@pytest.mark.parametrize('opcode', ['rope', 'decode'])
@pytest.mark.parametrize('pos', [-1, 16, 1 << 30])
def test_position_out_of_range(rng, opcode, pos):
    n_q, n_kv, d, ctx = 4, 2, 8, 16
    p = Amk.Program.new(2)
    q = p.add_buffer('q', F32, [n_q * d], IN)
    k = p.add_buffer('k', F32, [n_kv * d], IN)
    v = p.add_buffer('v', F32, [n_kv * d], IN)
    kc = p.add_buffer('kc', BF16, [ctx * n_kv * d], IN)
    vc = p.add_buffer('vc', BF16, [ctx * n_kv * d], IN)
    pb = p.add_buffer('pos', I32, [1], IN)
    part = p.add_buffer('partial', F32, [n_q * (d + 2)], OUT)
    add_op(p, 0, Amk.Opcode.NOP, [])
    if opcode == 'rope':
        add_op(p, 1, Amk.Opcode.ROPE_KV, [q, k, v, kc, vc, pb],
               rope_params(d, n_q, n_kv, ctx, 0, n_q + n_kv, PLAIN))
    else:
        add_op(p, 1, Amk.Opcode.ATTN_DECODE, [part, q, kc, vc, pb],
               dict(head_dim=d, n_q_heads=n_q, n_kv_heads=n_kv, max_ctx=ctx, kv_head=1, n_splits=1,
                    scale=0.5))
    ex = Amk.CpuExecutor.new(p)
    ex.upload(pb, to_bytes(np.array([pos], dtype=np.int32)))
    with pytest.raises(GLib.Error) as info:
        ex.run()
    assert info.value.matches(Amk.launch_error_quark(), Amk.LaunchError.ABORTED), info.value.message
    record = ex.get_last_abort()
    assert record.code == Amk.AbortCode.CHECK
    assert record.detail == pb
    assert (record.queue, record.instruction) == (1, 0)
    # the last position is fine
    ex.upload(pb, to_bytes(np.array([ctx - 1], dtype=np.int32)))
    assert ex.run() is True
    assert ex.get_last_abort() is None


# ---- the verifier -----------------------------------------------------------------------

def expect_error(p, code, *words):
    with pytest.raises(GLib.Error) as info:
        p.verify()
    error = info.value
    assert error.matches(Amk.program_error_quark(), code), (error.code, error.message)
    for word in words:
        assert word in error.message, error.message
    return error.message


class Rig:
    """Buffers for one attention instruction: n_q 4, n_kv 2, head_dim 8, max_ctx 16, 3 splits."""
    N_Q, N_KV, D, CTX, S = 4, 2, 8, 16, 3

    def __init__(self, kc_dtype=BF16, vc_dtype=BF16, q_dtype=F32, pos_dtype=I32, kc_rows=16,
                 partial_len=None, kc_role=IN, partial_role=SCRATCH, roles=None):
        n_q, n_kv, d = self.N_Q, self.N_KV, self.D
        p = self.p = Amk.Program.new(1)
        roles = roles or {}

        def add(name, dtype, n, role):
            return p.add_buffer(name, dtype, [n], roles.get(name, role))
        self.q = add('q', q_dtype, n_q * d, IN)
        self.k = add('k', F32, n_kv * d, IN)
        self.v = add('v', F32, n_kv * d, CONST)  # read only: may be constant
        self.kc = add('kcache', kc_dtype, kc_rows * n_kv * d, kc_role)
        self.vc = add('vcache', vc_dtype, self.CTX * n_kv * d, IN)
        self.pos = add('position', pos_dtype, 1, IN)
        self.partial = add('partial', F32, partial_len or n_q * self.S * (d + 2), partial_role)
        self.out = add('out', F32, n_q * d, OUT)

    def rope(self, d=D, n_q=N_Q, n_kv=N_KV, ctx=CTX, first=0, count=6, rope=PLAIN, bufs=None):
        add_op(self.p, 0, Amk.Opcode.ROPE_KV,
               bufs or [self.q, self.k, self.v, self.kc, self.vc, self.pos],
               rope_params(d, n_q, n_kv, ctx, first, count, rope))
        return self.p

    def decode(self, d=D, n_q=N_Q, n_kv=N_KV, ctx=CTX, g=1, s=2, n_splits=S, scale=0.3, bufs=None,
               min_split=0):
        add_op(self.p, 0, Amk.Opcode.ATTN_DECODE,
               bufs or [self.partial, self.q, self.kc, self.vc, self.pos],
               dict(head_dim=d, n_q_heads=n_q, n_kv_heads=n_kv, max_ctx=ctx, kv_head=g, split=s,
                    n_splits=n_splits, scale=scale, min_split=min_split))
        return self.p

    def reduce(self, d=D, n_q=N_Q, n_splits=S, first=0, count=4, bufs=None):
        add_op(self.p, 0, Amk.Opcode.ATTN_REDUCE, bufs or [self.out, self.partial],
               dict(head_dim=d, n_q_heads=n_q, n_splits=n_splits, head0=first, n_heads=count))
        return self.p


def test_verifier_accepts_the_rig():
    r = Rig()
    r.rope()
    r.decode()
    r.reduce()
    r.p.verify()


# ROPE_KV
def test_rope_head_dim_odd():
    expect_error(Rig().rope(d=7), PE.INVALID, 'ROPE_KV', 'even')


def test_rope_head_dim_zero():
    expect_error(Rig().rope(d=0), PE.OUT_OF_RANGE, 'ROPE_KV')


def test_rope_heads_not_grouped():
    expect_error(Rig().rope(n_q=3), PE.INVALID, 'ROPE_KV', 'multiple')


def test_rope_no_kv_heads():
    expect_error(Rig().rope(n_kv=0), PE.OUT_OF_RANGE, 'ROPE_KV')


def test_rope_no_context():
    expect_error(Rig().rope(ctx=0), PE.OUT_OF_RANGE, 'ROPE_KV')


def test_rope_head_range():
    expect_error(Rig().rope(first=2, count=5), PE.OUT_OF_RANGE, 'ROPE_KV', 'heads')


def test_rope_theta():
    expect_error(Rig().rope(rope=dict(theta=0.0)), PE.INVALID, 'ROPE_KV', 'theta')


@pytest.mark.parametrize('bad', [dict(factor=-1.0), dict(factor=float('nan')), dict(high=0.5),
                                 dict(low=0.0), dict(old_ctx=0)])
def test_rope_scaling_factors(bad):
    rope = dict(LLAMA3, **bad)
    expect_error(Rig().rope(rope=rope), PE.INVALID, 'ROPE_KV', 'Llama-3')


def test_rope_q_dtype():
    expect_error(Rig(q_dtype=BF16).rope(), PE.INVALID, 'ROPE_KV', '“q”')


def test_rope_cache_dtype():
    expect_error(Rig(kc_dtype=I32, vc_dtype=I32).rope(), PE.INVALID, 'ROPE_KV', 'kcache')


def test_rope_cache_dtypes_differ():
    expect_error(Rig(vc_dtype=F32).rope(), PE.INVALID, 'ROPE_KV', 'kcache', 'vcache')


def test_rope_pos_dtype():
    expect_error(Rig(pos_dtype=F32).rope(), PE.INVALID, 'ROPE_KV', 'position')


def test_rope_cache_too_small():
    expect_error(Rig(kc_rows=15).rope(), PE.OUT_OF_RANGE, 'ROPE_KV', 'kcache')


def test_rope_writes_constant_cache():
    expect_error(Rig(kc_role=CONST).rope(), PE.INVALID, 'ROPE_KV', 'kcache', 'constant')


def test_rope_q_aliases_k():
    r = Rig()
    expect_error(r.rope(bufs=[r.q, r.q, r.v, r.kc, r.vc, r.pos]), PE.INVALID,
                 'ROPE_KV', 'shares memory')


def test_rope_caches_alias():
    r = Rig()
    expect_error(r.rope(bufs=[r.q, r.k, r.v, r.vc, r.vc, r.pos]), PE.INVALID, 'ROPE_KV', 'vcache')


# ATTN_DECODE
def test_decode_head_dim_too_large():
    r = Rig()
    expect_error(r.decode(d=258), PE.OUT_OF_RANGE, 'ATTN_DECODE', '256')


def test_decode_kv_head():
    expect_error(Rig().decode(g=2), PE.OUT_OF_RANGE, 'ATTN_DECODE', 'head 2')


def test_decode_split():
    expect_error(Rig().decode(s=3), PE.OUT_OF_RANGE, 'ATTN_DECODE', 'split 3 of 3')


def test_decode_no_splits():
    expect_error(Rig().decode(s=0, n_splits=0), PE.OUT_OF_RANGE, 'ATTN_DECODE')


def test_decode_min_split_negative():
    expect_error(Rig().decode(min_split=-1), PE.OUT_OF_RANGE, 'ATTN_DECODE', 'fewest positions')


def test_decode_scale():
    expect_error(Rig().decode(scale=float('inf')), PE.INVALID, 'ATTN_DECODE', 'scale')


def test_decode_partial_too_small():
    expect_error(Rig(partial_len=4 * 3 * 10 - 1).decode(), PE.OUT_OF_RANGE, 'ATTN_DECODE', 'partial')


def test_decode_partial_constant():
    expect_error(Rig(partial_role=CONST).decode(), PE.INVALID, 'ATTN_DECODE', 'constant')


def test_decode_partial_aliases_q():
    r = Rig()
    expect_error(r.decode(bufs=[r.partial, r.partial, r.kc, r.vc, r.pos]), PE.INVALID,
                 'ATTN_DECODE', 'shares memory')


def test_decode_q_dtype():
    expect_error(Rig(q_dtype=BF16).decode(), PE.INVALID, 'ATTN_DECODE', '“q”')


def test_decode_cache_dtypes_differ():
    expect_error(Rig(kc_dtype=F32).decode(), PE.INVALID, 'ATTN_DECODE', 'kcache')


def merging_rig(n_splits=Rig.S, arrival=None, extra_splits=0, roles=None):
    """The rig's kv head 1 decoded in n_splits splits that merge into out on one counter."""
    r = Rig(roles=roles)
    c = r.p.add_counter('arrivals') if arrival is None else arrival
    for s in range(n_splits + extra_splits):
        add_op(r.p, 0, Amk.Opcode.ATTN_DECODE, [r.partial, r.q, r.kc, r.vc, r.pos, r.out],
               dict(head_dim=Rig.D, n_q_heads=Rig.N_Q, n_kv_heads=Rig.N_KV, max_ctx=Rig.CTX,
                    kv_head=1, split=min(s, n_splits - 1), n_splits=n_splits, scale=0.3,
                    arrival_counter=c))
    return r, c


def test_decode_merge_accepted():
    merging_rig()[0].p.verify()


# Every operand made constant in turn: refused exactly where the op writes it (the table
# amk_abi_written_slots in kernels/amk-abi.h, which the launcher also reads to decide
# which buffers may load before the waits), with the operand's buffer named.
WRITES = {
    'rope': {'q': True, 'k': True, 'v': False, 'kcache': True, 'vcache': True, 'position': False},
    'decode': {'partial': True, 'q': False, 'kcache': False, 'vcache': False, 'position': False},
    'merge': {'partial': True, 'q': False, 'kcache': False, 'vcache': False, 'position': False,
              'out': True},
    'reduce': {'out': True, 'partial': False},
}


@pytest.mark.parametrize('op, name', [(op, name) for op in WRITES for name in WRITES[op]])
def test_constant_operands(op, name):
    if op == 'merge':
        p = merging_rig(roles={name: CONST})[0].p
    else:
        r = Rig(roles={name: CONST})
        p = {'rope': r.rope, 'decode': r.decode, 'reduce': r.reduce}[op]()
    if WRITES[op][name]:
        expect_error(p, PE.INVALID, f'“{name}”', 'constant')
    else:
        p.verify()


def test_decode_merge_counter_missing():
    expect_error(merging_rig(arrival=7)[0].p, PE.OUT_OF_RANGE, 'ATTN_DECODE', 'arrival counter 7')


def test_decode_merge_counter_waited_on():
    r, c = merging_rig()
    add_op(r.p, 0, Amk.Opcode.NOP, [], waits=[(c, 1)])
    expect_error(r.p, PE.INVALID, 'ATTN_DECODE', 'waits on or signals')


def test_decode_merge_counter_arrivals():
    expect_error(merging_rig(extra_splits=1)[0].p, PE.INVALID, 'ATTN_DECODE', 'instructions arrive on it')


def test_decode_merge_out_aliases_partial():
    r = Rig()
    c = r.p.add_counter('arrivals')
    add_op(r.p, 0, Amk.Opcode.ATTN_DECODE, [r.partial, r.q, r.kc, r.vc, r.pos, r.partial],
           dict(head_dim=Rig.D, n_q_heads=Rig.N_Q, n_kv_heads=Rig.N_KV, max_ctx=Rig.CTX, kv_head=1,
                n_splits=1, scale=0.3, arrival_counter=c))
    expect_error(r.p, PE.INVALID, 'ATTN_DECODE', 'shares memory')


# ATTN_REDUCE
def test_reduce_head_range():
    expect_error(Rig().reduce(first=1, count=4), PE.OUT_OF_RANGE, 'ATTN_REDUCE', 'heads')


def test_reduce_no_splits():
    expect_error(Rig().reduce(n_splits=0), PE.OUT_OF_RANGE, 'ATTN_REDUCE')


def test_reduce_partial_too_small():
    expect_error(Rig().reduce(n_splits=4), PE.OUT_OF_RANGE, 'ATTN_REDUCE', 'partial')


def test_reduce_out_aliases_partial():
    r = Rig()
    expect_error(r.reduce(bufs=[r.partial, r.partial]), PE.INVALID, 'ATTN_REDUCE', 'shares memory')


def test_reduce_odd_head_dim():
    expect_error(Rig().reduce(d=5), PE.INVALID, 'ATTN_REDUCE', 'even')


def test_reduce_buffer_count():
    r = Rig()
    add_op(r.p, 0, Amk.Opcode.ATTN_REDUCE, [r.out, r.partial, r.q],
           dict(head_dim=8, n_q_heads=4, n_splits=3, n_heads=4))
    expect_error(r.p, PE.INVALID, 'ATTN_REDUCE')


# ---- RoPE fused into the attention (op_rope_attention) -----------------------------------

ROPE_ATTN_CASES = [
    # n_q, n_kv, d, max_ctx, rope
    pytest.param(32, 8, 64, 1024, LLAMA3, id='llama-3.2-1b'),
    pytest.param(9, 3, 64, 300, PLAIN, id='smollm2'),
    pytest.param(4, 2, 128, 512, QWEN, id='head-dim-128'),
]


@pytest.mark.parametrize('pos_copied', [False, True], ids=['pos-input', 'pos-copied'])
@pytest.mark.parametrize('cache', [F32, BF16], ids=['f32', 'bf16'])
@pytest.mark.parametrize('n_q,n_kv,d,max_ctx,rope', ROPE_ATTN_CASES)
def test_rope_attention(rng, cache, n_q, n_kv, d, max_ctx, rope, pos_copied):
    """The fused op on the CPU executor against numpy, at positions on one split and on
    several (past ATTN_MIN_SPLIT_POSITIONS), the new row in the caches and no other; also
    with the position written during the run by a COPY."""
    case = RopeAttention(n_q, n_kv, d, max_ctx, cache, rope, pos_copied=pos_copied)
    for pos in (0, 37, max_ctx // 2 + 3, max_ctx - 1):
        case.random_data(rng)
        ex = Amk.CpuExecutor.new(case.program)
        case.load(ex, pos)
        ex.run()
        out, kc, vc = case.results(ex)
        want, k_row, v_row = case.expected(pos)
        err = rel_err(out, want)
        print(f'pos {pos}: out rel err {err:.3g}')
        assert err <= tolerance(cache)
        assert rel_err(to_f32(cache, kc[pos]), k_row) <= tolerance(cache)
        assert rel_err(to_f32(cache, vc[pos]), v_row) <= tolerance(cache)
        others = np.arange(max_ctx) != pos
        shape = kc.shape
        assert kc[others].tobytes() == case.data['kc'].reshape(shape)[others].tobytes()
        assert vc[others].tobytes() == case.data['vc'].reshape(shape)[others].tobytes()


def test_rope_attention_equals_two_ops(rng):
    """The same numbers as op_rope_kv then op_attention on the CPU executor, to the bit."""
    n_q, n_kv, d, ctx, pos = 8, 2, 64, 256, 200
    fused = RopeAttention(n_q, n_kv, d, ctx, BF16, LLAMA3, queues=4)
    fused.random_data(rng)
    ex = Amk.CpuExecutor.new(fused.program)
    fused.load(ex, pos)
    ex.run()
    got = fused.results(ex)

    p = Amk.Program.new(4)
    q = p.add_buffer('q', F32, [n_q * d], IN)
    k = p.add_buffer('k', F32, [n_kv * d], IN)
    v = p.add_buffer('v', F32, [n_kv * d], IN)
    kc = p.add_buffer('k cache', BF16, [ctx, n_kv, d], IN)
    vc = p.add_buffer('v cache', BF16, [ctx, n_kv, d], IN)
    pb = p.add_buffer('pos', I32, [1], IN)
    out = p.add_buffer('out', F32, [n_q * d], OUT)
    r = LLAMA3
    p.op_rope_kv(q, k, v, kc, vc, pb, d, n_q, n_kv, r['theta'], r['factor'], r['low'], r['high'],
                 r['old_ctx'])
    p.op_attention(out, q, kc, vc, pb, d, n_q, n_kv, 0, fused.scale)
    p.compile()
    ex = Amk.CpuExecutor.new(p)
    qkv = fused.data['qkv']
    for buf, data in ((q, qkv[:n_q * d]), (k, qkv[n_q * d:(n_q + n_kv) * d]),
                      (v, qkv[(n_q + n_kv) * d:]), (kc, fused.data['kc']), (vc, fused.data['vc'])):
        ex.upload(buf, to_bytes(data))
    ex.upload(pb, to_bytes(np.array([pos], dtype=np.int32)))
    ex.run()
    assert from_bytes(F32, ex.download(out)).tobytes() == got[0].tobytes()
    assert ex.download(kc).get_data() == to_bytes(got[1]).get_data()
    assert ex.download(vc).get_data() == to_bytes(got[2]).get_data()


def rope_attention_error(n_q=8, n_kv=2, d=64, ctx=64, cache=F32, qkv_n=None, out_is_qkv=False,
                         cache_role=IN, scale=0.125, theta=10000.0):
    p = Amk.Program.new(4)
    qkv = p.add_buffer('qkv', F32, [qkv_n or (n_q + 2 * n_kv) * d], IN)
    kc = p.add_buffer('k cache', cache, [ctx, n_kv, d], cache_role)
    vc = p.add_buffer('v cache', cache, [ctx, n_kv, d], IN)
    pos = p.add_buffer('pos', I32, [1], IN)
    out = qkv if out_is_qkv else p.add_buffer('out', F32, [n_q * d], OUT)
    with pytest.raises(GLib.Error) as e:
        p.op_rope_attention(out, qkv, kc, vc, pos, d, n_q, n_kv, 0, scale, theta, 0.0, 0.0, 0.0, 0)
    return e.value


@pytest.mark.parametrize('shape', [dict(d=48), dict(n_q=16, n_kv=2), dict(ctx=8192)],
                         ids=['head-dim-48', 'group-of-512', 'split-too-long'])
def test_rope_attention_shapes_that_do_not_fit(shape):
    err = rope_attention_error(**shape)
    assert err.matches(Amk.program_error_quark(), PE.INVALID), err.message
    assert 'op_rope_kv and op_attention' in err.message


@pytest.mark.parametrize('bad', [dict(qkv_n=100), dict(out_is_qkv=True), dict(cache_role=CONST),
                                 dict(scale=0.0), dict(theta=-1.0)],
                         ids=['qkv-too-small', 'out-is-qkv', 'constant-cache', 'scale', 'theta'])
def test_rope_attention_bad_operands(bad):
    err = rope_attention_error(**bad)
    assert (err.matches(Amk.program_error_quark(), PE.INVALID) or
            err.matches(Amk.program_error_quark(), PE.OUT_OF_RANGE)), err.message
    assert 'ROPE_ATTENTION' in err.message


def fused_rig(table_len, ctx=Rig.CTX, n_splits=Rig.S, d=32):
    """A raw ATTN_DECODE with RoPE fused (seven buffers): qkv, the caches, the cos and sin
    table of table_len floats."""
    p = Amk.Program.new(1)
    n_q, n_kv = Rig.N_Q, Rig.N_KV
    qkv = p.add_buffer('qkv', F32, [(n_q + 2 * n_kv) * d], IN)
    kc = p.add_buffer('kcache', BF16, [ctx * n_kv * d], IN)
    vc = p.add_buffer('vcache', BF16, [ctx * n_kv * d], IN)
    pos = p.add_buffer('position', I32, [1], IN)
    partial = p.add_buffer('partial', F32, [n_q * n_splits * (d + 2)], SCRATCH)
    out = p.add_buffer('out', F32, [n_q * d], OUT)
    table = p.add_buffer('cos sin', F32, [table_len], CONST)
    c = p.add_counter('arrivals')
    add_op(p, 0, Amk.Opcode.ATTN_DECODE, [partial, qkv, kc, vc, pos, out, table],
           dict(head_dim=d, n_q_heads=n_q, n_kv_heads=n_kv, max_ctx=ctx, kv_head=1,
                n_splits=n_splits, scale=0.3, arrival_counter=c))
    return p


def test_decode_rope_fused_accepted():
    fused_rig(Rig.CTX * 32).verify()


def test_decode_rope_fused_table_too_small():
    expect_error(fused_rig(Rig.CTX * 32 - 1), PE.OUT_OF_RANGE, 'ATTN_DECODE', 'cos and sin', '“cos sin”')


def test_decode_rope_fused_split_too_long():
    expect_error(fused_rig(4096 * 32, ctx=4096, n_splits=1), PE.OUT_OF_RANGE, 'ATTN_DECODE',
                 'RoPE fused', 'separate ops')
