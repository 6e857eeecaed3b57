"""The statistics job: paired comparisons and the sweep, from a table of scored generations.

Per-query values (``per_query``; with several training seeds, the seed x query grids of
``seed_grids``) are paired by query id (and seed index), bootstrapped (``bootstrap``) and tested
(``signflip``), with Holm's adjustment over the comparisons of one table.

Random streams: in ``run_comparisons`` / ``run_sweep`` comparisons over the same query set form
one batch (a joint bootstrap: all held-out comparisons see the same resampled queries); its
Generator is seeded from ``statistics.seed`` and the sorted query ids, so a comparison's
numbers do not change when other comparisons are added, removed or reordered.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from anchormask import schemas
from anchormask.fileio import InputError
from anchormask.measurement import tables
from anchormask.stats.bootstrap import paired_bootstrap_batch, query_set_rng, safe_ratio
from anchormask.stats.signflip import PERMUTATION_STREAM, holm, sign_flip_pvalues
from anchormask.study import comparison_selection

PERMUTATIONS = schemas.default(("statistics", "permutations"))  # the random sign patterns when N > 16
log = logging.getLogger(__name__)

RESULT_KEYS = ("n", "seeds", "mean_a", "mean_b", "ratio", "ratio_lo", "ratio_hi", "diff", "diff_lo", "diff_hi",
               "p_a_gt_b", "zero_b_resamples", "p_perm", "perm_exact")


def per_query(df: pd.DataFrame, value: str = "overlap") -> pd.DataFrame:
    """Per (arm, query_id): ``value`` averaged over training seeds; ``runs`` = generations averaged."""
    needed = {"arm", "query_id", "domain", "split", value}
    missing = needed - set(df.columns)
    if missing:
        raise InputError(f"generations table lacks columns {sorted(missing)}")
    grouped = df.groupby(["arm", "query_id"], sort=True, dropna=False)
    out = grouped.agg(**{value: (value, "mean")}, runs=(value, "size"),
                      domain=("domain", "first"), split=("split", "first"),
                      domains=("domain", "nunique"), splits=("split", "nunique")).reset_index()
    bad = out[(out["domains"] > 1) | (out["splits"] > 1)]
    if len(bad):
        row = bad.iloc[0]
        raise InputError(f"query {row['query_id']!r} of arm {row['arm']!r} appears under several "
                         "domains or splits; query ids must be unique across domains")
    return out.drop(columns=["domains", "splits"])


def seed_grids(df: pd.DataFrame, value: str) -> dict[str, tuple[list[int | None], np.ndarray]]:
    """Arm -> (its training seeds, ascending; its (S seeds x n queries) grid of ``value``, queries by id).

    A row without a training seed (the base arm) is one seed. Every seed of an arm must answer the
    same queries: the two-level bootstrap resamples a complete grid.
    """
    seed = df["train_seed"] if "train_seed" in df.columns else pd.Series(pd.NA, index=df.index, dtype="Int64")
    cells = df.assign(_seed=seed.astype("Int64").fillna(-1)).groupby(["arm", "_seed", "query_id"], sort=True)[value]
    sizes = cells.size()
    if (sizes > 1).any():
        arm, train_seed, query = sizes[sizes > 1].index[0]
        raise InputError(f"arm {arm!r}, training seed {train_seed}, query {query!r}: {int(sizes.max())} generations; "
                         "expected one per seed and query")
    grids = {}
    for arm, block in cells.first().unstack("query_id").groupby(level="arm", sort=True):
        block = block.dropna(axis=1, how="all")
        if block.isna().any().any():
            raise InputError(f"arm {arm!r}: its training seeds answered different queries; the two-level "
                             "bootstrap needs every seed on every query")
        seeds = [None if int(sd) == -1 else int(sd) for sd in block.index.get_level_values("_seed")]
        grids[arm] = (seeds, block.to_numpy(dtype=np.float64))
    return grids


@dataclass(frozen=True)
class ArmValues:
    """One arm's values over a selection: (S seeds, n queries), queries in id order."""

    query_ids: np.ndarray
    values: np.ndarray
    runs: np.ndarray


class PerQueryIndex:
    """The per-query table as numpy columns, so that each comparison selects its rows without pandas.

    Why: the statistics job pairs a dozen comparisons; one pandas filter per arm and comparison
    cost several times the bootstrap itself. ``per_query`` and ``seed_grids`` both sort by
    (arm, query_id), so an arm's grid columns line up with its per-query rows and a selection
    keeps query-id order.
    """

    def __init__(self, df: pd.DataFrame, value: str):
        query_means = per_query(df, value)
        self.columns = {c: query_means[c].to_numpy() for c in ("arm", "query_id", "split", "domain")}
        self.runs = query_means["runs"].to_numpy()
        self.seeds, self.grids = {}, {}
        for arm, (seeds, grid) in seed_grids(df, value).items():
            self.seeds[arm], self.grids[arm] = seeds, grid
        self.first_row = {arm: int(np.flatnonzero(self.columns["arm"] == arm)[0]) for arm in self.grids}

    def arm(self, name: str, arm: str, column: str, value: str) -> ArmValues:
        where = self.columns[column] == value
        rows = np.flatnonzero(where & (self.columns["arm"] == arm))
        if rows.size == 0:
            present = sorted(set(self.columns["arm"][where].tolist()))
            raise InputError(f"comparison {name!r}: arm {arm!r} has no generations with {column} = {value!r}; "
                             f"arms there: {', '.join(present) or '(none)'}")
        return ArmValues(self.columns["query_id"][rows], self.grids[arm][:, rows - self.first_row[arm]],
                         self.runs[rows])

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


def _seed_aligned(values: list[np.ndarray], names: list[Any]) -> np.ndarray:
    """Stack per-job (n,) or (S, n) values to (m, S, n); an arm with one seed (base) repeats for every seed."""
    grids = [np.atleast_2d(np.asarray(v, dtype=np.float64)) for v in values]
    seeds = max(g.shape[0] for g in grids)
    for g, name in zip(grids, names):
        if g.shape[0] not in (1, seeds):
            raise InputError(f"comparison {name!r}: {g.shape[0]} training seeds where the other arms of its query "
                             f"set have {seeds}; arms are paired by seed index")
    return np.stack([np.broadcast_to(g, (seeds, g.shape[1])) for g in grids])


def run_batches(jobs: list[dict[str, Any]], resamples: int, confidence: float, seed: int,
                permutations: int = PERMUTATIONS) -> list[dict]:
    """Result dicts (``RESULT_KEYS``) of many paired comparisons, in ``jobs`` order.

    ``jobs`` are dicts with ``query_ids`` and the aligned ``a_values``, ``b_values``: (n,) per-query
    values or (S, n) seed x query grids (other keys are ignored). Comparisons over the same query
    set form one ``paired_bootstrap_batch`` whose Generator comes from ``seed`` and the sorted query
    ids (``query_set_rng``), and one sign-flip batch with its own stream of that Generator's seed.
    """
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(tuple(job["query_ids"]), []).append(i)
    results: list[dict | None] = [None] * len(jobs)
    for qids, members in groups.items():
        names = [jobs[i].get("name", i) for i in members]
        grids = _seed_aligned([jobs[i]["a_values"] for i in members] + [jobs[i]["b_values"] for i in members],
                              names + names)
        a, b = np.split(grids, 2)
        out = paired_bootstrap_batch(a, b, resamples, confidence, query_set_rng(seed, qids))
        # The test's unit is the query: its difference averaged over the paired seeds.
        out["p_perm"], exact = sign_flip_pvalues((a - b).mean(axis=1), permutations,
                                                 query_set_rng(seed, qids, PERMUTATION_STREAM))
        out["perm_exact"] = np.full(len(members), exact)
        for row, i in enumerate(members):
            results[i] = {k: out[k][row].item() for k in RESULT_KEYS}
    return results  # type: ignore[return-value]


def _rows(jobs: list[dict[str, Any]], keys: Sequence[str], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Result rows of one table: the jobs' ``keys``, their statistics, Holm over the table, the settings."""
    results = run_batches(jobs, settings["resamples"], settings["confidence"], settings["seed"],
                          settings["permutations"])
    adjusted = holm([r["p_perm"] for r in results])
    rows = []
    for job, res, p_holm in zip(jobs, results, adjusted):
        rows.append({k: job[k] for k in keys} | res
                    | {"p_holm": float(p_holm), "family": len(jobs), "runs_a": job["runs_a"], "runs_b": job["runs_b"],
                       **settings, "report": job["report"]})
        log.info("%s: N=%d seeds=%d mean_a=%.4f mean_b=%.4f ratio=%.3f [%.3f, %.3f] diff=%+.4f P(a>b)=%.4f "
                 "p_perm=%.4g p_holm=%.4g", job[keys[0]], res["n"], res["seeds"], res["mean_a"], res["mean_b"],
                 res["ratio"], res["ratio_lo"], res["ratio_hi"], res["diff"], res["p_a_gt_b"], res["p_perm"], p_holm)
    return rows


def _settings(value: str, resamples: int, confidence: float, seed: int, permutations: int) -> dict[str, Any]:
    return {"metric": value, "resamples": int(resamples), "confidence": float(confidence), "seed": int(seed),
            "permutations": int(permutations)}


def run_comparisons(generations_df: pd.DataFrame, comparisons: Sequence[Mapping[str, Any]], resamples: int,
                    confidence: float, seed: int, permutations: int = PERMUTATIONS,
                    value: str = "overlap") -> pd.DataFrame:
    """One row per comparison (config ``statistics.comparisons`` order) of the per-generation column
    ``value``; Holm over these comparisons. See tables.COMPARISONS_SCHEMA."""
    index = PerQueryIndex(generations_df, value)
    names = [c.get("name") for c in comparisons]
    dupes = sorted({n for n in names if names.count(n) > 1}, key=str)
    if dupes:
        raise InputError(f"comparison names must be unique; repeated: {dupes}")
    jobs = []
    for comp in comparisons:
        name = comp.get("name")
        if not name or "a" not in comp or "b" not in comp:
            raise InputError(f"comparison {comp!r}: needs name, a and b")
        column, selected = comparison_selection(comp)
        va, vb = index.pair(name, comp["a"], comp["b"], column, selected)
        jobs.append({"name": name, "selector": f"{column}={selected}", "a": comp["a"], "b": comp["b"],
                     "query_ids": va.query_ids.tolist(), "a_values": va.values, "b_values": vb.values,
                     "runs_a": int(va.runs.max()), "runs_b": int(vb.runs.max()), "report": comp.get("report")})
    rows = _rows(jobs, ("name", "selector", "a", "b"), _settings(value, resamples, confidence, seed, permutations))
    return _frame(rows, COMPARISON_COLUMNS)


def covered(generations_df: pd.DataFrame, comparisons: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The comparisons whose selection (split or domain) has generations in the table."""
    def selects_any(comp: Mapping[str, Any]) -> bool:
        column, value = comparison_selection(comp)
        return bool((generations_df[column] == value).any())

    return [c for c in comparisons if selects_any(c)]


def per_seed(generations_df: pd.DataFrame, comparisons: Sequence[Mapping[str, Any]],
             value: str = "overlap") -> pd.DataFrame:
    """Each comparison's point values per training-seed index (no resampling): what the pooled value hides.

    One row per (comparison, seed index): ``seed_a``/``seed_b`` (None for the base arm), ``mean_a``,
    ``mean_b``, ``ratio``, ``diff`` over the comparison's queries, paired as the bootstrap pairs them.
    """
    index = PerQueryIndex(generations_df, value)
    rows = []
    for comp in comparisons:
        column, selected = comparison_selection(comp)
        va, vb = index.pair(comp["name"], comp["a"], comp["b"], column, selected)
        a, b = _seed_aligned([va.values, vb.values], [comp["name"]] * 2)
        seeds_a, seeds_b = (index.seeds[arm] * (len(a) // len(index.seeds[arm])) for arm in (comp["a"], comp["b"]))
        for i in range(len(a)):
            mean_a, mean_b = a[i].mean(), b[i].mean()
            rows.append({"name": comp["name"], "seed_a": seeds_a[i], "seed_b": seeds_b[i], "mean_a": mean_a,
                         "mean_b": mean_b, "ratio": safe_ratio(mean_a, mean_b), "diff": mean_a - mean_b})
    out = pd.DataFrame(rows, columns=["name", "seed_a", "seed_b", "mean_a", "mean_b", "ratio", "diff"])
    return out.astype({"seed_a": "Int64", "seed_b": "Int64"})


def run_sweep(sweep_df: pd.DataFrame, resamples: int, confidence: float, seed: int,
              report: Mapping[str, str] | None = None, *, strategies: Sequence[str],
              permutations: int = PERMUTATIONS, value: str = "overlap") -> pd.DataFrame:
    """The first of ``strategies`` (config ``sweep.strategies``) against each of the others at every
    (train_size, train_steps) of the sweep table, held-out queries pooled; rows by point, then in the
    order of ``strategies``.

    Arms are identified by their (strategy, train_size, train_steps) columns, so arm names
    are free. ``report`` maps "SIZExSTEPS" to the report's figure for that point, shown beside the
    first strategy against the second. Holm over every row.
    """
    if len(strategies) < 2:
        raise InputError(f"sweep.strategies {list(strategies)}: the sweep compares the first with the others; "
                         "give at least two")
    report = dict(report or {})
    held = sweep_df[sweep_df["split"] == "held_out"]
    if held.empty:
        raise InputError("sweep table has no held-out generations")
    points = sorted({(int(n), int(k)) for n, k in held[["train_size", "train_steps"]].itertuples(index=False)})
    index = PerQueryIndex(held, value)
    first, others = strategies[0], list(strategies[1:])
    jobs = []
    for size, steps in points:
        at = held[(held["train_size"] == size) & (held["train_steps"] == steps)]
        arms = {}
        for strategy in strategies:
            found = sorted(at.loc[at["strategy"] == strategy, "arm"].unique())
            if len(found) != 1:
                raise InputError(f"sweep point {size}x{steps}: expected one {strategy!r} arm, found "
                                 f"{found or 'none'}")
            arms[strategy] = found[0]
        point = f"{size}x{steps}"
        for other in others:
            name = point if other == others[0] else f"{point} {first} vs {other}"
            va, vb = index.pair(f"sweep {name}", arms[first], arms[other], "split", "held_out")
            jobs.append({"point": point, "name": name, "train_size": size, "train_steps": steps, "a": arms[first],
                         "b": arms[other], "query_ids": va.query_ids.tolist(), "a_values": va.values,
                         "b_values": vb.values, "runs_a": int(va.runs.max()), "runs_b": int(vb.runs.max()),
                         "report": report.get(point) if other == others[0] else None})
    unknown = sorted(set(report) - {j["point"] for j in jobs})
    if unknown:
        log.warning("sweep_report names points the sweep table does not have: %s", ", ".join(unknown))
    rows = _rows(jobs, ("point", "train_size", "train_steps", "a", "b"),
                 _settings(value, resamples, confidence, seed, permutations))
    return _frame(rows, SWEEP_COLUMNS)


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=columns)
    df["report"] = pd.Series([r["report"] for r in rows], index=df.index, dtype=object)  # None stays None
    return df


# The columns, in order, of the Parquet files these frames are written to (their types are there too).
COMPARISON_COLUMNS = tables.COMPARISONS_SCHEMA.names
SWEEP_COLUMNS = tables.SWEEP_SCHEMA.names
