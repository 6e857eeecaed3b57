"""Activation checkpointing (train.gradient_checkpointing) on every family: the switch each base's code has,
read from its files at DAG build; LLaDA's own set_activation_checkpointing in the training job, with the
same loss and LoRA gradients as without it; a setting the base cannot honour refused before any job."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch

from anchormask.model import backbone as bb
from anchormask.model import checkpointing
from anchormask.schemas import document
from anchormask.settings import config, layers
from anchormask.training import masking, strategies, train
from helpers import REPO, build_tiny_model, tiny_train_settings
from tiny_families import BUILDERS, REMOTE_CODE, remote_code_runs

pytestmark = pytest.mark.unit

CPU = bb.pick_runtime("cpu")
needs_remote = pytest.mark.skipif(not remote_code_runs(), reason="remote code needs transformers 4.x "
                                  "(.venv-remote, envs/requirements-remote.txt)")
AUTO_MODEL = {"llada": "modeling_llada.LLaDAModelLM", "dream": "modeling_dream.DreamModel"}


def code_only(tmp_path, family: str, source: str | None = None):
    """A checkpoint folder with a family's modelling code and config.json, no weights (enough for the DAG
    build); ``source`` replaces the modelling file's text."""
    path = tmp_path / family
    shutil.copytree(REMOTE_CODE / family, path)
    module = AUTO_MODEL[family].split(".")[0]
    if source is not None:
        (path / f"{module}.py").write_text(source)
    (path / "config.json").write_text(json.dumps({"model_type": family, "auto_map": {"AutoModel": AUTO_MODEL[family]},
                                                  "max_sequence_length": 256}))
    return path


@pytest.fixture(scope="module")
def default():
    return config.load(REPO / "config.yaml")


def test_the_strategies_are_the_schemas():
    schema = document("config")["$defs"]["train_settings"]["properties"]["gradient_checkpointing"]
    assert tuple(schema["oneOf"][1]["enum"]) == checkpointing.STRATEGIES


@pytest.mark.parametrize("family, switch", [("llada", "llada"), ("dream", "transformers")])
def test_llada_and_dream_switches_are_read_from_their_code_without_importing_it(tmp_path, family, switch):
    path = code_only(tmp_path, family)
    raw = json.loads((path / "config.json").read_text())
    assert checkpointing.declared_switch(path, raw, trust_remote_code=True) == switch
    stripped = (path / f"{AUTO_MODEL[family].split('.')[0]}.py").read_text().replace(
        "set_activation_checkpointing", "set_something_else").replace("supports_gradient_checkpointing = True", "")
    assert checkpointing.declared_switch(code_only(tmp_path / "bare", family, stripped), raw, True) is None


def test_a_native_models_switch_is_its_transformers_class_flag(tmp_path):
    path = build_tiny_model(tmp_path / "bert")
    raw = json.loads((path / "config.json").read_text())
    assert checkpointing.declared_switch(path, raw, trust_remote_code=False) == "transformers"
    assert checkpointing.loaded_switch(bb.load_backbone(path, runtime=CPU).model) == "transformers"


def test_settings_a_base_cannot_honour_are_refused_at_dag_build_naming_base_key_and_fix(default, tmp_path):
    cfg = copy.deepcopy(default)
    cfg["base"].update(path=str(code_only(tmp_path, "llada")), trust_remote_code=True)
    for setting in (True, "one_in_two", "fine_grained"):
        cfg["train"]["gradient_checkpointing"] = setting
        config.check_base(cfg)  # LLaDA's own switch takes every strategy
    bare = code_only(tmp_path / "bare", "llada", (REMOTE_CODE / "llada/modeling_llada.py").read_text().replace(
        "def set_activation_checkpointing", "def set_other"))
    cfg["base"]["path"] = str(bare)
    cfg["train"]["gradient_checkpointing"] = False
    cfg["train"]["overrides"] = {"anchor": {"gradient_checkpointing": True}}
    with pytest.raises(config.ConfigError) as err:
        config.check_base(cfg)
    assert (f"config.yaml: train.overrides.anchor.gradient_checkpointing: {bare}: the llada model's code has no "
            "checkpointing switch") in str(err.value)
    assert "set train.gradient_checkpointing: false" in str(err.value)
    assert "config.yaml: train.gradient_checkpointing:" not in str(err.value)  # the shared setting is off
    cfg["base"].update(path=str(build_tiny_model(tmp_path / "bert")), trust_remote_code=False)
    cfg["train"].update(gradient_checkpointing="one_in_two", overrides={})
    with pytest.raises(config.ConfigError, match=r"train.gradient_checkpointing: .*'one_in_two' is a strategy of "
                                                 r"LLaDA's set_activation_checkpointing, but the bert model's code "
                                                 r"has transformers' switch.*set train.gradient_checkpointing: true"):
        config.check_base(cfg)


@pytest.mark.parametrize("layer, family", [("llada-8b-base", "llada"), ("llada-8b-instruct", "llada"),
                                           ("dream-7b-base", "dream"), ("dream-7b-instruct", "dream")])
def test_the_24gb_card_layer_passes_the_dag_build_checks_on_each_familys_code(default, tmp_path, layer, family):
    """config/cards/24gb.yaml turns checkpointing on: each family's code (the stand-ins have the real
    interfaces) must take it, read from the checkpoint's files as the DAG build reads them."""
    cfg = default
    for extra in (f"config/bases/{layer}.yaml", "config/cards/24gb.yaml"):
        cfg = layers.merge(cfg, config.yaml_file(REPO / extra))
    cfg["base"]["path"] = str(code_only(tmp_path, family))
    assert cfg["train"]["gradient_checkpointing"] is True
    config.validate(cfg)
    config.check_base(cfg)


def lora_gradients(backbone, setting):
    """One training step's loss and LoRA gradients, and how often each block ran forward."""
    if setting:
        train.enable_checkpointing(backbone, setting)
    torch.manual_seed(0)
    model = train.attach_lora(backbone, "full", tiny_train_settings())
    # Runs of each block's q_proj and ff_proj: a module inside a checkpointed piece runs again in the backward.
    calls = {}
    for index, block in enumerate(model.base_model.model.model.transformer["blocks"]):
        for name in ("q_proj", "ff_proj"):
            calls[(index, name)] = 0
            getattr(block, name).register_forward_hook(
                lambda *_, key=(index, name): calls.__setitem__(key, calls[key] + 1))
    pairs = [{"id": f"p{i}", "question": "what is the sea ?", "answer": "the sea is deep ."} for i in range(2)]
    encoded = train.encode_pairs(backbone, pairs, 40, "test pairs")
    loss, _ = train.train_step(backbone, CPU, encoded, strategies.resolve("anchor"), tiny_train_settings(),
                               masking.MaskRatio(0.9, 0.9), torch.Generator().manual_seed(0))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return float(loss.detach()), grads, calls


@needs_remote
@pytest.mark.parametrize("setting, recomputed", [(True, [2, 2, 2, 2]), ("one_in_two", [2, 2, 1, 1]),
                                                 ("fine_grained", [1, 2, 1, 2])])  # (q_proj, ff_proj) of blocks 0, 1
def test_llada_checkpointing_recomputes_its_blocks_and_keeps_loss_and_lora_gradients(tmp_path, setting, recomputed):
    path = BUILDERS["llada"](tmp_path / "llada")
    plain = lora_gradients(bb.load_backbone(path, trust_remote_code=True, runtime=CPU), False)
    checked = lora_gradients(bb.load_backbone(path, trust_remote_code=True, runtime=CPU), setting)
    assert list(plain[2].values()) == [1, 1, 1, 1] and list(checked[2].values()) == recomputed
    assert checked[0] == pytest.approx(plain[0], rel=1e-6) and set(checked[1]) == set(plain[1]) and plain[1]
    for name, grad in plain[1].items():
        assert torch.allclose(checked[1][name], grad, rtol=1e-4, atol=1e-7), name


@needs_remote
def test_llada_and_dream_loaded_switches_agree_with_the_files(tmp_path):
    for family, switch in (("llada", "llada"), ("dream", "transformers")):
        path = BUILDERS[family](tmp_path / family)
        model = bb.load_backbone(path, trust_remote_code=True, runtime=CPU).model
        raw = json.loads((path / "config.json").read_text())
        assert checkpointing.loaded_switch(model) == checkpointing.declared_switch(path, raw, True) == switch
