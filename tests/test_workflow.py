"""The DAG as Snakemake builds it: job counts, targets by path, and errors at DAG build."""

import re
from pathlib import Path

import pytest

from helpers import REPO, TINY, copy_repo, dry_run_jobs, kill, removed_line, snakemake, start_writer

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def repo(repo_copy):
    return repo_copy


@pytest.fixture(scope="module")
def default_config():
    from anchormask.settings import config

    return config.load(REPO / "config.yaml")


def trainings(cfg) -> tuple[set, set]:
    """(the arms' adapters, the sweep's) as (strategy, targets, size, steps, seed), counted from config.yaml by
    hand: each adapter arm trains at train.default per seed; each sweep point trains full targets per seed."""
    seeds, default, sweep = cfg["train"]["seeds"], cfg["train"]["default"], cfg["sweep"]
    arms = {(arm["strategy"], arm["targets"], default["size"], default["steps"], seed)
            for arm in cfg["arms"].values() if arm["strategy"] is not None for seed in seeds}
    points = {(strategy, "full", size, steps, seed) for strategy in sweep["strategies"] for size in sweep["sizes"]
              for steps in sweep["steps"] for seed in sweep.get("seeds") or seeds}
    return arms, points


def sweep_points(cfg) -> int:
    return len(cfg["sweep"]["strategies"]) * len(cfg["sweep"]["sizes"]) * len(cfg["sweep"]["steps"])


def test_default_dag_has_one_job_per_training_config_and_arm(default_dag, default_config):
    jobs, cfg = default_dag, default_config
    arms, points = trainings(cfg)
    assert arms & points  # the sweep reuses the arms' default training, once
    assert jobs["train_adapter"] == len(arms | points)
    assert jobs["generate_arm"] == len(cfg["arms"]) and jobs["generate_sweep"] == sweep_points(cfg)
    held_out = cfg["data"]["held_out"]  # every domain of the main query set, the held-out ones of the second
    assert jobs["retrieve"] == 1 + len(held_out) + (len(held_out) if cfg["data"]["alt_queries_dir"] else 0)
    assert jobs["verify_base"] == 1 and jobs["aggregate"] == 1 and jobs["statistics"] == 1
    assert jobs["figure"] == 3  # main, sweep, ablation
    assert jobs["training_curves"] == 1
    assert jobs["samples"] == 1 and jobs["paper"] == 1
    # one job per probed arm (the base, anchor and random arms: schema, probes.maskcount_k), every k in it
    assert jobs["probe_maskcount_generate"] == len({"base", "anchor", "random"} & set(cfg["arms"]))


def test_the_docs_state_the_default_dags_job_count(default_dag):
    """README.md and bench/README.md give the default DAG's size: the dry run's total."""
    total = sum(default_dag.values())
    readme = re.findall(r"DAG: `snakemake -n`, (\d+) jobs", (REPO / "README.md").read_text())
    bench = re.findall(r"full default DAG \((\d+) jobs\)", (REPO / "bench" / "README.md").read_text())
    assert readme and bench and {int(n) for n in readme + bench} == {total}


def test_sweep_figure_builds_only_what_the_sweep_needs(repo, default_config):
    jobs = dry_run_jobs(repo, "results/figures/sweep.pdf")
    assert set(jobs) == {"verify_base", "retrieve", "train_adapter", "generate_sweep", "aggregate_sweep",
                         "statistics_sweep", "figure"}
    assert jobs["train_adapter"] == len(trainings(default_config)[1]) and jobs["figure"] == 1
    assert jobs["generate_sweep"] == sweep_points(default_config)


def test_bad_config_stops_the_dag_build_naming_the_key(repo, tmp_path):
    overlay = tmp_path / "bad.yaml"
    overlay.write_text("generation:\n  remasking: lowest\n")
    proc = snakemake(repo, "-n", "--configfile", str(overlay), check=False)
    assert proc.returncode != 0
    assert "generation.remasking" in proc.stderr + proc.stdout and "'low_confidence'" in proc.stderr + proc.stdout


def test_malformed_corpus_line_stops_the_dag_build_naming_file_and_line(repo, tmp_path):
    broken = copy_repo(tmp_path)
    corpus = broken / "data" / "corpora" / "law.jsonl"
    corpus.write_text(corpus.read_text() + '{"id": "law-999"}\n')
    proc = snakemake(broken, "-n", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "law.jsonl: line 49: field 'text': missing" in out


def test_wrong_checksum_fails_verification_before_any_training(tmp_path):
    broken = copy_repo(tmp_path)
    config = broken / "config.yaml"
    config.write_text(config.read_text().replace("sha256: ", "sha256: " + "ab" * 32 + "  # was ", 1))
    proc = snakemake(broken, "--cores", "1", "results/base/verified.json", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "expected " + "ab" * 32 in out and "base.sha256" in out
    assert not (broken / "results" / "base" / "verified.json").exists()
    assert not (broken / "results" / "adapters").exists()


def test_lint_is_clean():
    proc = snakemake(REPO, "--lint", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_model_jobs_ask_for_memory_from_the_memory_model(repo, tmp_path):
    """The requests come from anchormask.model.memory for the base's config.json shape (no weights needed)."""
    import json
    import re

    from anchormask.model import memory
    from bench import scale

    base = tmp_path / "big"
    base.mkdir()
    (base / "config.json").write_text(json.dumps(scale.LLADA_8B))
    overlay = tmp_path / "big.yaml"
    overlay.write_text(f"base:\n  path: {base}\n  device: cuda\n")
    out = snakemake(repo, "-n", "--configfile", str(overlay), "--", "results/adapters/reverse_full_n144_s300_seed42",
                    "results/generations/base.jsonl")
    text = out.stdout + out.stderr
    cfg = scale.study_config(None)
    cfg["base"] |= {"path": str(base), "device": "cuda"}
    train, generate = memory.job_requests(cfg, "train"), memory.job_requests(cfg, "generate")
    train_mem = [int(m) for m in re.findall(r"rule train_adapter:.*?\bmem_mb=(\d+)", text, re.S)]
    gpu = [int(m) for m in re.findall(r"gpu_mem_mb=(\d+)", text)]
    assert train_mem == [train["mem_mb"]] and sorted(gpu) == sorted([train["gpu_mem_mb"], generate["gpu_mem_mb"]])
    assert train["gpu_mem_mb"] > 16 * 1024  # an 8B model's bf16 weights alone are 15 GiB
    embedded = scale.study_config(None)  # the default base, as the memory model sizes it
    embedded["base"] |= {"path": str(REPO / embedded["base"]["path"])}
    default = snakemake(repo, "-n", "results/adapters/reverse_full_n144_s300_seed42")
    asked = memory.job_requests(embedded, "train")["mem_mb"]
    assert re.search(rf"rule train_adapter:.*?\bmem_mb={asked}\b", default.stdout + default.stderr, re.S)


def test_nested_command_line_override_is_typed_and_reaches_the_jobs(repo, default_dag):
    """--config 'train={rank: 8}' used to fail: Snakemake hands nested values over as strings."""
    proc = snakemake(repo, "-n", "--config", "train={rank: 8, lr: 1e-3, seeds: [1, 2]}", "generation={steps: 8}",
                     "--", "results/adapters/anchor_full_n144_s300_seed2")
    assert "rule train_adapter:" in proc.stdout + proc.stderr
    # a second seed doubles the training jobs
    assert dry_run_jobs(repo, "--config", "train={seeds: [1, 2]}")["train_adapter"] == 2 * default_dag["train_adapter"]


def test_a_bad_command_line_value_is_blamed_on_the_command_line(repo, tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("generation: {steps: 0}\n")
    proc = snakemake(repo, "-n", "--configfile", str(overlay), "--config", "train={rank: eight}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "--config: train.rank: 'eight' is not of type 'integer'" in out
    assert "overlay.yaml: generation.steps: 0 is out of range" in out
    assert "config.yaml: train.rank" not in out


def test_an_out_of_range_train_value_prints_one_line_about_it(repo):
    """It used to print a false line first: train: ... ('log_every' was unexpected) (issue 39)."""
    proc = snakemake(repo, "-n", "--config", "train={rank: 0}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert [line for line in out.splitlines() if "train" in line] == [
        "  --config: train.rank: 0 is out of range; allowed: {'minimum': 1, 'maximum': 1024}"]
    assert "log_every" not in out and "nevaluated" not in out


def test_a_resumed_run_removes_and_names_what_a_killed_figure_job_left(tmp_path):
    """kill -9 during a figure job left results/figures/.tmp-ablation.png-*, which no run removed (issue 39)."""
    repo = copy_repo(tmp_path)
    target = Path("results/figures/ablation.png")
    pid = kill(start_writer(repo / target))
    (leftover,) = (repo / target.parent).glob(".tmp-ablation.png-*")
    proc = snakemake(repo, "-n")
    assert removed_line(leftover.relative_to(repo), target, pid) in proc.stderr.splitlines()
    assert not leftover.exists()


def test_an_outlier_statement_stops_the_dag_build_naming_file_line_and_fix(tmp_path):
    """A statement pasted 400 times used to be cut to 23 tokens with one WARNING per query (issue 39)."""
    broken = copy_repo(tmp_path)
    corpus = broken / "data" / "corpora" / "law.jsonl"
    outlier = "Courts decide cases between parties under the law. " * 400
    corpus.write_text(corpus.read_text() + f'{{"id": "law-049", "text": "{outlier.strip()}"}}\n')
    proc = snakemake(broken, "-n", "--config", "generation={answer_len: 24}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "statements that cannot serve as an anchor (counted in tokens of data/base/tokenizer.json):" in out
    assert re.search(r"data/corpora/law.jsonl: line 49: statement 'law-049' has \d+ tokens, more than the 128 "
                     r"positions the base reads \(max_position_embeddings in data/base/config.json\): as an anchor "
                     r"it would keep only its first 23; shorten or split the statement", out)


def test_anchors_that_will_be_truncated_are_summarised_once_at_the_top_of_the_run(repo):
    proc = snakemake(repo, "-n", "--config", "generation={answer_len: 24}")
    summary = [line for line in proc.stderr.splitlines() if "answer_len" in line]
    assert len(summary) == 1 and summary[0].startswith(
        "WARNING: anchors of generation.answer_len = 24 tokens or more, 3 of the main query set's 63 and 9 of "
        "the alt query set's 48, are truncated to answer_len − 1 = 23 tokens")
    assert "answer_len" not in snakemake(repo, "-n").stderr  # the default 48 cuts none


def test_yaml_syntax_error_in_config_names_the_line(tmp_path):
    broken = copy_repo(tmp_path)
    config = broken / "config.yaml"
    lines = config.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("  rank:"))
    lines[at] = "  rank: [16\n"
    config.write_text("".join(lines))
    proc = snakemake(broken, "-n", check=False)
    assert proc.returncode != 0
    assert f"config.yaml: line {at + 2}, column " in proc.stdout + proc.stderr  # where YAML sees the list unclosed


def test_held_out_domain_without_corpus_names_the_key(tmp_path):
    broken = copy_repo(tmp_path)
    (broken / "data" / "corpora" / "law.jsonl").unlink()
    proc = snakemake(broken, "-n", check=False)
    assert proc.returncode != 0
    assert ("data/corpora/law.jsonl: file not found; data.held_out names domain 'law', whose file must be "
            "data.corpora_dir/law.jsonl") in proc.stdout + proc.stderr


def test_answer_slot_longer_than_the_base_allows_stops_the_dag_build(repo):
    proc = snakemake(repo, "-n", "--config", "generation={answer_len: 120}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "--config: generation.answer_len: 120 answer positions" in out
    assert "max_position_embeddings in data/base/config.json" in out


def test_editing_a_rules_code_param_by_hand_is_refused(tmp_path):
    broken = copy_repo(tmp_path)
    rules = broken / "workflow" / "rules" / "base.smk"
    rules.write_text(rules.read_text().replace("        base=as_json(base_record()),\n",
                                               "        base=as_json(base_record()),\n        code=\"by hand\",\n", 1))
    proc = snakemake(broken, "-n", check=False)
    assert proc.returncode != 0
    assert "rule verify_base: params.code is not the digest of verify_base.py" in proc.stdout + proc.stderr


def test_logging_cadence_is_not_part_of_an_adapters_identity(tmp_path):
    """After one adapter is trained, a new train.log_every plans nothing; a new train.rank retrains it."""
    copy = copy_repo(tmp_path)
    adapter = "results/adapters/anchor_full_n8_s3_seed42"
    snakemake(copy, "--cores", "1", "--configfile", TINY, "--", adapter)
    assert dry_run_jobs(copy, "--configfile", TINY, "--config", "train={log_every: 1}", "--", adapter) == {}
    assert dry_run_jobs(copy, "--configfile", TINY, "--config", "train={rank: 4}", "--", adapter)["train_adapter"] == 1


def test_rule_inputs_name_other_rules_outputs_not_path_strings():
    """A path the DAG needs comes from the rule that writes it (rules.X.output), never a second spelling."""
    directive = re.compile(r"^    (\w+):")
    written_again = []
    for smk in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        section = None
        for number, line in enumerate(smk.read_text().splitlines(), 1):
            match = directive.match(line)
            section = match.group(1) if match else (None if line and not line[0].isspace() else section)
            if section == "input" and '"results/' in line:
                written_again.append(f"{smk.name}:{number}: {line.strip()}")
    assert not written_again, written_again


def test_the_report_includes_the_base_evaluation_by_setting_not_by_a_files_existence(repo, default_dag):
    summary = repo / "results" / "base_eval" / "summary.md"
    summary.parent.mkdir(parents=True)
    summary.write_text("an evaluation left over from another base\n")
    try:
        assert "evaluate_base" not in default_dag and dry_run_jobs(repo) == default_dag
        wanted = dry_run_jobs(repo, "--forcerun", "evaluate_base", "--config", "report={base_evaluation: true}")
        assert wanted["evaluate_base"] == 1 and wanted["paper"] == 1
    finally:
        summary.unlink()
        summary.parent.rmdir()


def test_every_script_has_one_shape():
    """A one-line docstring, the work in main(smk), called once with Snakemake's object at the end;
    a model job (one that loads a modeljob.Base) then leaves through modeljob.finish()."""
    import ast

    for script in sorted((REPO / "workflow" / "scripts").glob("*.py")):
        tree = ast.parse(script.read_text())
        doc = ast.get_docstring(tree)
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        assert doc and "\n" not in doc and doc.startswith("Snakemake script: "), script.name
        assert len(mains) == 1 and [a.arg for a in mains[0].args.args] == ["smk"], script.name
        ending = [ast.unparse(node) for node in tree.body[-2:]]
        if "modeljob.Base" in script.read_text():
            assert ending == ["main(snakemake)", "modeljob.finish()"], script.name
        else:
            assert ending[-1] == "main(snakemake)" and "modeljob.finish" not in script.read_text(), script.name
        assert "snakemake." not in script.read_text(), f"{script.name} reads `snakemake` outside main"


def test_the_lm_eval_layer_plans_one_job_per_arm_seed_and_task_and_the_table(repo, default_dag):
    """config/lm-eval.yaml: the base and each arm's adapters (every training seed) on both local tasks; off by
    default (tasks empty), so the default DAG has none of it."""
    assert not {"lm_eval", "lm_eval_table", "lm_eval_figure"} & set(default_dag)
    jobs = dry_run_jobs(repo, "--configfile=config/lm-eval.yaml")
    assert jobs["lm_eval"] == 8 * 2 and jobs["lm_eval_table"] == 1 and jobs["lm_eval_figure"] == 1
    seeds3 = dry_run_jobs(repo, "--configfile", "config/seeds3.yaml", "config/lm-eval.yaml")
    assert seeds3["lm_eval"] == (7 * 3 + 1) * 2  # seven adapter arms x three seeds, and the base
    assert {k: v for k, v in jobs.items() if not k.startswith("lm_eval") and k != "total"} == \
        {k: v for k, v in default_dag.items() if k != "total"}
