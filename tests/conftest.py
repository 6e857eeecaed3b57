"""Fixtures shared by several test modules: a tiny masked LM in Hugging Face format (its directory
and, per module, the loaded backbone), tiny training pairs, an adapter trained on them, a retrieval
file of law queries, and the finished reduced study (tests/configs/tiny.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import REPO, TINY, build_tiny_model, cpu_base, tiny_train_settings

KINDS = ("unit", "workflow", "slow", "slurm", "gpu")  # the markers of pyproject.toml


def pytest_collection_modifyitems(config, items):
    """Every test has exactly one kind, so that ``pytest -m unit`` (and the others) select all of it."""
    wrong = [f"{item.nodeid}: {kinds or 'none'}" for item in items
             if len(kinds := sorted({m.name for m in item.iter_markers() if m.name in KINDS})) != 1]
    if wrong:
        raise pytest.UsageError(f"tests need exactly one of the markers {', '.join(KINDS)} "
                                "(pyproject.toml):\n  " + "\n  ".join(wrong))
    skip_without_cuda([item for item in items if item.get_closest_marker("gpu")])


def skip_without_cuda(items) -> None:
    """A ``gpu`` test is skipped, with the reason, where torch sees no CUDA device."""
    if not items:  # torch is imported only when a gpu test was collected
        return
    import torch

    if not torch.cuda.is_available():
        reason = pytest.mark.skip(reason=f"needs a CUDA device; torch {torch.__version__} sees none")
        for item in items:
            item.add_marker(reason)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tiny_backbone(tiny_model_dir):
    """(backbone, runtime) of the tiny model on the CPU, in eval mode; one per module."""
    from anchormask.model import backbone as bb

    runtime = bb.pick_runtime("cpu")
    backbone = bb.load_backbone(tiny_model_dir, runtime=runtime)
    backbone.model.eval()
    return backbone, runtime


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
def trained_adapter(tiny_model_dir, tiny_pairs, tmp_path_factory) -> Path:
    """anchor_full_n6_s2_seed42 trained on the tiny model and pairs; copy it before altering it."""
    from anchormask import study
    from anchormask.training import train

    out = tmp_path_factory.mktemp("adapters") / "anchor_full_n6_s2_seed42"
    train.train(cpu_base(tiny_model_dir), str(tiny_pairs), study.AdapterJob("anchor", "full", 6, 2, 42),
                tiny_train_settings(), str(out))
    return out


@pytest.fixture(scope="session")
def law_retrieval(tmp_path_factory) -> Path:
    """The retrieval file of the first three law queries (held out, main query set)."""
    from anchormask import data
    from anchormask.generation import retrieval

    out = tmp_path_factory.mktemp("retrieval") / "law.jsonl"
    queries = data.load_queries(REPO / "data" / "queries" / "law.jsonl", 3)
    rows = retrieval.retrieve(queries, data.load_corpus(REPO / "data" / "corpora" / "law.jsonl"), k1=1.5, b=0.75)
    out.write_text("".join(json.dumps({"domain": "law", "split": "held_out", "query_set": "main", **r}) + "\n"
                           for r in rows))
    return out


@pytest.fixture(scope="session")
def repo_copy(tmp_path_factory) -> Path:
    """A copy of the working tree for dry runs; tests that edit a copy make their own."""
    from helpers import copy_repo

    return copy_repo(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="session")
def default_dag(repo_copy) -> dict[str, int]:
    """Rule -> job count of the default target's dry run (tests/test_workflow.py checks the counts)."""
    from helpers import dry_run_jobs

    return dry_run_jobs(repo_copy)


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory) -> Path:
    """A copy of the repository with the reduced study (tests/configs/tiny.yaml) run to completion."""
    from helpers import copy_repo, snakemake

    repo = copy_repo(tmp_path_factory.mktemp("tiny_study"))
    snakemake(repo, "--cores", "2", "--configfile", TINY)
    return repo
