"""Activation (gradient) checkpointing, ``train.gradient_checkpointing``: which switch a base's code has,
known from its files before any job runs, and turning it on in the training job.

Two switches exist among the families the project supports:

- ``transformers``: the model class sets ``supports_gradient_checkpointing`` (BERT, RoBERTa,
  DistilBERT, ELECTRA, Dream's code), so ``gradient_checkpointing_enable`` recomputes every layer;
- ``llada``: LLaDA's code (``modeling_llada.py`` of the LLaDA-8B checkpoints and Fast-dLLM) leaves that
  flag unset, but its inner model has ``set_activation_checkpointing(strategy)``, with the strategies
  ``STRATEGIES`` (every block, every second, third or fourth block, or pieces inside each block).

``true`` means every layer on either switch; a strategy name needs the llada switch. Both switches use
torch's non-reentrant checkpoint, which gives gradients to the LoRA weights although the frozen inputs
need none.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from typing import Any

STRATEGIES = ("whole_layer", "one_in_two", "one_in_three", "one_in_four", "fine_grained")
EVERY_LAYER = "whole_layer"  # what `true` asks for
FIX = "set train.gradient_checkpointing: false (and lower train.batch_size or train.seq_len to fit)"


def _remote_module(path: Path, raw: dict[str, Any]) -> tuple[Path, str] | None:
    """The file and class that ``AutoModel`` loads from a checkpoint's own code (config.json's auto_map)."""
    reference = (raw.get("auto_map") or {}).get("AutoModel")
    if not reference:
        return None
    module, _, name = reference.split("--")[-1].rpartition(".")
    return path / f"{module.replace('.', '/')}.py", name


def _class_sets_flag(classes: dict[str, ast.ClassDef], name: str, seen: frozenset = frozenset()) -> bool:
    """Whether class ``name`` of the file (or a base class defined in the same file) sets
    ``supports_gradient_checkpointing = True``; a base from elsewhere (PreTrainedModel) leaves it False."""
    node = classes.get(name)
    if node is None or name in seen:
        return False
    for statement in node.body:
        if (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)
                and any(isinstance(t, ast.Name) and t.id == "supports_gradient_checkpointing"
                        for t in statement.targets)):
            return statement.value.value is True
    return any(isinstance(b, ast.Name) and _class_sets_flag(classes, b.id, seen | {name}) for b in node.bases)


def _switch_in_source(source: str, name: str) -> str | None:
    classes = {n.name: n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)}
    if _class_sets_flag(classes, name):
        return "transformers"
    methods = {f.name for c in classes.values() for f in c.body if isinstance(f, ast.FunctionDef)}
    return "llada" if "set_activation_checkpointing" in methods else None


def _native_class(model_type: str | None):
    """The transformers masked-LM class of a model type (its module is imported, no weights read)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    name = MODEL_FOR_MASKED_LM_MAPPING_NAMES.get(model_type or "")
    return getattr(importlib.import_module("transformers"), name) if name else None


def declared_switch(path: Path, raw: dict[str, Any], trust_remote_code: bool) -> str | None:
    """``transformers``, ``llada`` or None, from the checkpoint's files alone: its own modelling code read as
    text (never imported) with trust_remote_code, else the transformers class of its model_type."""
    if trust_remote_code:
        found = _remote_module(Path(path), raw)
        if found is None or not found[0].is_file():
            return None
        return _switch_in_source(found[0].read_text(encoding="utf-8"), found[1])
    cls = _native_class(raw.get("model_type"))
    return "transformers" if cls is not None and getattr(cls, "supports_gradient_checkpointing", False) else None


def loaded_switch(model) -> str | None:
    """The same for a loaded model: the flag on its class, or a submodule's ``set_activation_checkpointing``."""
    if getattr(model, "supports_gradient_checkpointing", False):
        return "transformers"
    inner = getattr(model, "model", None)
    return "llada" if callable(getattr(inner, "set_activation_checkpointing", None)) else None


def problem(setting: bool | str, switch: str | None, base: str, family: str) -> str | None:
    """Why ``setting`` cannot be honoured on a base whose code has ``switch``, with the fix; None if it can."""
    if not setting:
        return None
    if switch is None:
        return (f"{base}: the {family} model's code has no checkpointing switch (neither transformers' "
                "supports_gradient_checkpointing nor a set_activation_checkpointing method); " + FIX)
    if switch == "transformers" and setting not in (True, EVERY_LAYER):
        return (f"{base}: {setting!r} is a strategy of LLaDA's set_activation_checkpointing, but the {family} "
                "model's code has transformers' switch, which checkpoints every layer; set "
                "train.gradient_checkpointing: true")
    return None


def enable(model, setting: bool | str) -> str:
    """Turn checkpointing on for ``setting`` (true or a strategy) and say how, for the job's log."""
    switch = loaded_switch(model)
    if switch == "transformers":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return "transformers gradient_checkpointing_enable (every layer, non-reentrant)"
    name = EVERY_LAYER if setting is True else setting
    # The enum of the model's own module where it has one (its members also compare equal to their names).
    enum = getattr(sys.modules.get(type(model.model).__module__), "ActivationCheckpointingStrategy", None)
    model.model.set_activation_checkpointing(enum(name) if enum is not None else name)
    return f"set_activation_checkpointing({name})"
