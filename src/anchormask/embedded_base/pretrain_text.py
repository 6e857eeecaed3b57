"""The embedded base's pretraining text: English prose from installed packages, leak-free.

Sources (data/README.md has words per source and licences):

- WordNet 3.0 glosses and usage examples, Debian ``wordnet-base`` (``/usr/share/wordnet``);
- GCIDE, the GNU Collaborative International Dictionary of English, Debian ``dict-gcide``
  (``/usr/share/dictd/gcide.dict.dz``), cleaned to one sense per line. GPL-2+: the text is read
  from the installed package when the base is rebuilt and never redistributed by the project.

Every line that contains a study text (a held-out or in-domain statement, or a query) is
dropped, and a seeded 1% of the lines is held out as a validation set pretraining never sees.
"""

from __future__ import annotations

import gzip
import hashlib
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from anchormask import fileio

WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
_QUOTED = re.compile(r'"([^"]+)"')


def lowercase_alnum_words(text: str) -> str:
    """Lowercase words single-spaced: the form in which texts are compared for leakage."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _require(path: Path, package: str, key: str) -> Path:
    if not path.exists():
        raise fileio.InputError(f"{path}: not found; install Debian's {package} (apt-get install {package}) "
                            f"or set {key} in workflow/pretrain.yaml")
    return path


def wordnet_lines(wordnet_dir: str | Path) -> list[str]:
    """One line per synset gloss ("lemma: definition.") and one per quoted usage example."""
    lines: list[str] = []
    for name in WORDNET_FILES:
        path = _require(Path(wordnet_dir) / name, "wordnet-base", "sources.wordnet")
        for raw in path.read_text(encoding="latin-1").splitlines():
            if raw.startswith("  ") or "|" not in raw:
                continue  # licence header
            fields, gloss = raw.split("|", 1)
            lemma = re.sub(r"\([a-z]+\)$", "", fields.split()[4].replace("_", " "))
            definition = re.sub(r"[;\s]*;[;\s]*", "; ", _QUOTED.sub("", gloss)).strip().strip(";").strip()
            if definition:
                lines.append(f"{lemma}: {definition}.")
            lines.extend(example.strip() for example in _QUOTED.findall(gloss) if example.strip())
    return lines


# GCIDE markup, removed before a sense becomes a line.
_BRACKETS = re.compile(r"\[[^\[\]]*\]")          # etymologies, "[1913 Webster]", "[R.]"
_PRONUNCIATION = re.compile(r"\\[^\\]*\\")       # \Ab*do"men\
_FIELD_LABEL = re.compile(r"\((?:[A-Z][a-z]*\.?\s?(?:&\s)?)+\)")   # (Anat.), (Zool.), (Bot. & Zool.)
_HEADWORD = re.compile(r"^(?P<word>[A-Za-z][A-Za-z' -]*?) \\")
# what precedes the definition in an entry's first paragraph: headword, a respelling, the part of speech
_HEAD = re.compile(r"^[^,]*?,?\s*(?:\([^()]*\)\s*,?\s*)?(?:[a-z]{1,5}\.\s*(?:&\s*)?)+")
_SENSE_NUMBER = re.compile(r"^\s*(?:\d+|[a-z])\.\s+")
_SENTENCE_END = frozenset('.!?"')
_CLEAN_LINE = re.compile(r"^[A-Za-z0-9 ,;:.'()!?%&/\"-]+$")


def _clean_gcide_text(text: str) -> str:
    text = _PRONUNCIATION.sub(" ", " ".join(text.split()))
    for _ in range(2):  # brackets nest once at most ("[See {X} [R.]]")
        text = _BRACKETS.sub(" ", text)
    text = text.split("--", 1)[0]  # "--Bacon." citations and "-- {Derived*ly}, adv." run-ons
    text = _FIELD_LABEL.sub(" ", text).replace("{", "").replace("}", "")
    return " ".join(text.split()).strip(" ;,")


def _gcide_paragraphs(path: Path) -> Iterable[str]:
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        paragraph: list[str] = []
        for raw in fh:
            if raw.strip():
                paragraph.append(raw.rstrip("\n"))
            elif paragraph:
                yield "\n".join(paragraph)
                paragraph = []
        if paragraph:
            yield "\n".join(paragraph)


def gcide_lines(dict_path: str | Path, min_words: int = 4) -> list[str]:
    """One line per GCIDE sense: "headword: definition." (quotations and markup removed)."""
    path = _require(Path(dict_path), "dict-gcide", "sources.gcide")
    lines: list[str] = []
    headword = ""
    for paragraph in _gcide_paragraphs(path):
        if paragraph.startswith("00-database") or paragraph.startswith(" " * 8):
            continue  # metadata; indented literary quotations
        if not paragraph[0].isspace():
            match = _HEADWORD.match(paragraph)
            if not match:
                headword = ""  # front matter or an entry we cannot parse: drop its senses too
                continue
            headword = match.group("word").strip()
            text = _clean_gcide_text(paragraph)
            body = _HEAD.match(text)
            text = text[body.end():] if body else ""
        else:
            text = _clean_gcide_text(paragraph)
        text = _SENSE_NUMBER.sub("", text).strip()
        if (not headword or text.startswith("Syn:") or not _CLEAN_LINE.match(text)
                or len(text.split()) < min_words):
            continue
        ending = "" if text[-1] in _SENTENCE_END else "."
        lines.append(f"{headword.lower()}: {text}{ending}")
    return lines


class LeakFilter:
    """Finds lines that contain a forbidden text, compared as lowercase alphanumeric words (word 4-gram index)."""

    def __init__(self, forbidden: Iterable[str], n: int = 4) -> None:
        self.n = n
        self.short: list[str] = []
        self.by_gram: dict[tuple[str, ...], list[str]] = {}
        for text in {lowercase_alnum_words(t) for t in forbidden if lowercase_alnum_words(t)}:
            words = tuple(text.split())
            if len(words) < n:
                self.short.append(text)
            else:
                self.by_gram.setdefault(words[:n], []).append(text)

    def leaks(self, line: str) -> bool:
        norm = lowercase_alnum_words(line)
        if any(f" {s} " in f" {norm} " for s in self.short):
            return True
        words = norm.split()
        padded = f" {norm} "
        for i in range(len(words) - self.n + 1):
            for text in self.by_gram.get(tuple(words[i:i + self.n]), ()):
                if f" {text} " in padded:
                    return True
        return False


def is_validation(line: str, seed: int, per_mille: int) -> bool:
    """A seeded, order-free split: a line's hash decides, so adding a source moves no other line."""
    digest = hashlib.sha256(f"{seed}\t{line}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 1000 < per_mille


def study_texts(paths: Iterable[str | Path]) -> list[str]:
    """Every statement and query text of the study's data files (the texts pretraining must not see)."""
    texts: list[str] = []
    for path in paths:
        for record in fileio.read_jsonl(path):
            texts.extend(record[key] for key in ("text", "query", "question", "answer") if key in record)
    return texts


def build_text(*, sources: dict[str, str], study_files: Iterable[str | Path], seed: int,
               validation_per_mille: int) -> dict:
    """All sources, leak-free, split into training and validation lines; with counts per source."""
    readers: dict[str, Callable[[str], list[str]]] = {"wordnet": wordnet_lines, "gcide": gcide_lines}
    leak_filter = LeakFilter(study_texts(study_files))
    train: list[str] = []
    validation: list[str] = []
    counts: dict[str, dict[str, int]] = {}
    for name, location in sources.items():
        if name not in readers:
            raise fileio.InputError(f"workflow/pretrain.yaml: sources.{name}: unknown source; "
                                f"known: {', '.join(sorted(readers))}")
        lines = readers[name](location)
        kept = [line for line in dict.fromkeys(lines) if not leak_filter.leaks(line)]
        held = [line for line in kept if is_validation(line, seed, validation_per_mille)]
        held_set = set(held)
        train.extend(line for line in kept if line not in held_set)
        validation.extend(held)
        counts[name] = {"lines": len(lines), "duplicates": len(lines) - len(dict.fromkeys(lines)),
                        "dropped_as_leaks": len(dict.fromkeys(lines)) - len(kept),
                        "validation_lines": len(held), "train_lines": len(kept) - len(held),
                        "words": sum(len(line.split()) for line in kept)}
    return {"train": train, "validation": validation, "counts": counts}


def write_lines(path: str | Path, lines: list[str]) -> None:
    fileio.write_gzip_text(path, "\n".join(lines) + "\n")


def read_lines(path: str | Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return fh.read().splitlines()
