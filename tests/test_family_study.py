"""A reduced study run end to end (the default target, every rule) on each family's tiny checkpoint.

tests/configs/tiny.yaml with the layers small.yaml and family.yaml (three arms, one held-out domain,
two training jobs), so that six families stay within a few minutes; the DAG has every rule of the
default target.
LLaDA and Dream need transformers 4.x (CI runs them in .venv-remote); each decodes as its own
users decode it: Dream with its card's entropy algorithm, temperature 0.2 and top_p 0.95 on its
time schedule, LLaDA-8B-Instruct's chat layout with classifier-free guidance (cfg_scale 1.0).
"""

import json

import pandas as pd
import pytest
import yaml

from anchormask import checksum, data
from helpers import FAMILY, SMALL, TINY, copy_repo, keep_arms, snakemake
from tiny_families import BUILDERS, FAMILIES, REMOTE, remote_code_runs

pytestmark = pytest.mark.slow


# Each remote family's own decoding (docs/real-bases.md; config/bases/ has the full layers).
DECODING = {"dream": {"remasking": "entropy", "temperature": 0.2, "top_p": 0.95, "schedule": "dream"},
            "llada": {"cfg_scale": 1.0}}


def family_layer(dest, base, family):
    """The last layer of the family's study: its tiny checkpoint and its own decoding."""
    layer = {"base": {"path": str(base), "sha256": checksum.directory_sha256(base),
                      "trust_remote_code": family in REMOTE, "device": "cpu"},
             "generation": DECODING.get(family, {})}
    if family == "llada":
        # the Instruct template end to end (the tiny tokenizer has LLaDA-8B-Instruct's)
        layer["base"]["layout"] = "chat"
    dest.write_text(yaml.safe_dump(layer, sort_keys=False))
    return dest


# BERT's reduced study is tests/test_end_to_end.py (the tiny_study fixture). RoBERTa is BERT's
# architecture with another tokenizer and position offset: tests/test_families.py loads, trains and
# decodes it; a third encoder study would add a minute and a half to CI for no new code path.
@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in ("bert", "roberta")])
def test_reduced_study_runs_to_the_end(family, tmp_path_factory):
    if family in REMOTE and not remote_code_runs():
        pytest.skip("remote code needs transformers 4.x (.venv-remote, envs/requirements-remote.txt)")
    root = tmp_path_factory.mktemp(f"study-{family}")
    base = BUILDERS[family](root / "base")
    repo = keep_arms(copy_repo(root / "repo"))
    layers = [TINY, SMALL, FAMILY, str(family_layer(root / "family.yaml", base, family))]
    snakemake(repo, "--cores", "2", "--configfile", *layers)
    results = repo / "results"
    rows = data.load_generations(results / "generations" / "all.jsonl")
    assert len(rows) == 3 * 4 and {r["arm"] for r in rows} == {"base", "anchor", "random"}
    table = pd.read_parquet(results / "tables" / "generations.parquet")
    assert len(table) == len(rows) and table["overlap"].between(0, 1).all()
    # two comparisons, each in the corpus_overlap table and in the content-word table
    assert (results / "tables" / "headline.md").read_text().count("heldout_anchor_vs") == 2 * 2
    attention = pd.read_parquet(results / "probes" / "attention.parquet")
    assert set(attention["arm"]) == {"base", "anchor"} and attention["mass"].between(0, 1).all()
    assert (results / "probes" / "summary.md").is_file() and (results / "figures" / "main.png").is_file()
    prov = json.loads(next((results / "adapters").glob("anchor_*/provenance.json")).read_text())
    assert prov["runtime"] == "cpu+float32"
    if family == "llada":  # base.layout reached every training and generation job
        logs = [*(results / "logs" / "train").glob("*.log"), *(results / "logs" / "generate").glob("*.log")]
        assert len(logs) >= 5 and all(", chat layout," in log.read_text() for log in logs)
    # every record says it was decoded with the family's own options
    records = [json.loads(line) for line in (results / "generations" / "all.jsonl").read_text().splitlines()]
    assert len(records) == len(rows)
    assert all(r["sampler"] | DECODING.get(family, {}) == r["sampler"] for r in records)
