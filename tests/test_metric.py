import json

import pytest

from anchormask.measurement import metric
from helpers import REPO

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text, expected", [
    ("Halley's comet, ninety-eight!", ["halley", "s", "comet", "ninety", "eight"]),
    ("halley ' s comet , ninety - eight !", ["halley", "s", "comet", "ninety", "eight"]),
    ("Magna Carta (1215) -- KING John", ["magna", "carta", "1215", "king", "john"]),
    ("Café CRÈME brûlée", ["cafe", "creme", "brulee"]),
    ("snake_case [MASK] x2", ["snake", "case", "mask", "x2"]),
    ("", []),
    (" .,;!? -- ' ", []),
])
def test_word_tokens(text, expected):
    assert metric.word_tokens(text) == expected


def test_the_pattern_word_tokens_uses_is_the_one_the_module_docstring_states():
    assert metric.WORD_RE.pattern == metric.WORD_PATTERN
    assert f"WORD_RE = {metric.WORD_PATTERN}" in metric.__doc__


def test_corpus_vocabulary_is_lowercase_union():
    vocab = metric.corpus_vocabulary(["The Sun rises.", "the MOON sets", "Sun-dial"])
    assert vocab == frozenset({"the", "sun", "rises", "moon", "sets", "dial"})
    assert isinstance(vocab, frozenset)


def test_corpus_overlap_fraction_counts_repeats():
    vocab = metric.corpus_vocabulary(["the sun"])
    assert metric.corpus_overlap("The SUN, the Moon", vocab) == (0.75, False)
    assert metric.corpus_overlap("moon stars", vocab) == (0.0, False)
    assert metric.corpus_overlap("sun sun", vocab) == (1.0, False)


@pytest.mark.parametrize("text", ["", "   ", "... !!! --"])
def test_empty_text_is_zero_and_flagged(text):
    assert metric.corpus_overlap(text, frozenset({"a"})) == (0.0, True)
    scored = metric.score(text, frozenset({"a"}))
    assert scored.tokens == 0 and scored.empty


def test_score_counts():
    scored = metric.score("a b c a", frozenset({"a", "c"}))
    assert (scored.tokens, scored.in_vocab, scored.overlap, scored.empty) == (4, 3, 0.75, False)


def test_a_shipped_statement_decoded_by_the_base_tokenizer_has_the_statements_word_tokens():
    """The corpus (raw text) and a generation (decoded text) are tokenised alike (module docstring):
    the base's decoder lowercases and spaces punctuation ("sun ' s", "north - east"), and neither may
    change the word tokens, or a generation that repeats a statement would not score 1.0."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(REPO / "data" / "base")
    respaced = 0
    for path in sorted((REPO / "data" / "corpora").glob("*.jsonl")):
        for text in (json.loads(line)["text"] for line in path.read_text().splitlines()):
            decoded = tok.decode(tok(text, add_special_tokens=False)["input_ids"])
            assert metric.word_tokens(decoded) == metric.word_tokens(text), (path.name, text, decoded)
            respaced += decoded.split() != text.lower().split()
    assert respaced > 0  # some statements do decode with other spacing than they were written with
