"""1. Training throughput: anchormask.training.train.train_step against a plain PyTorch loop.

Both sides train their own copy of the same base with the same LoRA config and the same
initial LoRA weights, on the same batches (the pipeline's default anchor / full job: its
pairs, batch size and shuffling), each with its own AdamW and its own mask generator. Steps
are timed one by one, the two sides alternating step by step on the same batch (A B, then
B A, ...) so that a shared machine's load falls on both alike. Throughput counts answer + question tokens (the
positions a strategy may mask; special tokens and padding excluded): the same count on both
sides, so the ratio of tokens/s is the ratio of step times. The value judged is the median
over steps of the paired ratio (reference time / project time for the same batch, timed back
to back), which a load spike on one step cannot swing; the ratio of total tokens/s is
recorded beside it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import common, flops
from bench.common import Line, say
from bench.reference import reference_train_step

STRATEGY, TARGETS = "anchor", "full"
PHASES = ("forward", "backward", "optimizer")


@dataclass
class Side:
    """One side of the comparison: its step (a batch -> loss and masked positions), its optimizer, and
    what its timed steps add up to."""

    name: str
    forward: Callable[[list], tuple[Any, int]]
    optimizer: Any
    width: Callable[[list], int]                 # the padded width the side runs a batch at
    head_positions: Callable[[list, int], int]   # positions its vocabulary head sees (batch, masked)
    seconds: float = 0.0
    tokens: int = 0
    flops: int = 0
    padded_tokens: int = 0
    masked: int = 0
    losses: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})

    def update(self, batch) -> tuple[float, int]:
        """One optimizer step on ``batch``, its phases timed; (loss, masked positions)."""
        t0 = time.perf_counter()
        loss, masked = self.forward(batch)
        t1 = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        self.optimizer.step()
        t3 = time.perf_counter()
        for phase, dt in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2)):
            self.phases[phase].append(dt)
        return float(loss.detach()), masked

    def timed(self, batch, shape, settings: dict[str, Any], content: tuple) -> None:
        t = time.perf_counter()
        loss, masked = self.update(batch)
        dt = time.perf_counter() - t
        width = self.width(batch)
        self.seconds += dt
        self.step_s.append(dt)
        self.tokens += sum(1 for e in batch for c in e.classes if c in content)
        self.padded_tokens += len(batch) * width
        self.masked += masked
        self.losses.append(round(loss, 5))
        self.flops += flops.train_step(shape, len(batch), width, self.head_positions(batch, masked),
                                       rank=settings["rank"], targets=TARGETS)

    def summary(self, steps: int, rate: dict[str, Any]) -> dict[str, Any]:
        gflops = self.flops / self.seconds / 1e9
        return {"steps": steps, "seconds": round(self.seconds, 4), "ms_per_step": round(1e3 * self.seconds / steps, 3),
                "tokens": self.tokens, "tokens_per_s": round(self.tokens / self.seconds, 1),
                "padded_tokens": self.padded_tokens, "masked_positions": self.masked, "model_flops": self.flops,
                "gflops_per_s": round(gflops, 3), "mfu": round(gflops / rate["gflops_median"], 4),
                "final_losses": self.losses[-3:], "step_ms": [round(1e3 * x, 2) for x in self.step_s],
                "median_step_ms": round(1e3 * statistics.median(self.step_s), 3),
                "median_phase_ms": {k: round(1e3 * statistics.median(v), 3) for k, v in self.phases.items()}}


def two_models(cfg: dict[str, Any], settings: dict[str, Any], seed: int):
    """The base twice, with the same initial LoRA weights: through the project's attach_lora and through
    peft directly. (runtime, project backbone, project model, reference backbone, reference model)."""
    import torch
    from peft import get_peft_model

    from anchormask.model import backbone as bb
    from anchormask.training import train

    runtime = bb.pick_runtime("cpu")
    base = str(common.base_dir(cfg))
    project = bb.load_backbone(base, runtime=runtime)
    torch.manual_seed(seed)
    project_model = train.attach_lora(project, TARGETS, settings)
    ref = bb.load_backbone(base, runtime=runtime)
    torch.manual_seed(seed)
    ref_model = get_peft_model(ref.model, train.lora_config(ref, TARGETS, settings))
    for (n1, p1), (n2, p2) in zip(project_model.named_parameters(), ref_model.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), f"the two copies differ at {n1}"
    project_model.train()
    ref_model.train()
    return runtime, project, project_model, ref, ref_model


def sides(cfg: dict[str, Any], settings: dict[str, Any], seed: int) -> tuple[Side, Side, Any]:
    """(project side, reference side, project backbone), each with its own AdamW and mask generator."""
    import torch

    from anchormask.training import masking, strategies, train

    runtime, project, project_model, _, ref_model = two_models(cfg, settings, seed)
    opt_p = train.make_optimizer([p for p in project_model.parameters() if p.requires_grad], settings)
    opt_r = torch.optim.AdamW([p for p in ref_model.parameters() if p.requires_grad], lr=settings["lr"],
                              weight_decay=settings["weight_decay"])
    ratio_dist = masking.MaskRatio.from_config(settings["mask_ratio"])
    gen_p, gen_r = torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 1)
    seq_len, pad_id = settings["seq_len"], project.tokenizer.pad_token_id or 0

    def project_forward(batch):
        loss, info = train.train_step(project, runtime, batch, strategies.resolve(STRATEGY),
                                      settings, ratio_dist, gen_p)
        return loss, info["masked_tokens"]

    def reference_forward(batch):
        return reference_train_step(ref_model, batch, seq_len=seq_len, strategy=STRATEGY, low=ratio_dist.low,
                                    high=ratio_dist.high, mask_id=project.mask_token_id, pad_id=pad_id,
                                    generator=gen_r)

    return (Side("project", project_forward, opt_p, lambda b: max(len(e.input_ids) for e in b), lambda b, m: m),
            Side("reference", reference_forward, opt_r, lambda b: seq_len, lambda b, m: len(b) * seq_len),
            project)


def job_batches(cfg: dict[str, Any], settings: dict[str, Any], project, seed: int, n: int) -> list[list]:
    """The default job's first ``n`` batches of encoded pairs (its pairs, batch size and shuffling)."""
    import torch

    from anchormask import data
    from anchormask.training import train

    pairs_path = str(common.repo_path(cfg["data"]["pairs"]))
    pairs = data.select_pairs(data.load_pairs(pairs_path), cfg["train"]["default"]["size"], settings["subset"], seed)
    encoded = train.encode_pairs(project, pairs, settings["seq_len"], pairs_path)
    order = train.Batches(len(encoded), settings["batch_size"], torch.Generator().manual_seed(seed))
    return [[encoded[i] for i in order.next()] for _ in range(n)]


def alternate(project: Side, reference: Side, batches: list[list], warmup: int, chunk: int, shape,
              settings: dict[str, Any]) -> None:
    """Warm-up steps on both sides (phases then forgotten), then the timed steps in chunks, the side that
    goes first alternating from chunk to chunk."""
    from anchormask.model import layout

    for batch in batches[:warmup]:
        project.update(batch)
        reference.update(batch)
    for side in (project, reference):
        side.phases = {p: [] for p in PHASES}
    timed = batches[warmup:]
    for c, first in enumerate(range(0, len(timed), chunk)):
        for side in ((project, reference) if c % 2 == 0 else (reference, project)):
            for batch in timed[first:first + chunk]:
                side.timed(batch, shape, settings, (layout.QUESTION, layout.ANSWER))


def run(threads: int | None = None, steps: int = 30, warmup: int = 5, chunk: int = 1,
        seed: int = 42) -> tuple[dict, list[Line]]:
    import torch

    from anchormask import study

    cfg = common.load_config()
    threads = common.job_threads(cfg, "train", threads)
    settings = study.train_settings(cfg, STRATEGY)
    if settings["loss"] != "ce":
        raise SystemExit("training benchmark: the reference loop implements loss 'ce', "
                         f"config has {settings['loss']!r}")
    common.set_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)  # as every training job runs
    rate = common.matmul_rate(threads)
    say(f"training: matmul rate {rate['gflops_median']:.1f} GFLOP/s (fp32 {rate['n']}^3, {threads} threads)")
    project, reference, backbone = sides(cfg, settings, seed)
    batches = job_batches(cfg, settings, backbone, seed, warmup + steps)
    alternate(project, reference, batches, warmup, chunk, flops.Shape.of(backbone.model), settings)
    out = {side.name: side.summary(steps, rate) for side in (project, reference)}
    for name, o in out.items():
        say(f"training: {name:<9} {o['ms_per_step']:8.2f} ms/step  {o['tokens_per_s']:9.0f} tokens/s  "
            f"{o['gflops_per_s']:6.2f} GFLOP/s  MFU {100 * o['mfu']:.1f}%")
    # the same batch on both sides, timed back to back: a per-step ratio robust to load spikes
    paired = statistics.median(r / p for p, r in zip(project.step_s, reference.step_s))
    return payload(cfg, settings, out, paired, rate, threads, steps, warmup, chunk), lines(out, paired, rate)


def payload(cfg: dict[str, Any], settings: dict[str, Any], out: dict[str, Any], paired: float, rate: dict[str, Any],
            threads: int, steps: int, warmup: int, chunk: int) -> dict[str, Any]:
    return {
        "benchmark": "training",
        "description": "tokens/s (answer + question tokens) of anchormask.training.train.train_step "
                       "(dynamic padding, logits "
                       "at masked positions) vs a plain loop (fixed padding to L, full-vocabulary logits everywhere)",
        "job": {"strategy": STRATEGY, "targets": TARGETS, "size": cfg["train"]["default"]["size"],
                "batch_size": settings["batch_size"], "seq_len": settings["seq_len"], "rank": settings["rank"],
                "loss": settings["loss"], "mask_ratio": settings["mask_ratio"]},
        "threads": threads, "timed_steps_per_side": steps, "warmup_steps_per_side": warmup, "chunk": chunk,
        "matmul_rate": rate,
        "flops_convention": flops.__doc__.strip(),
        **out,
        "speedup": round(paired, 3), "total_tokens_per_s_speedup": round(_total_speedup(out), 3),
        "speedup_definition": "median over the timed steps of reference time / project time on the same batch, "
                              "timed back to back (robust to load spikes on a shared machine); the ratio of total "
                              "tokens/s is total_tokens_per_s_speedup",
        "target": 2.0,
    }


def _total_speedup(out: dict[str, Any]) -> float:
    return out["project"]["tokens_per_s"] / out["reference"]["tokens_per_s"]


def lines(out: dict[str, Any], paired: float, rate: dict[str, Any]) -> list[Line]:
    phases = {name: ", ".join(f"{k} {v:.0f}" for k, v in out[name]["median_phase_ms"].items()) for name in out}
    return [Line("training.speedup", paired, "x", 2.0,
                 note=f"median of per-step paired ratios; total tokens/s ratio {_total_speedup(out):.2f}x; project "
                      f"phases (ms) {phases['project']}; reference {phases['reference']}"),
            Line("training.mfu", 100 * out["project"]["mfu"], "%", None,
                 note=f"project {out['project']['gflops_per_s']:.1f} GFLOP/s of {rate['gflops_median']:.1f}; "
                      f"reference MFU {100 * out['reference']['mfu']:.1f}%")]
