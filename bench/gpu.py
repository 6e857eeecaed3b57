"""6. The CUDA path (``--only gpu``, never in the default set): one prepared check of what the
pipeline does on a GPU, for the minutes a GPU machine is lent.

On the first CUDA device, each step timed and caught on its own (a failed step is recorded with
its error and the others still run; any failure makes ``python -m bench`` exit non-zero):

* load: the embedded base (data/base) and a tiny LLaDA-style checkpoint (built as the tests build
  it, tests/tiny_families.py; its modelling code needs transformers 4.x, else the step is INFO,
  skipped) with the loader's GPU arguments (bf16, ``device_map``): peak host RSS and GPU memory;
* train: a LoRA adapter (anchor strategy, full targets) for ``TRAIN_STEPS`` steps on each base,
  with and without gradient checkpointing: loss at the first and last step, tokens/s, GPU memory;
* sampler: the 63 main-set answers, float32 on the GPU, with the batched sampler and with the
  one-query-at-a-time LLaDA-style reference (bench/reference.py): identical tokens and speed-up;
  then the batched sampler in bf16 (the pipeline's GPU runtime): share of tokens that agree with
  float32; then float32 on the CPU: share of tokens that agree with the GPU's float32 run.

Without CUDA, ``python -m bench --only gpu`` prints one line and exits 0. ``run(device="cpu")``
runs every step on the CPU as a stand-in (tests/test_gpu.py), so the logic is tested without a GPU.
"""

from __future__ import annotations

import dataclasses
import resource
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from bench import common
from bench.common import Line, say

TRAIN_STEPS = 30
TIME_LIMIT_S = 300.0  # the whole check, on one GPU
SPEEDUP_TARGET = 3.0  # as the CPU sampler benchmark's


# --------------------------------------------------------------------------- pure logic

def no_cuda_reason(torch) -> str | None:
    """Why the check cannot run here (one line), or None when torch sees a CUDA device."""
    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return f"gpu: no CUDA device (torch {torch.__version__}, {build}); nothing to check, exit 0"


def token_agreement(a: list[list[int]], b: list[list[int]]) -> dict[str, Any]:
    """How far two runs' answer slots agree: whole sequences and single tokens, position by position."""
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        raise ValueError(f"token_agreement: the runs differ in shape ({[len(x) for x in a][:5]}... against "
                         f"{[len(y) for y in b][:5]}...); they must decode the same queries and slots")
    tokens = sum(len(x) for x in a)
    agreeing = sum(p == q for x, y in zip(a, b) for p, q in zip(x, y))
    return {"sequences": len(a), "identical_sequences": sum(x == y for x, y in zip(a, b)),
            "tokens": tokens, "agreeing_tokens": agreeing, "share": agreeing / tokens if tokens else 1.0}


def run_step(steps: dict[str, dict], name: str, fn: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
    """Run one step, record its time and outcome under ``steps[name]``; an exception fails the step only.

    ``fn`` may raise ``Skipped`` for a step this environment cannot run (recorded, not failed).
    """
    start = time.perf_counter()
    try:
        result = fn()
        steps[name] = {"status": "ok", "result": result}
    except Skipped as why:
        result, steps[name] = None, {"status": "skipped", "reason": str(why)}
    except Exception as err:  # one broken step must not hide the other steps' numbers
        traceback.print_exc()
        result, steps[name] = None, {"status": "failed", "error": f"{type(err).__name__}: {err}"}
    steps[name]["seconds"] = round(time.perf_counter() - start, 3)
    say(f"gpu: {name:<28} {steps[name]['status']:<8} {steps[name]['seconds']:7.2f} s"
        + (f"  ({steps[name].get('reason') or steps[name].get('error')})" if steps[name]["status"] != "ok" else ""))
    return result


class Skipped(Exception):
    """A step this environment cannot run (not a failure): the message says why."""


def failed_steps(steps: dict[str, dict]) -> list[str]:
    return [name for name, step in steps.items() if step["status"] == "failed"]


def step_lines(steps: dict[str, dict], wall_s: float) -> list[Line]:
    """One line per measured number of the payload's steps, then the whole check's time."""
    lines: list[Line] = []
    for name, step in steps.items():
        if step["status"] != "ok":
            lines.append(Line(f"gpu.{name}", 0, step["status"], note=step.get("reason") or step.get("error", "")))
            continue
        lines += _result_lines(name, step["result"] or {})
    return lines + [Line("gpu.wall", wall_s, "s", TIME_LIMIT_S, higher=False)]


def _result_lines(name: str, r: dict[str, Any]) -> list[Line]:
    if name.startswith("load."):
        return [Line(f"gpu.{name}.gpu_mem", r["peak_gpu_mib"] or 0, "MiB",
                     note=f"{r['dtype']}, peak host RSS {r['peak_rss_mib']:.0f} MiB, {r['load_s']:.2f} s")]
    if name.startswith("train."):
        return [Line(f"gpu.{name}", r["tokens_per_s"], "tok/s",
                     note=f"loss {r['loss_first']:.3f} -> {r['loss_last']:.3f} in {r['steps']} steps, "
                          f"peak GPU {r['peak_gpu_mib'] or 0:.0f} MiB")]
    if name == "sampler.float32":
        same = r["agreement"]
        # identical tokens are asserted by tests/test_gpu.py (pytest -m gpu), not judged here
        return [Line("gpu.sampler.identical", same["identical_sequences"], "queries",
                     note=f"of {same['sequences']}: batched sampler against the one-query reference, float32"),
                Line("gpu.sampler.speedup", r["speedup"], "x", SPEEDUP_TARGET,
                     note=f"{r['batched_s']:.2f} vs {r['reference_s']:.2f} s for {same['sequences']} queries")]
    if name in ("sampler.bf16", "sampler.cpu_float32"):
        same = r["agreement"]
        return [Line(f"gpu.{name}.agree", 100 * same["share"], "% tokens",
                     note=f"against the device's float32 run; {same['identical_sequences']}/{same['sequences']} "
                          f"answers identical; {r['batched_s']:.2f} s")]
    return []


def payload_of(facts: dict[str, Any], steps: dict[str, dict], wall_s: float) -> dict[str, Any]:
    return {"benchmark": "gpu", "device": facts, "train_steps": TRAIN_STEPS, "steps": steps,
            "failed_steps": failed_steps(steps), "wall_s": round(wall_s, 2), "target_wall_s": TIME_LIMIT_S}


# --------------------------------------------------------------------------- measuring

def device_facts(device: str) -> dict[str, Any]:
    import torch

    facts = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda, "cpu": common.cpu_model()}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        facts |= {"name": props.name, "memory_mib": props.total_memory // 2**20,
                  "capability": f"{props.major}.{props.minor}", "cudnn": torch.backends.cudnn.version(),
                  "bf16": torch.cuda.is_bf16_supported()}
    return facts


def peak_rss_mib() -> float:
    """This process's peak resident set so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@contextmanager
def gpu_peak(device):
    """Yields a dict whose ``mib`` is the peak GPU memory allocated inside the block (None on the CPU)."""
    import torch

    found: dict[str, float | None] = {"mib": None}
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    yield found
    if cuda:
        torch.cuda.synchronize()
        found["mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


@dataclasses.dataclass(frozen=True)
class Base:
    """A checkpoint the check loads: where it is and how the pipeline would load it."""

    name: str
    path: Path
    trust_remote_code: bool = False


def load(base: Base, runtime):
    from anchormask.model import backbone as bb

    return bb.load_backbone(base.path, trust_remote_code=base.trust_remote_code, runtime=runtime)


def load_check(base: Base, runtime) -> dict[str, Any]:
    from anchormask.model import backbone as bb

    with gpu_peak(runtime.device) as peak:
        t = time.perf_counter()
        backbone = load(base, runtime)
        synchronize(runtime.device)
        load_s = time.perf_counter() - t
    return {"load_s": round(load_s, 3), "peak_rss_mib": round(peak_rss_mib(), 1), "peak_gpu_mib": peak["mib"],
            "dtype": bb.runtime_record(runtime, backbone.model),
            "parameters": sum(p.numel() for p in backbone.model.parameters())}


def train_check(base: Base, runtime, pairs: list[dict], settings: dict[str, Any], *, steps: int,
                checkpointing: bool) -> dict[str, Any]:
    """``steps`` LoRA steps with train.py's pieces (the job's own loop would time the loading too)."""
    import torch

    from anchormask.model import backbone as bb
    from anchormask.training import masking, strategies, train

    backbone = load(base, runtime)
    if checkpointing:
        try:
            train.enable_checkpointing(backbone)
        except bb.BackboneError as err:
            raise Skipped(str(err).split(": ", 1)[-1]) from None
    encoded = train.encode_pairs(backbone, pairs, settings["seq_len"], "data/pairs")
    torch.manual_seed(0)
    model = train.attach_lora(backbone, "full", settings)
    model.train()
    optimizer = train.make_optimizer([p for p in model.parameters() if p.requires_grad], settings)
    generator = torch.Generator().manual_seed(0)
    ratio = masking.MaskRatio.from_config(settings["mask_ratio"])
    losses, tokens = [], 0
    with gpu_peak(runtime.device) as peak:
        t = time.perf_counter()
        batches = train.Batches(len(encoded), settings["batch_size"], generator)
        for step in range(steps):
            batch = batches.next()
            for group in optimizer.param_groups:
                group["lr"] = train.lr_at(step, settings)
            chosen = [encoded[i] for i in batch]
            loss, _ = train.train_step(backbone, runtime, chosen, strategies.resolve("anchor"),
                                       settings, ratio, generator)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            tokens += sum(len(e.input_ids) for e in chosen)
        wall = time.perf_counter() - t
    if not all(map(lambda x: x == x and abs(x) != float("inf"), losses)):
        raise FloatingPointError(f"{base.name}: the loss is not finite ({losses[:3]}...)")
    return {"steps": len(losses), "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
            "tokens": tokens, "tokens_per_s": round(tokens / wall, 1), "wall_s": round(wall, 3),
            "peak_gpu_mib": peak["mib"]}


def generate_timed(backbone, runtime, requests, settings) -> tuple[list[list[int]], float]:
    from anchormask.generation import sampler

    synchronize(runtime.device)
    t = time.perf_counter()
    results = sampler.generate(backbone, runtime, requests, settings)
    synchronize(runtime.device)
    return [r.slot_ids for r in results], time.perf_counter() - t


def reference_timed(backbone, requests, settings) -> tuple[list[list[int]], float]:
    from anchormask.generation import decoding
    from bench.reference import reference_generate

    suppressed = decoding.suppressed_token_ids(backbone)
    t = time.perf_counter()
    slots = [reference_generate(backbone.model, r.prompt_ids, r.anchor_ids, answer_len=settings.answer_len,
                                steps=settings.steps, mask_id=backbone.mask_token_id, suppressed=suppressed,
                                extra_masks=settings.extra_masks, block_len=settings.block_len)[0]
             for r in requests]
    synchronize(next(backbone.model.parameters()).device)
    return slots, time.perf_counter() - t


def sampler_runs(base: Base, device, retrieved: list[dict], settings, steps: dict[str, dict]) -> None:
    """float32 batched against the reference on the device; bf16 and the CPU against that float32 run."""
    from anchormask.generation import arm_answers
    from anchormask.model import backbone as bb

    def on(dev, dtype):
        runtime = bb.Runtime(dev, dtype)
        backbone = load(base, runtime)
        backbone.model.eval()
        return backbone, runtime, arm_answers.requests_for(backbone, retrieved)

    def float32_on_device():
        backbone, runtime, requests = on(device, None)
        generate_timed(backbone, runtime, requests[:1], settings)  # warm-up (kernels, allocator)
        slots, batched = generate_timed(backbone, runtime, requests, settings)
        ref, ref_s = reference_timed(backbone, requests, settings)
        return {"slots": slots, "batched_s": round(batched, 3), "reference_s": round(ref_s, 3),
                "speedup": round(ref_s / batched, 3), "agreement": token_agreement(slots, ref)}

    def against(dev, dtype, reference):
        backbone, runtime, requests = on(dev, dtype)
        slots, wall = generate_timed(backbone, runtime, requests, settings)
        return {"batched_s": round(wall, 3), "agreement": token_agreement(slots, reference)}

    f32 = run_step(steps, "sampler.float32", float32_on_device)
    if f32 is None:
        return
    slots = f32.pop("slots")
    import torch

    run_step(steps, "sampler.bf16", lambda: against(device, torch.bfloat16, slots))
    run_step(steps, "sampler.cpu_float32", lambda: against(torch.device("cpu"), None, slots))


# --------------------------------------------------------------------------- the check

def tiny_llada(work: Path) -> Base:
    """The tests' tiny LLaDA-style checkpoint (tests/tiny_families.py), built under ``work``."""
    tiny_families = common.tests_module("tiny_families")

    if not tiny_families.remote_code_runs():
        import transformers

        raise Skipped(f"LLaDA's modelling code needs transformers 4.x, this is {transformers.__version__} "
                      "(envs/requirements-remote.txt)")
    return Base("llada", tiny_families.build_llada(work / "llada"), trust_remote_code=True)


def built(steps: dict[str, dict], name: str, build: Callable[[], Base]) -> Base | None:
    """Run a base's build as step ``name``: the step records where the base is (JSON), the Base comes back."""
    made: dict[str, Base] = {}

    def step() -> dict[str, str]:
        made["base"] = build()
        return {"name": made["base"].name, "path": str(made["base"].path)}

    run_step(steps, name, step)
    return made.get("base")


def run_checks(device: str, bases: list[Base | Callable[[], Base]], pairs: list[dict], train_settings: dict,
               retrieved: list[dict], sampler_settings, *, train_steps: int = TRAIN_STEPS) -> dict[str, dict]:
    """Every step on ``device`` ("cuda", or "cpu" as a stand-in); returns the steps' records in order."""
    import torch

    from anchormask.model import backbone as bb

    dev = torch.device(device)
    runtime = bb.Runtime(dev, torch.bfloat16 if dev.type == "cuda" else None)  # the pipeline's own choice
    steps: dict[str, dict] = {}
    for entry in bases:
        base = entry if isinstance(entry, Base) else built(steps, "build.tiny_llada", entry)
        if base is None:
            continue
        run_step(steps, f"load.{base.name}", lambda: load_check(base, runtime))
        for gc in (False, True):
            run_step(steps, f"train.{base.name}{'.checkpointing' if gc else ''}",
                     lambda: train_check(base, runtime, pairs, train_settings, steps=train_steps, checkpointing=gc))
    sampler_runs(bases[0], dev, retrieved, sampler_settings, steps)
    return steps


def run(threads: int | None = None, device: str = "cuda") -> tuple[dict, list[Line]]:
    import torch

    from anchormask import data, study
    from anchormask.generation import sampler

    cfg = common.load_config()
    torch.use_deterministic_algorithms(True, warn_only=True)  # as every pipeline job runs
    common.set_threads(common.job_threads(cfg, "generation", threads))
    settings = dataclasses.replace(sampler.SamplerSettings.from_config(cfg["generation"]), temperature=0.0)
    train_settings = study.train_settings(cfg, "anchor")
    pairs = data.select_pairs(data.load_pairs(common.repo_path(cfg["data"]["pairs"])), cfg["train"]["default"]["size"],
                              train_settings["subset"], cfg["train"]["seeds"][0])
    retrieved = common.retrieved_queries(cfg)  # the main query set
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="anchormask-bench-gpu-") as work:
        bases = [Base("embedded", common.base_dir(cfg)), lambda: tiny_llada(Path(work))]
        steps = run_checks(device, bases, pairs, train_settings, retrieved, settings)
    wall = time.perf_counter() - start
    return payload_of(device_facts(device), steps, wall), step_lines(steps, wall)
