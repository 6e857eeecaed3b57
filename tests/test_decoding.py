"""The decoding options against independent one-query references written from LLaDA's generate.py
(cfg_scale, logits_eos_inf, confidence_eos_eot_inf, remasking random, temperature), Fast-dLLM's
threshold rule (get_transfer_index) and Dream's generation_utils.py (its time schedule, algorithms,
top_p/top_k and alg_temp), on BERT and on the tiny LLaDA- and Dream-style checkpoints
(tests/tiny_families.py; those run under transformers 4.x, CI's remote stage); and the rule that ids
the tokenizer cannot decode are never proposed.

Where the sampler draws at random, the reference draws from the query's own generator in the
sampler's order (LLaDA's Gumbel noise and its uniform remasking scores, Dream's origin uniforms), so
tokens are identical; where the two cannot share a stream (Dream's categorical draw of a token, its
multinomial draw of positions under alg_temp) the test compares distributions instead.
"""

import math

import pytest
import torch

from anchormask.fileio import InputError
from anchormask.generation import decoding, sampler, sampler_settings
from anchormask.model import backbone as bb
from anchormask.model import layout
from tiny_families import BUILDERS, REMOTE, remote_code_runs

pytestmark = pytest.mark.unit

QUESTIONS = ["Which river flows into the sea?", "What is the deepest lake?"]
ANCHORS = ["the river", "the deepest lake"]


@pytest.fixture(scope="module")
def loaded(request, tmp_path_factory):
    """(backbone, runtime) of a family's tiny checkpoint (and layout), built and loaded once per module."""
    cache, paths = {}, {}

    def load(family, chat=False):
        if family in REMOTE and not remote_code_runs():
            pytest.skip("remote code needs transformers 4.x (.venv-remote, envs/requirements-remote.txt)")
        if family == "bert" and not chat:
            return request.getfixturevalue("tiny_backbone")
        if (family, chat) not in cache:
            if family not in paths:
                paths[family] = BUILDERS[family](tmp_path_factory.mktemp("decoding") / family)
            runtime = bb.pick_runtime("cpu")
            backbone = bb.load_backbone(paths[family], runtime=runtime, trust_remote_code=family in REMOTE,
                                        layout="chat" if chat else None)
            backbone.model.eval()
            cache[family, chat] = backbone, runtime
        return cache[family, chat]
    return load


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


def guided_logits(backbone, x, prompt_len, cfg_scale):
    """LLaDA's forward: with cfg_scale > 0, un + (cfg_scale + 1)(cond - un), un with the prompt masked."""
    logits = full_logits(backbone, x)
    if cfg_scale > 0:
        un_x = x.clone()
        un_x[0, :prompt_len] = backbone.ids.mask
        un = full_logits(backbone, un_x)
        logits = un + (cfg_scale + 1) * (logits - un)
    return logits


def generator_of(settings, req):
    return sampler.query_generator(settings.seed, req.query_id)


@torch.no_grad()
def llada_reference(backbone, req, settings, never, eos=None, unconfident=()):
    """LLaDA's generate() for one query: blocks, cfg_scale, logits_eos_inf (``eos``), confidence_eos_eot_inf
    (``unconfident``), temperature (its exp(logits) / (-log u)^T draw, u from the query's stream), remasking
    low_confidence or random; with decoding: threshold, Fast-dLLM's get_transfer_index (the most confident
    always, every other at or above the threshold) until the block is decided. Returns (slot, passes)."""
    mask_id, start = backbone.ids.mask, len(req.prompt_ids)
    x, g = start_sequence(backbone, req, settings.answer_len), generator_of(settings, req)
    width = settings.block_len or settings.answer_len
    per_block, passes = settings.steps // (settings.answer_len // width), 0
    for lo in range(start, start + settings.answer_len, width):
        n = int((x[0, lo:lo + width] == mask_id).sum())
        quotas = [n // per_block + (1 if i < n % per_block else 0) for i in range(per_block)]
        step = 0
        while (x[0, lo:lo + width] == mask_id).any() if settings.decoding == "threshold" else step < per_block:
            quota, step = (quotas[step] if settings.decoding != "threshold" else None), step + 1
            if quota == 0:
                continue
            in_block = torch.zeros(x.shape[1], dtype=torch.bool)
            in_block[lo:lo + width] = True
            where = ((x[0] == mask_id) & in_block).nonzero().flatten()
            logits = guided_logits(backbone, x, start, settings.cfg_scale)[where]
            logits[:, never] = -torch.inf
            if eos is not None:
                logits[:, eos] = -torch.inf
            if settings.temperature > 0:
                u = torch.rand(len(where), logits.shape[1], generator=g).double()
                x0 = (logits.double().exp() / (-torch.log(u)) ** settings.temperature).argmax(-1)
            else:
                x0 = logits.argmax(-1)
            confidence = _llada_confidence(logits, x0, settings, unconfident, g)
            order = confidence.argsort(descending=True, stable=True)
            if settings.decoding == "threshold":
                chosen = order[(confidence[order] >= settings.threshold) | (torch.arange(len(order)) == 0)]
            else:
                chosen = order[:quota]
            x[0, where[chosen]] = x0[chosen]
            passes += 1
    return x[0, start:].tolist(), passes


def _llada_confidence(logits, x0, settings, unconfident, g):
    if settings.remasking == "random":
        return torch.rand(len(x0), generator=g)
    if settings.remasking == "topk_margin":  # Dream's margin, under Fast-dLLM's threshold rule
        top = torch.softmax(logits, -1).sort(-1, descending=True)[0]
        return top[:, 0] - top[:, 1]
    scored = logits.clone()
    scored[:, list(unconfident)] = -torch.inf
    return torch.softmax(scored, -1).gather(-1, x0[:, None]).squeeze(-1)


def _top_p_top_k(logits, top_p, top_k):
    """Dream's top_p_logits then top_k_logits (filtered ids at the dtype's minimum)."""
    low = torch.finfo(logits.dtype).min
    if top_p is not None and top_p < 1:
        ordered, order = torch.sort(logits, descending=True)
        remove = torch.softmax(ordered, -1).cumsum(-1) > top_p
        remove[:, 1:] = remove[:, :-1].clone()
        remove[:, 0] = False
        logits = logits.masked_fill(torch.zeros_like(remove).scatter(-1, order, remove), low)
    if top_k:
        kth = torch.topk(logits, top_k)[0][:, -1, None]
        logits = logits.masked_fill(logits < kth, low)
    return logits


@torch.no_grad()
def dream_reference(backbone, req, settings, never, alg):
    """Dream's _sample for one query at alg_temp 0: maskgit_plus, topk_margin, entropy (sample_tokens with
    temperature, top_p, top_k; its categorical draw made Gumbel-max on the query's stream) and origin
    (at temperature 0, its uniforms from the query's stream)."""
    mask_id, start = backbone.ids.mask, len(req.prompt_ids)
    x, g = start_sequence(backbone, req, settings.answer_len), generator_of(settings, req)
    timesteps = torch.linspace(1, settings.eps, settings.steps + 1)
    for i in range(settings.steps):
        mask_index = (x == mask_id)[0]
        logits = full_logits(backbone, x)
        logits[:, never] = -torch.inf
        t, s = timesteps[i], timesteps[i + 1]
        if alg == "origin":
            p_transfer = 1 - s / t if i < settings.steps - 1 else 1
            where = mask_index.nonzero().flatten()
            transfer = torch.rand(len(where), generator=g) < p_transfer
            x[0, where[transfer]] = logits[where[transfer]].argmax(-1)
            continue
        mask_logits = logits[mask_index]
        if settings.temperature > 0:
            mask_logits = mask_logits / settings.temperature
        probs = torch.softmax(_top_p_top_k(mask_logits, settings.top_p, settings.top_k), -1)
        if settings.temperature > 0:
            u = torch.rand(probs.shape, generator=g).clamp_(1e-20, 1.0)
            x0 = (torch.log(probs) - torch.log(-torch.log(u))).argmax(-1)
            confidence = probs.gather(-1, x0[:, None]).squeeze(-1)
        else:
            confidence, x0 = probs.max(-1)
        if alg == "topk_margin":
            top = torch.sort(probs, -1, descending=True)[0]
            confidence = top[:, 0] - top[:, 1]
        elif alg == "entropy":
            confidence = (probs * torch.log(probs + 1e-10)).sum(-1)
        num = mask_index.sum() / 1
        number = int(num * (1 - s / t)) if i < settings.steps - 1 else int(num)
        full = torch.full(mask_index.shape, -torch.inf)
        full[mask_index] = confidence
        if number > 0:
            chosen = full.argsort(descending=True, stable=True)[:number]
            x_ = torch.full_like(x[0], mask_id)
            x_[mask_index] = x0
            x[0, chosen] = x_[chosen]
    return x[0, start:].tolist()


def settings_of(spec):
    return sampler.SamplerSettings(**{"answer_len": 10, "steps": 4, **spec})


def assert_llada_s_tokens(backbone, runtime, settings, **rules):
    never = decoding.suppressed_token_ids(backbone)
    results = sampler.generate(backbone, runtime, requests(backbone), settings)
    for req, res in zip(requests(backbone), results):
        slot, passes = llada_reference(backbone, req, settings, never, **rules)
        assert res.slot_ids == slot and res.forward_passes == passes
    return results


@pytest.mark.parametrize("family", ["bert", "llada"])
@pytest.mark.parametrize("spec", [{}, {"cfg_scale": 1.0}, {"cfg_scale": 0.5}, {"block_len": 5, "cfg_scale": 1.0},
                                  {"remasking": "random"}, {"remasking": "random", "block_len": 5},
                                  {"temperature": 0.8}, {"temperature": 1.0, "cfg_scale": 1.0, "block_len": 5}])
def test_guidance_blocks_remasking_and_temperature_write_generate_py_s_tokens(loaded, family, spec):
    """LLaDA's generate.py; the family's name in the test id (CI's 4.x stage selects llada and dream)."""
    backbone, runtime = loaded(family)
    assert_llada_s_tokens(backbone, runtime, settings_of(spec))


@pytest.mark.parametrize("family", ["llada"])
@pytest.mark.parametrize("chat", [False, True], ids=["plain", "chat"])
@pytest.mark.parametrize("spec", [{"logits_eos_inf": True}, {"confidence_eos_eot_inf": True},
                                  {"logits_eos_inf": True, "confidence_eos_eot_inf": True, "cfg_scale": 1.0},
                                  {"confidence_eos_eot_inf": True, "temperature": 0.8}])
def test_end_token_rules_write_generate_py_s_tokens(loaded, family, chat, spec):
    """LLaDA's ids from the checkpoint (EOS 126081, end of turn 126348, as on LLaDA-8B), under both layouts."""
    from tiny_families import LLADA

    backbone, runtime = loaded(family, chat=chat)
    settings = settings_of(spec)
    ends = decoding.end_token_id(backbone, "eos"), decoding.end_token_id(backbone, "eot")
    assert ends == (LLADA["eos"], LLADA["eot"])
    rules = {"eos": LLADA["eos"] if settings.logits_eos_inf else None,
             "unconfident": (LLADA["eos"], LLADA["eot"]) if settings.confidence_eos_eot_inf else ()}
    for res in assert_llada_s_tokens(backbone, runtime, settings, **rules):
        assert not settings.logits_eos_inf or LLADA["eos"] not in res.slot_ids


def median_first_confidence(backbone, settings):
    """The median confidence of the first query's first step: a threshold that commits some, not all."""
    req = requests(backbone)[0]
    x = start_sequence(backbone, req, settings.answer_len)
    where = (x[0] == backbone.ids.mask).nonzero().flatten()
    with torch.no_grad():
        logits = guided_logits(backbone, x, len(req.prompt_ids), settings.cfg_scale)[where]
    logits[:, decoding.suppressed_token_ids(backbone)] = -torch.inf
    if settings.temperature > 0 and settings.remasking == "low_confidence":  # a drawn token's expected probability
        return float((torch.softmax(logits, -1) ** 2).sum(-1).median())
    return float(_llada_confidence(logits, logits.argmax(-1), settings, (), None).median())


@pytest.mark.parametrize("family", ["bert", "llada"])
@pytest.mark.parametrize("spec", [{}, {"remasking": "topk_margin"}, {"cfg_scale": 1.0}, {"block_len": 5},
                                  {"temperature": 0.8, "cfg_scale": 0.5}])
def test_threshold_decoding_writes_fast_dllm_s_tokens(loaded, family, spec):
    backbone, runtime = loaded(family)
    rough = settings_of({"decoding": "threshold", **spec})
    settings = settings_of({"decoding": "threshold", **spec, "threshold": median_first_confidence(backbone, rough)})
    results = assert_llada_s_tokens(backbone, runtime, settings)
    masked = [settings.answer_len - r.locked for r in results]
    assert any(1 < r.forward_passes < n for r, n in zip(results, masked))  # the threshold decided, not the floor


@pytest.mark.parametrize("family", ["llada"])
@pytest.mark.parametrize("spec", [{"logits_eos_inf": True, "confidence_eos_eot_inf": True},
                                  {"confidence_eos_eot_inf": True, "cfg_scale": 1.0, "block_len": 5}])
def test_threshold_decoding_with_the_end_token_rules(loaded, family, spec):
    from tiny_families import LLADA

    backbone, runtime = loaded(family)
    rough = settings_of({"decoding": "threshold", **spec})
    settings = settings_of({"decoding": "threshold", **spec, "threshold": median_first_confidence(backbone, rough)})
    assert_llada_s_tokens(backbone, runtime, settings, eos=LLADA["eos"] if settings.logits_eos_inf else None,
                          unconfident=(LLADA["eos"], LLADA["eot"]))


class _Sharpen(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, logits):
        return logits * self.factor


@pytest.fixture(scope="module")
def sharpened(tmp_path_factory):
    """(backbone, runtime) of a family's tiny checkpoint, sharpened: its head's logits multiplied by 16, so
    that the top probabilities of two positions (and a position's two best tokens) are far apart, not a
    rounding apart, and the reference's full forward and the sampler's head at the masked positions order
    them alike; every other linear layer's weights by 8, so that attention is peaked and what the unguided
    row hides changes the predictions (at initialisation a tiny model barely reads its context)."""
    cache = {}

    def load(family):
        if family in REMOTE and not remote_code_runs():
            pytest.skip("remote code needs transformers 4.x (.venv-remote, envs/requirements-remote.txt)")
        if family not in cache:
            path = BUILDERS[family](tmp_path_factory.mktemp("sharpened") / family)
            runtime = bb.pick_runtime("cpu")
            backbone = bb.load_backbone(path, runtime=runtime, trust_remote_code=family in REMOTE)
            assert backbone.head, f"{family}: no separable head to sharpen"
            with torch.no_grad():
                for name, module in backbone.model.named_modules():
                    if isinstance(module, torch.nn.Linear) and not any(
                            name == head or name.startswith(f"{head}.") for head in backbone.head):
                        module.weight.mul_(8.0)
            parent, _, leaf = backbone.head[-1].rpartition(".")
            owner = backbone.model.get_submodule(parent) if parent else backbone.model
            setattr(owner, leaf, torch.nn.Sequential(getattr(owner, leaf), _Sharpen(16.0)))
            backbone.model.eval()
            cache[family] = backbone, runtime
        return cache[family]
    return load


GUIDED_QUESTIONS = [*QUESTIONS, "Where is the capital city?", "Which planet is the largest?",
                    "What flows north of the sea?", "Which city is the largest?"]
GUIDED_ANCHORS = [*ANCHORS, "the capital", "the largest planet of the sun", "the river flows", "the city"]


def question_anchor_requests(backbone):
    tok = backbone.tokenizer
    return [sampler.Request(f"q{i}", layout.prompt_ids(tok, q, backbone.template), layout.anchor_ids(tok, a))
            for i, (q, a) in enumerate(zip(GUIDED_QUESTIONS, GUIDED_ANCHORS))]


@torch.no_grad()
def generate_py_with_the_anchor_as_prompt(backbone, req, settings, never, anchor_in_unguided):
    """LLaDA's generate() handed question + anchor as its prompt, one block of answer_len - |anchor|
    positions, remasking low_confidence. Its guidance masks prompt_index, every prompt position, in the
    unguided row (``anchor_in_unguided=False``); the other reading masks the question's positions only.
    Gumbel noise (temperature > 0) is drawn at the masked positions from the query's stream, in the
    sampler's order. Returns the tokens after the prompt."""
    mask_id, g = backbone.ids.mask, generator_of(settings, req)
    prompt = req.prompt_ids + req.anchor_ids
    x = torch.tensor([prompt + [mask_id] * (settings.answer_len - len(req.anchor_ids))])
    prompt_index = x[0] != mask_id
    unguided = prompt_index if anchor_in_unguided else torch.arange(x.shape[1]) < len(req.prompt_ids)
    n = int((~prompt_index).sum())
    for quota in [n // settings.steps + (1 if i < n % settings.steps else 0) for i in range(settings.steps)]:
        if quota == 0:
            continue
        mask_index = x[0] == mask_id
        logits = full_logits(backbone, x)
        if settings.cfg_scale > 0:
            un_x = x.clone()
            un_x[0, unguided] = mask_id
            un = full_logits(backbone, un_x)
            logits = un + (settings.cfg_scale + 1) * (logits - un)
        logits[:, never] = -torch.inf
        where = mask_index.nonzero().flatten()
        if settings.temperature > 0:
            u = torch.rand(len(where), logits.shape[1], generator=g).double()
            x0 = (logits[where].double().exp() / (-torch.log(u)) ** settings.temperature).argmax(-1)
        else:
            x0 = logits[where].argmax(-1)
        p = torch.softmax(logits[where], -1).gather(-1, x0[:, None]).squeeze(-1)
        confidence = torch.full((x.shape[1],), -torch.inf)
        confidence[where] = p
        x0_full = x[0].clone()
        x0_full[where] = x0
        chosen = confidence.argsort(descending=True, stable=True)[:quota]
        x[0, chosen] = x0_full[chosen]
    return x[0, len(prompt):].tolist()


@pytest.mark.parametrize("family", ["bert", "llada"])
@pytest.mark.parametrize("cfg_anchor", ["visible", "masked"])
@pytest.mark.parametrize("spec", [{"cfg_scale": 1.0}, {"cfg_scale": 0.5, "steps": 6},
                                  {"cfg_scale": 1.0, "temperature": 1.0}])
def test_cfg_anchor_writes_generate_py_s_tokens_handed_question_and_anchor(sharpened, family, cfg_anchor, spec):
    """cfg_anchor: masked is generate.py's own reading (its prompt_index covers the anchor); visible, the
    same loop with the anchor left in the unguided row."""
    backbone, runtime = sharpened(family)
    settings = settings_of({"answer_len": 12, **spec, "cfg_anchor": cfg_anchor})
    never = decoding.suppressed_token_ids(backbone)
    reqs = question_anchor_requests(backbone)
    for req, res in zip(reqs, sampler.generate(backbone, runtime, reqs, settings)):
        assert res.slot_ids[:res.locked] == req.anchor_ids
        assert res.slot_ids[res.locked:] == generate_py_with_the_anchor_as_prompt(
            backbone, req, settings, never, anchor_in_unguided=cfg_anchor == "masked")


@pytest.mark.parametrize("family", ["bert", "llada"])
def test_the_two_cfg_anchor_readings_write_different_tokens(sharpened, family):
    backbone, runtime = sharpened(family)
    reqs = question_anchor_requests(backbone)
    slots = {anchor: [r.slot_ids for r in sampler.generate(backbone, runtime, reqs, settings_of(
        {"answer_len": 12, "cfg_scale": 1.0, "cfg_anchor": anchor}))] for anchor in ("visible", "masked")}
    assert slots["visible"] != slots["masked"]


@pytest.mark.parametrize("family", ["bert", "dream"])
@pytest.mark.parametrize("spec", [
    {"remasking": "low_confidence"}, {"remasking": "topk_margin"}, {"remasking": "entropy"},
    {"remasking": "entropy", "top_p": 0.3, "top_k": 8}, {"remasking": "low_confidence", "top_p": 0.2},
    {"remasking": "origin"}, {"remasking": "origin", "eps": 0.1},
    {"remasking": "entropy", "temperature": 0.2, "top_p": 0.95}, {"remasking": "topk_margin", "temperature": 0.7},
    {"remasking": "entropy", "temperature": 1.0, "top_k": 5},
])
def test_time_schedule_and_algorithms_write_generation_utils_s_tokens(loaded, family, spec):
    """Dream's generation_utils.py _sample."""
    backbone, runtime = loaded(family)
    settings = settings_of({"schedule": "dream", **spec})
    never = decoding.suppressed_token_ids(backbone)
    alg = {"low_confidence": "maskgit_plus"}.get(spec["remasking"], spec["remasking"])
    for req, res in zip(requests(backbone), sampler.generate(backbone, runtime, requests(backbone), settings)):
        assert res.slot_ids == dream_reference(backbone, req, settings, never, alg)


def test_a_token_drawn_at_temperature_follows_dream_s_categorical():
    """Gumbel-max on the filtered, tempered logits draws each token with Dream's sample_tokens probability."""
    torch.manual_seed(0)
    logits = torch.randn(1, 40) * 2
    settings = sampler.SamplerSettings(temperature=0.7, top_p=0.9, top_k=12)
    probs = torch.softmax(_top_p_top_k(logits / 0.7, 0.9, 12), -1)[0].double()
    draws = 20000
    vocabulary = decoding.Vocabulary(torch.zeros(40, dtype=torch.bool), ())
    tokens, _ = decoding.propose(logits.expand(draws, 40), settings, vocabulary,
                                 [sampler.query_generator(0, "q")], torch.zeros(draws, dtype=torch.long))
    seen = torch.bincount(tokens, minlength=40).double() / draws
    assert (seen[probs == 0] == 0).all() and int((probs > 0).sum()) <= 12
    assert ((seen - probs).abs() <= 5 * (probs * (1 - probs) / draws).sqrt() + 1e-3).all()


def test_alg_temp_draws_positions_as_dream_s_multinomial():
    """Dream's alg_temp > 0: a step's positions drawn without replacement from softmax(confidence / alg_temp);
    each position's chance of being among the two drawn, exactly, against the sampler's frequencies."""
    confidence = torch.tensor([0.30, 0.05, 0.20, 0.10, 0.25, 0.15])
    weights = torch.softmax(confidence.double() / 0.1, -1)
    exact = weights + sum(weights[j] * weights / (1 - weights[j]) * (torch.arange(6) != j) for j in range(6))
    generator, draws, seen = sampler.query_generator(0, "q"), 6000, torch.zeros(6, dtype=torch.double)
    rows = torch.zeros(6, dtype=torch.long)
    for _ in range(draws):
        seen += decoding._drawn_positions(confidence, rows, torch.tensor([2]), 0.1, [generator]).double()
    seen /= draws
    assert math.isclose(float(exact.sum()), 2.0) and (seen.sum() - 2).abs() < 1e-9
    assert ((seen - exact).abs() <= 5 * (exact * (1 - exact) / draws).sqrt()).all()


@pytest.mark.parametrize("family", ["bert", "llada", "dream"])
@pytest.mark.parametrize("spec", [{"remasking": "entropy", "temperature": 0.7, "top_p": 0.9},
                                  {"remasking": "origin", "temperature": 0.7},
                                  {"remasking": "topk_margin", "alg_temp": 0.5},
                                  {"cfg_scale": 1.0, "temperature": 1.0}])
def test_new_options_keep_the_anchor_locked_and_each_query_s_randomness_its_own(loaded, family, spec):
    backbone, runtime = loaded(family)
    settings = settings_of({"schedule": "dream", **spec})
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


def test_confidence_eos_eot_inf_names_the_missing_end_of_turn_on_a_llada_checkpoint(tmp_path):
    """A LLaDA-style checkpoint whose tokenizer has no chat template: EOS is there, no end of turn."""
    if not remote_code_runs():
        pytest.skip("remote code needs transformers 4.x (.venv-remote, envs/requirements-remote.txt)")
    import json

    path = BUILDERS["llada"](tmp_path / "llada")
    tok_config = json.loads((path / "tokenizer_config.json").read_text())
    tok_config.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(tok_config))
    for extra in path.glob("chat_template.*"):
        extra.unlink()
    runtime = bb.pick_runtime("cpu")
    backbone = bb.load_backbone(path, runtime=runtime, trust_remote_code=True)
    sampler.generate(backbone, runtime, requests(backbone)[:1], settings_of({"logits_eos_inf": True}))
    with pytest.raises(InputError, match="generation.confidence_eos_eot_inf: .* no end-of-turn token .* set "
                                         "generation.confidence_eos_eot_inf: false"):
        sampler.generate(backbone, runtime, requests(backbone), settings_of({"confidence_eos_eot_inf": True}))


def test_ids_beyond_the_tokenizer_are_never_proposed(tmp_path):
    """A head with more rows than the tokenizer has tokens, the extra rows made the most likely."""
    from transformers import BertForMaskedLM

    from helpers import build_tiny_model

    path = build_tiny_model(tmp_path / "m")
    model = BertForMaskedLM.from_pretrained(path)
    size = model.config.vocab_size
    model.resize_token_embeddings(size + 16)
    with torch.no_grad():
        model.cls.predictions.decoder.bias[size:] = 50.0
    model.save_pretrained(path)
    runtime = bb.pick_runtime("cpu")
    backbone = bb.load_backbone(path, runtime=runtime)
    assert decoding.vocabulary_width(backbone) == size + 16 == len(backbone.tokenizer) + 16
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
    ({"cfg_anchor": "masked"}, "cfg_anchor"),
])
def test_combinations_that_make_no_sense_are_refused_naming_the_key(spec, key):
    assert [k for k, _ in sampler_settings.decoding_problems(spec)] == [key]
    with pytest.raises(InputError, match=f"generation.{key}: .*set "):
        sampler.SamplerSettings(**spec)
