"""Masking strategies: the study's independent variable, as one contract for the built-in ones and a user's.

A strategy is a function that a config names: a built-in by its name, a user's in ``strategies:``
by ``path/to/file.py:function`` (relative to the working directory) or ``package.module:function``,
with its own ``params`` and the position ``classes`` it may mask (docs/strategies.md)::

    def my_strategy(batch: MaskingBatch, **params) -> torch.Tensor: ...

Each training step it receives the batch (``MaskingBatch``: token ids, each position's class, the
lengths, the per-sequence mask ratio drawn for this step, the step and the run's total steps, and the
job's generator, the only source of randomness it may use) and returns the boolean mask [B, L]. The
trainer checks every mask: the right shape and dtype, and no position outside the strategy's classes
(special tokens and padding are never among them); a strategy that masks nothing for
``EMPTY_STEPS`` steps in a row stops the job. Under the ``llada`` loss a sequence's length is its
number of positions of the strategy's classes.

The study's built-ins mask each position of their classes independently with the sequence's ratio:
``anchor`` the answer, ``random`` question and answer alike, ``reverse`` the question. The literature's,
on the same contract (each function's docstring cites its source): ``span`` (contiguous spans of the
answer), ``blockwise`` (the answer block by block, as block decoding sees it) and ``curriculum``
(``random`` first, ``anchor`` after). A config reaches their parameters through ``strategies:``, e.g.
``{function: "anchormask.training.strategies:span", params: {mean_length: 8}, classes: [answer]}``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from anchormask.fileio import InputError
from anchormask.model.layout import ANSWER, PAD, QUESTION, SPECIAL
from anchormask.training.masking import draw_mask

CLASS_NAMES = {"question": QUESTION, "answer": ANSWER}
EMPTY_STEPS = 20  # steps in a row without a masked position before a job stops: the strategy is broken


@dataclass(frozen=True)
class MaskingBatch:
    """What a strategy sees of one training step ([B, L] tensors on the CPU)."""

    ids: torch.Tensor
    classes: torch.Tensor  # model.layout: SPECIAL, QUESTION, ANSWER, PAD
    lengths: torch.Tensor  # [B] positions before the padding
    ratio: torch.Tensor  # [B] this step's mask ratio per sequence, drawn from train.mask_ratio
    step: int  # 0-based
    total_steps: int
    generator: torch.Generator


def positions(classes: torch.Tensor, allowed: tuple[int, ...]) -> torch.Tensor:
    """Boolean [B, L]: the positions of the ``allowed`` classes."""
    return torch.isin(classes, torch.tensor(allowed, dtype=classes.dtype))


def bernoulli(batch: MaskingBatch, classes: tuple[int, ...]) -> torch.Tensor:
    """Each position of ``classes`` masked independently with its sequence's ratio (the built-ins' rule)."""
    return draw_mask(positions(batch.classes, classes), batch.ratio, batch.generator)


def span(batch: MaskingBatch, mean_length: float = 4.0) -> torch.Tensor:
    """Contiguous spans of the answer until about the sequence's ratio of its answer is masked: starts
    uniform among the answer positions, lengths geometric with mean ``mean_length`` (SpanBERT's span
    masking, Joshi et al. 2020, TACL 8:64-77, restricted to the answer)."""
    mask = torch.zeros_like(batch.classes, dtype=torch.bool)
    log_keep = torch.log(torch.tensor(1.0 - 1.0 / max(mean_length, 1.0 + 1e-6)))
    for b in range(batch.classes.shape[0]):
        answer = (batch.classes[b] == ANSWER).nonzero().flatten()
        budget = round(float(batch.ratio[b]) * len(answer))
        while int(mask[b, answer].sum()) < budget:
            start = int(torch.randint(len(answer), (1,), generator=batch.generator))
            u = torch.rand(1, generator=batch.generator)
            length = 1 + int(torch.log1p(-u) / log_keep)
            mask[b, answer[start:start + length]] = True
    return mask


def blockwise(batch: MaskingBatch, block_len: int = 8) -> torch.Tensor:
    """The answer as block decoding sees it: split into blocks of ``block_len``, one active block drawn per
    sequence; earlier blocks visible, the active one masked at the ratio, later blocks fully masked
    (blockwise SFT, arXiv 2508.19529)."""
    mask = torch.zeros_like(batch.classes, dtype=torch.bool)
    for b in range(batch.classes.shape[0]):
        answer = (batch.classes[b] == ANSWER).nonzero().flatten()
        if not len(answer):
            continue
        blocks = -(-len(answer) // block_len)
        active = int(torch.randint(blocks, (1,), generator=batch.generator))
        inside = answer[active * block_len:(active + 1) * block_len]
        mask[b, inside] = torch.rand(len(inside), generator=batch.generator) < batch.ratio[b]
        mask[b, answer[(active + 1) * block_len:]] = True
    return mask


def curriculum(batch: MaskingBatch, switch: float = 0.5) -> torch.Tensor:
    """``random`` for the first ``switch`` of the run's steps, ``anchor`` after: everything first, the
    response only afterwards (the two-stage curriculum of arXiv 2604.03677)."""
    early = batch.step < switch * batch.total_steps
    return bernoulli(batch, (QUESTION, ANSWER) if early else (ANSWER,))


BUILTIN_CLASSES: dict[str, tuple[int, ...]] = {
    "anchor": (ANSWER,),
    "random": (QUESTION, ANSWER),
    "reverse": (QUESTION,),
    "span": (ANSWER,),
    "blockwise": (ANSWER,),
    "curriculum": (QUESTION, ANSWER),
}
BUILTIN_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {"span": span, "blockwise": blockwise,
                                                            "curriculum": curriculum}


@dataclass(frozen=True)
class Strategy:
    """A resolved strategy: its name, function, params, the classes it may mask and where it came from."""

    name: str
    function: Callable[..., torch.Tensor]
    classes: tuple[int, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    source: str = "built-in"

    @property
    def where(self) -> str:
        return f"strategy {self.name!r} ({self.source})"

    def eligible(self, classes: torch.Tensor) -> torch.Tensor:
        return positions(classes, self.classes)

    def mask(self, batch: MaskingBatch) -> torch.Tensor:
        """The function's mask for ``batch``, checked: an InputError names the strategy and what was wrong."""
        mask = self.function(batch, **self.params)
        problem = mask_problem(mask, batch.classes, self.classes)
        if problem:
            raise InputError(f"{self.where}: at step {batch.step + 1}: {problem}")
        return mask


def mask_problem(mask: Any, classes: torch.Tensor, allowed: tuple[int, ...]) -> str | None:
    """What is wrong with a strategy's returned mask, or None."""
    if not isinstance(mask, torch.Tensor):
        return f"returned {type(mask).__name__}, not a torch.Tensor; return the boolean mask [B, L]"
    if mask.dtype != torch.bool or tuple(mask.shape) != tuple(classes.shape):
        return (f"returned a {mask.dtype} tensor of shape {tuple(mask.shape)}; return a torch.bool mask of the "
                f"batch's shape {tuple(classes.shape)}")
    outside = mask & ~positions(classes, allowed)
    if outside.any():
        kinds = sorted({_CLASS_LABELS[int(c)] for c in classes[outside].unique()})
        return (f"masks {int(outside.sum())} position(s) of class {', '.join(kinds)}, outside its classes "
                f"({', '.join(_CLASS_LABELS[c] for c in allowed)}); mask only those positions")
    return None


_CLASS_LABELS = {SPECIAL: "special", QUESTION: "question", ANSWER: "answer", PAD: "padding"}


def _load_module(reference: str, where: str):
    """The module of ``file.py:function`` (a file, relative to the working directory) or ``module:function``."""
    target = reference.rpartition(":")[0]
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise InputError(f"{where}: {path} does not exist (relative to {Path.cwd()}); give the path of the "
                             "strategy's file, relative to the directory Snakemake runs in")
        name = f"anchormask_strategy_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None  # a .py file always has a spec and a source loader
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent.resolve()))  # its own folder's modules import as in a script
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.parent.resolve()))
        return module
    try:
        return importlib.import_module(target)
    except ImportError as err:
        raise InputError(f"{where}: cannot import {target!r} ({err}); give file.py:function or "
                         "package.module:function") from None


def load_function(reference: str, where: str) -> Callable[..., torch.Tensor]:
    """The function a ``function:`` value names, checked to take a batch and keyword params."""
    if reference.count(":") != 1 or not all(reference.split(":")):
        raise InputError(f"{where}: {reference!r} is not file.py:function or package.module:function")
    module, name = _load_module(reference, where), reference.rpartition(":")[2]
    function = getattr(module, name, None)
    if not callable(function):
        known = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        raise InputError(f"{where}: {reference.rpartition(':')[0]} has no function {name!r}; its functions: "
                         f"{', '.join(known) or 'none'}")
    return function


def _signature_problem(function: Callable, params: Mapping[str, Any]) -> str | None:
    try:
        inspect.signature(function).bind(object(), **params)
    except TypeError as err:
        return (f"cannot be called as {function.__name__}(batch, **params) with params {sorted(params)}: {err}; "
                "take the batch first and each param by name")
    return None


def resolve(name: str, spec: Mapping[str, Any] | None = None, where: str | None = None) -> Strategy:
    """The strategy ``name``: a built-in, or the config's ``strategies.<name>`` entry ``spec``."""
    if spec is None:
        if name not in BUILTIN_CLASSES:
            raise InputError(f"unknown strategy {name!r}; built-in: {', '.join(BUILTIN_CLASSES)}, or define it "
                             "under strategies: in the config")
        classes = BUILTIN_CLASSES[name]
        function = BUILTIN_FUNCTIONS.get(name) or (lambda batch: bernoulli(batch, classes))
        return Strategy(name, function, classes)
    where = where or f"strategies.{name}.function"
    function = load_function(spec["function"], where)
    params = dict(spec.get("params") or {})
    problem = _signature_problem(function, params)
    if problem:
        raise InputError(f"{where}: {spec['function']} {problem}")
    classes = tuple(CLASS_NAMES[c] for c in spec.get("classes") or ("question", "answer"))
    return Strategy(name, function, classes, params, spec["function"])


def trial_batch(generator_seed: int = 0) -> MaskingBatch:
    """A small batch of every class (special, question, answer, padding) for the check at DAG build."""
    row = [SPECIAL, QUESTION, QUESTION, QUESTION, SPECIAL, *[ANSWER] * 8, SPECIAL, PAD, PAD]
    short = [SPECIAL, QUESTION, SPECIAL, ANSWER, ANSWER, ANSWER, SPECIAL, *[PAD] * 9]
    classes = torch.tensor([row, short])
    return MaskingBatch(ids=torch.arange(classes.numel()).view(classes.shape) + 5, classes=classes,
                        lengths=(classes != PAD).sum(1), ratio=torch.tensor([0.7, 0.7]), step=0, total_steps=10,
                        generator=torch.Generator().manual_seed(generator_seed))


def check(strategy: Strategy) -> None:
    """One call on ``trial_batch``: an InputError names the strategy, its function and what is wrong."""
    try:
        strategy.mask(trial_batch())
    except InputError:
        raise
    except Exception as err:  # the user's code: whatever it raises is the message
        raise InputError(f"{strategy.where}: raised {type(err).__name__}: {err} on a trial batch of shape "
                         f"{tuple(trial_batch().classes.shape)}") from err
