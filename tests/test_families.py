"""Every family on tiny random checkpoints: loading, ids, head, shift, layout, padding, batches, probes.

LLaDA- and Dream-style checkpoints run their own (test-written) modelling code through
trust_remote_code; that code needs transformers 4.x as the real code does, so under the default
transformers 5 those tests check the loading error instead, and CI runs the tests whose names
say llada or dream again in .venv-remote (envs/requirements-remote.txt).
"""

import json
import shutil

import pytest
import torch

from anchormask.generation import sampler
from anchormask.model import backbone as bb
from anchormask.model import layout
from anchormask.probes import attention
from anchormask.training import strategies, train
from helpers import assert_one_pass_probe_equals_two_passes, tiny_train_settings
from tiny_families import BUILDERS, DREAM, FAMILIES, LLADA, REMOTE, build_llada, remote_code_runs

pytestmark = pytest.mark.unit

CPU = bb.pick_runtime("cpu")
needs_remote = pytest.mark.skipif(not remote_code_runs(), reason="remote code needs transformers 4.x "
                                  "(.venv-remote, envs/requirements-remote.txt)")


def runnable(family):
    return family not in REMOTE or remote_code_runs()


class Checkpoints(dict):
    """Family -> checkpoint folder, built on first use (the 4.x environment builds only LLaDA and Dream)."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, family):
        self[family] = BUILDERS[family](self.root / family)
        return self[family]


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    return Checkpoints(tmp_path_factory.mktemp("families"))


@pytest.fixture(scope="session")
def loaded(checkpoints):
    cache = {}

    def load(family):
        if family not in cache:
            cache[family] = bb.load_backbone(checkpoints[family], trust_remote_code=family in REMOTE, runtime=CPU)
            cache[family].model.eval()
        return cache[family]
    return load


def prompts(backbone, n=4):
    questions = ["which river flows into the sea ?", "what is the deepest lake ?", "where is the capital city ?",
                 "which star is the largest in the world ?"]
    return [sampler.Request(f"q{i}", layout.prompt_ids(backbone.tokenizer, q, backbone.template),
                            layout.anchor_ids(backbone.tokenizer, "the river flows"))
            for i, q in enumerate(questions[:n])]


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in REMOTE])
def test_encoder_families_load_with_their_head_and_ids(loaded, family):
    b = loaded(family)
    heads = {"bert": ("cls",), "roberta": ("lm_head",), "electra": ("generator_predictions", "generator_lm_head"),
             "distilbert": ("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector")}
    assert b.head == heads[family] and b.template.kind == "pair"
    assert b.ids.end == b.tokenizer.sep_token_id and b.ids.end not in b.ids.never
    assert len(b.projection_modules("full")) == 8 and str(b.model.dtype) == "torch.float32"


@pytest.mark.parametrize("family", FAMILIES)
def test_head_at_chosen_positions_equals_the_full_forward(loaded, family):
    if not runnable(family):
        pytest.skip("remote code needs transformers 4.x")
    b = loaded(family)
    req = prompts(b, 1)[0]
    ids = torch.tensor([req.prompt_ids + req.anchor_ids + [b.ids.mask] * 3])
    rows, cols = torch.zeros(4, dtype=torch.long), torch.arange(ids.shape[1] - 4, ids.shape[1])
    with torch.no_grad():
        full = b.model(input_ids=ids).logits
        chosen = b.logits_at(ids, torch.ones_like(ids), rows, cols)
    source = cols - 1 if family == "dream" else cols  # Dream: position i predicts token i + 1
    assert torch.allclose(chosen, full[rows, source], atol=1e-5)


@pytest.mark.parametrize("family", REMOTE)
def test_remote_code_under_transformers_5_says_which_transformers_it_needs(checkpoints, family):
    if remote_code_runs():
        pytest.skip("this environment runs the remote code")
    with pytest.raises(bb.BackboneError, match=r"transformers 4\.38-4\.46.*requirements-remote\.txt"):
        bb.load_backbone(checkpoints[family], trust_remote_code=True, runtime=CPU)


def test_missing_mask_id_is_an_error_not_llada_s_class_default(tmp_path):
    path = build_llada(tmp_path / "llada", mask_in_config=False)
    with pytest.raises(bb.BackboneError, match="mask_token_id.*config.json"):
        bb.load_backbone(path, trust_remote_code=True, runtime=CPU)


def test_missing_dream_tokenizer_code_is_named(tmp_path, checkpoints):
    import shutil

    shutil.copytree(checkpoints["dream"], tmp_path / "dream")
    (tmp_path / "dream" / "tokenization_dream.py").unlink()
    with pytest.raises(bb.BackboneError, match="could not load the tokenizer.*files found"):
        bb.load_backbone(tmp_path / "dream", trust_remote_code=True, runtime=CPU)


def test_projections_named_in_config_override_the_family(loaded, checkpoints):
    b = bb.load_backbone(checkpoints["distilbert"], runtime=CPU,
                         projections={"q": "q_lin", "k": "k_lin", "v": "v_lin", "o": "out_lin"})
    assert b.modules_of_kind("o")[0].endswith("attention.out_lin")
    with pytest.raises(bb.BackboneError, match="base.projections"):
        bb.load_backbone(checkpoints["distilbert"], runtime=CPU,
                         projections={"q": "q_lin", "k": "k_lin", "v": "v_lin", "o": "nothing"})


@needs_remote
def test_llada_ids_layout_and_padding_facts(loaded):
    b = loaded("llada")
    assert b.family.name == "llada" and b.head == ("model.transformer.ff_out",) and b.family.honours_padding is False
    assert (b.ids.mask, b.ids.end, b.ids.pad, b.ids.start) == (LLADA["mask"], LLADA["eos"], LLADA["eos"], LLADA["bos"])
    assert b.ids.end not in b.ids.never and b.ids.mask in b.ids.never  # pad == eos must not stop answers ending
    assert b.tokenizer.mask_token_id is None and b.model.config.vocab_size == LLADA["vocab"]
    enc = layout.encode_pair(b.tokenizer, "what is the sea ?", "the sea is deep .", 64, template=b.template)
    assert enc.input_ids[0] == LLADA["bos"] and enc.input_ids[-1] == LLADA["eos"] and enc.classes[-1] == 2
    assert b.tokenizer.convert_ids_to_tokens(enc.input_ids[enc.classes.index(2) - 1]) == "\n"
    ids = torch.tensor([enc.input_ids])
    with torch.no_grad():  # the forward ignores attention_mask: why padded rows must never reach it
        plain = b.model(input_ids=ids).logits
        masked = b.model(input_ids=ids, attention_mask=torch.zeros_like(ids)).logits
        with pytest.raises(ValueError, match="output_attentions"):
            b.model(input_ids=ids, output_attentions=True)
    assert torch.equal(plain, masked)


@needs_remote
def test_dream_slow_tokenizer_shift_and_sdpa_facts(loaded):
    b = loaded("dream")
    assert not b.tokenizer.is_fast and b.family.shifted and b.ids.mask == DREAM["mask"]
    assert b.ids.end == b.ids.pad == DREAM["eos"] and b.ids.end not in b.ids.never
    enc = layout.encode_pair(b.tokenizer, "what is the sea ?", "the sea is deep .", 64, template=b.template)
    assert enc.input_ids[0] == DREAM["bos"] and enc.input_ids[-1] == DREAM["eos"]
    ids = torch.tensor([enc.input_ids])
    with pytest.raises(RuntimeError):  # a 2-D integer mask reaches SDPA as it is, and SDPA refuses it
        b.model(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert b.padding_mask(torch.ones_like(ids)) is None


CHAT_PAIR = ("what is the sea ?", "the sea flows into the lake .")
CHAT_Q, CHAT_A = ["what", "is", "the", "sea", "?"], ["the", "sea", "flows", "into", "the", "lake", "."]
# The exact chat-layout sequence of each tiny checkpoint (docs/protocol.md, "Sequence layout"): the template's text
# before Q, Q, the text after Q (user turn closed, assistant turn opened), A, the end-of-turn token.
CHAT_TOKENS = {
    "llada": (["<|startoftext|>", "<|start_header_id|>", "user", "<|end_header_id|>", "\n", "\n"],
              ["<|eot_id|>", "<|start_header_id|>", "assistant", "<|end_header_id|>", "\n", "\n"], "<|eot_id|>"),
    "dream": (["<|im_start|>", "system", "\n", "you", "are", "a", "helpful", "assistant", ".", "<|im_end|>", "\n",
               "<|im_start|>", "user", "\n"], ["<|im_end|>", "\n", "<|im_start|>", "assistant", "\n"], "<|im_end|>"),
}


@needs_remote
@pytest.mark.parametrize("family", REMOTE)
def test_chat_layout_token_sequence_of_llada_and_dream(checkpoints, family):
    b = bb.load_backbone(checkpoints[family], trust_remote_code=True, runtime=CPU, layout="chat")
    tok, (before, after, end) = b.tokenizer, CHAT_TOKENS[family]
    enc = layout.encode_pair(tok, *CHAT_PAIR, 64, template=b.template)
    assert tok.convert_ids_to_tokens(enc.input_ids) == before + CHAT_Q + after + CHAT_A + [end]
    assert enc.classes == ([layout.SPECIAL] * len(before) + [layout.QUESTION] * len(CHAT_Q)
                           + [layout.SPECIAL] * len(after) + [layout.ANSWER] * (len(CHAT_A) + 1))
    # The tokenizer's own template gives the same ids: the generation prompt, and the finished turn up to its end.
    user = [{"role": "user", "content": CHAT_PAIR[0]}]
    prompt = layout.prompt_ids(tok, CHAT_PAIR[0], b.template)
    assert prompt == list(tok.apply_chat_template(user, add_generation_prompt=True)) == enc.input_ids[:len(prompt)]
    whole = tok.apply_chat_template(user + [{"role": "assistant", "content": CHAT_PAIR[1]}])
    assert enc.input_ids == list(whole[:len(enc.input_ids)])
    # The end-of-turn token ends answers; the EOS padding after it is answer (LLaDA's SFT), so it may be proposed.
    eos = (LLADA if family == "llada" else DREAM)["eos"]
    assert b.ids.end == tok.convert_tokens_to_ids(end) != eos and b.ids.pad == eos
    assert b.ids.end not in b.ids.never and eos not in b.ids.never and b.ids.mask in b.ids.never
    short = layout.encode_pair(tok, "what is the sea ?", "the sea .", 64, template=b.template)
    ids, _, classes = layout.collate([enc, short], b.ids.pad, pad_is_answer=b.template.pad_is_answer)
    tail = slice(len(short.input_ids), None)
    assert ids[1, len(short.input_ids) - 1] == b.ids.end and set(ids[1, tail].tolist()) == {eos}
    assert set(classes[1, tail].tolist()) == {layout.ANSWER}


def test_chat_layout_needs_a_chat_template_and_an_end_of_turn_token(checkpoints, tmp_path):
    with pytest.raises(bb.BackboneError, match=r"bert: base.layout is chat, but the tokenizer has no chat template "
                                               r".*set base.layout: plain"):
        bb.load_backbone(checkpoints["bert"], runtime=CPU, layout="chat")
    path = shutil.copytree(checkpoints["bert"], tmp_path / "bert-chat")
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + ' over ' }}{% endfor %}"
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(bb.BackboneError, match=r"closes an assistant turn with ' over ', which does not start with "
                                               r"one special token .*no end-of-turn token"):
        bb.load_backbone(path, runtime=CPU, layout="chat")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_query_s_generation_does_not_depend_on_its_batch(loaded, family):
    if not runnable(family):
        pytest.skip("remote code needs transformers 4.x")
    b = loaded(family)
    reqs = prompts(b)
    settings = sampler.SamplerSettings(answer_len=10, steps=5, batch_size=4)
    together = sampler.generate(b, CPU, reqs, settings)
    alone = [sampler.generate(b, CPU, [r], settings)[0] for r in reqs]
    shuffled = sampler.generate(b, CPU, reqs[::-1], settings)[::-1]
    assert [r.slot_ids for r in together] == [r.slot_ids for r in alone] == [r.slot_ids for r in shuffled]
    assert all(r.slot_ids[:3] == reqs[0].anchor_ids[:3] for r in together)
    never = set(b.ids.never)
    assert not any(t in never for r in together for t in r.slot_ids[r.locked:])


@pytest.mark.parametrize("family", FAMILIES)
def test_one_training_step_learns_on_every_family(loaded, checkpoints, family, tmp_path):
    if not runnable(family):
        pytest.skip("remote code needs transformers 4.x")
    b = bb.load_backbone(checkpoints[family], trust_remote_code=family in REMOTE, runtime=CPU)
    settings = tiny_train_settings(seq_len=64)
    model = train.attach_lora(b, "full", settings)
    pairs = [("which river flows into the sea ?", "the river flows north into the sea ."),
             ("what is the deepest lake ?", "the deepest lake is in the north .")]
    encoded = [layout.encode_pair(b.tokenizer, q, a, 64, template=b.template) for q, a in pairs]
    gen = torch.Generator().manual_seed(0)
    from anchormask.training import masking

    loss, info = train.train_step(b, CPU, encoded, strategies.resolve("anchor"),
                                  settings, masking.MaskRatio(0.9, 0.9), gen)
    loss.backward()
    assert torch.isfinite(loss) and info["masked_tokens"] > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_probe_gives_probabilities_for_every_family(checkpoints, family):
    if not runnable(family):
        pytest.skip("remote code needs transformers 4.x")
    remote = family in REMOTE
    b = bb.load_backbone(checkpoints[family], trust_remote_code=remote, runtime=CPU,
                         attn_implementation=None if remote else "eager")
    req = prompts(b, 1)[0]
    ids = torch.tensor([req.prompt_ids + req.anchor_ids + [b.ids.mask] * 3])
    with torch.no_grad():
        attentions = attention.attention_forward(b, ids, torch.ones_like(ids))
    assert len(attentions) == 2
    for layer in attentions:
        assert layer.shape[-1] == ids.shape[1] and torch.allclose(layer.sum(-1), torch.ones(()), atol=1e-5)


@pytest.mark.parametrize("family", REMOTE)
def test_attention_probe_reads_the_sampler_s_own_pass_for_remote_families(checkpoints, family, monkeypatch):
    if not runnable(family):
        pytest.skip("remote code needs transformers 4.x")
    b = bb.load_backbone(checkpoints[family], trust_remote_code=True, runtime=CPU)
    b.model.eval()
    requests = prompts(b, 4)
    settings = sampler.SamplerSettings(answer_len=8, steps=4, batch_size=2, cfg_scale=1.0)  # two passes a step
    assert_one_pass_probe_equals_two_passes(b, CPU, requests, settings, monkeypatch)


def test_recorded_sdpa_matches_eager_attention(checkpoints):
    eager = bb.load_backbone(checkpoints["bert"], runtime=CPU, attn_implementation="eager")
    sdpa = bb.load_backbone(checkpoints["bert"], runtime=CPU, attn_implementation="sdpa")
    ids = torch.tensor([[2, 10, 11, 12, 3, 4, 4, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0]])
    with torch.no_grad():
        want = attention.attention_forward(eager, ids, mask)
        with attention.recorded_sdpa() as seen:
            sdpa.hidden_states(ids, mask)
    assert len(seen) == len(want)
    for got, ref in zip(seen, want):
        assert torch.allclose(got[..., :7, :], ref[..., :7, :], atol=1e-5)


def test_gradient_checkpointing_switch_keeps_the_loss(checkpoints):
    losses = []
    for checkpointing in (False, True):
        b = bb.load_backbone(checkpoints["bert"], runtime=CPU)
        if checkpointing:
            train.enable_checkpointing(b)
        torch.manual_seed(0)
        train.attach_lora(b, "full", tiny_train_settings())
        enc = [layout.encode_pair(b.tokenizer, "what is the sea ?", "the sea is deep .", 40)]
        from anchormask.training import masking

        loss, _ = train.train_step(b, CPU, enc, strategies.resolve("anchor"),
                                   tiny_train_settings(), masking.MaskRatio(0.9, 0.9),
                                   torch.Generator().manual_seed(0))
        loss.backward()
        losses.append(float(loss.detach()))
    assert losses[0] == pytest.approx(losses[1])


def test_provenance_runtime_is_the_loaded_dtype(checkpoints):
    b = bb.load_backbone(checkpoints["bert"], runtime=CPU)
    assert bb.runtime_record(CPU, b.model) == "cpu+float32"
    raw = json.loads((checkpoints["bert"] / "config.json").read_text())
    assert bb.special_ids(b.tokenizer, raw, b.family, checkpoints["bert"]).mask == b.tokenizer.mask_token_id
