# SPDX-License-Identifier: LGPL-2.1-or-later
"""Amk.Tokenizer against the tokenizers package.

The reference ids come from tests/data/tokenizer-expected.json, which
tests/data/make-tokenizer-fixtures.py wrote with the tokenizers package (see its header
for the command); nothing here needs the network or tokenizers itself.
"""

import json
import os
import pathlib

import pytest

import gi
gi.require_version('Amk', '1.0')
from gi.repository import Amk, Gio, GLib  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parent.parent / 'data'
TOKENIZER_JSON = DATA / 'smollm2-tokenizer.json'


def load_corpus():
    with open(DATA / 'tokenizer-corpus.txt', encoding='utf-8') as f:
        return [json.loads(line) for line in f if line.strip()]


CORPUS = load_corpus()
with open(DATA / 'tokenizer-expected.json', encoding='utf-8') as _f:
    EXPECTED = json.load(_f)
with open(TOKENIZER_JSON, encoding='utf-8') as _f:
    TOKENIZER_DATA = json.load(_f)


@pytest.fixture(scope='module')
def tok():
    return Amk.Tokenizer.new_from_json_file(str(TOKENIZER_JSON))


def c_string(text):
    """A C string ends at its first NUL: the library sees only what comes before it."""
    return '\0' not in text


def test_corpus_is_big_enough():
    assert len(CORPUS) >= 200
    assert len(EXPECTED['lines']) == len(CORPUS)


def test_encode_matches_tokenizers(tok):
    checked = 0
    for text, expected in zip(CORPUS, EXPECTED['lines']):
        if not c_string(text):
            continue
        assert list(tok.encode(text, True)) == expected['ids'], repr(text)
        # SmolLM2's post-processor adds nothing, so add_special changes nothing
        assert list(tok.encode(text, False)) == expected['ids'], repr(text)
        checked += 1
    assert checked >= 200


def test_decode_round_trip(tok):
    for text, expected in zip(CORPUS, EXPECTED['lines']):
        if not c_string(text):
            continue
        assert expected['decoded'] == text
        assert tok.decode(expected['ids']) == text, repr(text)


def test_nul_ends_the_text(tok):
    # 'nul\0byte' is one corpus line; the C API sees 'nul'
    assert list(tok.encode('nul\0byte', False)) == list(tok.encode('nul', False))


def test_template_post_processor():
    data = dict(TOKENIZER_DATA)
    data['post_processor'] = EXPECTED['template']['post_processor']
    tok = Amk.Tokenizer.new_from_json_data(json.dumps(data), -1)
    assert tok.get_bos_id() == 1
    assert tok.get_eos_id() == 2
    for text, ids in zip(CORPUS, EXPECTED['template']['ids']):
        if not c_string(text):
            continue
        assert list(tok.encode(text, True)) == ids, repr(text)
        assert list(tok.encode(text, False)) == ids[1:-1], repr(text)


def test_merges_as_strings():
    data = dict(TOKENIZER_DATA)
    data['model'] = dict(data['model'])
    data['model']['merges'] = [' '.join(m) for m in data['model']['merges']]
    tok = Amk.Tokenizer.new_from_json_data(json.dumps(data), -1)
    for text, expected in list(zip(CORPUS, EXPECTED['lines']))[::7]:
        if c_string(text):
            assert list(tok.encode(text, True)) == expected['ids'], repr(text)


def vocab_arrays():
    vocab = TOKENIZER_DATA['model']['vocab']
    tokens = [None] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    special = {t['id'] for t in TOKENIZER_DATA['added_tokens'] if t['special']}
    types = [3 if i in special else 1 for i in range(len(tokens))]
    merges = [' '.join(m) for m in TOKENIZER_DATA['model']['merges']]
    return tokens, merges, types


def test_vocab_constructor_matches():
    tokens, merges, types = vocab_arrays()
    tok = Amk.Tokenizer.new_from_vocab(tokens, merges, types, 'smollm')
    assert tok.get_vocab_size() == len(tokens)
    assert tok.get_bos_id() == -1 and tok.get_eos_id() == -1
    for text, expected in zip(CORPUS, EXPECTED['lines']):
        if not c_string(text):
            continue
        assert list(tok.encode(text, False)) == expected['ids'], repr(text)
        assert tok.decode(expected['ids']) == text
    # GGUF: tokenizer.ggml.bos_token_id 1, eos 2, add_bos_token false
    tok.props.bos_id = 1
    tok.set_eos_id(2)
    assert tok.get_eos_id() == 2
    assert list(tok.encode('Hi', True)) == list(tok.encode('Hi', False))
    tok.props.add_bos = True
    assert list(tok.encode('Hi', True)) == [1] + list(tok.encode('Hi', False))


def test_vocab_constructor_errors():
    tokens, merges, types = vocab_arrays()
    with pytest.raises(GLib.Error) as e:
        Amk.Tokenizer.new_from_vocab(tokens, merges, types, 'no-such-pre')
    assert e.value.matches(Amk.tokenizer_error_quark(), Amk.TokenizerError.UNSUPPORTED_PRE_TOKENIZER)
    with pytest.raises(GLib.Error) as e:
        Amk.Tokenizer.new_from_vocab(tokens, merges, types[:-1], 'smollm')
    assert e.value.matches(Amk.tokenizer_error_quark(), Amk.TokenizerError.INVALID_VOCAB)
    with pytest.raises(GLib.Error) as e:
        Amk.Tokenizer.new_from_vocab(tokens + ['hello'], merges, [], 'smollm')
    assert e.value.matches(Amk.tokenizer_error_quark(), Amk.TokenizerError.INVALID_VOCAB)
    assert 'twice' in e.value.message
    with pytest.raises(GLib.Error) as e:
        Amk.Tokenizer.new_from_vocab(tokens, merges + ['nosuch token'], [], 'smollm')
    assert e.value.matches(Amk.tokenizer_error_quark(), Amk.TokenizerError.INVALID_MERGES)
    assert 'nosuch' in e.value.message


def test_special_tokens(tok):
    assert tok.token_to_id('<|im_start|>') == 1
    assert tok.token_to_id('<|im_end|>') == 2
    assert tok.token_to_id('<|endoftext|>') == 0
    assert tok.token_to_id('no such token') == -1
    assert tok.id_to_token(2) == '<|im_end|>'
    assert tok.id_to_token(tok.get_vocab_size()) is None
    assert tok.id_to_token(-1) is None
    assert tok.is_special(1) and not tok.is_special(100)
    ids = list(tok.encode('<|im_start|>user\nHi<|im_end|>', False))
    assert ids[0] == 1 and ids[-1] == 2
    assert tok.decode(ids) == '<|im_start|>user\nHi<|im_end|>'
    # the BOS and EOS are not in a tokenizer.json without a template
    assert tok.get_bos_id() == -1 and tok.get_eos_id() == -1
    assert tok.token_to_id('Ġthe') == 260


def test_invalid_utf8(tok):
    # PyGObject refuses to pass invalid UTF-8 as a str (the C test
    # /amk/tokenizer/encode/invalid-utf8 checks AMK_TOKENIZER_ERROR_INVALID_TEXT).
    with pytest.raises(UnicodeEncodeError):
        tok.encode(b'abc\xff\xfe'.decode('utf-8', 'surrogateescape'), False)


def test_bad_id(tok):
    with pytest.raises(GLib.Error) as e:
        tok.decode([1, 2, tok.get_vocab_size()])
    assert e.value.matches(Amk.tokenizer_error_quark(), Amk.TokenizerError.UNKNOWN_ID)
    with pytest.raises(GLib.Error) as e:
        tok.decode([-5])
    assert e.value.matches(Amk.tokenizer_error_quark(), Amk.TokenizerError.UNKNOWN_ID)


def test_partial_utf8_becomes_replacement(tok):
    # 'é' is two bytes; tokens for its bytes alone decode to U+FFFD like from_utf8_lossy
    c3 = tok.token_to_id('Ã')
    assert c3 >= 0
    assert tok.decode([c3]) == '\ufffd'
    assert tok.decode([c3, tok.token_to_id('a')]) == '\ufffda'


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding='utf-8')
    return str(path)


def expect_invalid(path, code, *words):
    with pytest.raises(GLib.Error) as e:
        Amk.Tokenizer.new_from_json_file(path)
    assert e.value.matches(Amk.tokenizer_error_quark(), code), e.value.message
    assert os.path.basename(path) in e.value.message
    for word in words:
        assert word in e.value.message, e.value.message


def test_corrupt_json(tmp_path):
    expect_invalid(write(tmp_path, 'corrupt.json', '{"model": [}'), Amk.TokenizerError.INVALID_JSON,
                   'JSON')


def test_truncated_json(tmp_path):
    text = TOKENIZER_JSON.read_text(encoding='utf-8')
    expect_invalid(write(tmp_path, 'truncated.json', text[:len(text) // 2]),
                   Amk.TokenizerError.INVALID_JSON)


def test_missing_fields(tmp_path):
    data = dict(TOKENIZER_DATA)
    del data['model']
    structure = Amk.TokenizerError.INVALID_STRUCTURE
    expect_invalid(write(tmp_path, 'nomodel.json', json.dumps(data)), structure, 'model')
    model = dict(TOKENIZER_DATA['model'])
    del model['merges']
    expect_invalid(write(tmp_path, 'nomerges.json', json.dumps(dict(TOKENIZER_DATA, model=model))),
                   structure, 'model.merges')
    model = dict(TOKENIZER_DATA['model'], vocab=[1, 2])
    expect_invalid(write(tmp_path, 'badvocab.json', json.dumps(dict(TOKENIZER_DATA, model=model))),
                   structure, 'model.vocab')


def test_unknown_merge(tmp_path):
    model = dict(TOKENIZER_DATA['model'])
    model['merges'] = model['merges'] + [['zz_no', 'such']]
    expect_invalid(write(tmp_path, 'merge.json', json.dumps(dict(TOKENIZER_DATA, model=model))),
                   Amk.TokenizerError.INVALID_MERGES, 'zz_no')


def test_unsupported_model(tmp_path):
    model = dict(TOKENIZER_DATA['model'], type='Unigram')
    expect_invalid(write(tmp_path, 'unigram.json', json.dumps(dict(TOKENIZER_DATA, model=model))),
                   Amk.TokenizerError.UNSUPPORTED_MODEL, 'Unigram')


def test_error_domain_is_registered():
    # the GIR pairs the quark with the enum by name; glib-mkenums registers the enum type
    assert GLib.quark_to_string(Amk.tokenizer_error_quark()) == 'amk-tokenizer-error-quark'
    assert Amk.TokenizerError.__gtype__.name == 'AmkTokenizerError'


def test_missing_file():
    with pytest.raises(GLib.Error) as e:
        Amk.Tokenizer.new_from_json_file('/nonexistent/tokenizer.json')
    assert e.value.matches(Gio.io_error_quark(), Gio.IOErrorEnum.NOT_FOUND)


def test_deep_json_is_refused():
    with pytest.raises(GLib.Error) as e:
        Amk.Tokenizer.new_from_json_data('[' * 100000, -1)
    assert e.value.matches(Amk.tokenizer_error_quark(), Amk.TokenizerError.INVALID_JSON)


def test_properties(tok):
    assert tok.props.vocab_size == 49152
    assert tok.props.bos_id == -1
    assert tok.props.add_bos is False
