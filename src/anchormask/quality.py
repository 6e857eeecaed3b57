"""Degeneracy metrics of one text: what corpus_overlap cannot see.

A model that repeats "the" scores well on corpus_overlap, since every corpus contains "the".
These metrics, one plain function each, take a text or its word list (``metric.word_tokens``:
lower-cased, accent-folded runs of letters and digits, the same words corpus_overlap counts):

* ``content_overlap``: corpus_overlap over content words only (stop words removed from the
  text and the vocabulary); 0.0 when the text has no content word, as corpus_overlap scores an
  empty text.
* ``distinct_n``: distinct n-grams / n-grams (distinct-1, distinct-2); NaN without an n-gram.
* ``adjacent_repeat_share``: share of adjacent word pairs whose two words are equal
  ("the the the" -> 1.0); NaN with fewer than two words.

Stop words: NLTK's English list as bm25s ships it (``bm25s.stopwords.STOPWORDS_EN_PLUS``, 179
words; bm25s is already the retrieval dependency), passed through the same word rule, so
"don't" contributes "don" and "t".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from bm25s.stopwords import STOPWORDS_EN_PLUS

from anchormask import metric

STOP_WORDS = frozenset(w for stop in STOPWORDS_EN_PLUS for w in metric.word_tokens(stop))


def words(text_or_words: str | Sequence[str]) -> list[str]:
    """A text's word tokens; a word list is taken as it is."""
    if isinstance(text_or_words, str):
        return metric.word_tokens(text_or_words)
    return list(text_or_words)


def content_words(text_or_words: str | Sequence[str]) -> list[str]:
    """The words that are not stop words, in order."""
    return [w for w in words(text_or_words) if w not in STOP_WORDS]


def content_vocabulary(vocab: Iterable[str]) -> frozenset[str]:
    """A corpus vocabulary without its stop words."""
    return frozenset(vocab) - STOP_WORDS


def content_overlap(text_or_words: str | Sequence[str], vocab: Iterable[str]) -> float:
    """Fraction of the content words that are in the vocabulary's content words; 0.0 without any."""
    content = content_words(text_or_words)
    if not content:
        return 0.0
    allowed = content_vocabulary(vocab)
    return sum(w in allowed for w in content) / len(content)


def distinct_n(text_or_words: str | Sequence[str], n: int) -> float:
    """Distinct n-grams over all n-grams (distinct-1, distinct-2, ...); NaN when there is none."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    tokens = words(text_or_words)
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else math.nan


def adjacent_repeat_share(text_or_words: str | Sequence[str]) -> float:
    """Share of adjacent word pairs with the same word twice; NaN with fewer than two words."""
    tokens = words(text_or_words)
    pairs = len(tokens) - 1
    if pairs < 1:
        return math.nan
    return sum(tokens[i] == tokens[i + 1] for i in range(pairs)) / pairs
