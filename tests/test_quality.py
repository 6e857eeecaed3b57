"""Degeneracy metrics on hand-written strings."""

import math

import pytest

from anchormask.measurement import degeneracy

pytestmark = pytest.mark.unit

VOCAB = frozenset("the nile flows north into the mediterranean sea".split())


def test_stop_words_come_from_bm25s_and_follow_the_word_rule():
    assert {"the", "of", "is", "which", "t", "don"} <= degeneracy.STOP_WORDS
    assert "don't" not in degeneracy.STOP_WORDS  # split by the word rule into "don" and "t"
    assert "nile" not in degeneracy.STOP_WORDS and "river" not in degeneracy.STOP_WORDS


def test_content_overlap_ignores_function_words():
    # corpus_overlap of "the the the nile" is 1.0; its only content word is "nile", in the vocabulary
    assert degeneracy.content_overlap("the the the nile", VOCAB) == 1.0
    # content words: nile, river, cairo -> 1 of 3 in the vocabulary's content words
    assert degeneracy.content_overlap("The Nile is a river of Cairo.", VOCAB) == pytest.approx(1 / 3)
    # only stop words: no content word, scored 0 like an empty text
    assert degeneracy.content_overlap("the of the in the", VOCAB) == 0.0
    assert degeneracy.content_overlap("", VOCAB) == 0.0
    assert degeneracy.content_words("The Nile flows into THE sea") == ["nile", "flows", "sea"]


def test_distinct_n():
    assert degeneracy.distinct_n("the the the the", 1) == 0.25
    assert degeneracy.distinct_n("the the the the", 2) == pytest.approx(1 / 3)  # (the, the) x 3
    assert degeneracy.distinct_n("a b a b", 2) == pytest.approx(2 / 3)        # ab, ba, ab
    assert degeneracy.distinct_n("nile flows north", 1) == 1.0
    assert degeneracy.distinct_n(["x", "y", "x"], 1) == pytest.approx(2 / 3)   # a word list is taken as it is
    assert math.isnan(degeneracy.distinct_n("alone", 2)) and math.isnan(degeneracy.distinct_n("", 1))
    with pytest.raises(ValueError):
        degeneracy.distinct_n("a b", 0)


def test_adjacent_repeat_share():
    assert degeneracy.adjacent_repeat_share("the the the the") == 1.0
    assert degeneracy.adjacent_repeat_share("the nile the nile") == 0.0       # repeated, never adjacent
    assert degeneracy.adjacent_repeat_share("sea sea, north north! east") == 0.5  # 2 of 4 pairs
    assert degeneracy.adjacent_repeat_share("The the") == 1.0                  # case folded like corpus_overlap
    assert math.isnan(degeneracy.adjacent_repeat_share("one"))


def test_pooled_measures_count_within_each_text_never_across_two():
    texts = ["the river", "river sea", "sea sea"]  # pooled together, "river river" would be a repeat
    assert degeneracy.pooled_adjacent_repeat_share(texts) == pytest.approx(1 / 3)
    assert degeneracy.pooled_distinct_n(texts, 2) == 1.0
    assert degeneracy.pooled_distinct_n(["a b", "a b"], 2) == 0.5  # one bigram, written twice
    assert math.isnan(degeneracy.pooled_adjacent_repeat_share(["one", ""]))
    assert degeneracy.pooled_distinct_n(texts[:1], 1) == degeneracy.distinct_n(texts[0], 1)
