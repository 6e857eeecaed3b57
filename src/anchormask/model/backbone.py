"""Loading a masked-LM backbone: weights, tokenizer, special ids, and logits only where needed.

Two kinds of checkpoint load here: a Hugging Face masked-LM directory
(``AutoModelForMaskedLM``) and a checkpoint that ships its own modelling code (LLaDA, Dream:
``AutoModel`` with ``trust_remote_code``). Weights load straight onto the runtime's device in
its compute dtype (bf16 on a GPU, float32 on the CPU): a 8B model never passes through host
memory in float32. The family (``families``) says everything else the pipeline must know.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from anchormask.model import families, layout
from anchormask.model.families import Family
from anchormask.model.layout import Template

log = logging.getLogger(__name__)
# The study's LoRA target sets, as projection kinds.
TARGET_SETS: dict[str, str] = {"full": "qkvo", "vo": "vo", "qk": "qk"}
REMOTE_REQUIREMENTS = "envs/requirements-remote.txt"


class BackboneError(ValueError):
    """The checkpoint cannot be used as a backbone; the message says why and what to do."""


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None  # bf16 on CUDA, None (plain float32) on the CPU

    @property
    def dtype(self) -> torch.dtype:
        """The dtype weights load in: the autocast dtype, float32 without one."""
        return self.autocast_dtype or torch.float32

    @property
    def name(self) -> str:
        suffix = f"+{str(self.autocast_dtype).removeprefix('torch.')}" if self.autocast_dtype else "+float32"
        return f"{self.device.type}{suffix}"

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.autocast_dtype is not None)


def pick_runtime(prefer: str = "auto") -> Runtime:
    """CUDA with bf16 when a GPU is there (and wanted), the CPU in float32 otherwise."""
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


@dataclass(frozen=True)
class SpecialIds:
    mask: int
    pad: int
    end: int                  # ends an answer: [SEP] (pair layout), EOS (plain), end-of-turn (chat)
    start: int | None         # [CLS] or BOS, first in every sequence
    never: tuple[int, ...]    # ids the sampler never proposes


@dataclass
class Backbone:
    """A masked LM with what the pipeline needs to know about it."""

    model: nn.Module
    tokenizer: Any  # the checkpoint's Hugging Face tokenizer (AutoTokenizer), used by duck typing
    family: Family
    ids: SpecialIds
    path: str
    head: tuple[str, ...] = ()  # module paths of the vocabulary head; () = not separable
    layout: str = "pair"        # pair | plain | chat: base.layout, else the family's own

    @property
    def mask_token_id(self) -> int:
        return self.ids.mask

    @functools.cached_property
    def template(self) -> Template:  # the field `layout` hides the module here
        return layout.Template.of(self)

    @property
    def projections(self) -> dict[str, str]:
        return dict(self.family.projections)

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

    def padding_mask(self, attention_mask: torch.Tensor) -> torch.Tensor | None:
        """What the forward gets as its mask: none for a family that ignores or cannot take one."""
        return attention_mask if self.family.honours_padding else None

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs):
        """Final hidden states (the head swapped out for the call); with no separable head, the logits.

        Extra keyword arguments go to the model's forward; the model's output object is returned
        as ``(hidden, output)`` when any is given (the probes ask for attentions).
        """
        with _headless(self.model, self.head):
            out = self.model(input_ids=input_ids, attention_mask=self.padding_mask(attention_mask), **kwargs)
        return (out.logits, out) if kwargs else out.logits

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        for path in self.head:
            hidden = self.model.get_submodule(path)(hidden)
        return hidden

    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                  cols: torch.Tensor) -> torch.Tensor:
        """[M, V] logits predicting the tokens at (rows, cols): the head runs at those M positions only.

        A shifted family (Dream) predicts position i from the output at i - 1.
        """
        hidden = self.hidden_states(input_ids, attention_mask)
        source = cols - 1 if self.family.shifted else cols
        if bool((source < 0).any()):
            raise ValueError(f"{self.path}: a shifted family cannot predict position 0 (it holds BOS)")
        return self.logits_from_hidden(hidden[rows.to(hidden.device), source.to(hidden.device)])

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Full [B, S, V] logits as the model's own forward returns them (unshifted)."""
        return self.logits_from_hidden(self.hidden_states(input_ids, attention_mask))


@contextlib.contextmanager
def _headless(model: nn.Module, paths: tuple[str, ...]):
    """Replace the head modules by identities for one call, so the forward returns hidden states."""
    saved = []
    try:
        for path in paths:
            parent, _, leaf = path.rpartition(".")
            owner = model.get_submodule(parent) if parent else model
            saved.append((owner, leaf, getattr(owner, leaf)))
            setattr(owner, leaf, nn.Identity())
        yield
    finally:
        for owner, leaf, module in reversed(saved):
            setattr(owner, leaf, module)


def read_config(path: Path) -> dict:
    """config.json as written, not as a config class fills it: a class default (LLaDA's mask id
    50256) must never stand in for a missing key."""
    try:
        return json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        raise BackboneError(f"{path}: no config.json; base.path in config.yaml must name a Hugging Face "
                            "checkpoint directory") from None
    except json.JSONDecodeError as err:
        raise BackboneError(f"{path / 'config.json'}: not valid JSON ({err})") from None


def _token_id(tokenizer, raw: dict, name: str) -> int | None:
    value = getattr(tokenizer, f"{name}_token_id", None)
    if value is None:
        value = raw.get(f"{name}_token_id")
    if isinstance(value, list):  # generation-style configs list several EOS ids; the first ends answers
        value = value[0] if value else None
    return None if value is None else int(value)


def mask_id(tokenizer, raw: dict, path: Path) -> int:
    """The mask token id, from the tokenizer or config.json as written; checked before any weight loads."""
    found = _token_id(tokenizer, raw, "mask")
    if found is None:
        raise BackboneError(f"{path}: neither the tokenizer nor config.json defines a mask token; add "
                            "\"mask_token_id\" to config.json (LLaDA uses 126336, Dream 151666)")
    vocab = raw.get("vocab_size") or raw.get("embedding_size")
    if vocab is not None and not 0 <= found < int(vocab):
        raise BackboneError(f"{path / 'config.json'}: mask_token_id {found} is outside the vocabulary "
                            f"(vocab_size {vocab})")
    return found


def chat_end_id(tokenizer, path: Path) -> int:
    """The chat layout's end of answer (the end-of-turn token); an error names base.layout and the fix."""
    try:
        layout.chat_around(tokenizer)
        return layout.chat_end_id(tokenizer)
    except layout.LayoutError as err:
        raise BackboneError(f"{path}: base.layout is chat, but {err}; use a checkpoint whose tokenizer_config.json "
                            "has a chat_template that ends turns with an end-of-turn token (an Instruct "
                            "checkpoint), or set base.layout: plain in config.yaml") from None


def special_ids(tokenizer, raw: dict, family: Family, path: Path, kind: str | None = None) -> SpecialIds:
    """The ids the layout (``kind``, else the family's) and the sampler use; an error names a missing one."""
    get = {n: _token_id(tokenizer, raw, n) for n in ("pad", "bos", "eos", "cls", "sep", "unk")}
    mask = mask_id(tokenizer, raw, path)
    kind = kind or family.template
    pair = kind == "pair"
    end, start = (get["sep"], get["cls"]) if pair else (get["eos"], get["bos"])
    if kind == "chat":
        end = chat_end_id(tokenizer, path)
    if end is None:
        key = "sep_token_id" if pair else "eos_token_id"
        raise BackboneError(f"{path}: the {kind} layout ends each answer with "
                            f"{'[SEP]' if pair else 'EOS'}, but neither the tokenizer nor config.json defines "
                            f"one; add \"{key}\" to config.json")
    # The plain and chat layouts pad with EOS, as LLaDA's own fine-tuning does; the pair layout needs [PAD].
    pad = get["pad"] if get["pad"] is not None or pair else get["eos"] if kind == "chat" else end
    if pad is None:
        raise BackboneError(f"{path}: no padding token; add \"pad_token_id\" to config.json")
    # Padding that training counts as answer (families that ignore the padding mask) may be proposed.
    answer = {end} | ({pad} if not pair and not family.honours_padding else set())
    never = {i for i in (mask, get["pad"], get["cls"], get["unk"], get["bos"]) if i is not None} - answer
    return SpecialIds(mask=mask, pad=pad, end=end, start=start, never=tuple(sorted(never)))


def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def _load_kwargs(runtime: Runtime, attn_implementation: str | None) -> dict:
    """Straight to the device in the compute dtype (no float32 copy on the host first)."""
    dtype_key = "dtype" if _transformers_major() >= 5 else "torch_dtype"
    kwargs = {dtype_key: runtime.dtype, "device_map": runtime.device.type, "local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    return kwargs


def _remote_failure(path: Path, raw: dict, err: Exception) -> BackboneError:
    import transformers

    code = ", ".join(sorted(set((raw.get("auto_map") or {}).values()))) or "its modelling code"
    return BackboneError(
        f"{path}: {code} failed to load under transformers {transformers.__version__}: "
        f"{type(err).__name__}: {err}. LLaDA's and Dream's modelling code was written for transformers "
        f"4.38-4.46; install the pinned 4.x set: pip install -r {REMOTE_REQUIREMENTS} (docs/real-bases.md, "
        "\"Using a real base\")")


def load_tokenizer(path: Path, trust_remote_code: bool):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, ImportError, AttributeError, TypeError, KeyError) as err:
        listed = ", ".join(sorted(p.name for p in path.iterdir() if p.name.startswith(("tokeni", "vocab",
                                                                                          "merges", "special"))))
        raise BackboneError(f"{path}: could not load the tokenizer ({type(err).__name__}: {err}); files found: "
                            f"{listed or 'none'}. A checkpoint needs tokenizer_config.json with tokenizer.json "
                            "(fast) or its vocabulary files (slow; with trust_remote_code, the .py its auto_map "
                            "names)") from None


def load_model(path: Path, raw: dict, *, trust_remote_code: bool, runtime: Runtime,
               attn_implementation: str | None) -> nn.Module:
    from transformers import AutoModel, AutoModelForMaskedLM

    kwargs = _load_kwargs(runtime, attn_implementation)
    if trust_remote_code:
        try:
            return AutoModel.from_pretrained(path, trust_remote_code=True, **kwargs)
        except (AttributeError, KeyError, ImportError, TypeError) as err:
            raise _remote_failure(path, raw, err) from err
    try:
        return AutoModelForMaskedLM.from_pretrained(path, **kwargs)
    except ValueError as err:
        raise BackboneError(f"{path}: not a masked-LM architecture that transformers knows ({err}); "
                            "for a checkpoint that ships its own modelling code (LLaDA, Dream) set "
                            "base.trust_remote_code: true") from None


def model_dtype(model: nn.Module) -> torch.dtype:
    """The dtype the weights really have (what provenance records)."""
    return next(model.parameters()).dtype


def load_backbone(path: str | Path, *, trust_remote_code: bool = False, runtime: Runtime | None = None,
                  attn_implementation: str | None = None, family: str | None = None,
                  projections: Mapping[str, str] | None = None, layout: str | None = None) -> Backbone:
    """Load a masked LM from a local directory; nothing is downloaded.

    ``attn_implementation="eager"`` makes attention probabilities observable (the probes);
    ``family``, ``projections`` and ``layout`` are base.family, base.projections and base.layout of
    config.yaml (no layout: the family's own).
    """
    path = Path(path)
    raw = read_config(path)
    tokenizer = load_tokenizer(path, trust_remote_code)
    mask_id(tokenizer, raw, path)
    if layout == "chat":  # before any weight loads
        chat_end_id(tokenizer, path)
    runtime = runtime or pick_runtime()
    model = load_model(path, raw, trust_remote_code=trust_remote_code, runtime=runtime,
                       attn_implementation=attn_implementation)
    try:
        fam = families.detect(model, raw.get("model_type"), name=family, projections=projections)
    except families.FamilyError as err:
        raise BackboneError(f"{path}: {err}") from None
    kind = layout or fam.template
    backbone = Backbone(model=model, tokenizer=tokenizer, family=fam, path=str(path), layout=kind,
                        ids=special_ids(tokenizer, raw, fam, path, kind), head=families.head_paths(model, fam))
    if not backbone.head:
        log.warning("%s: no separable vocabulary head for family %s; full logits are computed", path, fam.name)
    log.info("backbone %s: family %s, %s layout, %d parameters in %s, mask token %d, answer end %d", path,
             fam.name, kind, sum(p.numel() for p in model.parameters()), str(model_dtype(model)).removeprefix("torch."),
             backbone.ids.mask, backbone.ids.end)
    return backbone


def runtime_record(runtime: Runtime, model: nn.Module) -> str:
    """device+dtype as the weights really are (transformers may load a checkpoint's own dtype); the GPU's
    index where the job took one of several (modeljob.claim_gpu): cuda:1+bfloat16."""
    return f"{runtime.device}+{str(model_dtype(model)).removeprefix('torch.')}"
