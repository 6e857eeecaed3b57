"""The GPU check (bench/gpu.py, ``python -m bench --only gpu``): its comparisons, lines, JSON and
exit code on the CPU, every step on the CPU as a stand-in device, and on CUDA where there is one."""

from __future__ import annotations

import json
import sys
import types

import pytest

from bench import common, gpu
from helpers import tiny_train_settings


def _slots(*rows: str) -> list[list[int]]:
    return [[int(c) for c in row] for row in rows]


@pytest.mark.unit
def test_token_agreement_counts_sequences_and_tokens():
    same = gpu.token_agreement(_slots("1234", "5678", "9999"), _slots("1234", "5600", "9999"))
    assert same == {"sequences": 3, "identical_sequences": 2, "tokens": 12, "agreeing_tokens": 10,
                    "share": 10 / 12}
    assert gpu.token_agreement([], [])["share"] == 1.0
    with pytest.raises(ValueError, match="same queries and slots"):
        gpu.token_agreement(_slots("123"), _slots("1234"))
    with pytest.raises(ValueError, match="differ in shape"):
        gpu.token_agreement(_slots("1", "2"), _slots("1"))


@pytest.mark.unit
def test_run_step_records_ok_skipped_and_failed_and_goes_on(capsys):
    steps: dict[str, dict] = {}

    def skipped():
        raise gpu.Skipped("needs transformers 4.x")

    def broken():
        raise RuntimeError("CUDA out of memory")

    assert gpu.run_step(steps, "a", lambda: {"x": 1}) == {"x": 1}
    assert gpu.run_step(steps, "b", skipped) is None
    assert gpu.run_step(steps, "c", broken) is None
    assert [s["status"] for s in steps.values()] == ["ok", "skipped", "failed"]
    assert steps["b"]["reason"] == "needs transformers 4.x"
    assert steps["c"]["error"] == "RuntimeError: CUDA out of memory"
    assert gpu.failed_steps(steps) == ["c"]
    out = capsys.readouterr().out
    assert "gpu: c" in out and "failed" in out and "CUDA out of memory" in out


def _finished_steps(identical: int, speedup: float) -> dict[str, dict]:
    agreement = gpu.token_agreement(_slots("12", "34"), _slots("12", "30"))
    return {
        "load.embedded": {"status": "ok", "result": {"load_s": 0.5, "peak_rss_mib": 700.0, "peak_gpu_mib": 21.0,
                                                     "dtype": "cuda+bfloat16", "parameters": 5}},
        "train.embedded": {"status": "ok", "result": {"steps": 30, "loss_first": 5.0, "loss_last": 3.0,
                                                      "tokens_per_s": 9000.0, "peak_gpu_mib": 80.0}},
        "build.tiny_llada": {"status": "skipped", "reason": "needs transformers 4.x"},
        "sampler.float32": {"status": "ok", "result": {"batched_s": 1.0, "reference_s": speedup, "speedup": speedup,
                                                       "agreement": {"sequences": 63,
                                                                     "identical_sequences": identical}}},
        "sampler.bf16": {"status": "ok", "result": {"batched_s": 0.5, "agreement": agreement}},
    }


@pytest.mark.unit
def test_step_lines_judge_speed_and_time_and_report_identity():
    lines = {line.name: line for line in gpu.step_lines(_finished_steps(63, 4.0), wall_s=120.0)}
    # identity is this file's to judge (test_every_step_passes_on_cuda); the line reports it
    assert lines["gpu.sampler.identical"].status == "INFO" and lines["gpu.sampler.identical"].value == 63
    assert lines["gpu.sampler.speedup"].status == "PASS"
    assert lines["gpu.wall"].status == "PASS"
    assert lines["gpu.sampler.bf16.agree"].value == pytest.approx(75.0)
    assert lines["gpu.sampler.bf16.agree"].status == "INFO"
    assert "loss 5.000 -> 3.000 in 30 steps" in lines["gpu.train.embedded"].note
    assert lines["gpu.build.tiny_llada"].unit == "skipped" and lines["gpu.build.tiny_llada"].status == "INFO"
    worse = {line.name: line for line in gpu.step_lines(_finished_steps(62, 2.0), wall_s=400.0)}
    assert [worse[n].status for n in ("gpu.sampler.speedup", "gpu.wall")] == ["MISS"] * 2
    assert worse["gpu.sampler.identical"].value == 62


@pytest.mark.unit
def test_payload_is_json_and_names_the_failed_steps():
    steps = _finished_steps(63, 4.0) | {"train.embedded.checkpointing": {"status": "failed", "error": "boom"}}
    payload = gpu.payload_of({"device": "cuda", "name": "NVIDIA H200"}, steps, 12.345)
    back = json.loads(json.dumps(payload))
    assert back["failed_steps"] == ["train.embedded.checkpointing"] and back["wall_s"] == 12.35
    assert back["device"]["name"] == "NVIDIA H200" and back["steps"]["sampler.float32"]["status"] == "ok"


@pytest.mark.unit
def test_a_built_base_is_recorded_as_json_and_handed_on(tmp_path, capsys):
    steps: dict[str, dict] = {}
    base = gpu.built(steps, "build.tiny_llada", lambda: gpu.Base("llada", tmp_path / "llada", trust_remote_code=True))
    assert base == gpu.Base("llada", tmp_path / "llada", trust_remote_code=True)
    back = json.loads(json.dumps(gpu.payload_of({}, steps, 1.0)))  # the step's record, not the object
    assert back["steps"]["build.tiny_llada"]["result"] == {"name": "llada", "path": str(tmp_path / "llada")}

    def skipped():
        raise gpu.Skipped("needs transformers 4.x")

    assert gpu.built(steps, "build.other", skipped) is None and steps["build.other"]["status"] == "skipped"


def _fake_torch(available: bool, cuda: str | None = None):
    return types.SimpleNamespace(__version__="2.13.0+cpu", version=types.SimpleNamespace(cuda=cuda),
                                 cuda=types.SimpleNamespace(is_available=lambda: available))


@pytest.mark.unit
def test_no_cuda_reason_says_why_in_one_line():
    assert gpu.no_cuda_reason(_fake_torch(True, "12.8")) is None
    reason = gpu.no_cuda_reason(_fake_torch(False))
    assert "no CUDA device" in reason and "CPU-only build" in reason and "\n" not in reason
    assert "CUDA 12.8" in gpu.no_cuda_reason(_fake_torch(False, "12.8"))


@pytest.mark.unit
def test_main_without_cuda_prints_one_line_and_exits_0(monkeypatch, capsys):
    import torch

    from bench import __main__ as bench_main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_main.main(["--only", "gpu"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("gpu: no CUDA device")


@pytest.mark.unit
def test_main_exits_nonzero_after_writing_a_result_with_failed_steps(monkeypatch, tmp_path, capsys):
    from bench import __main__ as bench_main

    steps = _finished_steps(63, 4.0) | {"sampler.bf16": {"status": "failed", "error": "boom", "seconds": 1.0}}
    fake = types.SimpleNamespace(run=lambda threads=None: (gpu.payload_of({}, steps, 1.0), gpu.step_lines(steps, 1.0)))
    monkeypatch.setattr(bench_main, "without_gpu", lambda names: names)
    monkeypatch.setitem(sys.modules, "fake_gpu_benchmark", fake)
    monkeypatch.setitem(bench_main.BENCHMARKS, "gpu", "fake_gpu_benchmark")
    monkeypatch.setattr(common, "REPO", tmp_path)
    monkeypatch.setattr(common, "RESULTS", tmp_path / "bench" / "results")
    monkeypatch.setattr(common, "FRESH", tmp_path / "results" / "bench")
    monkeypatch.setattr(common, "base_identity", lambda cfg: {"sha256": "ab" * 32})
    assert bench_main.main(["--only", "gpu"]) == 1
    written = json.loads((tmp_path / "results" / "bench" / "gpu.json").read_text())
    assert written["failed_steps"] == ["sampler.bf16"] and written["lines"]
    assert "failed steps sampler.bf16" in capsys.readouterr().out
    assert not (tmp_path / "bench" / "results").exists(), "a run without --record left the tracked record alone"
    assert bench_main.main(["--only", "gpu", "--record"]) == 1
    tracked = json.loads((tmp_path / "bench" / "results" / "gpu.json").read_text())
    assert tracked["failed_steps"] == ["sampler.bf16"]


def _retrieved(law_retrieval) -> list[dict]:
    return [json.loads(line) for line in law_retrieval.read_text().splitlines()]


def _checks(device, tiny_model_dir, tiny_pairs, law_retrieval, bases_extra=()):
    from anchormask import data
    from anchormask.generation import sampler

    settings = sampler.SamplerSettings(answer_len=8, steps=4, temperature=0.0)
    bases = [gpu.Base("tiny", tiny_model_dir), *bases_extra]
    return gpu.run_checks(device, bases, data.load_pairs(tiny_pairs), tiny_train_settings(),
                          _retrieved(law_retrieval), settings, train_steps=3)


@pytest.mark.unit
def test_every_step_runs_on_the_cpu_as_a_stand_in(tiny_model_dir, tiny_pairs, law_retrieval):
    def no_llada():
        raise gpu.Skipped("needs transformers 4.x")

    steps = _checks("cpu", tiny_model_dir, tiny_pairs, law_retrieval, [no_llada])
    assert gpu.failed_steps(steps) == [], steps
    assert list(steps) == ["load.tiny", "train.tiny", "train.tiny.checkpointing", "build.tiny_llada",
                           "sampler.float32", "sampler.bf16", "sampler.cpu_float32"]
    train = steps["train.tiny"]["result"]
    assert train["steps"] == 3 and train["tokens_per_s"] > 0 and train["peak_gpu_mib"] is None
    # checkpointing recomputes the same activations: the same losses
    assert steps["train.tiny.checkpointing"]["result"]["loss_last"] == pytest.approx(train["loss_last"], rel=1e-4)
    f32 = steps["sampler.float32"]["result"]
    assert "slots" not in f32 and f32["agreement"]["identical_sequences"] == f32["agreement"]["sequences"] == 3
    assert steps["sampler.cpu_float32"]["result"]["agreement"]["share"] == 1.0  # the same device twice
    assert 0.0 <= steps["sampler.bf16"]["result"]["agreement"]["share"] <= 1.0
    assert steps["load.tiny"]["result"]["dtype"] == "cpu+float32"


@pytest.mark.gpu
def test_every_step_passes_on_cuda(tiny_model_dir, tiny_pairs, law_retrieval):
    steps = _checks("cuda", tiny_model_dir, tiny_pairs, law_retrieval)
    assert gpu.failed_steps(steps) == [], steps
    assert steps["load.tiny"]["result"]["dtype"] == "cuda+bfloat16"
    assert steps["load.tiny"]["result"]["peak_gpu_mib"] > 0
    f32 = steps["sampler.float32"]["result"]["agreement"]
    assert f32["identical_sequences"] == f32["sequences"]
