"""Samples beside the numbers, and the study-on-one-page report body."""

from types import SimpleNamespace

import pandas as pd
import pytest

from anchormask.fileio import InputError
from anchormask.reporting import paper, samples
from anchormask.settings import config
from helpers import REPO

pytestmark = pytest.mark.unit

ARMS = ["base", "anchor"]


def generation(arm, query_id, domain, seed, text):
    return {"arm": arm, "query_id": query_id, "domain": domain, "train_seed": seed, "post_anchor_text": text,
            "query": f"What about {query_id}?", "statement": f"Statement | {query_id}."}


def study():
    records = []
    for domain in ("law", "astro"):
        for q in ("q3", "q1", "q2"):
            qid = f"{domain}-{q}"
            records.append(generation("base", qid, domain, None, "the the the"))
            records += [generation("anchor", qid, domain, seed, f"seed {seed} text | {qid}") for seed in (43, 42)]
    table = pd.DataFrame([{**{k: r[k] for k in ("arm", "query_id", "domain")},
                           "train_seed": pd.NA if r["train_seed"] is None else r["train_seed"],
                           "word_tokens": 3, "overlap": 0.5, "content_overlap": 0.25, "distinct_2": float("nan"),
                           "adjacent_repeats": 1.0, "ended": r["arm"] == "base"} for r in records])
    table["train_seed"] = table["train_seed"].astype("Int64")
    return records, table


def test_first_two_query_ids_per_domain_lowest_seed_side_by_side():
    records, table = study()
    assert samples.chosen_queries(table, ["law", "astro"], 2) == [
        ("law", "law-q1"), ("law", "law-q2"), ("astro", "astro-q1"), ("astro", "astro-q2")]
    text = samples.samples_markdown(records, table, ARMS, ["law", "astro"])
    assert text.index("## law: law-q1") < text.index("## law: law-q2") < text.index("## astro: astro-q1")
    assert "q3" not in text
    assert "| anchor | seed 42 text \\| law-q1 | 3 | 0.50 | 0.25 | n/a | 1.00 | no |" in text
    assert "| base | the the the | 3 | 0.50 | 0.25 | n/a | 1.00 | yes |" in text
    assert "seed 43" not in text and "**Locked anchor:** Statement \\| law-q1." in text


def test_an_arm_without_the_query_is_an_error():
    records, table = study()
    with pytest.raises(InputError, match="arm 'random' has no generation for query 'law-q1'"):
        samples.samples_markdown(records, table, ["random"], ["law"])


def test_paper_page_orders_sections_and_inlines_figures(tmp_path):
    png = tmp_path / "main.png"
    png.write_bytes(b"\x89PNG fake")
    caption = (REPO / "workflow" / "report" / "figure.rst").read_text()
    page = paper.paper_html("# Headline results\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", "# Samples\n\ntext",
                            [("main", png)], caption, "# Probes\n\n- one", None, confidence=0.95)
    order = [page.index(t) for t in ("1. Headline results", "2. Samples", "3. Figures", "4. Base evaluation",
                                     "5. Mechanism probes")]
    assert order == sorted(order)
    assert '<div class="am-scroll"><table>' in page and "<td>1</td>" in page
    assert "data:image/png;base64," in page and "Mean corpus_overlap of the post-anchor text per generation" in page
    assert "Not available" in page and "<h1>" not in page
    with_eval = paper.paper_html("x", "y", [], caption, "z", "# Base\n\nNLL 3.2", confidence=0.95)
    assert "NLL 3.2" in with_eval and "Not available" not in with_eval
    assert paper.paper_html("<script>x</script>", "", [], caption, "", None, confidence=0.95).count("<script>") == 0


def test_captions_state_the_configured_interval_level(tmp_path):
    """The captions read statistics.confidence: the page's and the report's (Jinja over snakemake.config)."""
    import jinja2

    png = tmp_path / "main.png"
    png.write_bytes(b"\x89PNG fake")
    caption = (REPO / "workflow" / "report" / "figure.rst").read_text()
    page = paper.paper_html("", "", [("main", png), ("sweep", png)], caption, "", None, confidence=0.9)
    assert "90% bootstrap confidence intervals" in page and "90% paired-bootstrap bands" in page
    assert "95%" not in page
    cfg = config.load(REPO / "config.yaml")
    cfg["statistics"]["confidence"] = 0.99
    for template in sorted((REPO / "workflow" / "report").glob("*.rst")):
        text = template.read_text()
        wildcards = SimpleNamespace(figure="ablation")
        rendered = jinja2.Template(text).render(snakemake=SimpleNamespace(wildcards=wildcards, config=cfg))
        assert "95%" not in rendered, template.name
        assert ("99%" in rendered) == ("confidence" in text), template.name
