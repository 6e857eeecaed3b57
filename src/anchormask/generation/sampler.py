"""Batched locked-anchor sampling for masked-diffusion LMs (LLaDA's and Dream's reverse processes).

Each query's sequence is ``prompt | answer slot (G) | k extra masks``. The first |tok(s)|
slot positions hold the locked anchor; every other slot position starts as [MASK]. At each
denoising step the model predicts every still-masked slot position and some predictions are
committed; the rest stay masked. Locked positions are never in the masked set, so the anchor
is preserved by construction, identically for every arm. The k extra masks (the mask-count
probe) stay masked throughout: they change the context, not the length of the answer.

One step (``decoding`` holds what it decides, option by option; docs/real-bases.md, "Decoding
options", has the table of options and the family whose own sampler each comes from): the model
predicts every masked position of the current block, ``decoding.propose`` gives each a token and a
confidence, ``decoding.choose`` picks the positions to commit.

``block_len`` > 0 decodes the slot in LLaDA's semi-autoregressive blocks, left to right, each
with an equal share of the steps; 0 is one block, the whole slot.

Randomness (Gumbel noise, ``random`` and ``origin`` remasking, ``alg_temp``) comes from one
generator per query seeded from (seed, query id), on the runtime's device, so a query's output
does not depend on which other queries share its batch. A family whose forward ignores the
padding mask (LLaDA, Dream) gets batches of equal-length prompts only, so no row is ever padded.
Logits are computed only at masked slot positions and stay on the device (only the chosen
token and its confidence come back).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from anchormask.fileio import InputError
from anchormask.generation import decoding
from anchormask.generation.sampler_settings import SamplerSettings
from anchormask.model.backbone import Backbone, Runtime
from anchormask.model.layout import max_positions


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


#: Called before each forward pass; a context manager it returns is entered around that step's
#: forward (the guided one as well when cfg_scale > 0), so a probe can read what the sampler's own
#: pass computes instead of running it again.
Observer = Callable[[Observation], contextlib.AbstractContextManager | None]


class AnchorTooLong(ValueError):
    pass


def generate(backbone: Backbone, runtime: Runtime, requests: list[Request], settings: SamplerSettings,
             observer: Observer | None = None, on_batch: Callable[[int], None] | None = None) -> list[Result]:
    """Decode every request's answer slot; returns one Result per request, in order.

    ``on_batch`` gets the number of requests done after each batch (progress reporting).
    """
    check_positions(backbone, requests, settings)
    vocabulary = decoding.Vocabulary.of(backbone, settings, runtime.device)
    done: dict[int, Result] = {}
    for batch in _batches(backbone, requests, settings.batch_size):
        done.update(zip(batch, _generate_batch(backbone, runtime, vocabulary, [requests[i] for i in batch],
                                               settings, observer)))
        if on_batch is not None:
            on_batch(len(done))
    return [done[i] for i in range(len(requests))]


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
    """Request indices per batch, by prompt length (the shortest first), so that a batch pads little;
    for a family that ignores the padding mask, equal-length prompts per batch (so no row is padded
    and none depends on its batch mates)."""
    order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
    if backbone.family.honours_padding:
        return [order[i:i + size] for i in range(0, len(order), size)]
    by_length: dict[int, list[int]] = {}
    for i in order:
        by_length.setdefault(len(requests[i].prompt_ids), []).append(i)
    return [group[i:i + size] for _, group in sorted(by_length.items()) for i in range(0, len(group), size)]


@torch.inference_mode()
def _generate_batch(backbone: Backbone, runtime: Runtime, vocabulary: decoding.Vocabulary, requests: list[Request],
                    settings: SamplerSettings, observer: Observer | None) -> list[Result]:
    ids, attention, masked, starts, locks = _build_batch(requests, settings, backbone.ids.mask, backbone.ids.pad)
    generators = [query_generator(settings.seed, r.query_id, runtime.device) for r in requests]
    passes = torch.zeros(len(requests), dtype=torch.long)
    locked = torch.tensor([lk[0] for lk in locks])
    step = 0
    for block, steps in _blocks(settings, masked, starts):
        plan = decoding.StepPlan(settings, block.sum(1), steps)
        for block_step in range(_MAX_STEPS):
            if not block.any():
                break
            active = block & plan.takes_any(block_step, block.sum(1))[:, None]
            if not active.any():  # Dream's schedule commits nothing this step: no forward needed
                continue
            watch = None if observer is None else observer(Observation(
                step, ids.clone(), attention, starts, locked, settings.answer_len, masked.clone(),
                tuple(r.query_id for r in requests)))
            passes += active.any(1).long()
            rows, cols = active.nonzero(as_tuple=True)
            with watch or contextlib.nullcontext():
                logits = _logits(backbone, runtime, vocabulary, ids, attention, starts, locked, rows, cols,
                                 settings)
            tokens, confidence = (t.cpu() for t in decoding.propose(logits, settings, vocabulary, generators, rows))
            commit = decoding.choose(confidence, rows, plan, block_step, block.sum(1), settings, generators)
            ids[rows[commit], cols[commit]] = tokens[commit]
            masked[rows[commit], cols[commit]] = False
            block[rows[commit], cols[commit]] = False
            step += 1
    return [Result(r.query_id, ids[i, int(starts[i]):int(starts[i]) + settings.answer_len].tolist(),
                   locks[i][0], locks[i][1], int(passes[i])) for i, r in enumerate(requests)]


_MAX_STEPS = 1 << 31  # threshold decoding runs until the block is decided (at least one commit per step)


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


def _lock(request: Request, settings: SamplerSettings) -> tuple[list[int], bool]:
    anchor = request.anchor_ids
    if len(anchor) < settings.answer_len:
        return anchor, False
    if settings.long_anchor == "fail":
        raise AnchorTooLong(f"query {request.query_id}: the anchor has {len(anchor)} tokens, not fewer than "
                            f"generation.answer_len = {settings.answer_len}; raise answer_len or set "
                            "long_anchor: truncate")
    return anchor[: settings.answer_len - 1], True


def query_generator(seed: int, query_id: str, device: torch.device | str = "cpu") -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{query_id}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little"))


def _blocks(settings: SamplerSettings, masked: torch.Tensor, starts: torch.Tensor) -> Iterator:
    """LLaDA's semi-autoregressive blocks: (positions of block j still to decide, its steps).

    ``block_len: 0`` makes the whole answer slot one block (plain diffusion decoding). Each block
    gets an equal share of the denoising steps; positions after the current block stay masked
    and visible to the model.
    """
    width = settings.block_len or settings.answer_len
    offset = torch.arange(masked.shape[1])[None, :] - starts[:, None]
    for j in range(settings.blocks):
        yield masked & (offset >= j * width) & (offset < (j + 1) * width), settings.steps // settings.blocks


def _logits(backbone: Backbone, runtime: Runtime, vocabulary: decoding.Vocabulary, ids: torch.Tensor,
            attention: torch.Tensor, starts: torch.Tensor, locked: torch.Tensor, rows: torch.Tensor,
            cols: torch.Tensor, settings: SamplerSettings) -> torch.Tensor:
    """[M, V] float32 logits at the masked positions (rows, cols), guided, never-proposed ids at -inf."""
    attention = attention.to(runtime.device)
    with runtime.autocast():
        logits = backbone.logits_at(ids.to(runtime.device), attention, rows, cols).float()
        if settings.cfg_scale > 0:
            # LLaDA's unsupervised guidance: the same sequence with every prompt position masked, and
            # with cfg_anchor: masked the locked anchor's too (generate.py handed question + anchor).
            unprompted = ids.masked_fill(_unguided(starts, locked, ids.shape[1], settings), backbone.ids.mask)
            un = backbone.logits_at(unprompted.to(runtime.device), attention, rows, cols).float()
            logits = un + (settings.cfg_scale + 1) * (logits - un)
    return logits.masked_fill_(vocabulary.never, float("-inf"))


def _unguided(starts: torch.Tensor, locked: torch.Tensor, width: int, settings: SamplerSettings) -> torch.Tensor:
    """[B, width] the positions the unguided forward masks: each row's prompt, and its locked anchor
    under ``cfg_anchor: masked``."""
    end = starts + locked if settings.cfg_anchor == "masked" else starts
    return torch.arange(width)[None, :] < end[:, None]
