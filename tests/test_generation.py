import json

import pytest

from anchormask import data
from anchormask.fileio import InputError
from anchormask.generation import arm_answers, retrieval, sampler
from helpers import REPO, cpu_base

pytestmark = pytest.mark.unit


def test_retrieval_finds_the_gold_statement_and_is_deterministic():
    queries = data.load_queries(REPO / "data" / "queries" / "medicine.jsonl")
    corpus = data.load_corpus(REPO / "data" / "corpora" / "medicine.jsonl")
    first = retrieval.retrieve(queries, corpus, k1=1.5, b=0.75)
    assert first == retrieval.retrieve(queries, corpus, k1=1.5, b=0.75)
    assert sum(r["hit"] for r in first) >= 10


def test_arm_records_follow_the_schema_and_name_their_adapter(tiny_model_dir, trained_adapter, law_retrieval,
                                                              tmp_path):
    adapter = trained_adapter  # anchor_full_n6_s2_seed42
    base = cpu_base(tiny_model_dir)
    settings = sampler.SamplerSettings(answer_len=24, steps=4)
    for arm, adapters in (("base", []), ("anchor", [str(adapter)])):
        out = tmp_path / f"{arm}.jsonl"
        n = arm_answers.run_arm(arm=arm, strategy=None if arm == "base" else "anchor",
                               targets=None if arm == "base" else "full", adapters=adapters,
                               retrieval_files=[str(law_retrieval)], out=str(out), base=base, settings=settings,
                               threads=1)
        rows = data.load_generations(out)
        assert n == len(rows) == 3
        for row in rows:
            assert row["locked_tokens"] > 0 and row["forward_passes"] == 4
            assert row["sampler"]["steps"] == 4 and row["base_sha256"] == "f" * 64
            # ended by itself <=> the end token cut the post-anchor tail short of the slot
            assert row["ended"] == (row["post_anchor_tokens"] < 24 - row["locked_tokens"])
        if arm == "anchor":
            assert {r["adapter_id"] for r in rows} == {"anchor_full_n6_s2_seed42"}
            assert rows[0]["train_steps"] == 2 and len(rows[0]["adapter_sha256"]) == 64
        else:
            assert rows[0]["adapter_id"] is None and rows[0]["train_size"] is None


def test_missing_adapter_is_named_before_generation(tiny_model_dir, law_retrieval, tmp_path):
    base = cpu_base(tiny_model_dir)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty: adapter_config.json is missing.*--forcerun"):
        arm_answers.run_arm(arm="anchor", strategy="anchor", targets="full", adapters=[str(tmp_path / "empty")],
                           retrieval_files=[str(law_retrieval)], out=str(tmp_path / "x.jsonl"), base=base,
                           settings=sampler.SamplerSettings(answer_len=16, steps=2), threads=1)
    assert not (tmp_path / "x.jsonl").exists()


def test_a_truncated_anchor_is_logged(tiny_model_dir, law_retrieval, tmp_path, caplog):
    base = cpu_base(tiny_model_dir)
    caplog.set_level("WARNING", logger="anchormask.generation.arm_answers")
    arm_answers.run_arm(arm="base", strategy=None, targets=None, adapters=[], retrieval_files=[str(law_retrieval)],
                       out=str(tmp_path / "g.jsonl"), base=base,
                       settings=sampler.SamplerSettings(answer_len=4, steps=2), threads=1)
    rows = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    truncated = [r["query_id"] for r in rows if r["anchor_truncated"]]
    lines = [rec.getMessage() for rec in caplog.records if "anchor truncated" in rec.getMessage()]
    assert truncated and len(lines) == len(truncated)
    assert lines[0].startswith(f"query {truncated[0]}: anchor truncated from ") and " to 3 tokens" in lines[0]
