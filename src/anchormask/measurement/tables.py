"""Parquet tables of scored generations and statistics (their markdown is in ``reporting.markdown``).

``generations_table`` reads generation JSONL (src/anchormask/schemas/generation.schema.yaml),
scores every record's ``post_anchor_text`` against the vocabulary of the corpus of the
record's OWN ``domain`` (anchormask.measurement.metric) and returns one row per generation, sorted by
(arm, split, domain, query_id, train_size, train_steps, train_seed).

Parquet files are written with an explicit pyarrow schema (``GENERATIONS_SCHEMA``,
``COMPARISONS_SCHEMA``, ``SWEEP_SCHEMA``), no pandas index or pandas metadata, fixed zstd
compression and no timestamps; provenance (input sha256s, package versions, the metric's
pattern) is canonical JSON under the schema-metadata key ``anchormask``. The same inputs
therefore give byte-identical files. Writes are atomic.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from anchormask import data
from anchormask.checksum import file_sha256
from anchormask.fileio import InputError, atomic_path, canonical_json
from anchormask.measurement import degeneracy, metric
from anchormask.repro import provenance

METADATA_KEY = b"anchormask"
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 9

_str, _int, _f64, _bool = pa.string(), pa.int64(), pa.float64(), pa.bool_()


def arrow_schema(fields: Sequence[tuple[str, pa.DataType, bool]]) -> pa.Schema:
    return pa.schema([pa.field(name, typ, nullable=nullable) for name, typ, nullable in fields])


GENERATIONS_SCHEMA = arrow_schema([
    ("query_id", _str, False), ("domain", _str, False), ("split", _str, False), ("query_set", _str, False),
    ("arm", _str, False),
    ("strategy", _str, True), ("targets", _str, True), ("adapter_id", _str, True),
    ("train_size", _int, True), ("train_steps", _int, True), ("train_seed", _int, True),
    ("statement_id", _str, False), ("locked_tokens", _int, False), ("anchor_truncated", _bool, False),
    ("post_anchor_tokens", _int, False), ("word_tokens", _int, False), ("overlap", _f64, False),
    ("empty", _bool, False), ("content_words", _int, False), ("content_overlap", _f64, False),
    ("distinct_1", _f64, False), ("distinct_2", _f64, False), ("adjacent_repeats", _f64, False),
    ("ended", _bool, False), ("forward_passes", _int, False), ("base_sha256", _str, False),
])

_STAT_FIELDS = [
    ("metric", _str, False), ("n", _int, False), ("seeds", _int, False), ("mean_a", _f64, False),
    ("mean_b", _f64, False), ("ratio", _f64, True), ("ratio_lo", _f64, True), ("ratio_hi", _f64, True),
    ("diff", _f64, False), ("diff_lo", _f64, False), ("diff_hi", _f64, False), ("p_a_gt_b", _f64, False),
    ("zero_b_resamples", _int, False), ("p_perm", _f64, False), ("perm_exact", _bool, False),
    ("p_holm", _f64, False), ("family", _int, False), ("runs_a", _int, False), ("runs_b", _int, False),
    ("resamples", _int, False), ("confidence", _f64, False), ("seed", _int, False), ("permutations", _int, False),
    ("report", _str, True),
]
COMPARISONS_SCHEMA = arrow_schema([("name", _str, False), ("selector", _str, False), ("a", _str, False),
                              ("b", _str, False), *_STAT_FIELDS])
SWEEP_SCHEMA = arrow_schema([("point", _str, False), ("train_size", _int, False), ("train_steps", _int, False),
                        ("a", _str, False), ("b", _str, False), *_STAT_FIELDS])

SORT_KEYS = ["arm", "split", "domain", "query_id", "train_size", "train_steps", "train_seed"]
UNIQUE_KEYS = ("arm", "query_id", "train_size", "train_steps", "train_seed")


def corpora_of(domains: Sequence[str], paths: Sequence[str | os.PathLike[str]]) -> dict[str, str | os.PathLike[str]]:
    """Domain -> corpus file, from a rule's ``params.domains`` and ``input.corpora`` (one file per domain, in order)."""
    if len(domains) != len(paths):
        raise ValueError(f"params.domains has {len(domains)} names but input.corpora {len(paths)} files")
    return dict(zip(domains, paths))


def file_entry(path: str | os.PathLike[str]) -> dict[str, str]:
    return {"path": str(path), "sha256": file_sha256(path)}


# --------------------------------------------------------------------------- corpora and generations

def load_vocabularies(corpora: Mapping[str, str | os.PathLike[str]]) -> dict[str, frozenset[str]]:
    """Domain -> corpus vocabulary, from corpus JSONL files (checked as data.load_corpus checks them)."""
    return {domain: metric.corpus_vocabulary(r["text"] for r in data.load_corpus(path))
            for domain, path in corpora.items()}


def generations_table(jsonl_paths: Iterable[str | os.PathLike[str]],
                      corpora: Mapping[str, str | os.PathLike[str]]) -> pd.DataFrame:
    """One scored row per generation record; provenance in ``df.attrs["anchormask"]``.

    Raises InputError (file and line named) for a record that breaks the generation schema,
    a domain without a corpus, a repeated (arm, query_id, train_size, train_steps,
    train_seed), a query id under two domains, or records from more than one base.
    """
    jsonl_paths = [Path(p) for p in jsonl_paths]
    if not jsonl_paths:
        raise InputError("no generation JSONL files given")
    vocabs = load_vocabularies(corpora)
    rows: list[dict[str, Any]] = []
    seen: dict[tuple, str] = {}
    query_domain: dict[str, tuple[str, str, str]] = {}
    bases: dict[str, str] = {}
    for path in jsonl_paths:
        for lineno, rec in enumerate(data.load_generations(path), start=1):
            where = f"{path}: line {lineno}"
            domain = rec["domain"]
            if domain not in vocabs:
                raise InputError(f"{where}: domain {domain!r} has no corpus; corpora given: "
                                 f"{', '.join(sorted(vocabs)) or '(none)'}")
            key = tuple(rec[k] for k in UNIQUE_KEYS)
            if key in seen:
                raise InputError(f"{where}: repeats the generation at {seen[key]} "
                                 f"({', '.join(f'{k}={v}' for k, v in zip(UNIQUE_KEYS, key))})")
            seen[key] = where
            place = (domain, rec["split"], rec["query_set"])
            if query_domain.setdefault(rec["query_id"], place) != place:
                raise InputError(f"{where}: query {rec['query_id']!r} has domain/split/query set {place}, elsewhere "
                                 f"{query_domain[rec['query_id']]}")
            bases.setdefault(rec["base_sha256"], where)
            if len(bases) > 1:
                raise InputError(f"{where}: base_sha256 {rec['base_sha256']} differs from the one at "
                                 f"{next(iter(bases.values()))}; one table holds generations of one base")
            row = {name: rec[name] for name in GENERATIONS_SCHEMA.names if name in rec}
            row.update(_scores(rec["post_anchor_text"], vocabs[domain]))
            rows.append(row)
    df = pd.DataFrame.from_records(rows, columns=GENERATIONS_SCHEMA.names)
    for name in ("train_size", "train_steps", "train_seed", "locked_tokens", "post_anchor_tokens",
                 "word_tokens", "content_words", "forward_passes"):
        df[name] = df[name].astype("Int64")
    df = df.sort_values(SORT_KEYS, kind="mergesort", na_position="first").reset_index(drop=True)
    df.attrs["anchormask"] = {
        "table": "generations",
        "inputs": [file_entry(p) for p in jsonl_paths],
        "corpora": {d: file_entry(p) | {"vocabulary": len(vocabs[d])} for d, p in sorted(corpora.items())},
        "metric": {"word_pattern": metric.WORD_PATTERN, "normalise": "lower, NFKD, combining marks dropped",
                   "stop_words": "bm25s.stopwords.STOPWORDS_EN_PLUS", "stop_word_count": len(degeneracy.STOP_WORDS)},
        "rows": len(df),
        "versions": provenance.versions(),
    }
    return df


def anchor_truncations(df: pd.DataFrame) -> pd.DataFrame:
    """Per query set, arm and domain: the locked anchors (distinct queries) and how many of them were cut
    to generation.answer_len − 1 tokens (``anchor_truncated``), in the table's order."""
    keys = ["query_set", "arm", "domain"]
    cut = df[df["anchor_truncated"].astype(bool)].groupby(keys, sort=False)["query_id"].nunique()
    counts = df.groupby(keys, sort=False)["query_id"].nunique().rename("anchors").to_frame()
    counts["truncated"] = cut.reindex(counts.index, fill_value=0).astype(int)
    return counts.reset_index()


def of_query_set(df: pd.DataFrame, query_set: str = "main") -> pd.DataFrame:
    """The rows of one query set; figures, samples and the main comparisons use the main set."""
    return df[df["query_set"] == query_set].reset_index(drop=True)


def _scores(text: str, vocab: frozenset[str]) -> dict[str, Any]:
    """corpus_overlap (the report's metric) and the degeneracy metrics of one post-anchor text."""
    scored = metric.score(text, vocab)
    tokens = metric.word_tokens(text)
    return {"word_tokens": scored.tokens, "overlap": scored.overlap, "empty": scored.empty,
            "content_words": len(degeneracy.content_words(tokens)),
            "content_overlap": degeneracy.content_overlap(tokens, vocab),
            "distinct_1": degeneracy.distinct_n(tokens, 1), "distinct_2": degeneracy.distinct_n(tokens, 2),
            "adjacent_repeats": degeneracy.adjacent_repeat_share(tokens)}


# --------------------------------------------------------------------------- Parquet I/O

def _to_arrow(df: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    missing = [n for n in schema.names if n not in df.columns]
    if missing:
        raise ValueError(f"table lacks columns {missing} of its schema")
    columns = []
    for fld in schema:
        # Missing values (None, pd.NA, and NaN outside float columns) become nulls; NaN and
        # inf in float columns stay IEEE values (an undefined ratio is NaN, not null).
        values = [None if v is None or v is pd.NA or (fld.type != _f64 and isinstance(v, float) and math.isnan(v))
                  else v for v in df[fld.name].tolist()]
        if fld.type == _int:
            values = [None if v is None else int(v) for v in values]
        elif fld.type == _f64:
            values = [None if v is None else float(v) for v in values]
        elif fld.type == _bool:
            values = [None if v is None else bool(v) for v in values]
        columns.append(pa.array(values, type=fld.type))
    return pa.Table.from_arrays(columns, schema=schema)


def write_parquet(df: pd.DataFrame, path: str | os.PathLike[str], schema: pa.Schema,
                  metadata: Mapping[str, Any] | None = None) -> None:
    """Write ``df`` with exactly ``schema`` (columns in schema order), atomically and byte-stably.

    ``metadata`` (default: ``df.attrs["anchormask"]``) is stored as canonical JSON under the
    schema-metadata key ``anchormask``.
    """
    meta = metadata if metadata is not None else df.attrs.get("anchormask", {})
    table = _to_arrow(df, schema).replace_schema_metadata({METADATA_KEY: canonical_json(meta).encode("ascii")})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression=COMPRESSION, compression_level=COMPRESSION_LEVEL,
                       use_dictionary=False, write_statistics=True)


def read_parquet(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A table written by ``write_parquet``: nullable integers as ``Int64``; metadata in ``attrs``."""
    if not Path(path).is_file():
        raise InputError(f"{path}: file not found")
    table = pq.read_table(path)
    df = table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
    df.attrs["anchormask"] = read_metadata(path)
    return df


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    import json

    raw = (pq.read_schema(path).metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else {}
