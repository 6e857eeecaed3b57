"""Pretraining of the embedded base: sequences, length buckets, schedule, loss and resumption."""

import dataclasses
import shutil

import pytest
import torch
from transformers import AutoTokenizer

from anchormask import fileio
from anchormask.embedded_base import pretrain, sequences

pytestmark = pytest.mark.unit

LINES = ["the river flows into the sea", "the sea", "the deepest lake of the world is in the north",
         "the sun is a star", "the moon is a planet of the sun", "which city is the capital of the country",
         "the law court is in the city", "bread and salt are food"] * 4


def settings(**overrides) -> pretrain.PretrainSettings:
    values = dict(vocab_size=64, hidden_size=32, layers=1, heads=2, intermediate_size=64, max_positions=64,
                  seq_len=16, min_tokens=4, pair_share=0.5, tokens_per_batch=64, steps=4, lr=0.01,
                  warmup_steps=1, decay_steps=2, restarts=(), weight_decay=0.0, min_mask_ratio=0.05, weighting="none",
                  bf16=False, seed=0, log_every=1, checkpoint_every=2, snapshot_every=0, eval_sequences=4)
    return pretrain.PretrainSettings(**{**values, **overrides})


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_sequences_are_one_or_two_segments_cut_to_length_and_short_ones_dropped(tok):
    seqs = sequences.encode_sequences(LINES, tok, settings(seq_len=12, min_tokens=5))
    cls, sep = tok.cls_token_id, tok.sep_token_id
    assert all(s[0] == cls and s[-1] == sep and 5 <= len(s) <= 12 for s in seqs)
    segments = {s.count(sep) for s in seqs}
    assert segments == {1, 2}
    assert sequences.encode_sequences(LINES, tok, settings(pair_share=0.0, min_tokens=1)) == \
        [[cls, *ids, sep] for ids in tok(LINES, add_special_tokens=False)["input_ids"]]


def test_length_batches_cover_every_sequence_once_within_the_token_budget():
    lengths = [3, 9, 4, 9, 5, 20, 3, 7, 8, 4, 6, 12] * 5
    batches = sequences.length_batches(lengths, 40, seed=1)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(lengths)))
    assert all(len(b) * max(lengths[i] for i in b) <= 40 for b in batches)
    padding = sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in batches)
    assert padding / sum(lengths) < 0.1
    assert batches == sequences.length_batches(lengths, 40, seed=1) != sequences.length_batches(lengths, 40, seed=2)


def test_schedule_warms_up_holds_then_decays_to_zero():
    s = settings(steps=10, warmup_steps=2, decay_steps=4)
    factors = [pretrain.lr_factor(step, s) for step in range(11)]
    assert factors[:2] == [0.5, 1.0] and factors[2:7] == [1.0] * 5
    assert factors[7:] == [0.75, 0.5, 0.25, 0.0]


def test_loss_is_the_mean_cross_entropy_over_the_masked_real_tokens_only(tiny_model_dir, tok):
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(tiny_model_dir)  # eval mode: no dropout
    ids, attention = sequences.pad_batch(sequences.encode_sequences(LINES[:4], tok, settings(pair_share=0)),
                                        tok.pad_token_id)
    special = torch.tensor(tok.all_special_ids)
    real = attention.bool() & ~torch.isin(ids, special)  # not [CLS], [SEP] or padding
    assert (~attention.bool()).any() and real.any()  # the batch has padding to leave out

    def loss(ids, attention, seed=0, **overrides):
        return pretrain.diffusion_loss(model, ids, attention, tok.mask_token_id, special, settings(**overrides),
                                       torch.Generator().manual_seed(seed))

    # Nothing maskable: zero, not NaN (and still a graph to backpropagate).
    none = pretrain.diffusion_loss(model, ids, attention, tok.mask_token_id, torch.arange(200), settings(),
                                   torch.Generator().manual_seed(0))
    assert none.item() == 0.0 and none.requires_grad
    # Ratio t = 1: every real token is masked and no special one.
    _, masked = pretrain.mask_batch(ids, torch.tensor(1.0), tok.mask_token_id, special, torch.Generator())
    assert torch.equal(masked, real)
    # At a ratio below 1: the mean cross-entropy of the model's predictions at the masked positions,
    # against the original tokens, computed here from the whole forward pass.
    gen = torch.Generator().manual_seed(3)
    t = 0.5 + 0.5 * torch.rand(ids.shape[0], 1, generator=gen)
    noisy, masked = pretrain.mask_batch(ids, t, tok.mask_token_id, special, gen)
    assert masked.any() and (real & ~masked).any()
    logits = model(input_ids=noisy, attention_mask=attention).logits
    by_hand = torch.nn.functional.cross_entropy(logits[masked], ids[masked])
    assert torch.allclose(loss(ids, attention, seed=3, min_mask_ratio=0.5), by_hand, atol=1e-6)
    # With every real token masked the input is fixed, so only the targets differ below:
    full = loss(ids, attention, min_mask_ratio=1.0)
    row, col = real.nonzero()[0].tolist()
    other = ids.clone()
    other[row, col] = next(i for i in range(len(tok)) if i not in tok.all_special_ids and i != ids[row, col])
    assert not torch.allclose(loss(other, attention, min_mask_ratio=1.0), full)  # a masked real token counts
    padded = torch.cat([ids, torch.full((ids.shape[0], 5), tok.pad_token_id)], 1)
    wider = torch.cat([attention, torch.zeros(ids.shape[0], 5, dtype=attention.dtype)], 1)
    assert torch.allclose(loss(padded, wider, min_mask_ratio=1.0), full, atol=1e-6)  # more padding: no change


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path):
    from safetensors.torch import load_file

    straight = pretrain.pretrain(LINES, LINES[:4], tmp_path / "a", tmp_path / "state_a", settings(steps=4))
    # the tokenizer trainer breaks frequency ties in hash order, so a run keeps its tokenizer in its state
    shutil.copytree(tmp_path / "state_a" / "tokenizer", tmp_path / "state_b" / "tokenizer")
    pretrain.pretrain(LINES, LINES[:4], tmp_path / "b", tmp_path / "state_b", settings(steps=2, decay_steps=0))
    # the same run, stopped after its checkpoint at step 2, then resumed with the full length
    resumed = pretrain.pretrain(LINES, LINES[:4], tmp_path / "b", tmp_path / "state_b", settings(steps=4))
    assert straight["steps"] == resumed["steps"] == 4
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [h["step"] for h in resumed["history"]] == [2, 4]


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    pretrain.pretrain(LINES, LINES[:4], tmp_path / "a", tmp_path / "state", settings(steps=2))
    with pytest.raises(fileio.InputError, match="delete .*state to start afresh"):
        pretrain.pretrain(LINES, LINES[:4], tmp_path / "b", tmp_path / "state", settings(steps=2, hidden_size=64))


def test_settings_need_every_key_once():
    values = dataclasses.asdict(settings())
    assert pretrain.settings_from(values) == settings()
    with pytest.raises(fileio.InputError, match=r"missing \['seed'\], unknown \['sead'\]"):
        pretrain.settings_from({**{k: v for k, v in values.items() if k != "seed"}, "sead": 0})


def test_the_base_readmes_learning_curves_are_the_kept_states_history():
    """Every `| step |` table of data/base/README.md: each accuracy is the kept state's validation accuracy
    at 15% masking at that step (data/pretrain/state/pretrain_record.json), to three decimals."""
    import json
    import re

    from helpers import REPO

    record = json.loads((REPO / "data" / "pretrain" / "state" / "pretrain_record.json").read_text())
    accuracy = {h["step"]: h["validation_accuracy_15"] for h in record["history"]}
    lines = (REPO / "data" / "base" / "README.md").read_text().splitlines()
    tables = [(lines[i], lines[i + 2]) for i, line in enumerate(lines) if line.startswith("| step |")]
    assert len(tables) >= 2
    for steps_row, accuracy_row in tables:
        steps = [int(s.replace(",", "")) for s in re.findall(r"[\d,]+", steps_row)]
        shown = re.findall(r"\d\.\d{3}", accuracy_row)
        assert shown == [f"{accuracy[s]:.3f}" for s in steps], steps_row
