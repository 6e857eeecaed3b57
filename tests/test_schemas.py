"""The schemas as package data, every config key described."""

import tomllib

from anchormask import config, schemas
from helpers import REPO

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


def test_schemas_are_package_data_and_the_workflow_validates_against_the_same_file():
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert package_data["anchormask.schemas"] == ["*.schema.yaml"]
    for name in schemas.NAMES:
        assert schemas.path(name).is_file() and (REPO / schemas.shown(name)).is_file()
    assert 'validate(config, str(study_schemas.path("config")))' in (REPO / "workflow/rules/common.smk").read_text()
    assert not (REPO / "workflow" / "schemas").exists()
