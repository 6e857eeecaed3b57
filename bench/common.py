"""What every benchmark shares: machine facts, the matmul rate, data loading, result lines, JSON."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# A run writes under results/ (ignored by git); --record also updates the tracked record that docs cite.
FRESH = REPO / "results" / "bench"
RESULTS = REPO / "bench" / "results"
CONFIG = REPO / "config.yaml"


# --------------------------------------------------------------------------- result lines

@dataclass(frozen=True)
class Line:
    """One measured value against its target. ``higher`` says which way is better.

    ``ratio`` is value / target when higher is better and target / value when lower is better,
    so ratio >= 1 always means the target is met. A line without a target is informational.
    """

    name: str
    value: float
    unit: str
    target: float | None = None
    higher: bool = True
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.target is None:
            return None
        if self.higher:
            return self.value / self.target
        return self.target / self.value if self.value > 0 else float("inf")

    @property
    def status(self) -> str:
        if self.ratio is None:
            return "INFO"
        return "PASS" if self.ratio >= 1.0 else "MISS"

    def format(self) -> str:
        value = f"{_num(self.value)} {self.unit}".strip()
        if self.target is None:
            target, ratio = "-", "-"
        else:
            target = f"{'>=' if self.higher else '<='} {_num(self.target)} {self.unit}".strip()
            ratio = f"{self.ratio:.2f}"
        text = f"{self.name:<26} {value:>20}   target {target:<16} ratio {ratio:>6}  {self.status}"
        return text + (f"  ({self.note})" if self.note else "")

    def record(self) -> dict[str, Any]:
        return asdict(self) | {"ratio": self.ratio, "status": self.status}


def _num(x: float) -> str:
    if x == 0 or 0.01 <= abs(x) < 1e5:
        return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 1000 else f"{x:.0f}"
    return f"{x:.3e}"


def say(*parts: Any) -> None:
    print(*parts, flush=True)


# --------------------------------------------------------------------------- machine facts

def cpu_model() -> str:
    from anchormask.repro import provenance

    return provenance.cpu_model()


def git_state() -> dict[str, Any]:
    def run(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"commit": run("rev-parse", "HEAD") or None, "dirty_files": len(run("status", "--porcelain").splitlines())}


def machine_facts(threads: int | None = None) -> dict[str, Any]:
    import torch

    facts = {
        "cpu": cpu_model(),
        "cores_logical": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": threads if threads is not None else torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "device": "cuda:" + torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "dtype": "float32",
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
        "git": git_state(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return facts


def job_threads(cfg: dict[str, Any], stage: str, threads: int | None) -> int:
    """The torch threads a benchmark runs at: ``threads`` when given (--threads), else what the
    pipeline's jobs of that stage use (``train.threads`` / ``generation.threads``), since the
    balance between small and large matmuls, and so every ratio, moves with the thread count."""
    return int(threads) if threads is not None else int(cfg[stage]["threads"])


def set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def matmul_rate(threads: int, n: int = 2048, seconds: float = 1.5) -> dict[str, Any]:
    """GFLOP/s of a square fp32 n x n matmul at ``threads`` torch threads (median of timed repeats).

    The median, not the best, of repeats: the benchmarks' own timings are sums over many calls
    on a machine that may be shared, so the denominator is measured the same way.
    """
    import torch

    set_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    for _ in range(2):
        torch.mm(a, b, out=out)
    times: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 5:
        t = time.perf_counter()
        torch.mm(a, b, out=out)
        times.append(time.perf_counter() - t)
    flops = 2.0 * n ** 3
    return {"n": n, "dtype": "float32", "threads": threads, "repeats": len(times),
            "gflops_median": flops / statistics.median(times) / 1e9, "gflops_best": flops / min(times) / 1e9}


# --------------------------------------------------------------------------- study data

def load_config() -> dict[str, Any]:
    from anchormask.settings import config

    return config.load(CONFIG)


def repo_path(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else REPO / p


def retrieved_queries(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Every query of the study with its retrieved locus statement, as results/retrieval/ holds them."""
    from anchormask import study
    from anchormask.generation import retrieval

    return [r for domain in study.domains(cfg) for r in retrieval.study_anchors(cfg, domain, root=REPO)]


def base_dir(cfg: dict[str, Any]) -> Path:
    return repo_path(cfg["base"]["path"])


def base(cfg: dict[str, Any], device: str | None = None):
    """The configured base as a model job takes it, its path resolved from the repository root."""
    from anchormask.model.modeljob import Base

    return Base.from_config({**cfg["base"], "path": str(base_dir(cfg)), **({"device": device} if device else {})})


def base_identity(cfg: dict[str, Any]) -> dict[str, Any]:
    """Which checkpoint was measured: data/base may be replaced by a retrained one at any time."""
    from anchormask import checksum

    path = base_dir(cfg)
    cfg_json = json.loads((path / "config.json").read_text())
    return {"path": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path),
            "sha256": checksum.directory_sha256(path), "pinned_sha256": cfg["base"].get("sha256"),
            **{k: cfg_json.get(k) for k in ("model_type", "num_hidden_layers", "hidden_size",
                                             "intermediate_size", "num_attention_heads", "vocab_size")}}


def write_result(name: str, payload: dict[str, Any], *, record: bool = False) -> list[Path]:
    """Write ``results/bench/<name>.json``; with ``record`` also the tracked ``bench/results/<name>.json``."""
    text = json.dumps(payload, indent=2, sort_keys=False, default=_jsonable) + "\n"
    written = []
    for folder in [FRESH, RESULTS] if record else [FRESH]:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        written.append(path)
    return written


def _jsonable(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def python() -> str:
    return sys.executable


# --------------------------------------------------------------------------- shared within one run

#: adapters trained during this run: name -> (path, manifest hash of the base it was trained on)
ADAPTERS: dict[str, tuple[Path, str]] = {}
_CLEANUP: list[Path] = []


def register_cleanup(path: Path) -> None:
    import atexit

    if not _CLEANUP:
        atexit.register(lambda: [shutil.rmtree(p, ignore_errors=True) for p in _CLEANUP])
    _CLEANUP.append(path)


def default_adapter(cfg: dict[str, Any], threads: int) -> tuple[Path, str]:
    """The default anchor / full adapter on the current base: this run's, the pipeline's, or trained now.

    Returns (path, where it came from). The pipeline's results/adapters/ copy is used only when
    its provenance names the base checkpoint that data/base holds now.
    """
    import tempfile

    from anchormask import checksum, study
    from anchormask.model import adapters
    from anchormask.training import train

    base_sha = checksum.directory_sha256(base_dir(cfg))
    if "anchor_default" in ADAPTERS and ADAPTERS["anchor_default"][1] == base_sha:
        return ADAPTERS["anchor_default"][0], "trained by this run's memory benchmark"
    size, steps, seed = cfg["train"]["default"]["size"], cfg["train"]["default"]["steps"], cfg["train"]["seeds"][0]
    job = study.AdapterJob("anchor", "full", size, steps, seed)
    pipeline = REPO / job.path
    try:
        if (json.loads((pipeline / "provenance.json").read_text())["base"]["sha256"] == base_sha
                and not adapters.problems(pipeline)):
            return pipeline, f"the pipeline's {job.path}"
    except (OSError, KeyError, ValueError):
        pass
    import torch

    work = Path(tempfile.mkdtemp(prefix="anchormask-bench-adapter-"))
    register_cleanup(work)
    settings = study.run_settings(cfg, "anchor") | {"threads": threads}
    measured = replace(base(cfg, "cpu"), sha256=base_sha)  # the checkpoint as it is now
    train.train(measured, str(repo_path(cfg["data"]["pairs"])), job, settings, str(work / job.id))
    torch.set_num_threads(threads)
    ADAPTERS["anchor_default"] = (work / job.id, base_sha)
    return work / job.id, f"trained now ({job.id})"


# --------------------------------------------------------------------------- the workflow

def snakemake_exe() -> str:
    return str(Path(python()).with_name("snakemake"))


def tests_module(name: str):
    """A module of tests/, imported without leaving tests/ on sys.path: the benchmarks use the tests'
    tiny checkpoints (tiny_families) and their copy of the working tree (helpers)."""
    import importlib

    tests = str(REPO / "tests")
    sys.path.insert(0, tests)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(tests)


def copy_repo(dest: Path, root: Path | None = None) -> Path:
    """The working tree without results/ outputs, copied as the tests copy it (tests/helpers.py)."""
    return tests_module("helpers").copy_repo(dest, root)


def job_counts(output: str) -> dict[str, int]:
    """Rule -> job count from a dry run's job-stats table, read as the tests read it (tests/helpers.py)."""
    return tests_module("helpers").job_counts(output)
