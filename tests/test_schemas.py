"""The schemas are package data of the library, and the workflow validates against the same files."""

import tomllib

from anchormask import schemas
from helpers import REPO


def test_schemas_are_package_data_and_the_workflow_validates_against_the_same_file():
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert package_data["anchormask.schemas"] == ["*.schema.yaml"]
    for name in schemas.NAMES:
        assert schemas.path(name).is_file() and (REPO / schemas.shown(name)).is_file()
        assert schemas.document(name)["$schema"].endswith("2020-12/schema")
    assert 'validate(config, str(study_schemas.path("config")))' in (REPO / "workflow/rules/common.smk").read_text()
    assert not (REPO / "workflow" / "schemas").exists()
