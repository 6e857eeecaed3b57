"""Several bases in one run: the config's ``bases:`` mapping, each base's merged and checked config,
and where its outputs go.

Each entry of ``bases:`` is a name and a layer merged over the rest of the config (the path of a
layer file such as ``config/bases/llada-8b-base.yaml``, or an inline mapping; ``{}`` keeps the
config's own base). The workflow instantiates the whole study once per base as a Snakemake module
whose ``results/`` paths are rewritten to ``results/bases/<name>/`` (workflow/rules/bases.smk), so
one set of rules serves every base and a change to one base's layer reruns only its subtree.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anchormask.settings import config as study_config
from anchormask.settings import layers as config_layers

BASES_DIR = "results/bases"  # each base's study under BASES_DIR/<name>/, the tree results/ has without bases
REMOTE_ENV = "bash .ci/setup remote, then .venv-remote/bin/snakemake (envs/requirements-remote.txt: transformers 4.46)"


@dataclass
class BaseStudy:
    """One base's study: its name, where its layer came from, its merged config and the config's sources."""

    name: str
    source: str  # the layer file, or "bases.NAME" for an inline layer; a list's, joined by ", "
    config: dict[str, Any]
    layers: config_layers.ConfigLayers
    targets: list[str] = field(default_factory=list)  # its default target, filled while its module loads

    @property
    def results(self) -> str:
        return f"{BASES_DIR}/{self.name}"

    @property
    def replace_prefix(self) -> dict[str, str]:
        """The module's path rewriting: every results/ path of its rules goes under ``results``."""
        return {"results/": f"{self.results}/"}

    def in_results(self, path: str) -> str:
        """``replace_prefix`` for a path that reaches a job some other way than its input or output (a param)."""
        (old, new), = self.replace_prefix.items()
        return new + path[len(old):] if path.startswith(old) else path

    @property
    def module(self) -> str:
        """The Snakemake module's name, a prefix of its rules' names: names may hold '-', identifiers not."""
        return "base_" + self.name.replace("-", "_")

    def rule(self, name: str) -> str:
        """The name its instance of the study's rule ``name`` has in the workflow."""
        return f"{self.module}_{name}"


def read_layer(name: str, entry: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the layer's source name, its content) for one entry of ``bases:``."""
    if isinstance(entry, dict):
        source, layer = f"bases.{name}", entry
    else:
        source = entry
        if not Path(entry).is_file():
            raise study_config.ConfigError(f"bases.{name}: layer file {entry!r} not found (relative to "
                                           f"{Path.cwd()}); give its path from the working directory, or an "
                                           "inline mapping ({} keeps the config's own base)")
        layer = study_config.yaml_file(entry) or {}
    if not isinstance(layer, dict):
        raise study_config.ConfigError(f"{source} (bases.{name}): a layer is a mapping of config keys, got "
                                       f"{type(layer).__name__}")
    if "bases" in layer:
        raise study_config.ConfigError(f"{source} (bases.{name}): a base's layer cannot set `bases`; remove it")
    return source, layer


Layer = str | dict[str, Any]  # a layer file's path or an inline mapping


def read_layers(name: str, entry: Layer | list[Layer]) -> list[tuple[str, dict[str, Any]]]:
    """The layers of one entry of ``bases:``, in merge order: one, or a list (a shipped layer, then a user's
    own with the download's path: ``[config/bases/llada-8b-base.yaml, my-llada-paths.yaml]``)."""
    entries = entry if isinstance(entry, list) else [entry]
    if not entries:
        raise study_config.ConfigError(f"bases.{name}: an empty list of layers; give at least one layer file or "
                                       "mapping ({} keeps the config's own base)")
    return [read_layer(name, e) for e in entries]


def studies(config: dict[str, Any], layers: config_layers.ConfigLayers) -> list[BaseStudy]:
    """Every base's study, in ``bases:`` order, each merged config validated as a whole config and its base
    checked (positions, folder); an error names the base, the layer file and the key."""
    common = {k: v for k, v in config.items() if k != "bases"}
    found = []
    for name, entry in config["bases"].items():
        read = read_layers(name, entry)
        merged, named = common, []
        for source, layer in read:
            merged = config_layers.merge(merged, layer)
            named.append((source if source == f"bases.{name}" else f"{source} (bases.{name})", layer))
        study = BaseStudy(name, ", ".join(source for source, _ in read), merged,
                          config_layers.ConfigLayers((*layers.layers, *named)))
        with naming(study):
            study_config.validate(study.config, study.layers.source_of)
            study_config.check_base(study.config, study.layers.source_of)
        found.append(study)
    return found


@contextmanager
def naming(study: BaseStudy) -> Iterator[None]:
    """A config error raised inside says which base it is about."""
    try:
        yield
    except study_config.ConfigError as err:
        raise study_config.ConfigError(f"bases.{study.name}: {err}") from None


def remote_code(base_dir: str | Path) -> list[str]:
    """The modelling code a checkpoint ships (config.json's auto_map), [] for one transformers itself knows."""
    path = Path(base_dir) / "config.json"
    auto_map = json.loads(path.read_text(encoding="utf-8")).get("auto_map") or {}
    return sorted(set(auto_map.values()))


CONDA_ENVS = {False: "anchormask.yaml", True: "anchormask-remote.yaml"}  # envs/: transformers 5 / 4.x


def conda_env(config: dict[str, Any]) -> str:
    """The conda environment file (envs/) a study's jobs run in under `--sdm conda`: the transformers 4.x
    one where its base ships modelling code (the code LLaDA and Dream ship loads under 4.38-4.46 only)."""
    base = config["base"]
    return CONDA_ENVS[bool(base.get("trust_remote_code") and remote_code(base["path"]))]


def refuse_unloadable(found: list[BaseStudy], transformers_version: str | None = None) -> None:
    """Refuse, before any job runs, a base whose modelling code the running transformers cannot load.

    LLaDA's and Dream's code (trust_remote_code) loads under transformers 4.38-4.46 only; the 4.x
    environment loads BERT-style checkpoints as well, so a mixed run belongs there.
    """
    version = transformers_version or importlib.metadata.version("transformers")
    if int(version.split(".")[0]) < 5:
        return
    bad = [(s, remote_code(s.config["base"]["path"])) for s in found if s.config["base"].get("trust_remote_code")]
    bad = [(s, code) for s, code in bad if code]
    if bad:
        lines = [f"bases.{s.name}: {s.config['base']['path']} ships modelling code ({', '.join(code)}) written "
                 f"for transformers 4.38-4.46; this run has transformers {version}" for s, code in bad]
        raise study_config.ConfigError("\n  ".join(lines) + f"\n  run the study in the 4.x environment, which "
                                       f"loads every base of this run: {REMOTE_ENV}")


_LOADING: list[BaseStudy] = []


@contextmanager
def loading(study: BaseStudy) -> Iterator[BaseStudy]:
    """While a base's module loads, its study.smk asks ``loading_now`` which base it is."""
    _LOADING.append(study)
    try:
        yield study
    finally:
        _LOADING.pop()


def loading_now() -> BaseStudy | None:
    """The base whose module is loading; None when the workflow is the study of one base."""
    return _LOADING[-1] if _LOADING else None
