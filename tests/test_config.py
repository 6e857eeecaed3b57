import copy

import pytest
import yaml

from anchormask import config
from helpers import REPO


@pytest.fixture(scope="module")
def default():
    return config.load(REPO / "config.yaml")


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


def test_enum_errors_list_the_allowed_values(default):
    cfg = copy.deepcopy(default)
    cfg["arms"]["anchor"]["strategy"] = "forward"
    cfg["train"]["loss"] = "mse"
    message = problems_of(cfg)
    assert "train.loss" in message and "'llada'" in message


def test_cross_key_checks(default):
    cfg = copy.deepcopy(default)
    cfg["train"]["mask_ratio"] = {"kind": "uniform", "low": 0.9, "high": 0.5}
    cfg["statistics"]["comparisons"].append({"name": "x", "a": "anchor", "b": "nosuch", "split": "held_out"})
    message = problems_of(cfg)
    assert "must not exceed" in message and "unknown arm 'nosuch'" in message


def test_bad_yaml_names_the_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("base: [unclosed\n")
    with pytest.raises(config.ConfigError, match="config.yaml: not valid YAML"):
        config.load(path)


def test_overrides_apply_to_one_strategy_only(default):
    cfg = copy.deepcopy(default)
    cfg["train"]["overrides"] = {"anchor": {"lr": 0.005}}
    config.validate(cfg)
    assert config.train_settings(cfg, "anchor")["lr"] == 0.005
    assert config.train_settings(cfg, "random")["lr"] == default["train"]["lr"]


def test_default_study_trains_what_the_arms_and_sweep_need(default):
    jobs = config.all_adapter_jobs(default)
    assert len(jobs) == 17  # 7 adapter arms + 12 sweep points, two of them shared
    ids = {j.id for j in jobs}
    assert "anchor_vo_n144_s300_seed42" in ids and "random_full_n72_s1000_seed42" in ids
    assert config.arm_adapters(default, "base") == []


def test_seeds_multiply_every_job(default):
    cfg = copy.deepcopy(default)
    cfg["train"]["seeds"] = [1, 2, 3]
    assert len(config.all_adapter_jobs(cfg)) == 3 * 17
    assert [j.seed for j in config.arm_adapters(cfg, "anchor")] == [1, 2, 3]


def test_the_three_seed_variant_adds_two_seeds_of_the_main_arms_only(default):
    cfg = copy.deepcopy(default)
    for key, value in yaml.safe_load((REPO / "config" / "seeds3.yaml").read_text()).items():
        cfg[key] = {**cfg[key], **value}
    config.validate(cfg)
    jobs = set(config.all_adapter_jobs(cfg))
    assert set(config.all_adapter_jobs(default)) <= jobs  # the default run's adapters are reused
    assert len(jobs) == 17 + 2 * 7  # two more seeds of the 7 adapter arms; the sweep keeps one
    assert [j.seed for j in config.arm_adapters(cfg, "anchor-vo")] == [42, 43, 44]
    assert [j.seed for j in config.sweep_adapters(cfg, "anchor", 72, 100)] == [42]


def test_shipped_configs_are_valid():
    config.load(REPO / "config.yaml")
    tiny = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
    assert set(tiny) <= set(yaml.safe_load((REPO / "config.yaml").read_text()))
