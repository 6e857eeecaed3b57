"""Paired percentile bootstrap of per-query corpus_overlap, vectorised with numpy.

Method (PROTOCOL "Metric and statistics"): ``resamples`` bootstrap resamples of the per-query
values; in each resample the SAME resampled query indices are used for both arms (paired);
the confidence interval is the percentile interval (``numpy.percentile``, linear
interpolation, the rule ``scipy.stats.bootstrap(method="percentile")`` uses) of the
resampled statistic; ``P(a>b)`` is the fraction of resamples with mean(a) > mean(b).

Choices (our reading):

* Per-query values. A query's value for an arm is its corpus_overlap averaged over the
  arm's training seeds (``train.seeds``); with one seed it is that generation's overlap. The
  bootstrap resamples queries, not (query, seed) pairs.
* Ties. ``P(a>b)`` counts strictly greater resampled means, computed as
  mean(a - b) > 0 over the resampled queries so that arms equal on every query give an
  exact 0 difference: ties count as "not a > b".
* Zero division. The point ratio mean_a / mean_b is +inf when mean_b == 0 < mean_a and NaN
  when both are 0; resampled ratios alike (no warning is raised). ``zero_b_resamples``
  counts the resamples with mean(b) == 0. When every resampled ratio is finite the ratio CI
  is the plain linear percentile interval; otherwise the undefined (0/0) resamples are
  dropped and the interval is taken from the order statistics of the rest
  (``method="inverted_cdf"``, no interpolation, so +inf can be an end point and no
  inf - inf arises); all undefined gives NaN ends.
* Random streams. ``paired_bootstrap_batch`` draws ONE index matrix (resamples x n) from
  the Generator it is given and applies it to every comparison of the batch. In
  ``run_comparisons`` / ``run_sweep`` comparisons over the same query set form one batch
  (a joint bootstrap: all held-out comparisons see the same resampled queries); its
  Generator is seeded from ``statistics.seed`` and the sorted query ids, so a comparison's
  numbers do not change when other comparisons are added, removed or reordered.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from anchormask.io import InputError

log = logging.getLogger("anchormask.bootstrap")

RESULT_KEYS = ("n", "mean_a", "mean_b", "ratio", "ratio_lo", "ratio_hi", "diff", "diff_lo", "diff_hi",
               "p_a_gt_b", "zero_b_resamples")


# --------------------------------------------------------------------------- core numerics

def resample_counts(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, n) matrix: how often each of n items is drawn in each resample (rows sum to n).

    Each row is n uniform draws with replacement. Counting them lets one matrix product give
    every arm's resampled means at once.
    """
    if n < 1:
        raise ValueError("bootstrap needs at least one query")
    if resamples < 1:
        raise ValueError("resamples must be >= 1")
    flat = rng.integers(0, n, size=(resamples, n))
    flat += np.arange(0, resamples * n, n, dtype=np.intp)[:, None]
    return np.bincount(flat.ravel(), minlength=resamples * n).reshape(resamples, n).astype(np.float64)


def _check_confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    return (1.0 - confidence) / 2.0


def percentile_interval(samples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise percentile interval of (m, R) samples; non-finite rows as the module docstring says."""
    alpha = _check_confidence(confidence)
    samples = np.atleast_2d(np.asarray(samples, dtype=np.float64))
    q = [100.0 * alpha, 100.0 * (1.0 - alpha)]
    lo = np.empty(samples.shape[0])
    hi = np.empty(samples.shape[0])
    finite = np.isfinite(samples).all(axis=1)
    if finite.any():  # one vectorised call for the common case
        lo[finite], hi[finite] = np.percentile(samples[finite], q, axis=1)
    for i in np.flatnonzero(~finite):
        defined = samples[i][~np.isnan(samples[i])]
        if defined.size == 0:
            lo[i] = hi[i] = np.nan
        else:
            lo[i], hi[i] = np.percentile(defined, q, method="inverted_cdf")
    return lo, hi


def _safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.true_divide(num, den)


def paired_bootstrap_batch(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float,
                           rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Many paired comparisons over the same n queries at once.

    ``a`` and ``b`` are (m, n): row i holds the per-query values of comparison i's two arms,
    columns aligned by query. One (resamples, n) index draw from ``rng`` is shared by all
    rows and both arms. Returns a dict of length-m arrays keyed by ``RESULT_KEYS``.
    """
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(b, dtype=np.float64))
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"a and b must have the same (m, n) shape, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("per-query values must be finite")
    m, n = a.shape
    counts = resample_counts(n, resamples, rng)          # (R, n)
    # One product for both arms and the per-query differences (so equal arms give exact zeros).
    means_a, means_b, diffs = np.split(np.vstack([a, b, a - b]) @ counts.T / n, 3)   # each (m, R)
    ratios = _safe_ratio(means_a, means_b)
    mean_a, mean_b = a.mean(axis=1), b.mean(axis=1)
    ratio_lo, ratio_hi = percentile_interval(ratios, confidence)
    diff_lo, diff_hi = percentile_interval(diffs, confidence)
    return {
        "n": np.full(m, n, dtype=np.int64),
        "mean_a": mean_a,
        "mean_b": mean_b,
        "ratio": _safe_ratio(mean_a, mean_b),
        "ratio_lo": ratio_lo,
        "ratio_hi": ratio_hi,
        "diff": (a - b).mean(axis=1),
        "diff_lo": diff_lo,
        "diff_hi": diff_hi,
        "p_a_gt_b": (diffs > 0).mean(axis=1),
        "zero_b_resamples": (means_b == 0).sum(axis=1).astype(np.int64),
    }


def paired_bootstrap(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float,
                     rng: np.random.Generator) -> dict[str, float]:
    """One paired comparison of per-query values ``a[i]`` vs ``b[i]``; scalars keyed by ``RESULT_KEYS``."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"a and b must be 1-d of equal length, got {a.shape} and {b.shape}")
    out = paired_bootstrap_batch(a[None, :], b[None, :], resamples, confidence, rng)
    return {k: (int(v[0]) if k in ("n", "zero_b_resamples") else float(v[0])) for k, v in out.items()}


def bootstrap_means(x: np.ndarray, resamples: int, confidence: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lo, hi) per row of (m, n) values; one index draw shared by the rows (for figures)."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    counts = resample_counts(x.shape[1], resamples, rng)
    lo, hi = percentile_interval(x @ counts.T / x.shape[1], confidence)
    return x.mean(axis=1), lo, hi


def query_set_rng(seed: int, query_ids: Sequence[str]) -> np.random.Generator:
    """The Generator of one query set: seeded from ``seed`` and the sorted query ids."""
    text = json.dumps(sorted(query_ids), separators=(",", ":"), ensure_ascii=True)
    key = int.from_bytes(hashlib.sha256(text.encode("ascii")).digest()[:8], "big")
    return np.random.default_rng(np.random.SeedSequence([int(seed), key]))


# --------------------------------------------------------------------------- per-query values

def per_query(df: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, query_id): overlap averaged over training seeds; ``runs`` = generations averaged."""
    needed = {"arm", "query_id", "domain", "split", "overlap"}
    missing = needed - set(df.columns)
    if missing:
        raise InputError(f"generations table lacks columns {sorted(missing)}")
    grouped = df.groupby(["arm", "query_id"], sort=True, dropna=False)
    out = grouped.agg(overlap=("overlap", "mean"), runs=("overlap", "size"),
                      domain=("domain", "first"), split=("split", "first"),
                      domains=("domain", "nunique"), splits=("split", "nunique")).reset_index()
    bad = out[(out["domains"] > 1) | (out["splits"] > 1)]
    if len(bad):
        row = bad.iloc[0]
        raise InputError(f"query {row['query_id']!r} of arm {row['arm']!r} appears under several "
                         "domains or splits; query ids must be unique across domains")
    return out.drop(columns=["domains", "splits"])


def _selector(comp: Mapping[str, Any]) -> tuple[str, str]:
    has_split, has_domain = "split" in comp, "domain" in comp
    if has_split == has_domain:
        raise InputError(f"comparison {comp.get('name')!r}: give exactly one of split or domain")
    if has_split:
        if comp["split"] not in ("in_domain", "held_out"):
            raise InputError(f"comparison {comp.get('name')!r}: split must be in_domain or held_out, "
                             f"got {comp['split']!r}")
        return "split", comp["split"]
    return "domain", comp["domain"]


@dataclass(frozen=True)
class ArmValues:
    """One arm's per-query values over a selection, in query-id order."""

    query_ids: np.ndarray
    overlap: np.ndarray
    runs: np.ndarray


class _PerQueryIndex:
    """The per-query table as numpy columns, so that each comparison selects its rows without pandas.

    Why: the statistics job pairs a dozen comparisons; one pandas filter per arm and comparison
    cost several times the bootstrap itself. ``per_query`` sorts by (arm, query_id), so a
    selection keeps query-id order.
    """

    def __init__(self, pq: pd.DataFrame):
        self.columns = {c: pq[c].to_numpy() for c in ("arm", "query_id", "split", "domain")}
        self.overlap = pq["overlap"].to_numpy(dtype=np.float64)
        self.runs = pq["runs"].to_numpy()

    def arm(self, name: str, arm: str, column: str, value: str) -> ArmValues:
        where = self.columns[column] == value
        rows = np.flatnonzero(where & (self.columns["arm"] == arm))
        if rows.size == 0:
            present = sorted(set(self.columns["arm"][where].tolist()))
            raise InputError(f"comparison {name!r}: arm {arm!r} has no generations with {column} = {value!r}; "
                             f"arms there: {', '.join(present) or '(none)'}")
        return ArmValues(self.columns["query_id"][rows], self.overlap[rows], self.runs[rows])

    def pair(self, name: str, a: str, b: str, column: str, value: str) -> tuple[ArmValues, ArmValues]:
        va, vb = self.arm(name, a, column, value), self.arm(name, b, column, value)
        if not np.array_equal(va.query_ids, vb.query_ids):
            qa, qb = set(va.query_ids.tolist()), set(vb.query_ids.tolist())
            only_a, only_b = sorted(qa - qb), sorted(qb - qa)
            raise InputError(f"comparison {name!r}: arms {a!r} and {b!r} cover different queries "
                             f"({column} = {value!r}): only in {a}: {only_a[:5]}{' ...' if len(only_a) > 5 else ''}"
                             f" ({len(only_a)}); only in {b}: {only_b[:5]}{' ...' if len(only_b) > 5 else ''}"
                             f" ({len(only_b)}); pairing is by query_id")
        return va, vb


def run_batches(jobs: list[dict[str, Any]], resamples: int, confidence: float, seed: int) -> list[dict]:
    """Result dicts (``RESULT_KEYS``) of many paired comparisons, in ``jobs`` order.

    ``jobs`` are dicts with ``query_ids`` and the aligned ``a_values``, ``b_values`` (other keys are
    ignored). Comparisons over the same query set form one ``paired_bootstrap_batch`` whose
    Generator comes from ``seed`` and the sorted query ids (``query_set_rng``).
    """
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(tuple(job["query_ids"]), []).append(i)
    results: list[dict | None] = [None] * len(jobs)
    for qids, members in groups.items():
        a = np.stack([jobs[i]["a_values"] for i in members])
        b = np.stack([jobs[i]["b_values"] for i in members])
        out = paired_bootstrap_batch(a, b, resamples, confidence, query_set_rng(seed, qids))
        for row, i in enumerate(members):
            results[i] = {k: out[k][row].item() for k in RESULT_KEYS}
    return results  # type: ignore[return-value]


def run_comparisons(generations_df: pd.DataFrame, comparisons: Sequence[Mapping[str, Any]], resamples: int,
                    confidence: float, seed: int) -> pd.DataFrame:
    """One row per comparison (config ``statistics.comparisons`` order); see tables.COMPARISONS_SCHEMA."""
    index = _PerQueryIndex(per_query(generations_df))
    names = [c.get("name") for c in comparisons]
    dupes = sorted({n for n in names if names.count(n) > 1}, key=str)
    if dupes:
        raise InputError(f"comparison names must be unique; repeated: {dupes}")
    jobs = []
    for comp in comparisons:
        name = comp.get("name")
        if not name or "a" not in comp or "b" not in comp:
            raise InputError(f"comparison {comp!r}: needs name, a and b")
        column, value = _selector(comp)
        va, vb = index.pair(name, comp["a"], comp["b"], column, value)
        jobs.append({"name": name, "selector": f"{column}={value}", "a": comp["a"], "b": comp["b"],
                     "query_ids": va.query_ids.tolist(), "a_values": va.overlap, "b_values": vb.overlap,
                     "runs_a": int(va.runs.max()), "runs_b": int(vb.runs.max()), "report": comp.get("report")})
    results = run_batches(jobs, resamples, confidence, seed)
    rows = []
    for job, res in zip(jobs, results):
        rows.append({"name": job["name"], "selector": job["selector"], "a": job["a"], "b": job["b"], **res,
                     "runs_a": job["runs_a"], "runs_b": job["runs_b"], "resamples": int(resamples),
                     "confidence": float(confidence), "seed": int(seed), "report": job["report"]})
        log.info("%s: N=%d mean_a=%.4f mean_b=%.4f ratio=%.3f [%.3f, %.3f] diff=%+.4f P(a>b)=%.4f",
                 job["name"], res["n"], res["mean_a"], res["mean_b"], res["ratio"], res["ratio_lo"],
                 res["ratio_hi"], res["diff"], res["p_a_gt_b"])
    return _frame(rows, COMPARISON_COLUMNS)


def run_sweep(sweep_df: pd.DataFrame, resamples: int, confidence: float, seed: int,
              report: Mapping[str, str] | None = None, a_strategy: str = "anchor",
              b_strategy: str = "random") -> pd.DataFrame:
    """anchor vs random at every (train_size, train_steps) of the sweep table, held-out queries pooled.

    Arms are identified by their (strategy, train_size, train_steps) columns, so arm names
    are free. ``report`` maps "SIZExSTEPS" to the report's figure for that point.
    """
    report = dict(report or {})
    held = sweep_df[sweep_df["split"] == "held_out"]
    if held.empty:
        raise InputError("sweep table has no held-out generations")
    points = sorted({(int(n), int(k)) for n, k in held[["train_size", "train_steps"]].itertuples(index=False)})
    index = _PerQueryIndex(per_query(held))
    jobs = []
    for size, steps in points:
        at = held[(held["train_size"] == size) & (held["train_steps"] == steps)]
        arms = {}
        for strategy in (a_strategy, b_strategy):
            found = sorted(at.loc[at["strategy"] == strategy, "arm"].unique())
            if len(found) != 1:
                raise InputError(f"sweep point {size}x{steps}: expected one {strategy!r} arm, found "
                                 f"{found or 'none'}")
            arms[strategy] = found[0]
        name = f"{size}x{steps}"
        va, vb = index.pair(f"sweep {name}", arms[a_strategy], arms[b_strategy], "split", "held_out")
        jobs.append({"point": name, "train_size": size, "train_steps": steps, "a": arms[a_strategy],
                     "b": arms[b_strategy], "query_ids": va.query_ids.tolist(), "a_values": va.overlap,
                     "b_values": vb.overlap, "runs_a": int(va.runs.max()), "runs_b": int(vb.runs.max()),
                     "report": report.get(name)})
    unknown = sorted(set(report) - {j["point"] for j in jobs})
    if unknown:
        log.warning("sweep_report names points the sweep table does not have: %s", ", ".join(unknown))
    results = run_batches(jobs, resamples, confidence, seed)
    rows = []
    for job, res in zip(jobs, results):
        rows.append({k: job[k] for k in ("point", "train_size", "train_steps", "a", "b")} | res
                    | {"runs_a": job["runs_a"], "runs_b": job["runs_b"], "resamples": int(resamples),
                       "confidence": float(confidence), "seed": int(seed), "report": job["report"]})
        log.info("sweep %s: N=%d ratio=%.3f [%.3f, %.3f] P(a>b)=%.4f", job["point"], res["n"], res["ratio"],
                 res["ratio_lo"], res["ratio_hi"], res["p_a_gt_b"])
    return _frame(rows, SWEEP_COLUMNS)


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=columns)
    df["report"] = pd.Series([r["report"] for r in rows], index=df.index, dtype=object)  # None stays None
    return df


_STAT_COLUMNS = ["n", "mean_a", "mean_b", "ratio", "ratio_lo", "ratio_hi", "diff", "diff_lo", "diff_hi",
                 "p_a_gt_b", "zero_b_resamples", "runs_a", "runs_b", "resamples", "confidence", "seed", "report"]
COMPARISON_COLUMNS = ["name", "selector", "a", "b", *_STAT_COLUMNS]
SWEEP_COLUMNS = ["point", "train_size", "train_steps", "a", "b", *_STAT_COLUMNS]
