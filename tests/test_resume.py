"""A training run continued from a shorter run's state (anchormask.training.resume) writes the adapter a run
from step 0 writes, byte for byte; the study resumes each run from its longest shorter adapter."""

from __future__ import annotations

import pytest

from anchormask import study
from anchormask.fileio import InputError
from anchormask.settings import config as study_config
from anchormask.training import train
from helpers import REPO, cpu_base, tiny_train_settings

BASE_SHA = "ab" * 32


def _train(model_dir, pairs, out, steps, state_out=None, resume_from=None, **overrides):
    job = study.AdapterJob("anchor", "full", 5, steps, 42)  # 5 pairs in batches of 3: a partial batch per epoch
    return train.train(cpu_base(model_dir, BASE_SHA), str(pairs), job, tiny_train_settings(**overrides), str(out),
                       state_out=str(state_out) if state_out else None,
                       resume_from=str(resume_from) if resume_from else None)


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.unit
def test_a_continued_run_writes_the_same_adapter_and_state_as_one_from_step_0(tiny_model_dir, tiny_pairs, tmp_path):
    # LoRA dropout and the tiny BERT's own dropout draw from the global generator: its state must carry over too.
    _train(tiny_model_dir, tiny_pairs, tmp_path / "straight", 7, tmp_path / "straight.st", dropout=0.1)
    _train(tiny_model_dir, tiny_pairs, tmp_path / "short", 3, tmp_path / "short.st", dropout=0.1)
    _train(tiny_model_dir, tiny_pairs, tmp_path / "long", 7, tmp_path / "long.st", resume_from=tmp_path / "short.st",
           dropout=0.1)
    straight, continued = _files(tmp_path / "straight"), _files(tmp_path / "long")
    assert set(straight) == {"adapter_config.json", "adapter_model.safetensors", "provenance.json", "train_log.tsv"}
    assert straight == continued
    assert (tmp_path / "straight.st").read_bytes() == (tmp_path / "long.st").read_bytes()
    # the 3-step adapter differs (the comparison above could fail), and its log is the longer one's start
    assert _files(tmp_path / "short")["adapter_model.safetensors"] != straight["adapter_model.safetensors"]
    log = straight["train_log.tsv"].decode().splitlines()
    assert len(log) == 8 and _files(tmp_path / "short")["train_log.tsv"].decode().splitlines() == log[:4]


@pytest.mark.unit
def test_a_state_of_another_run_is_refused_naming_the_file_and_what_differs(tiny_model_dir, tiny_pairs, tmp_path):
    _train(tiny_model_dir, tiny_pairs, tmp_path / "short", 2, tmp_path / "short.st")
    with pytest.raises(InputError) as err:
        _train(tiny_model_dir, tiny_pairs, tmp_path / "long", 4, resume_from=tmp_path / "short.st", lr=0.02)
    assert str(tmp_path / "short.st") in str(err.value) and "settings" in str(err.value)
    assert "Delete the file and rerun" in str(err.value)
    assert not (tmp_path / "long").exists()
    with pytest.raises(train.AdapterError, match="2 steps into its run, this job trains 2"):  # not shorter: refused
        _train(tiny_model_dir, tiny_pairs, tmp_path / "long", 2, resume_from=tmp_path / "short.st")
    (tmp_path / "broken.st").write_bytes(b"not a state")
    with pytest.raises(InputError, match="not a readable training state"):
        _train(tiny_model_dir, tiny_pairs, tmp_path / "long", 4, resume_from=tmp_path / "broken.st")


@pytest.mark.unit
def test_the_study_resumes_each_run_from_its_longest_shorter_adapter():
    config = study_config.load(REPO / "config.yaml")
    sweep = [study.AdapterJob("anchor", "full", 72, steps, 42) for steps in (100, 300, 1000)]
    assert [study.resumes_from(config, j) for j in sweep] == [None, sweep[0], sweep[1]]
    # an adapter outside the study's list still continues the study's shorter run
    assert study.resumes_from(config, study.AdapterJob("anchor", "full", 72, 500, 42)) == sweep[1]
    # other targets, sizes, seeds and strategies are other runs
    for other in (study.AdapterJob("anchor", "vo", 144, 300, 42), study.AdapterJob("reverse", "full", 144, 300, 42),
                  study.AdapterJob("anchor", "full", 100, 1000, 42), study.AdapterJob("anchor", "full", 72, 1000, 7)):
        assert study.resumes_from(config, other) is None, other
    trained = study.trained_adapters(config)
    assert len(trained) == len(set(trained)) == 17
    assert sum(j.steps - (study.resumes_from(config, j) or study.AdapterJob("", "", 0, 0, 0)).steps
               for j in trained) == 5 * 300 + 4 * 1000


@pytest.mark.unit
def test_a_run_goes_on_to_the_most_steps_the_study_trains_it_to():
    config = study_config.load(REPO / "config.yaml")
    assert study.run_length(config, study.AdapterJob("anchor", "full", 72, 100, 42)) == 1000
    assert study.run_length(config, study.AdapterJob("anchor", "vo", 144, 300, 42)) == 300
    assert study.run_length(config, study.AdapterJob("anchor", "vo", 144, 2000, 42)) == 2000
