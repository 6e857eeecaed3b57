"""Training curves: every adapter's loss and mask ratio per step, from its ``train_log.tsv``, one panel per
arm (the sweep: one panel per strategy), saved through ``style.save``.

A run that continued a shorter one logs every step from the first (training.resume), so a sweep panel
draws each (size, seed) run once, from its longest adapter. Batches are small and the mask is drawn anew
each step, so the raw loss is noise around its trend: each line is a centred moving mean over a twentieth
of the run, the raw values faint behind it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from anchormask.fileio import InputError
from anchormask.model import adapters
from anchormask.reporting.style import COLOURS, RC, save

LOG_FILE = "train_log.tsv"
COLUMNS = ("step", "mask_ratio", "loss")
PANEL_COLUMNS = 3


def read_log(adapter: str | os.PathLike[str]) -> pd.DataFrame:
    """An adapter's per-step log (step, mask_ratio, loss, ...), checked for the columns the figure draws."""
    path = Path(adapter) / LOG_FILE
    try:
        log = pd.read_csv(path, sep="\t")
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise InputError(f"{path}: not a readable training log ({err}); retrain the adapter: "
                         f"{adapters.rebuild_command(adapter)}") from None
    missing = [c for c in COLUMNS if c not in log.columns]
    if missing or log.empty:
        raise InputError(f"{path}: the training log lacks {', '.join(missing) or 'rows'}; it is written by the "
                         f"adapter's training job: retrain it: {adapters.rebuild_command(adapter)}")
    return log


def longest_runs(curves: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of the entries that share a panel and a run (``run``), the one with the most steps."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for curve in curves:
        key = (curve["panel"], curve["run"])
        if key not in best or curve["steps"] > best[key]["steps"]:
            best[key] = curve
    return [c for c in curves if best[(c["panel"], c["run"])] is c]


def smooth(values: pd.Series, steps: int) -> np.ndarray:
    window = max(1, round(steps / 20))
    return values.rolling(window, center=True, min_periods=1).mean().to_numpy()


def _panel(ax, curves: Sequence[dict[str, Any]], logs: dict[str, pd.DataFrame]) -> None:
    ratio_ax = ax.twinx()
    for i, curve in enumerate(curves):
        log, colour = logs[curve["path"]], COLOURS[(i + 1) % len(COLOURS)]
        ax.plot(log["step"], log["loss"], color=colour, alpha=0.15, linewidth=0.6)
        ax.plot(log["step"], smooth(log["loss"], len(log)), color=colour, linewidth=1.4, label=curve["label"])
        ratio_ax.plot(log["step"], smooth(log["mask_ratio"], len(log)), color=colour, linewidth=0.8,
                      linestyle=":", alpha=0.8)
    ax.set_title(curves[0]["panel"])
    ax.set_xlabel("step")
    ax.set_ylabel("loss (line: moving mean)")
    ax.yaxis.set_tick_params(labelleft=True)
    ratio_ax.set_ylabel("mask ratio (dotted)")
    ratio_ax.set_ylim(0, 1)
    ax.legend(fontsize=7, loc="upper right", frameon=False)


def curves_figure(drawn: Sequence[dict[str, Any]], logs: dict[str, pd.DataFrame]) -> Figure:
    """The figure of the ``drawn`` lines (``longest_runs``), ``logs`` by adapter path: a panel per panel name,
    in the order the names first appear."""
    panels = list(dict.fromkeys(c["panel"] for c in drawn))
    rows, columns = math.ceil(len(panels) / PANEL_COLUMNS), min(PANEL_COLUMNS, len(panels))
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(4.2 * columns, 3.0 * rows), layout="constrained")
        # one loss scale for every panel, so that arms compare at a glance
        axes = fig.subplots(rows, columns, squeeze=False, sharey=True).ravel()
        for ax, panel in zip(axes, panels):
            _panel(ax, [c for c in drawn if c["panel"] == panel], logs)
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        fig.suptitle("Training: loss and mask ratio per step, one line per adapter")
    return fig


def training_figure(curves: Sequence[dict[str, Any]], pdf_path: str | os.PathLike[str],
                    png_path: str | os.PathLike[str]) -> None:
    """``curves``: one entry per adapter, {panel, label, run, steps, path}, in the order to draw them."""
    drawn = longest_runs(curves)
    if not drawn:
        raise InputError("training curves: the study trains no adapter (every arm is the base); "
                         "nothing to draw")
    save(curves_figure(drawn, {c["path"]: read_log(c["path"]) for c in drawn}), pdf_path, png_path)
