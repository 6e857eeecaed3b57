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

Each of the last two also comes pooled over several texts (``pooled_distinct_n``,
``pooled_adjacent_repeat_share``: n-grams and pairs are taken within each text, never across two,
and counted together), for a verdict on a whole set of answers (base_eval.py).

Stop words: NLTK's English list as bm25s ships it (``bm25s.stopwords.STOPWORDS_EN_PLUS``, 179
words; bm25s is already the retrieval dependency), passed through the same word rule, so
"don't" contributes "don" and "t".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from bm25s.stopwords import STOPWORDS_EN_PLUS

from anchormask.measurement import metric

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


def _ngrams(text_or_words: str | Sequence[str], n: int) -> list[tuple[str, ...]]:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    tokens = words(text_or_words)
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def _repeats(text_or_words: str | Sequence[str]) -> list[bool]:
    """For each adjacent word pair: are its two words the same?"""
    return [a == b for a, b in _ngrams(text_or_words, 2)]


def _share(hits: int, total: int) -> float:
    return hits / total if total else math.nan


def distinct_n(text_or_words: str | Sequence[str], n: int) -> float:
    """Distinct n-grams over all n-grams (distinct-1, distinct-2, ...); NaN when there is none."""
    grams = _ngrams(text_or_words, n)
    return _share(len(set(grams)), len(grams))


def adjacent_repeat_share(text_or_words: str | Sequence[str]) -> float:
    """Share of adjacent word pairs with the same word twice; NaN with fewer than two words."""
    repeats = _repeats(text_or_words)
    return _share(sum(repeats), len(repeats))


def pooled_distinct_n(texts: Iterable[str | Sequence[str]], n: int) -> float:
    """Distinct n-grams over all n-grams of several texts (each text's own n-grams); NaN when there is none."""
    grams = [g for text in texts for g in _ngrams(text, n)]
    return _share(len(set(grams)), len(grams))


def pooled_adjacent_repeat_share(texts: Iterable[str | Sequence[str]]) -> float:
    """Share of the adjacent word pairs of several texts (each text's own pairs) with the same word twice."""
    repeats = [r for text in texts for r in _repeats(text)]
    return _share(sum(repeats), len(repeats))
