"""The probes' figures: attention heatmaps, LoRA weight allocation, mask-count robustness.

Drawn from the probes' tables (``probes.attention``, ``probes.lora``, ``probes.maskcount``) and
saved like the study's figures (``style.save``: the same table gives the same bytes).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from anchormask.model.families import KINDS
from anchormask.probes.lora import lora_share_table
from anchormask.reporting.arms import base_arm, order_arms
from anchormask.reporting.style import COLOURS, RC, save


def attention_figure(df: pd.DataFrame, pdf_path, png_path, *, arm_order: Sequence[str]) -> None:
    """Layer x head heatmaps: per target a row of absolute masses per arm and a row of arm minus base."""
    if df.empty:
        _unavailable_figure(df, pdf_path, png_path)
        return
    arms = order_arms(df["arm"].unique(), arm_order)
    strategies = df.groupby("arm")["strategy"].first().to_dict()
    base = base_arm(arms, strategies)
    layers, heads = int(df["layer"].max()) + 1, int(df["head"].max()) + 1
    spans = list(dict.fromkeys(df["target"]))  # the probe's ATTENDED_SPANS, in its table's order
    grid: dict[tuple[str | None, str], np.ndarray] = {(a, t): _matrix(df, a, t, layers, heads)
                                                      for a in arms for t in spans}
    others = [a for a in arms if a != base]
    row_specs = []
    for target in spans:
        row_specs.append((target, False))
        if base is not None and others:
            row_specs.append((target, True))
    annotate = layers * heads <= 64
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(1.2 + 1.75 * len(arms), 0.6 + 1.9 * len(row_specs)), layout="constrained")
        axes = fig.subplots(len(row_specs), len(arms), squeeze=False)
        for r, (target, diff) in enumerate(row_specs):
            mats = {a: grid[(a, target)] - grid[(base, target)] if diff else grid[(a, target)]
                    for a in (others if diff else arms)}
            top = max(float(np.nanmax(np.abs(m))) for m in mats.values()) or 1e-12
            norm = dict(vmin=-top, vmax=top, cmap="RdBu_r") if diff else dict(vmin=0.0, vmax=top, cmap="viridis")
            image = None
            for c, arm in enumerate(arms):
                ax = axes[r, c]
                if arm not in mats:
                    ax.set_visible(False)
                    continue
                m = mats[arm]
                image = ax.imshow(m, aspect="auto", interpolation="nearest", **norm)
                if annotate:
                    for (i, j), v in np.ndenumerate(m):
                        shade = abs(v) / top if diff else v / top
                        dark = shade > 0.6
                        colour = ("white" if dark else "black") if diff else ("black" if dark else "white")
                        ax.text(j, i, f"{v:+.3f}" if diff else f"{v:.2f}", ha="center", va="center",
                                fontsize=5.5 if diff else 6, color=colour)
                ax.set_xticks(range(heads))
                ax.set_yticks(range(layers))
                ax.set_title(f"{arm} − {base}" if diff else arm, fontsize=8)
                if c == 0 or (diff and c == 1 and arms[0] == base):
                    ax.set_ylabel(f"{target}{' Δ' if diff else ''}\nlayer")
                if r == len(row_specs) - 1:
                    ax.set_xlabel("head")
            if image is not None:
                fig.colorbar(image, ax=list(axes[r, :]), shrink=0.85, pad=0.01,
                             label="Δ mass" if diff else "mass")
        fig.suptitle("Attention mass from generated-answer positions onto the question prefix and the locked "
                     "anchor (mean over answer positions, steps, queries)")
        save(fig, pdf_path, png_path)


def _unavailable_figure(df: pd.DataFrame, pdf_path, png_path) -> None:
    """A figure that says why there is no heatmap (the model exposes no attention probabilities)."""
    reasons = (df.attrs.get("anchormask") or {}).get("not_available") or {"all arms": "no attention rows"}
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(7, 1.5 + 0.4 * len(reasons)), layout="constrained")
        fig.text(0.02, 0.5, "Attention probe not available for this model:\n" + "\n".join(
            f"{arm}: {why}" for arm, why in reasons.items()), va="center", fontsize=7, wrap=True)
        save(fig, pdf_path, png_path)


def _matrix(df: pd.DataFrame, arm: str, target: str, layers: int, heads: int) -> np.ndarray:
    part = df[(df["arm"] == arm) & (df["target"] == target)]
    m = np.full((layers, heads), np.nan)
    m[part["layer"].to_numpy(int), part["head"].to_numpy(int)] = part["mass"].to_numpy(float)
    return m


_KIND_COLOURS = {"q": "#1f77b4", "k": "#ff7f0e", "v": "#2ca02c", "o": "#d62728"}


def lora_figure(layers_df: pd.DataFrame, pdf_path, png_path, *, arm_order: Sequence[str]) -> None:
    """(a) share of ||ΔW||² per kind, per arm; (b) ||ΔW||_F per kind, per arm; (c) per layer, full arms."""
    share = lora_share_table(layers_df)
    arms = order_arms(share["arm"].unique(), arm_order)
    x = np.arange(len(arms))
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(13.0, 3.8), layout="constrained")
        ax_share, ax_norm, ax_layer = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.1, 1.1, 1.0]})
        bottom = np.zeros(len(arms))
        width = 0.8 / len(KINDS)
        for j, kind in enumerate(KINDS):
            part = share[share["kind"] == kind].set_index("arm").reindex(arms)
            vals = part["share"].fillna(0.0).to_numpy(float)
            ax_share.bar(x, vals, 0.7, bottom=bottom, color=_KIND_COLOURS[kind], edgecolor="black", linewidth=0.3,
                         label=kind.upper())
            bottom += vals
            ax_norm.bar(x + (j - 1.5) * width, part["fro_norm"].fillna(0.0).to_numpy(float), width,
                        color=_KIND_COLOURS[kind], edgecolor="black", linewidth=0.3, label=kind.upper())
        for ax in (ax_share, ax_norm):
            ax.set_xticks(x, arms, rotation=45, ha="right")
            ax.grid(axis="y", linewidth=0.3, alpha=0.6)
        ax_share.set_ylim(0, 1)
        ax_share.set_ylabel("share of Σ‖ΔW‖²_F")
        ax_share.set_title("(a) where the update goes")
        ax_share.legend(loc="upper right", frameon=False, fontsize=7, ncols=4)
        ax_norm.set_ylabel("‖ΔW‖_F over the kind's layers")
        ax_norm.set_title("(b) update size per projection kind")
        styles = ("-", "--", ":", "-.")
        full = [a for a in arms if (share.loc[share["arm"] == a, "targets"] == "full").any()]
        for i, arm in enumerate(full):
            part = layers_df[layers_df["arm"] == arm]
            for kind in KINDS:
                sel = part[part["kind"] == kind]
                if sel.empty:
                    continue
                by_layer = (sel.assign(sq=sel["fro_norm"] ** 2).groupby("layer")["sq"].sum()
                            / max(1, sel["adapter_id"].nunique())) ** 0.5
                ax_layer.plot(by_layer.index, by_layer.to_numpy(), styles[i % len(styles)], marker="o", markersize=3,
                              color=_KIND_COLOURS[kind], label=f"{arm} {kind.upper()}")
        ax_layer.set_xticks(sorted(int(v) for v in layers_df["layer"].unique()))
        ax_layer.set_xlabel("layer")
        ax_layer.set_ylabel("‖ΔW‖_F")
        ax_layer.set_title("(c) per layer, full-target arms (line style = arm)")
        ax_layer.grid(linewidth=0.3, alpha=0.6)
        if full:
            ax_layer.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=6)
        fig.suptitle("LoRA weight allocation: ‖(α/r)·B A‖_F per projection kind and layer")
        save(fig, pdf_path, png_path)


def maskcount_figure(summary: pd.DataFrame, pdf_path, png_path, *, arm_order: Sequence[str]) -> None:
    """Mean corpus_overlap against k, one line (and CI band) per arm; held-out and in-domain panels."""
    splits = [s for s in ("held_out", "in_domain") if (summary["split"] == s).any()] or ["all"]
    top = max(0.05, float(summary["hi"].max()) * 1.15) if len(summary) else 1.0
    arms = order_arms(summary["arm"].unique(), arm_order)
    # An arm's colour follows its place in config arms (the first eight colours); the last two are for others.
    colours = {a: COLOURS[list(arm_order).index(a) % 8 if a in arm_order else 8 + i % 2]
               for i, a in enumerate(arms)}
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(3.6 * (len(splits) + 1) + 0.4, 3.3), layout="constrained")
        axes = fig.subplots(1, len(splits) + 1, squeeze=False)[0]
        for ax, split in zip(axes, splits):
            ax.set_ylim(0, min(1.0, top))
            part = summary[summary["split"] == split]
            for arm in arms:
                line = part[part["arm"] == arm].sort_values("k")
                if line.empty:
                    continue
                ks = line["k"].to_numpy(float)
                ax.fill_between(ks, line["lo"].to_numpy(float), line["hi"].to_numpy(float), color=colours[arm],
                                alpha=0.15, linewidth=0)
                ax.plot(ks, line["mean"].to_numpy(float), marker="o", markersize=3.5, color=colours[arm], label=arm)
            n = int(part["n"].max()) if len(part) else 0
            ax.set_title({"held_out": "held-out pooled", "in_domain": "in-domain", "all": "all queries"}[split]
                         + f" (N = {n})")
            ax.set_xticks(sorted(int(k) for k in part["k"].unique()))
            ax.set_xlabel("extra [MASK] tokens k")
            ax.grid(linewidth=0.3, alpha=0.6)
        empty_ax = axes[-1]
        part = summary[summary["split"] == splits[0]]
        for arm in arms:
            line = part[part["arm"] == arm].sort_values("k")
            empty_ax.plot(line["k"].to_numpy(float), line["empty_fraction"].to_numpy(float), marker="o",
                          markersize=3.5, color=colours[arm], label=arm)
        empty_ax.set_ylim(-0.02, 1.02)
        empty_ax.set_xticks(sorted(int(k) for k in part["k"].unique()))
        empty_ax.set_xlabel("extra [MASK] tokens k")
        empty_ax.set_ylabel("fraction of empty continuations")
        empty_ax.set_title(f"empty post-anchor text ({splits[0].replace('_', '-')})")
        empty_ax.grid(linewidth=0.3, alpha=0.6)
        axes[0].set_ylabel("mean corpus_overlap")
        axes[-1].legend(loc="best", frameon=False)
        conf = float(summary["confidence"].iloc[0]) if len(summary) else 0.95
        fig.suptitle(f"Mask-count robustness ({100 * conf:g}% bootstrap CI bands)")
        save(fig, pdf_path, png_path)
