"""corpus_overlap: the fraction of word tokens of a text that belong to a corpus vocabulary.

Word tokens (our reading; the report only says "word tokens ... whose lowercase form"):

1. the text is lowercased (``str.lower``),
2. accents are folded: Unicode NFKD decomposition, combining marks dropped (the base's
   BERT normaliser lowercases and strips accents, so decoded generations never carry them;
   folding the corpus the same way keeps "café" in a corpus and "cafe" in a generation equal),
3. word tokens are the maximal runs matched by ``WORD_RE = [^\\W_]+`` -- Unicode letters
   and digits. Everything else (spaces, punctuation, apostrophes, hyphens, underscores,
   brackets) separates tokens: "Halley's" -> ["halley", "s"], "ninety-eight" ->
   ["ninety", "eight"], "[MASK]" -> ["mask"].

Splitting at every non-alphanumeric character makes the tokens independent of how the
WordPiece decoder spaces punctuation ("halley ' s" and "halley's" give the same tokens),
so the corpus (raw text) and the generations (decoded text) are tokenised alike.

The corpus vocabulary is the union of the word tokens of all locus statements of a corpus.
``corpus_overlap`` of a text with no word tokens is 0.0 with ``empty=True``: an empty
continuation counts as zero overlap, it is not dropped.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import NamedTuple

#: The one word-token pattern, applied to lowercased, accent-folded text.
WORD_PATTERN = r"[^\W_]+"
WORD_RE = re.compile(WORD_PATTERN)


def lowercase_fold_accents(text: str) -> str:
    """Lowercase and fold accents (NFKD, combining marks removed)."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def word_tokens(text: str) -> list[str]:
    """The word tokens of ``text`` in order (see the module docstring)."""
    return WORD_RE.findall(lowercase_fold_accents(text))


def corpus_vocabulary(statements: Iterable[str]) -> frozenset[str]:
    """Union of the word tokens over all locus statements of one corpus."""
    vocab: set[str] = set()
    for statement in statements:
        vocab.update(word_tokens(statement))
    return frozenset(vocab)


class Overlap(NamedTuple):
    """One scored text: ``overlap`` in [0, 1], ``tokens`` word tokens, ``empty`` when there were none."""

    overlap: float
    tokens: int
    in_vocab: int
    empty: bool


def score(text: str, vocab: frozenset[str] | set[str]) -> Overlap:
    """corpus_overlap with its counts: hits / tokens; 0.0 and ``empty=True`` for no tokens."""
    tokens = word_tokens(text)
    if not tokens:
        return Overlap(0.0, 0, 0, True)
    hits = sum(1 for t in tokens if t in vocab)
    return Overlap(hits / len(tokens), len(tokens), hits, False)


def corpus_overlap(text: str, vocab: frozenset[str] | set[str]) -> tuple[float, bool]:
    """(fraction of word tokens of ``text`` in ``vocab``, empty flag); empty text gives (0.0, True)."""
    result = score(text, vocab)
    return result.overlap, result.empty
