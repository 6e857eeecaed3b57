"""Paired percentile bootstrap of per-query corpus_overlap, vectorised with numpy.

Method (docs/protocol.md, "Statistics"): ``resamples`` bootstrap resamples of the per-query
values; in each resample the SAME resampled query indices are used for both arms (paired);
the confidence interval is the percentile interval (``numpy.percentile``, linear
interpolation, the rule ``scipy.stats.bootstrap(method="percentile")`` uses) of the
resampled statistic; ``P(a>b)`` is the fraction of resamples with mean(a) > mean(b).

Choices (our reading):

* Training seeds (two levels). With one training seed per arm the bootstrap resamples queries
  only, exactly as the report does. With S > 1 seeds an arm's values form an (S seeds x n
  queries) grid and each resample draws S seed indices with replacement AND n query indices
  with replacement (queries first, then seeds, from the same Generator); the resampled mean is
  the mean of the grid over the drawn seeds and queries. Arms are paired by seed index (the
  i-th smallest training seed of a with that of b, so the same data order and initialisation
  seed meet) and by query. Why: the arms' training randomness is a second source of variance;
  averaging over seeds first, as before, treats the S adapters as fixed and the interval
  covers only the choice of queries. Resampling rows and columns of the crossed seed x query
  design (McCullagh 2000, "Resampling and exchangeable arrays") keeps both main effects; it
  slightly overstates the seed x query interaction and, with few seeds, understates the seed
  variance by (S - 1) / S; tests/test_bootstrap.py measures its coverage. An arm without
  training seeds (base) is one row, the same for every drawn seed.
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
  the Generator it is given and applies it to every comparison of the batch; ``query_set_rng``
  gives the Generator of one query set (``pairwise`` says how the statistics job uses it).

The paired sign-flip test and Holm's adjustment are in ``signflip``; the comparisons and the
sweep of the statistics job, which put both together, are in ``pairwise``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np


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


def safe_ratio(num: np.ndarray | float, den: np.ndarray | float) -> Any:
    """``num / den`` without a warning where ``den`` is 0: an array of arrays, a NumPy scalar of two floats."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.true_divide(num, den)


def _resampled_means(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(k, R) resampled means of k (S seeds, n queries) grids; see the module docstring."""
    k, seeds, n = x.shape
    counts = resample_counts(n, resamples, rng)          # (R, n)
    if seeds == 1:  # every seed resample is the one seed: only the queries vary (the report's bootstrap)
        return x[:, 0, :] @ counts.T / n
    seed_counts = resample_counts(seeds, resamples, rng)  # (R, S)
    return np.stack([((seed_counts @ grid) * counts).sum(axis=1) for grid in x]) / (seeds * n)


def paired_bootstrap_batch(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float,
                           rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Many paired comparisons over the same n queries (and S training seeds) at once.

    ``a`` and ``b`` are (m, n) per-query values or (m, S, n) seed x query grids: row i holds
    comparison i's two arms, aligned by query (and seed index). One resample draw from ``rng``
    is shared by all rows and both arms. Returns a dict of length-m arrays keyed by ``pairwise.RESULT_KEYS``
    but ``p_perm`` and ``perm_exact`` (``signflip.sign_flip_pvalues`` gives those).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim == 2:
        a, b = a[:, None, :], b[:, None, :]
    if a.shape != b.shape or a.ndim != 3:
        raise ValueError(f"a and b must have the same (m, n) or (m, S, n) shape, got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("per-query values must be finite")
    m, seeds, n = a.shape
    # One pass for both arms and the differences (so equal arms give exact zeros).
    means_a, means_b, diffs = np.split(_resampled_means(np.concatenate([a, b, a - b]), resamples, rng), 3)
    ratios = safe_ratio(means_a, means_b)
    mean_a, mean_b = a.mean(axis=1).mean(axis=1), b.mean(axis=1).mean(axis=1)
    ratio_lo, ratio_hi = percentile_interval(ratios, confidence)
    diff_lo, diff_hi = percentile_interval(diffs, confidence)
    return {
        "n": np.full(m, n, dtype=np.int64),
        "seeds": np.full(m, seeds, dtype=np.int64),
        "mean_a": mean_a,
        "mean_b": mean_b,
        "ratio": safe_ratio(mean_a, mean_b),
        "ratio_lo": ratio_lo,
        "ratio_hi": ratio_hi,
        "diff": (a - b).mean(axis=1).mean(axis=1),
        "diff_lo": diff_lo,
        "diff_hi": diff_hi,
        "p_a_gt_b": (diffs > 0).mean(axis=1),
        "zero_b_resamples": (means_b == 0).sum(axis=1).astype(np.int64),
    }



def paired_bootstrap(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float,
                     rng: np.random.Generator) -> dict[str, float]:
    """One paired comparison: per-query values ``a[i]`` vs ``b[i]``, or (S seeds, n queries) grids; scalars."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim not in (1, 2) or a.shape != b.shape:
        raise ValueError(f"a and b must be (n,) or (S, n) of equal shape, got {a.shape} and {b.shape}")
    out = paired_bootstrap_batch(a[None, :], b[None, :], resamples, confidence, rng)
    return {k: (int(v[0]) if k in ("n", "seeds", "zero_b_resamples") else float(v[0])) for k, v in out.items()}


def bootstrap_means(x: np.ndarray, resamples: int, confidence: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lo, hi) per row of (m, n) per-query values or (m, S, n) seed x query grids (for figures).

    One draw is shared by the rows; with several seeds both levels are resampled, as in the comparisons.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 2:
        x = x[:, None, :]
    lo, hi = percentile_interval(_resampled_means(x, resamples, rng), confidence)
    return x.mean(axis=(1, 2)), lo, hi


def query_set_rng(seed: int, query_ids: Sequence[str], stream: int | None = None) -> np.random.Generator:
    """The Generator of one query set: seeded from ``seed`` and the sorted query ids.

    ``stream`` (e.g. ``signflip.PERMUTATION_STREAM``) gives an independent Generator for another use of the
    same query set, so the bootstrap's draws do not depend on how many permutations are drawn.
    """
    text = json.dumps(sorted(query_ids), separators=(",", ":"), ensure_ascii=True)
    key = int.from_bytes(hashlib.sha256(text.encode("ascii")).digest()[:8], "big")
    entropy = [int(seed), key] + ([] if stream is None else [int(stream)])
    return np.random.default_rng(np.random.SeedSequence(entropy))
