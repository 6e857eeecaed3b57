"""The cluster profiles: slurm/ and slurm/nogpu/ differ only in the GPU requests."""

import pytest
import yaml

from helpers import REPO, dry_run_jobs


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
