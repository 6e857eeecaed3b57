"""Batched locked-anchor sampling for masked-diffusion LMs (LLaDA's and Dream's reverse processes).

Each query's sequence is ``prompt | answer slot (G) | k extra masks``. The first |tok(s)|
slot positions hold the locked anchor; every other slot position starts as [MASK]. At each
denoising step the model predicts every still-masked slot position and some predictions are
committed; the rest stay masked. Locked positions are never in the masked set, so the anchor
is preserved by construction, identically for every arm. The k extra masks (the mask-count
probe) stay masked throughout: they change the context, not the length of the answer.

One step, in the order ``_generate_batch`` runs it (README "Our reading" has the table of
options and the family whose own sampler each comes from):

* how many to commit: ``schedule: even`` (LLaDA) splits the masked count evenly over the
  steps, the remainder to the first; ``schedule: dream`` moves from time t to s on
  linspace(1, eps, steps + 1) and commits int(masked * (1 - s/t)), all at the last step.
  ``decoding: threshold`` (Fast-dLLM) commits every prediction whose confidence reaches the
  threshold, at least the most confident one, until no masked position is left.
* the logits: ``cfg_scale`` > 0 adds LLaDA's unsupervised classifier-free guidance (a second
  forward with the prompt masked); ids the sampler never proposes get -inf: the special tokens
  other than the answer's end, every id the tokenizer cannot decode (an embedding padded
  beyond the tokenizer, as Dream-7B's), and EOS under ``logits_eos_inf``.
* the token: argmax at temperature 0, else a Gumbel-max draw from logits / temperature, after
  Dream's ``top_p`` and ``top_k`` filters.
* which to commit (``remasking``): ``low_confidence`` the most probable (LLaDA's; Dream's
  maskgit_plus at temperature 0), ``topk_margin`` the largest top-1 minus top-2 margin,
  ``entropy`` the lowest entropy, ``random`` a random choice, ``origin`` (Dream) each masked
  position independently with probability 1 - s/t. ``alg_temp`` > 0 draws the committed
  positions from softmax(confidence / alg_temp) instead of taking the top ones.
  ``confidence_eos_eot_inf`` (LLaDA) gives EOS and the end of turn confidence 0: committed last.

``block_len`` > 0 decodes the slot in LLaDA's semi-autoregressive blocks, left to right, each
with an equal share of the steps; 0 is one block, the whole slot.

Randomness (Gumbel noise, ``random`` and ``origin`` remasking, ``alg_temp``) comes from one
generator per query seeded from (seed, query id), on the runtime's device, so a query's output
does not depend on which other queries share its batch. A family whose forward ignores the
padding mask (LLaDA, Dream) gets batches of equal-length prompts only, so no row is ever padded.
Logits are computed only at masked slot positions and stay on the device (only the chosen
token and its confidence come back).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from anchormask import config as config_rules
from anchormask import layout, schemas
from anchormask.backbone import Backbone, Runtime
from anchormask.io import InputError

ENTROPY_EPS = 1e-10  # Dream's generation_utils.py: log(p + 1e-10) in the negative entropy


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
    logits_eos_inf: bool = _default("logits_eos_inf")
    confidence_eos_eot_inf: bool = _default("confidence_eos_eot_inf")
    long_anchor: str = _default("long_anchor")
    extra_masks: int = _default("extra_masks")
    block_len: int = _default("block_len")
    batch_size: int = _default("batch_size")
    seed: int = _default("seed")

    def __post_init__(self) -> None:
        problems = config_rules.decoding_problems(self.__dict__)
        if problems:
            raise InputError("; ".join(f"generation.{key}: {text}" for key, text in problems))
        # LLaDA's generate() asserts both: blocks tile the slot and share the steps equally.
        if self.block_len:
            if self.answer_len % self.block_len:
                raise InputError(f"generation.block_len = {self.block_len} does not divide generation.answer_len = "
                                 f"{self.answer_len}; semi-autoregressive blocks must tile the answer slot")
            if self.steps % self.blocks:
                raise InputError(f"generation.steps = {self.steps} is not a multiple of the {self.blocks} blocks "
                                 f"(answer_len / block_len); each block gets steps / blocks denoising steps")

    @property
    def blocks(self) -> int:
        """Semi-autoregressive blocks of the answer slot (``block_len: 0``: one, the whole slot)."""
        return self.answer_len // self.block_len if self.block_len else 1

    @classmethod
    def from_config(cls, spec: dict[str, Any]) -> "SamplerSettings":
        return cls(**{k: spec[k] for k in cls.__dataclass_fields__ if k in spec})

    def record(self) -> dict[str, Any]:
        """The settings a JSONL record carries (everything that shapes the tokens but the seed)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__
                if k not in ("long_anchor", "batch_size", "seed")}


@dataclass(frozen=True)
class Request:
    query_id: str
    prompt_ids: list[int]
    anchor_ids: list[int]


@dataclass(frozen=True)
class Result:
    query_id: str
    slot_ids: list[int]
    locked: int
    anchor_truncated: bool
    forward_passes: int


@dataclass(frozen=True)
class Observation:
    """The state before one forward pass of a batch, for probes that look where the sampler looks.

    Row b's prompt is positions [0, slot_start[b]); its locked anchor [slot_start[b],
    slot_start[b] + locked[b]); its generated answer positions the rest of the slot, up to
    slot_start[b] + answer_len; ``masked`` marks positions not yet decided.
    """

    step: int
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    slot_start: torch.Tensor
    locked: torch.Tensor
    answer_len: int
    masked: torch.Tensor
    query_ids: tuple[str, ...]


#: Called before each forward pass; a context manager it returns is entered around that step's
#: forward (the guided one as well when cfg_scale > 0), so a probe can read what the sampler's own
#: pass computes instead of running it again.
Observer = Callable[[Observation], contextlib.AbstractContextManager | None]


class AnchorTooLong(ValueError):
    pass


def generate(backbone: Backbone, runtime: Runtime, requests: list[Request], settings: SamplerSettings,
             observer: Observer | None = None, on_batch: Callable[[int], None] | None = None) -> list[Result]:
    """Decode every request's answer slot; returns one Result per request, in order.

    ``on_batch`` gets the number of requests done after each batch (progress reporting).
    """
    check_positions(backbone, requests, settings)
    vocabulary = Vocabulary.of(backbone, settings, runtime.device)
    done: dict[int, Result] = {}
    for batch in _batches(backbone, requests, settings.batch_size):
        done.update(zip(batch, _generate_batch(backbone, runtime, vocabulary, [requests[i] for i in batch],
                                               settings, observer)))
        if on_batch is not None:
            on_batch(len(done))
    return [done[i] for i in range(len(requests))]


def check_positions(backbone: Backbone, requests: list[Request], settings: SamplerSettings) -> None:
    """Fail before the first forward when a query's sequence is longer than the model allows (the
    model's own error is a tensor-size mismatch that names neither the query nor the setting)."""
    limit = config_rules.max_positions(getattr(backbone.model, "config", None))
    if limit is None or not requests:
        return
    key, allowed = limit
    longest = max(requests, key=lambda r: len(r.prompt_ids))
    need = len(longest.prompt_ids) + settings.answer_len + settings.extra_masks
    if need > allowed:
        raise InputError(
            f"query {longest.query_id}: prompt ({len(longest.prompt_ids)} tokens) + generation.answer_len "
            f"({settings.answer_len}) + extra masks ({settings.extra_masks}) = {need} positions, more than the base "
            f"allows ({key} = {allowed} in {backbone.path}/config.json); lower generation.answer_len "
            f"(or generation.extra_masks / probes.maskcount_k) to at most {allowed - need + settings.answer_len}, "
            "or shorten the query")


@dataclass(frozen=True)
class Vocabulary:
    """What the sampler may propose: ``never`` is True for an id it never proposes ([V] on the device);
    ``unconfident`` the ids whose confidence ``confidence_eos_eot_inf`` zeroes (EOS and end of turn; none when off)."""

    never: torch.Tensor
    unconfident: tuple[int, ...]

    @classmethod
    def of(cls, backbone: Backbone, settings: SamplerSettings, device) -> "Vocabulary":
        never = torch.zeros(vocabulary_width(backbone), dtype=torch.bool)
        never[suppressed_token_ids(backbone)] = True
        if settings.logits_eos_inf:
            never[end_token_id(backbone, "eos")] = True
        unconfident = ()
        if settings.confidence_eos_eot_inf:
            key = "confidence_eos_eot_inf"
            unconfident = tuple(sorted({end_token_id(backbone, "eos", key), end_token_id(backbone, "eot")}))
        return cls(never.to(device), unconfident)


def vocabulary_width(backbone: Backbone) -> int:
    """Rows of the model's vocabulary head: the logits' width. Read from the head itself, because the
    config's names disagree: LLaDA's ``embedding_size`` is its padded vocabulary, ELECTRA's and ALBERT's
    is the width of a token embedding."""
    try:
        head = backbone.model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        head = None
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    return int(backbone.model.config.vocab_size)


def suppressed_token_ids(backbone: Backbone) -> list[int]:
    """Every id the sampler never proposes: the special tokens other than the answer's end
    (backbone.ids.never), and every row of the vocabulary head that the tokenizer has no token for
    (Qwen pads Dream-7B's 152,064 rows beyond a tokenizer of about 151,667 tokens; decoding such an
    id fails in the checkpoint's own tokenizer)."""
    width = vocabulary_width(backbone)
    decodable = torch.zeros(width, dtype=torch.bool)
    known = [i for i in backbone.tokenizer.get_vocab().values() if 0 <= i < width]
    decodable[known] = True
    decodable[list(backbone.ids.never)] = False
    return (~decodable).nonzero().flatten().tolist()


def end_token_id(backbone: Backbone, which: str, key: str = "logits_eos_inf") -> int:
    """The checkpoint's EOS (``eos``) or end-of-turn (``eot``) id; an error names the option (``key``) that needs it."""
    tok = backbone.tokenizer
    if which == "eos":
        found = tok.eos_token_id if tok.eos_token_id is not None else getattr(backbone.model.config,
                                                                              "eos_token_id", None)
        if isinstance(found, list):
            found = found[0] if found else None
        if found is None:
            raise InputError(f"generation.{key}: {backbone.path} defines no EOS token (tokenizer eos_token "
                             f"or config.json eos_token_id); set generation.{key}: false")
        return int(found)
    if backbone.layout == "chat":
        return backbone.ids.end
    try:
        return layout.chat_end_id(tok)
    except layout.LayoutError as err:
        raise InputError(f"generation.confidence_eos_eot_inf: {backbone.path} has no end-of-turn token ({err}); "
                         "set generation.confidence_eos_eot_inf: false, or use an Instruct checkpoint whose "
                         "chat_template ends turns with one") from None


def _batches(backbone: Backbone, requests: list[Request], size: int) -> list[list[int]]:
    """Request indices per batch, by prompt length (the shortest first), so that a batch pads little;
    for a family that ignores the padding mask, equal-length prompts per batch (so no row is padded
    and none depends on its batch mates)."""
    order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
    if backbone.family.honours_padding:
        return [order[i:i + size] for i in range(0, len(order), size)]
    by_length: dict[int, list[int]] = {}
    for i in order:
        by_length.setdefault(len(requests[i].prompt_ids), []).append(i)
    return [group[i:i + size] for _, group in sorted(by_length.items()) for i in range(0, len(group), size)]


@torch.inference_mode()
def _generate_batch(backbone: Backbone, runtime: Runtime, vocabulary: Vocabulary, requests: list[Request],
                    settings: SamplerSettings, observer: Observer | None) -> list[Result]:
    ids, attention, masked, starts, locks = _build_batch(requests, settings, backbone.ids.mask, backbone.ids.pad)
    generators = [query_generator(settings.seed, r.query_id, runtime.device) for r in requests]
    passes = torch.zeros(len(requests), dtype=torch.long)
    locked = torch.tensor([lk[0] for lk in locks])
    step = 0
    for block, steps in _blocks(settings, masked, starts):
        plan = StepPlan(settings, block.sum(1), steps)
        for block_step in range(_MAX_STEPS):
            if not block.any():
                break
            active = block & plan.takes_any(block_step, block.sum(1))[:, None]
            if not active.any():  # Dream's schedule commits nothing this step: no forward needed
                continue
            watch = None if observer is None else observer(Observation(
                step, ids.clone(), attention, starts, locked, settings.answer_len, masked.clone(),
                tuple(r.query_id for r in requests)))
            passes += active.any(1).long()
            rows, cols = active.nonzero(as_tuple=True)
            with watch or contextlib.nullcontext():
                logits = _logits(backbone, runtime, vocabulary, ids, attention, starts, rows, cols, settings)
            tokens, confidence = (t.cpu() for t in _propose(logits, settings, vocabulary, generators, rows))
            commit = _choose(confidence, rows, plan, block_step, block.sum(1), settings, generators)
            ids[rows[commit], cols[commit]] = tokens[commit]
            masked[rows[commit], cols[commit]] = False
            block[rows[commit], cols[commit]] = False
            step += 1
    return [Result(r.query_id, ids[i, int(starts[i]):int(starts[i]) + settings.answer_len].tolist(),
                   locks[i][0], locks[i][1], int(passes[i])) for i, r in enumerate(requests)]


_MAX_STEPS = 1 << 31  # threshold decoding runs until the block is decided (at least one commit per step)


def _build_batch(requests: list[Request], settings: SamplerSettings, mask_id: int, pad_id: int):
    width = max(len(r.prompt_ids) for r in requests) + settings.answer_len + settings.extra_masks
    ids = torch.full((len(requests), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    slot = torch.zeros_like(ids, dtype=torch.bool)  # answer-slot positions still to decide
    starts, locks = [], []
    for row, req in enumerate(requests):
        anchor, truncated = _lock(req, settings)
        start, end = len(req.prompt_ids), len(req.prompt_ids) + settings.answer_len
        ids[row, :start] = torch.tensor(req.prompt_ids)
        ids[row, start:end + settings.extra_masks] = mask_id
        ids[row, start:start + len(anchor)] = torch.tensor(anchor, dtype=torch.long)
        attention[row, :end + settings.extra_masks] = 1
        slot[row, start + len(anchor):end] = True
        starts.append(start)
        locks.append((len(anchor), truncated))
    return ids, attention, slot, torch.tensor(starts), locks


def _lock(request: Request, settings: SamplerSettings) -> tuple[list[int], bool]:
    anchor = request.anchor_ids
    if len(anchor) < settings.answer_len:
        return anchor, False
    if settings.long_anchor == "fail":
        raise AnchorTooLong(f"query {request.query_id}: the anchor has {len(anchor)} tokens, not fewer than "
                            f"generation.answer_len = {settings.answer_len}; raise answer_len or set "
                            "long_anchor: truncate")
    return anchor[: settings.answer_len - 1], True


def query_generator(seed: int, query_id: str, device: torch.device | str = "cpu") -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{query_id}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little"))


def _blocks(settings: SamplerSettings, masked: torch.Tensor, starts: torch.Tensor) -> Iterator:
    """LLaDA's semi-autoregressive blocks: (positions of block j still to decide, its steps).

    ``block_len: 0`` makes the whole answer slot one block (plain diffusion decoding). Each block
    gets an equal share of the denoising steps; positions after the current block stay masked
    and visible to the model.
    """
    width = settings.block_len or settings.answer_len
    offset = torch.arange(masked.shape[1])[None, :] - starts[:, None]
    for j in range(settings.blocks):
        yield masked & (offset >= j * width) & (offset < (j + 1) * width), settings.steps // settings.blocks


class StepPlan:
    """How many positions each row commits at each step of one block (``schedule``, ``decoding``)."""

    def __init__(self, settings: SamplerSettings, masked: torch.Tensor, steps: int):
        self.settings, self.steps = settings, steps
        self.even = [transfer_schedule(int(n), steps) for n in masked]
        # Dream's generation_utils.py: float32 times from 1 down to eps.
        self.times = torch.linspace(1, settings.eps, steps + 1)

    def quota(self, step: int, masked: torch.Tensor) -> torch.Tensor:
        """[B] positions to commit at this step, given each row's still-masked count."""
        if self.settings.schedule == "dream":
            if step >= self.steps - 1:
                return masked.clone()
            return (masked.float() * self.transfer_chance(step)).long()
        return torch.tensor([s[step] if step < len(s) else 0 for s in self.even], dtype=torch.long)

    def transfer_chance(self, step: int) -> torch.Tensor:
        """Dream's 1 - s/t: the share of the masked positions that step ``step`` decides (1 at the last)."""
        if step >= self.steps - 1:
            return torch.tensor(1.0)
        return 1 - self.times[step + 1] / self.times[step]

    def takes_any(self, step: int, masked: torch.Tensor) -> torch.Tensor:
        """[B] bool: rows that run this step (threshold and origin: every row with a masked position)."""
        if self.settings.decoding == "threshold" or self.settings.remasking == "origin":
            return masked > 0
        return self.quota(step, masked) > 0


def transfer_schedule(masked: int, steps: int) -> list[int]:
    """How many positions to commit at each step: masked // K each, the remainder first."""
    steps = max(1, min(steps, masked)) if masked else 0
    base, extra = divmod(masked, steps) if steps else (0, 0)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def _logits(backbone: Backbone, runtime: Runtime, vocabulary: Vocabulary, ids: torch.Tensor,
            attention: torch.Tensor, starts: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
            settings: SamplerSettings) -> torch.Tensor:
    """[M, V] float32 logits at the masked positions (rows, cols), guided, never-proposed ids at -inf."""
    attention = attention.to(runtime.device)
    with runtime.autocast():
        logits = backbone.logits_at(ids.to(runtime.device), attention, rows, cols).float()
        if settings.cfg_scale > 0:
            # LLaDA's unsupervised guidance: the same sequence with every prompt position masked.
            prompt = torch.arange(ids.shape[1])[None, :] < starts[:, None]
            unprompted = ids.masked_fill(prompt, backbone.ids.mask)
            un = backbone.logits_at(unprompted.to(runtime.device), attention, rows, cols).float()
            logits = un + (settings.cfg_scale + 1) * (logits - un)
    return logits.masked_fill_(vocabulary.never, float("-inf"))


def _propose(logits: torch.Tensor, settings: SamplerSettings, vocabulary: Vocabulary,
             generators: list[torch.Generator], rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token and confidence for each masked position ([M, V] logits, rows gives each one's query)."""
    rows = rows.to(logits.device)
    scaled = _filtered(logits / settings.temperature if settings.temperature > 0 else logits, settings)
    if settings.temperature > 0:
        tokens = (scaled + _gumbel(scaled.shape, generators, rows)).argmax(-1)
    else:
        tokens = scaled.argmax(-1)
    return tokens, _confidence(logits, scaled, tokens, settings, vocabulary, generators, rows)


def _filtered(logits: torch.Tensor, settings: SamplerSettings) -> torch.Tensor:
    """Dream's top_p then top_k filters: the ids outside them get -inf (top_p 1 and top_k 0: none)."""
    if settings.top_p < 1:
        ordered, order = logits.sort(-1, descending=True)
        beyond = torch.softmax(ordered, -1).cumsum(-1) > settings.top_p
        beyond[:, 1:] = beyond[:, :-1].clone()  # keep the token that crosses top_p
        beyond[:, 0] = False
        logits = logits.masked_fill(torch.zeros_like(beyond).scatter_(-1, order, beyond), float("-inf"))
    if settings.top_k > 0:
        kth = logits.topk(min(settings.top_k, logits.shape[-1]), -1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def _gumbel(shape: torch.Size, generators: list[torch.Generator], rows: torch.Tensor) -> torch.Tensor:
    """Gumbel noise, each query's rows from its own generator."""
    noise = torch.empty(shape, device=rows.device)
    for r in rows.unique().tolist():
        sel = rows == r
        u = torch.rand(int(sel.sum()), shape[1], generator=generators[r], device=rows.device).clamp_(1e-20, 1.0)
        noise[sel] = -torch.log(-torch.log(u))
    return noise


def _confidence(logits: torch.Tensor, scaled: torch.Tensor, tokens: torch.Tensor, settings: SamplerSettings,
                vocabulary: Vocabulary, generators: list[torch.Generator], rows: torch.Tensor) -> torch.Tensor:
    """Each proposal's score under ``remasking`` (higher is committed first)."""
    if settings.remasking in ("random", "origin"):  # origin decides by chance in _choose; no score needed
        return _uniform(rows, generators) if settings.remasking == "random" else torch.zeros_like(logits[:, 0])
    if settings.remasking == "low_confidence":
        # LLaDA: the untempered probability of the token; at temperature 0 Dream's maskgit_plus.
        source = scaled if settings.temperature == 0 else _filtered(logits, settings)
        if vocabulary.unconfident:
            # LLaDA's confidence_eos_eot_inf: EOS and end of turn score 0 (its generate.py, where at
            # temperature 0 the noisy logits it writes EOS's -inf into are the logits themselves).
            source = source.clone()
            source[:, list(vocabulary.unconfident)] = float("-inf")
        return torch.softmax(source, -1).gather(1, tokens[:, None]).squeeze(1)
    probs = torch.softmax(scaled, -1)  # Dream scores with the draw's own (tempered, filtered) distribution
    if settings.remasking == "topk_margin":
        top2 = probs.topk(2, -1).values
        return top2[:, 0] - top2[:, 1]
    return (probs * torch.log(probs + ENTROPY_EPS)).sum(-1)  # entropy: the negative entropy


def _uniform(rows: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """One uniform draw per masked position, each query's from its own generator, in position order."""
    values = torch.empty(rows.shape, device=rows.device)
    for r in rows.unique().tolist():
        sel = rows == r
        values[sel] = torch.rand(int(sel.sum()), generator=generators[r], device=rows.device)
    return values


def _choose(confidence: torch.Tensor, rows: torch.Tensor, plan: StepPlan, step: int, masked: torch.Tensor,
            settings: SamplerSettings, generators: list[torch.Generator]) -> torch.Tensor:
    """Boolean [M]: which masked positions to commit this step."""
    if settings.remasking == "origin":  # Dream: each position independently, with chance 1 - s/t
        return _uniform(rows.to(generators[0].device), generators).cpu() < plan.transfer_chance(step)
    rank = _rank_in_row(confidence, rows, len(masked))
    if settings.decoding == "threshold":
        return (confidence >= settings.threshold) | (rank == 0)
    quota = plan.quota(step, masked)
    if settings.alg_temp > 0:
        return _drawn_positions(confidence, rows, quota, settings.alg_temp, generators)
    return rank < quota[rows]


def _rank_in_row(confidence: torch.Tensor, rows: torch.Tensor, batch: int) -> torch.Tensor:
    """Each position's rank by confidence within its row (0: the highest; ties to the earlier position)."""
    counts = torch.bincount(rows, minlength=batch)
    offsets = counts.cumsum(0) - counts
    rank_in_row = torch.arange(rows.numel()) - offsets[rows]  # rows come sorted from nonzero()
    table = torch.full((batch, int(counts.max())), -torch.inf)
    table[rows, rank_in_row] = confidence
    order = table.argsort(dim=1, descending=True, stable=True)
    position_rank = torch.empty_like(order)
    position_rank.scatter_(1, order, torch.arange(order.shape[1]).expand_as(order).contiguous())
    return position_rank[rows, rank_in_row]


def _drawn_positions(confidence: torch.Tensor, rows: torch.Tensor, quota: torch.Tensor, alg_temp: float,
                     generators: list[torch.Generator]) -> torch.Tensor:
    """Dream's alg_temp > 0: each row's quota drawn without replacement from softmax(confidence / alg_temp)."""
    commit = torch.zeros(rows.shape, dtype=torch.bool)
    for r in rows.unique().tolist():
        where = (rows == r).nonzero().flatten()
        take = int(quota[r])
        if take:
            weights = torch.softmax(confidence[where] / alg_temp, -1).to(generators[r].device)
            commit[where[torch.multinomial(weights, take, generator=generators[r]).cpu()]] = True
    return commit
