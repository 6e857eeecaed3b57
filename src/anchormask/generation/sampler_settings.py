"""The sampler's settings (the config's ``generation`` section) and the decoding options that make no
sense together; both the sampler and its decoding steps read them, and the config check asks
``decoding_problems`` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from anchormask import schemas
from anchormask.fileio import InputError


def decoding_problems(generation: dict[str, Any]) -> list[tuple[str, str]]:
    """The decoding options that make no sense together: (generation key, what is wrong and the fix).

    The one place these rules live: the config check and ``SamplerSettings`` both ask it.
    """
    get = lambda key: generation.get(key, schemas.default(("generation", key)))  # noqa: E731
    remasking, threshold = get("remasking"), get("decoding") == "threshold"
    problems = []
    if remasking == "origin" and get("schedule") != "dream":
        problems.append(("remasking", "origin commits each masked position with Dream's chance 1 - s/t, which only "
                         "schedule: dream defines; set generation.schedule: dream"))
    if threshold and remasking in ("origin", "entropy", "random"):
        problems.append(("decoding", f"threshold compares a probability with generation.threshold, but remasking: "
                         f"{remasking} gives no probability; set decoding: fixed, or remasking: low_confidence "
                         "or topk_margin"))
    if threshold and get("schedule") == "dream":
        problems.append(("schedule", "dream sets how many positions a step commits, which decoding: threshold "
                         "decides itself; set schedule: even (threshold ignores it) or decoding: fixed"))
    if get("alg_temp") > 0 and (threshold or remasking in ("origin", "random")):
        problems.append(("alg_temp", f"> 0 draws a step's positions by their confidence, which decoding: "
                         f"{get('decoding')} with remasking: {remasking} does not use; set alg_temp: 0"))
    if get("confidence_eos_eot_inf") and remasking != "low_confidence":
        problems.append(("confidence_eos_eot_inf", f"LLaDA's rule zeroes the end-of-turn token's probability in "
                         f"low_confidence's confidence; remasking: {remasking} has none; set it false or "
                         "remasking: low_confidence"))
    if get("cfg_anchor") == "masked" and not get("cfg_scale") > 0:
        problems.append(("cfg_anchor", "masked masks the locked anchor in the unguided forward of classifier-free "
                         "guidance, which cfg_scale: 0 does not run; set generation.cfg_scale > 0, or "
                         "cfg_anchor: visible"))
    return problems + _block_problems(get("answer_len"), get("block_len"), get("steps"))


def _block_problems(answer_len: int, block_len: int, steps: int) -> list[tuple[str, str]]:
    """LLaDA's generate() asserts both: blocks tile the slot and share the steps equally."""
    if not block_len:
        return []
    if answer_len % block_len:
        fits = ", ".join(str(d) for d in range(1, answer_len + 1) if answer_len % d == 0)
        return [("block_len", f"{block_len} does not divide generation.answer_len = {answer_len}; semi-autoregressive "
                 f"blocks must tile the answer slot: use 0 (one block) or one of {fits}")]
    blocks = answer_len // block_len
    if steps % blocks:
        near = " or ".join(str(s) for s in (steps - steps % blocks, steps - steps % blocks + blocks) if s)
        return [("steps", f"{steps} is not a multiple of the {blocks} blocks (answer_len / block_len); each block gets "
                 f"steps / blocks denoising steps: use a multiple of {blocks}, e.g. {near}")]
    return []



def _default(key: str) -> Any:
    return schemas.default(("generation", key))


@dataclass(frozen=True)
class SamplerSettings:
    """The sampler's settings: the config's ``generation`` section less ``threads``. Each field's default
    is the config schema's default for that key (src/anchormask/schemas/config.schema.yaml)."""

    answer_len: int = _default("answer_len")
    steps: int = _default("steps")
    temperature: float = _default("temperature")
    remasking: str = _default("remasking")
    decoding: str = _default("decoding")
    threshold: float = _default("threshold")
    schedule: str = _default("schedule")
    eps: float = _default("eps")
    alg_temp: float = _default("alg_temp")
    top_p: float = _default("top_p")
    top_k: int = _default("top_k")
    cfg_scale: float = _default("cfg_scale")
    cfg_anchor: str = _default("cfg_anchor")
    logits_eos_inf: bool = _default("logits_eos_inf")
    confidence_eos_eot_inf: bool = _default("confidence_eos_eot_inf")
    long_anchor: str = _default("long_anchor")
    extra_masks: int = _default("extra_masks")
    block_len: int = _default("block_len")
    batch_size: int = _default("batch_size")
    seed: int = _default("seed")

    def __post_init__(self) -> None:
        problems = decoding_problems(self.__dict__)
        if problems:
            raise InputError("; ".join(f"generation.{key}: {text}" for key, text in problems))

    @property
    def blocks(self) -> int:
        """Semi-autoregressive blocks of the answer slot (``block_len: 0``: one, the whole slot)."""
        return self.answer_len // self.block_len if self.block_len else 1

    @classmethod
    def from_config(cls, spec: dict[str, Any]) -> "SamplerSettings":
        return cls(**{k: spec[k] for k in cls.__dataclass_fields__ if k in spec})

    def record(self) -> dict[str, Any]:
        """The settings a JSONL record carries (everything that shapes the tokens but the seed);
        ``cfg_anchor`` only with guidance on (cfg_scale > 0), the one case it shapes them, so that a
        record without guidance reads as it did before the key."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__
                if k not in ("long_anchor", "batch_size", "seed") and (k != "cfg_anchor" or self.cfg_scale > 0)}
