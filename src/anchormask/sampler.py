"""Batched locked-anchor sampling for masked-diffusion LMs (LLaDA-style reverse process).

Each query's sequence is ``prompt | answer slot (G) | k extra masks``. The first |tok(s)|
slot positions hold the locked anchor; every other slot position starts as [MASK]. At each
of K denoising steps the model predicts every still-masked slot position, and the most
confident predictions are committed (``low_confidence`` remasking: the rest stay masked), as
many per step as LLaDA's schedule gives (the masked count split evenly over the steps, the
remainder to the first steps). Locked positions are never in the masked set, so the anchor
is preserved by construction, identically for every arm. The k extra masks (the mask-count
probe) stay masked throughout: they change the context, not the length of the answer.

``decoding: threshold`` (Fast-dLLM style) instead commits every prediction whose
probability reaches the threshold, at least the single most confident one per step, until
no masked position is left; it usually needs fewer forward passes.

``block_len`` > 0 decodes the slot in LLaDA's semi-autoregressive blocks, left to right, each
with an equal share of the steps; 0 is one block, the whole slot.

Randomness (temperature > 0: Gumbel noise; ``random`` remasking) comes from one generator
per query seeded from (seed, query id), on the runtime's device, so a query's output does not
depend on which other queries share its batch. A family whose forward ignores the padding mask
(LLaDA, Dream) gets batches of equal-length prompts only, so no row is ever padded. Logits are
computed only at masked slot positions and stay on the device (only the chosen token and its
confidence come back); special tokens other than the one that ends an answer ([SEP] or EOS,
even where EOS is also the padding token) are never proposed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from anchormask import schemas
from anchormask.backbone import Backbone, Runtime
from anchormask.io import InputError


def _default(key: str) -> Any:
    return schemas.default(("generation", key))


@dataclass(frozen=True)
class SamplerSettings:
    """The sampler's settings: the config's ``generation`` section less ``threads``. Each field's default
    is the config schema's default for that key (src/anchormask/schemas/config.schema.yaml)."""

    answer_len: int = _default("answer_len")
    steps: int = _default("steps")
    temperature: float = _default("temperature")
    remasking: str = _default("remasking")
    decoding: str = _default("decoding")
    threshold: float = _default("threshold")
    long_anchor: str = _default("long_anchor")
    extra_masks: int = _default("extra_masks")
    block_len: int = _default("block_len")
    batch_size: int = _default("batch_size")
    seed: int = _default("seed")

    def __post_init__(self) -> None:
        # LLaDA's generate() asserts both: blocks tile the slot and share the steps equally.
        if self.block_len:
            if self.answer_len % self.block_len:
                raise InputError(f"generation.block_len = {self.block_len} does not divide generation.answer_len = "
                                 f"{self.answer_len}; semi-autoregressive blocks must tile the answer slot")
            if self.steps % self.blocks:
                raise InputError(f"generation.steps = {self.steps} is not a multiple of the {self.blocks} blocks "
                                 f"(answer_len / block_len); each block gets steps / blocks denoising steps")

    @property
    def blocks(self) -> int:
        """Semi-autoregressive blocks of the answer slot (``block_len: 0``: one, the whole slot)."""
        return self.answer_len // self.block_len if self.block_len else 1

    @classmethod
    def from_config(cls, spec: dict[str, Any]) -> "SamplerSettings":
        return cls(**{k: spec[k] for k in cls.__dataclass_fields__ if k in spec})

    def record(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("answer_len", "steps", "temperature", "remasking", "decoding",
                                             "threshold", "extra_masks", "block_len")}


@dataclass(frozen=True)
class Request:
    query_id: str
    prompt_ids: list[int]
    anchor_ids: list[int]


@dataclass(frozen=True)
class Result:
    query_id: str
    slot_ids: list[int]
    locked: int
    anchor_truncated: bool
    forward_passes: int


@dataclass(frozen=True)
class Observation:
    """The state before one forward pass of a batch, for probes that look where the sampler looks.

    Row b's prompt is positions [0, slot_start[b]); its locked anchor [slot_start[b],
    slot_start[b] + locked[b]); its generated answer positions the rest of the slot, up to
    slot_start[b] + answer_len; ``masked`` marks positions not yet decided.
    """

    step: int
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    slot_start: torch.Tensor
    locked: torch.Tensor
    answer_len: int
    masked: torch.Tensor
    query_ids: tuple[str, ...]


Observer = Callable[[Observation], None]


class AnchorTooLong(ValueError):
    pass


def transfer_schedule(masked: int, steps: int) -> list[int]:
    """How many positions to commit at each step: masked // K each, the remainder first."""
    steps = max(1, min(steps, masked)) if masked else 0
    base, extra = divmod(masked, steps) if steps else (0, 0)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def query_generator(seed: int, query_id: str, device: torch.device | str = "cpu") -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{query_id}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little"))


def suppressed_token_ids(backbone: Backbone) -> list[int]:
    return list(backbone.ids.never)


def _lock(request: Request, settings: SamplerSettings) -> tuple[list[int], bool]:
    anchor = request.anchor_ids
    if len(anchor) < settings.answer_len:
        return anchor, False
    if settings.long_anchor == "fail":
        raise AnchorTooLong(f"query {request.query_id}: the anchor has {len(anchor)} tokens, not fewer than "
                            f"generation.answer_len = {settings.answer_len}; raise answer_len or set "
                            "long_anchor: truncate")
    return anchor[: settings.answer_len - 1], True


def _build_batch(requests: list[Request], settings: SamplerSettings, mask_id: int, pad_id: int):
    width = max(len(r.prompt_ids) for r in requests) + settings.answer_len + settings.extra_masks
    ids = torch.full((len(requests), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    slot = torch.zeros_like(ids, dtype=torch.bool)  # answer-slot positions still to decide
    starts, locks = [], []
    for row, req in enumerate(requests):
        anchor, truncated = _lock(req, settings)
        start, end = len(req.prompt_ids), len(req.prompt_ids) + settings.answer_len
        ids[row, :start] = torch.tensor(req.prompt_ids)
        ids[row, start:end + settings.extra_masks] = mask_id
        ids[row, start:start + len(anchor)] = torch.tensor(anchor, dtype=torch.long)
        attention[row, :end + settings.extra_masks] = 1
        slot[row, start + len(anchor):end] = True
        starts.append(start)
        locks.append((len(anchor), truncated))
    return ids, attention, slot, torch.tensor(starts), locks


def _propose(logits: torch.Tensor, settings: SamplerSettings, generators: list[torch.Generator],
             rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token and confidence for each masked position ([M, V] logits, rows gives each one's query)."""
    logits = logits.float()
    rows = rows.to(logits.device)
    if settings.temperature > 0:
        noise = torch.empty_like(logits)
        for r in rows.unique().tolist():  # each query's noise from its own generator
            sel = rows == r
            u = torch.rand(int(sel.sum()), logits.shape[1], generator=generators[r],
                           device=logits.device).clamp_(1e-20, 1.0)
            noise[sel] = -torch.log(-torch.log(u))
        tokens = (logits / settings.temperature + noise).argmax(-1)
    else:
        tokens = logits.argmax(-1)
    if settings.remasking == "random":
        confidence = torch.empty(tokens.shape, device=logits.device)
        for r in rows.unique().tolist():
            sel = rows == r
            confidence[sel] = torch.rand(int(sel.sum()), generator=generators[r], device=logits.device)
    else:
        confidence = torch.softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1)
    return tokens, confidence


def _choose(confidence: torch.Tensor, rows: torch.Tensor, quota: torch.Tensor, settings: SamplerSettings,
            batch: int) -> torch.Tensor:
    """Boolean [M]: which masked positions to commit this step."""
    counts = torch.bincount(rows, minlength=batch)
    offsets = counts.cumsum(0) - counts
    rank_in_row = torch.arange(rows.numel()) - offsets[rows]  # rows come sorted from nonzero()
    table = torch.full((batch, int(counts.max())), -1.0)
    table[rows, rank_in_row] = confidence
    order = table.argsort(dim=1, descending=True, stable=True)
    position_rank = torch.empty_like(order)
    position_rank.scatter_(1, order, torch.arange(order.shape[1]).expand_as(order).contiguous())
    rank = position_rank[rows, rank_in_row]
    if settings.decoding == "threshold":
        return (confidence >= settings.threshold) | (rank == 0)
    return rank < quota[rows]


def _blocks(settings: SamplerSettings, masked: torch.Tensor, starts: torch.Tensor):
    """LLaDA's semi-autoregressive blocks: (positions of block j still to decide, its steps).

    ``block_len: 0`` makes the whole answer slot one block (plain diffusion decoding). Each block
    gets an equal share of the denoising steps; positions after the current block stay masked
    and visible to the model.
    """
    width = settings.block_len or settings.answer_len
    offset = torch.arange(masked.shape[1])[None, :] - starts[:, None]
    for j in range(settings.blocks):
        yield masked & (offset >= j * width) & (offset < (j + 1) * width), settings.steps // settings.blocks


def generate(backbone: Backbone, runtime: Runtime, requests: list[Request], settings: SamplerSettings,
             observer: Observer | None = None, on_batch: Callable[[int], None] | None = None) -> list[Result]:
    """Decode every request's answer slot; returns one Result per request, in order.

    ``on_batch`` gets the number of requests done after each batch (progress reporting).
    """
    check_positions(backbone, requests, settings)
    done: dict[int, Result] = {}
    for batch in _batches(backbone, requests, settings.batch_size):
        done.update(zip(batch, _generate_batch(backbone, runtime, [requests[i] for i in batch], settings, observer)))
        if on_batch is not None:
            on_batch(len(done))
    return [done[i] for i in range(len(requests))]


POSITION_KEYS = ("max_position_embeddings", "max_sequence_length", "n_positions")


def max_positions(model_config) -> tuple[str, int] | None:
    """(key, value) of the longest sequence a model's config allows, if it states one."""
    for key in POSITION_KEYS:
        value = getattr(model_config, key, None)
        if isinstance(value, int) and value > 0:
            return key, value
    return None


def check_positions(backbone: Backbone, requests: list[Request], settings: SamplerSettings) -> None:
    """Fail before the first forward when a query's sequence is longer than the model allows (the
    model's own error is a tensor-size mismatch that names neither the query nor the setting)."""
    limit = max_positions(getattr(backbone.model, "config", None))
    if limit is None or not requests:
        return
    key, allowed = limit
    longest = max(requests, key=lambda r: len(r.prompt_ids))
    need = len(longest.prompt_ids) + settings.answer_len + settings.extra_masks
    if need > allowed:
        raise InputError(
            f"query {longest.query_id}: prompt ({len(longest.prompt_ids)} tokens) + generation.answer_len "
            f"({settings.answer_len}) + extra masks ({settings.extra_masks}) = {need} positions, more than the base "
            f"allows ({key} = {allowed} in {backbone.path}/config.json); lower generation.answer_len "
            f"(or generation.extra_masks / probes.maskcount_k) to at most {allowed - need + settings.answer_len}, "
            "or shorten the query")


def _batches(backbone: Backbone, requests: list[Request], size: int) -> list[list[int]]:
    """Request indices per batch: in order; for a family that ignores the padding mask, equal-length
    prompts per batch (so no row is padded and none depends on its batch mates)."""
    order = list(range(len(requests)))
    if backbone.family.honours_padding:
        return [order[i:i + size] for i in range(0, len(order), size)]
    by_length: dict[int, list[int]] = {}
    for i in order:
        by_length.setdefault(len(requests[i].prompt_ids), []).append(i)
    return [group[i:i + size] for _, group in sorted(by_length.items()) for i in range(0, len(group), size)]


@torch.inference_mode()
def _generate_batch(backbone: Backbone, runtime: Runtime, requests: list[Request], settings: SamplerSettings,
                    observer: Observer | None) -> list[Result]:
    ids, attention, masked, starts, locks = _build_batch(requests, settings, backbone.ids.mask, backbone.ids.pad)
    generators = [query_generator(settings.seed, r.query_id, runtime.device) for r in requests]
    suppressed = torch.tensor(suppressed_token_ids(backbone), device=runtime.device)
    passes = torch.zeros(len(requests), dtype=torch.long)
    locked = torch.tensor([lk[0] for lk in locks])
    step = 0
    for block, steps in _blocks(settings, masked, starts):
        schedules = [transfer_schedule(int(n), steps) for n in block.sum(1)]
        block_step = 0
        while block.any():
            if observer is not None:
                observer(Observation(step, ids.clone(), attention, starts, locked, settings.answer_len,
                                     masked.clone(), tuple(r.query_id for r in requests)))
            passes += block.any(1).long()
            rows, cols = block.nonzero(as_tuple=True)
            with runtime.autocast():
                logits = backbone.logits_at(ids.to(runtime.device), attention.to(runtime.device), rows, cols)
            logits = logits.float()
            logits[:, suppressed] = float("-inf")
            tokens, confidence = (t.cpu() for t in _propose(logits, settings, generators, rows))
            quota = torch.tensor([s[block_step] if block_step < len(s) else 0 for s in schedules])
            commit = _choose(confidence, rows, quota, settings, len(requests))
            ids[rows[commit], cols[commit]] = tokens[commit]
            masked[rows[commit], cols[commit]] = False
            block[rows[commit], cols[commit]] = False
            step += 1
            block_step += 1
    return [Result(r.query_id, ids[i, int(starts[i]):int(starts[i]) + settings.answer_len].tolist(),
                   locks[i][0], locks[i][1], int(passes[i])) for i, r in enumerate(requests)]
