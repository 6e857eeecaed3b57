"""3. Bootstrap: anchormask.stats.pairwise (all headline comparisons at once) against scipy.stats.bootstrap
called once per comparison, on the same synthetic per-query data.

The data have the study's shape: the configured arms, 63 queries (in-domain and four held-out
domains, ids and sizes as data/queries holds them), one corpus_overlap value per (arm, query),
correlated across arms through a per-query effect, with some exact zeros (empty
continuations). The project side is ``pairwise.run_comparisons`` on the generations table
(what the statistics job runs: per-query values, pairing, one joint bootstrap per query set),
and, separately, its numeric core ``paired_bootstrap_batch`` on the pre-paired arrays scipy
gets. scipy computes the ratio and the difference of means in one vectorised call per
comparison (``paired=True, vectorized=True, method='percentile'``); P(a>b) comes from its
bootstrap distribution. Each side runs three times, alternating; medians are compared.

CIs must agree within Monte-Carlo error: for a percentile end point q_p estimated from R
resamples, se(q_p) ~ sqrt(p (1 - p) / R) / f(q_p), with the density f estimated from scipy's
bootstrap distribution as 2h / (q_{p+h} - q_{p-h}); two independent estimates differ by
sqrt(2) se, and the check allows 4 of those.
"""

from __future__ import annotations

import inspect
import statistics as stats_
import time
from typing import Any

import numpy as np
import pandas as pd

from bench import common
from bench.common import Line, say

ARM_MEANS = {"base": 0.10, "anchor": 0.34, "random": 0.21, "reverse": 0.18, "anchor-vo": 0.42, "anchor-qk": 0.14,
             "random-vo": 0.20, "random-qk": 0.19}
TOLERANCE_SIGMAS = 4.0
# Targets that hold side by side in one run, whatever the machine's speed: a per-resample loop (scipy's
# own draws, one resample at a time) is 1x and scipy's vectorised call once per comparison ~15x of it, so
# >= 25x needs the joint design. Its own index draws are reported beside it, with no target: run_comparisons
# also pairs the arms (pandas) and runs the sign-flip tests, work the draws do not measure, so a ratio to
# them does not separate a fast design from a slow one.
LOOP_TARGET = 25.0


def synthetic_generations(cfg: dict[str, Any], seed: int = 7) -> pd.DataFrame:
    """One row per (arm, query): arm, query_id, domain, split, overlap (the statistics job's input shape)."""
    from anchormask import data, study

    rng = np.random.default_rng(seed)
    rows = []
    for domain in study.domains(cfg):
        split = study.split_of(cfg, domain)
        ids = [q["id"] for q in data.load_queries(common.repo_path(str(data.queries_path(cfg, domain))))]
        effect = rng.normal(0.0, 0.08, len(ids))
        for arm in cfg["arms"]:
            mean = ARM_MEANS.get(arm, 0.2)
            values = np.clip(mean + effect + rng.normal(0.0, 0.1, len(ids)), 0.0, 1.0)
            values[rng.random(len(ids)) < 0.08] = 0.0
            rows += [{"arm": arm, "query_id": q, "domain": domain, "split": split, "overlap": float(v)}
                     for q, v in zip(ids, values)]
    return pd.DataFrame(rows)


def paired_arrays(df: pd.DataFrame, comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each comparison's query ids and aligned a, b values (as run_comparisons pairs them: by query id)."""
    out = []
    for comp in comparisons:
        column, value = ("split", comp["split"]) if "split" in comp else ("domain", comp["domain"])
        sel = df[df[column] == value]
        wide = sel.pivot_table(index="query_id", columns="arm", values="overlap", aggfunc="mean").sort_index()
        out.append({"name": comp["name"], "query_ids": list(wide.index), "a": wide[comp["a"]].to_numpy(),
                    "b": wide[comp["b"]].to_numpy()})
    return out


def core_batches(pairs: list[dict[str, Any]], resamples: int, confidence: float, seed: int) -> list[dict[str, float]]:
    """The statistics job's core on pre-paired arrays: one paired_bootstrap_batch per query set."""
    from anchormask.stats import pairwise

    jobs = [{"query_ids": p["query_ids"], "a_values": p["a"], "b_values": p["b"]} for p in pairs]
    return pairwise.run_batches(jobs, resamples, confidence, seed)


def _ratio_and_diff(a, b, axis=-1):
    ma, mb = np.mean(a, axis=axis), np.mean(b, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.stack([ma / mb, ma - mb])


def scipy_one(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float, rng: np.random.Generator):
    from scipy import stats

    seed_kw = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
    res = stats.bootstrap((a, b), _ratio_and_diff, paired=True, vectorized=True, method="percentile",
                          n_resamples=resamples, confidence_level=confidence, **{seed_kw: rng})
    dist = res.bootstrap_distribution  # (2, R): ratio, diff
    return {"ratio_lo": float(res.confidence_interval.low[0]), "ratio_hi": float(res.confidence_interval.high[0]),
            "diff_lo": float(res.confidence_interval.low[1]), "diff_hi": float(res.confidence_interval.high[1]),
            "p_a_gt_b": float((dist[1] > 0).mean()), "dist": dist}


def loop_one(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float, rng: np.random.Generator):
    """The textbook paired percentile bootstrap, one resample at a time: what the project must beat by far."""
    n = len(a)
    dist = np.empty((2, resamples))
    for r in range(resamples):
        idx = rng.integers(0, n, n)
        ma, mb = a[idx].mean(), b[idx].mean()
        dist[0, r] = ma / mb if mb else np.inf
        dist[1, r] = ma - mb
    alpha = (1 - confidence) / 2
    (r_lo, r_hi), (d_lo, d_hi) = np.quantile(dist[0], [alpha, 1 - alpha]), np.quantile(dist[1], [alpha, 1 - alpha])
    return {"ratio_lo": float(r_lo), "ratio_hi": float(r_hi), "diff_lo": float(d_lo), "diff_hi": float(d_hi),
            "p_a_gt_b": float((dist[1] > 0).mean())}


def loop_all(pairs, resamples: int, confidence: float, seed: int) -> list[dict[str, Any]]:
    return [loop_one(p["a"], p["b"], resamples, confidence, np.random.default_rng([seed, i]))
            for i, p in enumerate(pairs)]


def scipy_all(pairs, resamples: int, confidence: float, seed: int) -> list[dict[str, Any]]:
    return [scipy_one(p["a"], p["b"], resamples, confidence, np.random.default_rng([seed, i]))
            for i, p in enumerate(pairs)]


def percentile_se(dist: np.ndarray, p: float, resamples: int, h: float = 0.01) -> float:
    """Monte-Carlo standard error of the p-quantile of a bootstrap distribution of ``resamples`` draws."""
    finite = dist[np.isfinite(dist)]
    lo, hi = np.quantile(finite, [max(p - h, 0.0), min(p + h, 1.0)])
    width = (min(p + h, 1.0) - max(p - h, 0.0))
    return float(np.sqrt(p * (1 - p) / resamples) * (hi - lo) / width)


def agreement(project: dict[str, float], scipy_res: dict[str, Any], resamples: int,
              confidence: float) -> dict[str, Any]:
    """|project - scipy| in units of the Monte-Carlo s.e. of their difference, per CI end and P(a>b)."""
    alpha = (1 - confidence) / 2
    out: dict[str, Any] = {}
    for key, row, p in (("ratio_lo", 0, alpha), ("ratio_hi", 0, 1 - alpha), ("diff_lo", 1, alpha),
                        ("diff_hi", 1, 1 - alpha)):
        se = np.sqrt(2) * percentile_se(scipy_res["dist"][row], p, resamples)
        delta = project[key] - scipy_res[key]
        out[key] = {"project": project[key], "scipy": scipy_res[key], "delta": delta, "se_of_delta": se,
                    "z": abs(delta) / se if se > 0 else (0.0 if delta == 0 else float("inf"))}
    q = scipy_res["p_a_gt_b"]
    se = np.sqrt(2 * max(q * (1 - q), 1.0 / resamples) / resamples)
    delta = project["p_a_gt_b"] - q
    out["p_a_gt_b"] = {"project": project["p_a_gt_b"], "scipy": q, "delta": delta, "se_of_delta": se,
                       "z": abs(delta) / se}
    out["max_z"] = max(v["z"] for v in out.values() if isinstance(v, dict))
    return out


def timed_runs(df, comparisons, pairs, resamples: int, confidence: float, seed: int, repeats: int):
    """(times per side, the last results of each side): the project's run_comparisons, its core, scipy and
    the per-resample loop, interleaved repeat by repeat after one warm-up of each (the loop has none)."""
    from anchormask.stats import pairwise

    results = (pairwise.run_comparisons(df, comparisons, resamples, confidence, seed),
               core_batches(pairs, resamples, confidence, seed), scipy_all(pairs, resamples, confidence, seed), None)
    times: dict[str, list[float]] = {"run_comparisons": [], "core": [], "scipy": [], "loop": []}
    for _ in range(repeats):
        t = time.perf_counter()
        project_df = pairwise.run_comparisons(df, comparisons, resamples, confidence, seed)
        times["run_comparisons"].append(time.perf_counter() - t)
        t = time.perf_counter()
        core = core_batches(pairs, resamples, confidence, seed)
        times["core"].append(time.perf_counter() - t)
        t = time.perf_counter()
        scipy_res = scipy_all(pairs, resamples, confidence, seed)
        times["scipy"].append(time.perf_counter() - t)
        t = time.perf_counter()
        loop_res = loop_all(pairs, resamples, confidence, seed)
        times["loop"].append(time.perf_counter() - t)
        results = (project_df, core, scipy_res, loop_res)
    return times, results


def index_draw_seconds(pairs, resamples: int, repeats: int) -> float:
    """Median time of the part no implementation of this design avoids: one (R, n) index draw per query set."""
    draw_rng = np.random.default_rng(0)
    sizes = [len(q) for q in {tuple(p["query_ids"]) for p in pairs}]
    draws = []
    for _ in range(repeats):
        t = time.perf_counter()
        for size in sizes:
            draw_rng.integers(0, size, size=(resamples, size))
        draws.append(time.perf_counter() - t)
    return stats_.median(draws)


def checked_agreement(project_df, pairs, core, scipy_res, resamples: int, confidence: float) -> list[dict]:
    """Per comparison: the project's two paths must agree exactly; its agreement with scipy in s.e."""
    rows = project_df.set_index("name")
    per_comparison = []
    for p, c, s in zip(pairs, core, scipy_res):
        full = rows.loc[p["name"]]
        assert all(np.isclose(full[k], c[k], rtol=0, atol=0) for k in ("ratio_lo", "ratio_hi", "diff_lo", "diff_hi")), \
            f"{p['name']}: run_comparisons and paired_bootstrap_batch disagree"
        point = _ratio_and_diff(p["a"], p["b"])
        assert np.isclose(point[0], c["ratio"], rtol=1e-12) and np.isclose(point[1], c["diff"], rtol=1e-12, atol=1e-15)
        agree = agreement(c, s, resamples, confidence)
        per_comparison.append({"name": p["name"], "n": len(p["query_ids"]), "ratio": c["ratio"], "diff": c["diff"],
                               **{k: v for k, v in agree.items()}})
    return per_comparison


def bootstrap_lines(med: dict[str, float], worst_z: float, loop_z: float) -> list[Line]:
    ms = {k: f"{1e3 * v:.1f} ms" for k, v in med.items()}
    return [Line("bootstrap.loop_speedup", med["loop"] / med["run_comparisons"], "x", LOOP_TARGET,
                 note=f"run_comparisons {ms['run_comparisons']} vs a per-resample loop {ms['loop']} (CIs within "
                      f"{loop_z:.2f} s.e. of scipy's)"),
            Line("bootstrap.draw_multiple", med["run_comparisons"] / med["index_draws_only"], "x", None,
                 note=f"run_comparisons over its query sets' index draws alone ({ms['index_draws_only']})"),
            Line("bootstrap.scipy_speedup", med["scipy"] / med["run_comparisons"], "x", None,
                 note=f"vs scipy.stats.bootstrap vectorised, once per comparison, {ms['scipy']}; core "
                      f"{ms['core']}; CIs within {worst_z:.2f} s.e.")]


def run(threads: int | None = None, repeats: int = 3) -> tuple[dict, list[Line]]:
    cfg = common.load_config()
    st = cfg["statistics"]
    resamples, confidence, seed = int(st["resamples"]), float(st["confidence"]), int(st["seed"])
    from anchormask.settings import config as study_config

    comparisons = study_config.comparisons(cfg)
    df = synthetic_generations(cfg)
    pairs = paired_arrays(df, comparisons)
    n_queries = df["query_id"].nunique()
    sizes = {tuple(p["query_ids"]) for p in pairs}
    times, (project_df, core, scipy_res, loop_res) = timed_runs(df, comparisons, pairs, resamples, confidence, seed,
                                                                repeats)
    med = {k: stats_.median(v) for k, v in times.items()}
    med["index_draws_only"] = index_draw_seconds(pairs, resamples, repeats)
    per_comparison = checked_agreement(project_df, pairs, core, scipy_res, resamples, confidence)
    worst = max(per_comparison, key=lambda r: r["max_z"])
    loop_z = max(agreement(lr, sr, resamples, confidence)["max_z"] for lr, sr in zip(loop_res, scipy_res))
    speedup = med["scipy"] / med["run_comparisons"]
    core_speedup = med["scipy"] / med["core"]
    say(f"bootstrap: {len(comparisons)} comparisons, {n_queries} queries, {resamples} resamples: run_comparisons "
        f"{1e3 * med['run_comparisons']:.1f} ms, its core {1e3 * med['core']:.1f} ms, "
        f"scipy {1e3 * med['scipy']:.1f} ms "
        f"({1e3 * med['scipy'] / len(comparisons):.1f} ms per call); the {len(sizes)} query sets' index draws alone "
        f"{1e3 * med['index_draws_only']:.1f} ms (a bound of {med['scipy'] / med['index_draws_only']:.0f}x)")
    say(f"bootstrap: CIs and P(a>b) agree within {TOLERANCE_SIGMAS:g} Monte-Carlo s.e.: "
        f"worst {worst['max_z']:.2f} s.e. "
        f"({worst['name']})")
    payload = {
        "benchmark": "bootstrap",
        "description": "anchormask.stats.pairwise.run_comparisons (all headline comparisons, joint bootstrap per "
                       "query set) vs "
                       "scipy.stats.bootstrap(paired=True, vectorized=True, method='percentile') once per comparison",
        "resamples": resamples, "confidence": confidence, "queries": n_queries, "comparisons": len(comparisons),
        "query_sets": len({tuple(p["query_ids"]) for p in pairs}),
        "seconds": {k: [round(x, 5) for x in v] for k, v in times.items()},
        "median_seconds": {k: round(v, 5) for k, v in med.items()},
        "speedup": round(speedup, 3), "core_speedup": round(core_speedup, 3),
        "targets": {"loop_speedup": LOOP_TARGET},
        "loop_speedup": round(med["loop"] / med["run_comparisons"], 2), "loop_agreement_sigmas": loop_z,
        "speedup_bound_from_index_draws": round(med["scipy"] / med["index_draws_only"], 2),
        "tolerance_sigmas": TOLERANCE_SIGMAS, "worst_agreement_sigmas": worst["max_z"],
        "per_comparison": per_comparison,
    }
    lines = bootstrap_lines(med, worst["max_z"], loop_z)
    if worst["max_z"] > TOLERANCE_SIGMAS:
        for line in lines:
            say(line.format())
        raise AssertionError(f"bootstrap CIs disagree with scipy beyond Monte-Carlo error: {worst['name']} at "
                             f"{worst['max_z']:.2f} s.e.")
    return payload, lines
