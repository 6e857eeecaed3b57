"""A masking strategy of one's own, as the pipeline calls it: the end of the answer, left to right.

Named in a config layer (config/strategies/suffix.yaml) as ``config/strategies/answer_suffix.py:answer_suffix``;
docs/strategies.md explains the contract. Each sequence masks the last ``ratio`` of its answer positions
(rounded up, at least ``min_masked``), so the model learns to continue a visible beginning, as a
left-to-right decoder of the answer would.
"""

import math

import torch

ANSWER = 2  # anchormask.model.layout.ANSWER: the class of an answer position


def answer_suffix(batch, min_masked: int = 1) -> torch.Tensor:
    """The boolean mask [B, L]: the final ceil(ratio[b] x answer length) answer positions of each sequence b."""
    mask = torch.zeros_like(batch.classes, dtype=torch.bool)
    for b in range(batch.classes.shape[0]):
        answer = (batch.classes[b] == ANSWER).nonzero().flatten()
        count = min(len(answer), max(min_masked, math.ceil(float(batch.ratio[b]) * len(answer))))
        if count:
            mask[b, answer[-count:]] = True
    return mask
