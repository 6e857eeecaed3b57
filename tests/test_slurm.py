"""A reduced study through a real one-node SLURM cluster (tests/slurm_cluster.py): the same bytes
as a local run, jobs really submitted with sbatch, and a failing job retried.

The cluster has no accounting database, so the tests pass what such a cluster needs on the
command line, not in the profile (slurm/README.md): ``--slurm-status-command squeue`` (no
sacct) and a ``--default-resources`` list without slurm_account (the plugin validates an account
with sacctmgr/sshare, which need slurmdbd). A command-line --default-resources replaces the
profile's list as a whole, so the test repeats the rest of it. The GRES-free profile
slurm/nogpu is used because the test node has no GPUs.

Run with -s to see the numbers (SLURM jobs, wall times).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from helpers import SMALL, TINY, copy_repo, keep_arms, snakemake, snakemake_cli
from slurm_cluster import STATUS_OPTION, slurm_cluster  # noqa: F401  (session fixture)

pytestmark = pytest.mark.slurm

TARGET = "results/tables/headline.md"
REMOTE_RULES = {"train_adapter", "generate_arm", "generate_sweep", "aggregate", "aggregate_sweep", "statistics",
                "statistics_sweep"}
LOCAL_RULES = {"verify_base", "retrieve", "gather_generations", "headline"}
COMPARED = ("results/generations/**/*.jsonl", "results/tables/*.parquet", "results/stats/*.parquet", TARGET)
FAST_POLLING = ["--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2"]
TEST_RESOURCES = ["--default-resources", "slurm_partition=main", "runtime=60", "mem_mb=1000", "cpus_per_task=1"]
SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+)")


def _through_slurm(cluster, workdir: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """Targets first, then the cluster options: --configfile takes every value after it."""
    start = time.monotonic()
    proc = snakemake(workdir, *args[:1], "--profile", "slurm/nogpu", *STATUS_OPTION, *FAST_POLLING,
                     *TEST_RESOURCES, *args[1:], env=cluster.env)
    return proc, time.monotonic() - start


def _digests(repo: Path) -> dict[str, str]:
    files = {p for pattern in COMPARED for p in repo.glob(pattern)}
    return {p.relative_to(repo).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _slurm_logs(repo: Path) -> dict[str, list[Path]]:
    """Rule -> the plugin's per-job logs, .snakemake/slurm_logs/rule_<rule>/<wildcards>/<jobid>.log."""
    root = repo / ".snakemake/slurm_logs"
    logs: dict[str, list[Path]] = {}
    for path in sorted(root.rglob("*.log")) if root.is_dir() else []:
        logs.setdefault(path.relative_to(root).parts[0].removeprefix("rule_"), []).append(path)
    return logs


def _queue(cluster) -> dict[str, tuple[str, str]]:
    """SLURM job id -> (state, comment) as slurmctld remembers it (MinJobAge keeps finished jobs)."""
    out = cluster.run("squeue", "--states=all", "--noheader", "-o", "%i|%T|%k")
    return {i: (state, comment) for i, state, comment in (line.split("|", 2) for line in out.splitlines())}


def test_slurm_run_matches_local_run(slurm_cluster, tmp_path):  # noqa: F811
    local, remote = keep_arms(copy_repo(tmp_path / "local")), keep_arms(copy_repo(tmp_path / "remote"))
    config = ["--configfile", TINY, SMALL]  # the reduced study, smaller (tests/configs/layers/small.yaml)
    # The local run goes alongside the SLURM run, whose wall time is mostly the executor's polling.
    start = time.monotonic()
    with open(tmp_path / "local.log", "w") as log:
        local_run = subprocess.Popen(snakemake_cli(TARGET, "--cores", "2", *config), cwd=local, stdout=log,
                                     stderr=subprocess.STDOUT, env={**os.environ, "PYTHONHASHSEED": "0"})
        try:
            proc, slurm_seconds = _through_slurm(slurm_cluster, remote, TARGET, *config)
        finally:
            local_rc = local_run.wait(timeout=900)
    both_seconds = time.monotonic() - start
    assert local_rc == 0, f"local run failed ({local_rc}):\n{(tmp_path / 'local.log').read_text()[-6000:]}"
    submitted = SUBMITTED.findall(proc.stdout + proc.stderr)
    logs = _slurm_logs(remote)
    queue = _queue(slurm_cluster)
    print(f"\n[slurm] SLURM {slurm_seconds:.1f} s, the local run alongside, both {both_seconds:.1f} s; "
          f"{len(submitted)} SLURM jobs "
          f"{ {rule: len(paths) for rule, paths in sorted(logs.items())} }")

    assert set(logs) == REMOTE_RULES and not LOCAL_RULES & set(logs)  # localrules ran on the submit host
    assert sorted(p.stem for paths in logs.values() for p in paths) == sorted(submitted)
    for job in submitted:  # each one a real SLURM job that ran to completion, tagged with its rule
        state, comment = queue[job]
        assert state == "COMPLETED" and comment.removeprefix("rule_").split("_wildcards_")[0] in REMOTE_RULES
    want, got = _digests(local), _digests(remote)
    assert TARGET in want and "results/generations/all.jsonl" in want and len(want) >= 10
    assert want == got


def test_failing_job_is_retried_through_slurm(slurm_cluster, tmp_path):  # noqa: F811
    """Inject one failure honestly: an extra Snakefile in the copy includes the project's and adds a
    rule that fails when a marker file is absent (creating it) and succeeds when it is present."""
    repo = copy_repo(tmp_path / "repo")
    marker = tmp_path / "first-attempt-happened"
    (repo / "flaky.smk").write_text(f"""\
include: "Snakefile"


rule flaky:
    output:
        "results/flaky.txt",
    resources:
        runtime=5,
    shell:
        "if [ -e {marker} ]; then echo second attempt > {{output}}; "
        "else touch {marker}; echo failing on purpose; exit 1; fi"
""")
    proc, seconds = _through_slurm(slurm_cluster, repo, "results/flaky.txt", "-s", "flaky.smk", "--configfile", TINY)
    submitted = SUBMITTED.findall(proc.stdout + proc.stderr)
    logs = _slurm_logs(repo).get("flaky", [])
    queue = _queue(slurm_cluster)
    print(f"\n[slurm] retry: {len(submitted)} SLURM jobs for rule flaky in {seconds:.1f} s")
    assert (repo / "results/flaky.txt").read_text() == "second attempt\n"
    assert len(submitted) == 2 and sorted(p.stem for p in logs) == sorted(submitted)
    assert [queue[job][0] for job in submitted] == ["FAILED", "COMPLETED"]
    assert "failing on purpose" in next(p for p in logs if p.stem == submitted[0]).read_text()
    assert "Trying to restart" in proc.stdout + proc.stderr
