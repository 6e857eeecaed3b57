"""The configuration's layers: which source set a key (config.yaml, each --configfile, --config, a
base's layer), merging a layer over a configuration, and the types of --config values.

Snakemake merges, in order, config.yaml, each --configfile and --config; it reads a --config value
with YAML's BaseLoader, so every nested scalar arrives as a string (`--config 'train={rank: 8}'`
gives rank '8').
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import yaml

from anchormask.schemas import alternatives as _alternatives
from anchormask.schemas import child_schemas as _child_schemas
from anchormask.schemas import has_path
from anchormask.schemas import resolve as _resolve
from anchormask.settings.config import KeyPath, schema_document, yaml_file


@dataclass(frozen=True)
class ConfigLayers:
    """The configuration's sources in merge order: (name, content) from first to last."""

    layers: tuple[tuple[str, dict[str, Any]], ...]

    def source_of(self, path: KeyPath) -> str:
        """The last source that sets ``path`` (or its nearest parent): the one that wins the merge."""
        for depth in range(len(path), 0, -1):
            for name, content in reversed(self.layers):
                if has_path(content, path[:depth]):
                    return name
        return self.layers[0][0]

    def where_set(self, path: KeyPath) -> str:
        """``path`` as the winning source spells it, and that source: ``base.sha256 in
        config/bases/llada-8b-base.yaml``; for an inline entry of ``bases:``, ``bases.early.base.sha256 in``
        the file that holds the entry."""
        key, name = ".".join(path), self.source_of(path)
        if name.startswith("bases.") and " " not in name:
            outer = ConfigLayers(tuple(layer for layer in self.layers if layer[0] != name))
            return f"{name}.{key} in {outer.source_of(tuple(name.split('.')))}"
        return f"{key} in {name.split(' (bases.')[0]}"

    def sets(self, path: KeyPath) -> bool:
        """Some source sets ``path`` itself (not merely a default the schema fills in)."""
        return any(has_path(content, path) for _, content in self.layers)


def command_line_layers(settings) -> ConfigLayers:
    """config.yaml, each --configfile and --config, in Snakemake's merge order (``settings``: the workflow's
    ``config_settings``): errors name the one that set the bad value."""
    import os

    files = [(os.path.relpath(f), yaml_file(f)) for f in settings.configfiles]
    return ConfigLayers((("config.yaml", yaml_file("config.yaml")), *files, ("--config", dict(settings.config or {}))))


def merge(config: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """``layer`` over ``config`` as Snakemake merges config files: mappings key by key, anything else replaced."""
    merged = copy.deepcopy(config)
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged




def _leaves(value: Any, path: KeyPath = ()):
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _leaves(child, (*path, i))
    else:
        yield path, value


def _accepts_string(node: dict[str, Any], root: dict[str, Any], text: str) -> bool:
    """Whether ``text`` as written is a value of the node: any string, or one of its enum's strings (a key
    that takes true or a strategy name gets true from "true", one_in_two as written)."""
    node = _resolve(node, root)
    types = node.get("type", [])
    if "string" in ([types] if isinstance(types, str) else types):
        return True
    if text in [v for v in node.get("enum", []) if isinstance(v, str)]:
        return True
    return any(_accepts_string(part, root, text) for part in _alternatives(node))


def _wants_string(path: KeyPath, schema: dict[str, Any], text: str) -> bool:
    nodes = [schema]
    for key in path:
        nodes = [c for n in nodes for c in _child_schemas(n, schema, key)]
    return any(_accepts_string(n, schema, text) for n in nodes)


def _parse_scalar(text: str) -> Any:
    """A --config string as YAML would read it in config.yaml (1e-3 included, which YAML 1.1 leaves a string)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _set(config: dict[str, Any], path: KeyPath, value: Any) -> None:
    for key in path[:-1]:
        config = config[key]
    config[path[-1]] = value


def apply_override_types(config: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Give --config values their YAML types where the schema does not take a string.

    ``config`` is the merged configuration, ``overrides`` the --config part of it as Snakemake parsed
    it; a value where the schema takes a string (a path, an enum name) stays as written.
    """
    schema = schema_document()
    for path, value in _leaves(overrides):
        if path and isinstance(value, str) and not _wants_string(path, schema, value) and has_path(config, path):
            _set(config, path, _parse_scalar(value))
