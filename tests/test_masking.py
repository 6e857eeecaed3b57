import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from anchormask.fileio import InputError
from anchormask.model.layout import ANSWER, PAD, QUESTION, SPECIAL
from anchormask.training import masking, strategies

pytestmark = pytest.mark.unit


def random_classes(gen: torch.Generator, batch: int = 6, length: int = 30) -> torch.Tensor:
    """[CLS] Q.. [SEP] A.. [SEP] PAD.. with random lengths per row."""
    rows = []
    for _ in range(batch):
        q = int(torch.randint(1, 10, (1,), generator=gen))
        a = int(torch.randint(1, 12, (1,), generator=gen))
        row = [SPECIAL] + [QUESTION] * q + [SPECIAL] + [ANSWER] * a + [SPECIAL]
        rows.append(row + [PAD] * (length - len(row)))
    return torch.tensor(rows)


def batch_of(classes: torch.Tensor, ratio: torch.Tensor, gen: torch.Generator) -> strategies.MaskingBatch:
    return strategies.MaskingBatch(ids=torch.zeros_like(classes), classes=classes, lengths=(classes != PAD).sum(1),
                                   ratio=ratio, step=0, total_steps=1, generator=gen)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), strategy=st.sampled_from(sorted(strategies.BUILTIN_CLASSES)))
def test_no_strategy_masks_outside_its_class(seed, strategy):
    gen = torch.Generator().manual_seed(seed)
    classes = random_classes(gen)
    ratio = masking.MaskRatio(0.5, 0.9).sample(len(classes), gen)
    mask = strategies.resolve(strategy).mask(batch_of(classes, ratio, gen))
    allowed = torch.isin(classes, torch.tensor(strategies.BUILTIN_CLASSES[strategy]))
    assert not (mask & ~allowed).any()
    assert not (mask & ((classes == SPECIAL) | (classes == PAD))).any()


def test_anchor_never_masks_question_and_reverse_never_masks_answer():
    gen = torch.Generator().manual_seed(1)
    classes = random_classes(gen, batch=50)
    ratio = torch.ones(50)  # every eligible position masked
    anchor = strategies.resolve("anchor").mask(batch_of(classes, ratio, gen))
    reverse = strategies.resolve("reverse").mask(batch_of(classes, ratio, gen))
    assert torch.equal(anchor, classes == ANSWER)
    assert torch.equal(reverse, classes == QUESTION)


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.9])
def test_empirical_mask_rate_matches_drawn_ratio(ratio):
    gen = torch.Generator().manual_seed(7)
    eligible = torch.ones(400, 200, dtype=torch.bool)
    mask = masking.draw_mask(eligible, torch.full((400,), ratio), gen)
    rate = mask.float().mean().item()
    assert abs(rate - ratio) < 4 * math.sqrt(ratio * (1 - ratio) / mask.numel())


def test_mask_ratio_draws_stay_in_interval_and_cover_it():
    draws = masking.MaskRatio(0.45, 0.55).sample(5000, torch.Generator().manual_seed(0))
    assert draws.min() >= 0.45 and draws.max() <= 0.55
    assert draws.min() < 0.46 and draws.max() > 0.54


def _loss(kind, logits, targets, mask, ratio, tv_weight=1.0):
    rows, cols = mask.nonzero(as_tuple=True)
    return masking.masked_loss(logits[rows, cols], targets[rows, cols], kind=kind, ratio=ratio, rows=rows,
                               eligible_count=torch.full((mask.shape[0],), mask.shape[1]),
                               tv_weight=tv_weight)


@pytest.mark.parametrize("kind", masking.LOSSES)
def test_loss_ignores_unmasked_targets_but_not_masked_ones(kind):
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 8, 11, generator=gen)
    targets = torch.randint(0, 11, (2, 8), generator=gen)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[0, [1, 4]] = True
    mask[1, [2]] = True
    ratio = torch.tensor([0.6, 0.7])
    before = _loss(kind, logits, targets, mask, ratio)
    changed = targets.clone()
    changed[~mask] = (changed[~mask] + 1) % 11
    assert torch.equal(_loss(kind, logits, changed, mask, ratio), before)
    changed_masked = targets.clone()
    changed_masked[0, 1] = (changed_masked[0, 1] + 5) % 11
    assert not torch.equal(_loss(kind, logits, changed_masked, mask, ratio), before)


@pytest.mark.parametrize("kind", masking.LOSSES)
def test_step_without_masked_positions_gives_zero_with_gradient(kind):
    logits = torch.randn(0, 5, requires_grad=True)
    loss = masking.masked_loss(logits, torch.zeros(0, dtype=torch.long), kind=kind, ratio=torch.tensor([0.5]),
                               rows=torch.zeros(0, dtype=torch.long), eligible_count=torch.tensor([3]))
    loss.backward()
    assert loss.item() == 0.0 and math.isfinite(loss.item())


def test_llada_and_mask_agnostic_match_hand_computation():
    # Two sequences; sequence 0 has masked tokens with CE c1, c2 at p = 0.5 and 4 eligible
    # positions; sequence 1 one token with CE c3 at p = 0.25 and 2 eligible positions.
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    targets = torch.tensor([0, 0, 1])
    rows = torch.tensor([0, 0, 1])
    ratio = torch.tensor([0.5, 0.25])
    probs = torch.softmax(logits, -1)[torch.arange(3), targets]
    ce = -probs.log()
    llada = masking.masked_loss(logits, targets, kind="llada", ratio=ratio, rows=rows,
                                eligible_count=torch.tensor([4, 2]))
    expected_llada = ((ce[0] + ce[1]) / 0.5 / 4 + ce[2] / 0.25 / 2) / 2
    assert torch.allclose(llada, expected_llada)
    agnostic = masking.masked_loss(logits, targets, kind="mask_agnostic", ratio=ratio, rows=rows,
                                   eligible_count=torch.tensor([4, 2]), tv_weight=2.0)
    p = torch.tensor([0.5, 0.5, 0.25])
    expected = (ce / p + 2.0 * p * (1 - probs)).sum() / 3
    assert torch.allclose(agnostic, expected)
    ce_loss = masking.masked_loss(logits, targets, kind="ce", ratio=ratio, rows=rows,
                                  eligible_count=torch.tensor([4, 2]))
    assert torch.allclose(ce_loss, ce.mean())


def test_unknown_strategy_and_loss_are_refused():
    with pytest.raises(InputError, match="unknown strategy 'both'; built-in: anchor, random, reverse"):
        strategies.resolve("both")
    with pytest.raises(ValueError, match="unknown loss"):
        masking.masked_loss(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long), kind="mse",
                            ratio=torch.ones(1), rows=torch.zeros(1, dtype=torch.long),
                            eligible_count=torch.ones(1))
