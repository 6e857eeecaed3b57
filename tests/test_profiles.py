"""The cluster profiles: slurm/ and slurm/nogpu/ differ only in the GPU requests."""

import json
import re

import pytest
import yaml

from bench import scale
from helpers import REPO, dry_run_jobs, snakemake

MODEL_RULES = ("train_adapter", "generate_arm", "generate_sweep", "probe_attention", "probe_maskcount_generate")


def load(path):
    return yaml.safe_load((REPO / path).read_text())


@pytest.mark.unit
def test_profiles_agree_except_gpu():
    gpu, nogpu = load("slurm/config.yaml"), load("slurm/nogpu/config.yaml")
    gpu_rules = gpu.pop("set-resources", {})
    nogpu_rules = nogpu.pop("set-resources", {}) or {}
    assert gpu == nogpu
    assert {"train_adapter", "generate_arm", "generate_sweep"} <= set(gpu_rules)
    assert all(spec.get("gpu") == 1 for spec in gpu_rules.values())
    assert not any(spec.get("gpu") for spec in nogpu_rules.values())
    assert gpu["executor"] == "slurm" and gpu["retries"] >= 1


@pytest.mark.workflow
def test_slurm_profile_resolves_and_builds_the_whole_dag(repo_copy, default_dag):
    assert dry_run_jobs(repo_copy, "--profile", "slurm", "-j", "16") == default_dag


def job_resources(dry_run: str) -> dict[str, list[dict[str, str]]]:
    """Rule -> the `resources:` of each of its jobs in a dry run's output."""
    found: dict[str, list[dict[str, str]]] = {}
    for block in re.split(r"\n(?=rule \w+:)", dry_run):
        rule, resources = re.match(r"rule (\w+):", block), re.search(r"^\s+resources: (.+)$", block, flags=re.M)
        if rule and resources:
            pairs = (item.split("=", 1) for item in resources.group(1).split(", "))
            found.setdefault(rule.group(1), []).append(dict(pairs))
    return found


@pytest.mark.workflow
@pytest.mark.parametrize("layer, shape", [("llada-8b-base", scale.LLADA_8B), ("dream-7b-instruct", scale.DREAM_7B)])
def test_every_model_job_asks_slurm_for_its_threads_and_a_gpu(repo_copy, tmp_path, layer, shape):
    """A real-base layer dry-run before the weights arrive: a folder with the checkpoint's config.json."""
    (tmp_path / "config.json").write_text(json.dumps(shape))
    paths = tmp_path / "paths.yaml"
    paths.write_text(yaml.safe_dump({"base": {"path": str(tmp_path)}}))
    cfg = yaml.safe_load((REPO / "config" / "bases" / f"{layer}.yaml").read_text())
    proc = snakemake(repo_copy, "-n", "--profile", "slurm", "--configfile", f"config/bases/{layer}.yaml", str(paths))
    jobs = job_resources(proc.stdout + proc.stderr)
    assert set(MODEL_RULES) <= set(jobs)
    threads = {"train_adapter": cfg["train"]["threads"]} | {r: cfg["generation"]["threads"] for r in MODEL_RULES[1:]}
    assert {threads[r] for r in threads} == {4, 8}  # the layers' own settings, not the profile's default of 1
    for rule in MODEL_RULES:
        assert {(j["cpus_per_task"], j["gpu"]) for j in jobs[rule]} == {(str(threads[rule]), "1")}, rule
