"""What every job that runs the base model sets up first: the base as configured, torch's threads and
deterministic mode, the runtime ``base.device`` asks for, and the model with one adapter merged.

Training, generation, the attention probe and the base evaluation all start here, so a job that
loads the model cannot differ from the others in how it does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from anchormask import backbone as bb
from anchormask import config


@dataclass(frozen=True)
class Base:
    """The config's ``base`` block (src/anchormask/schemas/config.schema.yaml describes each field)."""

    path: str
    sha256: str
    trust_remote_code: bool
    device: str
    family: str | None = None
    projections: Mapping[str, str] | None = None
    layout: str | None = None

    @classmethod
    def from_config(cls, block: Mapping[str, Any]) -> Base:
        """From the config's ``base`` block (or the record a rule passes in its params); a key the block
        does not set takes the schema's default."""
        section = {"base": dict(block)}
        return cls(path=str(block["path"]), sha256=block["sha256"],
                   trust_remote_code=config.setting(section, ("base", "trust_remote_code")),
                   device=config.setting(section, ("base", "device")), family=block.get("family"),
                   projections=block.get("projections"), layout=block.get("layout"))


def start(base: Base, threads: int) -> bb.Runtime:
    """Torch's threads and deterministic kernels for this job; the runtime ``base.device`` asks for."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    return bb.pick_runtime(base.device)


def load(base: Base, runtime: bb.Runtime, adapter: str | None = None, *,
         attn_implementation: str | None = None) -> bb.Backbone:
    """The base in eval mode, with one adapter merged into its weights (none: the base itself).

    The adapter's files are checked against the hashes it was saved with before it is used.
    """
    from anchormask.adapters import verify as verify_adapter

    backbone = bb.load_backbone(base.path, trust_remote_code=base.trust_remote_code, runtime=runtime,
                                attn_implementation=attn_implementation, family=base.family,
                                projections=base.projections, layout=base.layout)
    if adapter is not None:
        from peft import PeftModel

        verify_adapter(adapter)  # a flipped byte or a truncated file is named here, not used
        backbone.model = PeftModel.from_pretrained(backbone.model, adapter).merge_and_unload()
    backbone.model.eval()
    return backbone
