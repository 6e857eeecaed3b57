"""Mask-count robustness (the seed-002 option of the mechanism probes).

Generations with ``generation.extra_masks = k`` (k masks appended after the answer slot that stay
masked) are scored like the main ones (``tables.generations_table``); per arm, k and query set,
the mean corpus_overlap with a percentile bootstrap CI, and the paired difference from the
smallest k with its CI and P(mean_k < mean_k0). Within one query set every (arm, k) uses the same
resampled queries.

The table is written through ``tables.write_parquet``; its markdown and figure are
``reporting.probe_markdown.maskcount_markdown`` and ``reporting.probe_figures.maskcount_figure``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from anchormask import fileio
from anchormask.checksum import file_sha256
from anchormask.fileio import InputError
from anchormask.measurement import tables
from anchormask.repro import provenance
from anchormask.stats import bootstrap, pairwise

_str, _int, _f64 = pa.string(), pa.int64(), pa.float64()

MASKCOUNT_SCHEMA = tables.arrow_schema([
    ("arm", _str, False), ("k", _int, False), ("split", _str, False), ("n", _int, False), ("mean", _f64, False),
    ("lo", _f64, False), ("hi", _f64, False), ("k0", _int, False), ("diff", _f64, False), ("diff_lo", _f64, False),
    ("diff_hi", _f64, False), ("p_below_k0", _f64, False), ("empty_fraction", _f64, False),
    ("mean_word_tokens", _f64, False), ("resamples", _int, False), ("confidence", _f64, False),
    ("seed", _int, False),
])


def maskcount_generations(files: Sequence[tuple[str, int, str]], corpora: Mapping[str, str]) -> pd.DataFrame:
    """Scored generations of (arm, k, path) files, with a ``k`` column; checks each file's arm and k."""
    frames = []
    for arm, k, path in files:
        for lineno, rec in enumerate(fileio.read_jsonl(path), start=1):
            if rec.get("arm") != arm or rec.get("sampler", {}).get("extra_masks") != int(k):
                raise InputError(f"{path}: line {lineno}: expected arm {arm!r} with sampler.extra_masks = {k}, "
                                 f"found {rec.get('arm')!r} with {rec.get('sampler', {}).get('extra_masks')!r}; "
                                 "regenerate it")
        # k = generation.extra_masks reuses the arm's main generations, which also hold the second query set
        df = tables.of_query_set(tables.generations_table([path], corpora))
        frames.append(df.assign(k=int(k)))
    if not frames:
        raise InputError("mask-count probe: no generation files given")
    return pd.concat(frames, ignore_index=True)


def maskcount_summary(df: pd.DataFrame, resamples: int, confidence: float, seed: int) -> pd.DataFrame:
    """Per (arm, k, split): mean corpus_overlap [CI] and the paired difference from the smallest k."""
    ks = sorted(int(k) for k in df["k"].unique())
    k0 = ks[0]
    rows = []
    selections = [("held_out", df["split"] == "held_out"), ("in_domain", df["split"] == "in_domain"),
                  ("all", pd.Series(True, index=df.index))]
    for split, mask in selections:
        sel = df[mask]
        if sel.empty:
            continue
        for arm in sorted(sel["arm"].unique()):
            part = sel[sel["arm"] == arm]
            values, meta = [], []
            for k in ks:
                at = part[part["k"] == k]
                if at.empty:
                    raise InputError(f"mask-count probe: arm {arm!r} has no generations at k = {k}")
                query_means = pairwise.per_query(at).set_index("query_id").sort_index()
                values.append(query_means["overlap"])
                meta.append((float(at["empty"].mean()), float(at["word_tokens"].astype(float).mean())))
            qids = list(values[0].index)
            if any(list(v.index) != qids for v in values):
                raise InputError(f"mask-count probe: arm {arm!r} covers different queries at different k")
            x = np.stack([v.to_numpy(float) for v in values])  # [k, n]
            counts = bootstrap.resample_counts(len(qids), resamples, bootstrap.query_set_rng(seed, qids))
            means = x @ counts.T / len(qids)  # [k, R]
            lo, hi = bootstrap.percentile_interval(means, confidence)
            diffs = means - means[0]
            dlo, dhi = bootstrap.percentile_interval(diffs, confidence)
            for i, k in enumerate(ks):
                rows.append({"arm": arm, "k": k, "split": split, "n": len(qids), "mean": float(x[i].mean()),
                             "lo": float(lo[i]), "hi": float(hi[i]), "k0": k0, "diff": float(x[i].mean() - x[0].mean()),
                             "diff_lo": float(dlo[i]), "diff_hi": float(dhi[i]),
                             "p_below_k0": float((diffs[i] < 0).mean()), "empty_fraction": meta[i][0],
                             "mean_word_tokens": meta[i][1], "resamples": int(resamples),
                             "confidence": float(confidence), "seed": int(seed)})
    out = pd.DataFrame(rows, columns=MASKCOUNT_SCHEMA.names)
    return out


def summary_metadata(files: Sequence[tuple[str, int]], paths: Sequence[str], settings: Mapping) -> dict:
    """The summary table's provenance: each (arm, k) generation file with its hash, the settings, versions."""
    return {"table": "probe_maskcount", "inputs": [{"arm": a, "k": k, "path": p, "sha256": file_sha256(p)}
                                                   for (a, k), p in zip(files, paths)],
            "settings": settings, "versions": provenance.versions()}
