"""1. Training throughput: anchormask.train.train_step against a plain PyTorch loop.

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
from typing import Any

from bench import common, flops
from bench.common import Line, say
from bench.reference import reference_train_step

STRATEGY, TARGETS = "anchor", "full"


def run(threads: int | None = None, steps: int = 30, warmup: int = 5, chunk: int = 1,
        seed: int = 42) -> tuple[dict, list[Line]]:
    import torch
    from peft import get_peft_model

    from anchormask import backbone as bb
    from anchormask import data, layout, masking, study, train

    cfg = common.load_config()
    threads = common.job_threads(cfg, "train", threads)
    settings = study.train_settings(cfg, STRATEGY)
    if settings["loss"] != "ce":
        raise SystemExit(f"training benchmark: the reference loop implements loss 'ce', config has {settings['loss']!r}")
    common.set_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)  # as every training job runs
    rate = common.matmul_rate(threads)
    say(f"training: matmul rate {rate['gflops_median']:.1f} GFLOP/s (fp32 {rate['n']}^3, {threads} threads)")

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
    opt_p = train.make_optimizer([p for p in project_model.parameters() if p.requires_grad], settings)
    opt_r = torch.optim.AdamW([p for p in ref_model.parameters() if p.requires_grad], lr=settings["lr"],
                              weight_decay=settings["weight_decay"])

    size = cfg["train"]["default"]["size"]
    pairs_path = str(common.repo_path(cfg["data"]["pairs"]))
    pairs = data.select_pairs(data.load_pairs(pairs_path), size, settings["subset"], seed)
    encoded = train.encode_pairs(project, pairs, settings["seq_len"], pairs_path)
    order = list(train.batches(len(encoded), settings["batch_size"], warmup + steps, torch.Generator().manual_seed(seed)))
    ratio_dist = masking.MaskRatio.from_config(settings["mask_ratio"])
    low, high = ratio_dist.low, ratio_dist.high
    gen_p, gen_r = torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 1)
    pad_id = project.tokenizer.pad_token_id or 0
    seq_len = settings["seq_len"]
    shape = flops.Shape.of(project.model)
    content = (layout.QUESTION, layout.ANSWER)

    phases: dict[str, dict[str, list[float]]] = {n: {"forward": [], "backward": [], "optimizer": []}
                                                 for n in ("project", "reference")}

    def finish(name: str, loss, optimizer, t0: float) -> float:
        t1 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        for phase, dt in zip(("forward", "backward", "optimizer"), (t1 - t0, t2 - t1, t3 - t2)):
            phases[name][phase].append(dt)
        return float(loss.detach())

    def project_step(batch) -> tuple[float, int]:
        t0 = time.perf_counter()
        loss, info = train.train_step(project, runtime, batch, STRATEGY, settings, ratio_dist, gen_p)
        return finish("project", loss, opt_p, t0), info["masked_tokens"]

    def reference_step(batch) -> tuple[float, int]:
        t0 = time.perf_counter()
        loss, masked = reference_train_step(ref_model, batch, seq_len=seq_len, strategy=STRATEGY, low=low,
                                            high=high, mask_id=project.mask_token_id, pad_id=pad_id,
                                            generator=gen_r)
        return finish("reference", loss, opt_r, t0), masked

    sides: dict[str, dict[str, Any]] = {
        name: {"seconds": 0.0, "tokens": 0, "flops": 0, "padded_tokens": 0, "masked": 0, "losses": [], "step_s": []}
        for name in ("project", "reference")}

    def timed(name: str, step_fn, batch) -> None:
        t = time.perf_counter()
        loss, masked = step_fn(batch)
        dt = time.perf_counter() - t
        width = max(len(e.input_ids) for e in batch) if name == "project" else seq_len
        s = sides[name]
        s["seconds"] += dt
        s["step_s"].append(dt)
        s["tokens"] += sum(1 for e in batch for c in e.classes if c in content)
        s["padded_tokens"] += len(batch) * width
        s["masked"] += masked
        s["losses"].append(round(loss, 5))
        head_positions = masked if name == "project" else len(batch) * seq_len
        s["flops"] += flops.train_step(shape, len(batch), width, head_positions, rank=settings["rank"],
                                       targets=TARGETS)

    for batch_idx in order[:warmup]:
        batch = [encoded[i] for i in batch_idx]
        project_step(batch)
        reference_step(batch)
    for name in phases:
        phases[name] = {k: [] for k in phases[name]}
    timed_batches = order[warmup:]
    for c, first in enumerate(range(0, steps, chunk)):
        chunk_batches = [[encoded[i] for i in idx] for idx in timed_batches[first:first + chunk]]
        plan = [("project", project_step), ("reference", reference_step)]
        for name, fn in (plan if c % 2 == 0 else plan[::-1]):
            for batch in chunk_batches:
                timed(name, fn, batch)

    out: dict[str, Any] = {}
    for name, s in sides.items():
        tps = s["tokens"] / s["seconds"]
        gflops = s["flops"] / s["seconds"] / 1e9
        out[name] = {"steps": steps, "seconds": round(s["seconds"], 4), "ms_per_step": round(1e3 * s["seconds"] / steps, 3),
                     "tokens": s["tokens"], "tokens_per_s": round(tps, 1), "padded_tokens": s["padded_tokens"],
                     "masked_positions": s["masked"], "model_flops": s["flops"], "gflops_per_s": round(gflops, 3),
                     "mfu": round(gflops / rate["gflops_median"], 4), "final_losses": s["losses"][-3:],
                     "step_ms": [round(1e3 * x, 2) for x in s["step_s"]],
                     "median_step_ms": round(1e3 * statistics.median(s["step_s"]), 3),
                     "median_phase_ms": {k: round(1e3 * statistics.median(v), 3) for k, v in phases[name].items()}}
        say(f"training: {name:<9} {out[name]['ms_per_step']:8.2f} ms/step  {tps:9.0f} tokens/s  "
            f"{gflops:6.2f} GFLOP/s  MFU {100 * out[name]['mfu']:.1f}%")
    speedup = out["project"]["tokens_per_s"] / out["reference"]["tokens_per_s"]
    # the same batch on both sides, timed back to back: a per-step ratio robust to load spikes
    paired = statistics.median(r / p for p, r in zip(sides["project"]["step_s"], sides["reference"]["step_s"]))
    payload = {
        "benchmark": "training",
        "description": "tokens/s (answer + question tokens) of anchormask.train.train_step (dynamic padding, logits "
                       "at masked positions) vs a plain loop (fixed padding to L, full-vocabulary logits everywhere)",
        "job": {"strategy": STRATEGY, "targets": TARGETS, "size": size, "batch_size": settings["batch_size"],
                "seq_len": seq_len, "rank": settings["rank"], "loss": settings["loss"], "mask_ratio": settings["mask_ratio"]},
        "threads": threads, "timed_steps_per_side": steps, "warmup_steps_per_side": warmup, "chunk": chunk,
        "matmul_rate": rate,
        "flops_convention": flops.__doc__.strip(),
        **out,
        "speedup": round(paired, 3), "total_tokens_per_s_speedup": round(speedup, 3),
        "speedup_definition": "median over the timed steps of reference time / project time on the same batch, "
                              "timed back to back (robust to load spikes on a shared machine); the ratio of total "
                              "tokens/s is total_tokens_per_s_speedup",
        "target": 2.0,
    }
    lines = [Line("training.speedup", paired, "x", 2.0,
                  note=f"median of per-step paired ratios; total tokens/s ratio {speedup:.2f}x; project phases (ms) "
                       + ", ".join(f"{k} {v:.0f}" for k, v in out["project"]["median_phase_ms"].items())
                       + "; reference " + ", ".join(f"{k} {v:.0f}" for k, v in out["reference"]["median_phase_ms"].items())),
             Line("training.mfu", 100 * out["project"]["mfu"], "%", None,
                  note=f"project {out['project']['gflops_per_s']:.1f} GFLOP/s of {rate['gflops_median']:.1f}; "
                       f"reference MFU {100 * out['reference']['mfu']:.1f}%")]
    return payload, lines
