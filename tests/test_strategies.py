"""Masking strategies as the study's open variable (anchormask.training.strategies, docs/strategies.md):
the built-in ones through the contract, a user's file named in a config, the checks before any job runs
and during training, and identity: the file's code is part of exactly its adapters."""

import copy
import json
import re
import shutil

import pytest
import torch

from anchormask import study
from anchormask.fileio import InputError
from anchormask.model.layout import ANSWER, PAD, QUESTION, SPECIAL
from anchormask.settings import config
from anchormask.training import masking, strategies
from helpers import REPO, SMALL, TINY, copy_repo, keep_arms, snakemake

EXAMPLE = "config/strategies/answer_suffix.py:answer_suffix"
LAYER = "config/strategies/suffix.yaml"
ADAPTER = "results/adapters/suffix_full_n8_s3_seed42"  # the reduced study made smaller (layers/small.yaml)


def spec(function: str = EXAMPLE, **extra) -> dict:
    return {"function": function, "params": {"min_masked": 1}, "classes": ["answer"], **extra}


@pytest.fixture
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # a strategy's file is named relative to the directory Snakemake runs in


@pytest.mark.unit
def test_the_builtins_draw_the_same_mask_as_the_bernoulli_rule_from_the_same_generator():
    batch = strategies.trial_batch(generator_seed=3)
    for name in study.STEP_FREE_STRATEGIES:
        classes = strategies.BUILTIN_CLASSES[name]
        expected = masking.draw_mask(torch.isin(batch.classes, torch.tensor(classes)), batch.ratio,
                                     torch.Generator().manual_seed(3))
        assert torch.equal(strategies.resolve(name).mask(strategies.trial_batch(generator_seed=3)), expected), name


def answers(rows: int = 8, answer: int = 40, ratio: float = 0.5, step: int = 0, total: int = 1, seed: int = 0):
    classes = torch.tensor([[SPECIAL, *[QUESTION] * 4, SPECIAL, *[ANSWER] * answer, SPECIAL, PAD]] * rows)
    return strategies.MaskingBatch(ids=torch.zeros_like(classes), classes=classes, lengths=(classes != PAD).sum(1),
                                   ratio=torch.full((rows,), ratio), step=step, total_steps=total,
                                   generator=torch.Generator().manual_seed(seed))


def runs_of(row: torch.Tensor) -> list[str]:
    return re.findall("0+|1+", "".join(map(str, row.int().tolist())))


@pytest.mark.unit
def test_the_worked_example_masks_the_end_of_each_answer(in_repo):
    batch = answers(ratio=0.25)
    mask = strategies.resolve("suffix", spec()).mask(batch)
    answer = batch.classes == ANSWER
    assert torch.equal(mask.sum(1), torch.full((8,), 10))  # 0.25 x 40
    assert mask[:, -12:-2].all() and not (mask & ~answer).any()  # the last 10 answer positions, then [SEP], PAD


@pytest.mark.unit
def test_span_masks_contiguous_answer_spans_up_to_the_ratio():
    batch = answers()
    mask = strategies.resolve("span").mask(batch)
    assert not (mask & (batch.classes != ANSWER)).any()
    share = mask.sum(1).float() / 40
    assert ((share >= 0.5) & (share <= 0.9)).all()  # the budget, overshot by the last span only
    spans = [len(r) for row in mask[:, 6:46] for r in runs_of(row) if r[0] == "1"]
    assert sum(spans) / len(spans) > 2.5  # spans of mean length about 4, not scattered positions


@pytest.mark.unit
def test_blockwise_keeps_earlier_blocks_masks_the_active_one_at_the_ratio_and_all_later_ones():
    batch = answers(rows=64, answer=32, ratio=0.5)
    mask = strategies.resolve("blockwise").mask(batch)[:, 6:38].view(64, 4, 8)  # 4 blocks of 8 answer positions
    actives = set()
    for row in mask:
        per_block = row.sum(1).tolist()  # [0] * active + [the active block's count] + [8] * the rest
        fits = [a for a in range(4) if per_block[:a] == [0] * a and per_block[a + 1:] == [8] * (3 - a)]
        assert fits, per_block
        actives.add(fits[0])
    assert actives == {0, 1, 2, 3}  # the active block is drawn per sequence


@pytest.mark.unit
def test_curriculum_masks_like_random_before_its_switch_and_like_anchor_after():
    early = strategies.resolve("curriculum").mask(answers(ratio=1.0, step=4, total=10))
    late = strategies.resolve("curriculum").mask(answers(ratio=1.0, step=5, total=10))
    classes = answers().classes
    assert torch.equal(early, (classes == QUESTION) | (classes == ANSWER))
    assert torch.equal(late, classes == ANSWER)


@pytest.mark.unit
@pytest.mark.parametrize("bad, message", [
    (spec("config/strategies/missing.py:f"), r"strategies\.suffix\.function: config/strategies/missing\.py does not "
                                             r"exist \(relative to .*\); give the path of the strategy's file"),
    (spec(EXAMPLE.replace(":answer_suffix", ":suffix")),
     r"config/strategies/answer_suffix\.py has no function 'suffix'; its functions: answer_suffix"),
    ({**spec(), "params": {"width": 3}},
     r"answer_suffix\.py:answer_suffix cannot be called as answer_suffix\(batch, \*\*params\) with params "
     r"\['width'\]: .*unexpected keyword argument 'width'; take the batch first and each param by name"),
    (spec("no_such_package.module:f"), r"cannot import 'no_such_package\.module' .*; give file\.py:function"),
])
def test_a_strategy_that_cannot_load_is_refused_naming_the_file_the_function_and_the_fix(in_repo, bad, message):
    with pytest.raises(InputError, match=message):
        strategies.resolve("suffix", bad)


@pytest.mark.unit
@pytest.mark.parametrize("body, message", [
    ("return torch.zeros(2, 3, dtype=torch.bool)",
     r"returned a torch\.bool tensor of shape \(2, 3\); return a torch\.bool mask of the batch's shape \(2, 16\)"),
    ("return batch.classes == 2", None),
    ("return (batch.classes == 2).float()", r"returned a torch\.float32 tensor"),
    ("return batch.classes >= 2", r"masks 11 position\(s\) of class padding, outside its classes \(answer\)"),
    ("return batch.classes == 0", r"masks \d+ position\(s\) of class special, outside its classes"),
    ("return [[True]]", r"returned list, not a torch\.Tensor; return the boolean mask"),
    ("raise ValueError('no answer')", r"raised ValueError: no answer on a trial batch of shape \(2, 16\)"),
])
def test_the_check_at_dag_build_calls_the_function_once_and_names_what_is_wrong(tmp_path, body, message):
    (tmp_path / "mine.py").write_text(f"import torch\n\n\ndef mine(batch):\n    {body}\n")
    strategy = strategies.resolve("mine", {"function": f"{tmp_path}/mine.py:mine", "classes": ["answer"]})
    if message is None:
        strategies.check(strategy)
        return
    with pytest.raises(InputError, match=rf"strategy 'mine' \({re.escape(str(tmp_path))}/mine\.py:mine\).*{message}"):
        strategies.check(strategy)


@pytest.mark.unit
def test_the_config_check_names_an_unknown_strategy_and_a_builtin_name_taken(in_repo):
    cfg = config.load(REPO / "config.yaml")
    bad = copy.deepcopy(cfg)
    bad["arms"]["anchor"]["strategy"] = "suffix"
    with pytest.raises(config.ConfigError, match=r"config\.yaml: arms\.anchor\.strategy: unknown strategy 'suffix'; "
                                                 r"built-in: anchor, random, reverse, span, blockwise, curriculum; "
                                                 r"define it under strategies:"):
        config.validate(bad)
    bad = copy.deepcopy(cfg)
    bad["strategies"] = {"random": spec()}
    with pytest.raises(config.ConfigError, match=r"strategies\.random: 'random' is a built-in strategy's name"):
        config.validate(bad)
    good = copy.deepcopy(cfg)
    good["strategies"] = {"suffix": spec()}
    good["arms"]["suffix"] = {"strategy": "suffix", "targets": "full"}
    good["sweep"]["strategies"] = ["suffix", "random"]
    config.validate(good)
    assert study.strategies(good) == (*study.BUILTIN_STRATEGIES, "suffix")


@pytest.mark.unit
def test_a_users_strategy_is_part_of_its_adapters_settings_and_its_folders_imports_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helper.py").write_text("WIDTH = 2\n")
    (tmp_path / "unrelated.py").write_text("X = 1\n")
    (tmp_path / "mine.py").write_text('"""Mine."""\nimport helper\n\n\ndef mine(batch, width=1):\n'
                                      "    return batch.classes == 2\n")
    cfg = {"train": {"seq_len": 64, "overrides": {}}, "strategies": {"mine": {"function": "mine.py:mine",
                                                                                "params": {"width": 3}}}}
    first = study.train_settings(cfg, "mine")["strategy"]
    assert first["function"] == "mine.py:mine" and first["params"] == {"width": 3}
    assert first["classes"] == ["question", "answer"] and re.fullmatch(r"[0-9a-f]{16}", first["code"])
    assert "strategy" not in study.train_settings(cfg, "anchor")  # the built-ins' settings are as they were
    (tmp_path / "mine.py").write_text((tmp_path / "mine.py").read_text().replace('"""Mine."""', "# mine"))
    (tmp_path / "unrelated.py").write_text("X = 2\n")
    assert study.train_settings(cfg, "mine")["strategy"] == first  # a comment, a module it does not import
    (tmp_path / "helper.py").write_text("WIDTH = 3\n")
    assert study.train_settings(cfg, "mine")["strategy"]["code"] != first["code"]


@pytest.mark.workflow
def test_a_broken_strategy_stops_the_dag_before_any_job_runs(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    layer = (repo / LAYER).read_text().replace("answer_suffix.py:answer_suffix", "answer_suffix.py:suffix")
    (repo / "broken.yaml").write_text(layer)
    proc = snakemake(repo, "-n", "--configfile", TINY, "broken.yaml", check=False)
    assert proc.returncode != 0
    assert ("strategies.suffix.function (config/strategies/answer_suffix.py:suffix): "
            "config/strategies/answer_suffix.py has no function 'suffix'; its functions: answer_suffix"
            ) in proc.stdout + proc.stderr


def _planned(repo, *configfiles) -> dict[str, int]:
    out = snakemake(repo, "-n", "--configfile", TINY, SMALL, *configfiles).stdout
    rules = {}
    for rule in re.findall(r"^(?:local)?rule (\w+):$", out, re.M):
        rules[rule] = rules.get(rule, 0) + 1
    rules.pop("all", None)
    return rules


@pytest.mark.slow
def test_a_users_strategy_runs_the_reduced_study_and_an_edit_of_its_file_retrains_only_its_adapters(tmp_path):
    repo = keep_arms(copy_repo(tmp_path / "repo"))  # base, anchor, random and the layer's suffix
    snakemake(repo, "--cores", "2", "--configfile", TINY, SMALL, LAYER)
    headline = (repo / "results/tables/headline.md").read_text()
    assert "heldout_suffix_vs_random" in headline and "heldout_suffix_vs_anchor" in headline
    record = json.loads((repo / f"{ADAPTER}/provenance.json").read_text())
    assert record["settings"]["strategy"]["function"] == EXAMPLE and record["settings"]["run_steps"] == 3
    log = (repo / f"{ADAPTER}/train_log.tsv").read_text().splitlines()
    assert all(int(row.split("\t")[2]) > 0 for row in log[1:])  # masked tokens every step
    assert _planned(repo, LAYER) == {}
    example = repo / "config/strategies/answer_suffix.py"
    example.write_text(example.read_text() + "\n# a comment reruns nothing\n")
    assert _planned(repo, LAYER) == {}
    example.write_text(example.read_text().replace("min_masked: int = 1", "min_masked: int = 2"))
    planned = _planned(repo, LAYER)
    assert planned["train_adapter"] == 1 and planned["generate_arm"] == 1  # the suffix arm's one adapter
    assert not {"generate_sweep", "retrieve", "probe_maskcount_generate", "verify_base"} & set(planned)
    shutil.rmtree(repo / "results")


@pytest.mark.workflow
def test_the_strategies_comparison_gives_every_builtin_an_arm_compared_with_random_and_anchor(repo_copy,
                                                                                          default_dag):
    from helpers import dry_run_jobs

    layer = config.yaml_file(REPO / "config" / "compare" / "strategies.yaml")
    literature = set(strategies.BUILTIN_CLASSES) - set(study.STEP_FREE_STRATEGIES)
    assert {arm["strategy"] for arm in layer["arms"].values()} == literature
    for name in layer["arms"]:
        pairs = {(c["b"], c.get("split")) for c in layer["statistics"]["comparisons"].values() if c["a"] == name}
        assert pairs == {("random", "held_out"), ("anchor", "held_out"), ("random", "in_domain")}, name
    jobs = dry_run_jobs(repo_copy, "--configfile", "config/compare/strategies.yaml")
    assert jobs["train_adapter"] == default_dag["train_adapter"] + len(literature)
    assert jobs["generate_arm"] == default_dag["generate_arm"] + len(literature)
