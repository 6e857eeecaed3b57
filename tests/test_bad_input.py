"""Bad settings that used to pass silently: each is refused or made visible, with the key and the fix."""

import copy

import pandas as pd
import pytest

from anchormask import schemas
from anchormask.settings import config
from helpers import REPO


@pytest.fixture(scope="module")
def default():
    return config.load(REPO / "config.yaml")


@pytest.mark.unit
@pytest.mark.parametrize("answer_len", [2, 12, 23])
def test_an_answer_slot_too_short_for_an_answer_is_refused_naming_the_key(default, answer_len):
    cfg = copy.deepcopy(default)
    cfg["generation"]["answer_len"] = answer_len
    with pytest.raises(config.ConfigError) as err:
        config.validate(cfg)
    assert f"config.yaml: generation.answer_len: {answer_len} is out of range" in str(err.value)
    assert "'minimum': 24" in str(err.value)


@pytest.mark.unit
def test_the_answer_slot_minimum_states_its_reason():
    spec = schemas.document("config")["properties"]["generation"]["properties"]["answer_len"]
    assert spec["minimum"] == 24 and "At least 24" in spec["description"] and "median 19" in spec["description"]
    cfg = config.load(REPO / "config.yaml")
    cfg["generation"]["answer_len"] = 24
    config.validate(cfg)  # the minimum itself is accepted


# --------------------------------------------------------------------------- anchors cut to fit the slot

def generations(truncated: dict[tuple[str, str], int]) -> pd.DataFrame:
    """A generations table of two arms × two domains × three queries (two seeds for anchor), with the
    first n queries of (arm, domain) flagged anchor_truncated."""
    rows = []
    for arm, seeds in (("base", [None]), ("anchor", [42, 43])):
        for domain in ("law", "medicine"):
            for q in range(3):
                rows += [{"query_set": "main", "arm": arm, "domain": domain, "query_id": f"{domain}-q{q}",
                          "train_seed": seed, "anchor_truncated": q < truncated.get((arm, domain), 0)}
                         for seed in seeds]
    return pd.DataFrame(rows)


@pytest.mark.unit
def test_truncated_anchors_are_counted_per_arm_and_domain_once_per_query():
    from anchormask.measurement import tables

    counts = tables.anchor_truncations(generations({("base", "law"): 2, ("anchor", "law"): 2}))
    assert counts.to_dict("records") == [
        {"query_set": "main", "arm": "base", "domain": "law", "anchors": 3, "truncated": 2},
        {"query_set": "main", "arm": "base", "domain": "medicine", "anchors": 3, "truncated": 0},
        {"query_set": "main", "arm": "anchor", "domain": "law", "anchors": 3, "truncated": 2},  # 2 seeds, 2 queries
        {"query_set": "main", "arm": "anchor", "domain": "medicine", "anchors": 3, "truncated": 0}]


@pytest.mark.unit
def test_the_headline_says_how_many_anchors_were_truncated():
    from anchormask.measurement import tables
    from anchormask.reporting.markdown import truncation_markdown

    cut = truncation_markdown(tables.anchor_truncations(generations({("base", "law"): 2, ("anchor", "law"): 2})))
    assert cut[0].startswith("**2 of 6 anchors truncated** (the main query set)")
    assert "| arm | law | medicine | anchors truncated |" in cut
    assert "| base | 2 | 0 | 2 of 6 |" in cut and "| anchor | 2 | 0 | 2 of 6 |" in cut
    none = truncation_markdown(tables.anchor_truncations(generations({})))
    assert none[0].startswith("**0 of 6 anchors truncated**") and not any(line.startswith("|") for line in none)


@pytest.mark.unit
def test_no_anchor_of_the_default_study_is_truncated():
    """The default generation.answer_len (48) holds the longest locus statement of every corpus."""
    from transformers import AutoTokenizer

    from anchormask import data, study
    from anchormask.model import layout

    cfg = config.load(REPO / "config.yaml")
    tokenizer = AutoTokenizer.from_pretrained(REPO / cfg["base"]["path"])
    longest = max(len(layout.anchor_ids(tokenizer, r["text"])) for d in study.domains(cfg)
                  for r in data.load_corpus(REPO / data.corpus_path(cfg, d)))
    assert longest <= cfg["generation"]["answer_len"] - 1, longest


# --------------------------------------------------------------------------- adapters damaged after use

def finished_generation(work, adapter_name="anchor_full_n16_s6_seed42"):
    """A results tree as a finished run leaves it: an adapter, a generation made from it, and Snakemake's
    record of that generation's inputs (.snakemake/metadata, named by the output's URL-safe base64)."""
    import json
    from base64 import urlsafe_b64encode

    import torch
    from safetensors.torch import save_file

    from anchormask.model import adapters

    adapter = work / "results" / "adapters" / adapter_name
    adapter.mkdir(parents=True)
    save_file({"lora_A": torch.zeros(4, 8), "lora_B": torch.zeros(8, 4)}, adapter / "adapter_model.safetensors")
    (adapter / "adapter_config.json").write_text("{}\n")
    (adapter / adapters.PROVENANCE).write_text(json.dumps({"files": adapters.file_hashes(adapter)}))
    output = "results/generations/anchor.jsonl"
    (work / output).parent.mkdir(parents=True)
    (work / output).write_text("{}\n")
    meta = work / ".snakemake" / "metadata"
    meta.mkdir(parents=True)
    (meta / urlsafe_b64encode(output.encode()).decode()).write_text(json.dumps(
        {"rule": "generate_arm", "input": [f"results/adapters/{adapter_name}", "results/base/verified.json"]}))
    return adapter


@pytest.mark.unit
def test_a_whole_adapter_gives_no_warning(tmp_path):
    from anchormask.settings import audit

    finished_generation(tmp_path)
    assert audit.damaged_adapters(workdir=tmp_path) == [] and audit.format_damaged([]) == ""


@pytest.mark.unit
@pytest.mark.parametrize("damage, problem", [
    ("delete", "the adapter folder is missing"),
    ("truncate", "adapter_model.safetensors has 391 bytes and a header that describes 392 bytes: truncated or altered"),
    ("no_config", "adapter_config.json missing"),
])
def test_an_adapter_damaged_after_use_is_named_with_the_command_that_rebuilds_it(tmp_path, damage, problem):
    import shutil

    from anchormask.settings import audit

    adapter = finished_generation(tmp_path)
    weights = adapter / "adapter_model.safetensors"
    if damage == "delete":
        shutil.rmtree(adapter)
    elif damage == "truncate":
        assert weights.stat().st_size == 392
        weights.write_bytes(weights.read_bytes()[:-1])
    else:
        (adapter / "adapter_config.json").unlink()
    text = audit.format_damaged(audit.damaged_adapters(workdir=tmp_path))
    assert text.startswith("WARNING: 1 adapter(s) damaged after outputs were made from them")
    assert f"  results/adapters/anchor_full_n16_s6_seed42: {problem}\n" in text
    assert "used by 1 output(s): results/generations/anchor.jsonl" in text
    assert "fix: snakemake --cores 1 --forcerun results/adapters/anchor_full_n16_s6_seed42" in text
    assert "anchormask audit check" in text
