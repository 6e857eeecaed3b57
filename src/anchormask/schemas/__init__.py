"""The study's JSON schemas, package data of the library: one ``{name}.schema.yaml`` each.

``config`` (config.yaml; the workflow's ``validate`` reads the same file, see workflow/rules/common.smk),
``corpus``, ``pairs``, ``queries`` (the lines of the data files), ``generation`` (one record of a
generation JSONL) and ``pretrain`` (workflow/pretrain.yaml, how the embedded base is built). The
config schema is also where each optional setting's default lives:
``default(("probes", "maskcount_k"))`` reads it, so code that needs a default asks here instead of
repeating the value.
"""

from __future__ import annotations

import copy
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

# The files this package reads, one per schema: the code digest (repro/codedigest.py) counts these and
# nothing else that lies in the folder.
DATA_FILES = ("config.schema.yaml", "corpus.schema.yaml", "pairs.schema.yaml", "queries.schema.yaml",
              "generation.schema.yaml", "pretrain.schema.yaml")
NAMES = tuple(file.removesuffix(".schema.yaml") for file in DATA_FILES)
SHOWN = "src/anchormask/schemas"  # where the files are in the repository, for messages


def path(name: str) -> Path:
    """The file of schema ``name`` on disk (for a reader that wants a path, e.g. Snakemake's validate)."""
    return Path(str(resources.files(__name__).joinpath(f"{name}.schema.yaml")))


def shown(name: str) -> str:
    """The schema's path in the repository, as messages name it."""
    return f"{SHOWN}/{name}.schema.yaml"


@cache
def _document(name: str) -> dict[str, Any]:
    if name not in NAMES:
        raise ValueError(f"no schema {name!r}; schemas: {', '.join(NAMES)}")
    return yaml.safe_load(resources.files(__name__).joinpath(f"{name}.schema.yaml").read_text(encoding="utf-8"))


def document(name: str) -> dict[str, Any]:
    """Schema ``name`` as a dict (a fresh copy: callers may change it)."""
    return copy.deepcopy(_document(name))


def resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """``node`` with a local ``$ref`` (``#/$defs/x``) followed."""
    ref = node.get("$ref", "")
    return root["$defs"][ref.rsplit("/", 1)[-1]] if ref.startswith("#/$defs/") else node


def alternatives(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [*node.get("allOf", []), *node.get("oneOf", []), *node.get("anyOf", [])]


def child_schemas(node: dict[str, Any], root: dict[str, Any], key) -> list[dict[str, Any]]:
    """The schemas that constrain ``key`` (a property name or a list index) below ``node``."""
    node = resolve(node, root)
    found = [c for part in alternatives(node) for c in child_schemas(part, root, key)]
    if isinstance(key, int):
        return found + ([resolve(node["items"], root)] if isinstance(node.get("items"), dict) else [])
    if key in node.get("properties", {}):
        return found + [resolve(node["properties"][key], root)]
    extra = node.get("additionalProperties")
    return found + ([resolve(extra, root)] if isinstance(extra, dict) else [])


def nodes_at(key_path: tuple, name: str = "config") -> list[dict[str, Any]]:
    """Every schema node that constrains ``key_path`` (e.g. ("generation", "steps")) in schema ``name``."""
    root = _document(name)
    nodes = [root]
    for key in key_path:
        nodes = [c for n in nodes for c in child_schemas(n, root, key)]
    return nodes


def default(key_path: tuple, name: str = "config") -> Any:
    """The ``default:`` that schema ``name`` gives the key at ``key_path`` (a copy); KeyError when none."""
    for node in nodes_at(tuple(key_path), name):
        if "default" in node:
            return copy.deepcopy(node["default"])
    raise KeyError(f"{shown(name)} gives no default for {'.'.join(map(str, key_path))}")


def setting(config: dict[str, Any], path: tuple) -> Any:
    """The value at ``path``, or the schema's default for it when the config does not set it (a config
    that Snakemake's validate has filled holds the defaults already; config.load's does not)."""
    content = config
    for key in path:
        if not isinstance(content, dict) or key not in content:
            return default(path)
        content = content[key]
    return content


def has_path(content: Any, path: tuple) -> bool:
    """``content`` holds a value at ``path`` (mapping keys and list indices)."""
    for key in path:
        if isinstance(content, dict) and key in content:
            content = content[key]
        elif isinstance(content, list) and isinstance(key, int) and key < len(content):
            content = content[key]
        else:
            return False
    return True
