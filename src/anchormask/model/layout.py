"""How questions, answers and locked anchors become token sequences, per layout.

``pair`` (BERT, RoBERTa, ELECTRA, DistilBERT): training ``[CLS] Q [SEP] A [SEP]`` (the fast
tokenizer's pair template; position classes from its ``sequence_ids``), generation
``[CLS] Q [SEP]`` then the answer slot. ``[SEP]`` ends an answer.

``plain`` (LLaDA, Dream, Llama-style): training ``[BOS] Q <newline> A [EOS]``, generation
``[BOS] Q <newline>`` then the answer slot; Q, the newline and A are tokenized separately
(``add_special_tokens=False``), so no pair template and no ``sequence_ids`` are needed (Dream's
tokenizer is a slow one). EOS ends an answer; it is an answer position (maskable, in the loss),
so the model learns to end answers even where pad == eos.

``chat`` (Instruct checkpoints; base.layout: chat): the tokenizer's own chat template renders
the user turn around Q and opens the assistant turn (``add_generation_prompt=True``); the text
before and after Q is tokenized apart from Q, so every template token is special and every Q
token a question position. The answer follows and ends with the end-of-turn token the template
writes after an assistant turn (LLaDA-8B-Instruct ``<|eot_id|>``, Qwen/Dream ``<|im_end|>``).

Padding to the batch's longest sequence (the configured L is an upper bound: a pair longer
than L is an error, not silently cut): with [PAD] and a zero attention mask where the family
honours one; otherwise with EOS counted as answer, as LLaDA's own fine-tuning pads (the loss
then covers the EOS run, and the model sees no position that a mask would hide; under the chat
layout the EOS run follows the end-of-turn token, as in LLaDA's SFT data).
Generation: the answer slot holds the locked anchor s in its first |tok(s)| positions and the
rest start masked, then k extra mask positions (the mask-count probe; 0 by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from anchormask import fileio

# Position classes of a training sequence; masking's strategies name the classes they may mask.
SPECIAL, QUESTION, ANSWER, PAD = 0, 1, 2, 3
SEPARATOR = "\n"
# Stand-ins for the turn contents when a chat template is rendered: text no template writes.
QUESTION_SLOT, ANSWER_SLOT = "\u2983question\u2984", "\u2983answer\u2984"


class LayoutError(ValueError):
    """The tokenizer cannot give the asked-for layout; the message says what it lacks."""


@dataclass(frozen=True)
class Template:
    """The family's sequence layout and the special ids it places."""

    kind: str = "pair"            # pair | plain | chat
    start: int | None = None      # BOS of the plain layout (None: no BOS; the chat template writes its own)
    end: int | None = None        # ends the answer: EOS (plain) or end-of-turn (chat)
    pad_is_answer: bool = False   # EOS padding (families that ignore the padding mask)
    around: tuple[str, str] = ("", "")  # chat: the rendered text before and after Q

    @classmethod
    def of(cls, backbone) -> "Template":
        kind = backbone.layout
        if kind == "pair":
            return cls()
        return cls(kind, backbone.ids.start if kind == "plain" else None, backbone.ids.end,
                   pad_is_answer=not backbone.family.honours_padding,
                   around=chat_around(backbone.tokenizer) if kind == "chat" else ("", ""))


PAIR = Template()


@dataclass(frozen=True)
class EncodedPair:
    input_ids: list[int]
    classes: list[int]


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _render(tokenizer, turns: list[dict[str, str]], **kwargs) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise LayoutError("the tokenizer has no chat template (tokenizer_config.json: chat_template)")
    return tokenizer.apply_chat_template(turns, tokenize=False, **kwargs)


def _split_at(text: str, slot: str) -> tuple[str, str]:
    before, found, after = text.partition(slot)
    if not found or slot in after:
        raise LayoutError(f"the chat template does not write a turn's content exactly once ({text!r})")
    return before, after


def chat_around(tokenizer) -> tuple[str, str]:
    """The chat template's text before and after the question: the user turn, then the opened assistant turn."""
    user = [{"role": "user", "content": QUESTION_SLOT}]
    return _split_at(_render(tokenizer, user, add_generation_prompt=True), QUESTION_SLOT)


def chat_end_id(tokenizer) -> int:
    """The end-of-turn token: the first token the template writes after an assistant turn's content.

    It must be one token of the tokenizer's own (special or added) vocabulary; a template that
    closes turns with text the vocabulary splits into pieces has no end-of-turn token.
    """
    turns = [{"role": "user", "content": QUESTION_SLOT}, {"role": "assistant", "content": ANSWER_SLOT}]
    after = _split_at(_render(tokenizer, turns), ANSWER_SLOT)[1]
    ids = _ids(tokenizer, after)
    own = (set(tokenizer.get_added_vocab().values()) | set(tokenizer.all_special_ids)) - {tokenizer.unk_token_id}
    if not ids or ids[0] not in own:
        raise LayoutError(f"the chat template closes an assistant turn with {after!r}, which does not start with "
                          "one special token of the vocabulary (no end-of-turn token)")
    return ids[0]


def _prompt_pieces(question: str, template: Template) -> list[tuple[str, int]]:
    if template.kind == "chat":
        before, after = template.around
        return [(before, SPECIAL), (question, QUESTION), (after, SPECIAL)]
    return [(question, QUESTION), (SEPARATOR, SPECIAL)]


def _sequence_prompt(tokenizer, question: str, template: Template) -> tuple[list[int], list[int]]:
    """The plain or chat prompt: each piece tokenized on its own, with its position class."""
    ids = [template.start] if template.start is not None else []
    classes = [SPECIAL] * len(ids)
    for text, cls in _prompt_pieces(question, template):
        piece = _ids(tokenizer, text)
        ids, classes = ids + piece, classes + [cls] * len(piece)
    return ids, classes


def encode_pair(tokenizer, question: str, answer: str, seq_len: int, *, where: str = "",
                template: Template = PAIR) -> EncodedPair:
    if template.kind != "pair":
        assert template.end is not None  # Template.of gives every plain and chat layout its end id
        ids, classes = _sequence_prompt(tokenizer, question, template)
        answer_ids = _ids(tokenizer, answer) + [template.end]
        ids, classes = ids + answer_ids, classes + [ANSWER] * len(answer_ids)
    else:
        enc = tokenizer(question, answer, add_special_tokens=True)
        ids = list(enc["input_ids"])
        classes = [SPECIAL if s is None else (QUESTION if s == 0 else ANSWER) for s in enc.sequence_ids()]
    if len(ids) > seq_len:
        raise fileio.InputError(f"{where}: question + answer are {len(ids)} tokens, more than train.seq_len "
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
    """The prompt before the answer slot: ``[CLS] Q [SEP]``, ``[BOS] Q <newline>`` or the chat turns."""
    if template.kind != "pair":
        return _sequence_prompt(tokenizer, question, template)[0]
    return list(tokenizer(question, add_special_tokens=True)["input_ids"])


def anchor_ids(tokenizer, statement: str) -> list[int]:
    return list(tokenizer(statement, add_special_tokens=False)["input_ids"])


POSITION_KEYS = ("max_position_embeddings", "max_sequence_length", "n_positions")


def max_positions(model_config: Any) -> tuple[str, int] | None:
    """(key, value) of the longest sequence a model's config allows, if it states one: a config.json's
    content or a transformers config object (sampler.check_positions asks with the loaded model's)."""
    for key in POSITION_KEYS:
        value = model_config.get(key) if isinstance(model_config, dict) else getattr(model_config, key, None)
        if isinstance(value, int) and value > 0:
            return key, value
    return None
