"""envs/: the pip pins are the single source; the conda YAML must point at them."""

import ast
import re
import sys
import tomllib

import pytest
import yaml

from helpers import REPO

pytestmark = pytest.mark.unit


def pins(path):
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), re.M)}


@pytest.mark.parametrize("env_file, requirements", [("anchormask.yaml", "requirements.txt"),
                                                     ("anchormask-remote.yaml", "requirements-remote.txt")])
def test_conda_env_installs_the_pinned_requirements(env_file, requirements):
    from packaging.specifiers import SpecifierSet

    env = yaml.safe_load((REPO / "envs" / env_file).read_text())
    pip = next(d for d in env["dependencies"] if isinstance(d, dict))["pip"]
    assert f"-r {requirements}" in pip and "-e ../" in pip
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python.removeprefix("python=") in SpecifierSet(requires), (python, requires)


def imported_distributions() -> dict[str, str]:
    """Distribution -> a module of it that src/ or workflow/scripts/ imports (the standard library left out)."""
    from importlib import metadata

    modules = set()
    for path in [*(REPO / "src").rglob("*.py"), *(REPO / "workflow" / "scripts").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.add(node.module.split(".")[0])
    owners = metadata.packages_distributions()
    return {re.sub(r"[-_.]+", "-", dist).lower(): module for module in sorted(modules - set(sys.stdlib_module_names))
            if module != "anchormask" for dist in owners.get(module, [module])}


def test_every_imported_dependency_is_pinned():
    """What the code imports, and what runs it (snakemake and each cluster profile's executor plugin)."""
    pinned = {re.sub(r"[-_.]+", "-", name) for name in pins(REPO / "envs" / "requirements.txt")}
    imported = imported_distributions()
    assert {"torch", "transformers", "pandas"} <= set(imported)  # the scan sees the imports
    unpinned = {dist: module for dist, module in imported.items() if dist not in pinned}
    assert not unpinned, f"imported but not pinned in envs/requirements.txt: {unpinned}"
    executors = {yaml.safe_load(p.read_text())["executor"] for p in (REPO / "slurm").rglob("config.yaml")}
    assert executors and {"snakemake", *(f"snakemake-executor-plugin-{e}" for e in executors)} <= pinned


def test_installed_versions_match_the_pins():
    from importlib import metadata

    for name, version in pins(REPO / "envs" / "requirements.txt").items():
        assert metadata.version(name).split("+")[0] == version, name  # torch reports 2.13.0+cpu


def test_remote_set_differs_only_where_old_modelling_code_needs_it():
    main, remote = pins(REPO / "envs" / "requirements.txt"), pins(REPO / "envs" / "requirements-remote.txt")
    changed = {name for name in main.keys() | remote.keys() if main.get(name) != remote.get(name)}
    assert changed == {"transformers", "tokenizers", "peft", "huggingface-hub"}
    assert remote["transformers"].startswith("4.") and remote["torch"] == main["torch"]


def test_a_study_whose_base_ships_its_code_runs_in_the_transformers_4_conda_env(tmp_path):
    from anchormask.settings import bases

    embedded = {"base": {"path": str(REPO / "data" / "base"), "trust_remote_code": False}}
    assert bases.conda_env(embedded) == "anchormask.yaml"
    (tmp_path / "config.json").write_text('{"model_type": "llada", "auto_map": {"AutoModel": '
                                          '"modeling_llada.LLaDAModelLM"}}')
    assert bases.conda_env({"base": {"path": str(tmp_path), "trust_remote_code": True}}) == "anchormask-remote.yaml"
    assert all((REPO / "envs" / name).is_file() for name in bases.CONDA_ENVS.values())
