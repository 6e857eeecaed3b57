"""Across bases: each base's facts, the table of each base's comparisons side by side with the
differences between bases (``stats.crossbase``), its figure and the run's one page.

Outputs of a run with ``bases:`` (workflow/rules/bases.smk): results/tables/bases.md,
results/tables/bases.parquet (one row per base and comparison), results/tables/bases_differences.parquet
(one row per comparison and pair of bases), results/figures/bases.{pdf,png} and results/report/paper.html.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from matplotlib.figure import Figure

from anchormask import fileio
from anchormask.measurement import tables
from anchormask.model import families
from anchormask.reporting.markdown import number, ratio_cell
from anchormask.reporting.paper import STYLE, figure_html, markdown_html
from anchormask.reporting.style import save

# The comparison the figure shows, the study's headline: anchor vs random over the held-out queries pooled.
FIGURE_COMPARISON = {"a": "anchor", "b": "random", "split": "held_out"}
FACT_COLUMNS = ["base", "family", "parameters", "layout", "corpora_accuracy_15", "validation_accuracy_15",
                "distinct_2"]
_str, _int, _f64, _bool = pa.string(), pa.int64(), pa.float64(), pa.bool_()
BASES_SCHEMA = tables.arrow_schema([
    ("base", _str, False), ("family", _str, True), ("parameters", _int, True), ("layout", _str, False),
    ("corpora_accuracy_15", _f64, True), ("validation_accuracy_15", _f64, True), ("distinct_2", _f64, True),
    ("comparison", _str, False), ("a", _str, False), ("b", _str, False), ("selector", _str, False),
    ("n", _int, False), ("seeds", _int, False), ("ratio", _f64, True), ("ratio_lo", _f64, True),
    ("ratio_hi", _f64, True), ("diff", _f64, False), ("p_perm", _f64, False), ("p_holm", _f64, False),
])
DIFFERENCES_SCHEMA = tables.arrow_schema([
    ("comparison", _str, False), ("base_x", _str, False), ("base_y", _str, False), ("n", _int, False),
    *((name, _f64, True) for name in ("ratio_x", "ratio_y", "ratio_of_ratios", "ror_lo", "ror_hi")),
    *((name, _f64, False) for name in ("diff_x", "diff_y", "diff_of_diffs", "dod_lo", "dod_hi", "p_signflip")),
    ("perm_exact", _bool, False), ("resamples", _int, False), ("confidence", _f64, False), ("seed", _int, False),
    ("permutations", _int, False),
])
TABLE_COLUMNS = BASES_SCHEMA.names


def safetensors_parameters(folder: str | os.PathLike[str]) -> int | None:
    """Parameters in a checkpoint's safetensors files, from their headers alone (no weights read)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        read = fileio.read_safetensors_header(path)
        if read is None:
            raise fileio.InputError(f"{path}: the safetensors header cannot be read (a truncated or altered file); "
                                    "copy the checkpoint again")
        total += sum(int(np.prod(t["shape"])) for key, t in read[1].items() if key != "__metadata__")
    return total


def base_facts(name: str, base: Mapping[str, Any], evaluation: Mapping[str, Any] | None) -> dict[str, Any]:
    """Family, parameters, layout and, where the base evaluation ran, its masked-token accuracy and distinct-2."""
    config = fileio.read_json(Path(base["path"]) / "config.json")
    model_type = str(config.get("model_type") or "")
    masked = (evaluation or {}).get("masked", {})
    return {"base": name, "family": base.get("family") or families.MODEL_TYPES.get(model_type, model_type or None),
            "parameters": safetensors_parameters(base["path"]), "layout": base.get("layout") or "auto",
            "corpora_accuracy_15": masked.get("corpora", {}).get("0.15", {}).get("accuracy"),
            "validation_accuracy_15": masked.get("validation", {}).get("0.15", {}).get("accuracy"),
            "distinct_2": (evaluation or {}).get("generation", {}).get("distinct_2")}


def bases_table(facts: Sequence[Mapping[str, Any]], comparisons: Mapping[str, pd.DataFrame],
                shared: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per (base, shared comparison): the base's facts and its own statistics (its comparisons table)."""
    names = [c["name"] for c in shared]
    rows = []
    for fact in facts:
        own = comparisons[fact["base"]].set_index("name")
        for name in names:
            stats = own.loc[name]
            rows.append({**fact, "comparison": name, **{k: stats[k] for k in TABLE_COLUMNS[len(FACT_COLUMNS) + 1:]}})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def _headline_cell(block: pd.DataFrame, split: str) -> str:
    """The base's anchor/random ratio over one split, with its interval; — where it has no such comparison."""
    rows = block[(block["a"] == FIGURE_COMPARISON["a"]) & (block["b"] == FIGURE_COMPARISON["b"])
                 & (block["selector"] == f"split={split}")]
    return ratio_cell(rows.iloc[0]) if len(rows) else "—"


def _facts_markdown(table: pd.DataFrame) -> list[str]:
    lines = ["| base | family | parameters | layout | accuracy @15% (corpora) | accuracy @15% (validation) "
             "| distinct-2 | held-out anchor/random | in-domain anchor/random |",
             "|---|---|---:|---|---:|---:|---:|---|---|"]
    for base, block in table.groupby("base", sort=False):
        row = block.iloc[0]
        params = "n/a" if pd.isna(row["parameters"]) else f"{int(row['parameters']):,}"
        lines.append(f"| {base} | {row['family'] or 'n/a'} | {params} | {row['layout']} | "
                     f"{number(row['corpora_accuracy_15'])} | {number(row['validation_accuracy_15'])} | "
                     f"{number(row['distinct_2'])} | {_headline_cell(block, 'held_out')} | "
                     f"{_headline_cell(block, 'in_domain')} |")
    return lines


def _side_by_side_markdown(table: pd.DataFrame) -> list[str]:
    bases = list(dict.fromkeys(table["base"]))
    lines = ["| comparison | " + " | ".join(bases) + " |", "|---|" + "---|" * len(bases)]
    for name, block in table.groupby("comparison", sort=False):
        cells = {row["base"]: f"{ratio_cell(row)}, Holm p {number(row['p_holm'], '.3g')}, N {row['n']}"
                 for _, row in block.iterrows()}
        lines.append(f"| {name} | " + " | ".join(cells.get(b, "—") for b in bases) + " |")
    return lines


def _differences_markdown(differences: pd.DataFrame) -> list[str]:
    if differences.empty:
        return ["No pair of bases answered the same queries of a shared comparison."]
    lines = ["| comparison | X | Y | N | ratio X / ratio Y | diff X − diff Y | sign-flip p |",
             "|---|---|---|---:|---|---|---:|"]
    for _, r in differences.iterrows():
        lines.append(f"| {r['comparison']} | {r['base_x']} | {r['base_y']} | {r['n']} | "
                     f"{number(r['ratio_of_ratios'], '.2f')} "
                     f"[{number(r['ror_lo'], '.2f')}, {number(r['ror_hi'], '.2f')}]"
                     f" | {number(r['diff_of_diffs'], '+.3f')} [{number(r['dod_lo'], '+.3f')}, "
                     f"{number(r['dod_hi'], '+.3f')}] | {number(r['p_signflip'], '.3g')} |")
    return lines


def bases_markdown(table: pd.DataFrame, differences: pd.DataFrame, settings: Mapping[str, Any]) -> str:
    """results/tables/bases.md: the bases' facts, each comparison per base, the differences between bases."""
    level = f"{round(100 * settings['confidence'])}%"
    return "\n".join([
        "# The study across bases", "",
        "## The bases", "", *_facts_markdown(table), "",
        "Accuracy: masked-token accuracy at 15% masking from the base evaluation (n/a where it did not run: "
        "`report.base_evaluation` in the base's layer); distinct-2 of the base's own generations there. "
        f"anchor/random: a/b of mean corpus_overlap with its {level} interval, as in each base's headline.", "",
        f"## Each base's comparisons (a/b of mean corpus_overlap, {level} interval, Holm p within the base)", "",
        *_side_by_side_markdown(table), "",
        "## Differences between bases", "",
        f"Queries resampled jointly (one resample for every base; {settings['resamples']} resamples, seed "
        f"{settings['seed']}), {level} percentile intervals; p: paired sign-flip test of the difference of "
        "differences, not adjusted for the number of rows.", "",
        *_differences_markdown(differences), ""])


def figure_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The figure's comparison per base, ordered by masked-token accuracy where every base has one."""
    rows = table[(table["a"] == FIGURE_COMPARISON["a"]) & (table["b"] == FIGURE_COMPARISON["b"])
                 & (table["selector"] == f"split={FIGURE_COMPARISON['split']}")].drop_duplicates("base")
    accuracy = rows["corpora_accuracy_15"]
    if len(rows) and accuracy.notna().all():
        rows = rows.sort_values("corpora_accuracy_15", kind="stable")
    return rows


def bases_figure(table: pd.DataFrame, pdf_path: str | os.PathLike[str], png_path: str | os.PathLike[str]) -> None:
    """The held-out anchor/random ratio with its interval, one point per base."""
    rows = figure_rows(table)
    if rows.empty:
        raise fileio.InputError("results/tables/bases.parquet: no base has the comparison anchor vs random over the "
                            "held-out queries (split held_out), which the figure shows; add it to "
                            "statistics.comparisons")
    fig = Figure(figsize=(max(4.0, 1.1 * len(rows) + 1.5), 3.4))
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    ratio = rows["ratio"].to_numpy(dtype=float)
    lo, hi = rows["ratio_lo"].to_numpy(dtype=float), rows["ratio_hi"].to_numpy(dtype=float)
    err = np.abs(np.stack([ratio - lo, hi - ratio]))
    ax.errorbar(x, ratio, yerr=err, fmt="o", color="#1f77b4", capsize=4)
    ax.axhline(1.0, color="#7f7f7f", linewidth=0.8, linestyle="--")
    ordered = rows["corpora_accuracy_15"].notna().all()
    labels = [f"{r['base']}\n{'acc ' + number(r['corpora_accuracy_15']) if ordered else ''}"
              for _, r in rows.iterrows()]
    ax.set_xticks(x, labels)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel("anchor / random, held-out\n(mean corpus_overlap)")
    ax.set_xlabel("base (by corpus accuracy @15%)" if ordered else "base")
    ax.set_title("Held-out anchor/random per base")
    fig.tight_layout()
    save(fig, pdf_path, png_path)


def bases_paper_html(markdown: str, figure_png: str | os.PathLike[str], papers: Mapping[str, str]) -> str:
    """results/report/paper.html of a run with bases: the comparison across bases, then where each base's page is."""
    links = "\n".join(f"<li><b>{name}</b>: <code>{path}</code></li>" for name, path in papers.items())
    body = (f'<section id="bases"><h2>Across bases</h2>\n{markdown_html(markdown)}\n'
            f"{figure_html(figure_png, 'The held-out anchor/random ratio of each base with its interval.')}\n"
            f"<h3>Each base's own page</h3>\n<ul>\n{links}\n</ul>\n</section>")
    return f'{STYLE}\n<div class="am-paper">\n{body}\n</div>\n'
