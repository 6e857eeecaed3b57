"""The lm-eval model ``anchormask``: a base the project loads, optionally one adapter, the project's sampler.

    lm-eval --model anchormask --model_args base=DIR,adapter=DIR,config=FILE,mc_num=128,seed=1234 ...
    (or ``anchormask lm-eval ...``, which also finds the project's own tasks)

* the base: ``base.*`` of config.yaml, with a ``config=FILE`` layer's ``base`` block over it, and
  ``base=DIR`` over both; loaded by ``modeljob`` (every family, ``trust_remote_code`` where the
  config says so); ``adapter=DIR`` (a folder of results/adapters/) is checked against the hashes
  its provenance recorded and merged, as in generation.
* ``generate_until``: the sampler (``anchormask.generation.sampler``) with every ``generation.*`` setting of
  the same config; the task's ``max_gen_toks`` is the answer slot's length (rounded up to whole
  blocks under ``block_len``), its ``until`` strings cut the decoded answer, as does the layout's
  end-of-answer token. The task's sampling options (``do_sample``, ``temperature``) are not used:
  the config's decoding is the one under test.
* ``loglikelihood``: LLaDA's Monte-Carlo estimate (``harness.likelihood``) with ``mc_num`` samples,
  ``batch_size`` of them per forward, guidance ``cfg`` (default: generation.cfg_scale); the
  greedy flag is whether the sampler, one token a step at temperature 0 (LLaDA's
  ``suffix_greedy_prediction``), writes exactly the continuation (``check_greedy=false``: never).

Prompts are the layout's (``layout.prompt_ids``: the pair layout's ``[CLS] context [SEP]``, the
plain layout's ``[BOS] context <newline>``, the chat layout's user turn), as the adapters were
trained and generate; a context longer than the base allows is cut from the left.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from anchormask.generation import arm_answers, sampler
from anchormask.harness import likelihood
from anchormask.model import layout, modeljob
from anchormask.settings import config
from anchormask.settings import layers as config_layers

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[3]
DEFAULTS = {"mc_num": 128, "batch_size": 32, "seed": 1234, "threads": 1}


@dataclass(frozen=True)
class Setup:
    """Everything the model needs: the base, the adapter, the sampler's settings and the estimate's."""

    base: modeljob.Base
    settings: sampler.SamplerSettings
    adapter: str | None = None
    mc_num: int = DEFAULTS["mc_num"]
    batch_size: int = DEFAULTS["batch_size"]
    seed: int = DEFAULTS["seed"]
    cfg: float = 0.0
    threads: int = DEFAULTS["threads"]
    check_greedy: bool = True


def study_config(layer: str | None = None) -> dict[str, Any]:
    """config.yaml (the working directory's, else the repository's) with a layer merged over it, validated."""
    root = Path("config.yaml") if Path("config.yaml").is_file() else REPO / "config.yaml"
    merged = config.yaml_file(root)
    if layer:
        merged = config_layers.merge(merged, config.yaml_file(layer) or {})
    config.validate(merged, f"{root} + {layer}" if layer else str(root))
    return merged


def _local_path(path: str) -> str:
    """A relative base path as written, where it exists, else relative to the repository (config.yaml's)."""
    return path if Path(path).is_absolute() or Path(path).exists() else str(REPO / path)


def setup_from_args(base: str | None = None, adapter: str | None = None, config: str | None = None,
                    device: str | None = None, cfg: float | None = None, trust_remote_code: bool | None = None,
                    **numbers: Any) -> Setup:
    """The model's arguments (lm-eval's ``--model_args`` and its --batch_size / --device) as a Setup."""
    cfg_all = study_config(config)
    block = dict(cfg_all["base"])
    if base:
        block.update(path=base, sha256=block["sha256"] if base == block["path"] else "unchecked")
    block["path"] = _local_path(str(block["path"]))
    if device:
        block["device"] = "cuda" if str(device).startswith("cuda") else str(device)
    if trust_remote_code is not None:
        block["trust_remote_code"] = _flag(trust_remote_code)
    settings = sampler.SamplerSettings.from_config(cfg_all["generation"])
    check_greedy = _flag(numbers.pop("check_greedy", True))
    unknown = set(numbers) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"anchormask model: unknown model argument(s) {', '.join(sorted(unknown))}; known: base, "
                         f"adapter, config, device, cfg, trust_remote_code, check_greedy, {', '.join(DEFAULTS)}")
    values = {k: int(v) for k, v in numbers.items() if v not in (None, "auto")}
    return Setup(base=modeljob.Base.from_config(block), settings=settings, adapter=adapter or None,
                 cfg=float(settings.cfg_scale if cfg is None else cfg), check_greedy=check_greedy,
                 **{**{k: v for k, v in DEFAULTS.items()}, **values})


def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")


@register_model("anchormask")
class AnchormaskLM(LM):
    """lm-eval's model interface over the project's loader and sampler (module docstring)."""

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> AnchormaskLM:
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict | None = None) -> AnchormaskLM:
        """--model_args over lm-eval's own --batch_size and --device (which always come, with defaults)."""
        given = {k: v for k, v in (additional_config or {}).items() if v is not None and k in ("batch_size", "device")}
        return cls(**{**given, **arg_dict})

    def __init__(self, setup: Setup | None = None, **args: Any) -> None:
        super().__init__()
        self.setup = setup or setup_from_args(**args)
        self.runtime = modeljob.start(self.setup.base, self.setup.threads)
        self.backbone = modeljob.load(self.setup.base, self.runtime, self.setup.adapter)
        self.tokenizer = self.backbone.tokenizer
        self._device = self.runtime.device
        log.info("anchormask model: %s%s on %s", self.setup.base.path,
                 f" + {self.setup.adapter}" if self.setup.adapter else "", self.runtime.name)

    @property
    def limit(self) -> int | None:
        found = layout.max_positions(getattr(self.backbone.model, "config", None))
        return None if found is None else found[1]

    def prompt(self, context: str, room_for: int) -> list[int]:
        """The layout's prompt of the context, cut from the left so that ``room_for`` more positions fit."""
        ids = layout.prompt_ids(self.tokenizer, context, self.backbone.template)
        if self.limit is None:
            return ids
        return likelihood.fit_prompt(ids, self.limit - room_for, self.backbone.ids.start)

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(prompt, continuation ids); trailing spaces of the context move to the continuation (as LLaDA's)."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        target = layout.anchor_ids(self.tokenizer, continuation)
        if self.limit is not None:
            target = target[: self.limit - 2]
        return self.prompt(context, len(target)), target

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        pairs = [self.encode_pair(*r.args) for r in requests]
        scores = [likelihood.monte_carlo(self.backbone, self.runtime, prompt, target, mc_num=self.setup.mc_num,
                                         batch_size=self.setup.batch_size, cfg=self.setup.cfg,
                                         generator=likelihood.request_generator(self.setup.seed, *r.args))
                  for r, (prompt, target) in zip(requests, pairs)]
        greedy = self.greedy_matches(pairs) if self.setup.check_greedy else [False] * len(pairs)
        return list(zip(scores, greedy))

    def greedy_matches(self, pairs: list[tuple[list[int], list[int]]]) -> list[bool]:
        """Whether greedy decoding, one token a step, writes exactly each continuation (by its length)."""
        out = [False] * len(pairs)
        by_length: dict[int, list[int]] = {}
        for i, (_, target) in enumerate(pairs):
            by_length.setdefault(len(target), []).append(i)
        for length, members in by_length.items():
            if not length:
                continue
            settings = sampler.SamplerSettings(answer_len=length, steps=length, cfg_scale=self.setup.cfg,
                                               batch_size=self.setup.batch_size, seed=self.setup.seed)
            requests = [sampler.Request(f"greedy-{i}", pairs[i][0], []) for i in members]
            for i, result in zip(members, sampler.generate(self.backbone, self.runtime, requests, settings)):
                out[i] = result.slot_ids == pairs[i][1]
        return out

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        answers = [""] * len(requests)  # every request is in one group below
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(self.slot_length(r.args[1]), []).append(i)
        for length, members in groups.items():
            settings = replace(self.setup.settings, answer_len=length, extra_masks=self.setup.settings.extra_masks,
                               batch_size=self.setup.batch_size, seed=self.setup.seed)
            room = length + settings.extra_masks
            batch = [sampler.Request(_request_id(requests[i].args[0]), self.prompt(requests[i].args[0], room), [])
                     for i in members]
            for i, result in zip(members, sampler.generate(self.backbone, self.runtime, batch, settings)):
                answers[i] = self.answer_text(result, requests[i].args[1])
        return answers

    def slot_length(self, gen_kwargs: dict[str, Any]) -> int:
        """The answer slot for a request: its max_gen_toks (else generation.answer_len), whole blocks."""
        wanted = int(gen_kwargs.get("max_gen_toks") or self.setup.settings.answer_len)
        block = self.setup.settings.block_len
        return -(-wanted // block) * block if block else wanted

    def answer_text(self, result: sampler.Result, gen_kwargs: dict[str, Any]) -> str:
        """The decoded answer up to the end-of-answer token and the first of the task's stop strings."""
        wanted = int(gen_kwargs.get("max_gen_toks") or self.setup.settings.answer_len)
        tail = arm_answers.post_anchor_ids(result, self.backbone.ids.end)[:wanted]
        text = self.tokenizer.decode(tail, skip_special_tokens=True)
        return cut_at_stops(text, gen_kwargs.get("until"))

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        raise NotImplementedError("anchormask: loglikelihood_rolling (perplexity tasks) has no estimate for a "
                                  "masked-diffusion LM here; use loglikelihood or generate_until tasks")


def cut_at_stops(text: str, until: str | list[str] | None) -> str:
    """The text before the first occurrence of any stop string."""
    stops = [until] if isinstance(until, str) else list(until or [])
    cut = min((text.find(s) for s in stops if s and s in text), default=len(text))
    return text[:cut]


def _request_id(context: str) -> str:
    """The sampler's per-query generator key: the context's digest (the same context, the same draws)."""
    return hashlib.sha256(context.encode()).hexdigest()[:16]
