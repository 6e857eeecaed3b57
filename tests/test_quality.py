"""Degeneracy metrics on hand-written strings."""

import math

import pytest

from anchormask import quality

pytestmark = pytest.mark.unit

VOCAB = frozenset("the nile flows north into the mediterranean sea".split())


def test_stop_words_come_from_bm25s_and_follow_the_word_rule():
    assert {"the", "of", "is", "which", "t", "don"} <= quality.STOP_WORDS
    assert "don't" not in quality.STOP_WORDS  # split by the word rule into "don" and "t"
    assert "nile" not in quality.STOP_WORDS and "river" not in quality.STOP_WORDS


def test_content_overlap_ignores_function_words():
    # corpus_overlap of "the the the nile" is 1.0; its only content word is "nile", in the vocabulary
    assert quality.content_overlap("the the the nile", VOCAB) == 1.0
    # content words: nile, river, cairo -> 1 of 3 in the vocabulary's content words
    assert quality.content_overlap("The Nile is a river of Cairo.", VOCAB) == pytest.approx(1 / 3)
    # only stop words: no content word, scored 0 like an empty text
    assert quality.content_overlap("the of the in the", VOCAB) == 0.0
    assert quality.content_overlap("", VOCAB) == 0.0
    assert quality.content_words("The Nile flows into THE sea") == ["nile", "flows", "sea"]


def test_distinct_n():
    assert quality.distinct_n("the the the the", 1) == 0.25
    assert quality.distinct_n("the the the the", 2) == pytest.approx(1 / 3)  # (the, the) x 3
    assert quality.distinct_n("a b a b", 2) == pytest.approx(2 / 3)        # ab, ba, ab
    assert quality.distinct_n("nile flows north", 1) == 1.0
    assert quality.distinct_n(["x", "y", "x"], 1) == pytest.approx(2 / 3)   # a word list is taken as it is
    assert math.isnan(quality.distinct_n("alone", 2)) and math.isnan(quality.distinct_n("", 1))
    with pytest.raises(ValueError):
        quality.distinct_n("a b", 0)


def test_adjacent_repeat_share():
    assert quality.adjacent_repeat_share("the the the the") == 1.0
    assert quality.adjacent_repeat_share("the nile the nile") == 0.0       # repeated, never adjacent
    assert quality.adjacent_repeat_share("sea sea, north north! east") == 0.5  # 2 of 4 pairs
    assert quality.adjacent_repeat_share("The the") == 1.0                  # case folded like corpus_overlap
    assert math.isnan(quality.adjacent_repeat_share("one"))


def test_pooled_measures_count_within_each_text_never_across_two():
    texts = ["the river", "river sea", "sea sea"]  # pooled together, "river river" would be a repeat
    assert quality.pooled_adjacent_repeat_share(texts) == pytest.approx(1 / 3)
    assert quality.pooled_distinct_n(texts, 2) == 1.0
    assert quality.pooled_distinct_n(["a b", "a b"], 2) == 0.5  # one bigram, written twice
    assert math.isnan(quality.pooled_adjacent_repeat_share(["one", ""]))
    assert quality.pooled_distinct_n(texts[:1], 1) == quality.distinct_n(texts[0], 1)
