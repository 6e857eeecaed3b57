import pytest

from anchormask.fileio import InputError
from anchormask.generation import arm_answers, decoding, sampler
from anchormask.model import layout
from bench.reference import num_transfer_tokens, reference_generate

pytestmark = pytest.mark.unit

QUESTIONS = ["Which river flows into the sea?", "What is the deepest lake?", "Where is the capital city?",
             "Which planet is the largest?"]
ANCHORS = ["the river flows north", "the deepest lake is in the north of the world", "the capital",
           "the largest planet of the sun"]
# The last anchor is longer than a 16-position slot: both samplers cut it the same way.
LONG_ANCHORS = [*ANCHORS[:3], "the largest planet of the sun is in the east of the world and the west of the sea"]


def requests(backbone, n=4):
    tok = backbone.tokenizer
    return [sampler.Request(f"q{i}", layout.prompt_ids(tok, q), layout.anchor_ids(tok, a))
            for i, (q, a) in enumerate(zip(QUESTIONS[:n], ANCHORS[:n]))]


@pytest.mark.parametrize("spec", [
    {}, {"temperature": 1.0}, {"remasking": "random"}, {"decoding": "threshold", "threshold": 0.5},
    {"extra_masks": 5},
])
def test_locked_anchor_survives_and_no_mask_is_left(tiny_backbone, spec):
    backbone, runtime = tiny_backbone
    settings = sampler.SamplerSettings(answer_len=16, steps=4, **spec)
    reqs = requests(backbone)
    results = sampler.generate(backbone, runtime, reqs, settings)
    suppressed = set(decoding.suppressed_token_ids(backbone))
    for req, res in zip(reqs, results):
        assert res.slot_ids[: res.locked] == req.anchor_ids
        assert len(res.slot_ids) == 16
        assert not suppressed & set(res.slot_ids[res.locked:])
        assert res.forward_passes >= 1


def test_fixed_decoding_uses_the_configured_steps_and_threshold_no_more(tiny_backbone):
    backbone, runtime = tiny_backbone
    reqs = requests(backbone)
    fixed = sampler.generate(backbone, runtime, reqs, sampler.SamplerSettings(answer_len=20, steps=5))
    assert [r.forward_passes for r in fixed] == [5, 5, 5, 5]
    fast = sampler.generate(backbone, runtime, reqs, sampler.SamplerSettings(
        answer_len=20, steps=5, decoding="threshold", threshold=0.01))
    assert all(r.forward_passes == 1 for r in fast)  # everything clears a 1% threshold at once


def test_outputs_do_not_depend_on_batch_composition(tiny_backbone):
    backbone, runtime = tiny_backbone
    reqs = requests(backbone)
    settings = sampler.SamplerSettings(answer_len=16, steps=4, temperature=0.7)
    together = sampler.generate(backbone, runtime, reqs, settings)
    alone = [sampler.generate(backbone, runtime, [r], settings)[0] for r in reqs]
    assert [r.slot_ids for r in together] == [r.slot_ids for r in alone]


def test_same_seed_same_output_other_seed_other_output(tiny_backbone):
    backbone, runtime = tiny_backbone
    reqs = requests(backbone)

    def make(seed):
        return [r.slot_ids for r in sampler.generate(
            backbone, runtime, reqs, sampler.SamplerSettings(answer_len=16, steps=4, temperature=2.0, seed=seed))]

    assert make(1) == make(1)
    assert make(1) != make(2)


def test_long_anchor_is_truncated_or_refused(tiny_backbone):
    backbone, runtime = tiny_backbone
    long = sampler.Request("q-long", layout.prompt_ids(backbone.tokenizer, "what"), list(range(5, 25)))
    res = sampler.generate(backbone, runtime, [long], sampler.SamplerSettings(answer_len=8, steps=2))[0]
    assert res.anchor_truncated and res.locked == 7 and res.slot_ids[:7] == list(range(5, 12))
    with pytest.raises(sampler.AnchorTooLong, match="q-long.*answer_len"):
        sampler.generate(backbone, runtime, [long], sampler.SamplerSettings(answer_len=8, long_anchor="fail"))


def test_extra_masks_change_the_context_not_the_answer_length(tiny_backbone):
    backbone, runtime = tiny_backbone
    reqs = requests(backbone)
    seen = []
    sampler.generate(backbone, runtime, reqs[:1], sampler.SamplerSettings(answer_len=10, steps=2, extra_masks=3),
                     observer=lambda obs: seen.append(obs))
    obs = seen[-1]
    start = int(obs.slot_start[0])
    tail = obs.input_ids[0, start + 10: start + 13]
    assert (tail == backbone.mask_token_id).all() and not obs.masked[0, start + 10:].any()
    assert len(seen) == 2 and obs.attention_mask[0, : start + 13].all()


def test_post_anchor_text_stops_at_the_end_of_answer_token():
    res = sampler.Result("q", [7, 8, 9, 3, 10, 11], locked=2, anchor_truncated=False, forward_passes=1)
    assert arm_answers.post_anchor_ids(res, 3) == [9]
    assert arm_answers.post_anchor_ids(res, None) == [9, 3, 10, 11]


def test_observer_sees_prefix_anchor_and_answer_positions(tiny_backbone):
    backbone, runtime = tiny_backbone
    reqs = requests(backbone, 2)
    seen = []
    sampler.generate(backbone, runtime, reqs, sampler.SamplerSettings(answer_len=12, steps=3), observer=seen.append)
    assert [o.step for o in seen] == [0, 1, 2]
    first = seen[0]
    by_id = {r.query_id: r for r in reqs}
    assert sorted(first.query_ids) == sorted(by_id)
    for row, req in enumerate(by_id[q] for q in first.query_ids):  # rows in batch order (by prompt length)
        assert int(first.slot_start[row]) == len(req.prompt_ids) and int(first.locked[row]) == len(req.anchor_ids)
        assert int(first.masked[row].sum()) == 12 - len(req.anchor_ids)


def test_blocks_are_decoded_left_to_right_with_a_share_of_the_steps(tiny_backbone):
    backbone, runtime = tiny_backbone
    req = sampler.Request("q", layout.prompt_ids(backbone.tokenizer, "what"), [10, 11])
    seen = []
    res = sampler.generate(backbone, runtime, [req], sampler.SamplerSettings(answer_len=12, steps=6, block_len=4),
                           observer=seen.append)[0]
    start = len(req.prompt_ids)
    assert res.forward_passes == 6 and len(seen) == 6  # three blocks x two steps
    after_first_block = seen[2].masked[0, start:start + 12]
    assert not after_first_block[:4].any() and after_first_block[4:].all()
    assert res.slot_ids[:2] == [10, 11]


# --------------------------------------------------------------------------- equivalence with LLaDA's generate()

@pytest.mark.parametrize("answer_len,steps,block_len", [(16, 4, 0), (24, 8, 0), (12, 12, 0), (24, 6, 8), (32, 8, 8)])
def test_reference_sampler_writes_the_project_samplers_tokens(tiny_backbone, answer_len, steps, block_len):
    backbone, runtime = tiny_backbone
    tok = backbone.tokenizer
    requests = [sampler.Request(f"q{i}", layout.prompt_ids(tok, q), layout.anchor_ids(tok, a))
                for i, (q, a) in enumerate(zip(QUESTIONS, LONG_ANCHORS))]
    settings = sampler.SamplerSettings(answer_len=answer_len, steps=steps, block_len=block_len)
    results = sampler.generate(backbone, runtime, requests, settings)
    suppressed = decoding.suppressed_token_ids(backbone)
    for req, res in zip(requests, results):
        slot, passes = reference_generate(backbone.model, req.prompt_ids, req.anchor_ids, answer_len=answer_len,
                                          steps=steps, mask_id=backbone.mask_token_id, suppressed=suppressed,
                                          block_len=block_len)
        assert slot == res.slot_ids
        assert passes == res.forward_passes
    if answer_len <= 16:  # the long anchor is cut, the same way on both sides
        assert any(r.anchor_truncated for r in results)


@pytest.mark.parametrize("cfg_anchor", ["visible", "masked"])
@pytest.mark.parametrize("answer_len,steps,block_len", [(16, 4, 0), (24, 6, 8)])
def test_reference_sampler_with_guidance_writes_the_project_samplers_tokens(tiny_backbone, cfg_anchor, answer_len,
                                                                             steps, block_len):
    """bench/reference.py's generate.py guidance (one forward over the sequence and its unguided copy) under
    each cfg_anchor reading. Measured on the embedded base (config.yaml's generation, cfg_scale 1.0): each
    reading equals its reference on 63 of the 63 main queries, the other reading's on none."""
    backbone, runtime = tiny_backbone
    requests_ = requests(backbone)
    settings = sampler.SamplerSettings(answer_len=answer_len, steps=steps, block_len=block_len, cfg_scale=1.0,
                                       cfg_anchor=cfg_anchor)
    suppressed = decoding.suppressed_token_ids(backbone)
    for req, res in zip(requests_, sampler.generate(backbone, runtime, requests_, settings)):
        assert (res.slot_ids, res.forward_passes) == reference_generate(
            backbone.model, req.prompt_ids, req.anchor_ids, answer_len=answer_len, steps=steps,
            mask_id=backbone.mask_token_id, suppressed=suppressed, block_len=block_len, cfg_scale=1.0,
            cfg_anchor=cfg_anchor)


@pytest.mark.parametrize("masked,steps", [(10, 4), (3, 8), (16, 16), (47, 16), (0, 4), (7, 1)])
def test_schedule_is_llada_s_without_its_empty_steps(masked, steps):
    """LLaDA's quotas (masked // steps each, the remainder first) minus the steps that commit
    nothing: every masked position is committed within the steps, at least one per step."""
    schedule = decoding.transfer_schedule(masked, steps)
    assert schedule == [n for n in num_transfer_tokens(masked, steps) if n]
    assert sum(schedule) == masked and len(schedule) <= steps and all(n >= 1 for n in schedule)


@pytest.mark.parametrize("spec,message", [
    ({"answer_len": 20, "block_len": 8}, "generation.block_len: 8 does not divide generation.answer_len = 20; "
     "semi-autoregressive blocks must tile the answer slot: use 0 \\(one block\\) or one of 1, 2, 4, 5, 10, 20"),
    ({"answer_len": 24, "block_len": 8, "steps": 8}, "generation.steps: 8 is not a multiple of the 3 blocks "
     r"\(answer_len / block_len\); each block gets steps / blocks denoising steps: use a multiple of 3, e.g. 6 or 9"),
])
def test_block_arithmetic_that_does_not_divide_is_an_error(spec, message):
    with pytest.raises(InputError, match=message):
        sampler.SamplerSettings(**spec)


def test_block_arithmetic_is_refused_when_the_config_is_read_not_in_a_job():
    from anchormask.settings import config
    from helpers import REPO

    cfg = config.load(REPO / "config.yaml")
    cfg["generation"].update(answer_len=24, block_len=32)
    with pytest.raises(config.ConfigError, match=r"config.yaml: generation.block_len: 32 does not divide "
                                                 r"generation.answer_len = 24; .* one of 1, 2, 3, 4, 6, 8, 12, 24"):
        config.validate(cfg)


def test_a_sequence_longer_than_the_model_allows_is_named_before_any_forward(tiny_backbone):
    backbone, runtime = tiny_backbone  # max_position_embeddings 96
    reqs = requests(backbone)
    longest = max(reqs, key=lambda r: len(r.prompt_ids))
    fits = 96 - len(longest.prompt_ids) - 4
    sampler.generate(backbone, runtime, reqs, sampler.SamplerSettings(answer_len=fits, steps=1, extra_masks=4))
    with pytest.raises(InputError,
                       match=rf"query {longest.query_id}: prompt \({len(longest.prompt_ids)} tokens\) "
                             rf"\+ generation.answer_len \({fits + 1}\) \+ extra masks \(4\) = 97 positions, "
                             rf"more than the base allows \(max_position_embeddings = 96 in .*config.json\); "
                             rf"lower generation.answer_len .* to at most {fits}"):
        sampler.generate(backbone, runtime, reqs, sampler.SamplerSettings(answer_len=fits + 1, steps=1, extra_masks=4))


def test_batches_hold_prompts_of_similar_length_and_results_come_back_in_request_order(tiny_backbone):
    backbone, runtime = tiny_backbone
    reqs = [sampler.Request(f"q{i}", list(range(1, 2 + n)), [10]) for i, n in enumerate([5, 1, 4, 2, 3])]
    assert sampler._batches(backbone, reqs, 2) == [[1, 3], [4, 2], [0]]  # by prompt length, shortest first
    settings = sampler.SamplerSettings(answer_len=6, steps=2, batch_size=2)
    alone = [sampler.generate(backbone, runtime, [r], settings)[0] for r in reqs]
    assert sampler.generate(backbone, runtime, reqs, settings) == alone


def test_the_record_names_cfg_anchor_only_with_guidance():
    """Without guidance cfg_anchor shapes no token: a record reads as before the key (the default study's
    outputs unchanged); with it, the record says which reading wrote the tokens."""
    assert "cfg_anchor" not in sampler.SamplerSettings().record()
    assert sampler.SamplerSettings(cfg_scale=1.0).record()["cfg_anchor"] == "visible"
    assert sampler.SamplerSettings(cfg_scale=0.5, cfg_anchor="masked").record()["cfg_anchor"] == "masked"
    with pytest.raises(InputError, match="generation.cfg_anchor: .*set generation.cfg_scale > 0, or cfg_anchor: "
                                         "visible"):
        sampler.SamplerSettings(cfg_anchor="masked")
