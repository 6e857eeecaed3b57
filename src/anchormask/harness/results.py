"""The DAG's lm-eval stage (workflow/rules/lm_eval.smk), after the evaluations (``evaluation``): the table
of every arm against the base (with the harness's standard errors) and its figure.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pandas as pd
import pyarrow as pa

from anchormask import fileio
from anchormask.measurement import tables
from anchormask.reporting import style

log = logging.getLogger(__name__)
SCHEMA = tables.arrow_schema([
    ("task", pa.string(), False), ("metric", pa.string(), False), ("arm", pa.string(), False),
    ("train_seed", pa.int64(), True), ("value", pa.float64(), False), ("stderr", pa.float64(), True),
    ("base_value", pa.float64(), True), ("difference", pa.float64(), True), ("n", pa.int64(), True),
])


def scores(record: dict[str, Any], task: str) -> list[dict[str, Any]]:
    """(metric, value, stderr, n) of every metric lm-eval reports for the task (its filter in the name
    when it is not lm-eval's ``none``)."""
    found = record["results"][task]
    n = (record.get("n-samples", {}).get(task) or {}).get("effective")
    rows = []
    for key, value in sorted(found.items()):
        name, _, filt = key.partition(",")
        if not filt or name.endswith("_stderr") or not isinstance(value, (int, float)):
            continue
        stderr = found.get(f"{name}_stderr,{filt}")
        rows.append({"metric": name if filt == "none" else f"{name} ({filt})", "value": float(value),
                     "stderr": float(stderr) if isinstance(stderr, (int, float)) else None, "n": n})
    return rows


def table(runs: list[dict[str, Any]], paths: list[str]) -> pd.DataFrame:
    """One row per (task, metric, arm, training seed), with the base's value (the arm without an adapter)
    and the difference to it."""
    rows = [{"task": run["task"], "arm": run["arm"], "train_seed": run["train_seed"], **score}
            for run, path in zip(runs, paths) for score in scores(fileio.read_json(path), run["task"])]
    df = pd.DataFrame(rows, columns=["task", "metric", "arm", "train_seed", "value", "stderr", "n"])
    base = df[df["train_seed"].isna()].groupby(["task", "metric"])["value"].first()  # the arm with no adapter
    df["base_value"] = [base.get((t, m)) for t, m in zip(df["task"], df["metric"])]
    df["difference"] = df["value"] - df["base_value"].astype(float)
    df["train_seed"] = df["train_seed"].astype("Int64")
    df["n"] = df["n"].astype("Int64")
    return df


def markdown(df: pd.DataFrame) -> str:
    """Per task and metric: each arm (and seed) with the harness's stderr, against the base."""
    lines = ["# lm-evaluation-harness: each arm against the base", "",
             "Values ± lm-eval's standard error; Δ: the arm minus the base arm (`anchormask` model, "
             "`results/lm_eval/`).", ""]
    for (task, metric), part in df.groupby(["task", "metric"], sort=False):
        lines += [f"## {task}: {metric}", "", "| arm | training seed | value | Δ vs base |", "|---|---:|---:|---:|"]
        for row in part.itertuples():
            seed = "" if pd.isna(row.train_seed) else str(row.train_seed)
            err = "" if row.stderr is None or pd.isna(row.stderr) else f" ± {row.stderr:.3f}"
            diff = "" if pd.isna(row.difference) else f"{row.difference:+.3f}"
            lines.append(f"| {row.arm} | {seed} | {row.value:.3f}{err} | {diff} |")
        lines.append("")
    return "\n".join(lines)


def write_table(runs: list[dict[str, Any]], paths: list[str], md: str, parquet: str) -> pd.DataFrame:
    df = table(runs, paths)
    tables.write_parquet(df, parquet, SCHEMA, metadata={"runs": runs})
    fileio.write_text(md, markdown(df))
    return df


def figure(df: pd.DataFrame, pdf: str | os.PathLike[str], png: str | os.PathLike[str]) -> None:
    """One panel per (task, metric): each arm's mean over its seeds with the harness's stderr, the base
    as a dashed line."""
    from matplotlib.figure import Figure


    panels = list(df.groupby(["task", "metric"], sort=False))
    fig = Figure(figsize=(4.2 * max(1, len(panels)), 3.2))
    for i, ((task, metric), part) in enumerate(panels):
        ax = fig.add_subplot(1, max(1, len(panels)), i + 1)
        means = part.groupby("arm", sort=False).agg(value=("value", "mean"), stderr=("stderr", "mean"))
        ax.bar(range(len(means)), means["value"], yerr=means["stderr"].fillna(0), color=style.COLOURS[1],
               capsize=3)
        if part["base_value"].notna().any():
            ax.axhline(float(part["base_value"].dropna().iloc[0]), color=style.COLOURS[0], linestyle="--",
                       linewidth=1)
        ax.set_xticks(range(len(means)), list(means.index), rotation=45, ha="right")
        ax.set_title(f"{task}\n{metric}")
    fig.tight_layout()
    style.save(fig, pdf, png)
