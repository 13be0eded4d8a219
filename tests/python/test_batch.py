# SPDX-License-Identifier: LGPL-2.1-or-later
"""Amk.Batch from Python, on tests/data/tiny-llama and tiny-qwen3 (CPU executor).

The reference for every sequence is Amk.Generator's greedy run of its prompt alone, on
a model of its own: a batch must give each sequence exactly those tokens, however many
sequences share its steps, whenever they join and whichever of them is cancelled.
Every Amk.BatchError code is checked with its domain.
"""

import functools
import os

import pytest

import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, GLib  # noqa: E402

from amktest import add_op  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data')
MODELS = ['tiny-llama', 'tiny-qwen3']
PROMPTS = [('The capital of France is', 8), ('Once upon a time', 12), ('1, 2, 3,', 6)]


def load(name, **props):
    model = Amk.Model(path=os.path.join(DATA, name), **props)
    model.init(None)
    return model


@functools.lru_cache(maxsize=None)
def alone(name, prompt, n):
    """The generator's greedy tokens for prompt, on a model of their own."""
    generator = Amk.Generator.new(load(name), None)
    generator.generate(prompt, n, None)
    return tuple(generator.get_tokens())


def tokens(batch, seq):
    return tuple(batch.get_tokens(seq))


def batch_error(info, code):
    assert info.value.matches(Amk.batch_error_quark(), code), \
        (info.value.domain, info.value.code, info.value.message)
    assert info.value.matches(Amk.BatchError.quark(), code)
    assert info.value.message


class Recorder:
    """The batch's signals: token ids and pieces per sequence, finish reasons in order."""

    def __init__(self, batch):
        self.tokens, self.pieces, self.finished = {}, {}, []
        batch.connect('token', self.on_token)
        batch.connect('finished', lambda b, seq, reason: self.finished.append((seq, reason)))

    def on_token(self, batch, seq, token, piece):
        self.tokens.setdefault(seq, []).append(token)
        self.pieces[seq] = self.pieces.get(seq, '') + piece


def run_batch(name, prompts, capacity=4, model=None):
    batch = Amk.Batch.new(model or load(name), None, capacity)
    ids = [batch.add(prompt, n) for prompt, n in prompts]
    batch.run(None)
    return batch, ids


# Tokens -------------------------------------------------------------------------------

@pytest.mark.parametrize('name', MODELS)
def test_each_sequence_gets_its_tokens_alone(name):
    batch = Amk.Batch.new(load(name), None, 4)
    seen = Recorder(batch)
    ids = [batch.add(prompt, n) for prompt, n in PROMPTS]
    assert len(set(ids)) == 3 and 0 not in ids
    assert batch.props.n_active == 3 and batch.props.steps == 0
    assert batch.run(None)
    assert batch.props.n_active == 0
    for seq, (prompt, n) in zip(ids, PROMPTS):
        want = alone(name, prompt, n)
        assert tokens(batch, seq) == want, (prompt, tokens(batch, seq), want)
        assert tuple(seen.tokens[seq]) == want
        reason = batch.get_finish_reason(seq)
        assert reason == (Amk.FinishReason.LENGTH if len(want) == n else Amk.FinishReason.STOP)
        # the text is the tokens' (the generator's decoding); every token was streamed
        assert batch.get_text(seq) == load(name).props.tokenizer.decode(list(want))
    assert sorted(seen.finished) == sorted((seq, batch.get_finish_reason(seq)) for seq in ids)
    # one launch a step for all three: as many steps as the longest needs (a step more
    # for the end-of-sequence token of one that stopped)
    assert batch.props.steps == max(len(alone(name, p, n)) + (len(alone(name, p, n)) < n)
                                    for p, n in PROMPTS)


@pytest.mark.parametrize('name', MODELS)
def test_batch_of_one_equals_batch_of_several(name):
    together, ids = run_batch(name, PROMPTS)
    for seq, (prompt, n) in zip(ids, PROMPTS):
        single, (one,) = run_batch(name, [(prompt, n)], capacity=1)
        assert tokens(single, one) == tokens(together, seq)
        assert single.get_text(one) == together.get_text(seq)


@pytest.mark.parametrize('name', MODELS)
def test_continuous_batching(name):
    batch = Amk.Batch.new(load(name), None, 2)
    seen = Recorder(batch)
    ids = [batch.add(prompt, n) for prompt, n in PROMPTS[:2]]
    with pytest.raises(GLib.Error) as info:
        batch.add(*PROMPTS[2])
    batch_error(info, Amk.BatchError.FULL)
    assert batch.props.n_active == 2
    while batch.props.n_active == 2:
        batch.step(None)
    assert len(seen.finished) == 1
    joined_at = batch.props.steps
    ids.append(batch.add(*PROMPTS[2]))   # in the slot the finished sequence left
    assert batch.props.n_active == 2
    batch.run(None)
    for seq, (prompt, n) in zip(ids, PROMPTS):
        assert tokens(batch, seq) == alone(name, prompt, n), prompt
    # the third ran after the first finished: more steps than the longest alone
    assert 0 < joined_at < batch.props.steps
    assert batch.props.steps >= joined_at + len(alone(name, *PROMPTS[2]))


def test_join_from_the_finished_handler():
    name = MODELS[0]
    batch = Amk.Batch.new(load(name), None, 1)
    later = []

    def on_finished(b, seq, reason):
        if not later:
            later.append(b.add(*PROMPTS[1]))

    batch.connect('finished', on_finished)
    first = batch.add(*PROMPTS[0])
    batch.run(None)
    assert tokens(batch, first) == alone(name, *PROMPTS[0])
    assert tokens(batch, later[0]) == alone(name, *PROMPTS[1])


# Cancel, remove and the finish reasons ------------------------------------------------

@pytest.mark.parametrize('name', MODELS)
def test_cancel_leaves_the_others_unchanged(name):
    reference, _ = run_batch(name, PROMPTS)
    batch = Amk.Batch.new(load(name), None, 4)
    seen = Recorder(batch)
    ids = [batch.add(prompt, n) for prompt, n in PROMPTS]
    for _ in range(3):
        batch.step(None)
    assert batch.cancel(ids[1])
    assert seen.finished == [(ids[1], Amk.FinishReason.CANCELLED)]
    assert batch.props.n_active == 2
    batch.run(None)
    assert batch.get_finish_reason(ids[1]) == Amk.FinishReason.CANCELLED
    assert tokens(batch, ids[1]) == tokens(reference, ids[1])[:3]
    # its text is that of its tokens so far; the pieces streamed lack only the bytes
    # of a character its last token began (they would have come with the next token)
    text = batch.get_text(ids[1])
    assert text == batch.props.model.props.tokenizer.decode(list(tokens(batch, ids[1])))
    assert text.startswith(seen.pieces[ids[1]])
    for seq in (ids[0], ids[2]):
        assert tokens(batch, seq) == tokens(reference, seq)
        assert batch.get_finish_reason(seq) == reference.get_finish_reason(seq)
    # cancelling a finished sequence leaves it as it is, with no second signal
    n_finished = len(seen.finished)
    assert batch.cancel(ids[0])
    assert batch.get_finish_reason(ids[0]) != Amk.FinishReason.CANCELLED
    assert len(seen.finished) == n_finished


def test_cancel_from_the_token_handler():
    name = MODELS[0]
    reference, _ = run_batch(name, PROMPTS)
    batch = Amk.Batch.new(load(name), None, 4)
    ids = [batch.add(prompt, n) for prompt, n in PROMPTS]

    def on_token(b, seq, token, piece):
        if seq == ids[1] and len(b.get_tokens(seq)) == 2:
            b.cancel(seq)

    batch.connect('token', on_token)
    batch.run(None)
    assert tokens(batch, ids[1]) == tokens(reference, ids[1])[:2]
    assert batch.get_finish_reason(ids[1]) == Amk.FinishReason.CANCELLED
    for seq in (ids[0], ids[2]):
        assert tokens(batch, seq) == tokens(reference, seq)


def test_remove():
    name = MODELS[0]
    batch = Amk.Batch.new(load(name), None, 2)
    seen = Recorder(batch)
    first = batch.add(*PROMPTS[0])
    second = batch.add(*PROMPTS[1])
    batch.step(None)
    assert batch.remove(second)            # running: cancelled, then forgotten
    assert seen.finished == [(second, Amk.FinishReason.CANCELLED)]
    assert batch.props.n_active == 1
    with pytest.raises(GLib.Error) as info:
        batch.get_text(second)
    batch_error(info, Amk.BatchError.UNKNOWN_SEQUENCE)
    third = batch.add(*PROMPTS[2])         # its slot is free again
    batch.run(None)
    assert tokens(batch, first) == alone(name, *PROMPTS[0])
    assert tokens(batch, third) == alone(name, *PROMPTS[2])
    assert batch.remove(first)             # finished: forgotten, no second signal
    assert len(seen.finished) == 3
    assert third not in (first, second)


@pytest.mark.parametrize('name', MODELS)
def test_context_full_finishes_a_sequence(name):
    context = 16
    model = load(name, context_length=context)
    assert model.props.context_length == context
    prompt = PROMPTS[0][0]
    n_prompt = len(model.props.tokenizer.encode(prompt, True))
    batch = Amk.Batch.new(model, None, 2)
    seq = batch.add(prompt, 0)             # no limit but the context
    other = batch.add(PROMPTS[2][0], 3)
    batch.run(None)
    assert batch.get_finish_reason(other) == Amk.FinishReason.LENGTH
    got = tokens(batch, seq)
    if batch.get_finish_reason(seq) == Amk.FinishReason.STOP:
        pytest.skip(f'{name} gave an end-of-sequence token before the context was full')
    assert batch.get_finish_reason(seq) == Amk.FinishReason.CONTEXT
    # the last generated token is not fed: it needs no row of the cache
    assert len(got) == context - n_prompt + 1
    assert got == alone(name, prompt, len(got))


def test_end_of_sequence_stops_a_sequence():
    # tiny-llama's greedy continuation of 'The world' reaches its end-of-sequence token
    # after 10 tokens: the sequence stops there, the token not among its tokens
    name = MODELS[0]
    batch = Amk.Batch.new(load(name), None, 2)
    seen = Recorder(batch)
    seq = batch.add('The world', 0)
    other = batch.add(PROMPTS[1][0], 20)
    batch.run(None)
    assert batch.get_finish_reason(seq) == Amk.FinishReason.STOP
    assert tokens(batch, seq) == alone(name, 'The world', 64)
    assert len(tokens(batch, seq)) == 10 == len(seen.tokens[seq])
    assert (seq, Amk.FinishReason.STOP) in seen.finished
    assert tokens(batch, other) == alone(name, PROMPTS[1][0], 20)


# Errors -------------------------------------------------------------------------------

def test_full():
    batch = Amk.Batch.new(load(MODELS[0]), None, 1)
    batch.add(*PROMPTS[0])
    with pytest.raises(GLib.Error) as info:
        batch.add(*PROMPTS[1])
    batch_error(info, Amk.BatchError.FULL)
    assert batch.props.n_active == 1


@pytest.mark.parametrize('name', MODELS)
def test_empty_prompt(name):
    batch = Amk.Batch.new(load(name), None, 2)
    with pytest.raises(GLib.Error) as info:
        batch.add('', 4)
    batch_error(info, Amk.BatchError.EMPTY_PROMPT)
    assert batch.props.n_active == 0


def test_prompt_longer_than_the_context():
    model = load(MODELS[0], context_length=16)
    batch = Amk.Batch.new(model, None, 2)
    kept = batch.add(PROMPTS[0][0], 3)
    long_prompt = ' '.join(['one two three'] * 10)
    assert len(model.props.tokenizer.encode(long_prompt, True)) > 16
    with pytest.raises(GLib.Error) as info:
        batch.add(long_prompt, 4)
    batch_error(info, Amk.BatchError.CONTEXT_FULL)
    assert '16' in info.value.message
    assert batch.props.n_active == 1
    batch.run(None)
    assert tokens(batch, kept) == alone(MODELS[0], PROMPTS[0][0], 3)


def test_unknown_sequence():
    batch = Amk.Batch.new(load(MODELS[0]), None, 2)
    seq = batch.add(*PROMPTS[2])
    unknown = seq + 100
    for call in (batch.cancel, batch.remove, batch.get_text, batch.get_tokens,
                 batch.get_finish_reason):
        with pytest.raises(GLib.Error) as info:
            call(unknown)
        batch_error(info, Amk.BatchError.UNKNOWN_SEQUENCE)
        assert str(unknown) in info.value.message
    assert batch.props.n_active == 1
    batch.remove(seq)
    with pytest.raises(GLib.Error) as info:
        batch.remove(seq)
    batch_error(info, Amk.BatchError.UNKNOWN_SEQUENCE)


def test_executor_taken():
    cpu = Amk.CpuExecutor()
    batch = Amk.Batch.new(load(MODELS[0]), cpu, 2)
    assert batch.props.executor is cpu
    batch.add(*PROMPTS[0])
    batch.step(None)
    other = Amk.Program.new(1)
    x = other.add_buffer('x', Amk.DType.F32, [4], Amk.BufferRole.OUTPUT)
    add_op(other, 0, Amk.Opcode.FILL, [x], dict(count=4, value=1.0))
    assert Amk.Executor.load(cpu, other)
    with pytest.raises(GLib.Error) as info:
        batch.step(None)
    batch_error(info, Amk.BatchError.EXECUTOR_TAKEN)
    with pytest.raises(GLib.Error) as info:
        batch.add(*PROMPTS[1])
    batch_error(info, Amk.BatchError.EXECUTOR_TAKEN)


def test_step_async():
    """Steps in a worker thread: the same tokens, every signal in the main loop before
    its step's callback, and BUSY for the calls made while a step runs."""
    name = MODELS[1]
    batch = Amk.Batch.new(load(name), None, 4)
    ids = [batch.add(prompt, n) for prompt, n in PROMPTS]
    recorder = Recorder(batch)
    loop = GLib.MainLoop()
    seen_at_callback = []

    def done(b, result):
        assert b.step_finish(result)
        seen_at_callback.append(sum(len(t) for t in recorder.tokens.values()))
        if b.props.n_active == 0:
            loop.quit()
        else:
            start()

    def start():
        batch.step_async(None, done)
        with pytest.raises(GLib.Error) as info:
            batch.add(*PROMPTS[0])
        batch_error(info, Amk.BatchError.BUSY)

    start()
    loop.run()
    for seq, (prompt, n) in zip(ids, PROMPTS):
        assert tokens(batch, seq) == alone(name, prompt, n)
        assert tuple(recorder.tokens[seq]) == tokens(batch, seq)
    assert seen_at_callback[-1] == sum(len(tokens(batch, seq)) for seq in ids)
    assert len(seen_at_callback) == batch.props.steps
