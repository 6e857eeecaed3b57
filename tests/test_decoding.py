"""The decoding options against independent one-query references written from LLaDA's generate.py
(cfg_scale, logits_eos_inf) and Dream's generation_utils.py (its time schedule and algorithms),
and the rule that ids the tokenizer cannot decode are never proposed."""

import pytest
import torch

from anchormask import config, layout, sampler
from anchormask.io import InputError

pytestmark = pytest.mark.unit

QUESTIONS = ["Which river flows into the sea?", "What is the deepest lake?"]
ANCHORS = ["the river", "the deepest lake"]


def requests(backbone):
    tok = backbone.tokenizer
    return [sampler.Request(f"q{i}", layout.prompt_ids(tok, q, backbone.template), layout.anchor_ids(tok, a))
            for i, (q, a) in enumerate(zip(QUESTIONS, ANCHORS))]


def full_logits(backbone, x):
    """The model's own forward over the whole sequence, Dream's shift applied for a shifted family."""
    mask = torch.ones_like(x) if backbone.family.honours_padding else None
    logits = backbone.model(input_ids=x, attention_mask=mask).logits[0].float()
    return torch.cat([logits[:1], logits[:-1]]) if backbone.family.shifted else logits


def start_sequence(backbone, req, answer_len):
    mask_id = backbone.ids.mask
    return torch.tensor([req.prompt_ids + req.anchor_ids + [mask_id] * (answer_len - len(req.anchor_ids))])


@torch.no_grad()
def llada_reference(backbone, req, *, answer_len, steps, never, cfg_scale=0.0, eos=None):
    """LLaDA's generate() for one query, one block, temperature 0, low_confidence remasking."""
    mask_id = backbone.ids.mask
    x = start_sequence(backbone, req, answer_len)
    prompt_index = torch.zeros_like(x, dtype=torch.bool)
    prompt_index[0, :len(req.prompt_ids)] = True
    n = int((x == mask_id).sum())
    quotas = [n // steps + (1 if i < n % steps else 0) for i in range(steps)]
    for quota in quotas:
        if quota == 0:
            continue
        mask_index = (x == mask_id)[0]
        logits = full_logits(backbone, x)
        if cfg_scale > 0:
            un_x = x.clone()
            un_x[prompt_index] = mask_id
            un = full_logits(backbone, un_x)
            logits = un + (cfg_scale + 1) * (logits - un)
        logits[:, never] = -torch.inf
        if eos is not None:
            logits[:, eos] = -torch.inf
        x0 = logits.argmax(-1)
        p = torch.softmax(logits, -1).gather(-1, x0[:, None]).squeeze(-1)
        confidence = torch.where(mask_index, p, torch.tensor(-torch.inf))
        chosen = confidence.argsort(descending=True, stable=True)[:quota]
        x[0, chosen] = x0[chosen]
    return x[0, len(req.prompt_ids):].tolist()


@torch.no_grad()
def dream_reference(backbone, req, *, answer_len, steps, never, alg, eps=1e-3, top_p=None, top_k=None):
    """Dream's _sample for one query at temperature 0 and alg_temp 0 (maskgit_plus, topk_margin, entropy)."""
    mask_id = backbone.ids.mask
    x = start_sequence(backbone, req, answer_len)
    timesteps = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        mask_index = (x == mask_id)[0]
        logits = full_logits(backbone, x)
        logits[:, never] = -torch.inf
        mask_logits = logits[mask_index]
        if top_p is not None and top_p < 1:
            ordered, order = torch.sort(mask_logits, descending=True)
            remove = torch.softmax(ordered, -1).cumsum(-1) > top_p
            remove[:, 1:] = remove[:, :-1].clone()
            remove[:, 0] = False
            mask_logits = mask_logits.masked_fill(torch.zeros_like(remove).scatter(-1, order, remove),
                                                  torch.finfo(mask_logits.dtype).min)
        if top_k is not None:
            kth = torch.topk(mask_logits, top_k)[0][:, -1, None]
            mask_logits = mask_logits.masked_fill(mask_logits < kth, torch.finfo(mask_logits.dtype).min)
        probs = torch.softmax(mask_logits, -1)
        confidence, x0 = probs.max(-1)
        if alg == "topk_margin":
            top = torch.sort(probs, -1, descending=True)[0]
            confidence = top[:, 0] - top[:, 1]
        elif alg == "entropy":
            confidence = (probs * torch.log(probs + 1e-10)).sum(-1)
        num = mask_index.sum() / 1
        t, s = timesteps[i], timesteps[i + 1]
        number = int(num * (1 - s / t)) if i < steps - 1 else int(num)
        full = torch.full(mask_index.shape, -torch.inf)
        full[mask_index] = confidence
        if number > 0:
            chosen = full.argsort(descending=True, stable=True)[:number]
            x_ = torch.full_like(x[0], mask_id)
            x_[mask_index] = x0
            x[0, chosen] = x_[chosen]
    return x[0, len(req.prompt_ids):].tolist()


@pytest.mark.parametrize("spec", [{}, {"cfg_scale": 1.0}, {"cfg_scale": 0.5}])
def test_llada_options_write_llada_s_tokens(tiny_backbone, spec):
    backbone, runtime = tiny_backbone
    settings = sampler.SamplerSettings(answer_len=10, steps=4, **spec)
    never = sampler.suppressed_token_ids(backbone)
    for req, res in zip(requests(backbone), sampler.generate(backbone, runtime, requests(backbone), settings)):
        assert res.slot_ids == llada_reference(backbone, req, answer_len=10, steps=4, never=never, **spec)


@pytest.mark.parametrize("spec", [
    {"remasking": "low_confidence"}, {"remasking": "topk_margin"}, {"remasking": "entropy"},
    {"remasking": "entropy", "top_p": 0.3, "top_k": 8}, {"remasking": "low_confidence", "top_p": 0.2},
])
def test_dream_algorithms_write_dream_s_tokens(tiny_backbone, spec):
    backbone, runtime = tiny_backbone
    settings = sampler.SamplerSettings(answer_len=10, steps=4, schedule="dream", **spec)
    never = sampler.suppressed_token_ids(backbone)
    alg = {"low_confidence": "maskgit_plus"}.get(spec["remasking"], spec["remasking"])
    for req, res in zip(requests(backbone), sampler.generate(backbone, runtime, requests(backbone), settings)):
        assert res.slot_ids == dream_reference(backbone, req, answer_len=10, steps=4, never=never, alg=alg,
                                               top_p=spec.get("top_p"), top_k=spec.get("top_k"))


@pytest.mark.parametrize("spec", [{"remasking": "entropy", "temperature": 0.7, "top_p": 0.9},
                                  {"remasking": "origin", "temperature": 0.7},
                                  {"remasking": "topk_margin", "alg_temp": 0.5}, {"cfg_scale": 1.0, "temperature": 1.0}])
def test_new_options_keep_the_anchor_locked_and_each_query_s_randomness_its_own(tiny_backbone, spec):
    backbone, runtime = tiny_backbone
    settings = sampler.SamplerSettings(answer_len=10, steps=4, **{"schedule": "dream", **spec})
    reqs = requests(backbone)
    together = sampler.generate(backbone, runtime, reqs, settings)
    alone = [sampler.generate(backbone, runtime, [r], settings)[0] for r in reqs]
    assert [r.slot_ids for r in together] == [r.slot_ids for r in alone]
    for req, res in zip(reqs, together):
        assert res.slot_ids[:res.locked] == req.anchor_ids and backbone.ids.mask not in res.slot_ids


def test_logits_eos_inf_needs_an_eos_and_confidence_eos_eot_inf_an_end_of_turn(tiny_backbone):
    backbone, runtime = tiny_backbone  # BERT: no EOS token, no chat template
    for key in ("logits_eos_inf", "confidence_eos_eot_inf"):
        with pytest.raises(InputError, match=f"generation.{key}: .* set generation.{key}: false"):
            sampler.generate(backbone, runtime, requests(backbone), sampler.SamplerSettings(**{key: True}))


def test_ids_beyond_the_tokenizer_are_never_proposed(tmp_path):
    """A head with more rows than the tokenizer has tokens, the extra rows made the most likely."""
    from anchormask import backbone as bb
    from helpers import build_tiny_model
    from transformers import BertForMaskedLM

    path = build_tiny_model(tmp_path / "m")
    model = BertForMaskedLM.from_pretrained(path)
    size = model.config.vocab_size
    model.resize_token_embeddings(size + 16)
    with torch.no_grad():
        model.cls.predictions.decoder.bias[size:] = 50.0
    model.save_pretrained(path)
    runtime = bb.pick_runtime("cpu")
    backbone = bb.load_backbone(path, runtime=runtime)
    assert sampler.vocabulary_width(backbone) == size + 16 == len(backbone.tokenizer) + 16
    for spec in ({}, {"temperature": 2.0}, {"temperature": 1.0, "remasking": "entropy", "schedule": "dream"}):
        for res in sampler.generate(backbone, runtime, requests(backbone),
                                    sampler.SamplerSettings(answer_len=10, steps=4, **spec)):
            assert max(res.slot_ids) < size
            backbone.tokenizer.decode(res.slot_ids)


@pytest.mark.parametrize("spec,key", [
    ({"remasking": "origin"}, "remasking"),
    ({"decoding": "threshold", "remasking": "entropy"}, "decoding"),
    ({"decoding": "threshold", "schedule": "dream"}, "schedule"),
    ({"alg_temp": 0.5, "remasking": "random"}, "alg_temp"),
    ({"confidence_eos_eot_inf": True, "remasking": "entropy"}, "confidence_eos_eot_inf"),
])
def test_combinations_that_make_no_sense_are_refused_naming_the_key(spec, key):
    assert [k for k, _ in config.decoding_problems(spec)] == [key]
    with pytest.raises(InputError, match=f"generation.{key}: .*set "):
        sampler.SamplerSettings(**spec)
