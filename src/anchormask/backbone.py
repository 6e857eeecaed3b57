"""Loading a masked-LM backbone and naming its attention projections.

Two kinds of checkpoint load here: a Hugging Face masked-LM directory
(``AutoModelForMaskedLM``) and a LLaDA-style checkpoint that ships its own modelling code
(``AutoModel`` with ``trust_remote_code``; the mask token id comes from its config). For each
architecture family we know which module names are the Q, K, V and O projections, because
a LoRA target list that matches nothing trains nothing and peft does not complain.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

log = logging.getLogger(__name__)

# Module-name suffixes of the four attention projections, per family.
PROJECTIONS: dict[str, dict[str, str]] = {
    "bert": {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "o": "attention.output.dense"},
    "llada": {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "attn_out"},
    "llama": {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj"},
}
# The study's LoRA target sets, as projection kinds.
TARGET_SETS: dict[str, str] = {"full": "qkvo", "vo": "vo", "qk": "qk"}
# Leaf names that mean Q, K and V share one matrix: LoRA on "Q only" is then impossible.
FUSED_QKV_NAMES = ("qkv", "qkv_proj", "Wqkv", "c_attn", "query_key_value", "att_proj", "in_proj")
# Attribute names of the encoder body and the vocabulary head, for families where we can
# run them separately (so logits are computed only where a loss or the sampler needs them).
_SPLIT_HEADS = {"bert": [("bert", "cls"), ("roberta", "lm_head"), ("electra", "generator_lm_head")]}


class BackboneError(ValueError):
    """The checkpoint cannot be used as a backbone; the message says why and what to do."""


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None  # bf16 on CUDA, None (plain float32) on the CPU

    @property
    def name(self) -> str:
        suffix = f"+{str(self.autocast_dtype).removeprefix('torch.')}" if self.autocast_dtype else "+float32"
        return f"{self.device.type}{suffix}"

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.float32,
                              enabled=self.autocast_dtype is not None)


def pick_runtime(prefer: str = "auto") -> Runtime:
    """CUDA with bf16 autocast when a GPU is there (and wanted), the CPU in float32 otherwise."""
    if prefer not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, not {prefer!r}")
    if prefer != "cpu" and torch.cuda.is_available():
        bf16 = torch.cuda.is_bf16_supported()
        runtime = Runtime(torch.device("cuda"), torch.bfloat16 if bf16 else None)
    elif prefer == "cuda":
        raise BackboneError("device: cuda was asked for but torch sees no GPU; set device: auto or cpu")
    else:
        runtime = Runtime(torch.device("cpu"), None)
    log.info("runtime: %s", runtime.name)
    return runtime


def detect_family(model: nn.Module) -> str:
    """Name the projection family from the model's Linear module names, or refuse it."""
    names = [name for name, mod in model.named_modules() if isinstance(mod, nn.Linear)]
    leaves = {name.rsplit(".", 1)[-1] for name in names}
    fused = sorted(leaves.intersection(FUSED_QKV_NAMES))
    if fused and not {"q_proj", "query"} & leaves:
        raise BackboneError(
            f"the attention uses a fused QKV projection ({', '.join(fused)}): Q, K and V cannot get "
            "separate LoRA adapters, so the vo/qk target sets are undefined for this architecture; "
            "use a checkpoint with separate q/k/v projections")
    for family, proj in PROJECTIONS.items():
        if all(any(n == s or n.endswith("." + s) for n in names) for s in proj.values()):
            return family
    raise BackboneError(
        "could not find separate Q, K, V and O projection modules; known layouts: "
        + "; ".join(f"{fam}: {', '.join(p.values())}" for fam, p in PROJECTIONS.items()))


@dataclass
class Backbone:
    """A masked LM with what the pipeline needs to know about it."""

    model: nn.Module
    tokenizer: object
    family: str
    mask_token_id: int
    path: str
    _split: tuple[str, str] | None = field(default=None, repr=False)

    @property
    def projections(self) -> dict[str, str]:
        return PROJECTIONS[self.family]

    def projection_modules(self, targets: str) -> list[str]:
        """Full module names of a target set's projections (full, vo, qk), in model order."""
        if targets not in TARGET_SETS:
            raise ValueError(f"unknown LoRA target set {targets!r}; known: {', '.join(TARGET_SETS)}")
        suffixes = [self.projections[k] for k in TARGET_SETS[targets]]
        return [name for name, mod in self.model.named_modules()
                if isinstance(mod, nn.Linear) and any(name == s or name.endswith("." + s) for s in suffixes)]

    def modules_of_kind(self, kind: str) -> list[str]:
        """Full names of the Linear modules of one projection kind (q, k, v or o)."""
        suffix = self.projections[kind]
        return [name for name, mod in self.model.named_modules()
                if isinstance(mod, nn.Linear) and (name == suffix or name.endswith("." + suffix))]

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final hidden states; with no separable head, the logits themselves."""
        if self._split is None:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        body = getattr(self.model, self._split[0])
        return body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        if self._split is None:
            return hidden
        return getattr(self.model, self._split[1])(hidden)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.logits_from_hidden(self.hidden_states(input_ids, attention_mask))


def _find_split(model: nn.Module, family: str) -> tuple[str, str] | None:
    for body, head in _SPLIT_HEADS.get(family, []):
        if hasattr(model, body) and hasattr(model, head):
            return body, head
    return None


def _mask_token_id(model: nn.Module, tokenizer: object, path: Path) -> int:
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if mask_id is None:
        mask_id = getattr(model.config, "mask_token_id", None)
    if mask_id is None:
        raise BackboneError(
            f"{path}: neither the tokenizer nor config.json defines a mask token; add "
            "\"mask_token_id\" to config.json (LLaDA uses 126336)")
    return int(mask_id)


def load_backbone(path: str | Path, *, trust_remote_code: bool = False, runtime: Runtime | None = None,
                  attn_implementation: str | None = None) -> Backbone:
    """Load a masked LM from a local directory; nothing is downloaded.

    ``attn_implementation="eager"`` makes attention probabilities observable (the probes).
    """
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").is_file():
        raise BackboneError(f"{path}: no config.json; base.path in config.yaml must name a Hugging Face "
                            "checkpoint directory")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if trust_remote_code:
        model = AutoModel.from_pretrained(path, local_files_only=True, trust_remote_code=True, **extra)
    else:
        try:
            model = AutoModelForMaskedLM.from_pretrained(path, local_files_only=True, **extra)
        except ValueError as err:
            raise BackboneError(f"{path}: not a masked-LM architecture that transformers knows ({err}); "
                                "for a LLaDA-style checkpoint set base.trust_remote_code: true") from None
    family = detect_family(model)
    runtime = runtime or pick_runtime()
    model.to(runtime.device)
    backbone = Backbone(model=model, tokenizer=tokenizer, family=family,
                        mask_token_id=_mask_token_id(model, tokenizer, path), path=str(path),
                        _split=_find_split(model, family))
    log.info("backbone %s: family %s, %d parameters, mask token %d", path, family,
             sum(p.numel() for p in model.parameters()), backbone.mask_token_id)
    return backbone
