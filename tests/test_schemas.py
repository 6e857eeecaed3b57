"""The schemas as package data: every config key described, each default stated once (in the schema) and
valid, and no default that would change what config.yaml's jobs are given."""

import copy
import dataclasses
import tomllib

import jsonschema
import pytest
import yaml

from anchormask import schemas
from anchormask.generation import sampler
from anchormask.settings import config
from helpers import REPO

pytestmark = pytest.mark.unit

ROOT = schemas.document("config")


def key_paths(node=ROOT, path=()):
    """(key path, the schema nodes that constrain it, the property as written) for every property below
    ``node``, through $ref, allOf/oneOf/anyOf, array items (index 0) and additionalProperties ("*")."""
    node = schemas.resolve(node, ROOT)
    for part in schemas.alternatives(node):
        yield from key_paths(part, path)
    for key, written in node.get("properties", {}).items():
        children = schemas.child_schemas(node, ROOT, key)
        yield (*path, key), children, written
        for child in children:
            yield from key_paths(child, (*path, key))
    if isinstance(node.get("items"), dict):
        yield from key_paths(node["items"], (*path, 0))
    if isinstance(node.get("additionalProperties"), dict):
        yield from key_paths(node["additionalProperties"], (*path, "*"))


def test_every_config_key_has_a_description():
    paths = list(key_paths())
    assert len({p for p, _, _ in paths}) > 90  # the walk reaches the $defs (train settings, mask_ratio) too
    assert ("train", "overrides", "anchor", "mask_ratio", "kind") in {p for p, _, _ in paths}
    undescribed = sorted({config.dotted(tuple(k for k in p if k != "*")) or str(p) for p, children, written in paths
                          if not str(written.get("description", "")).strip()
                          and not any(str(c.get("description", "")).strip() for c in children)})
    assert not undescribed, f"keys of config.schema.yaml without a description: {', '.join(undescribed)}"


def test_every_default_is_valid_for_its_key():
    for path, children, written in key_paths():
        if "default" in written:
            node = {**written, "$defs": ROOT["$defs"]}
            jsonschema.Draft202012Validator(node).validate(written["default"])


def test_training_settings_have_no_defaults():
    """A train setting's default would enter every adapter's provenance.json (and its job's params) where
    the config leaves the key out; the code reads each one the config gives instead."""
    defaulted = [config.dotted(p) for p, _, written in key_paths() if p[0] == "train" and "default" in written
                 and p != ("train", "overrides")]
    assert not defaulted


def test_the_sampler_takes_its_defaults_from_the_schema():
    fields = {f.name: f.default for f in dataclasses.fields(sampler.SamplerSettings)}
    generation = ROOT["properties"]["generation"]["properties"]
    assert set(generation) - set(fields) == {"threads"}
    assert fields == {key: generation[key]["default"] for key in fields}
    assert sampler.SamplerSettings() == sampler.SamplerSettings.from_config(
        {key: spec["default"] for key, spec in generation.items()})


def test_setting_reads_the_config_or_else_the_schema_default():
    cfg = config.load(REPO / "config.yaml")
    assert "probes" not in cfg
    assert schemas.setting(cfg, ("probes", "maskcount_k")) == schemas.default(("probes", "maskcount_k"))
    cfg["probes"] = {"maskcount_k": [4]}
    assert schemas.setting(cfg, ("probes", "maskcount_k")) == [4]
    assert schemas.setting(cfg, ("generation", "extra_masks")) == cfg["generation"]["extra_masks"]
    with pytest.raises(KeyError, match="no default for train.rank"):
        schemas.default(("train", "rank"))


@pytest.mark.parametrize("layers", [["config.yaml"], ["config.yaml", "config/seeds3.yaml"],
                                    ["config.yaml", "tests/configs/tiny.yaml"]])
def test_snakemake_fills_in_only_values_that_no_output_records(layers):
    """Snakemake's validate writes the schema's defaults into the config, and config sections flow into
    job params and outputs (the whole generation section into the sampler param, the train settings
    into each adapter's provenance). For the study's configs it adds only two nulls that were filled in
    before the defaults moved here, the probes and lm_eval sections, whose values (not the sections) the
    probe rules' and the lm-eval rules' params hold (lm_eval's only when its tasks are set), and an empty
    strategies mapping (an adapter records only the entry of its own strategy)."""
    from snakemake.utils import validate

    merged = {}
    for name in layers:
        merged = merge(merged, yaml.safe_load((REPO / name).read_text()))
    filled = copy.deepcopy(merged)
    validate(filled, str(schemas.path("config")))
    added = dict(additions(merged, filled))
    assert set(added) <= {("data", "max_queries_per_domain"), ("sweep", "seeds"), ("probes",), ("lm_eval",),
                          ("strategies",)}
    assert added[("lm_eval",)]["tasks"] == []  # the stage stays off
    assert added[("strategies",)] == {}
    if "probes" in merged:  # an overlay that sets the probes (tiny.yaml) gets nothing added there
        assert filled["probes"] == merged["probes"]
    else:
        assert added[("probes",)] == {"maskcount_k": schemas.default(("probes", "maskcount_k")),
                                      "attention_arms": schemas.default(("probes", "attention_arms"))}


def additions(before, after, path=()):
    for key, value in after.items():
        if key not in before:
            yield (*path, key), value
        elif isinstance(value, dict):
            yield from additions(before[key], value, (*path, key))


def merge(a, b):
    out = copy.deepcopy(a)
    for key, value in b.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def test_schemas_are_package_data_and_the_workflow_validates_against_the_same_file():
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert package_data["anchormask.schemas"] == ["*.schema.yaml"]
    for name in schemas.NAMES:
        assert schemas.path(name).is_file() and (REPO / schemas.shown(name)).is_file()
    assert not (REPO / "workflow" / "schemas").exists()


def test_the_workflow_fills_in_defaults_from_the_package_schema(monkeypatch):
    """settings.checks.check_study hands Snakemake's validate the package's schema file, for one base
    (common.smk) and for each of several (bases_common.smk)."""
    from anchormask.settings import checks, config

    monkeypatch.chdir(REPO)
    seen = []
    checks.check_study(config.load("config.yaml"), lambda cfg, schema: seen.append(schema))
    assert seen == [str(schemas.path("config"))]
    for smk in ("common.smk", "bases_common.smk"):
        assert "study_checks.check_study(" in (REPO / "workflow" / "rules" / smk).read_text()
