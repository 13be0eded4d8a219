# SPDX-License-Identifier: LGPL-2.1-or-later
"""Amk.Model and Amk.Generator from Python.

The errors need no model file; everything else loads the GGUF file that AMK_TEST_GGUF
names (SmolLM2-135M-Instruct) and is skipped without it. Generation runs on the CPU
executor, a few tokens at a time.
"""

import os

import pytest

import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, Gio, GLib  # noqa: E402

PROMPT = 'The capital of France is'
GGUF = os.environ.get('AMK_TEST_GGUF', '')
needs_model = pytest.mark.skipif(not os.path.isfile(GGUF),
                                 reason='set AMK_TEST_GGUF to a llama GGUF file (SmolLM2-135M-Instruct)')


def io_error(info, code):
    assert info.value.matches(Gio.io_error_quark(), code), (info.value.code, info.value.message)
    assert info.value.message


def generator_error(info, code):
    assert info.value.matches(Amk.generator_error_quark(), code), (info.value.code, info.value.message)
    assert info.value.message


@pytest.fixture(scope='module')
def model():
    if not os.path.isfile(GGUF):
        pytest.skip('set AMK_TEST_GGUF')
    return Amk.Model.new_from_file(GGUF, None)


# Without a model file -----------------------------------------------------------------

def test_missing_file():
    with pytest.raises(GLib.Error) as info:
        Amk.Model.new_from_file('/nonexistent/model.gguf', None)
    io_error(info, Gio.IOErrorEnum.NOT_FOUND)


def test_empty_folder(tmp_path):
    # a folder is read as a Hugging Face checkpoint: an empty one lacks config.json
    with pytest.raises(GLib.Error) as info:
        Amk.Model.new_from_file(str(tmp_path), None)
    io_error(info, Gio.IOErrorEnum.NOT_FOUND)
    assert 'config.json' in info.value.message


def test_not_a_model(tmp_path):
    # a file that is not a model is an Amk.ModelError, not an I/O error
    path = tmp_path / 'text.gguf'
    path.write_text('This is not a model, just some text.\n')
    with pytest.raises(GLib.Error) as info:
        Amk.Model.new_from_file(str(path), None)
    assert info.value.matches(Amk.model_error_quark(), Amk.ModelError.CORRUPT), \
        (info.value.domain, info.value.code, info.value.message)
    assert info.value.matches(Amk.ModelError.quark(), Amk.ModelError.CORRUPT)
    assert 'text.gguf' in info.value.message


def test_bad_settings_without_loading():
    m = Amk.Model(path='/nonexistent/model.gguf')
    assert not m.props.loaded
    g = Amk.Generator(model=m, temperature=-2.0)
    with pytest.raises(GLib.Error) as info:
        g.generate(PROMPT, 3, None)
    generator_error(info, Amk.GeneratorError.INVALID_TEMPERATURE)
    assert '-2' in info.value.message
    g.props.temperature = 0.5
    g.props.top_p = 0.0
    with pytest.raises(GLib.Error) as info:
        g.generate(PROMPT, 3, None)
    generator_error(info, Amk.GeneratorError.INVALID_TOP_P)
    g.props.top_p = 1.0
    with pytest.raises(GLib.Error) as info:
        g.generate('', 3, None)
    generator_error(info, Amk.GeneratorError.EMPTY_PROMPT)
    # the arguments are fine: now the model's own error
    with pytest.raises(GLib.Error) as info:
        g.generate(PROMPT, 3, None)
    io_error(info, Gio.IOErrorEnum.NOT_FOUND)
    assert g.props.position == 0


def test_executor_property():
    m = Amk.Model(path='/nonexistent/model.gguf')
    # given none, the generator makes a CPU executor
    g = Amk.Generator(model=m)
    assert isinstance(g.props.executor, Amk.CpuExecutor)
    assert isinstance(g.get_executor(), Amk.Executor)
    cpu = Amk.CpuExecutor()
    assert Amk.Generator.new(m, cpu).props.executor is cpu
    assert Amk.Generator(model=m, executor=cpu).get_executor() is cpu


# With a model file --------------------------------------------------------------------

@needs_model
def test_model_properties(model):
    assert model.props.loaded
    assert model.props.path == GGUF
    assert model.props.architecture == 'llama'
    assert model.props.n_layers == 30
    assert model.props.hidden_size == 576
    assert model.props.vocab_size == 49152
    assert 0 < model.props.context_length <= 2048
    assert model.props.n_queues > 0
    assert model.props.dtype == Amk.DType.BF16
    assert model.props.weight_bytes > 2 * 49152 * 576
    assert model.props.tokenizer.get_vocab_size() == 49152
    assert model.props.program.get_verified()


@needs_model
def test_keep_quantized():
    """The CPU executor keeps the file's Q8_0 token embedding (also the output matrix)
    either way; keep-quantized asks every executor to (tests/gpu/test_gpu_quantized.py
    checks that a GPU expands it by default)."""
    sizes = []
    for keep in (False, True):
        m = Amk.Model(path=GGUF, keep_quantized=keep)
        assert m.props.keep_quantized == keep and m.get_keep_quantized() == keep
        Amk.Generator.new(m, Amk.CpuExecutor.new_empty()).prefill('Hi', None)   # loads it
        sizes.append(m.props.weight_bytes)
    assert 0 < sizes[0] == sizes[1] < 2 * 134515008   # Q8_0 rows in 34 bytes, not 64
    assert Amk.Model(path=GGUF).props.keep_quantized is False


@needs_model
def test_greedy_streams_tokens(model):
    g = Amk.Generator.new(model, None)
    seen = []
    g.connect('token', lambda gen, token_id, piece: seen.append((token_id, piece)))
    text = g.generate(PROMPT, 3, None)
    tokens = list(g.get_tokens())
    assert len(tokens) == 3 == g.props.generated_tokens
    assert [t for t, _ in seen] == tokens
    assert ''.join(p for _, p in seen) == text
    assert text.startswith(' Paris')
    assert g.props.prompt_tokens == len(model.props.tokenizer.encode(PROMPT, True))
    assert g.props.position == g.props.prompt_tokens + 2
    assert g.props.prefill_tokens_per_second > 0
    assert g.props.tokens_per_second > 0
    # a second call continues the session: the last token, then ' Its'
    position = g.props.position
    g.generate(' Its', 1, None)
    assert g.props.prompt_tokens == 2
    assert g.props.position == position + 2


@needs_model
def test_generator_on_a_given_executor():
    # a model not loaded yet takes the executor's preferred queue count
    m = Amk.Model(path=GGUF, context_length=16)
    cpu = Amk.CpuExecutor()
    cpu.props.threads = 3   # a queue per worker
    g = Amk.Generator.new(m, cpu)
    assert g.generate(PROMPT, 1, None).startswith(' Paris')
    assert m.props.n_queues == cpu.get_preferred_queues() == 3
    assert cpu.props.program is m.props.program
    # a prompt longer than the context
    with pytest.raises(GLib.Error) as info:
        g.generate(' and' * 20, 1, None)
    generator_error(info, Amk.GeneratorError.CONTEXT_FULL)


@needs_model
def test_sampling_is_deterministic_for_a_seed(model):
    g = Amk.Generator(model=model, temperature=1.2, top_k=40, top_p=0.9, seed=1234)
    first = (g.generate('Once upon a time', 3, None), list(g.get_tokens()))
    g.reset()
    second = (g.generate('Once upon a time', 3, None), list(g.get_tokens()))
    assert first == second


@needs_model
def test_cancelled_changes_nothing(model):
    g = Amk.Generator.new(model, None)
    cancellable = Gio.Cancellable()
    cancellable.cancel()
    with pytest.raises(GLib.Error) as info:
        g.generate(PROMPT, 3, cancellable)
    io_error(info, Gio.IOErrorEnum.CANCELLED)
    assert g.props.position == 0


@needs_model
def test_async_load_and_generate():
    loop = GLib.MainLoop()
    state = {'tokens': []}

    def loaded(source, result):
        state['model'] = Amk.Model.new_from_file_finish(result)
        loop.quit()

    Amk.Model.new_from_file_async(GGUF, None, loaded)
    loop.run()
    m = state['model']
    assert m.props.loaded

    def generated(gen, result):
        state['text'] = gen.generate_finish(result)
        state['tokens_at_finish'] = len(state['tokens'])
        loop.quit()

    g = Amk.Generator.new(m, None)
    g.connect('token', lambda gen, token_id, piece: state['tokens'].append(token_id))
    g.generate_async(PROMPT, 2, None, generated)
    loop.run()
    assert state['tokens_at_finish'] == 2
    assert state['tokens'] == list(g.get_tokens())
    assert state['text'].startswith(' Paris')


# The prefill chunk from Python ----------------------------------------------------------

@needs_model
def test_prefill_chunk():
    # chunks of 5 (three launches and a padded one for this prompt) give the tokens that
    # one decode step per prompt token gives; ::prefill-progress follows the chunks, which
    # take every prompt token on the CPU executor (the last chunk computes the next
    # token's logits too)
    texts = {}
    for chunk in (1, 5):
        model = Amk.Model(path=GGUF, context_length=64, prefill_chunk=chunk)
        model.init(None)
        assert model.props.prefill_chunk == chunk
        generator = Amk.Generator.new(model, None)
        fed = []
        generator.connect('prefill-progress', lambda gen, n, total: fed.append((n, total)))
        texts[chunk] = generator.generate(PROMPT + ' Paris, and the capital of Spain is the city of', 4, None)
        n_prompt = generator.props.prompt_tokens
        assert 0 < generator.props.time_to_first_token
        assert generator.props.prefill_tokens_per_second > 0
        if chunk == 1:
            assert fed == []
        else:
            assert fed == [(min(i, n_prompt), n_prompt) for i in range(5, n_prompt + 5, 5)]
            assert n_prompt % 5 != 0
    assert texts[5] == texts[1]
