"""The reduced study run end to end: what lands in results/ and whether it holds together."""

import itertools
import json
import re
import unicodedata

import numpy as np
import pandas as pd
import pytest
import yaml

from anchormask import data
from anchormask.settings import config as study_config
from anchormask.settings.layers import merge
from helpers import TINY, snakemake

pytestmark = pytest.mark.slow


def tiny_config(repo) -> dict:
    """config.yaml with the reduced study's layer over it, as the run merged them."""
    return merge(yaml.safe_load((repo / "config.yaml").read_text()), yaml.safe_load((repo / TINY).read_text()))


def test_every_arm_answers_every_query_with_the_anchor_locked(tiny_study):
    cfg = yaml.safe_load((tiny_study / "config.yaml").read_text())
    tiny = yaml.safe_load((tiny_study / TINY).read_text())
    per_domain = tiny["data"]["max_queries_per_domain"]
    rows = data.load_generations(tiny_study / "results" / "generations" / "all.jsonl")
    held_out = len(cfg["data"]["held_out"])
    n_queries = {"main": per_domain * (1 + held_out), "alt": per_domain * held_out}  # the second set: held-out only
    for query_set, n in n_queries.items():
        assert len([r for r in rows if r["query_set"] == query_set]) == len(cfg["arms"]) * n
    assert len(rows) == len(cfg["arms"]) * sum(n_queries.values())
    assert {r["arm"] for r in rows} == set(cfg["arms"])
    assert all(r["split"] == "held_out" for r in rows if r["query_set"] == "alt")
    for r in rows:
        assert r["generated_text"].startswith(r["statement"].lower().rstrip(".")[:20])
        assert r["sampler"]["steps"] == tiny["generation"]["steps"]
        assert (r["adapter_id"] is None) == (r["arm"] == "base")


def test_generations_table_has_one_row_per_generation(tiny_study):
    table = pd.read_parquet(tiny_study / "results" / "tables" / "generations.parquet")
    lines = (tiny_study / "results" / "generations" / "all.jsonl").read_text().splitlines()
    assert len(table) == len(lines)
    assert table["overlap"].between(0, 1).all()
    assert set(table["split"]) == {"in_domain", "held_out"}
    assert table["content_overlap"].between(0, 1).all() and table["ended"].dtype == bool
    assert (table["content_words"] <= table["word_tokens"]).all()


def test_headline_figures_and_report_exist(tiny_study):
    cfg = tiny_config(tiny_study)
    comparisons = study_config.comparisons(cfg)
    second_set = [c for c in comparisons if c.get("split") != "in_domain"]  # the held-out ones: split or domain
    headline = (tiny_study / "results" / "tables" / "headline.md").read_text()
    assert "heldout_anchor_vs_random" in headline
    for name in ("main", "sweep", "ablation"):
        assert (tiny_study / "results" / "figures" / f"{name}.pdf").stat().st_size > 1000
        assert (tiny_study / "results" / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert f"content-word overlap (Holm over m = {len(comparisons)})" in headline
    # the second query set: the held-out comparisons beside the first set's
    both = headline[headline.index("## Both query sets"):headline.index("## The same comparisons")]
    assert f"(second set: Holm over m = {len(second_set)})" in both and "| heldout_anchor_vs_random |" in both
    assert "indomain_anchor_vs_random" not in both
    samples = (tiny_study / "results" / "tables" / "samples.md").read_text()
    assert (samples.count("\n## ") == cfg["report"]["samples_per_domain"] * (1 + len(cfg["data"]["held_out"]))
            and "| random-qk |" in samples)
    snakemake(tiny_study, "--configfile", TINY, "--report", "results/report.html")
    html = (tiny_study / "results" / "report.html").read_text(errors="replace")
    assert "sweep.png" in html and "headline.md" in html and "samples.md" in html
    # every trained adapter's curve: one panel per arm with an adapter and one per sweep strategy
    assert (tiny_study / "results" / "figures" / "training.png").read_bytes()[:4] == b"\x89PNG"
    page = (tiny_study / "results" / "report" / "paper.html").read_text()
    assert 'alt="training.png"' in page and "Training curves: each adapter's masked-token loss" in page
    # the landing page is the study on one page, sections in order
    order = [html.find(t) for t in ("1. Headline results", "2. Samples", "3. Figures", "4. Base evaluation",
                                     "5. Mechanism probes")]
    assert -1 not in order and order == sorted(order)


def _words(text: str) -> list[str]:
    """Word tokens as docs/protocol.md "Metric" defines them, written here apart from anchormask.measurement.metric."""
    folded = unicodedata.normalize("NFKD", text.lower())
    return re.findall(r"[^\W_]+", "".join(ch for ch in folded if not unicodedata.combining(ch)))


def _held_out_overlaps(study, arms: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Arm -> query id -> corpus_overlap of its post-anchor text, main query set, held-out queries,
    from results/generations/all.jsonl and the corpora (one training seed: one generation per query)."""
    corpora = study / yaml.safe_load((study / "config.yaml").read_text())["data"]["corpora_dir"]
    vocab: dict[str, set[str]] = {}
    out: dict[str, dict[str, float]] = {arm: {} for arm in arms}
    for line in (study / "results" / "generations" / "all.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["arm"] not in arms or rec["query_set"] != "main" or rec["split"] != "held_out":
            continue
        if rec["domain"] not in vocab:
            statements = (corpora / f"{rec['domain']}.jsonl").read_text().splitlines()
            vocab[rec["domain"]] = {w for s in statements for w in _words(json.loads(s)["text"])}
        words = _words(rec["post_anchor_text"])
        hits = sum(w in vocab[rec["domain"]] for w in words)
        assert rec["query_id"] not in out[rec["arm"]]
        out[rec["arm"]][rec["query_id"]] = hits / len(words) if words else 0.0
    return out


def test_headline_value_recomputed_from_the_generations(tiny_study):
    """The held-out anchor/random comparison recomputed from the generations with plain numpy: the means,
    their ratio and the exact two-sided sign-flip p-value (N <= 16), against the statistics and the headline."""
    overlaps = _held_out_overlaps(tiny_study, ("anchor", "random"))
    queries = sorted(overlaps["anchor"])
    cfg = tiny_config(tiny_study)  # every held-out domain's first queries
    assert queries == sorted(overlaps["random"])
    assert len(queries) == cfg["data"]["max_queries_per_domain"] * len(cfg["data"]["held_out"])
    a = np.array([overlaps["anchor"][q] for q in queries])
    b = np.array([overlaps["random"][q] for q in queries])
    d = a - b
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(d))))
    p_exact = float(np.mean(np.abs(signs @ d) >= abs(d.sum()) * (1 - 1e-9)))

    stats = pd.read_parquet(tiny_study / "results" / "stats" / "comparisons.parquet").set_index("name")
    row = stats.loc["heldout_anchor_vs_random"]
    assert int(row["n"]) == len(queries)
    assert row["mean_a"] == pytest.approx(a.mean(), abs=1e-12)
    assert row["mean_b"] == pytest.approx(b.mean(), abs=1e-12)
    assert row["ratio"] == pytest.approx(a.mean() / b.mean(), rel=1e-12)
    assert row["p_perm"] == pytest.approx(p_exact, abs=1e-12)

    headline = (tiny_study / "results" / "tables" / "headline.md").read_text()
    cells = next(line for line in headline.splitlines() if line.startswith("| heldout_anchor_vs_random |")).split("|")
    # | comparison | selection | a | b | N | mean a | mean b | a/b [CI] | a−b [CI] | P(a>b) | p | p Holm | report |
    assert cells[6].strip() == f"{a.mean():.3f}" and cells[7].strip() == f"{b.mean():.3f}"
    assert cells[8].strip().startswith(f"{a.mean() / b.mean():.2f}x [")
    assert cells[11].strip() == f"{p_exact:.4f}"


def test_statistics_samples_and_page_rebuild_byte_identical(tiny_study):
    outputs = ["results/stats/comparisons.parquet", "results/stats/content_comparisons.parquet",
               "results/stats/comparisons_alt.parquet",
               "results/tables/headline.md", "results/tables/samples.md", "results/report/paper.html"]
    before = {o: (tiny_study / o).read_bytes() for o in outputs}
    snakemake(tiny_study, "--cores", "2", "--configfile", TINY, "--forcerun", "statistics",
              "samples", "--", "results/report/paper.html")
    assert {o: (tiny_study / o).read_bytes() for o in outputs} == before


def test_no_temporary_leftovers(tiny_study):  # nothing left to do: tests/test_audit.py, scenario 1
    leftovers = [p for p in (tiny_study / "results").rglob(".tmp-*")]
    assert leftovers == []


def test_adapter_provenance_records_seed_versions_and_base(tiny_study):
    cfg = yaml.safe_load((tiny_study / "config.yaml").read_text())
    for folder in (tiny_study / "results" / "adapters").iterdir():
        prov = json.loads((folder / "provenance.json").read_text())
        assert prov["base"]["sha256"] == cfg["base"]["sha256"]
        assert prov["job"]["id"] == folder.name and prov["versions"]["peft"]


def test_regenerating_gives_byte_identical_jsonl(tiny_study):
    target = tiny_study / "results" / "generations" / "all.jsonl"
    before = target.read_bytes()
    snakemake(tiny_study, "--cores", "2", "--configfile", TINY, "--forcerun", "generate_arm",
              "--", "results/generations/all.jsonl")
    assert target.read_bytes() == before
