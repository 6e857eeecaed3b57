import logging
import runpy
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from anchormask.fileio import InputError
from anchormask.measurement import tables
from anchormask.reporting import figures
from helpers import REPO

pytestmark = pytest.mark.unit

ARMS = {"base": (None, None), "anchor": ("anchor", "full"), "random": ("random", "full"),
        "reverse": ("reverse", "full"), "anchor-vo": ("anchor", "vo"), "anchor-qk": ("anchor", "qk"),
        "random-vo": ("random", "vo"), "random-qk": ("random", "qk")}
LEVEL = {"base": 0.1, "anchor": 0.4, "random": 0.25, "reverse": 0.2, "anchor-vo": 0.45, "anchor-qk": 0.15,
         "random-vo": 0.3, "random-qk": 0.2}


def generations(n_in=5, n_out=4, domains=("astronomy", "law")):
    gen = np.random.default_rng(0)
    places = [("in_domain", "in_domain")] * n_in + [("held_out", d) for d in domains for _ in range(n_out)]
    rows = []
    for q, (split, domain) in enumerate(places):
        for arm, (strategy, targets) in ARMS.items():
            rows.append(dict(query_id=f"{domain}-q{q:02d}", domain=domain, split=split, query_set="main", arm=arm,
                             strategy=strategy, targets=targets, adapter_id=None if strategy is None else arm,
                             train_size=None if strategy is None else 144,
                             train_steps=None if strategy is None else 300,
                             train_seed=None if strategy is None else 42, statement_id="s", locked_tokens=3,
                             anchor_truncated=False, post_anchor_tokens=10, word_tokens=10,
                             overlap=float(np.clip(LEVEL[arm] + gen.normal(0, 0.05), 0, 1)), empty=False,
                             content_words=5, content_overlap=0.5, distinct_1=0.8, distinct_2=0.9,
                             adjacent_repeats=0.1, ended=True, forward_passes=16, base_sha256="ab" * 32))
    return pd.DataFrame(rows)


SWEEP = ["anchor", "random"]  # config sweep.strategies


def sweep_stats():
    rows = []
    for size in (72, 144):
        for steps, ratio in ((100, 2.0), (300, 1.6), (1000, 1.1)):
            report = {(72, 100): "1.97-2.19x at 100 steps", (144, 100): "1.97-2.19x at 100 steps",
                      (144, 1000): "1.07x"}.get((size, steps))
            rows.append(dict(point=f"{size}x{steps}", train_size=size, train_steps=steps, n=48, ratio=ratio,
                             a=f"sweep:anchor_n{size}_s{steps}", b=f"sweep:random_n{size}_s{steps}",
                             ratio_lo=ratio - 0.2, ratio_hi=ratio + 0.2 if steps != 300 else np.inf,
                             confidence=0.95, report=report))
    return pd.DataFrame(rows)


def assert_pdf_png(pdf, png):
    assert pdf.read_bytes().startswith(b"%PDF") and b"CreationDate" not in pdf.read_bytes()
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_arm_summary_panels_and_intervals():
    s = figures.arm_summary(generations(), arm_order=list(ARMS), resamples=2000, seed=1)
    assert list(dict.fromkeys(s["panel"])) == ["in-domain: in_domain", "held-out: astronomy", "held-out: law",
                                               "held-out pooled"]
    assert s.groupby("panel")["n"].first().to_dict() == {"in-domain: in_domain": 5, "held-out: astronomy": 4,
                                                         "held-out: law": 4, "held-out pooled": 8}
    assert list(s[s["panel"] == "held-out pooled"]["arm"]) == list(ARMS)
    assert ((s["lo"] <= s["mean"]) & (s["mean"] <= s["hi"]) & (s["lo"] < s["hi"])).all()
    pooled = s[s["panel"] == "held-out pooled"].set_index("arm")
    assert pooled.loc["anchor", "lo"] > pooled.loc["base", "hi"]


def test_arm_intervals_include_the_spread_between_training_seeds():
    """Three seeds whose adapters differ by a constant shift: the per-query means are those of one
    seed, so a queries-only interval would be as narrow as one seed's; the two-level one is wider."""
    one = generations()
    adapters = one[one["train_seed"].notna()]
    three = pd.concat([one[one["train_seed"].isna()]]
                      + [adapters.assign(train_seed=42 + i, overlap=adapters["overlap"] + shift)
                         for i, shift in enumerate((-0.1, 0.0, 0.1))], ignore_index=True)
    width = {}
    for name, df in (("one", one), ("three", three)):
        s = figures.arm_summary(df, arm_order=list(ARMS), resamples=2000, seed=1).set_index(["panel", "arm"])
        width[name] = s.loc[("held-out pooled", "anchor"), "hi"] - s.loc[("held-out pooled", "anchor"), "lo"]
        mean = s.loc[("held-out pooled", "anchor"), "mean"]
    assert mean == pytest.approx(figures.arm_summary(one, arm_order=list(ARMS), resamples=10, seed=1).set_index(
        ["panel", "arm"]).loc[("held-out pooled", "anchor"), "mean"])
    assert width["three"] > 1.5 * width["one"]


def test_main_figure_is_byte_stable(tmp_path):
    df = generations()
    for k in (1, 2):
        figures.main_figure(df, tmp_path / f"m{k}.pdf", tmp_path / f"m{k}.png", arm_order=list(ARMS), resamples=500,
                            seed=0)
    assert_pdf_png(tmp_path / "m1.pdf", tmp_path / "m1.png")
    assert (tmp_path / "m1.pdf").read_bytes() == (tmp_path / "m2.pdf").read_bytes()
    assert (tmp_path / "m1.png").read_bytes() == (tmp_path / "m2.png").read_bytes()


@pytest.mark.parametrize("text, expected", [
    ("1.97-2.19x at 100 steps", (1.97, 2.19)), ("1.07x", (1.07, 1.07)),
    ("1.67x [1.51, 1.85], P(a>b) = 1.000, N = 48", (1.67, 1.67)), ("diff -0.038, P(a>b) = 0.006", None),
    (None, None), (float("nan"), None)])
def test_parse_report(text, expected):
    assert figures.parse_report(text) == expected


def test_sweep_figure_with_infinite_band(tmp_path):
    figures.sweep_figure(sweep_stats(), tmp_path / "s.pdf", tmp_path / "s.png", strategies=SWEEP)
    assert_pdf_png(tmp_path / "s.pdf", tmp_path / "s.png")
    figures.sweep_figure(sweep_stats(), tmp_path / "t.pdf", tmp_path / "t.png", strategies=SWEEP)
    assert (tmp_path / "s.pdf").read_bytes() == (tmp_path / "t.pdf").read_bytes()
    with pytest.raises(InputError):
        figures.sweep_figure(sweep_stats().iloc[:0], tmp_path / "e.pdf", tmp_path / "e.png", strategies=SWEEP)


def test_ablation_summary_finds_arms_by_strategy_and_targets(tmp_path):
    df = generations().replace({"arm": {"anchor-vo": "renamed-vo"}})
    s = figures.ablation_figure(df, tmp_path / "a.pdf", tmp_path / "a.png", resamples=500, seed=0)
    assert_pdf_png(tmp_path / "a.pdf", tmp_path / "a.png")
    assert s[s["strategy"].isna()]["arm"].tolist() == ["base"]
    got = {(r.strategy, r.targets): r.arm for r in s[s["strategy"].notna()].itertuples()}
    assert got == {("anchor", "full"): "anchor", ("anchor", "vo"): "renamed-vo", ("anchor", "qk"): "anchor-qk",
                   ("random", "full"): "random", ("random", "vo"): "random-vo", ("random", "qk"): "random-qk"}
    assert (s["n"] == 8).all()  # held-out pooled only
    held = df[(df["split"] == "held_out") & (df["arm"] == "renamed-vo")]
    assert s.set_index("arm").loc["renamed-vo", "mean"] == pytest.approx(held["overlap"].mean())
    with pytest.raises(InputError, match="no anchor or random arms"):
        figures.ablation_summary(df[df["strategy"].isna()], seed=0)


def test_figure_script_reads_parquet(tmp_path):
    table = tmp_path / "generations.parquet"
    tables.write_parquet(generations(), table, tables.GENERATIONS_SCHEMA)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        smk = SimpleNamespace(input=[str(table)], output=SimpleNamespace(pdf=str(tmp_path / "f.pdf"),
                              png=str(tmp_path / "f.png")), params=SimpleNamespace(which="ablation",
                              settings='{"resamples":300,"seed":4}'), log=[str(tmp_path / "f.log")])
        runpy.run_path(str(REPO / "workflow/scripts/figure.py"), init_globals={"snakemake": smk}, run_name="__main__")
    finally:
        for h in root.handlers:
            if h not in saved[0]:
                h.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert_pdf_png(tmp_path / "f.pdf", tmp_path / "f.png")
    assert "wrote" in (tmp_path / "f.log").read_text()


def drawn(monkeypatch, tmp_path, draw) -> tuple[object, tuple[int, int]]:
    """The Figure a figure function saved (captured at ``figures.save``) and its PNG's (width, height)."""
    import struct

    saved = []
    real_save = figures.save
    monkeypatch.setattr(figures, "save", lambda fig, pdf, png: (saved.append(fig), real_save(fig, pdf, png)))
    draw(tmp_path / "f.pdf", tmp_path / "f.png")
    assert len(saved) == 1
    header = (tmp_path / "f.png").read_bytes()[:24]  # the PNG signature, then IHDR: width, height
    return saved[0], struct.unpack(">II", header[16:24])


def visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def test_main_figure_shows_every_panel_and_arm(monkeypatch, tmp_path):
    fig, size = drawn(monkeypatch, tmp_path, lambda pdf, png: figures.main_figure(generations(), pdf, png,
                                                                                arm_order=list(ARMS), resamples=200,
                                                                                confidence=0.9, seed=0))
    axes = visible_axes(fig)
    assert [ax.get_title() for ax in axes] == ["in-domain: in_domain (N = 5 queries)",
                                               "held-out: astronomy (N = 4 queries)", "held-out: law (N = 4 queries)",
                                               "held-out pooled (N = 8 queries)"]
    for ax in axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == list(ARMS)
        assert len(ax.patches) == len(ARMS)  # one bar per arm
    assert {ax.get_ylabel() for ax in axes if ax.get_ylabel()} == {"mean corpus_overlap"}
    assert "90% bootstrap CI" in fig.get_suptitle()
    dpi = figures.RC["savefig.dpi"]
    assert size == tuple(round(v * dpi) for v in fig.get_size_inches())
    assert size[0] > size[1] > 500  # 3 panels wide, 2 high


def test_sweep_figure_shows_each_size_and_the_report(monkeypatch, tmp_path):
    fig, size = drawn(monkeypatch, tmp_path,
                      lambda pdf, png: figures.sweep_figure(sweep_stats(), pdf, png, strategies=SWEEP))
    (ax,) = visible_axes(fig)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["72 pairs (N = 48 held-out queries)", "144 pairs (N = 48 held-out queries)", "report"]
    assert ax.get_xlabel() == "training steps (log scale)" and ax.get_ylabel() == "anchor / random mean corpus_overlap"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["100", "300", "1000"]
    assert "95% CI bands" in ax.get_title()
    assert size == tuple(round(v * figures.RC["savefig.dpi"]) for v in fig.get_size_inches())


def test_ablation_figure_shows_targets_strategies_and_base(monkeypatch, tmp_path):
    fig, size = drawn(monkeypatch, tmp_path, lambda pdf, png: figures.ablation_figure(generations(), pdf, png,
                                                                                    resamples=200, seed=0))
    (ax,) = visible_axes(fig)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["base (no adapter)", "anchor", "random"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["full (Q,K,V,O)", "vo (V,O)", "qk (Q,K)"]
    assert ax.get_xlabel() == "LoRA target modules" and ax.get_ylabel() == "mean corpus_overlap"
    assert len(ax.patches) == 2 * 3  # anchor and random for each target set
    assert size == tuple(round(v * figures.RC["savefig.dpi"]) for v in fig.get_size_inches())


def test_sweep_figure_draws_a_panel_per_strategy_compared_with_the_first(monkeypatch, tmp_path):
    reverse = sweep_stats().assign(b=lambda d: d["b"].str.replace("random", "reverse"), ratio=lambda d: d["ratio"] / 2,
                                   ratio_lo=lambda d: d["ratio_lo"] / 2, ratio_hi=lambda d: d["ratio_hi"] / 2)
    both = pd.concat([sweep_stats(), reverse], ignore_index=True)
    fig, _ = drawn(monkeypatch, tmp_path, lambda pdf, png: figures.sweep_figure(
        both, pdf, png, strategies=["anchor", "random", "reverse"]))
    first, second = visible_axes(fig)
    assert first.get_ylabel() == "anchor / random mean corpus_overlap"
    assert second.get_ylabel() == "anchor / reverse mean corpus_overlap"
    assert [t.get_text() for t in second.get_legend().get_texts()][-1] != "report"  # the report is about the first pair
    assert list(second.get_lines()[0].get_ydata()) == list(sweep_stats().query("train_size == 72")["ratio"] / 2)
    with pytest.raises(InputError, match="no anchor vs reverse rows"):
        figures.sweep_figure(sweep_stats(), tmp_path / "x.pdf", tmp_path / "x.png",
                             strategies=["anchor", "random", "reverse"])
