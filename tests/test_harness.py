"""The lm-eval model `anchormask` (anchormask.harness): lm-eval's evaluator on the project's two tasks, the
Monte-Carlo log-likelihood against a hand computation, stop sequences, adapters, and `anchormask lm-eval`."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys

import pytest

from helpers import REPO, cpu_base, flip_one_byte
from tiny_families import BUILDERS, REMOTE, remote_code_runs

pytestmark = pytest.mark.unit


def make_lm(path, family=None, **setup):
    from anchormask.generation import sampler
    from anchormask.harness.model import AnchormaskLM, Setup

    base = cpu_base(path)
    if family in REMOTE:
        from anchormask.model.modeljob import Base

        base = Base.from_config({"path": str(path), "sha256": "f" * 64, "device": "cpu", "trust_remote_code": True})
    settings = sampler.SamplerSettings(answer_len=24, steps=8)
    return AnchormaskLM(Setup(**{"base": base, "settings": settings, "mc_num": 8, "batch_size": 4, "seed": 0,
                                 **setup}))


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return make_lm(tiny_model_dir)


def instances(kind, args):
    from lm_eval.api.instance import Instance

    return [Instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args)]


def test_the_evaluator_runs_both_local_tasks_on_a_tiny_model(lm):
    from lm_eval import simple_evaluate

    from anchormask.harness import tasks

    out = simple_evaluate(model=lm, tasks=list(tasks.TASKS), task_manager=tasks.task_manager(), limit=4)
    cloze, locus = out["results"]["anchormask_cloze"], out["results"]["anchormask_locus"]
    assert 0 <= cloze["acc,none"] <= 1 and "acc_stderr,none" in cloze and 0 <= cloze["acc_norm,none"] <= 1
    assert 0 <= locus["exact_match,none"] <= 1 and 0 <= locus["gold_overlap,none"] <= 1
    print(f"tiny BERT, 4 items: cloze acc {cloze['acc,none']:.3f}, locus gold_overlap {locus['gold_overlap,none']:.3f}")


def test_loglikelihood_is_deterministic_from_the_seed_and_independent_of_order(lm, tiny_model_dir):
    pairs = [("Fill in the blank: the ____ flows north.\nAnswer:", " river"),
             ("Which river flows into the sea?", " the river flows north into the sea")]
    first = lm.loglikelihood(instances("loglikelihood", pairs))
    assert lm.loglikelihood(instances("loglikelihood", pairs[::-1])) == first[::-1]
    other = make_lm(tiny_model_dir, seed=1)
    assert other.loglikelihood(instances("loglikelihood", pairs))[1][0] != first[1][0]
    assert all(math.isfinite(ll) and ll < 0 and isinstance(greedy, bool) for ll, greedy in first)


def _direct_logp(lm, ids, positions):
    """log p of each token of ``ids`` at ``positions`` with those positions masked: one plain forward."""
    import torch

    masked = list(ids)
    for p in positions:
        masked[p] = lm.backbone.ids.mask
    with torch.no_grad():
        logits = lm.backbone.model(input_ids=torch.tensor([masked])).logits[0]
    logp = torch.log_softmax(logits.float(), -1)
    return [float(logp[p, ids[p]]) for p in positions]


def test_loglikelihood_agrees_with_a_hand_computation(lm):
    """One token: every sample masks it, weight 1, so the estimate is exactly log p(token | context). Two
    tokens, two samples of one batch: LLaDA's stratified counts are 1 and 2, so the estimate is
    (log p(both masked) / 1 + log p(one masked) / (1/2)) / 2 for one of the two single positions."""
    prompt, target = lm.encode_pair("Which river flows into the sea?", " river")
    assert len(target) == 1
    (alone,) = _direct_logp(lm, prompt + target, [len(prompt)])
    assert lm.loglikelihood(instances("loglikelihood", [("Which river flows into the sea?", " river")]))[0][0] \
        == pytest.approx(alone, abs=1e-5)
    prompt, target = lm.encode_pair("Which river flows into the sea?", " the river")
    seq, first, second = prompt + target, len(prompt), len(prompt) + 1
    both = sum(_direct_logp(lm, seq, [first, second]))
    singles = [_direct_logp(lm, seq, [p])[0] for p in (first, second)]
    two = make_lm(lm.setup.base.path, mc_num=2, batch_size=2)
    estimate = two.loglikelihood(instances("loglikelihood", [("Which river flows into the sea?", " the river")]))
    assert min(abs(estimate[0][0] - (both + 2 * s) / 2) for s in singles) < 1e-4


def test_the_greedy_flag_says_whether_greedy_decoding_writes_the_continuation(lm):
    from anchormask.generation import sampler

    prompt = lm.prompt("Which river flows into the sea?", 2)
    slot = sampler.generate(lm.backbone, lm.runtime, [sampler.Request("g", prompt, [])],
                            sampler.SamplerSettings(answer_len=2, steps=2))[0].slot_ids
    other = [slot[0], slot[1] + 1 if slot[1] + 1 < lm.tokenizer.vocab_size else slot[1] - 1]
    assert lm.greedy_matches([(prompt, slot), (prompt, other)]) == [True, False]


def test_generate_until_stops_at_the_tasks_stop_sequence(lm):
    from anchormask.harness.model import cut_at_stops

    context = "Which river flows into the sea?"
    full = lm.generate_until(instances("generate_until", [(context, {"until": [], "max_gen_toks": 24})]))[0]
    words = full.split()
    assert len(words) >= 3, full
    stop = " " + words[2]
    cut = lm.generate_until(instances("generate_until", [(context, {"until": [stop], "max_gen_toks": 24})]))[0]
    assert cut == full[: full.index(stop)] and stop not in cut
    assert len(lm.tokenizer(lm.generate_until(instances("generate_until", [(context, {"until": [], "max_gen_toks": 3})]
                                                       ))[0], add_special_tokens=False)["input_ids"]) <= 3
    assert cut_at_stops("a b\nc", ["\n", "b"]) == "a " and cut_at_stops("abc", "z") == "abc"


def test_an_altered_adapter_is_refused_with_the_audits_message(tiny_model_dir, trained_adapter, tmp_path):
    from anchormask.fileio import InputError
    from anchormask.harness.model import AnchormaskLM

    altered = tmp_path / "anchor_full_n6_s2_seed42"
    shutil.copytree(trained_adapter, altered)
    flip_one_byte(altered / "adapter_model.safetensors")
    with pytest.raises(InputError, match=r"adapter_model.safetensors .* altered or truncated since.*--forcerun"):
        AnchormaskLM(base=str(tiny_model_dir), adapter=str(altered), device="cpu")
    intact = AnchormaskLM(base=str(tiny_model_dir), adapter=str(trained_adapter), device="cpu", mc_num=2)
    assert intact.setup.adapter == str(trained_adapter) and intact.setup.mc_num == 2


def test_anchormask_lm_eval_runs_lm_evals_command_line_from_any_directory(tiny_model_dir, tmp_path):
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "anchormask.cli", "lm-eval", "--tasks", "anchormask_cloze",
                           "--model", "anchormask", "--model_args", f"base={tiny_model_dir},mc_num=4,device=cpu",
                           "--limit", "4", "--output_path", str(tmp_path / "out")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "anchormask_cloze" in proc.stdout and "acc" in proc.stdout
    assert list((tmp_path / "out").rglob("results_*.json"))


def docs_command() -> list[str]:
    """The command block of docs/lm-eval.md, as a shell reads it."""
    import re
    import shlex

    page = (REPO / "docs" / "lm-eval.md").read_text()
    block = re.search(r"```bash\n(anchormask lm-eval .+?)\n```", page, flags=re.S).group(1)
    return shlex.split(block.replace("\\\n", " "))


def test_the_docs_lm_eval_command_runs_as_written_on_the_cpu(tiny_model_dir, trained_adapter, tmp_path):
    """docs/lm-eval.md's command, without --device on a machine without a GPU: the files it names stand in
    small (data/base is the tiny model, the adapter one trained on it) and --limit is 2."""
    command = docs_command()
    assert command[:2] == ["anchormask", "lm-eval"] and "--device" not in command
    args = dict(pair.split("=", 1) for pair in command[command.index("--model_args") + 1].split(","))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "base").symlink_to(tiny_model_dir)
    shutil.copytree(trained_adapter, tmp_path / args["adapter"])
    command[command.index("--limit") + 1] = "2"
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "anchormask.cli", *command[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "anchormask_cloze" in proc.stdout and "anchormask_locus" in proc.stdout
    assert "on cpu" in proc.stderr.lower() or "device: cpu" in proc.stderr.lower(), proc.stderr[-2000:]


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_llada_and_dream_checkpoints_score_and_generate(family, tmp_path):
    """A tiny LLaDA- or Dream-style checkpoint (its own modelling code: transformers 4.x) through both methods."""
    if not remote_code_runs():
        pytest.skip("remote code needs transformers 4.x (.venv-remote, envs/requirements-remote.txt)")
    model = make_lm(BUILDERS[family](tmp_path / family), family=family, mc_num=4, batch_size=2)
    (ll, greedy), = model.loglikelihood(instances("loglikelihood", [("which river", " the river")]))
    assert math.isfinite(ll) and ll < 0 and isinstance(greedy, bool)
    text = model.generate_until(instances("generate_until", [("which river", {"until": ["\n"], "max_gen_toks": 8})]))
    assert isinstance(text[0], str) and "\n" not in text[0]


def _record(task, values):
    """An lm-eval JSON record as the stage writes it (only what the table reads)."""
    metrics = {f"{m},none": v for m, (v, _) in values.items()} | {f"{m}_stderr,none": e for m, (_, e) in values.items()}
    return {"results": {task: {"alias": task, **metrics}}, "n-samples": {task: {"effective": 4, "original": 350}}}


def test_the_stage_table_sets_each_arm_against_the_base_with_the_harness_stderr(tmp_path):
    from anchormask import fileio
    from anchormask.harness import results
    from anchormask.measurement import tables

    runs = [{"arm": "base", "train_seed": None, "task": "anchormask_cloze"},
            {"arm": "anchor", "train_seed": 42, "task": "anchormask_cloze"},
            {"arm": "anchor", "train_seed": 43, "task": "anchormask_cloze"}]
    paths = []
    for i, value in enumerate([0.25, 0.5, 0.75]):
        paths.append(str(tmp_path / f"{i}.json"))
        fileio.write_json(paths[-1], _record("anchormask_cloze", {"acc": (value, 0.1), "acc_norm": (value / 2, 0.05)}))
    df = results.write_table(runs, paths, str(tmp_path / "t.md"), str(tmp_path / "t.parquet"))
    acc = df[df["metric"] == "acc"].set_index("train_seed", drop=False)
    assert acc["base_value"].eq(0.25).all() and sorted(acc["difference"].tolist()) == [0.0, 0.25, 0.5]
    assert acc["stderr"].eq(0.1).all() and acc["n"].eq(4).all()
    assert "| anchor | 43 | 0.750 ± 0.100 | +0.500 |" in (tmp_path / "t.md").read_text()
    assert len(tables.read_parquet(tmp_path / "t.parquet")) == 6
    results.figure(df, tmp_path / "f.pdf", tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0


def test_lm_evals_own_device_default_is_no_choice_and_an_explicit_device_is_kept():
    from anchormask.cli import lm_eval_device
    from anchormask.harness import model

    assert lm_eval_device(["--model", "anchormask"]) == ["--model", "anchormask", "--device", "auto"]
    assert lm_eval_device(["--device", "cpu"]) == ["--device", "cpu"]
    assert lm_eval_device(["--device=cuda:0"]) == ["--device=cuda:0"]
    assert model.setup_from_args(device="auto").base.device == "auto"  # CUDA + bf16 where present, else the CPU


def test_the_projects_own_task_names_pass_without_lm_evals_index(monkeypatch):
    from anchormask.harness import tasks

    monkeypatch.setattr(tasks, "task_manager", lambda extra=None: pytest.fail("lm-eval's index was built"))
    assert tasks.unknown_tasks(["anchormask_cloze", "anchormask_locus", "my/own_task.yaml"]) == []


def test_an_unknown_task_stops_anchormask_lm_eval_before_lm_eval_with_a_did_you_mean(capsys):
    from anchormask.cli import run_lm_eval

    assert run_lm_eval(["--model", "anchormask", "--tasks", "anchormask_clozee,hellaswag", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert ("anchormask lm-eval: --tasks: 'anchormask_clozee' is not a task lm-eval knows (did you mean "
            "'anchormask_cloze'") in err and "hellaswag" not in err  # lm-eval's own task passes
