"""envs/: the pip pins are the single source; the conda YAML must point at them."""

import re

import pytest
import yaml

from helpers import REPO

pytestmark = pytest.mark.unit


def pins(path):
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), re.M)}


def test_conda_env_installs_the_pinned_requirements():
    env = yaml.safe_load((REPO / "envs" / "anchormask.yaml").read_text())
    pip = next(d for d in env["dependencies"] if isinstance(d, dict))["pip"]
    assert "-r requirements.txt" in pip
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert python == "python=3.11"


def test_every_imported_dependency_is_pinned():
    pinned = pins(REPO / "envs" / "requirements.txt")
    assert pinned["torch"] == "2.13.0"
    for name in ("transformers", "peft", "snakemake", "snakemake-executor-plugin-slurm", "pandas", "pyarrow",
                 "scipy", "matplotlib", "bm25s", "markdown-it-py", "pygments", "numpy", "jsonschema", "pyyaml",
                 "safetensors", "english-words"):
        assert name in pinned, name


def test_installed_versions_match_the_pins():
    from importlib import metadata

    for name, version in pins(REPO / "envs" / "requirements.txt").items():
        assert metadata.version(name).split("+")[0] == version, name  # torch reports 2.13.0+cpu


def test_remote_set_differs_only_where_old_modelling_code_needs_it():
    main, remote = pins(REPO / "envs" / "requirements.txt"), pins(REPO / "envs" / "requirements-remote.txt")
    changed = {name for name in main.keys() | remote.keys() if main.get(name) != remote.get(name)}
    assert changed == {"transformers", "tokenizers", "peft", "huggingface-hub"}
    assert remote["transformers"].startswith("4.") and remote["torch"] == main["torch"]
