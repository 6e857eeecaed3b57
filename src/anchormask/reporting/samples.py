"""Samples beside the numbers: each arm's post-anchor text for a few queries, side by side.

The queries are chosen by a fixed rule, not by hand: the first ``per_domain`` query ids (in
sorted order) of every domain. With several training seeds the lowest seed's generation is
shown, so a sample is one real generation, never a blend. The numbers beside each text are its
row of the generations table (corpus_overlap, content-word overlap, distinct-2, adjacent repeats).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from anchormask.fileio import InputError


def chosen_queries(table: pd.DataFrame, domains: Sequence[str], per_domain: int) -> list[tuple[str, str]]:
    """(domain, query_id) of the first ``per_domain`` query ids of each domain, domains in the given order."""
    chosen = []
    for domain in domains:
        ids = sorted(table.loc[table["domain"] == domain, "query_id"].unique())
        chosen += [(domain, q) for q in ids[:per_domain]]
    return chosen


def _cell(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if text else "*(empty)*"


def _num(x: Any) -> str:
    return "n/a" if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)) else f"{float(x):.2f}"


def _first_seed_rows(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, query): the lowest training seed's (the base arm has none)."""
    ordered = table.sort_values(["arm", "query_id", "train_seed"], kind="mergesort", na_position="first")
    return ordered.drop_duplicates(["arm", "query_id"], keep="first")


def samples_markdown(records: Iterable[Mapping[str, Any]], table: pd.DataFrame, arms: Sequence[str],
                     domains: Sequence[str], per_domain: int = 2) -> str:
    """results/tables/samples.md: per chosen query, its question, locked anchor and one row per arm."""
    texts = {(r["arm"], r["query_id"], r["train_seed"]): r for r in records}
    rows = _first_seed_rows(table).set_index(["arm", "query_id"])
    lines = ["# Samples", "",
             f"Post-anchor text of every arm for the first {per_domain} query ids of each domain (a fixed rule), "
             "lowest training seed; the numbers are the generation's row of `results/tables/generations.parquet`.",
             ""]
    for domain, query_id in chosen_queries(table, domains, per_domain):
        first: Mapping[str, Any] | None = None
        body = []
        for arm in arms:
            if (arm, query_id) not in rows.index:
                raise InputError(f"samples: arm {arm!r} has no generation for query {query_id!r}")
            row = rows.loc[(arm, query_id)]
            seed = None if pd.isna(row["train_seed"]) else int(row["train_seed"])
            rec = texts.get((arm, query_id, seed))
            if rec is None:
                raise InputError(f"samples: no JSONL record for arm {arm!r}, query {query_id!r}, seed {seed}")
            first = first or rec
            body.append(f"| {arm} | {_cell(rec['post_anchor_text'])} | {int(row['word_tokens'])} | "
                        f"{_num(row['overlap'])} | {_num(row['content_overlap'])} | {_num(row['distinct_2'])} | "
                        f"{_num(row['adjacent_repeats'])} | {'yes' if row['ended'] else 'no'} |")
        assert first is not None  # arms is never empty (the config schema's arms: minProperties 1)
        lines += [f"## {domain}: {query_id}", "",
                  f"**Question:** {_cell(first['query'])}  ", f"**Locked anchor:** {_cell(first['statement'])}", "",
                  "| arm | post-anchor text | words | corpus_overlap | content overlap | distinct-2 | "
                  "adjacent repeats | ended |",
                  "|---|---|---:|---:|---:|---:|---:|---|", *body, ""]
    return "\n".join(lines)
