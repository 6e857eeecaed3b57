"""How questions, answers and locked anchors become token sequences.

Training: ``[CLS] Q [SEP] A [SEP]`` then padding to the batch's longest sequence (the
configured L is an upper bound: a pair longer than L is an error, not silently cut).
Generation: ``[CLS] Q [SEP]`` then an answer slot of G positions whose first |tok(s)|
positions hold the locked anchor s and the rest start masked, then k extra mask positions
(the mask-count probe; 0 by default). Tokenizers without a pair template fall back to plain
concatenation; the position classes come from the fast tokenizer's ``sequence_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from anchormask import io
from anchormask.masking import ANSWER, PAD, QUESTION, SPECIAL


@dataclass(frozen=True)
class EncodedPair:
    input_ids: list[int]
    classes: list[int]


def encode_pair(tokenizer, question: str, answer: str, seq_len: int, *, where: str = "") -> EncodedPair:
    enc = tokenizer(question, answer, add_special_tokens=True)
    ids = list(enc["input_ids"])
    if len(ids) > seq_len:
        raise io.InputError(f"{where}: question + answer are {len(ids)} tokens, more than train.seq_len "
                            f"= {seq_len}; raise train.seq_len in config.yaml or shorten the pair")
    classes = [SPECIAL if s is None else (QUESTION if s == 0 else ANSWER) for s in enc.sequence_ids()]
    return EncodedPair(ids, classes)


def collate(examples: list[EncodedPair], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad to the longest example in the batch: input_ids, attention_mask, classes."""
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    classes = torch.full((len(examples), width), PAD, dtype=torch.long)
    for row, ex in enumerate(examples):
        ids[row, : len(ex.input_ids)] = torch.tensor(ex.input_ids)
        classes[row, : len(ex.classes)] = torch.tensor(ex.classes)
    return ids, (classes != PAD).long(), classes


def prompt_ids(tokenizer, question: str) -> list[int]:
    """``[CLS] Q [SEP]``: the question as the first segment of a pair."""
    ids = tokenizer(question, add_special_tokens=True)["input_ids"]
    return list(ids)


def anchor_ids(tokenizer, statement: str) -> list[int]:
    return list(tokenizer(statement, add_special_tokens=False)["input_ids"])
