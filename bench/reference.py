"""The plain competitors the project's code is measured against.

Both are written the straightforward way on purpose; they share nothing with the project's
code paths except the model object, the tokenised data and the constants that define the
task (position classes, which token ids may not be proposed).

* ``reference_train_step``: fixed padding to L = train.seq_len, no bucketing, the full model
  (encoder and vocabulary head) at every position, cross-entropy gathered at the masked
  positions as LLaDA's SFT code does. It draws the mask ratio and the mask from the generator
  in the same order as ``anchormask.training.train.train_step``, so with L equal to the batch's longest
  sequence both draw the same mask (tests/test_bench.py checks the losses agree).
* ``reference_generate``: one query at a time, LLaDA's ``generate.py`` loop: a full forward
  per step over the whole sequence, Gumbel noise in float64 (skipped at temperature 0, as in
  LLaDA), the float64 softmax over the full vocabulary at every position, confidence -inf
  outside the current block (the whole answer slot unless ``block_len`` is set), LLaDA's
  transfer schedule, the k most confident committed. ``cfg_scale`` > 0 is generate.py's guidance:
  the sequence and its unguided copy in one forward (``torch.cat``), un + (cfg_scale + 1)(cond - un),
  the copy with the question masked and, under ``cfg_anchor="masked"``, the locked anchor too
  (generate.py handed question + anchor as its prompt masks its whole prompt_index).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anchormask.model.layout import PAD
from anchormask.training.strategies import BUILTIN_CLASSES


def fixed_collate(examples, seq_len: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask, classes, every row padded to ``seq_len``."""
    ids = torch.full((len(examples), seq_len), pad_id, dtype=torch.long)
    classes = torch.full((len(examples), seq_len), PAD, dtype=torch.long)
    for row, ex in enumerate(examples):
        ids[row, : len(ex.input_ids)] = torch.tensor(ex.input_ids)
        classes[row, : len(ex.classes)] = torch.tensor(ex.classes)
    return ids, (classes != PAD).long(), classes


def reference_train_step(model, examples, *, seq_len: int, strategy: str, low: float, high: float,
                         mask_id: int, pad_id: int, generator: torch.Generator) -> tuple[torch.Tensor, int]:
    """Loss of one batch (mean CE over masked positions) and the number of masked positions."""
    ids, attention, classes = fixed_collate(examples, seq_len, pad_id)
    eligible = torch.isin(classes, torch.tensor(BUILTIN_CLASSES[strategy]))
    ratio = low + (high - low) * torch.rand(len(examples), generator=generator)
    mask = eligible & (torch.rand(ids.shape, generator=generator) < ratio[:, None])
    noisy = torch.where(mask, torch.full_like(ids, mask_id), ids)
    logits = model(input_ids=noisy, attention_mask=attention).logits      # [B, L, V], every position
    if not mask.any():
        return logits.sum() * 0.0, 0
    return F.cross_entropy(logits[mask], ids[mask]), int(mask.sum())


def add_gumbel_noise(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None):
    """LLaDA's generate.py: float64 Gumbel-max via exp(logits) / (-log u) ** T; T = 0 returns logits."""
    if temperature == 0:
        return logits
    logits = logits.to(torch.float64)
    noise = torch.rand(logits.shape, dtype=torch.float64, generator=generator)
    gumbel_noise = (-torch.log(noise)) ** temperature
    return logits.exp() / gumbel_noise


def num_transfer_tokens(masked: int, steps: int) -> list[int]:
    """LLaDA's get_num_transfer_tokens for one block: masked // steps each, the remainder first."""
    base, remainder = divmod(masked, steps)
    return [base + (1 if i < remainder else 0) for i in range(steps)]


@torch.no_grad()
def reference_generate(model, prompt_ids: list[int], anchor_ids: list[int], *, answer_len: int, steps: int,
                       mask_id: int, suppressed: list[int], temperature: float = 0.0, extra_masks: int = 0,
                       block_len: int = 0, generator: torch.Generator | None = None, cfg_scale: float = 0.0,
                       cfg_anchor: str = "visible") -> tuple[list[int], int]:
    """One query: the answer slot's token ids and the number of forward passes run.

    The anchor is locked as the project specifies (cut to answer_len - 1 tokens when it does
    not fit); ``suppressed`` token ids are never proposed (-inf logits). Ties in confidence go
    to the earlier position (a stable sort; ``torch.topk`` leaves the order of ties open).
    Steps whose quota is 0 (fewer masked positions than steps) would change nothing, so a
    block's loop stops once the block is decided; LLaDA would still run them.

    ``block_len`` > 0: LLaDA's semi-autoregressive blocks of that many slot positions (counted
    from the slot's start, the locked anchor included), left to right, each with
    steps // n_blocks steps (at least 1); 0 makes the whole slot one block.
    """
    anchor = anchor_ids if len(anchor_ids) < answer_len else anchor_ids[: answer_len - 1]
    start = len(prompt_ids)
    lo, hi = start + len(anchor), start + answer_len
    device = next(model.parameters()).device  # the model's (bench/gpu.py runs this on a GPU)
    x = torch.tensor([prompt_ids + anchor + [mask_id] * (answer_len - len(anchor) + extra_masks)], device=device)
    width = block_len or answer_len
    num_blocks = -(-answer_len // width)
    block_steps = max(1, steps // num_blocks)
    unguided = torch.zeros_like(x, dtype=torch.bool)
    unguided[:, :lo if cfg_anchor == "masked" else start] = True  # lo: the slot's first position after the anchor
    passes = 0
    for j in range(num_blocks):
        block_lo, block_hi = max(lo, start + j * width), min(hi, start + (j + 1) * width)
        block_mask_index = x[:, block_lo:block_hi] == mask_id
        schedule = num_transfer_tokens(int(block_mask_index.sum()), block_steps)
        for i in range(block_steps):
            mask_index = x == mask_id
            mask_index[:, :block_lo] = False
            mask_index[:, block_hi:] = False                 # later blocks and the extra masks wait
            if not mask_index.any():
                break
            if cfg_scale > 0:
                un_x = x.masked_fill(unguided, mask_id)
                logits, un_logits = torch.chunk(model(input_ids=torch.cat([x, un_x])).logits, 2)
                logits = un_logits + (cfg_scale + 1) * (logits - un_logits)
            else:
                logits = model(input_ids=x).logits           # full forward, every position
            passes += 1
            logits[..., suppressed] = float("-inf")
            x0 = torch.argmax(add_gumbel_noise(logits, temperature, generator), dim=-1)
            p = F.softmax(logits.to(torch.float64), dim=-1)  # full vocabulary, every position
            x0_p = torch.gather(p, -1, x0[..., None]).squeeze(-1)
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, torch.tensor(float("-inf"), dtype=torch.float64))
            order = torch.sort(confidence[0], descending=True, stable=True).indices[: schedule[i]]
            x[0, order] = x0[0, order]
    return x[0, start:start + answer_len].tolist(), passes
