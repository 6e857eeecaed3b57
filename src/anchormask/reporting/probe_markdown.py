"""The probes' markdown: the mask-count table (results/probes/maskcount.md) and the summary
(results/probes/summary.md).

``summary_markdown`` gathers each probe's headline number, with the reverse vs random comparison
(probe 1) and the V/O ablation (probe 4) taken from the comparison statistics
(``pairwise.run_comparisons``; the rows are found by their arms' strategy and LoRA targets and the
held-out split, ``arms.comparison_of``, not by the names config ``statistics.comparisons`` gives them),
the attention mass (probe 2, ``probes.attention``), the LoRA
allocation (probe 3, ``probes.lora``) and the mask count (``probes.maskcount``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from anchormask.model.families import KINDS
from anchormask.reporting.arms import arm_with, base_arm, comparison_of, is_missing, order_arms
from anchormask.reporting.markdown import diff_cell, number, ratio_cell


def maskcount_markdown(summary: pd.DataFrame) -> str:
    k0 = int(summary["k0"].iloc[0]) if len(summary) else 0
    conf = float(summary["confidence"].iloc[0]) if len(summary) else 0.95
    lines = ["# Mask-count robustness (seed 002)", "",
             f"Mean corpus_overlap of the post-anchor text with k extra [MASK] tokens appended after the answer "
             f"slot (they stay masked). {100 * conf:g}% percentile bootstrap CIs over queries; Δ is the paired "
             f"difference from k = {k0}, P(Δ<0) the fraction of resamples in which the mean fell below k = {k0}.",
             ""]
    for split, title in (("held_out", "Held-out queries, pooled"), ("in_domain", "In-domain queries"),
                         ("all", "All queries")):
        part = summary[summary["split"] == split]
        if part.empty:
            continue
        lines += [f"## {title}", "", "| arm | k | N | mean [CI] | Δ vs k=%d [CI] | P(Δ<0) | empty |" % k0,
                  "|---|---:|---:|---|---|---:|---:|"]
        for r in part.to_dict("records"):
            lines.append(f"| {r['arm']} | {r['k']} | {r['n']} | {r['mean']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] | "
                         f"{r['diff']:+.3f} [{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}] | {r['p_below_k0']:.3f} | "
                         f"{r['empty_fraction']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def _comparison_line(row: Mapping[str, Any]) -> str:
    report = "" if is_missing(row.get("report")) else f"; report: {row['report']}"
    return (f"`{row['name']}` ({row['selector']}, N = {int(row['n'])}): {row['a']} {number(row['mean_a'])} vs "
            f"{row['b']} {number(row['mean_b'])}, diff {diff_cell(row)}, ratio {ratio_cell(row)}, "
            f"P(a>b) = {number(row['p_a_gt_b'])}{report}")


class _Attention(NamedTuple):
    """The attention table reduced once for the headline and its section."""

    means: pd.DataFrame  # arm x target, mean over layers and heads; arms in groupby order
    order: list[str]     # the arms in display order
    base: str | None     # the arm without an adapter, the reference of the deltas
    full: set[str]       # the base and the full-target arms, the ones the headline names


def _attention(attention: pd.DataFrame | None, arm_order: Sequence[str]) -> _Attention | None:
    if attention is None or not len(attention):
        return None
    means = attention.groupby(["arm", "target"])["mass"].mean().unstack("target")
    order = order_arms(means.index, arm_order)
    spec = attention.groupby("arm")[["strategy", "targets"]].first()
    base = base_arm(order, spec["strategy"].to_dict())
    full = {a for a, t in spec["targets"].items() if is_missing(t) or t == "full"}
    return _Attention(means, order, base, full)


def _maskcount_part(maskcount: pd.DataFrame | None) -> tuple[str, pd.DataFrame] | None:
    """The split the mask-count probe reports (held-out when there is one) and its rows."""
    if maskcount is None or not len(maskcount):
        return None
    split = "held_out" if (maskcount["split"] == "held_out").any() else "all"
    return split, maskcount[maskcount["split"] == split]


def _reverse_headline(row: Mapping[str, Any] | None, comp_path: str) -> str:
    return "- **1. reverse vs random**: " + (
        f"held-out diff {diff_cell(row)}, "
        f"P(reverse > random) = {number(row['p_a_gt_b'])} (N = {int(row['n'])}); row `{row['name']}` of "
        f"`{comp_path}`" if row is not None
        else f"not configured (no held-out reverse vs random comparison in `{comp_path}`)")


def _attention_headline(att: _Attention | None, figure: str) -> str:
    if att is None:
        return "- **2. attention**: not run"
    means, base = att.means, att.base
    parts = [f"{a} {means.loc[a, 'anchor']:.3f}" + (f" ({means.loc[a, 'anchor'] - means.loc[base, 'anchor']:+.4f})"
                                                   if base and a != base else "")
             for a in means.index if a in att.full or a == base]
    return ("- **2. attention**: mass onto the locked anchor, mean over layers and heads (Δ vs "
            f"{base or 'base'}): " + ", ".join(parts) + f"; `{figure}`")


def _lora_headline(lora: pd.DataFrame | None, figure: str) -> str:
    if lora is None or not len(lora):
        return "- **3. LoRA allocation**: not run"
    full = lora[lora["targets"] == "full"]
    vo = full[full["kind"].isin(["v", "o"])].groupby("arm")["share"].sum()
    return ("- **3. LoRA allocation**: V+O share of Σ‖ΔW‖² in the full-target adapters: "
            + ", ".join(f"{a} {v:.3f}" for a, v in vo.items()) + f"; `{figure}`")


def _ablation_headline(vo_row: Mapping[str, Any] | None, figure: str) -> str:
    return "- **4. V/O ablation**: " + (
        f"held-out anchor-vo {number(vo_row['mean_a'])} vs anchor (full) {number(vo_row['mean_b'])}, diff "
        f"{diff_cell(vo_row)}; "
        if vo_row is not None else "") + f"see `{figure}`"


def _maskcount_headline(mask: tuple[str, pd.DataFrame] | None, table: str) -> str:
    if mask is None:
        return "- **5. mask count**: not run"
    split, part = mask
    kmax = int(part["k"].max())
    top = part[part["k"] == kmax]
    return (f"- **5. mask count**: {split.replace('_', '-')} Δ mean corpus_overlap from k = "
            f"{int(part['k0'].iloc[0])} to k = {kmax}: "
            + ", ".join(f"{r['arm']} {r['diff']:+.3f} [{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}]"
                        for r in top.to_dict("records")) + f"; `{table}`")


class _Rows(NamedTuple):
    """The comparison rows of probes 1 and 4 (None where the config compares no such arms)."""

    reverse: Mapping[str, Any] | None  # the reverse arm vs the random arm (full targets), held-out pooled
    vo: Mapping[str, Any] | None       # the anchor arm with V/O targets vs the full-target one, held-out pooled


def _rows(comp: pd.DataFrame, arms: Mapping[str, Mapping[str, Any]]) -> _Rows:
    records = comp.to_dict("records")
    return _Rows(comparison_of(records, arm_with(arms, "reverse", "full"), arm_with(arms, "random", "full")),
                 comparison_of(records, arm_with(arms, "anchor", "vo"), arm_with(arms, "anchor", "full")))


def headline_lines(rows: _Rows, att: _Attention | None, lora: pd.DataFrame | None,
                   mask: tuple[str, pd.DataFrame] | None, paths: Mapping[str, str]) -> list[str]:
    """One bullet per probe (1 reverse vs random, 2 attention, 3 LoRA, 4 V/O ablation, 5 mask count)."""
    return [_reverse_headline(rows.reverse, paths["comparisons"]), _attention_headline(att, paths["attention_figure"]),
            _lora_headline(lora, paths["lora_figure"]), _ablation_headline(rows.vo, paths["ablation"]),
            _maskcount_headline(mask, paths["maskcount_md"])]


def _reverse_section(comp: pd.DataFrame, row: Mapping[str, Any] | None, arms: Mapping[str, Mapping[str, Any]],
                     paths: Mapping[str, str]):
    lines = ["## 1. Direction of asymmetry: reverse vs random", ""]
    if row is None:  # another split or domain, either way round
        pair = {arm_with(arms, "reverse", "full"), arm_with(arms, "random", "full")}
        rows = [r for r in comp.to_dict("records") if None not in pair and {r["a"], r["b"]} == pair]
        row = rows[0] if rows else None
    if row is not None:
        lines += [f"- {_comparison_line(row)}.",
                  f"- Source: `{paths['comparisons']}` (also in "
                  "`results/tables/headline.md`)."]
    else:
        lines.append("- No reverse vs random comparison is configured (`statistics.comparisons`).")
    return lines + [""]


def _attention_section(att: _Attention | None, paths: Mapping[str, str]) -> list[str]:
    lines = ["## 2. Attention instrumentation", ""]
    if att is None:
        return lines + ["- Not run (`probes.attention_arms` is empty) or not available for this model (the reason "
                        f"is in the metadata of `{paths['attention']}`).", ""]
    means, base = att.means, att.base
    lines += ["Mean over layers and heads of the attention mass from generated-answer positions "
              "(averaged over answer positions, denoising steps and queries) onto the question prefix and "
              "onto the locked anchor" + (f"; Δ = arm − {base}." if base else "."), "",
              "| arm | prefix | anchor | Δ prefix | Δ anchor |", "|---|---:|---:|---:|---:|"]
    for arm in att.order:
        p, a = means.loc[arm, "prefix"], means.loc[arm, "anchor"]
        dp = p - means.loc[base, "prefix"] if base else float("nan")
        da = a - means.loc[base, "anchor"] if base else float("nan")
        lines.append(f"| {arm} | {p:.3f} | {a:.3f} | {number(dp, '+.3f')} | {number(da, '+.3f')} |")
    return lines + ["", f"- Per layer and head: `{paths['attention']}`; "
                    f"heatmaps (per arm and arm − base): `{paths['attention_figure']}`.", ""]


def _lora_section(lora: pd.DataFrame | None, arm_order: Sequence[str], paths: Mapping[str, str]) -> list[str]:
    lines = ["## 3. LoRA weight allocation", ""]
    if lora is None or not len(lora):
        return lines + ["- Not run (no adapter arms).", ""]
    shares = lora.pivot_table(index="arm", columns="kind", values="share", aggfunc="first")
    norms = lora.groupby("arm")["fro_norm"].apply(lambda s: float(np.sqrt((s ** 2).sum())))
    lines += ["Share of each adapter's Σ‖ΔW‖²_F (ΔW = (α/r)·B A) per projection kind, and the total ‖ΔW‖_F "
              "(mean over the arm's adapters).", "",
              "| arm | targets | Q | K | V | O | V+O | total ‖ΔW‖_F |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    targets = lora.groupby("arm")["targets"].first()
    for arm in order_arms(shares.index, arm_order):
        s = {k: shares.loc[arm].get(k, np.nan) for k in KINDS}
        vo = np.nansum([s["v"], s["o"]])
        lines.append(f"| {arm} | {targets[arm]} | " + " | ".join(number(s[k]) for k in KINDS)
                     + f" | {vo:.3f} | {norms[arm]:.3f} |")
    return lines + ["", f"- Per layer: `{paths['lora_layers']}`; per kind: "
                    f"`{paths['lora']}`; figure: "
                    f"`{paths['lora_figure']}`.", ""]


def _ablation_section(comp: pd.DataFrame, arms: Mapping[str, Mapping[str, Any]], paths: Mapping[str, str]):
    lines = ["## 4. Direct V/O ablation", ""]
    ablation = [r for r in comp.to_dict("records")
                if any((arms.get(r[s]) or {}).get("targets") in ("vo", "qk") for s in ("a", "b"))]
    lines += [f"- {_comparison_line(r)}." for r in ablation]
    if not ablation:
        lines.append("- No comparison involving a vo or qk arm is configured (`statistics.comparisons`).")
    return lines + [f"- Figure: `{paths['ablation']}` (full / vo / qk for anchor and "
                    "random, held-out pooled, base as reference).", ""]


def _maskcount_section(mask: tuple[str, pd.DataFrame] | None, arm_order: Sequence[str],
                       paths: Mapping[str, str]) -> list[str]:
    lines = ["## 5. Mask-count robustness (seed 002)", ""]
    if mask is None:
        return lines + ["- Not run (`probes.maskcount_k` or its arms are empty).", ""]
    split, part = mask
    kmax, k0 = int(part["k"].max()), int(part["k0"].iloc[0])
    lines += [f"Mean corpus_overlap ({split.replace('_', '-')} queries) at k = {k0} and k = {kmax} extra "
              "masks, and the paired difference:", ""]
    for arm in order_arms(part["arm"].unique(), arm_order):
        a0 = part[(part["arm"] == arm) & (part["k"] == k0)].iloc[0]
        am = part[(part["arm"] == arm) & (part["k"] == kmax)].iloc[0]
        lines.append(f"- {arm}: {a0['mean']:.3f} -> {am['mean']:.3f}, Δ {am['diff']:+.3f} "
                     f"[{am['diff_lo']:+.3f}, {am['diff_hi']:+.3f}], P(Δ<0) = {am['p_below_k0']:.3f} "
                     f"(N = {int(am['n'])}).")
    return lines + [f"- Table: `{paths['maskcount_md']}` "
                    f"(`{paths['maskcount']}`); figure: "
                    f"`{paths['maskcount_figure']}`.", ""]


def summary_markdown(comparisons: pd.DataFrame | None, attention: pd.DataFrame | None, lora: pd.DataFrame | None,
                     maskcount: pd.DataFrame | None, arms: Mapping[str, Mapping[str, Any]],
                     paths: Mapping[str, str], *, arm_order: Sequence[str]) -> str:
    """results/probes/summary.md: one section per probe with its headline number and where to look.
    ``arms`` is config ``arms`` (name -> {strategy, targets}), ``arm_order`` its names in config order."""
    comp = comparisons if comparisons is not None else pd.DataFrame(columns=["name", "selector", "a", "b"])
    rows = _rows(comp, arms)
    att, mask = _attention(attention, arm_order), _maskcount_part(maskcount)  # once, for headlines and sections
    lines = ["# Mechanism probes: summary", "",
             "Headline numbers of each probe (docs/protocol.md, \"Mechanism probes\", with the seed-002 mask-count "
             "probe). Every number comes from the files named in its section.", "",
             "## Headlines (one line per probe)", "", *headline_lines(rows, att, lora, mask, paths), ""]
    return "\n".join(lines + _reverse_section(comp, rows.reverse, arms, paths) + _attention_section(att, paths)
                     + _lora_section(lora, arm_order, paths) + _ablation_section(comp, arms, paths)
                     + _maskcount_section(mask, arm_order, paths))
