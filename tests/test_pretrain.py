import dataclasses

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from anchormask import pretrain


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return AutoModelForMaskedLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


def test_one_sequence_per_line_padded_and_short_lines_dropped(tiny):
    _, tok = tiny
    lines = ["the river flows into the sea", "the sea", "the deepest lake of the world is in the north"]
    ids, attention = pretrain.encode_lines(lines, tok, seq_len=8, min_tokens=6)
    assert ids.shape == (2, 8) and attention[0].sum() == 8 and attention[1].sum() == 8
    assert ids[0, 0] == tok.cls_token_id and ids[0, -1] == tok.sep_token_id


@pytest.mark.parametrize("weighting", ["none", "inverse_t"])
def test_pretraining_loss_only_looks_at_masked_real_tokens(tiny, weighting):
    model, tok = tiny
    ids, attention = pretrain.encode_lines(["the river flows into the sea", "the sun is a star"], tok, seq_len=12,
                                           min_tokens=3)
    settings = dataclasses.replace(pretrain.PretrainSettings(), weighting=weighting, min_mask_ratio=0.5)
    special = torch.tensor(tok.all_special_ids)
    loss = pretrain.diffusion_pretrain_loss(model, ids, attention, tok.mask_token_id, special, settings,
                                            torch.Generator().manual_seed(0))
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    assert model.cls.predictions.decoder.weight.grad is not None


def test_pretraining_text_is_lowercase_free_of_markup():
    assert pretrain.normalise("  The  Nile,  RIVER. ") == pretrain.normalise("the nile, river.")
