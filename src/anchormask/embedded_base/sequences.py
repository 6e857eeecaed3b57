"""The embedded base's training sequences: the pretraining settings, its tokenizer, the sequences cut
from the text lines, and batches of near-equal length (so almost no position is padding).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PretrainSettings:
    """Every value lives in workflow/pretrain.yaml (one source); see its comments."""

    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    intermediate_size: int
    max_positions: int
    seq_len: int
    min_tokens: int
    pair_share: float
    tokens_per_batch: int
    steps: int
    lr: float
    warmup_steps: int
    decay_steps: int
    restarts: tuple[int, ...]  # steps where a resumed run warmed up again after a finished decay
    weight_decay: float
    min_mask_ratio: float
    weighting: str  # none | inverse_t
    bf16: bool
    seed: int
    log_every: int
    checkpoint_every: int
    snapshot_every: int  # 0: no snapshots
    eval_sequences: int


def train_tokenizer(lines: list[str], vocab_size: int):
    """A lowercase WordPiece tokenizer in the Hugging Face BERT layout."""
    # transformers 5 exports *TokenizerFast names through its lazy module only, so its type-checked __init__
    # lacks them; tokenization_bert's alias is not in 4.x (.venv-remote), where it is tokenization_bert_fast's.
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]  # exported lazily, see above

    wp = BertWordPieceTokenizer(lowercase=True, strip_accents=True)
    wp.train_from_iterator(lines, vocab_size=vocab_size, min_frequency=2, show_progress=False,
                           special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return BertTokenizerFast(vocab=wp.get_vocab(), do_lower_case=True)


def encode_sequences(lines: list[str], tokenizer, settings: PretrainSettings) -> list[list[int]]:
    """``[CLS] line [SEP]``, or with a seeded ``pair_share`` two adjacent lines as two segments.

    Sequences longer than ``seq_len`` are cut (keeping the final [SEP]); shorter than
    ``min_tokens`` (specials included) are dropped: a two-word line has no context to learn from.
    """
    pieces = tokenizer(lines, add_special_tokens=False)["input_ids"]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    rng = random.Random(settings.seed)
    sequences: list[list[int]] = []
    i = 0
    while i < len(pieces):
        if i + 1 < len(pieces) and rng.random() < settings.pair_share:
            ids = [cls, *pieces[i], sep, *pieces[i + 1], sep]
            i += 2
        else:
            ids = [cls, *pieces[i], sep]
            i += 1
        if len(ids) > settings.seq_len:
            ids = ids[:settings.seq_len - 1] + [sep]
        if len(ids) >= settings.min_tokens:
            sequences.append(ids)
    return sequences


def length_batches(lengths: list[int], tokens_per_batch: int, seed: int) -> list[list[int]]:
    """Batches of near-equal length (sorted, random tie order), in a seeded random order."""
    rng = random.Random(seed)
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        rows = max(1, tokens_per_batch // lengths[order[start]])
        while rows > 1 and rows * lengths[order[min(len(order), start + rows) - 1]] > tokens_per_batch:
            rows -= 1  # sorted ascending: the chunk's last sequence is its longest
        batches.append(order[start:start + rows])
        start += rows
    rng.shuffle(batches)
    return batches


def pad_batch(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, :len(seq)] = torch.tensor(seq)
        attention[row, :len(seq)] = 1
    return ids, attention
