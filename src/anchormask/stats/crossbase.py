"""Across bases: does one base's effect differ from another's, on the same queries?

For a comparison ``a`` vs ``b`` that two bases X and Y share, and the queries both answered, with
per-query values averaged over training seeds (``pairwise.per_query``):

- each base's effect: ratio r = mean(a) / mean(b) and difference d = mean(a - b);
- the ratio of ratios r_X / r_Y and the difference of differences d_X - d_Y, each with a percentile
  interval from resampling queries jointly: one resample of query indices serves every base and
  every pair (a query is one unit whatever base answered it), drawn from a Generator seeded by
  ``statistics.seed``, the sorted query ids and ``CROSSBASE_STREAM``;
- a paired sign-flip p of d_X - d_Y: under "the bases have the same effect" the query's two
  effects are exchangeable, so each query's (a_X - b_X) - (a_Y - b_Y) keeps or flips its sign.

Seeds are averaged per query before resampling: bases may train different numbers of seeds, and
the question is about the bases, not the seeds (each base's own table has the two-level interval).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from anchormask.stats.bootstrap import percentile_interval, query_set_rng, resample_counts, safe_ratio
from anchormask.stats.pairwise import per_query
from anchormask.stats.signflip import sign_flip_pvalues
from anchormask.study import comparison_selection

CROSSBASE_STREAM = 2  # query_set_rng streams: None bootstrap, 1 sign-flip (signflip.PERMUTATION_STREAM)
CROSSBASE_SIGNFLIP_STREAM = 3

DIFFERENCE_COLUMNS = ["comparison", "base_x", "base_y", "n", "ratio_x", "ratio_y", "ratio_of_ratios", "ror_lo",
                      "ror_hi", "diff_x", "diff_y", "diff_of_diffs", "dod_lo", "dod_hi", "p_signflip", "perm_exact",
                      "resamples", "confidence", "seed", "permutations"]


def effect_values(generations: pd.DataFrame, comparison: Mapping[str, Any],
                  value: str = "overlap") -> pd.DataFrame:
    """Per query of the comparison's selection: the a and b arms' values (seed means), indexed by query id."""
    column, selected = comparison_selection(comparison)
    rows = per_query(generations, value)
    rows = rows[rows[column] == selected]
    side = {arm: rows[rows["arm"] == arm].set_index("query_id")[value] for arm in (comparison["a"], comparison["b"])}
    both = pd.DataFrame({"a": side[comparison["a"]], "b": side[comparison["b"]]}).dropna()
    return both.sort_index()


def shared_comparisons(per_base: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The comparisons (name, arms and selection alike) that every base defines, in the first base's order."""
    def key(comp):
        return (comp["name"], comp["a"], comp["b"], comp.get("split"), comp.get("domain"))

    first, *rest = per_base.values()
    common = set.intersection(*({key(c) for c in comps} for comps in per_base.values())) if rest else None
    return [dict(c) for c in first if common is None or key(c) in common]


def differences(values: Mapping[str, Mapping[str, pd.DataFrame]], resamples: int, confidence: float, seed: int,
                permutations: int) -> pd.DataFrame:
    """One row per (comparison, pair of bases that answered the same queries): the module docstring's
    statistics. ``values``: comparison -> base -> ``effect_values`` frame, bases in the run's order."""
    rows = []
    for comparison, by_base in values.items():
        for x, y in combinations(by_base, 2):
            if not by_base[x].index.equals(by_base[y].index) or by_base[x].empty:
                continue
            rows.append({"comparison": comparison, "base_x": x, "base_y": y,
                         **pair_difference(by_base[x], by_base[y], resamples, confidence, seed, permutations)})
    return pd.DataFrame(rows, columns=DIFFERENCE_COLUMNS)


def pair_difference(x: pd.DataFrame, y: pd.DataFrame, resamples: int, confidence: float, seed: int,
                    permutations: int) -> dict[str, Any]:
    """Ratio of ratios and difference of differences of two bases' a-vs-b effects on the same queries."""
    query_ids = x.index.tolist()
    n = len(query_ids)
    counts = resample_counts(n, resamples, query_set_rng(seed, query_ids, CROSSBASE_STREAM))  # (R, n)
    means = np.stack([x["a"], x["b"], y["a"], y["b"]]).astype(np.float64)                  # (4, n)
    resampled = means @ counts.T / n                                                         # (4, R)
    ratio_x, ratio_y = safe_ratio(resampled[0], resampled[1]), safe_ratio(resampled[2], resampled[3])
    boot_ror = safe_ratio(ratio_x, ratio_y)
    boot_dod = (resampled[0] - resampled[1]) - (resampled[2] - resampled[3])
    (ror_lo, dod_lo), (ror_hi, dod_hi) = percentile_interval(np.stack([boot_ror, boot_dod]), confidence)
    point = means.mean(axis=1)
    delta = (means[0] - means[1]) - (means[2] - means[3])
    p, exact = sign_flip_pvalues(delta[None, :], permutations,
                                 query_set_rng(seed, query_ids, CROSSBASE_SIGNFLIP_STREAM))
    rx, ry = float(safe_ratio(point[0], point[1])), float(safe_ratio(point[2], point[3]))
    return {"n": n, "ratio_x": rx, "ratio_y": ry, "ratio_of_ratios": float(safe_ratio(rx, ry)),
            "ror_lo": float(ror_lo), "ror_hi": float(ror_hi), "diff_x": float(point[0] - point[1]),
            "diff_y": float(point[2] - point[3]), "diff_of_diffs": float(delta.mean()), "dod_lo": float(dod_lo),
            "dod_hi": float(dod_hi), "p_signflip": float(p[0]), "perm_exact": bool(exact),
            "resamples": int(resamples), "confidence": float(confidence), "seed": int(seed),
            "permutations": int(permutations)}
