"""The tokenizer against the tokenizers package."""


def test_placeholder():
    pass
