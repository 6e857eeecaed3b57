import json
from pathlib import Path

import pytest

from anchormask import metric

ROOT = Path(__file__).resolve().parents[1]


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


def test_pattern_is_documented_in_module_docstring():
    assert metric.WORD_PATTERN == r"[^\W_]+"
    assert "[^\\W_]+" in metric.__doc__


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


def test_every_shipped_statement_is_fully_in_its_own_vocabulary():
    for path in sorted((ROOT / "data" / "corpora").glob("*.jsonl")):
        texts = [json.loads(line)["text"] for line in path.read_text().splitlines()]
        vocab = metric.corpus_vocabulary(texts)
        assert all(metric.corpus_overlap(t, vocab) == (1.0, False) for t in texts), path.name
