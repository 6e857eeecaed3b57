"""What one denoising step decides: which ids may be proposed, how many positions to commit,
the token and its confidence at each, and which are committed (``sampler`` runs the steps).

In the order the sampler runs them (docs/real-bases.md, "Decoding options", has the table of
options and the family whose own sampler each comes from):

* how many to commit: ``schedule: even`` (LLaDA) splits the masked count evenly over the
  steps, the remainder to the first; ``schedule: dream`` moves from time t to s on
  linspace(1, eps, steps + 1) and commits int(masked * (1 - s/t)), all at the last step.
  ``decoding: threshold`` (Fast-dLLM) commits every prediction whose confidence reaches the
  threshold, at least the most confident one, until no masked position is left.
* the logits: ``cfg_scale`` > 0 adds LLaDA's unsupervised classifier-free guidance (a second
  forward with the prompt masked, and the locked anchor as well under ``cfg_anchor: masked``,
  LLaDA's generate.py handed question + anchor as its prompt); ids the sampler never proposes
  get -inf: the special tokens other than the answer's end, every id the tokenizer cannot
  decode (an embedding padded beyond the tokenizer, as Dream-7B's), and EOS under
  ``logits_eos_inf``.
* the token: argmax at temperature 0, else a Gumbel-max draw from logits / temperature, after
  Dream's ``top_p`` and ``top_k`` filters.
* which to commit (``remasking``): ``low_confidence`` the most probable (LLaDA's; Dream's
  maskgit_plus at temperature 0), ``topk_margin`` the largest top-1 minus top-2 margin,
  ``entropy`` the lowest entropy, ``random`` a random choice, ``origin`` (Dream) each masked
  position independently with probability 1 - s/t. ``alg_temp`` > 0 draws the committed
  positions from softmax(confidence / alg_temp) instead of taking the top ones.
  ``confidence_eos_eot_inf`` (LLaDA) gives EOS and the end of turn confidence 0: committed last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from anchormask.fileio import InputError
from anchormask.generation.sampler_settings import SamplerSettings
from anchormask.model import layout
from anchormask.model.backbone import Backbone

ENTROPY_EPS = 1e-10  # Dream's generation_utils.py: log(p + 1e-10) in the negative entropy


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
        unconfident: tuple[int, ...] = ()
        if settings.confidence_eos_eot_inf:
            key = "confidence_eos_eot_inf"
            unconfident = tuple(sorted({end_token_id(backbone, "eos", key), end_token_id(backbone, "eot")}))
        return cls(never.to(device), unconfident)


def vocabulary_width(backbone: Backbone) -> int:
    """Rows of the model's vocabulary head: the logits' width. Read from the head itself, because the
    config's names disagree: LLaDA's ``embedding_size`` is its padded vocabulary, ELECTRA's and ALBERT's
    is the width of a token embedding."""
    model: Any = backbone.model  # a transformers model or a checkpoint's own class: duck-typed here
    try:
        head = model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        head = None
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    return int(model.config.vocab_size)


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


def propose(logits: torch.Tensor, settings: SamplerSettings, vocabulary: Vocabulary,
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


def choose(confidence: torch.Tensor, rows: torch.Tensor, plan: StepPlan, step: int, masked: torch.Tensor,
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
