"""Helpers shared by the tests (and the benchmarks: the working-tree copy, the dry-run job table): a tiny masked LM,
tiny training settings, Snakemake runs in a copy of the working tree."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = "tests/configs/tiny.yaml"  # the reduced study's config overlay, relative to a repository copy
# Smaller studies are layers over TINY (--configfile TINY SMALL [FAMILY]), each with helpers.keep_arms.
SMALL = "tests/configs/layers/small.yaml"
FAMILY = "tests/configs/layers/family.yaml"
ARMS = ("base", "anchor", "random")  # the smaller studies' arms
WORDS = ("the a of in is was river lake mountain sea city capital north south east west largest deepest "
         "longest highest world country flows into through which what where does planet star sun moon "
         "law court food bread salt heart blood ? . ,").split()


# Never copied when the tree is walked without git (what .gitignore leaves out, and the outputs).
SKIP_DIRS = {".git", ".snakemake", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}


def git_files(root: Path) -> list[str] | None:
    """The files git sees in ``root`` (tracked and untracked-but-not-ignored), or None where ``root`` is
    not the top of a git working tree (a release archive; a folder inside someone else's repository)."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                             timeout=30)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
            return None
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, check=True,
                                capture_output=True, timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):
        return None
    return [name for name in listed if name]


def tree_files(root: Path) -> list[str]:
    """Every file under ``root`` but virtual environments, caches, .git and Snakemake's state."""
    names = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".venv")
                         and not d.endswith(".egg-info"))
        rel = Path(folder).relative_to(root)
        names += [(rel / f).as_posix() for f in sorted(files) if not f.endswith((".pyc", ".tmp"))]
    return names


def copy_repo(dest: Path, root: Path | None = None) -> Path:
    """The working tree without results/ outputs: the files git sees or, without git (a release archive),
    the whole tree less virtual environments, caches, .git and .snakemake.

    The one copy the tests and the benchmarks make (bench/common.py imports it): results/ keeps only
    its README, so a copy plans every job of the default target, as a fresh clone does.
    """
    root = root or REPO
    files = git_files(root)
    dest.mkdir(parents=True, exist_ok=True)
    for name in files if files is not None else tree_files(root):
        if name.startswith("results/") and name != "results/README.md":
            continue
        src = root / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def job_counts(output: str) -> dict[str, int]:
    """Rule -> job count from a dry run's job-stats table (empty when nothing is to be done); the
    rows sum to the table's total."""
    counts: dict[str, int] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Job stats:"):
            for row in lines[i + 3:]:
                parts = row.split()
                if len(parts) != 2 or parts[0] == "total":
                    break
                counts[parts[0]] = int(parts[1])
            break
    return counts


def keep_arms(repo: Path, arms: tuple[str, ...] = ARMS) -> Path:
    """Leave only ``arms`` and the comparisons between them in ``repo``'s config.yaml: what a layer cannot
    do for arms, since Snakemake merges mappings key by key (a layer changes or adds arms, never removes one)."""
    import yaml

    path = repo / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["arms"] = {name: config["arms"][name] for name in arms}
    config["statistics"]["comparisons"] = {name: c for name, c in config["statistics"]["comparisons"].items()
                                           if {c["a"], c["b"]} <= set(arms)}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return repo


def build_tiny_model(path: Path, *, layers: int = 2, hidden: int = 32, seed: int = 0, dropout: float = 0.1) -> Path:
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tokenizer = BertTokenizerFast(vocab=vocab, do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=96,
                        type_vocab_size=2, pad_token_id=0, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout)
    BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def cpu_base(path, sha256: str = "f" * 64):
    """A base on the CPU, as the config's base block gives it to a model job."""
    from anchormask.model.modeljob import Base

    return Base.from_config({"path": str(path), "sha256": sha256, "device": "cpu"})


def tiny_train_settings(**overrides) -> dict:
    settings = {"seq_len": 40, "rank": 4, "alpha": 8, "dropout": 0.0, "lr": 0.01, "weight_decay": 0.0,
                "warmup_steps": 1, "batch_size": 3, "subset": "first",
                "mask_ratio": {"kind": "uniform", "low": 0.5, "high": 0.9}, "loss": "ce", "tv_weight": 1.0,
                "threads": 1, "log_every": 2}
    settings.update(overrides)
    return settings


def flip_one_byte(path: Path) -> None:
    """Flip the lowest bit of the middle byte of a file (same size, other content)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def snakemake_cli(*args: str) -> list[str]:
    """The command line of this environment's snakemake."""
    import sys

    return [str(Path(sys.executable).with_name("snakemake")), *args]


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 900, env: dict[str, str] | None = None):
    """Run snakemake in ``workdir`` (environment: ``env`` or this process's, with a fixed hash seed)."""
    import os
    import subprocess

    env = {**(os.environ if env is None else env), "PYTHONHASHSEED": "0"}
    proc = subprocess.run(snakemake_cli(*args), cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n"
                             f"{proc.stderr[-6000:]}")
    return proc


def dry_run_jobs(workdir: Path, *args: str) -> dict[str, int]:
    """Rule -> job count from a dry run's job-stats table (empty when nothing is to be done)."""
    proc = snakemake(workdir, "-n", *args)
    return job_counts(proc.stdout + proc.stderr)


def two_pass_attention_probe(backbone, runtime, requests, settings):
    """The attention probe's per-query masses computed with a second forward pass per step: before each of
    the sampler's passes, the observed input runs once more with ``output_attentions`` (or, for an ``sdpa``
    family, while torch's SDPA is recorded). The reference the probe's one-pass reading must equal.
    Returns (query id -> [layers, heads, 2], the sampler's results)."""
    from anchormask.generation import sampler
    from anchormask.probes import attention

    sums, steps = {}, {}

    def observe(obs):
        ids, mask = obs.input_ids.to(runtime.device), obs.attention_mask.to(runtime.device)
        with runtime.autocast():
            if backbone.family.attentions == "sdpa":
                with attention.recorded_sdpa() as layers:
                    backbone.hidden_states(ids, mask)
            else:
                layers = backbone.hidden_states(ids, mask, output_attentions=True)[1].attentions
        rows = attention.attention_mass_rows(layers, *attention.observation_masks(obs))
        for b, qid in enumerate(obs.query_ids):
            if obs.masked[b].any():
                sums[qid] = sums.get(qid, 0.0) + rows[b]
                steps[qid] = steps.get(qid, 0) + 1

    results = sampler.generate(backbone, runtime, requests, settings, observer=observe)
    return {qid: sums[qid] / steps[qid] for qid in sums}, results


def one_pass_attention_probe(backbone, runtime, requests, settings, monkeypatch):
    """``attention.attention_probe`` with what it leaves unseen: (masses, the sampler's results, the model's
    forward passes)."""
    from anchormask.generation import sampler
    from anchormask.probes import attention

    results, passes, generate = [], [], sampler.generate
    handle = backbone.model.register_forward_pre_hook(lambda module, args: passes.append(1))
    try:
        with monkeypatch.context() as patch:
            patch.setattr(sampler, "generate", lambda *args, **kwargs: results.append(generate(*args, **kwargs))
                          or results[-1])
            masses = attention.attention_probe(backbone, runtime, requests, settings)
    finally:
        handle.remove()
    return masses, results[0], len(passes)


def forward_passes_of_plain_generation(backbone, runtime, requests, settings):
    """(the sampler's results without an observer, the model's forward passes they took)."""
    from anchormask.generation import sampler

    passes = []
    handle = backbone.model.register_forward_pre_hook(lambda module, args: passes.append(1))
    try:
        return sampler.generate(backbone, runtime, requests, settings), len(passes)
    finally:
        handle.remove()


def assert_one_pass_probe_equals_two_passes(backbone, runtime, requests, settings, monkeypatch):
    """The probe reads the sampler's own pass: its masses equal the two-pass reference exactly (the same
    forward on the same input, deterministic on the CPU), its tokens are the plain sampler's, and it runs
    no forward pass beyond the sampler's."""
    import numpy as np

    want, want_results = two_pass_attention_probe(backbone, runtime, requests, settings)
    got, got_results, got_passes = one_pass_attention_probe(backbone, runtime, requests, settings, monkeypatch)
    plain_results, plain_passes = forward_passes_of_plain_generation(backbone, runtime, requests, settings)
    assert set(got) == set(want) == {r.query_id for r in requests}
    for qid in want:
        assert got[qid].shape == want[qid].shape and np.array_equal(got[qid], want[qid]), qid
    assert got_results == plain_results == want_results
    assert got_passes == plain_passes > 0


# Writes half a file through the atomic writer, says so, and blocks until it is killed.
WRITER = """
import sys, time
from anchormask import fileio
with fileio.atomic_path(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half a figure")
    print("writing", flush=True)
    time.sleep(600)
"""


def start_writer(target: Path) -> "subprocess.Popen":
    """A writer of ``target`` blocked mid-write (its temporary exists, the target not yet)."""
    import os
    import subprocess
    import sys

    path = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))  # this checkout's
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline() == "writing\n", "the writer ended before it wrote"
    return proc


def kill(proc: "subprocess.Popen") -> int:
    import signal

    proc.send_signal(signal.SIGKILL)  # no cleanup runs: what a kill -9 of the workflow does to a job
    proc.wait(timeout=60)
    proc.stdout.close()
    return proc.pid


def removed_line(tmp: Path, target: Path, pid: int) -> str:
    return f"removed {tmp}: a half-written temporary of {target}, left by a writer (pid {pid}) that no longer runs"
