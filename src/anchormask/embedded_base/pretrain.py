"""Pretrain the embedded base: a small BERT-layout masked-diffusion LM, resumable.

Objective: per sequence a mask ratio t ~ U(min_mask_ratio, 1], each non-special token masked
with probability t, cross-entropy averaged over the masked tokens (LLaDA's 1/t ELBO weighting is
an option; on small models it let the few low-t sequences dominate and stalled training).

Choices measured on this machine (data/base/README.md has the numbers):
- one text line per sequence, or two adjacent lines as ``[CLS] a [SEP] b [SEP]`` (the study's
  two-segment layout); packed windows of unrelated glosses stayed at the unigram plateau;
- length buckets: each batch holds sequences of nearly equal length, so almost no position is
  padding (a fixed-length batch of dictionary lines was half padding);
- bf16 autocast on CPUs that have bf16 instructions (1.6x per CPU-second at this size);
- warm-up, then a constant learning rate, then a linear decay over the last ``decay_steps``:
  raising ``steps`` extends a run that has not reached its decay, from its last checkpoint.
The training state (weights, optimizer, step, RNG) is checkpointed every
``checkpoint_every`` steps, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable
from pathlib import Path

import torch

from anchormask import fileio
from anchormask.embedded_base.pretrain_text import read_lines
from anchormask.embedded_base.sequences import (
    PretrainSettings,
    encode_sequences,
    length_batches,
    pad_batch,
    train_tokenizer,
)
from anchormask.progress import Progress

log = logging.getLogger(__name__)


def mask_batch(ids: torch.Tensor, t: torch.Tensor, mask_id: int, special: torch.Tensor,
               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask each non-special token with its row's probability t; return (noisy ids, masked)."""
    masked = (torch.rand(ids.shape, generator=generator) < t) & ~torch.isin(ids, special)
    return torch.where(masked, torch.full_like(ids, mask_id), ids), masked


def masked_logits(model, noisy: torch.Tensor, attention: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Logits at the masked positions only: the vocabulary head is most of the cost."""
    hidden = model.bert(input_ids=noisy, attention_mask=attention).last_hidden_state
    return model.cls(hidden[masked])


def diffusion_loss(model, ids: torch.Tensor, attention: torch.Tensor, mask_id: int, special: torch.Tensor,
                   settings: PretrainSettings, generator: torch.Generator) -> torch.Tensor:
    b = ids.shape[0]
    t = settings.min_mask_ratio + (1 - settings.min_mask_ratio) * torch.rand(b, 1, generator=generator)
    noisy, masked = mask_batch(ids, t, mask_id, special, generator)
    if not masked.any():
        return model.cls.predictions.decoder.weight.sum() * 0.0  # keeps the graph; no NaN
    ce = torch.nn.functional.cross_entropy(masked_logits(model, noisy, attention, masked).float(),
                                           ids[masked], reduction="none")
    if settings.weighting == "inverse_t":
        return (ce / t.expand_as(ids)[masked]).sum() / attention.sum()
    return ce.mean()


def lr_factor(step: int, settings: PretrainSettings) -> float:
    """Warm-up, constant, then linear decay to zero over the last ``decay_steps``.

    A run resumed after its decay had reached zero lists the resume step in ``restarts``: from
    there it warms up again over ``warmup_steps`` (a jump from zero to the peak rate would throw
    away what the decay gained), so the schedule stays a function of the step alone.
    """
    since = step - max([0, *(r for r in settings.restarts if r <= step)])
    if since < settings.warmup_steps:
        return (since + 1) / settings.warmup_steps
    decay_start = settings.steps - settings.decay_steps
    if step < decay_start:
        return 1.0
    return max(0.0, (settings.steps - step) / max(1, settings.decay_steps))


def bf16_supported() -> bool:
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _autocast(settings: PretrainSettings):
    enabled = settings.bf16 and bf16_supported()
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled)


def build_model(tokenizer, settings: PretrainSettings):
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=len(tokenizer), hidden_size=settings.hidden_size,
                        num_hidden_layers=settings.layers, num_attention_heads=settings.heads,
                        intermediate_size=settings.intermediate_size,
                        max_position_embeddings=settings.max_positions, type_vocab_size=1,
                        pad_token_id=tokenizer.pad_token_id)
    return BertForMaskedLM(config)


def prediction_scores(predictions: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    """Accuracy and NLL (nats per masked token, fp32) over (logits at masked positions, their targets)."""
    correct, nll, count = 0, 0.0, 0
    for logits, target in predictions:
        logits = logits.float()
        correct += int((logits.argmax(-1) == target).sum())
        nll += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
        count += len(target)
    return {"accuracy": correct / max(1, count), "nll": nll / max(1, count), "masked_tokens": count}


@torch.no_grad()
def masked_accuracy(model, sequences: list[list[int]], tokenizer, ratio: float, seed: int,
                    batch_rows: int = 64) -> dict[str, float]:
    """``prediction_scores`` of the pretraining model at a fixed mask ratio, seeded."""
    special = torch.tensor(tokenizer.all_special_ids)
    gen = torch.Generator().manual_seed(seed)

    def predictions():
        for start in range(0, len(sequences), batch_rows):
            ids, attention = pad_batch(sequences[start:start + batch_rows], tokenizer.pad_token_id)
            noisy, masked = mask_batch(ids, torch.tensor(ratio), tokenizer.mask_token_id, special, gen)
            if masked.any():
                yield masked_logits(model, noisy, attention, masked), ids[masked]

    was_training = model.training
    model.eval()
    scores = prediction_scores(predictions())
    model.train(was_training)
    return scores


class Checkpoint:
    """The resumable training state in one file, replaced atomically."""

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / "state.pt"

    def save(self, model, opt, step: int, generator: torch.Generator, history: list[dict],
             settings: PretrainSettings) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with fileio.atomic_path(self.path) as tmp:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                        "generator": generator.get_state(), "torch_rng": torch.get_rng_state(), "history": history,
                        "architecture": _architecture(settings)}, tmp)

    def load(self, settings: PretrainSettings) -> dict | None:
        if not self.path.exists():
            return None
        state = torch.load(self.path, weights_only=False)
        if state["architecture"] != _architecture(settings):
            raise fileio.InputError(f"{self.path}: a checkpoint of another model or text "
                                f"({state['architecture']}); delete {self.dir} to start afresh")
        return state


def _architecture(settings: PretrainSettings) -> dict:
    """What a resumed run must share with the checkpoint (steps and lr schedule may change)."""
    keep = ("vocab_size", "hidden_size", "layers", "heads", "intermediate_size", "max_positions",
            "seq_len", "min_tokens", "pair_share", "tokens_per_batch", "seed")
    return {k: v for k, v in dataclasses.asdict(settings).items() if k in keep}


def pretrain(train_lines: list[str], validation_lines: list[str], out_dir: str | Path,
             state_dir: str | Path, settings: PretrainSettings) -> dict:
    """Tokenizer and model; resume from ``state_dir`` if it holds a checkpoint; write the base."""
    torch.manual_seed(settings.seed)
    tokenizer = _tokenizer(train_lines, Path(state_dir) / "tokenizer", settings)
    sequences = encode_sequences(train_lines, tokenizer, settings)
    held_out = encode_sequences(validation_lines, tokenizer, settings)[:settings.eval_sequences]
    n_tokens = sum(len(s) for s in sequences)
    log.info("pretraining text: %d lines, %d sequences, %d tokens; validation %d sequences",
             len(train_lines), len(sequences), n_tokens, len(held_out))
    model = build_model(tokenizer, settings)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    gen = torch.Generator().manual_seed(settings.seed)
    checkpoint = Checkpoint(state_dir)
    step, history = _resume(checkpoint, settings, model, opt, gen)
    log.info("bf16 autocast: %s", settings.bf16 and bf16_supported())
    step = _train(model, opt, gen, tokenizer, sequences, held_out, settings, checkpoint, step, history)
    save_checkpoint_folder(model, tokenizer, out_dir)
    return {"steps": step, "history": history, "tokens_seen": sum(h["tokens"] for h in history),
            "seconds": round(sum(h["seconds"] for h in history), 1),
            "parameters": sum(p.numel() for p in model.parameters()), "sequences": len(sequences),
            "sequence_tokens": n_tokens, "train_lines": len(train_lines),
            "bf16_autocast": settings.bf16 and bf16_supported(), "settings": dataclasses.asdict(settings)}


def save_checkpoint_folder(model, tokenizer, out_dir: str | Path) -> None:
    """A Hugging Face checkpoint folder (weights, config, tokenizer), written atomically."""
    with fileio.atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def snapshot_dir(state_dir: str | Path, step: int) -> Path:
    """Where the snapshot of ``step`` goes: beside the state, so a rerun keeps both."""
    return Path(state_dir).parent / "snapshots" / f"step{step}"


def _tokenizer(train_lines: list[str], tokenizer_dir: Path, settings: PretrainSettings):
    """The tokenizer a resumed run saved, else one trained now and saved for the runs that resume."""
    if (tokenizer_dir / "tokenizer.json").exists():
        from transformers import BertTokenizerFast  # type: ignore[attr-defined]  # lazy export: see sequences.py
        return BertTokenizerFast.from_pretrained(tokenizer_dir)
    tokenizer = train_tokenizer(train_lines, settings.vocab_size)
    with fileio.atomic_dir(tokenizer_dir) as tmp:
        tokenizer.save_pretrained(tmp)
    return tokenizer


def _resume(checkpoint: Checkpoint, settings: PretrainSettings, model, opt,
            gen: torch.Generator) -> tuple[int, list[dict]]:
    """(step, history) of the checkpoint, its state loaded into model, optimizer and generators; (0, [])
    without one."""
    state = checkpoint.load(settings)
    if not state:
        return 0, []
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    gen.set_state(state["generator"])
    torch.set_rng_state(state["torch_rng"])  # dropout draws from the global generator
    log.info("resumed from %s at step %d", checkpoint.path, state["step"])
    return state["step"], state["history"]


def _optimizer_step(model, opt, ids: torch.Tensor, attention: torch.Tensor, special: torch.Tensor, lr: float,
                    settings: PretrainSettings, gen: torch.Generator, mask_id: int) -> float:
    """One update on one batch; its loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    with _autocast(settings):
        loss = diffusion_loss(model, ids, attention, mask_id, special, settings, gen)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def _train(model, opt, gen: torch.Generator, tokenizer, sequences: list[list[int]], held_out: list[list[int]],
           settings: PretrainSettings, checkpoint: Checkpoint, step: int, history: list[dict]) -> int:
    """Train from ``step`` to ``settings.steps``: validate, extend ``history`` and save the state every
    ``checkpoint_every`` steps and at the end; the last step."""
    special = torch.tensor(tokenizer.all_special_ids)
    lengths = [len(s) for s in sequences]
    progress = Progress("pretrain", settings.steps, log_every=settings.log_every, start_at=step)
    recent: list[float] = []
    tokens_seen = sum(h.get("tokens", 0) for h in history)
    start = time.perf_counter()
    model.train()
    while step < settings.steps:
        epoch, offset = _position(step, lengths, settings)
        for rows in length_batches(lengths, settings.tokens_per_batch, settings.seed + epoch)[offset:]:
            if step >= settings.steps:
                break
            ids, attention = pad_batch([sequences[i] for i in rows], tokenizer.pad_token_id)
            loss = _optimizer_step(model, opt, ids, attention, special, settings.lr * lr_factor(step, settings),
                                   settings, gen, tokenizer.mask_token_id)
            step += 1
            tokens_seen += int(attention.sum())
            recent = (recent + [loss])[-200:]
            progress.update(step, loss=f"{sum(recent) / len(recent):.3f}")
            if step % settings.checkpoint_every == 0 or step == settings.steps:
                history.append(_validation(model, held_out, tokenizer, settings, step, recent,
                                           tokens_seen - sum(h.get("tokens", 0) for h in history), start))
                start = time.perf_counter()
                checkpoint.save(model, opt, step, gen, history, settings)
                if settings.snapshot_every and step % settings.snapshot_every == 0:
                    save_checkpoint_folder(model, tokenizer, snapshot_dir(checkpoint.dir, step))
    return step


def _validation(model, held_out: list[list[int]], tokenizer, settings: PretrainSettings, step: int,
                recent: list[float], tokens: int, started: float) -> dict:
    """The history entry of one checkpoint: recent loss, validation scores, tokens and time since ``started``
    (the last checkpoint, its validation included)."""
    quality = masked_accuracy(model, held_out, tokenizer, 0.15, settings.seed)
    seconds = time.perf_counter() - started
    log.info("step %d: validation accuracy %.3f, NLL %.3f at 15%% masking", step, quality["accuracy"], quality["nll"])
    return {"step": step, "loss_mean_last_200": sum(recent) / len(recent),
            "validation_accuracy_15": quality["accuracy"], "validation_nll_15": quality["nll"],
            "tokens": tokens, "seconds": seconds}


def _position(step: int, lengths: list[int], settings: PretrainSettings) -> tuple[int, int]:
    """(epoch, batch offset) of ``step``: the batch order is a function of the epoch's seed."""
    epoch = 0
    while True:
        n = len(length_batches(lengths, settings.tokens_per_batch, settings.seed + epoch))
        if step < n:
            return epoch, step
        step -= n
        epoch += 1


def settings_from(spec: dict) -> PretrainSettings:
    """The ``settings:`` block of workflow/pretrain.yaml, every key required and known."""
    fields = {f.name for f in dataclasses.fields(PretrainSettings)}
    missing, unknown = fields - spec.keys(), spec.keys() - fields
    if missing or unknown:
        raise fileio.InputError(f"workflow/pretrain.yaml: settings: missing {sorted(missing)}, unknown "
                            f"{sorted(unknown)}; every key of PretrainSettings must be given once")
    return PretrainSettings(**{**spec, "restarts": tuple(spec["restarts"])})


def build_base(*, train_text: str | Path, validation_text: str | Path, out_dir: str | Path,
               state_dir: str | Path, settings: PretrainSettings) -> dict:
    """The pretraining target: read the text files, train (resuming), write base and record."""
    record = pretrain(read_lines(train_text), read_lines(validation_text), out_dir, state_dir, settings)
    fileio.write_json(Path(state_dir) / "pretrain_record.json", record)
    return record
