"""How questions, answers and locked anchors become token sequences, per family template.

``pair`` (BERT, RoBERTa, ELECTRA, DistilBERT): training ``[CLS] Q [SEP] A [SEP]`` (the fast
tokenizer's pair template; position classes from its ``sequence_ids``), generation
``[CLS] Q [SEP]`` then the answer slot. ``[SEP]`` ends an answer.

``plain`` (LLaDA, Dream, Llama-style): training ``[BOS] Q <newline> A [EOS]``, generation
``[BOS] Q <newline>`` then the answer slot; Q, the newline and A are tokenized separately
(``add_special_tokens=False``), so no pair template and no ``sequence_ids`` are needed (Dream's
tokenizer is a slow one). EOS ends an answer; it is an answer position (maskable, in the loss),
so the model learns to end answers even where pad == eos.

Padding to the batch's longest sequence (the configured L is an upper bound: a pair longer
than L is an error, not silently cut): with [PAD] and a zero attention mask where the family
honours one; otherwise with EOS counted as answer, as LLaDA's own fine-tuning pads (the loss
then covers the EOS run, and the model sees no position that a mask would hide).
Generation: the answer slot holds the locked anchor s in its first |tok(s)| positions and the
rest start masked, then k extra mask positions (the mask-count probe; 0 by default).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from anchormask import io

# Position classes of a training sequence; masking's strategies name the classes they may mask.
SPECIAL, QUESTION, ANSWER, PAD = 0, 1, 2, 3
SEPARATOR = "\n"


@dataclass(frozen=True)
class Template:
    """The family's sequence layout and the special ids it places."""

    kind: str = "pair"            # pair | plain
    start: int | None = None      # BOS of the plain layout (None: no BOS)
    end: int | None = None        # EOS of the plain layout
    pad_is_answer: bool = False   # EOS padding (families that ignore the padding mask)

    @classmethod
    def of(cls, backbone) -> "Template":
        family = backbone.family
        if family.template == "pair":
            return cls()
        return cls("plain", backbone.ids.start, backbone.ids.end, pad_is_answer=not family.honours_padding)


PAIR = Template()


@dataclass(frozen=True)
class EncodedPair:
    input_ids: list[int]
    classes: list[int]


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _plain_prompt(tokenizer, question: str, template: Template) -> tuple[list[int], list[int]]:
    start = [template.start] if template.start is not None else []
    question_ids, separator = _ids(tokenizer, question), _ids(tokenizer, SEPARATOR)
    ids = start + question_ids + separator
    return ids, [SPECIAL] * len(start) + [QUESTION] * len(question_ids) + [SPECIAL] * len(separator)


def encode_pair(tokenizer, question: str, answer: str, seq_len: int, *, where: str = "",
                template: Template = PAIR) -> EncodedPair:
    if template.kind == "plain":
        ids, classes = _plain_prompt(tokenizer, question, template)
        answer_ids = _ids(tokenizer, answer) + [template.end]
        ids, classes = ids + answer_ids, classes + [ANSWER] * len(answer_ids)
    else:
        enc = tokenizer(question, answer, add_special_tokens=True)
        ids = list(enc["input_ids"])
        classes = [SPECIAL if s is None else (QUESTION if s == 0 else ANSWER) for s in enc.sequence_ids()]
    if len(ids) > seq_len:
        raise io.InputError(f"{where}: question + answer are {len(ids)} tokens, more than train.seq_len "
                            f"= {seq_len}; raise train.seq_len in config.yaml or shorten the pair")
    return EncodedPair(ids, classes)


def collate(examples: list[EncodedPair], pad_token_id: int, *, pad_is_answer: bool = False
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad to the longest example in the batch: input_ids, attention_mask, classes.

    ``pad_is_answer``: the padding is EOS that belongs to the answer (LLaDA's SFT rule): it is
    attended to and may be masked like the answer.
    """
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    classes = torch.full((len(examples), width), ANSWER if pad_is_answer else PAD, dtype=torch.long)
    for row, ex in enumerate(examples):
        ids[row, : len(ex.input_ids)] = torch.tensor(ex.input_ids)
        classes[row, : len(ex.classes)] = torch.tensor(ex.classes)
    return ids, (classes != PAD).long(), classes


def prompt_ids(tokenizer, question: str, template: Template = PAIR) -> list[int]:
    """The prompt before the answer slot: ``[CLS] Q [SEP]`` or ``[BOS] Q <newline>``."""
    if template.kind == "plain":
        return _plain_prompt(tokenizer, question, template)[0]
    return list(tokenizer(question, add_special_tokens=True)["input_ids"])


def anchor_ids(tokenizer, statement: str) -> list[int]:
    return list(tokenizer(statement, add_special_tokens=False)["input_ids"])
