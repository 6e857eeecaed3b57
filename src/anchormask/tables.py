"""Parquet tables of scored generations and statistics, and the headline markdown.

``generations_table`` reads generation JSONL (workflow/schemas/generation.schema.yaml),
scores every record's ``post_anchor_text`` against the vocabulary of the corpus of the
record's OWN ``domain`` (anchormask.metric) and returns one row per generation, sorted by
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
import yaml

from anchormask import metric, provenance, quality
from anchormask.checksum import file_sha256
from anchormask.io import InputError, atomic_path, canonical_json, read_jsonl

GENERATION_SCHEMA_FILE = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "generation.schema.yaml"
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


def file_entry(path: str | os.PathLike[str]) -> dict[str, str]:
    return {"path": str(path), "sha256": file_sha256(path)}


# --------------------------------------------------------------------------- corpora and generations

def load_vocabularies(corpora: Mapping[str, str | os.PathLike[str]]) -> dict[str, frozenset[str]]:
    """Domain -> corpus vocabulary, from corpus JSONL files (lines with ``id`` and ``text``)."""
    vocabs = {}
    for domain, path in corpora.items():
        records = read_jsonl(path)
        for lineno, rec in enumerate(records, start=1):
            if not isinstance(rec.get("text"), str) or not rec["text"].strip():
                raise InputError(f"{path}: line {lineno}: a corpus line needs a non-empty string 'text'")
        if not records:
            raise InputError(f"{path}: corpus {domain!r} is empty")
        vocabs[domain] = metric.corpus_vocabulary(r["text"] for r in records)
    return vocabs


def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(yaml.safe_load(GENERATION_SCHEMA_FILE.read_text()))


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
    validator = _validator()
    rows: list[dict[str, Any]] = []
    seen: dict[tuple, str] = {}
    query_domain: dict[str, tuple[str, str]] = {}
    bases: dict[str, str] = {}
    for path in jsonl_paths:
        for lineno, rec in enumerate(read_jsonl(path), start=1):
            where = f"{path}: line {lineno}"
            errors = sorted(validator.iter_errors(rec), key=lambda e: list(map(str, e.absolute_path)))
            if errors:
                e = errors[0]
                key = ".".join(map(str, e.absolute_path)) or "(record)"
                raise InputError(f"{where}: {key}: {e.message} (see workflow/schemas/generation.schema.yaml)")
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
                   "stop_words": "bm25s.stopwords.STOPWORDS_EN_PLUS", "stop_word_count": len(quality.STOP_WORDS)},
        "rows": len(df),
        "versions": provenance.versions(),
    }
    return df


def of_query_set(df: pd.DataFrame, query_set: str = "main") -> pd.DataFrame:
    """The rows of one query set; figures, samples and the main comparisons use the main set."""
    return df[df["query_set"] == query_set].reset_index(drop=True)


def _scores(text: str, vocab: frozenset[str]) -> dict[str, Any]:
    """corpus_overlap (the report's metric) and the degeneracy metrics of one post-anchor text."""
    scored = metric.score(text, vocab)
    tokens = metric.word_tokens(text)
    return {"word_tokens": scored.tokens, "overlap": scored.overlap, "empty": scored.empty,
            "content_words": len(quality.content_words(tokens)),
            "content_overlap": quality.content_overlap(tokens, vocab),
            "distinct_1": quality.distinct_n(tokens, 1), "distinct_2": quality.distinct_n(tokens, 2),
            "adjacent_repeats": quality.adjacent_repeat_share(tokens)}


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


# --------------------------------------------------------------------------- headline markdown

def number(x: Any, fmt: str = ".3f") -> str:
    """A table cell: n/a for a missing value or NaN, inf/-inf for an infinite one."""
    if x is None or x is pd.NA:
        return "n/a"
    x = float(x)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, fmt)


def _ratio(row: Mapping[str, Any]) -> str:
    ratio = number(row['ratio'], '.2f')
    return f"{ratio}{'x' if ratio != 'n/a' else ''} [{number(row['ratio_lo'], '.2f')}, {number(row['ratio_hi'], '.2f')}]"


def _diff(row: Mapping[str, Any]) -> str:
    return f"{number(row['diff'], '+.3f')} [{number(row['diff_lo'], '+.3f')}, {number(row['diff_hi'], '+.3f')}]"


def _report(row: Mapping[str, Any]) -> str:
    r = row.get("report")
    if r is None or r is pd.NA or (isinstance(r, float) and math.isnan(r)):
        return "—"
    return str(r).replace("|", "\\|")


def _settings_line(df: pd.DataFrame) -> str:
    parts = []
    for col, label in (("resamples", "resamples"), ("permutations", "sign-flip patterns (N > 16)"),
                       ("confidence", "confidence"), ("seed", "seed")):
        vals = sorted({v.item() if hasattr(v, "item") else v for v in df[col]}) if col in df and len(df) else []
        parts.append(f"{label} {', '.join(map(str, vals)) or 'n/a'}")
    return "; ".join(parts)


def _p(row: Mapping[str, Any]) -> str:
    """Permutation p-value with its Holm adjustment; exact ones carry no Monte Carlo error."""
    return f"{number(row['p_perm'], '.4f')} | {number(row['p_holm'], '.4f')}"


def _n(row: Mapping[str, Any]) -> str:
    seeds = int(row["seeds"])
    return f"{int(row['n'])}" + (f" × {seeds} seeds" if seeds > 1 else "")


def _comparison_table(df: pd.DataFrame) -> list[str]:
    lines = ["| comparison | selection | a | b | N | mean a | mean b | a/b [CI] | a−b [CI] | P(a>b) | p | p Holm | "
             "report |",
             "|---|---|---|---|---:|---:|---:|---|---|---:|---:|---:|---|"]
    for row in df.to_dict("records"):
        lines.append(f"| {row['name']} | {row['selector']} | {row['a']} | {row['b']} | {_n(row)} | "
                     f"{number(row['mean_a'], '.3f')} | {number(row['mean_b'], '.3f')} | {_ratio(row)} | {_diff(row)} | "
                     f"{number(row['p_a_gt_b'], '.3f')} | {_p(row)} | {_report(row)} |")
    return lines


def _family(df: pd.DataFrame) -> str:
    return f"m = {int(df['family'].iloc[0])}" if len(df) else "m = 0"


def _per_seed_table(comparisons_df: pd.DataFrame, per_seed_df: pd.DataFrame) -> list[str]:
    """Each comparison's pooled ratio beside its ratio and difference per training seed."""
    lines = ["## Per training seed (corpus_overlap)", "",
             "Each comparison's value with one training seed at a time (seed of a, paired by index): the spread "
             "the two-level interval above includes.", "",
             "| comparison | a/b pooled [CI] | a/b per seed | a−b per seed |", "|---|---|---|---|"]
    for row in comparisons_df.to_dict("records"):
        seeds = per_seed_df[per_seed_df["name"] == row["name"]].to_dict("records")
        ratios = ", ".join(f"{s['seed_a'] if s['seed_a'] is not pd.NA else '-'}: {number(s['ratio'], '.2f')}x"
                           for s in seeds)
        diffs = ", ".join(f"{number(s['diff'], '+.3f')}" for s in seeds)
        lines.append(f"| {row['name']} | {_ratio(row)} | {ratios} | {diffs} |")
    return lines + [""]


def _query_sets_table(comparisons_df: pd.DataFrame, alt_df: pd.DataFrame) -> list[str]:
    """The held-out comparisons on the main query set beside the same ones on the second set."""
    main = {row["name"]: row for row in comparisons_df.to_dict("records")}
    lines = [f"## Both query sets: held-out comparisons on corpus_overlap (second set: Holm over {_family(alt_df)})",
             "", "The same adapters answering a second, independently worded set of held-out queries "
             "(`data.alt_queries_dir`). A difference that holds on one set only depends on the wording of the "
             "queries.", "",
             "| comparison | N | first set a/b [CI] | first a−b | first p Holm | N | second set a/b [CI] | "
             "second a−b | second p Holm |",
             "|---|---:|---|---:|---:|---:|---|---:|---:|"]
    for row in alt_df.to_dict("records"):
        first = main[row["name"]]
        lines.append(f"| {row['name']} | {_n(first)} | {_ratio(first)} | {number(first['diff'], '+.3f')} | "
                     f"{number(first['p_holm'], '.4f')} | {_n(row)} | {_ratio(row)} | {number(row['diff'], '+.3f')} | "
                     f"{number(row['p_holm'], '.4f')} |")
    return lines + [""]


def headline_markdown(comparisons_df: pd.DataFrame, sweep_df: pd.DataFrame,
                      base_description: Mapping[str, Any] | str, content_df: pd.DataFrame,
                      per_seed_df: pd.DataFrame | None = None, alt_df: pd.DataFrame | None = None) -> str:
    """The headline tables: comparisons (the report's figures beside ours), per training seed when
    there are several (``bootstrap.per_seed``), the held-out comparisons on the second query set
    when there is one, the same comparisons on content-word overlap, the sweep."""
    if isinstance(base_description, Mapping):
        base = f"`{base_description.get('path')}` (sha256 `{base_description.get('sha256')}`)"
    else:
        base = str(base_description)
    seeds = sorted({int(s) for s in comparisons_df["seeds"]}) if len(comparisons_df) else []
    lines = ["# Headline results", "",
             "Per-query corpus_overlap of the post-anchor text, paired percentile bootstrap over queries "
             "(with several training seeds, over seeds and queries: both levels are resampled). a/b is the "
             "ratio of means, a−b the difference of means, P(a>b) the fraction of resamples with "
             "mean(a) > mean(b); p is the two-sided paired sign-flip permutation p-value of a−b and p Holm "
             "its Holm adjustment over the m comparisons of its table.", "",
             f"## Comparisons: corpus_overlap (Holm over {_family(comparisons_df)})", "",
             *_comparison_table(comparisons_df), "",
             *(_per_seed_table(comparisons_df, per_seed_df) if per_seed_df is not None and max(seeds, default=1) > 1
               else []),
             *(_query_sets_table(comparisons_df, alt_df) if alt_df is not None else []),
             f"## The same comparisons on content-word overlap (Holm over {_family(content_df)})", "",
             "corpus_overlap counted over content words only (stop words removed from the text and the "
             "vocabulary): an advantage that vanishes here is carried by function words.", "",
             *_comparison_table(content_df), "",
             f"## Sweep: anchor vs random, held-out pooled (Holm over {_family(sweep_df)})", "",
             "| size | steps | N | mean anchor | mean random | anchor/random [CI] | anchor−random [CI] | "
             "P(a>b) | p | p Holm | report |",
             "|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---|"]
    for row in sweep_df.to_dict("records"):
        lines.append(f"| {int(row['train_size'])} | {int(row['train_steps'])} | {_n(row)} | "
                     f"{number(row['mean_a'], '.3f')} | {number(row['mean_b'], '.3f')} | {_ratio(row)} | {_diff(row)} | "
                     f"{number(row['p_a_gt_b'], '.3f')} | {_p(row)} | {_report(row)} |")
    conf = sorted(set(comparisons_df["confidence"])) if len(comparisons_df) else []
    lines += ["", "## Notes", "",
              f"- Base: {base}.",
              f"- Training seeds per arm: {', '.join(map(str, seeds)) or 'n/a'} (one seed: queries are "
              "resampled, as in the report).",
              f"- Comparisons: {_settings_line(comparisons_df)}; sweep: {_settings_line(sweep_df)}.",
              f"- Intervals: {', '.join(f'{100 * c:g}%' for c in conf) or 'n/a'} percentile intervals; "
              "ratio n/a = 0/0, inf = mean b of 0.",
              "- p: every sign pattern when N <= 16 (exact), else seeded random patterns, (1 + extreme) / "
              "(1 + patterns). Each table is its own Holm family.",
              "- The report's figures come from config `statistics.comparisons[].report` and "
              "`statistics.sweep_report`.", ""]
    return "\n".join(lines)
