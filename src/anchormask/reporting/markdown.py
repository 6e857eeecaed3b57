"""Markdown: table cells, the headline tables (results/tables/headline.md) and the base evaluation.

``headline_markdown`` sets the comparison and sweep statistics (``pairwise.run_comparisons``,
``pairwise.run_sweep``; their Parquet files are ``tables.COMPARISONS_SCHEMA`` and
``tables.SWEEP_SCHEMA``) beside the report's figures; ``base_evaluation_markdown`` renders
``base_eval.evaluate``'s result. ``number`` is the one rule for a numeric cell: n/a for a missing
value or NaN, inf/-inf for an infinite one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from anchormask.reporting.arms import is_missing, sweep_pair


def number(x: Any, fmt: str = ".3f") -> str:
    """A table cell: n/a for a missing value or NaN, inf/-inf for an infinite one."""
    if x is None or x is pd.NA:
        return "n/a"
    x = float(x)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, fmt)


def ratio_cell(row: Mapping[str, Any]) -> str:
    """a/b with its interval: ``1.23x [0.98, 1.50]``."""
    ratio = number(row['ratio'], '.2f')
    unit = "x" if ratio != "n/a" else ""
    return f"{ratio}{unit} [{number(row['ratio_lo'], '.2f')}, {number(row['ratio_hi'], '.2f')}]"


def diff_cell(row: Mapping[str, Any]) -> str:
    """a−b with its interval: ``+0.012 [-0.003, +0.027]``."""
    return f"{number(row['diff'], '+.3f')} [{number(row['diff_lo'], '+.3f')}, {number(row['diff_hi'], '+.3f')}]"


def _report(row: Mapping[str, Any]) -> str:
    r = row.get("report")
    if is_missing(r):
        return "—"
    return str(r).replace("|", "\\|")


def _settings_line(df: pd.DataFrame) -> str:
    parts = []
    for col, label in (("resamples", "resamples"), ("permutations", "sign-flip patterns (N > 16)"),
                       ("confidence", "confidence"), ("seed", "seed")):
        vals = sorted({v.item() if hasattr(v, "item") else v for v in df[col]}) if col in df and len(df) else []
        parts.append(f"{label} {', '.join(map(str, vals)) or 'n/a'}")
    return "; ".join(parts)


def _p(row: Mapping[str, Any]) -> str:
    """Permutation p-value with its Holm adjustment; exact ones carry no Monte Carlo error."""
    return f"{number(row['p_perm'], '.4f')} | {number(row['p_holm'], '.4f')}"


def _n(row: Mapping[str, Any]) -> str:
    seeds = int(row["seeds"])
    return f"{int(row['n'])}" + (f" × {seeds} seeds" if seeds > 1 else "")


def _comparison_table(df: pd.DataFrame) -> list[str]:
    lines = ["| comparison | selection | a | b | N | mean a | mean b | a/b [CI] | a−b [CI] | P(a>b) | p | p Holm | "
             "report |",
             "|---|---|---|---|---:|---:|---:|---|---|---:|---:|---:|---|"]
    for row in df.to_dict("records"):
        lines.append(f"| {row['name']} | {row['selector']} | {row['a']} | {row['b']} | {_n(row)} | "
                     f"{number(row['mean_a'], '.3f')} | {number(row['mean_b'], '.3f')} | {ratio_cell(row)} | "
                     f"{diff_cell(row)} | "
                     f"{number(row['p_a_gt_b'], '.3f')} | {_p(row)} | {_report(row)} |")
    return lines


def _family(df: pd.DataFrame) -> str:
    return f"m = {int(df['family'].iloc[0])}" if len(df) else "m = 0"


def _per_seed_table(comparisons_df: pd.DataFrame, per_seed_df: pd.DataFrame) -> list[str]:
    """Each comparison's pooled ratio beside its ratio and difference per training seed."""
    lines = ["## Per training seed (corpus_overlap)", "",
             "Each comparison's value with one training seed at a time (seed of a, paired by index): the spread "
             "the two-level interval above includes.", "",
             "| comparison | a/b pooled [CI] | a/b per seed | a−b per seed |", "|---|---|---|---|"]
    for row in comparisons_df.to_dict("records"):
        seeds = per_seed_df[per_seed_df["name"] == row["name"]].to_dict("records")
        ratios = ", ".join(f"{s['seed_a'] if s['seed_a'] is not pd.NA else '-'}: {number(s['ratio'], '.2f')}x"
                           for s in seeds)
        diffs = ", ".join(f"{number(s['diff'], '+.3f')}" for s in seeds)
        lines.append(f"| {row['name']} | {ratio_cell(row)} | {ratios} | {diffs} |")
    return lines + [""]


def _query_sets_table(comparisons_df: pd.DataFrame, alt_df: pd.DataFrame) -> list[str]:
    """The held-out comparisons on the main query set beside the same ones on the second set."""
    main = {row["name"]: row for row in comparisons_df.to_dict("records")}
    lines = [f"## Both query sets: held-out comparisons on corpus_overlap (second set: Holm over {_family(alt_df)})",
             "", "The same adapters answering a second, independently worded set of held-out queries "
             "(`data.alt_queries_dir`). A difference that holds on one set only depends on the wording of the "
             "queries.", "",
             "| comparison | N | first set a/b [CI] | first a−b | first p Holm | N | second set a/b [CI] | "
             "second a−b | second p Holm |",
             "|---|---:|---|---:|---:|---:|---|---:|---:|"]
    for row in alt_df.to_dict("records"):
        first = main[row["name"]]
        lines.append(f"| {row['name']} | {_n(first)} | {ratio_cell(first)} | {number(first['diff'], '+.3f')} | "
                     f"{number(first['p_holm'], '.4f')} | {_n(row)} | {ratio_cell(row)} | "
                     f"{number(row['diff'], '+.3f')} | "
                     f"{number(row['p_holm'], '.4f')} |")
    return lines + [""]


QUERY_SET_NAMES = {"main": "the main query set", "alt": "the second query set"}


def truncation_markdown(truncations: pd.DataFrame, query_set: str = "main") -> list[str]:
    """The headline's line "N of M anchors truncated" (always; a wrong generation.answer_len shows here)
    and, when any anchor was cut, its count per arm and domain."""
    rows = truncations[truncations["query_set"] == query_set]
    if not len(rows):
        return []
    # The anchor of a query is the same in every arm: count queries, not generations.
    per_domain = rows.groupby("domain", sort=False)[["anchors", "truncated"]].max()
    cut, total = int(per_domain["truncated"].sum()), int(per_domain["anchors"].sum())
    lines = [f"**{cut} of {total} anchors truncated** ({QUERY_SET_NAMES.get(query_set, query_set)}): a locked "
             "anchor longer than generation.answer_len − 1 tokens is cut to that length and the record flagged "
             "(`anchor_truncated`); its answer has at most one generated token.", ""]
    if cut:
        domains = list(per_domain.index)
        lines += [f"| arm | {' | '.join(domains)} | anchors truncated |", f"|---|{'---:|' * (len(domains) + 1)}"]
        for arm, group in rows.groupby("arm", sort=False):
            cells = dict(zip(group["domain"], group["truncated"]))
            lines.append(f"| {arm} | {' | '.join(str(int(cells.get(d, 0))) for d in domains)} | "
                         f"{int(group['truncated'].sum())} of {int(group['anchors'].sum())} |")
        lines.append("")
    return lines


def _sweep_tables(sweep_df: pd.DataFrame, strategies: Sequence[str]) -> list[str]:
    first = strategies[0]
    lines: list[str] = []
    for other in strategies[1:]:
        if lines:
            lines.append("")
        lines += [f"## Sweep: {first} vs {other}, held-out pooled (Holm over {_family(sweep_df)})", "",
                  f"| size | steps | N | mean {first} | mean {other} | {first}/{other} [CI] | {first}−{other} [CI] | "
                  "P(a>b) | p | p Holm | report |",
                  "|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---|"]
        for row in sweep_pair(sweep_df, strategies, other).to_dict("records"):
            lines.append(f"| {int(row['train_size'])} | {int(row['train_steps'])} | {_n(row)} | "
                         f"{number(row['mean_a'], '.3f')} | {number(row['mean_b'], '.3f')} | {ratio_cell(row)} | "
                         f"{diff_cell(row)} | {number(row['p_a_gt_b'], '.3f')} | {_p(row)} | {_report(row)} |")
    return lines


def headline_markdown(comparisons_df: pd.DataFrame, sweep_df: pd.DataFrame,
                      base_description: Mapping[str, Any] | str, content_df: pd.DataFrame,
                      per_seed_df: pd.DataFrame | None = None, alt_df: pd.DataFrame | None = None,
                      truncations: pd.DataFrame | None = None, *, sweep_strategies: Sequence[str]) -> str:
    """The headline tables: how many anchors were truncated (``tables.anchor_truncations``), the
    comparisons (the report's figures beside ours), per training seed when there are several
    (``pairwise.per_seed``), the held-out comparisons on the second query set when there is one, the
    same comparisons on content-word overlap, the sweep: one table per strategy the first of
    ``sweep_strategies`` (config ``sweep.strategies``) is compared with."""
    if isinstance(base_description, Mapping):
        base = f"`{base_description.get('path')}` (sha256 `{base_description.get('sha256')}`)"
    else:
        base = str(base_description)
    seeds = sorted({int(s) for s in comparisons_df["seeds"]}) if len(comparisons_df) else []
    lines = ["# Headline results", "",
             "Per-query corpus_overlap of the post-anchor text, paired percentile bootstrap over queries "
             "(with several training seeds, over seeds and queries: both levels are resampled). a/b is the "
             "ratio of means, a−b the difference of means, P(a>b) the fraction of resamples with "
             "mean(a) > mean(b); p is the two-sided paired sign-flip permutation p-value of a−b and p Holm "
             "its Holm adjustment over the m comparisons of its table.", "",
             *(truncation_markdown(truncations, "main") + truncation_markdown(truncations, "alt")
               if truncations is not None else []),
             f"## Comparisons: corpus_overlap (Holm over {_family(comparisons_df)})", "",
             *_comparison_table(comparisons_df), "",
             *(_per_seed_table(comparisons_df, per_seed_df) if per_seed_df is not None and max(seeds, default=1) > 1
               else []),
             *(_query_sets_table(comparisons_df, alt_df) if alt_df is not None else []),
             f"## The same comparisons on content-word overlap (Holm over {_family(content_df)})", "",
             "corpus_overlap counted over content words only (stop words removed from the text and the "
             "vocabulary): an advantage that vanishes here is carried by function words.", "",
             *_comparison_table(content_df), "",
             *_sweep_tables(sweep_df, sweep_strategies)]
    conf = sorted(set(comparisons_df["confidence"])) if len(comparisons_df) else []
    lines += ["", "## Notes", "",
              f"- Base: {base}.",
              f"- Training seeds per arm: {', '.join(map(str, seeds)) or 'n/a'} (one seed: queries are "
              "resampled, as in the report).",
              f"- Comparisons: {_settings_line(comparisons_df)}; sweep: {_settings_line(sweep_df)}.",
              f"- Intervals: {', '.join(f'{100 * c:g}%' for c in conf) or 'n/a'} percentile intervals; "
              "ratio n/a = 0/0, inf = mean b of 0.",
              "- p: every sign pattern when N <= 16 (exact), else seeded random patterns, (1 + extreme) / "
              "(1 + patterns). Each table is its own Holm family.",
              "- The report's figures come from config `statistics.comparisons.<name>.report` and "
              "`statistics.sweep_report`.", ""]
    return "\n".join(lines)


def base_evaluation_markdown(result: dict[str, Any]) -> str:
    """``base_eval.evaluate``'s result as markdown: masked-token table, generation gates, samples."""
    lines = [f"# Base evaluation: `{result['base']['path']}` (`{result['base']['sha256'][:12]}…`)", "",
             "| text | lines | accuracy @15% | NLL @15% | accuracy @50% | NLL @50% |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, scores in result["masked"].items():
        lo, hi = scores["0.15"], scores["0.5"]
        lines.append(f"| {name} | {scores['lines']} | {lo['accuracy']:.3f} | {lo['nll']:.2f} | "
                     f"{hi['accuracy']:.3f} | {hi['nll']:.2f} |")
    lines += ["", "| gate | value | target | met |", "|---|---:|---|---|"]
    for key, gate in result["gates"].items():
        lines.append(f"| {key} | {gate['value']:.3f} | {gate['target']} | {'yes' if gate['met'] else 'no'} |")
    quality = result["generation"]
    lines += ["", f"Generations: {quality['answers']} answers, {quality['post_anchor_words_mean']:.1f} "
              f"post-anchor words on average, stop words {quality['stop_word_share']:.3f}, "
              f"empty {quality['empty_share']:.3f}.", "",
              "| domain | query | anchor | continuation |", "|---|---|---|---|"]
    for s in result["samples"]:
        cells = [s["domain"], s["query_id"], s["anchor"], s["continuation"] or "(empty)"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
