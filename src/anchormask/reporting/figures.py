"""The study's figures (saved through ``style.save``, as every figure of the project is).

* ``main_figure``: mean corpus_overlap per arm with percentile bootstrap CIs, one panel for
  the in-domain queries, one per held-out domain and one for the held-out queries pooled.
* ``sweep_figure``: anchor/random ratio of means against training steps (log x), one line
  per data size with its CI band; the report's figures (``report`` column of the sweep
  statistics, e.g. "1.97-2.19x at 100 steps") are marked at their point.
* ``ablation_figure``: full / vo / qk LoRA targets for anchor and random on the held-out
  queries pooled (means with CIs), the base arm as a reference line.

Per-arm intervals are single-arm percentile bootstraps of the arm's seed x query values (with
several training seeds both levels are resampled, as in the comparisons); every arm over the
same query set uses the same resampled queries (``bootstrap.query_set_rng``). Figures are drawn on
``matplotlib.figure.Figure`` objects (no pyplot state; PNG through Agg) inside ``style.RC``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from anchormask.fileio import InputError
from anchormask.reporting.arms import order_arms, sweep_pair
from anchormask.reporting.style import COLOURS, RC, save
from anchormask.stats import bootstrap, pairwise

TARGET_ORDER = ("full", "vo", "qk")
_STRATEGY_COLOURS = {"anchor": "#1f77b4", "random": "#ff7f0e"}
_REPORT_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:[-–]\s*(\d+(?:\.\d+)?))?\s*x")


def _ci(index: pairwise.PerQueryIndex, arm: str, column: str, value: str, resamples: int, confidence: float,
        seed: int) -> tuple[int, float, float, float]:
    """The arm's mean over the queries with ``column == value`` and its (two-level) percentile interval."""
    values = index.arm(f"figure {column}={value}", arm, column, value)
    mean, lo, hi = bootstrap.bootstrap_means(values.values[None], resamples, confidence,
                                             bootstrap.query_set_rng(seed, values.query_ids.tolist()))
    return len(values.query_ids), float(mean[0]), float(lo[0]), float(hi[0])


def arm_summary(generations_df: pd.DataFrame, *, arm_order: Sequence[str], resamples: int = 10_000,
                confidence: float = 0.95, seed: int) -> pd.DataFrame:
    """Rows (panel, domain, arm, n, mean, lo, hi) for the main figure's panels, in drawing order (arms in
    ``arm_order``, config ``arms``' names); ``seed`` is config ``statistics.seed``."""
    index = pairwise.PerQueryIndex(generations_df, "overlap")
    query_means = pairwise.per_query(generations_df)
    in_domain = sorted(query_means.loc[query_means["split"] == "in_domain", "domain"].unique())
    held_out = sorted(query_means.loc[query_means["split"] == "held_out", "domain"].unique())
    panels = [(f"in-domain: {d}", "domain", d) for d in in_domain] + [(f"held-out: {d}", "domain", d) for d in held_out]
    if held_out:
        panels.append(("held-out pooled", "split", "held_out"))
    if not panels:
        raise InputError("generations table has no rows to plot")
    rows = []
    for panel, column, value in panels:
        for arm in order_arms(query_means.loc[query_means[column] == value, "arm"].unique(), arm_order):
            n, mean, lo, hi = _ci(index, arm, column, value, resamples, confidence, seed)
            rows.append({"panel": panel, "arm": arm, "n": n, "mean": mean, "lo": lo, "hi": hi})
    return pd.DataFrame(rows, columns=["panel", "arm", "n", "mean", "lo", "hi"])


def _n_label(ns: Sequence[int]) -> str:
    lo, hi = min(ns), max(ns)
    return f"N = {lo}" if lo == hi else f"N = {lo}-{hi}"


def main_figure(generations_df: pd.DataFrame, pdf_path: str | os.PathLike[str], png_path: str | os.PathLike[str],
                *, arm_order: Sequence[str], resamples: int = 10_000, confidence: float = 0.95,
                seed: int) -> pd.DataFrame:
    """Grouped bars of mean corpus_overlap per arm with CIs, one panel per query set; returns the summary."""
    summary = arm_summary(generations_df, arm_order=arm_order, resamples=resamples, confidence=confidence, seed=seed)
    panels = list(dict.fromkeys(summary["panel"]))
    arms = order_arms(summary["arm"].unique(), arm_order)
    colours = {arm: COLOURS[i % len(COLOURS)] for i, arm in enumerate(arms)}
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    top = float(np.nanmax(np.r_[summary["hi"].to_numpy(dtype=float), summary["mean"].to_numpy(dtype=float)]))
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(3.4 * cols, 2.9 * rows + 0.6), layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
        for ax, panel in zip(axes.flat, panels):
            part = summary[summary["panel"] == panel].set_index("arm").reindex(arms).dropna(subset=["n"])
            x = np.arange(len(part))
            err = np.vstack([part["mean"] - part["lo"], part["hi"] - part["mean"]])
            ax.bar(x, part["mean"], yerr=err, capsize=2.5, color=[colours[a] for a in part.index],
                   edgecolor="black", linewidth=0.4, error_kw={"linewidth": 0.8})
            ax.set_xticks(x, part.index, rotation=45, ha="right")
            ax.set_title(f"{panel} ({_n_label(part['n'].astype(int).tolist())} queries)")
            ax.set_ylim(0, min(1.0, top * 1.15) if top > 0 else 1.0)
            ax.grid(axis="y", linewidth=0.3, alpha=0.6)
        for ax in axes.flat[len(panels):]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("mean corpus_overlap")
        for ax in axes[-1, :]:
            ax.set_xlabel("arm")
        fig.suptitle(f"Corpus overlap of the post-anchor text per arm "
                     f"({100 * confidence:g}% bootstrap CI, {resamples} resamples)")
        save(fig, pdf_path, png_path)
    return summary


def parse_report(text: Any) -> tuple[float, float] | None:
    """(low, high) of the first "1.97-2.19x" / "1.07x" figure in a report string; None if absent."""
    if text is None or text is pd.NA or (isinstance(text, float) and math.isnan(text)):
        return None
    m = _REPORT_RE.search(str(text))
    if not m:
        return None
    low = float(m.group(1))
    high = float(m.group(2)) if m.group(2) else low
    return (min(low, high), max(low, high))


def _finite(values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return np.where(np.isfinite(arr), arr, np.nan)


def sweep_figure(sweep_stats_df: pd.DataFrame, pdf_path: str | os.PathLike[str],
                 png_path: str | os.PathLike[str], *, strategies: Sequence[str]) -> None:
    """The ratio of the first of ``strategies`` (config ``sweep.strategies``) to each of the others vs
    training steps, one panel per other strategy, one line (and CI band) per data size, the report's
    figures marked on the first panel (``statistics.sweep_report`` is about the first pair)."""
    first, others = strategies[0], list(strategies[1:])
    pairs = [(other, sweep_pair(sweep_stats_df, strategies, other)) for other in others]
    empty = [other for other, df in pairs if df.empty]
    if empty:
        raise InputError(f"sweep statistics table has no {first} vs {', '.join(empty)} rows")
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(5.2 * len(pairs), 3.6), layout="constrained")
        axes = fig.subplots(1, len(pairs), sharey=True, squeeze=False)[0]
        for ax, (other, df) in zip(axes, pairs):
            _sweep_panel(ax, df.sort_values(["train_size", "train_steps"]), first, other, reports=ax is axes[0])
        save(fig, pdf_path, png_path)


def _sweep_panel(ax, df: pd.DataFrame, first: str, other: str, *, reports: bool) -> None:
    palette = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b")
    reported = False
    for i, size in enumerate(sorted(int(s) for s in df["train_size"].unique())):
        part = df[df["train_size"] == size]
        steps = part["train_steps"].to_numpy(dtype=float)
        colour = palette[i % len(palette)]
        ns = part["n"].astype(int).tolist()
        ax.fill_between(steps, _finite(part["ratio_lo"]), _finite(part["ratio_hi"]), color=colour, alpha=0.18,
                        linewidth=0)
        ax.plot(steps, _finite(part["ratio"]), marker="o", color=colour,
                label=f"{size} pairs ({_n_label(ns)} held-out queries)")
        for step, rep in zip(steps, part["report"] if reports else []):
            rng = parse_report(rep)
            if rng is None:
                continue
            offset = step * (1.06 if i % 2 else 0.94)
            ax.errorbar([offset], [(rng[0] + rng[1]) / 2], yerr=[[(rng[1] - rng[0]) / 2], [(rng[1] - rng[0]) / 2]],
                        fmt="D", markersize=4, capsize=3, color=colour, markerfacecolor="white",
                        label="report" if not reported else None)
            reported = True
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle="--")
    ax.set_xscale("log")
    all_steps = sorted(int(s) for s in df["train_steps"].unique())
    ax.set_xticks(all_steps, [str(s) for s in all_steps])
    ax.minorticks_off()
    ax.set_xlabel("training steps (log scale)")
    ax.set_ylabel(f"{first} / {other} mean corpus_overlap")
    conf = sorted(set(float(c) for c in df["confidence"])) if "confidence" in df else [0.95]
    ax.set_title(f"Sweep: {first}/{other} ratio, held-out pooled ({100 * conf[0]:g}% CI bands)")
    ax.grid(linewidth=0.3, alpha=0.6)
    ax.legend(loc="best", frameon=False)


def ablation_summary(generations_df: pd.DataFrame, resamples: int = 10_000, confidence: float = 0.95,
                     *, seed: int) -> pd.DataFrame:
    """Rows (strategy, targets, arm, n, mean, lo, hi) on the held-out queries pooled; base with targets None."""
    held = generations_df[generations_df["split"] == "held_out"]
    index = pairwise.PerQueryIndex(held, "overlap")
    arm_spec = held.groupby("arm", dropna=False)[["strategy", "targets"]].first()
    rows = []
    for strategy in ("anchor", "random"):
        for targets in TARGET_ORDER:
            arms = sorted(arm_spec[(arm_spec["strategy"] == strategy) & (arm_spec["targets"] == targets)].index)
            if len(arms) > 1:
                raise InputError(f"ablation: several arms with strategy {strategy!r} and targets {targets!r}: {arms}")
            if arms:
                n, mean, lo, hi = _ci(index, arms[0], "split", "held_out", resamples, confidence, seed)
                rows.append({"strategy": strategy, "targets": targets, "arm": arms[0], "n": n, "mean": mean,
                             "lo": lo, "hi": hi})
    if not rows:
        raise InputError("ablation: no anchor or random arms with targets full/vo/qk among held-out generations")
    base = sorted(arm_spec[arm_spec["strategy"].isna()].index)
    if base:
        n, mean, lo, hi = _ci(index, base[0], "split", "held_out", resamples, confidence, seed)
        rows.append({"strategy": None, "targets": None, "arm": base[0], "n": n, "mean": mean, "lo": lo, "hi": hi})
    return pd.DataFrame(rows, columns=["strategy", "targets", "arm", "n", "mean", "lo", "hi"])


def ablation_figure(generations_df: pd.DataFrame, pdf_path: str | os.PathLike[str],
                    png_path: str | os.PathLike[str], *, resamples: int = 10_000, confidence: float = 0.95,
                    seed: int) -> pd.DataFrame:
    """Grouped bars: LoRA targets on x, anchor and random side by side; base as a dashed line."""
    summary = ablation_summary(generations_df, resamples, confidence, seed=seed)
    lora = summary[summary["strategy"].notna()]
    base = summary[summary["strategy"].isna()]
    width = 0.38
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(4.8, 3.4), layout="constrained")
        ax = fig.subplots()
        for j, strategy in enumerate(("anchor", "random")):
            part = lora[lora["strategy"] == strategy]
            if part.empty:
                continue
            x = np.array([TARGET_ORDER.index(t) for t in part["targets"]]) + (j - 0.5) * width
            err = np.vstack([part["mean"] - part["lo"], part["hi"] - part["mean"]])
            ax.bar(x, part["mean"], width, yerr=err, capsize=3, color=_STRATEGY_COLOURS[strategy],
                   edgecolor="black", linewidth=0.4, label=strategy, error_kw={"linewidth": 0.8})
        if len(base):
            ax.axhline(float(base["mean"].iloc[0]), color="#7f7f7f", linestyle="--", linewidth=0.8,
                       label=f"{base['arm'].iloc[0]} (no adapter)")
        ax.set_xticks(range(len(TARGET_ORDER)), ["full (Q,K,V,O)", "vo (V,O)", "qk (Q,K)"])
        ax.set_xlabel("LoRA target modules")
        ax.set_ylabel("mean corpus_overlap")
        ax.set_title(f"Ablation on held-out queries ({_n_label(summary['n'].astype(int).tolist())}, "
                     f"{100 * confidence:g}% CI)")
        ax.set_ylim(0, min(1.0, float(np.nanmax(summary["hi"].to_numpy(dtype=float))) * 1.2 or 1.0))
        ax.grid(axis="y", linewidth=0.3, alpha=0.6)
        ax.legend(loc="best", frameon=False)
        save(fig, pdf_path, png_path)
    return summary
