"""Shared fixtures: a tiny masked LM in Hugging Face format, built in the test's temp dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_pairs(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    rows = [
        {"id": f"pair-{i:03d}", "statement_id": f"geo-{i:03d}", "question": q, "answer": a}
        for i, (q, a) in enumerate([
            ("Which river flows into the sea?", "The river flows north into the sea."),
            ("What is the deepest lake?", "The deepest lake in the world is in the north."),
            ("Where is the capital city?", "The capital city is in the south of the country."),
            ("Which mountain is the highest?", "The highest mountain of the world is in the east."),
            ("What is the longest river?", "The longest river flows through the country."),
            ("Which sea is the largest?", "The largest sea is in the west of the world."),
        ], start=1)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory) -> Path:
    """A copy of the repository with the reduced study (tests/configs/tiny.yaml) run to completion."""
    from helpers import copy_repo, snakemake

    repo = copy_repo(tmp_path_factory.mktemp("tiny_study"))
    snakemake(repo, "--cores", "2", "--configfile", "tests/configs/tiny.yaml")
    return repo
