"""Bad settings that used to pass silently: each is refused or made visible, with the key and the fix."""

import copy

import pytest

from anchormask import config, schemas
from helpers import REPO


@pytest.fixture(scope="module")
def default():
    return config.load(REPO / "config.yaml")


@pytest.mark.unit
@pytest.mark.parametrize("answer_len", [2, 12, 23])
def test_an_answer_slot_too_short_for_an_answer_is_refused_naming_the_key(default, answer_len):
    cfg = copy.deepcopy(default)
    cfg["generation"]["answer_len"] = answer_len
    with pytest.raises(config.ConfigError) as err:
        config.validate(cfg)
    assert f"config.yaml: generation.answer_len: {answer_len} is out of range" in str(err.value)
    assert "'minimum': 24" in str(err.value)


@pytest.mark.unit
def test_the_answer_slot_minimum_states_its_reason():
    spec = schemas.document("config")["properties"]["generation"]["properties"]["answer_len"]
    assert spec["minimum"] == 24 and "At least 24" in spec["description"] and "median 19" in spec["description"]
    cfg = config.load(REPO / "config.yaml")
    cfg["generation"]["answer_len"] = 24
    config.validate(cfg)  # the minimum itself is accepted
