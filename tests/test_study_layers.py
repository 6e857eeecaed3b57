"""The study layers for real bases (config/bases/, docs/real-bases.md): each one valid over
config.yaml, stopped clearly while its path is the placeholder, and its DAG built with a tiny
checkpoint of its family in place of the real one (one dry run per layer)."""

import re

import pytest
import yaml

from anchormask import checksum
from anchormask.settings import config
from anchormask.settings.layers import merge
from helpers import REPO, dry_run_jobs
from tiny_families import BUILDERS

pytestmark = pytest.mark.workflow

LAYERS = sorted((REPO / "config" / "bases").glob("*.yaml"))


def test_a_layer_for_each_real_base_the_docs_list():
    page = (REPO / "docs" / "real-bases.md").read_text()
    listed = set(re.findall(r"^\| [^|]+ \| `config/bases/([\w.-]+)\.yaml` \|", page, re.M))
    assert listed and [p.stem for p in LAYERS] == sorted(listed)


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
    overlay = yaml.safe_load(text)
    assert {"path", "sha256", "trust_remote_code", "family", "layout", "device"} <= set(overlay["base"])
    cfg = merge(config.load(REPO / "config.yaml"), overlay)
    config.validate(cfg, layer.name)
    with pytest.raises(config.ConfigError, match=rf"base.path: '{re.escape(overlay['base']['path'])}' is not a "
                                                 "directory; point it at a checkpoint folder"):
        config.check_base(cfg, layer.name)
    overlay["base"].update(tiny_bases(overlay["base"]["family"]))
    stand_in = tmp_path / layer.name
    stand_in.write_text(yaml.safe_dump(overlay))
    assert dry_run_jobs(repo_copy, f"--configfile={stand_in}") == default_dag
