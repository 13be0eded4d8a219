"""The many-token ops on the CPU executor: ROPE_ROWS and ATTN_ROWS (op_rope_rows,
op_attention_rows) against a numpy reference written here from HF transformers' formulas,
for prompt chunks of 1, 7 and 100 rows at positions from 0 and from 37 (earlier cache rows
filled at random), GQA and plain heads, Llama-3 scaling on and off, Qwen3's q/k norm on
and off, padding rows, two sequences in a 3-D cache (batched decode), bf16 and f32 caches;
a chunk against the decode ops run token by token; the device-side position and sequence
checks and the refusal of caches that share memory; EMBED of many tokens
(op_embed_rows)."""
import math

import numpy as np
import pytest

from amktest import Amk, GLib, add_op, from_bytes, from_f32, make_rng, poison, to_bytes, to_f32
from attention_ref import ref_attention, ref_inv_freq, ref_rope

F32, BF16, I32 = Amk.DType.F32, Amk.DType.BF16, Amk.DType.I32
IN, OUT, CONST = Amk.BufferRole.INPUT, Amk.BufferRole.OUTPUT, Amk.BufferRole.CONSTANT

LLAMA3 = dict(theta=500000.0, factor=32.0, low=1.0, high=4.0, old_ctx=8192)
PLAIN = dict(theta=10000.0)
EPS = 1e-6


@pytest.fixture
def rng():
    return make_rng()


def rel_err(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def tolerance(cache):
    return 1e-5 if cache == F32 else 1e-2


def rope_args(rope):
    return (float(rope['theta']), float(rope.get('factor', 0.0)), float(rope.get('low', 0.0)),
            float(rope.get('high', 0.0)), int(rope.get('old_ctx', 0)))


def ref_rmsnorm(x, w, eps):
    x = x.astype(np.float32)
    ms = (x * x).mean(axis=-1, keepdims=True, dtype=np.float32)
    return (x * (np.float32(1.0) / np.sqrt(ms + np.float32(eps))) * w).astype(np.float32)


class Rows:
    """op_rope_rows then op_attention_rows over M rows; caches [max_ctx, n_kv d] (n_seqs 0)
    or [n_seqs, max_ctx, n_kv d] with a seq buffer."""

    def __init__(self, n_q, n_kv, d, m, max_ctx, cache, rope, n_seqs=0, norms=False, queues=5, out=F32):
        self.n_q, self.n_kv, self.d, self.m, self.max_ctx = n_q, n_kv, d, m, max_ctx
        self.cache, self.rope, self.norms, self.out_dt = cache, rope, norms, out
        self.n_seqs = max(n_seqs, 1)
        self.scale = 1.0 / math.sqrt(d)
        w = (n_q + 2 * n_kv) * d
        p = self.program = Amk.Program.new(queues)
        self.qkv = p.add_buffer('qkv', F32, [m, w], IN)
        cshape = [max_ctx, n_kv * d] if n_seqs == 0 else [n_seqs, max_ctx, n_kv * d]
        self.kc = p.add_buffer('k cache', cache, cshape, IN)
        self.vc = p.add_buffer('v cache', cache, cshape, IN)
        self.pos = p.add_buffer('pos', I32, [m], IN)
        self.seq = p.add_buffer('seq', I32, [m], IN) if n_seqs else -1
        self.qn = p.add_buffer('q norm', F32, [d], IN) if norms else -1
        self.kn = p.add_buffer('k norm', F32, [d], IN) if norms else -1
        self.out = p.add_buffer('out', out, [m, n_q * d], OUT)
        p.op_rope_rows(self.qkv, self.kc, self.vc, self.pos, self.seq, self.qn, self.kn, d, n_q, n_kv,
                       EPS, *rope_args(rope))
        p.op_attention_rows(self.out, self.qkv, self.kc, self.vc, self.pos, self.seq, d, n_q, n_kv,
                            self.scale)
        p.compile()

    def random_data(self, rng):
        n = self.n_seqs * self.max_ctx * self.n_kv * self.d
        self.data = dict(
            qkv=rng.standard_normal(self.m * (self.n_q + 2 * self.n_kv) * self.d).astype(np.float32),
            kc=from_f32(self.cache, rng.standard_normal(n)),
            vc=from_f32(self.cache, rng.standard_normal(n)),
            qn=rng.uniform(0.5, 1.5, self.d).astype(np.float32),
            kn=rng.uniform(0.5, 1.5, self.d).astype(np.float32))

    def run(self, pos, seq=None):
        ex = Amk.CpuExecutor.new(self.program)
        ex.upload(self.qkv, to_bytes(self.data['qkv']))
        ex.upload(self.kc, to_bytes(self.data['kc']))
        ex.upload(self.vc, to_bytes(self.data['vc']))
        ex.upload(self.pos, to_bytes(np.asarray(pos, dtype=np.int32)))
        if self.seq >= 0:
            ex.upload(self.seq, to_bytes(np.asarray(seq, dtype=np.int32)))
        if self.norms:
            ex.upload(self.qn, to_bytes(self.data['qn']))
            ex.upload(self.kn, to_bytes(self.data['kn']))
        ex.upload(self.out, to_bytes(poison(self.out_dt, self.m * self.n_q * self.d)))
        self.ex = ex
        ex.run()
        shape = (self.n_seqs, self.max_ctx, self.n_kv, self.d)
        return (to_f32(self.out_dt, from_bytes(self.out_dt, ex.download(self.out))).reshape(self.m, self.n_q, self.d),
                from_bytes(F32, ex.download(self.qkv)).reshape(self.m, -1, self.d),
                from_bytes(self.cache, ex.download(self.kc)).reshape(shape),
                from_bytes(self.cache, ex.download(self.vc)).reshape(shape))

    def expected(self, pos, seq=None):
        n_q, n_kv, d, c = self.n_q, self.n_kv, self.d, self.cache
        seq = np.zeros(self.m, dtype=np.int32) if seq is None else seq
        shape = (self.n_seqs, self.max_ctx, n_kv, d)
        kc = to_f32(c, self.data['kc']).reshape(shape).copy()
        vc = to_f32(c, self.data['vc']).reshape(shape).copy()
        qkv = self.data['qkv'].reshape(self.m, -1, d).copy()
        inv = ref_inv_freq(d, **self.rope)
        for r in range(self.m):
            if pos[r] < 0:
                continue
            q, k = qkv[r, :n_q], qkv[r, n_q:n_q + n_kv]
            if self.norms:
                q, k = ref_rmsnorm(q, self.data['qn'], EPS), ref_rmsnorm(k, self.data['kn'], EPS)
            qkv[r, :n_q] = ref_rope(q, pos[r], inv)
            qkv[r, n_q:n_q + n_kv] = ref_rope(k, pos[r], inv)
            kc[seq[r], pos[r]] = to_f32(c, from_f32(c, qkv[r, n_q:n_q + n_kv]))
            vc[seq[r], pos[r]] = to_f32(c, from_f32(c, qkv[r, n_q + n_kv:]))
        out = np.zeros((self.m, n_q, d))
        for r in range(self.m):
            if pos[r] >= 0:
                out[r] = ref_attention(qkv[r, :n_q], kc[seq[r]], vc[seq[r]], pos[r], n_kv, self.scale)
        return out, qkv, kc, vc


def check(rows, pos, seq=None):
    """Runs rows and compares with the reference: the output, the rotated rows, the cache
    rows written (to the tolerance of the cache's dtype) and every other cache row (to the
    bit); padding rows keep their qkv and get zeros."""
    got, qkv, kc, vc = rows.run(pos, seq)
    want, want_qkv, want_kc, want_vc = rows.expected(pos, seq)
    valid = np.asarray(pos) >= 0
    err = rel_err(got[valid], want[valid])
    print(f'M {rows.m}: out rel err {err:.3g}')
    assert err <= (tolerance(rows.cache) if rows.out_dt == F32 else 1e-2)
    assert np.all(got[~valid] == 0.0)
    assert rel_err(qkv[valid], want_qkv[valid]) <= 1e-5
    assert qkv[~valid].tobytes() == rows.data['qkv'].reshape(rows.m, -1, rows.d)[~valid].tobytes()
    seq = np.zeros(rows.m, dtype=np.int32) if seq is None else np.asarray(seq)
    written = np.zeros(kc.shape[:2], dtype=bool)
    written[seq[valid], np.asarray(pos)[valid]] = True
    for after, before, ref in ((kc, rows.data['kc'], want_kc), (vc, rows.data['vc'], want_vc)):
        assert after[~written].tobytes() == before.reshape(after.shape)[~written].tobytes()
        assert rel_err(to_f32(rows.cache, after[written]), ref[written]) <= tolerance(rows.cache)


SHAPES = [pytest.param(8, 2, 64, id='gqa-8-2-64'), pytest.param(4, 4, 32, id='mha-4-4-32')]


@pytest.mark.parametrize('cache', [F32, BF16], ids=['f32', 'bf16'])
@pytest.mark.parametrize('n_q,n_kv,d', SHAPES)
@pytest.mark.parametrize('m', [1, 7, 100])
@pytest.mark.parametrize('p0', [0, 37])
def test_prompt_chunk(rng, cache, n_q, n_kv, d, m, p0):
    """M rows at positions p0 .. p0+M-1 of one sequence, without a seq buffer."""
    rows = Rows(n_q, n_kv, d, m, 160, cache, LLAMA3 if p0 else PLAIN)
    rows.random_data(rng)
    check(rows, np.arange(p0, p0 + m))


def test_bf16_output(rng):
    """The output in bf16 (what a GPU prefill feeds its bf16 MATMUL), padding rows zero."""
    rows = Rows(8, 2, 64, 20, 160, BF16, LLAMA3, out=BF16)
    rows.random_data(rng)
    check(rows, list(range(3, 17)) + [-1] * 6)


@pytest.mark.parametrize('rope', [PLAIN, LLAMA3], ids=['plain', 'llama3'])
@pytest.mark.parametrize('norms', [False, True], ids=['no-norm', 'qk-norm'])
def test_rope_and_norm(rng, rope, norms):
    """Llama-3 scaling at positions past its low-frequency wavelength; Qwen3's q/k norm."""
    rows = Rows(8, 2, 64, 9, 1100, F32, rope, norms=norms, queues=3)
    rows.random_data(rng)
    check(rows, np.arange(1050, 1059))


@pytest.mark.parametrize('cache', [F32, BF16], ids=['f32', 'bf16'])
def test_padding_rows(rng, cache):
    """Rows with a negative position are left alone and get zeros."""
    rows = Rows(8, 2, 64, 7, 40, cache, PLAIN)
    rows.random_data(rng)
    check(rows, np.array([3, -1, 4, 5, -7, -1, 6]))


@pytest.mark.parametrize('cache', [F32, BF16], ids=['f32', 'bf16'])
@pytest.mark.parametrize('norms', [False, True], ids=['no-norm', 'qk-norm'])
def test_two_sequences(rng, cache, norms):
    """A 3-D cache of two sequences: one decode token of each (a batch), then rows of
    both at different positions with a padding row between."""
    rows = Rows(8, 2, 64, 2, 64, cache, LLAMA3, n_seqs=2, norms=norms)
    rows.random_data(rng)
    check(rows, np.array([40, 9]), np.array([0, 1]))
    rows = Rows(4, 4, 32, 6, 64, cache, PLAIN, n_seqs=2, norms=norms)
    rows.random_data(rng)
    check(rows, np.array([9, 30, 10, -1, 31, 11]), np.array([1, 0, 1, 1, 0, 1]))


class Decode:
    """The decode ops of one token, (RMSNORM of q and k,) ROPE_KV and attention, run once
    per row of a chunk with the caches carried from one step to the next."""

    def __init__(self, n_q, n_kv, d, max_ctx, cache, rope, norms):
        p = self.program = Amk.Program.new(5)
        self.q = p.add_buffer('q', F32, [n_q * d], IN)
        self.k = p.add_buffer('k', F32, [n_kv * d], IN)
        self.v = p.add_buffer('v', F32, [n_kv * d], IN)
        self.kc = p.add_buffer('k cache', cache, [max_ctx, n_kv * d], IN)
        self.vc = p.add_buffer('v cache', cache, [max_ctx, n_kv * d], IN)
        self.pos = p.add_buffer('pos', I32, [1], IN)
        self.out = p.add_buffer('out', F32, [n_q * d], OUT)
        if norms:
            self.qn = p.add_buffer('q norm', F32, [d], IN)
            self.kn = p.add_buffer('k norm', F32, [d], IN)
            p.op_rmsnorm(self.q, self.q, self.qn, d, EPS)
            p.op_rmsnorm(self.k, self.k, self.kn, d, EPS)
        p.op_rope_kv(self.q, self.k, self.v, self.kc, self.vc, self.pos, d, n_q, n_kv, *rope_args(rope))
        p.op_attention(self.out, self.q, self.kc, self.vc, self.pos, d, n_q, n_kv, 0, 1.0 / math.sqrt(d))
        p.compile()


@pytest.mark.parametrize('cache', [F32, BF16], ids=['f32', 'bf16'])
@pytest.mark.parametrize('norms', [False, True], ids=['no-norm', 'qk-norm'])
def test_chunk_equals_decode_steps(rng, cache, norms):
    """A chunk of M rows gives the caches of M decode steps to the bit and their outputs
    to 1e-6 (the decode ops round their split partials to fp32 before the merge)."""
    n_q, n_kv, d, ctx, m, p0 = 8, 2, 64, 160, 20, 37
    rows = Rows(n_q, n_kv, d, m, ctx, cache, LLAMA3, norms=norms)
    rows.random_data(rng)
    got, _, kc, vc = rows.run(np.arange(p0, p0 + m))

    dec = Decode(n_q, n_kv, d, ctx, cache, LLAMA3, norms)
    ex = Amk.CpuExecutor.new(dec.program)
    ex.upload(dec.kc, to_bytes(rows.data['kc']))
    ex.upload(dec.vc, to_bytes(rows.data['vc']))
    if norms:
        ex.upload(dec.qn, to_bytes(rows.data['qn']))
        ex.upload(dec.kn, to_bytes(rows.data['kn']))
    qkv = rows.data['qkv'].reshape(m, -1)
    for r in range(m):
        ex.upload(dec.q, to_bytes(qkv[r, :n_q * d]))
        ex.upload(dec.k, to_bytes(qkv[r, n_q * d:(n_q + n_kv) * d]))
        ex.upload(dec.v, to_bytes(qkv[r, (n_q + n_kv) * d:]))
        ex.upload(dec.pos, to_bytes(np.array([p0 + r], dtype=np.int32)))
        ex.run()
        err = rel_err(got[r].reshape(-1), from_bytes(F32, ex.download(dec.out)))
        assert err <= 1e-6, f'row {r}: rel err {err:.3g}'
    assert ex.download(dec.kc).get_data() == to_bytes(kc).get_data()
    assert ex.download(dec.vc).get_data() == to_bytes(vc).get_data()


@pytest.mark.parametrize('bad', ['pos', 'seq-high', 'seq-negative', 'both'])
def test_device_checks(rng, bad):
    """A position past the caches or a sequence outside them aborts with CHECK, the buffer
    of the positions (first, as on the GPU) or of the sequences as the detail; the
    sequence of a padding row is not checked."""
    rows = Rows(4, 2, 32, 4, 16, F32, PLAIN, n_seqs=2, queues=1)
    rows.random_data(rng)
    pos, seq = np.array([0, 15, -20, 3]), np.array([0, 1, 7, 1])
    rows.run(pos, seq)
    if bad in ('pos', 'both'):
        pos[3] = 16  # with a bad sequence in an earlier row too, the positions are named
    if bad != 'pos':
        seq[1] = -1 if bad == 'seq-negative' else 2
    with pytest.raises(GLib.Error) as info:
        rows.run(pos, seq)
    assert info.value.matches(Amk.launch_error_quark(), Amk.LaunchError.ABORTED), info.value.message
    record = rows.ex.get_last_abort()
    assert record.code == Amk.AbortCode.CHECK
    assert record.detail == (rows.pos if bad in ('pos', 'both') else rows.seq)


def raw_rows_program(opcode, same_caches):
    """A program of one raw ROPE_ROWS or ATTN_ROWS instruction over 2 rows, its value
    cache the key cache itself when same_caches."""
    p = Amk.Program.new(1)
    d, n_q, n_kv, m, ctx = 8, 4, 2, 2, 4
    qkv = p.add_buffer("qkv", F32, [m, (n_q + 2 * n_kv) * d], IN)
    kc = p.add_buffer("kc", F32, [ctx, n_kv * d], IN)
    vc = kc if same_caches else p.add_buffer("vc", F32, [ctx, n_kv * d], IN)
    pos = p.add_buffer("pos", I32, [m], IN)
    params = {'shape.head_dim': d, 'shape.n_q_heads': n_q, 'shape.n_kv_heads': n_kv,
              'shape.max_ctx': ctx, 'n_rows': m}
    if opcode == Amk.Opcode.ROPE_ROWS:
        add_op(p, 0, opcode, [qkv, kc, vc, pos, -1], {**params, 'freq.theta': 10000.0})
    else:
        out = p.add_buffer("out", F32, [m, n_q * d], OUT)
        add_op(p, 0, opcode, [out, qkv, kc, vc, pos, -1], {**params, 'scale': 0.25})
    return p


@pytest.mark.parametrize('opcode', [Amk.Opcode.ROPE_ROWS, Amk.Opcode.ATTN_ROWS], ids=['rope', 'attn'])
def test_verify_one_buffer_for_both_caches(opcode):
    """Key and value caches that are one buffer are refused by the verifier, as by the
    GPU's check: for ATTN_ROWS too, which writes neither."""
    assert raw_rows_program(opcode, False).verify()
    with pytest.raises(GLib.Error) as info:
        raw_rows_program(opcode, True).verify()
    assert info.value.matches(Amk.program_error_quark(), Amk.ProgramError.INVALID)
    assert "the key cache, buffer 1 “kc”, shares memory with the value cache" in info.value.message


def test_embed_rows(rng):
    """EMBED of many tokens: out[j] = table[tokens[j]], in rows over the queues; a bad
    token aborts with CHECK."""
    vocab, dim, m = 50, 48, 23
    table_data = rng.standard_normal(vocab * dim).astype(np.float32)
    for out_dtype, queues in ((F32, 4), (BF16, 1), (F32, 64)):
        p = Amk.Program.new(queues)
        table = p.add_buffer('table', BF16, [vocab, dim], CONST)
        p.set_buffer_data(table, to_bytes(from_f32(BF16, table_data)))
        tokens = p.add_buffer('tokens', I32, [m], IN)
        out = p.add_buffer('out', out_dtype, [m, dim], OUT)
        p.op_embed_rows(out, table, tokens)
        p.compile()
        ex = Amk.CpuExecutor.new(p)
        tok = rng.integers(0, vocab, m).astype(np.int32)
        ex.upload(tokens, to_bytes(tok))
        ex.upload(out, to_bytes(poison(out_dtype, m * dim)))
        ex.run()
        want = to_f32(BF16, from_f32(BF16, table_data)).reshape(vocab, dim)[tok]
        got = to_f32(out_dtype, from_bytes(out_dtype, ex.download(out))).reshape(m, dim)
        assert got.tobytes() == want.tobytes()
        tok[m // 2] = vocab
        ex.upload(tokens, to_bytes(tok))
        with pytest.raises(GLib.Error):
            ex.run()
        record = ex.get_last_abort()
        assert record.code == Amk.AbortCode.CHECK and record.detail == tokens


def test_embed_one_token_unchanged(rng):
    """n_tokens 0 is the one-token form: out[col0 ..] from tokens[token_index]."""
    vocab, dim = 10, 32
    p = Amk.Program.new(2)
    table = p.add_buffer('table', F32, [vocab, dim], CONST)
    data = rng.standard_normal(vocab * dim).astype(np.float32)
    p.set_buffer_data(table, to_bytes(data))
    tokens = p.add_buffer('tokens', I32, [3], IN)
    out = p.add_buffer('out', F32, [dim], OUT)
    p.op_embed(out, table, tokens, 2)
    p.compile()
    ex = Amk.CpuExecutor.new(p)
    ex.upload(tokens, to_bytes(np.array([1, 2, 7], dtype=np.int32)))
    ex.run()
    assert from_bytes(F32, ex.download(out)).tobytes() == data.reshape(vocab, dim)[7].tobytes()
