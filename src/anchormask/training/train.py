"""One LoRA training job: a strategy, a target set, a data size, a step budget and a seed.

The job writes a peft adapter folder atomically (``adapter_config.json``,
``adapter_model.safetensors``, ``train_log.tsv``, ``provenance.json`` with the SHA-256 of the first
two). Nothing in it depends on the wall clock, so the same job twice on the CPU writes the same bytes.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from anchormask import data, fileio
from anchormask.model import adapters, checkpointing, layout, modeljob
from anchormask.model import backbone as bb
from anchormask.progress import Progress
from anchormask.repro import provenance
from anchormask.study import AdapterJob
from anchormask.training import masking, resume, strategies

log = logging.getLogger(__name__)
LOG_COLUMNS = ("step", "mask_ratio", "masked_tokens", "loss", "lr", "masked_question", "masked_answer")


class AdapterError(ValueError):
    """An adapter does not hold what its target set says it should."""


def lora_config(backbone: bb.Backbone, targets: str, settings: dict[str, Any]):
    from peft import LoraConfig

    modules = backbone.projection_modules(targets)
    return LoraConfig(r=settings["rank"], lora_alpha=settings["alpha"], lora_dropout=settings["dropout"],
                      target_modules=modules, bias="none")


def expected_lora_parameters(backbone: bb.Backbone, targets: str, rank: int) -> int:
    modules = dict(backbone.model.named_modules())
    return sum(rank * (modules[n].in_features + modules[n].out_features)
               for n in backbone.projection_modules(targets))


def attach_lora(backbone: bb.Backbone, targets: str, settings: dict[str, Any]):
    """Wrap the model with LoRA on exactly the projections of ``targets``; check the count."""
    from peft import get_peft_model

    missing = [k for k in bb.TARGET_SETS[targets] if not backbone.modules_of_kind(k)]
    if missing:
        raise AdapterError(f"LoRA target set {targets!r}: no module matches projection kind(s) "
                           f"{', '.join(missing)} ({', '.join(backbone.projections[k] for k in missing)}) in "
                           f"{backbone.path}; the backbone's layout is not the {backbone.family!r} one")
    expected = expected_lora_parameters(backbone, targets, settings["rank"])
    modules = backbone.projection_modules(targets)
    model = get_peft_model(backbone.model, lora_config(backbone, targets, settings))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if trainable != expected or expected == 0:
        raise AdapterError(f"LoRA on {targets!r} has {trainable} trainable parameters, expected {expected} "
                           f"from modules {modules}: the target list does not "
                           "match the backbone's projections")
    return model


def make_optimizer(params: list[torch.nn.Parameter], settings: dict[str, Any]) -> torch.optim.AdamW:
    """AdamW over the LoRA weights, one fused kernel per step (the for-loop default launches a
    dozen small ops per tensor, which on the CPU costs more than the update itself)."""
    return torch.optim.AdamW(params, lr=settings["lr"], weight_decay=settings["weight_decay"], fused=True)


def lr_at(step: int, settings: dict[str, Any]) -> float:
    """Linear warm-up over ``warmup_steps``, then constant."""
    warmup = settings["warmup_steps"]
    return settings["lr"] * min(1.0, (step + 1) / warmup) if warmup else settings["lr"]


def encode_pairs(backbone: bb.Backbone, pairs: list[dict[str, Any]], seq_len: int,
                 source: str) -> list[layout.EncodedPair]:
    return [layout.encode_pair(backbone.tokenizer, p["question"], p["answer"], seq_len,
                               where=f"{source}: pair {p['id']}", template=backbone.template) for p in pairs]


class Batches:
    """Indices of each step's batch: shuffled epochs, the last partial batch of an epoch kept.

    ``pending`` (what is left of the current epoch's order) is part of a run's state (resume.py): a
    run that continues another starts from the order it left.
    """

    def __init__(self, n: int, batch_size: int, generator: torch.Generator, pending: list[int] | None = None):
        self.n, self.batch_size, self.generator = n, batch_size, generator
        self.pending = list(pending or [])

    def next(self) -> list[int]:
        if len(self.pending) < self.batch_size:
            self.pending += torch.randperm(self.n, generator=self.generator).tolist()
        batch, self.pending = self.pending[:self.batch_size], self.pending[self.batch_size:]
        return batch


@dataclass
class MaskedBatch:
    """One step's batch with its mask drawn: what each micro-batch's forward reads a slice of."""

    ids: torch.Tensor
    attention: torch.Tensor
    eligible: torch.Tensor
    ratio: torch.Tensor
    mask: torch.Tensor
    classes: torch.Tensor


def draw_masks(backbone: bb.Backbone, encoded: list[layout.EncodedPair], strategy: strategies.Strategy,
               ratio_dist: masking.MaskRatio, generator: torch.Generator, step: int, total_steps: int) -> MaskedBatch:
    ids, attention, classes = layout.collate(encoded, backbone.ids.pad,
                                             pad_is_answer=backbone.template.pad_is_answer)
    eligible = strategy.eligible(classes)
    ratio = ratio_dist.sample(len(encoded), generator)
    batch = strategies.MaskingBatch(ids=ids, classes=classes, lengths=(classes != layout.PAD).sum(1), ratio=ratio,
                                    step=step, total_steps=total_steps, generator=generator)
    return MaskedBatch(ids, attention, eligible, ratio, strategy.mask(batch), classes)


def batch_loss(backbone: bb.Backbone, runtime: bb.Runtime, masked: MaskedBatch, settings: dict[str, Any],
               part: slice = slice(None), of_batch: tuple[int, int] | None = None) -> torch.Tensor:
    """The loss of the rows ``part`` of the batch; ``of_batch`` (masked tokens, rows of the whole batch)
    normalises a micro-batch's terms so that the micro-batches' losses add up to the whole batch's."""
    ids, mask, eligible, ratio = masked.ids[part], masked.mask[part], masked.eligible[part], masked.ratio[part]
    noisy = masking.apply_mask(ids, mask, backbone.mask_token_id)
    rows, cols = mask.nonzero(as_tuple=True)
    device = runtime.device
    with runtime.autocast():
        # The vocabulary head runs only where the loss looks: the masked positions.
        logits = backbone.logits_at(noisy.to(device), masked.attention[part].to(device), rows, cols)
    return masking.masked_loss(logits, ids[rows, cols].to(device), kind=settings["loss"], ratio=ratio, rows=rows,
                               eligible_count=eligible.sum(1), tv_weight=settings["tv_weight"], of_batch=of_batch)


def _step_info(masked: MaskedBatch) -> dict[str, float]:
    """What a step's log row records of its mask: the mean ratio and the masked positions, of the question
    and of the answer (what a strategy spends its supervision on)."""
    return {"mask_ratio": float(masked.ratio.mean()), "masked_tokens": int(masked.mask.sum()),
            "masked_question": int((masked.mask & (masked.classes == layout.QUESTION)).sum()),
            "masked_answer": int((masked.mask & (masked.classes == layout.ANSWER)).sum())}


def train_step(backbone: bb.Backbone, runtime: bb.Runtime, encoded: list[layout.EncodedPair],
               strategy: strategies.Strategy, settings: dict[str, Any], ratio_dist: masking.MaskRatio,
               generator: torch.Generator, step: int = 0, total_steps: int = 1
               ) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one step's batch in one forward (its backward is the caller's)."""
    masked = draw_masks(backbone, encoded, strategy, ratio_dist, generator, step, total_steps)
    return batch_loss(backbone, runtime, masked, settings), _step_info(masked)


def accumulated_step(backbone: bb.Backbone, runtime: bb.Runtime, encoded: list[layout.EncodedPair],
                     strategy: strategies.Strategy, settings: dict[str, Any], ratio_dist: masking.MaskRatio,
                     generator: torch.Generator, step: int, total_steps: int, micro_batches: int
                     ) -> tuple[float, dict[str, float]]:
    """One step in ``micro_batches`` forwards and backwards (train.grad_accum): the mask is drawn for the
    whole batch as in ``train_step``, and the gradients add up to its. Returns the whole batch's loss."""
    masked = draw_masks(backbone, encoded, strategy, ratio_dist, generator, step, total_steps)
    whole = (int(masked.mask.sum()), len(encoded))
    size = math.ceil(len(encoded) / micro_batches)
    total = 0.0
    for start in range(0, len(encoded), size):
        loss = batch_loss(backbone, runtime, masked, settings, slice(start, start + size), of_batch=whole)
        loss.backward()
        total += float(loss.detach())
    return total, _step_info(masked)


def enable_checkpointing(backbone: bb.Backbone, setting: bool | str = True) -> None:
    """Recompute activations in the backward pass (train.gradient_checkpointing): memory for time. The DAG
    build has refused a setting the base's code cannot honour; this repeats the check on the loaded model."""
    problem = checkpointing.problem(setting, checkpointing.loaded_switch(backbone.model), str(backbone.path),
                                    backbone.family.name)
    if problem:
        raise bb.BackboneError(f"train.gradient_checkpointing: {problem}")
    log.info("gradient checkpointing: %s", checkpointing.enable(backbone.model, setting))


class Run:
    """One training run in progress: the LoRA-wrapped model, its optimizer, the step generator, the batch
    order and the log rows so far (steps done = len(rows))."""

    def __init__(self, backbone: bb.Backbone, job: AdapterJob, settings: dict[str, Any], n_pairs: int):
        torch.manual_seed(job.seed)  # LoRA's A matrices draw from the global generator
        self.model = attach_lora(backbone, job.targets, settings)
        self.model.train()
        self.params = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        self.optimizer = make_optimizer(list(self.params.values()), settings)
        self.generator = torch.Generator().manual_seed(job.seed)
        self.batches = Batches(n_pairs, settings["batch_size"], self.generator)
        self.rows: list[tuple] = []

    def continue_from(self, state: str, identity: dict[str, Any], steps: int) -> None:
        """Load a shorter run's state; a state of ``steps`` or more would not be continued but overrun."""
        self.batches.pending, self.rows = resume.restore(
            state, identity=identity, params=self.params, optimizer=self.optimizer, generator=self.generator)
        if len(self.rows) >= steps:
            raise AdapterError(f"{state}: the state is {len(self.rows)} steps into its run, this job trains {steps}; "
                               "a run continues only a shorter one. Give the state of a shorter adapter")

    def save(self, state: str, identity: dict[str, Any]) -> None:
        resume.save_state(state, identity=identity, params=self.params,
                          optimizer=self.optimizer, generator=self.generator, pending=self.batches.pending,
                          rows=self.rows)


def run_steps(run: Run, backbone: bb.Backbone, runtime: bb.Runtime, encoded: list[layout.EncodedPair],
              job: AdapterJob, settings: dict[str, Any]) -> None:
    """Train from the run's current step up to ``job.steps``, appending one log row per step."""
    ratio_dist = masking.MaskRatio.from_config(settings["mask_ratio"])
    strategy = strategies.resolve(job.strategy, settings.get("strategy"))
    progress = Progress(f"train {job.id}", job.steps, log_every=settings["log_every"], start_at=len(run.rows))
    micro_batches = int(settings.get("grad_accum", 1))
    for step in range(len(run.rows), job.steps):
        lr = lr_at(step, settings)
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        batch = [encoded[i] for i in run.batches.next()]
        run.optimizer.zero_grad(set_to_none=True)
        if micro_batches > 1:
            value, info = accumulated_step(backbone, runtime, batch, strategy, settings, ratio_dist, run.generator,
                                           step, run_total_steps(settings, job), micro_batches)
            check_not_empty(strategy, run.rows, info["masked_tokens"], step)
        else:
            loss, info = train_step(backbone, runtime, batch, strategy, settings, ratio_dist, run.generator, step,
                                    run_total_steps(settings, job))
            check_not_empty(strategy, run.rows, info["masked_tokens"], step)
            loss.backward()
            value = float(loss.detach())
        run.optimizer.step()
        if not math.isfinite(value):
            raise FloatingPointError(f"{job.id}: loss is {value} at step {step + 1}; lower train.lr")
        run.rows.append((step + 1, round(info["mask_ratio"], 6), info["masked_tokens"], round(value, 6), lr,
                         info["masked_question"], info["masked_answer"]))
        progress.update(step + 1, loss=f"{value:.4f}")


def run_total_steps(settings: dict[str, Any], job: AdapterJob) -> int:
    """The steps of the whole run a strategy sees as ``total_steps`` (a run that a longer adapter continues
    is the longer one's: study.run_length, passed as ``run_steps``), so a curriculum switches at one step."""
    return int(settings.get("run_steps", job.steps))


def check_not_empty(strategy: strategies.Strategy, rows: list[tuple], masked: float, step: int) -> None:
    """Stop a run whose strategy masked nothing for ``strategies.EMPTY_STEPS`` steps in a row."""
    recent = [r[2] for r in rows[-(strategies.EMPTY_STEPS - 1):]] + [masked]
    if len(recent) >= strategies.EMPTY_STEPS and not any(recent):
        raise fileio.InputError(f"{strategy.where}: masked no position in {strategies.EMPTY_STEPS} steps in a row "
                                f"(steps {step + 2 - strategies.EMPTY_STEPS} to {step + 1}); it trains nothing: "
                                "check that its mask can be true at the positions of its classes")


def train(base: modeljob.Base, pairs_path: str, job: AdapterJob, settings: dict[str, Any], out_dir: str,
          state_out: str | None = None, resume_from: str | None = None) -> dict[str, Any]:
    """One training job on ``base``; ``settings`` are study.train_settings of the job's strategy.

    ``resume_from``: the state of a shorter run of the same adapter (resume.py), continued instead of
    starting at step 0; ``state_out``: where this run's final state goes, for a longer run to continue.
    """
    torch.manual_seed(job.seed)
    runtime = modeljob.start(base, settings["threads"])
    backbone = modeljob.load(base, runtime)
    if settings.get("gradient_checkpointing"):
        enable_checkpointing(backbone, settings["gradient_checkpointing"])
    pairs = data.select_pairs(data.load_pairs(pairs_path), job.size, settings["subset"], job.seed)
    encoded = encode_pairs(backbone, pairs, settings["seq_len"], pairs_path)
    identity = resume.run_identity(job, settings, base.sha256, [p["id"] for p in pairs])
    lora_modules = backbone.projection_modules(job.targets)  # before peft wraps the projections
    run = Run(backbone, job, settings, len(encoded))
    if resume_from:
        run.continue_from(resume_from, identity, job.steps)
        log.info("continuing from %s: %d of %d steps done", resume_from, len(run.rows), job.steps)
    run_steps(run, backbone, runtime, encoded, job, settings)
    record = training_record(job, settings, base, pairs_path, pairs, lora_modules, backbone, runtime, run)
    save_adapter(run.model, run.rows, record, out_dir)
    if state_out:
        run.save(state_out, identity)
    return record


def training_record(job: AdapterJob, settings: dict[str, Any], base: modeljob.Base, pairs_path: str,
                    pairs: list[dict[str, Any]], lora_modules: list[str], backbone: bb.Backbone,
                    runtime: bb.Runtime, run: Run) -> dict[str, Any]:
    """provenance.json of the adapter (the same whether the run continued another or not)."""
    last = run.rows[-max(1, len(run.rows) // 10):]
    return {
        "job": {"id": job.id, "strategy": job.strategy, "targets": job.targets, "size": job.size,
                "steps": job.steps, "seed": job.seed},
        "settings": settings,
        "base": {"path": base.path, "sha256": base.sha256},
        "pairs": {"path": pairs_path, "ids": [p["id"] for p in pairs]},
        "lora_modules": lora_modules,
        "trainable_parameters": sum(p.numel() for p in run.params.values()),
        "runtime": bb.runtime_record(runtime, backbone.model),
        "final_loss_mean_last_10pct": round(sum(r[3] for r in last) / max(1, len(last)), 6),
        "realised": realised_counts(run.rows),
        "versions": provenance.versions(),
    }


def realised_counts(rows: list[tuple]) -> dict[str, int]:
    """What the run's masks supervised, summed over its steps (the log rows): the steps, the masked
    positions and of them the question's and the answer's. Two strategies at one step count can differ
    several-fold in the answer tokens they train on."""
    column = {name: i for i, name in enumerate(LOG_COLUMNS)}
    return {"steps": len(rows), **{name: sum(int(r[column[name]]) for r in rows)
                                   for name in ("masked_tokens", "masked_question", "masked_answer")}}


def save_adapter(model, rows: list[tuple], record: dict[str, Any], out_dir: str) -> None:
    with fileio.atomic_dir(out_dir) as tmp:
        model.save_pretrained(str(tmp))
        (tmp / "README.md").unlink(missing_ok=True)  # peft's model-card template, not data
        _sort_target_modules(tmp / "adapter_config.json")
        lines = ["\t".join(LOG_COLUMNS)] + ["\t".join(str(v) for v in row) for row in rows]
        (tmp / "train_log.tsv").write_text("\n".join(lines) + "\n")
        # Hashes of the files as written, so every later use can tell an altered adapter (adapters.verify).
        record["files"] = adapters.file_hashes(tmp)
        (tmp / "provenance.json").write_text(fileio.pretty_json(record))


def _sort_target_modules(path: Path) -> None:
    """peft stores target_modules as a set, whose order changes with the hash seed."""
    import json

    cfg = json.loads(path.read_text())
    if isinstance(cfg.get("target_modules"), list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
