import copy
import re

import pytest
import yaml

from anchormask import fileio, study
from anchormask.model import layout
from anchormask.settings import config
from anchormask.settings import layers as config_layers
from helpers import FAMILY, REPO, SMALL, TINY, build_tiny_model

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def default():
    return config.load(REPO / "config.yaml")


def all_adapter_jobs(cfg):
    """Every adapter the study trains: the arms' and the sweep's, each once."""
    jobs = {job for arm in cfg["arms"] for job in study.arm_adapters(cfg, arm)}
    jobs |= {job for point in study.sweep_points(cfg) for job in study.sweep_adapters(cfg, *point)}
    return sorted(jobs)


def problems_of(cfg):
    with pytest.raises(config.ConfigError) as err:
        config.validate(cfg)
    return str(err.value)


def test_unknown_key_is_named_with_the_allowed_keys(default):
    cfg = copy.deepcopy(default)
    cfg["generation"]["stepz"] = 8
    message = problems_of(cfg)
    assert "generation" in message and "'stepz'" in message and "steps" in message


def test_wrong_type_and_out_of_range_values_name_the_key(default):
    cfg = copy.deepcopy(default)
    cfg["train"]["rank"] = "sixteen"
    cfg["train"]["lr"] = 5
    message = problems_of(cfg)
    assert "train.rank" in message and "train.lr" in message and "maximum" in message


def test_enum_errors_list_the_allowed_values_and_an_unknown_strategy_the_known_ones(default):
    cfg = copy.deepcopy(default)
    cfg["train"]["loss"] = "mse"
    message = problems_of(cfg)
    assert "train.loss: 'mse' is not allowed; allowed values: 'ce', 'llada', 'mask_agnostic'" in message
    cfg = copy.deepcopy(default)
    cfg["arms"]["anchor"]["strategy"] = "forward"
    assert ("arms.anchor.strategy: unknown strategy 'forward'; built-in: anchor, random, reverse, span, blockwise, "
            "curriculum; define it under strategies: (docs/strategies.md)") in problems_of(cfg)


def test_cross_key_checks(default):
    cfg = copy.deepcopy(default)
    cfg["train"]["mask_ratio"] = {"kind": "uniform", "low": 0.9, "high": 0.5}
    cfg["statistics"]["comparisons"]["x"] = {"a": "anchor", "b": "nosuch", "split": "held_out"}
    message = problems_of(cfg)
    assert "must not exceed" in message and "unknown arm 'nosuch'" in message


def test_comparisons_as_a_list_are_refused_with_the_mapping_to_write(default):
    cfg = copy.deepcopy(default)
    cfg["statistics"]["comparisons"] = [{"name": "x", "a": "anchor", "b": "random", "split": "held_out"}]
    assert ("statistics.comparisons: a list of named entries; this key is a mapping keyed by name"
            in problems_of(cfg)) and "write `x: {a: 'anchor', b: 'random', split: 'held_out'}`" in problems_of(cfg)


def test_a_layer_adds_and_drops_comparisons_by_name(default):
    cfg = config_layers.merge(copy.deepcopy(default), {"statistics": {"comparisons": {
        "heldout_anchor_vs_base": None, "heldout_reverse_vs_anchor": {"a": "reverse", "b": "anchor",
                                                                      "split": "held_out"}}}})
    names = [c["name"] for c in config.comparisons(cfg)]
    assert "heldout_anchor_vs_base" not in names and names[-1] == "heldout_reverse_vs_anchor"
    assert names[:2] == ["heldout_anchor_vs_random", "indomain_anchor_vs_random"]
    config.validate(cfg)


def test_bad_yaml_names_the_file_and_line(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("base: {path: x}\ntrain:\n  rank: [16\n  alpha: 32\n")
    with pytest.raises(config.ConfigError, match=r"config.yaml: line 4, column 8: not valid YAML \(expected ','"):
        config.load(path)
    assert issubclass(config.ConfigError, fileio.InputError)


def test_overrides_apply_to_one_strategy_only(default):
    cfg = copy.deepcopy(default)
    cfg["train"]["overrides"] = {"anchor": {"lr": 0.005}}
    config.validate(cfg)
    assert study.train_settings(cfg, "anchor")["lr"] == 0.005
    assert study.train_settings(cfg, "random")["lr"] == default["train"]["lr"]


def test_default_study_trains_what_the_arms_and_sweep_need(default):
    ids = {j.id for j in all_adapter_jobs(default)}  # how many: tests/test_workflow.py (the DAG)
    assert "anchor_vo_n144_s300_seed42" in ids and "random_full_n72_s1000_seed42" in ids
    assert study.arm_adapters(default, "base") == []


def test_seeds_multiply_every_job(default):
    cfg = copy.deepcopy(default)
    cfg["train"]["seeds"] = [1, 2, 3]
    assert len(all_adapter_jobs(cfg)) == 3 * len(all_adapter_jobs(default))
    assert [j.seed for j in study.arm_adapters(cfg, "anchor")] == [1, 2, 3]


def test_the_three_seed_variant_adds_two_seeds_of_the_main_arms_only(default):
    cfg = config_layers.merge(default, yaml.safe_load((REPO / "config" / "seeds3.yaml").read_text()))
    config.validate(cfg)
    jobs = set(all_adapter_jobs(cfg))
    assert set(all_adapter_jobs(default)) <= jobs  # the default run's adapters are reused
    more_seeds = len(cfg["train"]["seeds"]) - len(default["train"]["seeds"])
    adapter_arms = sum(1 for arm in default["arms"].values() if arm["strategy"] is not None)
    # the sweep keeps one
    assert more_seeds > 0 and len(jobs - set(all_adapter_jobs(default))) == more_seeds * adapter_arms
    assert [j.seed for j in study.arm_adapters(cfg, "anchor-vo")] == [42, 43, 44]
    assert [j.seed for j in study.sweep_adapters(cfg, "anchor", 72, 100)] == [42]


def test_shipped_configs_are_valid(default):  # config.yaml itself: the `default` fixture loads and validates it
    overlays = sorted((REPO / "config").glob("*.yaml"))
    assert overlays
    for path in overlays:
        config.validate(config_layers.merge(default, yaml.safe_load(path.read_text())), str(path))
    stack = default  # the tests' reduced study and its smaller layers, each over the ones before it
    for layer in (TINY, SMALL, FAMILY):
        stack = config_layers.merge(stack, yaml.safe_load((REPO / layer).read_text()))
        config.validate(stack, layer)


def test_in_domain_listed_as_held_out_is_named(default):
    cfg = copy.deepcopy(default)
    cfg["data"]["held_out"].append("in_domain")
    assert "config.yaml: data.held_out: lists 'in_domain', the in-domain domain" in problems_of(cfg)


@pytest.mark.parametrize("key", ["strategies", "sizes", "steps"])
def test_empty_sweep_list_is_named(default, key):
    cfg = copy.deepcopy(default)
    cfg["sweep"][key] = []
    assert f"config.yaml: sweep.{key}: an empty list; give at least one value" in problems_of(cfg)


def test_errors_name_the_source_that_set_the_value(default):
    layers = config_layers.ConfigLayers((("config.yaml", {"train": {"rank": 16, "lr": 0.001, "alpha": -1}}),
                                  ("tests/configs/tiny.yaml", {"train": {"lr": 0.5}}),
                                  ("--config", {"train": {"rank": "sixteen"}})))
    cfg = copy.deepcopy(default)
    cfg["train"]["rank"], cfg["train"]["lr"], cfg["train"]["alpha"] = "sixteen", 5, -1
    with pytest.raises(config.ConfigError) as err:
        config.validate(cfg, layers.source_of)
    message = str(err.value)
    assert "--config: train.rank: 'sixteen' is not of type 'integer'" in message
    assert "tests/configs/tiny.yaml: train.lr: 5 is out of range" in message
    assert "config.yaml: train.alpha" in message


def test_where_a_key_was_set_is_spelled_as_the_file_that_set_it_spells_it():
    common = (("config.yaml", {"base": {"path": "data/base", "sha256": "a"}}),
              ("study.yaml", {"bases": {"early": {"base": {"sha256": "b"}}, "late": "late.yaml"}}))
    inline = config_layers.ConfigLayers((*common, ("bases.early", {"base": {"sha256": "b"}})))
    assert inline.where_set(("base", "sha256")) == "bases.early.base.sha256 in study.yaml"
    assert inline.where_set(("base", "path")) == "base.path in config.yaml"
    filed = config_layers.ConfigLayers((*common, ("late.yaml (bases.late)", {"base": {"sha256": "c"}})))
    assert filed.where_set(("base", "sha256")) == "base.sha256 in late.yaml"
    typed = config_layers.ConfigLayers((*common, ("--config", {"base": {"sha256": "d"}})))
    assert typed.where_set(("base", "sha256")) == "base.sha256 in --config"


def test_command_line_values_get_the_types_the_schema_wants(default):
    """What Snakemake hands over for --config 'train={rank: 8, lr: 1e-3, seeds: [1, 2], ...}' (BaseLoader strings)."""
    overrides = {"train": {"rank": "8", "lr": "1e-3", "seeds": ["1", "2"], "gradient_checkpointing": "true",
                           "mask_ratio": {"kind": "window", "low": "0.45", "high": "0.55"}},
                 "base": {"path": "2024", "device": "cpu"}, "generation": {"remasking": "random"}}
    cfg = copy.deepcopy(default)
    for section, values in overrides.items():
        cfg[section] = {**cfg[section], **copy.deepcopy(values)}
    config_layers.apply_override_types(cfg, overrides)
    assert cfg["train"]["rank"] == 8 and cfg["train"]["lr"] == 0.001 and cfg["train"]["seeds"] == [1, 2]
    assert cfg["train"]["gradient_checkpointing"] is True and cfg["train"]["mask_ratio"]["low"] == 0.45
    assert cfg["base"]["path"] == "2024" and cfg["generation"]["remasking"] == "random"  # strings stay strings
    cfg["base"]["path"] = default["base"]["path"]
    config.validate(cfg)


def test_override_of_a_per_strategy_setting_is_typed_too(default):
    overrides = {"train": {"overrides": {"anchor": {"lr": "0.02", "rank": "4"}}}}
    cfg = copy.deepcopy(default)
    cfg["train"]["overrides"] = copy.deepcopy(overrides["train"]["overrides"])
    config_layers.apply_override_types(cfg, overrides)
    assert study.train_settings(cfg, "anchor")["lr"] == 0.02 and study.train_settings(cfg, "anchor")["rank"] == 4


def test_a_key_of_true_or_a_name_keeps_the_name_and_types_true(default):
    for text, value in (("one_in_two", "one_in_two"), ("true", True), ("false", False)):
        cfg = copy.deepcopy(default)
        cfg["train"]["gradient_checkpointing"] = text
        config_layers.apply_override_types(cfg, {"train": {"gradient_checkpointing": text}})
        assert cfg["train"]["gradient_checkpointing"] == value and type(cfg["train"]["gradient_checkpointing"]) is \
            type(value)
        config.validate(cfg)


def test_base_path_that_is_not_a_folder_names_the_key(default, tmp_path):
    cfg = copy.deepcopy(default)
    cfg["base"]["path"] = str(tmp_path / "nowhere")
    with pytest.raises(config.ConfigError, match="config.yaml: base.path: '.*nowhere' is not a directory"):
        config.check_base(cfg)
    (tmp_path / "nowhere").mkdir()
    with pytest.raises(config.ConfigError, match="base.path: .*nowhere has no config.json"):
        config.check_base(cfg)


def test_sequences_longer_than_the_base_allows_are_named_at_dag_build(default, tmp_path):
    model = build_tiny_model(tmp_path / "m")  # max_position_embeddings 96
    cfg = copy.deepcopy(default)
    cfg["base"]["path"] = str(model)
    config.check_base(cfg)  # 48 + 32 extra masks of the mask-count probe + 3 <= 96
    cfg["generation"]["answer_len"] = 70
    cfg["train"]["overrides"] = {"random": {"seq_len": 100}}
    with pytest.raises(config.ConfigError) as err:
        config.check_base(cfg, lambda path: "--config" if path[0] == "generation" else "config.yaml")
    message = str(err.value)
    assert ("--config: generation.answer_len: 70 answer positions + 32 extra masks (generation.extra_masks, "
            "probes.maskcount_k) + a prompt of at least 3 tokens = 105 positions, but the base allows 96 "
            "(max_position_embeddings in") in message and "lower it to at most 61" in message
    assert "config.yaml: train.overrides.random.seq_len: 100 positions" in message
    cfg["probes"] = {"maskcount_k": []}
    cfg["train"]["overrides"] = {}
    config.check_base(cfg)  # without the probe's extra masks, 70 + 3 fits


def test_pretraining_settings_are_checked_naming_the_file_and_key(tmp_path):
    spec = config.load_pretrain(REPO / "workflow" / "pretrain.yaml")
    assert spec["settings"]["steps"] > 0
    spec["settings"]["weighting"] = "elbo"
    del spec["settings"]["lr"]
    bad = tmp_path / "pretrain.yaml"
    bad.write_text(yaml.safe_dump(spec))
    with pytest.raises(config.ConfigError) as err:
        config.load_pretrain(bad)
    message = str(err.value)
    assert f"{bad}: settings: 'lr' is a required property" in message
    assert f"{bad}: settings.weighting: 'elbo' is not allowed; allowed values: 'none', 'inverse_t'" in message


def test_the_pretraining_schema_names_every_setting_the_recipe_takes():
    import dataclasses

    from anchormask import schemas
    from anchormask.embedded_base import pretrain

    settings = schemas.document("pretrain")["properties"]["settings"]
    fields = {f.name for f in dataclasses.fields(pretrain.PretrainSettings)}
    assert set(settings["properties"]) == set(settings["required"]) == fields
    assert all(node.get("description") for node in settings["properties"].values())


def test_a_models_position_limit_reads_the_same_from_its_config_file_and_its_config_object(tmp_path):
    from transformers import AutoConfig

    model = build_tiny_model(tmp_path / "m")
    from_file = layout.max_positions(fileio.read_json(model / "config.json"))
    assert from_file == layout.max_positions(AutoConfig.from_pretrained(model)) == ("max_position_embeddings", 96)
    assert layout.max_positions({"n_positions": 64, "max_position_embeddings": 0}) == ("n_positions", 64)
    assert layout.max_positions(None) is None


def test_an_adapters_settings_leave_out_the_logging_cadence_that_its_run_is_given(default):
    cfg = copy.deepcopy(default)
    identity = study.train_settings(cfg, "anchor")
    cfg["train"]["log_every"] = 7
    assert "log_every" not in identity and study.train_settings(cfg, "anchor") == identity
    assert study.run_settings(cfg, "anchor") == dict(sorted({**identity, "log_every": 7}.items()))


# --------------------------------------------------------------------------- only true lines (issue 39)
# jsonschema calls a key that a failing allOf/$ref branch declares "unevaluated": train.rank: 0 used to
# print "train: Unevaluated properties are not allowed ('log_every' was unexpected)" before the real line.

TRAIN_KEYS = ("alpha, batch_size, default, dropout, grad_accum, gradient_checkpointing, log_every, loss, lr, "
              "mask_ratio, overrides, rank, seeds, seq_len, subset, threads, tv_weight, warmup_steps, weight_decay")
OVERRIDE_KEYS = ("alpha, batch_size, dropout, grad_accum, gradient_checkpointing, log_every, loss, lr, mask_ratio, "
                 "rank, seq_len, subset, threads, tv_weight, warmup_steps, weight_decay")


@pytest.mark.parametrize("train, lines", [
    ({"rank": 0}, ["config.yaml: train.rank: 0 is out of range; allowed: {'minimum': 1, 'maximum': 1024}"]),
    ({"lr": -0.001}, ["config.yaml: train.lr: -0.001 is out of range; allowed: {'exclusiveMinimum': 0, 'maximum': 1}"]),
    ({"rank": "sixteen"}, ["config.yaml: train.rank: 'sixteen' is not of type 'integer'"]),
    ({"log_every": 0}, ["config.yaml: train.log_every: 0 is out of range; allowed: {'minimum': 1}"]),
    ({"rnak": 8}, [f"config.yaml: train: unknown key 'rnak' (did you mean 'rank'?); allowed keys here: {TRAIN_KEYS}"]),
    ({"rnak": 8, "rank": 0}, [f"config.yaml: train: unknown key 'rnak' (did you mean 'rank'?); allowed keys here: "
                              f"{TRAIN_KEYS}",
                              "config.yaml: train.rank: 0 is out of range; allowed: {'minimum': 1, 'maximum': 1024}"]),
    ({"overrides": {"anchor": {"rank": 0, "lr": 0.002}}},
     ["config.yaml: train.overrides.anchor.rank: 0 is out of range; allowed: {'minimum': 1, 'maximum': 1024}"]),
    ({"overrides": {"anchor": {"rnak": 4, "lr": 0.002}}},
     [f"config.yaml: train.overrides.anchor: unknown key 'rnak' (did you mean 'rank'?); allowed keys here: "
      f"{OVERRIDE_KEYS}"]),
])
def test_a_train_key_error_prints_only_true_lines(default, train, lines):
    cfg = copy.deepcopy(default)
    cfg["train"].update(copy.deepcopy(train))
    assert problems_of(cfg) == "invalid configuration:\n  " + "\n  ".join(lines)


def test_a_nested_command_line_train_value_out_of_range_prints_one_line(default):
    """What `snakemake -n --config 'train={rank: 0}'` hands over: the string '0', typed, then checked."""
    overrides = {"train": {"rank": "0"}}
    cfg = copy.deepcopy(default)
    cfg["train"]["rank"] = "0"
    config_layers.apply_override_types(cfg, overrides)
    layers = config_layers.ConfigLayers((("config.yaml", default), ("--config", overrides)))
    with pytest.raises(config.ConfigError) as err:
        config.validate(cfg, layers.source_of)
    assert str(err.value) == ("invalid configuration:\n  --config: train.rank: 0 is out of range; "
                              "allowed: {'minimum': 1, 'maximum': 1024}")


def test_several_unknown_keys_are_named_together(default):
    cfg = copy.deepcopy(default)
    cfg["train"].update({"rnak": 8, "zeta": 1})
    assert problems_of(cfg) == f"invalid configuration:\n  config.yaml: train: unknown keys 'rnak', 'zeta'; " \
                               f"allowed keys here: {TRAIN_KEYS}"


def test_a_duplicate_key_in_a_config_file_is_refused_naming_the_file_the_line_and_the_key(tmp_path):
    layer = tmp_path / "bases.yaml"
    layer.write_text("bases:\n  second: {}\n  second: {train: {rank: 8}}\n")
    expected = (f"{layer}: line 3, column 3: duplicate key 'second' (also on line 2): YAML would keep only the last; "
                "remove or rename one")
    with pytest.raises(config.ConfigError, match=f"^{re.escape(expected)}$"):
        config.yaml_file(layer)
    layer.write_text("bases:\n  first: {}\n  second: {train: {rank: 8}}\n")
    assert list(config.yaml_file(layer)["bases"]) == ["first", "second"]


def test_a_list_too_short_says_how_many_are_needed_and_why(default):
    cfg = copy.deepcopy(default)
    cfg["sweep"]["strategies"] = ["anchor"]
    assert ("config.yaml: sweep.strategies: 1 value(s) ['anchor'], but at least 2 are needed (The strategies of "
            "the grid; the first is compared with each of the others (the default: anchor vs random))") in \
        problems_of(cfg)
