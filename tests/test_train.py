import dataclasses
import json

import pytest
import torch

from anchormask import fileio, study
from anchormask.model import backbone as bb
from anchormask.model import families
from anchormask.training import train
from helpers import build_tiny_model, cpu_base, tiny_train_settings

pytestmark = pytest.mark.unit

BASE_SHA = "0" * 64


def adapter_tensor_kinds(path, projections: dict[str, str]) -> set[str]:
    """Which projection kinds (q, k, v, o) an adapter's saved tensors touch."""
    from safetensors import safe_open

    kinds = set()
    with safe_open(str(path / "adapter_model.safetensors"), "pt") as fh:
        for name in fh.keys():
            kinds |= {k for k, suffix in projections.items() if f".{suffix}.lora_" in name}
    return kinds


def run_job(model_dir, pairs, out, strategy="anchor", targets="full", steps=4, seed=42, **overrides):
    job = study.AdapterJob(strategy, targets, 6, steps, seed)
    return train.train(cpu_base(model_dir, BASE_SHA), str(pairs), job, tiny_train_settings(**overrides), str(out))


def file_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_same_job_twice_writes_identical_bytes(tiny_model_dir, tiny_pairs, tmp_path):
    run_job(tiny_model_dir, tiny_pairs, tmp_path / "a")
    run_job(tiny_model_dir, tiny_pairs, tmp_path / "b")
    first, second = file_bytes(tmp_path / "a"), file_bytes(tmp_path / "b")
    assert set(first) == {"adapter_config.json", "adapter_model.safetensors", "train_log.tsv", "provenance.json"}
    assert first == second


def test_the_provenance_records_what_each_strategys_masks_supervised(tiny_model_dir, tiny_pairs, tmp_path):
    """anchor masks only the answer, reverse only the question, random both; the sums match the log."""
    realised = {}
    for strategy in ("anchor", "reverse", "random"):
        run_job(tiny_model_dir, tiny_pairs, tmp_path / strategy, strategy=strategy, steps=5)
        record = json.loads((tmp_path / strategy / "provenance.json").read_text())
        realised[strategy] = record["realised"]
        log = (tmp_path / strategy / "train_log.tsv").read_text().splitlines()
        columns = log[0].split("\t")
        rows = [dict(zip(columns, line.split("\t"))) for line in log[1:]]
        assert realised[strategy]["steps"] == len(rows) == 5
        assert realised[strategy]["masked_tokens"] == sum(int(r["masked_tokens"]) for r in rows)
        assert all(int(r["masked_question"]) + int(r["masked_answer"]) == int(r["masked_tokens"]) for r in rows)
    assert realised["anchor"]["masked_question"] == 0 < realised["anchor"]["masked_answer"]
    assert realised["reverse"]["masked_answer"] == 0 < realised["reverse"]["masked_question"]
    assert realised["random"]["masked_question"] > 0 and realised["random"]["masked_answer"] > 0


def test_different_seed_or_strategy_changes_the_adapter(tiny_model_dir, tiny_pairs, tmp_path):
    def weights(name, **job):
        run_job(tiny_model_dir, tiny_pairs, tmp_path / name, **job)
        return (tmp_path / name / "adapter_model.safetensors").read_bytes()

    anchor = weights("anchor")
    assert weights("random", strategy="random") != anchor
    assert weights("seed7", seed=7) != anchor


@pytest.mark.parametrize("targets,kinds", [("full", {"q", "k", "v", "o"}), ("vo", {"v", "o"}),
                                           ("qk", {"q", "k"})])
def test_saved_tensors_touch_exactly_the_target_set(tiny_model_dir, tiny_pairs, tmp_path, targets, kinds):
    record = run_job(tiny_model_dir, tiny_pairs, tmp_path / targets, targets=targets, steps=2)
    assert adapter_tensor_kinds(tmp_path / targets, families.PROJECTIONS["bert"]) == kinds
    # rank 4 x (in 32 + out 32) per module, 2 layers, one module per kind
    assert record["trainable_parameters"] == 4 * 64 * 2 * len(kinds)


def test_adapter_loads_with_peft_and_changes_the_output(tiny_model_dir, tiny_pairs, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForMaskedLM

    run_job(tiny_model_dir, tiny_pairs, tmp_path / "ad", steps=6)
    base = AutoModelForMaskedLM.from_pretrained(tiny_model_dir)
    ids = torch.tensor([[2, 10, 11, 4, 4, 3]])
    before = base(input_ids=ids).logits
    tuned = PeftModel.from_pretrained(base, str(tmp_path / "ad"))
    after = tuned(input_ids=ids).logits
    assert not torch.allclose(before, after)


def test_training_log_has_one_row_per_step_and_masks_only_eligible(tiny_model_dir, tiny_pairs, tmp_path):
    run_job(tiny_model_dir, tiny_pairs, tmp_path / "ad", steps=5)
    lines = (tmp_path / "ad" / "train_log.tsv").read_text().splitlines()
    assert lines[0].split("\t") == list(train.LOG_COLUMNS)
    rows = [line.split("\t") for line in lines[1:]]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5]
    assert all(0.5 <= float(r[1]) <= 0.9 for r in rows)
    provenance = json.loads((tmp_path / "ad" / "provenance.json").read_text())
    assert provenance["base"]["sha256"] == BASE_SHA and provenance["job"]["seed"] == 42
    assert "torch" in provenance["versions"]


def test_lora_target_list_that_matches_nothing_is_an_error(tiny_model_dir):
    backbone = bb.load_backbone(tiny_model_dir, runtime=bb.pick_runtime("cpu"))
    backbone.family = dataclasses.replace(backbone.family, projections={
        **backbone.family.projections, "v": "attention.self.nothing"})
    with pytest.raises(train.AdapterError, match="no module matches projection kind.*v"):
        train.attach_lora(backbone, "vo", tiny_train_settings())


def test_pair_longer_than_seq_len_names_the_pair(tiny_model_dir, tiny_pairs, tmp_path):
    with pytest.raises(fileio.InputError, match="pair-001.*train.seq_len"):
        run_job(tiny_model_dir, tiny_pairs, tmp_path / "ad", seq_len=8)
    assert not (tmp_path / "ad").exists()


def test_warmup_then_constant_learning_rate():
    settings = {"lr": 0.01, "warmup_steps": 4}
    assert [train.lr_at(s, settings) for s in range(6)] == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])


def lora_weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


@pytest.mark.parametrize("loss", ["ce", "llada", "mask_agnostic"])
def test_gradient_accumulation_trains_the_same_adapter_as_the_whole_batch(tiny_pairs, tmp_path, loss):
    model = build_tiny_model(tmp_path / "base", dropout=0.0)  # the base's dropout would draw per micro-batch
    untrained = run_job(model, tiny_pairs, tmp_path / "untrained", steps=0, batch_size=4, loss=loss)
    whole = run_job(model, tiny_pairs, tmp_path / "whole", steps=3, batch_size=4, loss=loss)
    split = run_job(model, tiny_pairs, tmp_path / "split", steps=3, batch_size=4, loss=loss, grad_accum=3)
    want, got = lora_weights(tmp_path / "whole"), lora_weights(tmp_path / "split")
    start = lora_weights(tmp_path / "untrained")
    assert set(got) == set(want) and any(not torch.equal(w, start[n]) for n, w in want.items()) and untrained
    for name, tensor in want.items():  # dropout is 0 (tiny_train_settings): only float rounding differs
        assert torch.allclose(got[name], tensor, rtol=1e-5, atol=1e-7), name
    rows = [(tmp_path / d / "train_log.tsv").read_text().splitlines()[1:] for d in ("whole", "split")]
    for a, b in zip(*rows):  # the same masks (drawn for the whole batch) and the same loss
        a, b = a.split("\t"), b.split("\t")
        assert a[:3] == b[:3] and float(a[3]) == pytest.approx(float(b[3]), rel=1e-5)
    assert whole["settings"].get("grad_accum") is None and split["settings"]["grad_accum"] == 3


def test_gradient_accumulation_beyond_the_batch_is_refused_naming_the_key():
    from anchormask.settings import config
    from helpers import REPO

    cfg = config.load(REPO / "config.yaml")
    cfg["train"]["overrides"] = {"random": {"grad_accum": 64}}
    with pytest.raises(config.ConfigError, match=r"config.yaml: train.overrides.random.grad_accum: 64 micro-batches "
                                                 r"of a batch of 8 pairs \(train.batch_size\); lower it to at most 8"):
        config.validate(cfg)
