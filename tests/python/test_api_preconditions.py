# SPDX-License-Identifier: LGPL-2.1-or-later
"""Bad input from a binding (issue 28): every public constructor and setter either
fails with a GLib.Error or refuses the value by a documented precondition, and every
*_async function calls back, with an error on bad input, on every path.

The suite runs with G_DEBUG=fatal-criticals, so the documented preconditions (a
critical) are checked in a child process; GObject's own range check of a property is a
warning, not a critical, and is checked here.
"""

import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, Gio, GLib  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data')
TINY = os.path.join(DATA, 'tiny-llama')
MISSING = os.path.join(DATA, 'no-such-model.gguf')
LE = Amk.LaunchError
TIMEOUT_S = 60


def _expected_launch_error():
    """What a launcher call gives when no device is usable: this build without CUDA,
    or a device index that names no device."""
    return LE.UNSUPPORTED if not Amk.Launcher.get_have_cuda() else LE.NO_DEVICE


# ---- fixed gaps: a GLib.Error where there was a critical or a wrong object ----------

def test_tokenizer_without_vocabulary_encodes_with_error():
    # Amk.Tokenizer() skips the constructors: it has no vocabulary. encode() used to
    # hit a GLib critical (g_hash_table_lookup on no table) that Python cannot catch.
    tokenizer = Amk.Tokenizer()
    assert tokenizer.props.vocab_size == 0
    for text in ('hello', ''):
        with pytest.raises(GLib.Error) as info:
            tokenizer.encode(text, True)
        assert info.value.matches(Amk.tokenizer_error_quark(),
                                  Amk.TokenizerError.INVALID_VOCAB), info.value.message
        assert 'no vocabulary' in info.value.message
    # the other calls already had an answer
    with pytest.raises(GLib.Error) as info:
        tokenizer.decode([1])
    assert info.value.matches(Amk.tokenizer_error_quark(), Amk.TokenizerError.UNKNOWN_ID)
    assert tokenizer.token_to_id('a') == -1
    assert tokenizer.id_to_token(0) is None


def test_tokenizer_with_vocabulary_still_encodes():
    tokenizer = Amk.Tokenizer.new_from_vocab(['a', 'b', 'ab'], ['a b'], None, 'gpt2')
    assert list(tokenizer.encode('ab', False)) == [2]


@pytest.mark.parametrize('make', [
    lambda: Amk.Launcher.new(-1),
    lambda: Amk.Launcher(device=-1),
    lambda: Amk.Launcher(device=-7),
], ids=['new', 'property', 'property-7'])
def test_launcher_negative_device_fails_with_error(make):
    # A negative index used to be refused by GObject with a warning, leaving a launcher
    # for device 0: it is now kept, and every call that needs the device fails.
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        launcher = make()
    assert launcher.get_device() < 0
    assert launcher.props.device == launcher.get_device()
    code = _expected_launch_error()
    for call in (launcher.get_device_name, launcher.supports_cooperative,
                 lambda: launcher.memory_info(),
                 lambda: Amk.Executor.get_preferred_queues(launcher)):
        with pytest.raises(GLib.Error) as info:
            call()
        assert info.value.matches(Amk.launch_error_quark(), code), info.value.message
    # its sibling keeps the index (and the errors)
    sibling = Amk.Executor.new_sibling(launcher)
    assert sibling.get_device() == launcher.get_device()


# ---- properties with a documented range: GObject's warning, the value kept ----------

def _set_out_of_range(make, name, value):
    """Sets a property to a value out of its GParamSpec's range; returns what it reads
    back and whether GObject warned."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        obj = make()
        if name is not None:
            obj.set_property(name, value)
    warned = any('out of range' in str(w.message) for w in caught)
    return obj, warned


@pytest.mark.parametrize('make,name,value,prop,kept', [
    (lambda: Amk.Program(num_queues=0), None, None, 'num-queues', 1),
    (lambda: Amk.Program(num_queues=65537), None, None, 'num-queues', 1),
    (lambda: Amk.Batch(capacity=0), None, None, 'capacity', 8),
    (lambda: Amk.Batch(capacity=Amk.BATCH_MAX_CAPACITY + 1), None, None, 'capacity', 8),
    (lambda: Amk.Model(path=MISSING, n_queues=70000), None, None, 'n-queues', 0),
    (lambda: Amk.Model(path=MISSING, context_length=(1 << 20) + 1), None, None,
     'context-length', 0),
    (lambda: Amk.Model(path=MISSING, prefill_chunk=(1 << 16) + 1), None, None,
     'prefill-chunk', 0),
    (lambda: Amk.Generator(), 'max-tokens', 0, 'max-tokens', 128),
    (lambda: Amk.Launcher.new(0), 'l2-prefetch', 3, 'l2-prefetch', 0),
    (lambda: Amk.Launcher.new(0), 'threads-per-block', 2048, 'threads-per-block', 0),
    (lambda: Amk.Tokenizer(), 'bos-id', -2, 'bos-id', -1),
], ids=['program-0', 'program-big', 'batch-0', 'batch-big', 'model-queues',
        'model-context', 'model-chunk', 'generator-max-tokens', 'launcher-l2',
        'launcher-threads', 'tokenizer-bos'])
def test_property_out_of_range_is_refused(make, name, value, prop, kept):
    obj, warned = _set_out_of_range(make, name, value)
    assert warned, 'GObject did not warn'
    assert obj.get_property(prop) == kept


def test_model_out_of_range_property_still_fails_on_init():
    # the refused value leaves a model that loads with the defaults: here it still
    # fails, for its missing file, with a GError and not a half-made model
    model, warned = _set_out_of_range(lambda: Amk.Model(path=MISSING, n_queues=70000),
                                      None, None)
    assert warned
    with pytest.raises(GLib.Error) as info:
        model.init(None)
    assert info.value.matches(Gio.io_error_quark(), Gio.IOErrorEnum.NOT_FOUND), \
        info.value.message
    assert not model.props.loaded


# ---- documented preconditions: a critical, checked in a child process ---------------

PRELUDE = """
import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk
"""

PRECONDITIONS = {
    'program-new-0': ('Amk.Program.new(0)', 'amk_program_new'),
    'batch-new-capacity': (
        f"Amk.Batch.new(Amk.Model(path={MISSING!r}), None, Amk.BATCH_MAX_CAPACITY + 1)",
        'amk_batch_new'),
    'launcher-threads': ('Amk.Launcher.new(0).set_threads_per_block(33)',
                         'amk_launcher_set_threads_per_block'),
    'launcher-threads-property': ('Amk.Launcher.new(0).props.threads_per_block = 48',
                                  'amk_launcher_set_threads_per_block'),
    'launcher-l2': ('Amk.Launcher.new(0).set_l2_prefetch(3)', 'amk_launcher_set_l2_prefetch'),
    'generator-max-tokens': ('Amk.Generator().set_max_tokens(0)',
                             'amk_generator_set_max_tokens'),
    'generator-stop-token': ('Amk.Generator().add_stop_token(-1)',
                             'amk_generator_add_stop_token'),
    'generator-stop-string': ("Amk.Generator().add_stop_string('')",
                              'amk_generator_add_stop_string'),
    'tokenizer-bos': ('Amk.Tokenizer().set_bos_id(5)', 'amk_tokenizer_set_bos_id'),
    'tokenizer-eos-property': ('Amk.Tokenizer().props.eos_id = 5',
                               'amk_tokenizer_set_eos_id'),
}


@pytest.mark.parametrize('case', sorted(PRECONDITIONS))
def test_documented_precondition_is_a_critical(case):
    code, function = PRECONDITIONS[case]
    env = dict(os.environ)
    env['G_DEBUG'] = 'fatal-criticals'
    # a core dump of the intended abort is noise
    child = subprocess.run([sys.executable, '-c', textwrap.dedent(PRELUDE) + code +
                            "\nprint('no critical')\n"],
                           env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert 'no critical' not in child.stdout, child.stdout
    assert child.returncode != 0
    assert 'CRITICAL' in child.stderr and function in child.stderr, child.stderr


def test_valid_values_still_set():
    launcher = Amk.Launcher.new(0)
    launcher.set_threads_per_block(64)
    launcher.props.l2_prefetch = 2
    assert (launcher.get_threads_per_block(), launcher.get_l2_prefetch()) == (64, 2)
    launcher.set_threads_per_block(0)
    assert launcher.get_threads_per_block() == 0
    assert not launcher.get_paged()
    notified = []
    launcher.connect('notify::paged', lambda *a: notified.append(launcher.props.paged))
    launcher.set_paged(True)
    launcher.set_paged(True)  # no change, no second notification
    launcher.props.paged = False
    assert notified == [True, False]
    generator = Amk.Generator()
    generator.set_max_tokens(1)
    generator.add_stop_token(0)
    generator.add_stop_string('x')
    assert generator.get_max_tokens() == 1
    tokenizer = Amk.Tokenizer.new_from_vocab(['a', 'b', 'ab'], ['a b'], None, 'gpt2')
    tokenizer.set_bos_id(2)
    tokenizer.props.eos_id = 1
    assert (tokenizer.get_bos_id(), tokenizer.get_eos_id()) == (2, 1)
    tokenizer.set_bos_id(-1)
    assert tokenizer.get_bos_id() == -1


# ---- *_async: a callback on every path ---------------------------------------------

def _call_async(start, finish):
    """Starts an asynchronous call with start(callback) and runs a main loop until the
    callback came, failing the test after TIMEOUT_S. Returns ('ok', value) or
    ('error', GLib.Error)."""
    loop = GLib.MainLoop()
    outcome = {}

    def done(source, result, *data):
        try:
            outcome['ok'] = finish(source, result)
        except GLib.Error as e:
            outcome['error'] = e
        loop.quit()

    def timed_out():
        outcome['timeout'] = True
        loop.quit()
        return GLib.SOURCE_REMOVE

    timer = GLib.timeout_add_seconds(TIMEOUT_S, timed_out)
    start(done)
    loop.run()
    if 'timeout' not in outcome:
        GLib.source_remove(timer)
    assert 'timeout' not in outcome, 'the callback never came'
    assert len(outcome) == 1, outcome
    return next(iter(outcome.items()))


def _cancelled():
    cancellable = Gio.Cancellable()
    cancellable.cancel()
    return cancellable


def _assert_error(outcome, domain, code):
    kind, value = outcome
    assert kind == 'error', outcome
    assert value.matches(domain, code), (value.domain, value.code, value.message)


def test_executor_run_async_without_program():
    executor = Amk.CpuExecutor()
    outcome = _call_async(lambda cb: Amk.Executor.run_async(executor, None, cb),
                          lambda src, res: Amk.Executor.run_finish(src, res))
    _assert_error(outcome, Amk.program_error_quark(), Amk.ProgramError.NOT_VERIFIED)


def test_executor_run_async_cancelled_before_start():
    executor = Amk.CpuExecutor()
    outcome = _call_async(lambda cb: Amk.Executor.run_async(executor, _cancelled(), cb),
                          lambda src, res: Amk.Executor.run_finish(src, res))
    assert outcome[0] == 'error', outcome


@pytest.mark.parametrize('device', [0, -1])
@pytest.mark.parametrize('cancel', [False, True])
def test_launcher_launch_async_without_device(device, cancel):
    if device == 0 and Amk.Launcher.get_device_count() > 0:
        pytest.skip('a CUDA device is present: tests/gpu covers the launcher')
    launcher = Amk.Launcher.new(device)
    outcome = _call_async(
        lambda cb: launcher.launch_async(_cancelled() if cancel else None, cb),
        lambda src, res: src.launch_finish(res))
    assert outcome[0] == 'error', outcome
    if not cancel:
        _assert_error(outcome, Amk.launch_error_quark(), _expected_launch_error())


def test_generator_generate_async_without_model():
    generator = Amk.Generator()
    outcome = _call_async(lambda cb: generator.generate_async('hello', 1, None, cb),
                          lambda src, res: src.generate_finish(res))
    _assert_error(outcome, Amk.generator_error_quark(), Amk.GeneratorError.NO_MODEL)


def test_generator_generate_async_missing_model_file():
    generator = Amk.Generator.new(Amk.Model(path=MISSING), None)
    outcome = _call_async(lambda cb: generator.generate_async('hello', 1, None, cb),
                          lambda src, res: src.generate_finish(res))
    _assert_error(outcome, Gio.io_error_quark(), Gio.IOErrorEnum.NOT_FOUND)
    # and the generator is usable again (not left busy)
    outcome = _call_async(lambda cb: generator.generate_async('hello', 1, None, cb),
                          lambda src, res: src.generate_finish(res))
    _assert_error(outcome, Gio.io_error_quark(), Gio.IOErrorEnum.NOT_FOUND)


@pytest.fixture(scope='module')
def tiny_model():
    if not os.path.isdir(TINY):
        pytest.skip('tests/data/tiny-llama is missing')
    model = Amk.Model(path=TINY)
    model.init(None)
    return model


GE = Amk.GeneratorError


@pytest.mark.parametrize('setup,prompt,domain,code', [
    (None, '', Amk.generator_error_quark, GE.EMPTY_PROMPT),
    ({'temperature': -1.0}, 'hello', Amk.generator_error_quark, GE.INVALID_TEMPERATURE),
    ({'temperature': float('nan')}, 'hello', Amk.generator_error_quark,
     GE.INVALID_TEMPERATURE),
    ({'top_p': 0.0}, 'hello', Amk.generator_error_quark, GE.INVALID_TOP_P),
    ({'top_p': 1.5}, 'hello', Amk.generator_error_quark, GE.INVALID_TOP_P),
    ('cancel', 'hello', Gio.io_error_quark, Gio.IOErrorEnum.CANCELLED),
], ids=['empty-prompt', 'negative-temperature', 'nan-temperature', 'top-p-0',
        'top-p-above-1', 'cancelled'])
def test_generator_generate_async_bad_input(tiny_model, setup, prompt, domain, code):
    generator = Amk.Generator.new(tiny_model, None)
    cancellable = None
    if setup == 'cancel':
        cancellable = _cancelled()
    elif setup is not None:
        for name, value in setup.items():
            # the setters: through the property GObject itself refuses NaN
            getattr(generator, 'set_' + name)(value)
    outcome = _call_async(lambda cb: generator.generate_async(prompt, 2, cancellable, cb),
                          lambda src, res: src.generate_finish(res))
    _assert_error(outcome, domain(), code)
    assert generator.get_position() == 0


def test_generator_generate_async_busy(tiny_model):
    generator = Amk.Generator.new(tiny_model, None)
    loop = GLib.MainLoop()
    outcomes = []

    def done(source, result, *data):
        try:
            outcomes.append(('ok', source.generate_finish(result)))
        except GLib.Error as e:
            outcomes.append(('error', e))
        if len(outcomes) == 2:
            loop.quit()

    timer = GLib.timeout_add_seconds(TIMEOUT_S, loop.quit)
    generator.generate_async('hello', 2, None, done)
    generator.generate_async('hello', 2, None, done)
    loop.run()
    GLib.source_remove(timer) if len(outcomes) == 2 else None
    assert len(outcomes) == 2, 'a callback never came'
    kinds = sorted(kind for kind, _ in outcomes)
    assert kinds == ['error', 'ok'], outcomes
    error = next(v for k, v in outcomes if k == 'error')
    assert error.matches(Amk.generator_error_quark(), GE.BUSY), error.message


@pytest.mark.parametrize('path,cancel,domain,code', [
    (MISSING, False, Gio.io_error_quark, Gio.IOErrorEnum.NOT_FOUND),
    ('', False, Gio.io_error_quark, Gio.IOErrorEnum.INVALID_ARGUMENT),
    (DATA, False, None, None),   # a folder that is not a checkpoint
    (TINY, True, Gio.io_error_quark, Gio.IOErrorEnum.CANCELLED),
], ids=['missing', 'empty-path', 'not-a-model', 'cancelled'])
def test_model_new_from_file_async_bad_input(path, cancel, domain, code):
    outcome = _call_async(
        lambda cb: Amk.Model.new_from_file_async(path, _cancelled() if cancel else None, cb),
        lambda src, res: Amk.Model.new_from_file_finish(res))
    assert outcome[0] == 'error', outcome
    if domain is not None:
        _assert_error(outcome, domain(), code)


def test_batch_step_async_busy_and_without_model():
    # a batch made without its model: a step with nothing to run calls back, with TRUE
    batch = Amk.Batch()
    loop = GLib.MainLoop()
    outcomes = []

    def done(source, result, *data):
        try:
            outcomes.append(('ok', source.step_finish(result)))
        except GLib.Error as e:
            outcomes.append(('error', e))
        if len(outcomes) == 2:
            loop.quit()

    timer = GLib.timeout_add_seconds(TIMEOUT_S, loop.quit)
    batch.step_async(None, done)
    batch.step_async(None, done)   # the first is still running: BUSY
    loop.run()
    GLib.source_remove(timer) if len(outcomes) == 2 else None
    assert len(outcomes) == 2, 'a callback never came'
    assert outcomes[0][0] == 'error' or outcomes[1][0] == 'error', outcomes
    error = next(v for k, v in outcomes if k == 'error')
    assert error.matches(Amk.batch_error_quark(), Amk.BatchError.BUSY), error.message
    assert ('ok', True) in outcomes
    # cancelled before it starts: it calls back all the same (GTask: CANCELLED)
    outcome = _call_async(lambda cb: batch.step_async(_cancelled(), cb),
                          lambda src, res: src.step_finish(res))
    _assert_error(outcome, Gio.io_error_quark(), Gio.IOErrorEnum.CANCELLED)
    # and a bad sequence id is an error, not a critical
    with pytest.raises(GLib.Error) as info:
        batch.cancel(12345)
    assert info.value.matches(Amk.batch_error_quark(), Amk.BatchError.UNKNOWN_SEQUENCE)
