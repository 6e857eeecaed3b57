"""7. Scale: the memory model (src/anchormask/model/memory.py) checked at the real architectures' shapes.

For each shape (LLaDA-8B's and Dream-7B's config.json values, the report's 1.3B LLaDA-style shape, a
~50M LLaDA-style and a ~120M Dream-style shape (untied, GQA) and the embedded base) that the machine can
hold, three measurements, each in a fresh process under ``python -m bench._rss`` so peaks do not mix:
loading, one LoRA training step at the study's batch and length, one generation step of a full batch;
with the settings of the shape's layer in config/bases/ over config.yaml. The big shapes are built in
memory with random weights and the family's modelling code (tests/remote_code/: the tests' LLaDA- and
Dream-style code, the real checkpoints' module layout), never written to disk; the embedded base is
loaded from data/base.
Peak: host RSS on the CPU (float32), peak allocated on a GPU (bf16). Each line: measured, the model's
prediction for the same shape and settings, their ratio; PASS within 15%.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common
from bench.common import Line, say

TOLERANCE = 0.15
GIB = 1024 ** 3
LLADA_IDS = {"mask_token_id": 126336, "bos_token_id": 126080, "eos_token_id": 126081, "pad_token_id": 126081}
DREAM_IDS = {"mask_token_id": 151666, "bos_token_id": 151665, "eos_token_id": 151643, "pad_token_id": 151643}
# config.json values: GSAI-ML/LLaDA-8B-Base, Dream-org/Dream-v0-Base-7B; the report's 1.3B (bench/memory.py).
LLADA_8B = {"model_type": "llada", "d_model": 4096, "n_heads": 32, "n_kv_heads": 32, "n_layers": 32,
            "mlp_hidden_size": 12288, "vocab_size": 126464, "embedding_size": 126464, "max_sequence_length": 4096,
            "rope_theta": 500000.0, "weight_tying": False}
DREAM_7B = {"model_type": "Dream", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
            "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 131072,
            "rope_theta": 1000000.0, "rope_scaling": None, "rms_norm_eps": 1e-6, "vocab_size": 152064,
            "tie_word_embeddings": False}
LLADA_1P3B = LLADA_8B | {"d_model": 2048, "n_heads": 16, "n_kv_heads": 16, "n_layers": 20, "mlp_hidden_size": 5632,
                         "rope_theta": 10000.0, "weight_tying": True}
LLADA_50M = LLADA_1P3B | {"d_model": 384, "n_heads": 6, "n_kv_heads": 6, "n_layers": 4, "mlp_hidden_size": 1024}
DREAM_120M = DREAM_7B | {"hidden_size": 384, "intermediate_size": 1024, "num_hidden_layers": 4,
                         "num_attention_heads": 6,
                         "num_key_value_heads": 2}
# name -> (family, config.json (None: data/base itself), layer over config.yaml)
SHAPES: dict[str, tuple[str, dict | None, str | None]] = {
    "embedded": ("bert", None, None),
    "llada-50m": ("llada", LLADA_50M, "config/bases/report-1.3b.yaml"),
    "dream-120m": ("dream", DREAM_120M, "config/bases/dream-7b-base.yaml"),
    "report-1.3b": ("llada", LLADA_1P3B, "config/bases/report-1.3b.yaml"),
    "llada-8b": ("llada", LLADA_8B, "config/bases/llada-8b-base.yaml"),
    "dream-7b": ("dream", DREAM_7B, "config/bases/dream-7b-base.yaml"),
}
PHASES = ("load", "train", "generate")
MODEL_PHASE = {"load": "load", "train": "training", "generate": "generation"}
SELECTED: list[str] | None = None  # python -m bench --only scale --shape NAME (repeatable)


@dataclass(frozen=True)
class ModelLine(Line):
    """Measured against the model's prediction: ``ratio`` = measured / predicted. Reported, not judged:
    tests/test_bench.py asserts the embedded base's within ``TOLERANCE``; ``within_tolerance`` says it."""

    predicted: float = 0.0

    @property
    def ratio(self) -> float | None:
        return self.value / self.predicted if self.predicted else None

    @property
    def status(self) -> str:
        return "INFO"

    @property
    def within_tolerance(self) -> bool:
        return self.ratio is not None and abs(self.ratio - 1) <= TOLERANCE

    def format(self) -> str:
        text = (f"{self.name:<26} {self.value:>9.2f} {self.unit} measured  {self.predicted:>7.2f} {self.unit} "
                f"predicted  ratio {self.ratio:5.2f}  {'within' if self.within_tolerance else 'outside'} "
                f"{TOLERANCE:.0%}")
        return text + (f"  ({self.note})" if self.note else "")


def study_config(layer: str | None) -> dict[str, Any]:
    from anchormask.settings import config
    from anchormask.settings import layers as config_layers

    cfg = common.load_config()
    return config_layers.merge(cfg, config.yaml_file(common.REPO / layer)) if layer else cfg


def checkpoint(name: str, family: str, raw: dict | None, work: Path) -> Path:
    """A folder with the shape's config.json, the family's tokenizer and code; no weights that are read."""
    if raw is None:
        return common.base_dir(common.load_config())
    tf = common.tests_module("tiny_families")
    path = (tf.build_llada if family == "llada" else tf.build_dream)(work / name)
    written = json.loads((path / "config.json").read_text())
    ids = LLADA_IDS if family == "llada" else DREAM_IDS
    (path / "config.json").write_text(json.dumps(written | raw | ids, indent=2) + "\n")
    return path


def available(device: str) -> int:
    """Bytes the machine can give one measurement: MemAvailable on the CPU, free memory on the GPU."""
    if device == "cuda":
        import torch

        return torch.cuda.mem_get_info()[0]
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def measure(spec: dict, work: Path, timeout: int = 3600) -> dict[str, Any]:
    """One phase in its own launcher: the child's own line with the launcher's peak RSS."""
    path = work / f"spec-{spec['name']}-{spec['phase']}.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(common.REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run([common.python(), "-m", "bench._rss", common.python(), "-m", "bench.scale_job", str(path)],
                          cwd=common.REPO, env=env, capture_output=True, text=True, timeout=timeout)
    rss = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    child = [json.loads(ln[6:]) for ln in proc.stdout.splitlines() if ln.startswith("SCALE ")]
    if not rss or rss[-1]["rc"] != 0 or not child:
        raise RuntimeError(f"scale {spec['name']} {spec['phase']} failed\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return child[-1] | {"maxrss_bytes": int(rss[-1]["maxrss_mib"] * 2 ** 20), "wall_s": rss[-1]["wall_s"]}


def job_spec(name: str, family: str, cfg: dict, path: Path, device: str, threads: int | None) -> dict[str, Any]:
    from anchormask import study

    base = {**cfg["base"], "path": str(path), "device": device, "sha256": "0" * 64}
    if family != "bert":
        base["family"] = family
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    n = threads or (cfg["train"]["threads"] if device == "cuda" else min(cfg["train"]["threads"], cores))
    return {"name": name, "dir": str(path), "weights": "disk" if family == "bert" else "random", "base": base,
            "threads": n, "train": study.run_settings(cfg, "anchor"), "generation": cfg["generation"]}


def predictions(shape, cfg: dict, device: str, results: dict[str, dict]) -> dict[str, dict[str, int]]:
    """The model at the shapes the measurements ran: the masked positions they drew, the batch's width."""
    from anchormask.model import memory

    ran = {"masked": results["train"]["masked"], "gen_masked": results["generate"]["masked"],
           "width": results["generate"]["width"]}
    return memory.predict(shape, memory.job_settings(cfg) | ran, device)


def measured_value(record: dict, device: str) -> int:
    return record["gpu_peak_bytes"] if device == "cuda" else record["maxrss_bytes"]


def one_shape(name: str, device: str, threads: int | None, work: Path) -> tuple[dict, list[Line]]:
    from anchormask.model import memory

    family, raw, layer = SHAPES[name]
    cfg = study_config(layer)
    path = checkpoint(name, family, raw, work)
    shape = memory.Shape.of_checkpoint(path)
    need = memory.predict(shape, memory.job_settings(cfg), device)
    peak, free = max(p["total"] for p in need.values()), available(device)
    record: dict[str, Any] = {"shape": shape.record(), "layer": layer, "device": device, "needs_bytes": peak,
                              "available_bytes": free}
    if peak > 0.9 * free:
        say(f"scale: {name} skipped: the model predicts {peak / GIB:.1f} GiB, {free / GIB:.1f} GiB available "
            f"on {device}")
        return record | {"skipped": True}, [Line(f"scale.{name}", peak / GIB, "GiB", None,
                                                 note=f"skipped: {free / GIB:.1f} GiB available")]
    spec = job_spec(name, family, cfg, path, device, threads)
    results = {}
    for phase in PHASES:
        results[phase] = measure(spec | {"phase": phase}, work)
        say(f"scale: {name} {phase}: {json.dumps(results[phase])}")
    predicted = predictions(shape, cfg, device, results)
    lines = []
    for phase in PHASES:
        parts = predicted[MODEL_PHASE[phase]]
        total = parts["total"] - (parts["runtime"] if device == "cuda" else 0)  # allocated: no CUDA context
        value = measured_value(results[phase], device)
        results[phase]["predicted_bytes"] = total
        lines.append(ModelLine(f"scale.{name}.{phase}", value / GIB, "GiB", predicted=total / GIB,
                               note=_note(phase, results[phase], parts)))
    return record | {"settings": spec, "measured": results, "predicted": predicted}, lines


def _note(phase: str, result: dict, parts: dict) -> str:
    terms = ", ".join(f"{k} {v / GIB:.2f}" for k, v in parts.items() if k != "total")
    seconds = result.get("step_s", result["load_s"])
    return f"{'load' if phase == 'load' else 'step'} {seconds:.1f} s; {terms}"


def device_name() -> str:
    import torch

    return f"cuda:{torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else f"cpu:{common.cpu_model()}"


def run(threads: int | None = None) -> tuple[dict, list[Line]]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = Path(tempfile.mkdtemp(prefix="anchormask-bench-scale-"))
    common.register_cleanup(work)
    shapes, lines = {}, []
    for name in SELECTED or list(SHAPES):
        shapes[name], shape_lines = one_shape(name, device, threads, work)
        lines += shape_lines
    project = projection(shapes)
    for name, p in project.items():
        lines.append(Line(f"scale.{name}.study_h", p["hours"], "h", None,
                          note=f"projection on {device_name()}: {p['train_steps']} steps x {p['train_step_s']:.1f} s + "
                               f"{p['generation_forwards']} forwards x {p['forward_s']:.1f} s"))
    return {"benchmark": "scale", "device": device_name(), "tolerance": TOLERANCE, "shapes": shapes,
            "projection": project}, lines


def study_work(cfg: dict) -> dict[str, int]:
    """The default study's training steps (each run once, to its longest adapter) and denoising forwards
    of full batches (each arm on each query set, each sweep point on the main set; probes left out)."""
    from anchormask import study

    runs: dict[tuple, int] = {}
    for job in study.trained_adapters(cfg):
        key = (job.strategy, job.targets, job.size, job.seed)
        runs[key] = max(runs.get(key, 0), job.steps)
    queries = {name: sum(query_count(cfg, name, d) for d in domains) for name, domains in study.query_sets(cfg).items()}
    batch, steps = cfg["generation"]["batch_size"], cfg["generation"]["steps"]
    per_set = {name: math.ceil(n / batch) * steps * (2 if cfg["generation"].get("cfg_scale") else 1)
               for name, n in queries.items()}
    forwards = len(cfg["arms"]) * sum(per_set.values()) + len(study.sweep_points(cfg)) * per_set["main"]
    return {"train_steps": sum(runs.values()), "generation_forwards": forwards}


def query_count(cfg: dict, query_set: str, domain: str) -> int:
    folder = cfg["data"]["queries_dir" if query_set == "main" else "alt_queries_dir"]
    return len((common.repo_path(folder) / f"{domain}.jsonl").read_text().splitlines())


def projection(shapes: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """Each measured shape's default study on this device: steps x the measured step times (an upper
    bound for generation: every forward is timed as the first, widest step of a full batch)."""
    out = {}
    for name, rec in shapes.items():
        if rec.get("skipped"):
            continue
        work = study_work(study_config(SHAPES[name][2]))
        train_s, forward_s = rec["measured"]["train"]["step_s"], rec["measured"]["generate"]["step_s"]
        total = work["train_steps"] * train_s + work["generation_forwards"] * forward_s
        out[name] = work | {"train_step_s": train_s, "forward_s": forward_s, "hours": round(total / 3600, 2),
                            "device": device_name(), "label": "projection, not a measured run"}
    return out
