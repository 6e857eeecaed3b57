"""The study layers for real bases (config/bases/, README "Using a real base"): each one valid over
config.yaml, stopped clearly while its path is the placeholder, and its DAG built with a tiny
checkpoint of its family in place of the real one (one dry run per layer)."""

import re

import pytest
import yaml

from anchormask import checksum, config
from helpers import REPO, dry_run_jobs, merged
from tiny_families import BUILDERS

pytestmark = pytest.mark.workflow

LAYERS = sorted((REPO / "config" / "bases").glob("*.yaml"))
# Decoding options of LLaDA's and Dream's own samplers (issue 22's sampler part, another branch). A
# layer may use them before the schema has them: until then they are checked against this list
# and left out of the validation and the dry run; once the schema has them, they are validated.
SAMPLER_KEYS = {"remasking", "schedule", "eps", "alg_temp", "top_p", "top_k", "cfg_scale", "logits_eos_inf",
                "confidence_eos_eot_inf"}
SAMPLER_REMASKING = {"low_confidence", "random", "topk_margin", "entropy", "origin"}


def test_a_layer_for_each_real_base_the_readme_lists():
    assert [p.stem for p in LAYERS] == ["dream-7b-base", "dream-7b-instruct", "llada-8b-base", "llada-8b-instruct",
                                        "report-1.3b"]


def known_to_schema(overlay: dict) -> dict:
    """The layer less the sampler options this branch's schema does not know yet (each must be a listed one)."""
    generation = config.schema_document()["properties"]["generation"]["properties"]
    unknown = {k for k in overlay.get("generation", {}) if k not in generation}
    remasking = overlay.get("generation", {}).get("remasking")
    if remasking is not None and remasking not in generation["remasking"]["enum"]:
        assert remasking in SAMPLER_REMASKING
        unknown.add("remasking")
    assert unknown <= SAMPLER_KEYS, f"not in the schema: {sorted(unknown - SAMPLER_KEYS)}"
    kept = {k: v for k, v in overlay["generation"].items() if k not in unknown}
    return {**overlay, "generation": kept}


@pytest.fixture(scope="module")
def tiny_bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    built = {}

    def base(family):
        if family not in built:
            path = BUILDERS[family](root / family)
            built[family] = {"path": str(path), "sha256": checksum.directory_sha256(path)}
        return built[family]
    return base


@pytest.mark.parametrize("layer", LAYERS, ids=lambda p: p.stem)
def test_layer_is_valid_and_builds_the_study_on_a_tiny_checkpoint(layer, tiny_bases, repo_copy, default_dag, tmp_path):
    text = layer.read_text()
    uncommented = [line for line in text.splitlines() if re.match(r"\s+\w+: \S", line) and "#" not in line]
    assert not uncommented, f"{layer.name}: a value without a comment saying where it comes from: {uncommented}"
    overlay = known_to_schema(yaml.safe_load(text))
    assert {"path", "sha256", "trust_remote_code", "family", "layout", "device"} <= set(overlay["base"])
    cfg = merged(config.load(REPO / "config.yaml"), overlay)
    config.validate(cfg, layer.name)
    with pytest.raises(config.ConfigError, match=rf"base.path: '{re.escape(overlay['base']['path'])}' is not a "
                                                 "directory; point it at a checkpoint folder"):
        config.check_base(cfg, layer.name)
    overlay["base"].update(tiny_bases(overlay["base"]["family"]))
    stand_in = tmp_path / layer.name
    stand_in.write_text(yaml.safe_dump(overlay))
    assert dry_run_jobs(repo_copy, f"--configfile={stand_in}") == default_dag
