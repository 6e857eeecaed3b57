"""The mask-ratio draw, the Bernoulli mask the built-in strategies use, and the training losses.

A training example is one sequence ``[CLS] Q [SEP] A [SEP] [PAD]...`` of length L (``layout``). Every
position has a class: special, question, answer or padding. Which positions a strategy may mask is
``strategies`` (anchor: the answer; random: question and answer; reverse: the question). Special
tokens and padding are never masked under any strategy: the report's rule speaks of Q and A only, and
masking [SEP] would teach the model where answers end rather than what they say.

Each step draws one mask ratio per sequence (uniform on [low, high]; the report's default is
[0.5, 0.9], and seed 003's signal-rich window is the same family with a narrow interval); the
built-in strategies then mask every eligible position independently with that probability.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

LOSSES = ("ce", "llada", "mask_agnostic")


@dataclass(frozen=True)
class MaskRatio:
    """Per-sequence mask ratio, uniform on [low, high]."""

    low: float
    high: float

    @classmethod
    def from_config(cls, spec: dict[str, Any]) -> "MaskRatio":
        return cls(float(spec["low"]), float(spec["high"]))

    def sample(self, batch: int, generator: torch.Generator) -> torch.Tensor:
        u = torch.rand(batch, generator=generator)
        return self.low + (self.high - self.low) * u


def draw_mask(eligible: torch.Tensor, ratio: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Bernoulli(ratio[b]) at every eligible position of sequence b, never elsewhere."""
    u = torch.rand(eligible.shape, generator=generator)
    return eligible & (u < ratio[:, None])


def apply_mask(input_ids: torch.Tensor, mask: torch.Tensor, mask_token_id: int) -> torch.Tensor:
    return torch.where(mask, torch.full_like(input_ids, mask_token_id), input_ids)


def masked_loss(logits: torch.Tensor, targets: torch.Tensor, *, kind: str, ratio: torch.Tensor,
                rows: torch.Tensor, eligible_count: torch.Tensor, tv_weight: float = 1.0,
                of_batch: tuple[int, int] | None = None) -> torch.Tensor:
    """Loss over the masked positions only.

    ``logits`` [M, V] and ``targets`` [M] are gathered at the M masked positions; ``rows`` [M]
    gives each one's sequence, ``ratio`` [B] the sequence's mask ratio p and
    ``eligible_count`` [B] its number of eligible positions.

    - ce (default): mean cross-entropy per masked token, (1/M) sum_i CE_i.
    - llada: LLaDA's SFT weighting, (1/B) sum_b (1/n_b) sum_{i in b} CE_i / p_b, with n_b the
      sequence's eligible length (the answer length under anchor masking).
    - mask_agnostic (seed 002): (1/M) sum_i [CE_i / p_i + tv_weight * p_i * TV_i], where
      TV_i = 1 - softmax(logits_i)[target_i] is the total-variation distance between the
      predicted distribution and the one-hot target.

    With no masked position (M = 0) the loss is a zero that still carries a gradient, so a
    step can run (and be logged) without producing NaN. ``of_batch`` = (M, B) of the whole batch
    when these rows are one micro-batch of it (train.grad_accum): the sums are divided by the whole
    batch's counts, so that the micro-batches' losses add up to the batch's.
    """
    if kind not in LOSSES:
        raise ValueError(f"unknown loss {kind!r}; known: {', '.join(LOSSES)}")
    if targets.numel() == 0:
        return logits.sum() * 0.0
    ce = F.cross_entropy(logits.float(), targets, reduction="none")
    p = ratio.to(ce.device)[rows]
    if kind == "llada":
        terms = ce / p / eligible_count.to(ce.device)[rows].clamp(min=1)
        return terms.sum() / (ratio.numel() if of_batch is None else of_batch[1])
    if kind == "ce":
        terms = ce
    else:
        tv = 1.0 - torch.softmax(logits.float(), dim=-1).gather(1, targets[:, None]).squeeze(1)
        terms = ce / p + tv_weight * p * tv
    return terms.mean() if of_batch is None else terms.sum() / of_batch[0]
