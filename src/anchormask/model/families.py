"""What the pipeline must know about each architecture family, and how a loaded model is matched to one.

A family fixes the facts that differ between masked-diffusion checkpoints and that the rest of
the pipeline would otherwise get silently wrong:

- ``projections``: the module-name suffixes of the Q, K, V and O attention projections (a peft
  target list that matches nothing trains nothing and peft does not complain);
- ``head``: the module paths of the vocabulary head, applied in order, so that logits are
  computed only at the positions a loss or the sampler looks at (ELECTRA's generator head is
  two modules, DistilBERT's four);
- ``template``: ``pair`` (``[CLS] Q [SEP] A [SEP]``, the tokenizer's pair template) or ``plain``
  (``[BOS] Q <newline> A [EOS]``, for decoder-style checkpoints without a pair template);
- ``shifted``: position i's logits predict token i+1 (Dream, adapted from an autoregressive LM);
- ``honours_padding``: whether the forward takes a 2-D padding mask. LLaDA's ignores it and
  Dream's SDPA attention crashes on it, so those get batches with no padding that changes a
  row's logits (see ``layout``);
- ``attentions``: ``output`` (``output_attentions=True`` with eager attention) or ``sdpa`` (the
  probe records torch's scaled_dot_product_attention; LLaDA refuses ``output_attentions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch only where a model is inspected, so readers of KINDS (the probes' tables) skip it
    from torch import nn

KINDS = ("q", "k", "v", "o")  # the attention projections a LoRA target set is made of
# Leaf names that mean Q, K and V share one matrix: LoRA on "Q only" is then impossible.
FUSED_QKV_NAMES = ("qkv", "qkv_proj", "Wqkv", "c_attn", "query_key_value", "att_proj", "in_proj")


class FamilyError(ValueError):
    """No family fits the model; the message lists the known layouts and the config override."""


@dataclass(frozen=True)
class Family:
    name: str
    projections: Mapping[str, str]
    heads: tuple[tuple[str, ...], ...]  # candidate head paths; the first whose modules all exist is used
    template: str = "pair"
    shifted: bool = False
    honours_padding: bool = True
    attentions: str = "output"


_BERT_QKVO = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
              "o": "attention.output.dense"}
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("bert", _BERT_QKVO, (("cls",), ("lm_head",), ("generator_predictions", "generator_lm_head"))),
    Family("distilbert", {"q": "q_lin", "k": "k_lin", "v": "v_lin", "o": "out_lin"},
           (("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"),)),
    Family("llada", {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "attn_out"},
           (("model.transformer.ff_out",),), template="plain", honours_padding=False, attentions="sdpa"),
    Family("dream", {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}, (("lm_head",),),
           template="plain", shifted=True, honours_padding=False, attentions="sdpa"),
    Family("llama", {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"}, (("lm_head",),),
           template="plain", attentions="sdpa"),
)}
# config.json model_type -> family, where the module names alone are ambiguous (Dream and
# Llama-style models both name their projections q/k/v/o_proj).
MODEL_TYPES = {"dream": "dream", "llada": "llada", "distilbert": "distilbert"}
PROJECTIONS: dict[str, Mapping[str, str]] = {name: f.projections for name, f in FAMILIES.items()}


def _has_suffix(names: list[str], suffix: str) -> bool:
    return any(n == suffix or n.endswith("." + suffix) for n in names)


def _refuse_fused(leaves: set[str]) -> None:
    fused = sorted(leaves.intersection(FUSED_QKV_NAMES))
    if fused and not {"q_proj", "query", "q_lin"} & leaves:
        raise FamilyError(
            f"the attention uses a fused QKV projection ({', '.join(fused)}): Q, K and V cannot get "
            "separate LoRA adapters, so the vo/qk target sets are undefined for this architecture; "
            "use a checkpoint with separate q/k/v projections")


def detect(model: nn.Module, model_type: str | None = None, *, name: str | None = None,
           projections: Mapping[str, str] | None = None) -> Family:
    """The family of ``model``: ``name`` (base.family) if given, else by model_type and module names.

    ``projections`` (base.projections) replaces the family's Q/K/V/O suffixes.
    """
    from torch import nn

    linear = [n for n, mod in model.named_modules() if isinstance(mod, nn.Linear)]
    _refuse_fused({n.rsplit(".", 1)[-1] for n in linear})
    family = FAMILIES[name] if name else _by_type_or_names(linear, model_type)
    if projections:
        family = replace(family, projections=dict(projections))
    missing = [f"{k}: {s}" for k, s in family.projections.items() if not _has_suffix(linear, s)]
    if missing:
        raise FamilyError(f"family {family.name}: no Linear module ends with {'; '.join(missing)}; name the "
                          "projections in config.yaml as base.projections: {q: ..., k: ..., v: ..., o: ...}")
    return family


def _by_type_or_names(linear: list[str], model_type: str | None) -> Family:
    if model_type and model_type.lower() in MODEL_TYPES:
        return FAMILIES[MODEL_TYPES[model_type.lower()]]
    for family in FAMILIES.values():
        if family.name != "dream" and all(_has_suffix(linear, s) for s in family.projections.values()):
            return family
    raise FamilyError(
        "could not find separate Q, K, V and O projection modules; known layouts: "
        + "; ".join(f"{f.name}: {', '.join(f.projections.values())}" for f in FAMILIES.values())
        + "; for another layout set base.family and base.projections: {q: ..., k: ..., v: ..., o: ...} in "
        "config.yaml")


def head_paths(model: nn.Module, family: Family) -> tuple[str, ...]:
    """The head modules present in ``model``; () when none fits (full logits are then computed)."""
    names = {n for n, _ in model.named_modules()}
    return next((paths for paths in family.heads if all(p in names for p in paths)), ())
