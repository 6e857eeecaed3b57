"""Rerun hygiene on one finished tiny study: what a change reruns, and what stays byte-identical.

Every scenario works on a copy of the session's finished tree (tests/conftest.py::tiny_study,
shared with test_end_to_end.py) with mtimes kept, so the tiny study runs once per session. Only
two partial reruns happen for real, both of train.overrides.anchor.lr: once uninterrupted
(scenarios 3 and 5) and once killed with SIGKILL inside a training job and then resumed
(scenario 6), whose outputs must equal the uninterrupted ones byte for byte. The numbers printed
(jobs per rule, seconds) are the measurements the report quotes; run with -s to see them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from base64 import urlsafe_b64encode
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from anchormask.checksum import directory_sha256, file_sha256
from anchormask.cli import main as cli
from anchormask.settings import audit
from helpers import TINY, flip_one_byte, snakemake, snakemake_cli

ANCHOR_LR = "train: {overrides: {anchor: {lr: 0.02}}}\n"
GENERATION_STEPS = "generation: {steps: 2}\n"
# Rules that read neither generations nor anything made from them (training_curves reads the adapters only).
UPSTREAM_OF_GENERATION = {"verify_base", "retrieve", "train_adapter", "probe_lora", "training_curves"}


@dataclass
class Job:
    rule: str
    output: list[str]
    wildcards: dict[str, str]
    reason: str


def dry_run(workdir: Path, *args: str) -> list[Job]:
    """The jobs of `snakemake -n` with their outputs, wildcards and reasons (rule `all` left out).

    Why not the job-stats table: scenarios 3 and 5 need to know WHICH wildcards and outputs rerun.
    """
    proc = snakemake(workdir, "-n", "--configfile", TINY, *args)
    jobs: list[Job] = []
    for line in (proc.stdout + proc.stderr).splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            jobs.append(Job(m.group(1), [], {}, ""))
        elif jobs and (m := re.match(r"^    (output|wildcards|reason): (.*)$", line)):
            key, value = m.groups()
            if key == "output":
                jobs[-1].output = value.split(", ")
            elif key == "wildcards":
                jobs[-1].wildcards = dict(kv.split("=", 1) for kv in value.split(", "))
            else:
                jobs[-1].reason = value
    return [j for j in jobs if j.rule != "all"]


def counts(jobs: list[Job]) -> dict[str, int]:
    out: dict[str, int] = {}
    for job in jobs:
        out[job.rule] = out.get(job.rule, 0) + 1
    return dict(sorted(out.items()))


def report(scenario: str, jobs: list[Job], seconds: float) -> None:
    print(f"\n[audit] {scenario}: {len(jobs)} jobs {counts(jobs)} ({seconds:.1f} s)")


def reported_dry_run(scenario: str, workdir: Path, *args: str) -> list[Job]:
    """``dry_run``, its jobs and time reported under ``scenario``."""
    start = time.monotonic()
    jobs = dry_run(workdir, *args)
    report(scenario, jobs, time.monotonic() - start)
    return jobs


def copy_study(study: Path, dest: Path) -> Path:
    """The finished study as a fresh working copy (copy2 keeps mtimes, so nothing looks newer)."""
    shutil.copytree(study, dest, symlinks=True)
    return dest


def overlay(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


@dataclass
class Rerun:
    """A copy of the study before and after an uninterrupted run of the anchor-lr change."""

    repo: Path
    overlay: str
    planned: list[Job]
    before: dict
    after: dict
    seconds: float
    said: str  # the run's stderr


@pytest.fixture(scope="module")
def every_job(tiny_study) -> dict[str, int]:
    """Rule -> job count of the whole DAG of the tiny study (a --forceall dry run; it changes nothing)."""
    return counts(dry_run(tiny_study, "--forceall"))


@pytest.fixture(scope="module")
def anchor_rerun(tiny_study, tmp_path_factory) -> Rerun:
    tmp = tmp_path_factory.mktemp("anchor_rerun")
    repo = copy_study(tiny_study, tmp / "repo")
    lr = overlay(tmp, "lr.yaml", ANCHOR_LR)
    planned = dry_run(repo, lr)
    for leftover in LEFTOVERS:  # what an earlier configuration left
        (repo / leftover).parent.mkdir(parents=True, exist_ok=True)
        (repo / leftover).write_text("from an earlier configuration\n")
    before = audit.build_manifest("results", repo)
    start = time.monotonic()
    proc = snakemake(repo, "--cores", "2", "--configfile", TINY, lr)
    seconds = time.monotonic() - start
    return Rerun(repo, lr, planned, before, audit.build_manifest("results", repo), seconds, proc.stderr)


# Not anchor's: scenarios 3 and 5 count the anchor adapters the change retrains.
LEFTOVERS = ("results/tables/headline_of_another_study.md", "results/adapters/span_full_n999_s1_seed1/train_log.tsv")


@pytest.mark.slow
def test_3_the_run_names_the_outputs_an_earlier_configuration_left(anchor_rerun):
    said = anchor_rerun.said[anchor_rerun.said.index("2 output(s) under results/ that the current configuration"):]
    assert said.splitlines()[1:3] == ["  results/adapters/span_full_n999_s1_seed1/",
                                      "  results/tables/headline_of_another_study.md"]


@pytest.mark.unit
def test_manifest_and_compare_on_a_synthetic_tree(tmp_path, capsys):
    """Fast: metadata decoding, directory outputs as one entry, volatile logs, the CLI."""
    (tmp_path / "results/adapters/a1").mkdir(parents=True)
    (tmp_path / "results/adapters/a1/weights.bin").write_bytes(b"w")
    (tmp_path / "results/adapters/.tmp-a2-x").mkdir()
    (tmp_path / "results/logs").mkdir()
    (tmp_path / "results/logs/a1.log").write_text("t=1")
    (tmp_path / "results/tables").mkdir()
    (tmp_path / "results/tables/t.parquet").write_bytes(b"p")
    meta = tmp_path / ".snakemake/metadata"
    meta.mkdir(parents=True)
    for out, rule in (("results/adapters/a1", "train_adapter"), ("results/tables/t.parquet", "aggregate")):
        (meta / urlsafe_b64encode(out.encode()).decode()).write_text(json.dumps(
            {"rule": rule, "params": ["x"], "code": "c", "input": ["b", "a"], "incomplete": False}))
    old = tmp_path / "old.json"
    assert cli(["audit", "manifest", "--workdir", str(tmp_path), "-o", str(old)]) == 0
    entries = json.loads(old.read_text())["entries"]
    assert set(entries) == {"results/adapters/a1", "results/logs/a1.log", "results/tables/t.parquet"}
    assert entries["results/adapters/a1"]["kind"] == "directory"
    assert entries["results/adapters/a1"]["sha256"] == directory_sha256(tmp_path / "results/adapters/a1")
    assert entries["results/adapters/a1"]["rule"] == "train_adapter"
    assert entries["results/adapters/a1"]["input"] == ["a", "b"]
    assert entries["results/logs/a1.log"]["volatile"] and entries["results/logs/a1.log"]["rule"] is None
    (tmp_path / "results/logs/a1.log").write_text("t=2")
    (tmp_path / "results/tables/t.parquet").write_bytes(b"q")
    (tmp_path / "results/tables/u.parquet").write_bytes(b"u")
    new = tmp_path / "new.json"
    cli(["audit", "manifest", "--workdir", str(tmp_path), "-o", str(new)])
    capsys.readouterr()
    assert cli(["audit", "compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "changed: 1\nunchanged: 1\nadded: 1\nremoved: 0\nvolatile_changed: 1" in out
    # --results as an absolute path (as people type it) is the same manifest, not a traceback
    by_path = tmp_path / "by_path.json"
    assert cli(["audit", "manifest", "--results", str(tmp_path / "results"), "-o", str(by_path)]) == 0
    assert json.loads(by_path.read_text())["entries"] == json.loads(new.read_text())["entries"]
    with pytest.raises(SystemExit, match="is not inside --workdir"):
        cli(["audit", "manifest", "--results", str(tmp_path / "results"),
             "--workdir", str(tmp_path / "results/tables")])
    assert cli(["hash", str(tmp_path / "results/adapters/a1")]) == 0
    assert capsys.readouterr().out.strip() == directory_sha256(tmp_path / "results/adapters/a1")


def _synthetic_study(root: Path) -> tuple[str, str]:
    """An adapter, a small retrieval file and one generation file built from both, with metadata."""
    from anchormask.model import adapters

    adapter, retrieval, generation = ("results/adapters/anchor_full_n8_s3_seed42", "results/retrieval/law.jsonl",
                                      "results/generations/anchor.jsonl")
    (root / adapter).mkdir(parents=True)
    for name in adapters.HASHED_FILES:
        (root / adapter / name).write_bytes(name.encode() * 50)
    (root / adapter / "provenance.json").write_text(json.dumps({"job": {"id": "x"},
                                                                 "files": adapters.file_hashes(root / adapter)}))
    for path, text in ((retrieval, '{"q": 1}\n'), (generation, '{"g": 1}\n')):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    meta = root / ".snakemake/metadata"
    meta.mkdir(parents=True)
    records = {generation: {"rule": "generate_arm", "input": [adapter, retrieval],
                            "input_checksums": {retrieval: "sha256:" + file_sha256(root / retrieval)}},
               adapter: {"rule": "train_adapter", "input": ["data/train/pairs.jsonl"]}}
    for out, record in records.items():
        (meta / urlsafe_b64encode(out.encode()).decode()).write_text(json.dumps(record))
    return adapter, retrieval


@pytest.mark.unit
def test_audit_check_reports_missing_and_altered_intermediates(tmp_path, capsys):
    """Fast: a deleted or altered adapter and a changed input, with the outputs built from them."""
    adapter, retrieval = _synthetic_study(tmp_path)
    (tmp_path / "data/train").mkdir(parents=True)
    (tmp_path / "data/train/pairs.jsonl").write_text("{}\n")
    check = ["audit", "check", "--workdir", str(tmp_path)]
    assert cli(check) == 0 and "unaltered" in capsys.readouterr().out
    weights = tmp_path / adapter / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"X")
    (tmp_path / retrieval).write_text('{"q": 2}\n')
    assert cli(check) == 1
    out = capsys.readouterr().out
    assert f"{adapter}: adapter_model.safetensors" in out and "altered or truncated" in out
    assert f"{retrieval}: changed since results/generations/anchor.jsonl was built" in out
    assert f"fix: snakemake --cores 1 --forcerun {adapter}" in out
    shutil.rmtree(tmp_path / adapter)
    assert cli(check) == 1
    out = capsys.readouterr().out
    assert f"{adapter}: the adapter folder is missing\n    used by 1 output(s): results/generations/anchor.jsonl" in out
    (tmp_path / "data/train/pairs.jsonl").unlink()  # an input of an output that is gone: not reported
    assert "pairs.jsonl" not in (cli(check), capsys.readouterr().out)[1]


@pytest.mark.slow
def test_1_second_dry_run_has_nothing_to_do(tiny_study, tmp_path):
    repo = copy_study(tiny_study, tmp_path / "repo")
    jobs = reported_dry_run("1 second dry run", repo)
    assert jobs == []


@pytest.mark.slow
def test_2_generation_steps_reruns_generation_and_downstream_not_training(tiny_study, every_job, tmp_path):
    repo = copy_study(tiny_study, tmp_path / "repo")
    jobs = reported_dry_run("2 generation.steps", repo, overlay(tmp_path, "steps.yaml", GENERATION_STEPS))
    assert counts(jobs) == {rule: n for rule, n in every_job.items() if rule not in UPSTREAM_OF_GENERATION | {"all"}}
    for job in jobs:  # the sampler params changed, or an input did
        assert job.reason.startswith(("Params have changed", "Input files updated by another job")), job
    assert all(j.reason.startswith("Params have changed") for j in jobs if j.rule.startswith("generate_"))


@pytest.mark.slow
def test_3_anchor_lr_reruns_only_anchor_training_and_downstream(anchor_rerun):
    jobs = anchor_rerun.planned
    report("3 train.overrides.anchor.lr (dry run)", jobs, 0.0)
    report("3 train.overrides.anchor.lr (run)", jobs, anchor_rerun.seconds)
    trained = {Path(j.output[0]).name for j in jobs if j.rule == "train_adapter"}
    anchors = {p.name for p in (anchor_rerun.repo / "results/adapters").iterdir() if p.name.startswith("anchor_")}
    assert trained == anchors
    assert {j.wildcards["arm"] for j in jobs if j.rule == "generate_arm"} == {"anchor", "anchor-vo", "anchor-qk"}
    assert {j.wildcards["arm"] for j in jobs if j.rule == "probe_maskcount_generate"} == {"anchor"}
    assert {j.wildcards["strategy"] for j in jobs if j.rule == "generate_sweep"} == {"anchor"}
    assert not {"verify_base", "retrieve"} & set(counts(jobs))
    assert dry_run(anchor_rerun.repo, anchor_rerun.overlay) == []


@pytest.mark.slow
def test_4_documentation_and_tests_rerun_nothing(tiny_study, tmp_path):
    repo = copy_study(tiny_study, tmp_path / "repo")
    for name in ("README.md", "tests/test_config.py"):
        (repo / name).write_text((repo / name).read_text() + "\n# edited\n")
    jobs = reported_dry_run("4 README + test edit", repo)
    assert jobs == []


@pytest.mark.slow
def test_5_outputs_not_downstream_of_the_change_keep_their_bytes(anchor_rerun, tmp_path, capsys):
    rerun_outputs = {os.path.normpath(o) for j in anchor_rerun.planned for o in j.output}
    old, new = tmp_path / "before.json", tmp_path / "after.json"
    audit.write_manifest(anchor_rerun.before, old)
    audit.write_manifest(anchor_rerun.after, new)
    cli(["audit", "compare", str(old), str(new)])
    print("\n[audit] 5 " + capsys.readouterr().out.split("\n\n")[0].replace("\n", ", "))
    result = audit.compare_manifests(anchor_rerun.before, anchor_rerun.after)
    assert not result["added"] and not result["removed"]
    changed_upstream = [p for p in result["changed"] if os.path.normpath(p) not in rerun_outputs]
    assert changed_upstream == []
    assert result["changed"] and result["unchanged"]
    for prefix in ("results/adapters/random_", "results/adapters/reverse_", "results/generations/random.jsonl",
                   "results/generations/sweep/random_", "results/retrieval/", "results/base/"):
        assert any(p.startswith(prefix) for p in result["unchanged"]), prefix
    assert all(p in result["changed"] for p in anchor_rerun.after["entries"]
               if p.startswith("results/adapters/anchor_"))  # a new lr really trains new weights


PAUSE_HOOK = Path(__file__).resolve().parent / "pause_hook"  # its sitecustomize.py says how it works


def _kill_inside_training(repo: Path, args: list[str], pause_dir: Path) -> str:
    """Run snakemake and SIGKILL its whole process group while a training job is inside training.

    No race: with tests/pause_hook first on PYTHONPATH, the first training job to log a progress
    line before its last step (train.log_every) names itself in ``pause_dir`` and stops there.
    """
    pause_dir.mkdir()
    env = {**os.environ, "PYTHONHASHSEED": "0", "ANCHORMASK_PAUSE_DIR": str(pause_dir),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PAUSE_HOOK), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(snakemake_cli(*args), cwd=repo, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not (paused := sorted(p.name for p in pause_dir.iterdir() if not p.name.endswith(".tmp"))):
            assert proc.poll() is None, f"snakemake ended ({proc.returncode}) before a training job paused"
            assert time.monotonic() < deadline, "no training job paused within 600 s"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    return paused[0]


@pytest.mark.slow
def test_6_training_killed_by_sigkill_leaves_nothing_complete_and_resumes_identically(
        anchor_rerun, tiny_study, tmp_path):
    repo = copy_study(tiny_study, tmp_path / "repo")
    args = ["--cores", "2", "--configfile", TINY, anchor_rerun.overlay]
    start = time.monotonic()
    victim = _kill_inside_training(repo, args, tmp_path / "paused")
    adapters = repo / "results/adapters"
    left = sorted(p.name for p in adapters.iterdir() if victim in p.name)
    print(f"\n[audit] 6 SIGKILL inside training of {victim}: left {left}")
    assert victim.startswith("anchor_")  # the change retrains only the anchor adapters
    assert not (adapters / victim).exists()
    assert all(name.startswith(".tmp-") for name in left)
    # The README's sequence after an interrupted run: --unlock, then the same command with --rerun-incomplete.
    snakemake(repo, "--unlock", "--configfile", TINY)  # SIGKILL leaves Snakemake's lock behind
    # With --rerun-incomplete, as the command will run: a job beside the victim may have written its outputs
    # just before the kill, before Snakemake recorded them complete, and a plain dry run stops on those.
    resumed = dry_run(repo, anchor_rerun.overlay, "--rerun-incomplete")
    assert victim in {Path(j.output[0]).name for j in resumed if j.rule == "train_adapter"}
    # The killed job run again, alone (the rest of the change is scenario 3's): the same adapter bytes as
    # the uninterrupted run's, and no staging folder left.
    snakemake(repo, *args, "--rerun-incomplete", f"results/adapters/{victim}")
    report("6 resumed after SIGKILL", resumed, time.monotonic() - start)
    after = audit.build_manifest("results", repo)["entries"]
    for output in (f"results/adapters/{victim}", f"results/train_state/{victim}.safetensors"):
        assert after[output]["sha256"] == anchor_rerun.after["entries"][output]["sha256"], output
    assert not list(adapters.glob(f".tmp-{victim}-*"))


# What an edit of the library plans on a finished study: the exact set of rules (a rule's job count
# is the whole rule's where it reruns). What counts as a change is what runs (docs/reproducibility.md):
# a comment, a docstring or a file nobody declares plans nothing; a real change plans the rules whose
# scripts import the module (their "Params have changed": the code param) and what is downstream.
MODEL_JOBS = {"train_adapter", "generate_arm", "generate_sweep", "probe_attention", "probe_maskcount_generate"}
STATISTICS_ON = {"statistics", "statistics_sweep", "headline", "figure", "paper", "probe_maskcount", "probe_summary"}
GENERATIONS_ON = {"gather_generations", "aggregate", "aggregate_sweep", "samples"} | STATISTICS_ON
GENERATION_JOBS = {"generate_arm", "generate_sweep", "probe_attention", "probe_maskcount_generate"}


def _append(module: str, text: str):
    def edit(package: Path) -> None:
        path = package / module
        path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")
    return edit


def _every_module(change):
    def edit(package: Path) -> None:
        for path in sorted(package.rglob("*.py")):
            path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")
    return edit


def _stray_files(package: Path) -> None:
    for folder in [package, *(p.parent for p in package.rglob("__init__.py"))]:
        for name in (".DS_Store", "notes.orig", ".module.py.swp"):
            (folder / name).write_text("left by an editor, a patch tool or macOS\n")


def _docstring(text: str) -> str:
    """The module's docstring with a sentence added (modules without one unchanged)."""
    return text.replace('"""', '"""Edited for the audit. ', 1) if text.startswith('"""') else text


def _schema_descriptions(package: Path) -> None:
    """Every description of every schema reworded (and each file written back in yaml's own layout)."""
    def reword(node):
        if isinstance(node, dict):
            return {k: f"Reworded. {v}" if k == "description" and isinstance(v, str) else reword(v)
                    for k, v in node.items()}
        return [reword(v) for v in node] if isinstance(node, list) else node
    for path in sorted((package / "schemas").glob("*.schema.yaml")):
        path.write_text(yaml.safe_dump(reword(yaml.safe_load(path.read_text())), sort_keys=False))


def _no_behaviour_change(package: Path) -> None:
    """A comment and a docstring sentence in every module, stray files in every package folder and
    reworded schema descriptions: one dry run for all, since none of them may plan a job."""
    _every_module(lambda t: _docstring(t) + "\n# a comment\n")(package)
    _stray_files(package)
    _schema_descriptions(package)


EDITS = {  # name -> (edit of src/anchormask, the rules it plans)
    "comments, docstrings, stray files and schema descriptions everywhere": (_no_behaviour_change, set()),
    "retrieval: real change": (_append("generation/retrieval.py", "\n_EDITED = 1\n"),
                               {"retrieve"} | GENERATION_JOBS | GENERATIONS_ON),
    "sampler: real change": (_append("generation/sampler.py", "\n_EDITED = 1\n"), GENERATION_JOBS | GENERATIONS_ON),
    "stats: new unused function": (_append("stats/bootstrap.py", "\n\ndef _unused():\n    return 1\n"),
                                   STATISTICS_ON),
    "masking: real change": (_append("training/masking.py", "\n_EDITED = 1\n"),
                             {"train_adapter", "probe_lora", "training_curves"} | GENERATION_JOBS | GENERATIONS_ON),
    "figures: real change": (_append("reporting/figures.py", "\n_EDITED = 1\n"), {"figure", "paper", "probe_summary"}),
    "verify: real change": (_append("model/verify.py", "\n_EDITED = 1\n"), ("every rule but", {"retrieve"})),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EDITS))
def test_7_a_library_edit_plans_exactly_what_its_change_touches(tiny_study, every_job, tmp_path, name):
    repo = copy_study(tiny_study, tmp_path / "repo")
    edit, planned = EDITS[name]
    if isinstance(planned, tuple):
        planned = set(every_job) - planned[1]
    edit(repo / "src" / "anchormask")
    jobs = reported_dry_run(f"7 {name}", repo)
    assert set(counts(jobs)) == planned
    for rule in {j.rule for j in jobs if "Params have changed" in j.reason}:
        assert counts(jobs)[rule] == every_job[rule], rule  # a change to its code reruns every job of a rule
    for job in jobs:  # each job is planned for its own code param or for an input rebuilt upstream
        assert "Params have changed" in job.reason or "Input files updated" in job.reason, job
    why = subprocess.run([str(Path(sys.executable).with_name("anchormask")), "audit", "why"], cwd=repo,
                         capture_output=True, text=True, check=True).stdout
    print(why)
    module = re.escape(name.split(":")[0])  # retrieval, sampler, stats, ...: part of the module's label
    for rule in {j.rule for j in jobs if "Params have changed" in j.reason}:
        assert re.search(rf"^{rule}: \d+ output\(s\): code changed in .*{module}", why, re.M), why
    assert bool(planned) != why.startswith("no job's code changed")


SWEEP_ADAPTER = "results/adapters/anchor_full_n8_s3_seed42"  # used by one sweep generation only: cheap to rebuild
SWEEP_GENERATION = "results/generations/sweep/anchor_n8_s3.jsonl"


def _rebuild_as_told(repo: Path, message: str) -> None:
    """Run the command an error or the audit suggests, with this study's config file."""
    command = re.search(r"snakemake --cores 1 --forcerun (\S+)", message)
    assert command, message
    snakemake(repo, "--cores", "2", "--configfile", TINY, "--forcerun", command.group(1))


@pytest.mark.slow
def test_8_a_deleted_adapter_is_reported_by_the_audit_and_its_fix_works(tiny_study, tmp_path, capsys):
    repo = copy_study(tiny_study, tmp_path / "repo")
    before = audit.build_manifest("results", repo)
    shutil.rmtree(repo / SWEEP_ADAPTER)
    assert dry_run(repo) == []  # Snakemake accepts a missing intermediate: hence the audit
    capsys.readouterr()
    check = ["audit", "check", "--workdir", str(repo), "--", "--configfile", TINY]
    assert cli(check) == 1
    out = capsys.readouterr().out
    print(f"\n[audit] 8 deleted adapter:\n{out}")
    assert f"{SWEEP_ADAPTER}: the adapter folder is missing" in out and SWEEP_GENERATION in out
    assert "Every output under results/ is one the current configuration produces" in out
    _rebuild_as_told(repo, out)
    (repo / "results/tables/of_an_earlier_configuration.md").write_text("x\n")
    assert cli(check) == 0
    assert "1 output(s) under results/ that the current configuration does not produce" in capsys.readouterr().out
    (repo / "results/tables/of_an_earlier_configuration.md").unlink()
    result = audit.compare_manifests(before, audit.build_manifest("results", repo))
    assert not result["changed"] and not result["added"] and not result["removed"], result


@pytest.mark.slow
def test_9_a_flipped_byte_stops_generation_naming_the_adapter_and_the_fix_works(tiny_study, tmp_path):
    repo = copy_study(tiny_study, tmp_path / "repo")
    before = audit.build_manifest("results", repo)
    flip_one_byte(repo / SWEEP_ADAPTER / "adapter_model.safetensors")
    proc = snakemake(repo, "--cores", "1", "--configfile", TINY, "--forcerun", SWEEP_GENERATION, SWEEP_GENERATION,
                     check=False)
    log = (repo / "results/logs/generate/sweep_anchor_n8_s3.log").read_text()
    print(f"\n[audit] 9 flipped byte: {log.strip().splitlines()[-1]}")
    assert proc.returncode != 0
    assert f"adapter {SWEEP_ADAPTER}: adapter_model.safetensors" in log and "altered or truncated" in log
    assert not (repo / SWEEP_GENERATION).exists()
    _rebuild_as_told(repo, log)
    result = audit.compare_manifests(before, audit.build_manifest("results", repo))
    assert not result["changed"] and not result["added"] and not result["removed"], result
