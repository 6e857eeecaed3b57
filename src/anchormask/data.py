"""Corpora, training pairs and queries: strict loading against workflow/schemas/."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from anchormask import io

SCHEMAS = Path(__file__).resolve().parents[2] / "workflow" / "schemas"


@cache
def _validator(kind: str):
    import jsonschema

    schema = yaml.safe_load((SCHEMAS / f"{kind}.schema.yaml").read_text())
    return jsonschema.Draft202012Validator(schema)


def _field_problem(error) -> str:
    if error.validator == "required":
        missing = error.message.split("'")[1]
        return f"field '{missing}': missing; every line needs {', '.join(error.validator_value)}"
    field = ".".join(map(str, error.absolute_path)) or "(record)"
    if error.validator in ("minLength", "pattern") and isinstance(error.instance, str) and not error.instance.strip():
        return f"field '{field}': empty text; give it content or remove the line"
    return f"field '{field}': {error.message}"


def load_records(path: str | Path, kind: str) -> list[dict[str, Any]]:
    """Read a JSONL file of one kind (corpus, pairs, queries); fail at the first bad line."""
    records = io.read_jsonl(path)
    seen: dict[str, int] = {}
    for lineno, rec in enumerate(records, start=1):
        errors = sorted(_validator(kind).iter_errors(rec), key=lambda e: e.validator != "required")
        if errors:
            raise io.InputError(f"{path}: line {lineno}: {_field_problem(errors[0])}")
        if rec["id"] in seen:
            raise io.InputError(f"{path}: line {lineno}: field 'id': duplicate id {rec['id']!r} "
                                f"(first on line {seen[rec['id']]}); ids must be unique")
        seen[rec["id"]] = lineno
    if not records:
        raise io.InputError(f"{path}: no records")
    return records


def corpus_path(config: dict, domain: str) -> Path:
    return Path(config["data"]["corpora_dir"]) / f"{domain}.jsonl"


def queries_path(config: dict, domain: str, query_set: str = "main") -> Path:
    key = {"main": "queries_dir", "alt": "alt_queries_dir"}[query_set]
    return Path(config["data"][key]) / f"{domain}.jsonl"


def load_corpus(path: str | Path) -> list[dict[str, Any]]:
    return load_records(path, "corpus")


def load_pairs(path: str | Path) -> list[dict[str, Any]]:
    return load_records(path, "pairs")


def load_queries(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    records = load_records(path, "queries")
    return records[:limit] if limit else records


def select_pairs(pairs: list[dict[str, Any]], size: int, subset: str, seed: int) -> list[dict[str, Any]]:
    """The training set of a job: the first ``size`` pairs, or a seeded sample of them."""
    if size > len(pairs):
        raise io.InputError(f"data size {size} asks for more pairs than the {len(pairs)} in the pairs file; "
                            "lower sweep.sizes / train.default.size or add pairs")
    if subset == "first":
        return pairs[:size]
    import random

    idx = sorted(random.Random(seed).sample(range(len(pairs)), size))
    return [pairs[i] for i in idx]


def check_all(config: dict) -> dict[str, int]:
    """Load every data file the study uses; returns record counts (raises on the first problem)."""
    counts = {"pairs": len(load_pairs(config["data"]["pairs"]))}
    for domain in [config["data"]["in_domain"], *config["data"]["held_out"]]:
        counts[f"corpus:{domain}"] = len(load_corpus(corpus_path(config, domain)))
        counts[f"queries:{domain}"] = len(load_queries(queries_path(config, domain)))
    if config["data"].get("alt_queries_dir"):
        for domain in config["data"]["held_out"]:
            counts[f"alt_queries:{domain}"] = len(load_queries(queries_path(config, domain, "alt")))
    return counts


def gather_generations(paths: list[str], out: str) -> int:
    """Concatenate per-arm generation files after checking every record against its schema."""
    records = []
    for path in paths:
        records += load_generations(path)
    return io.write_jsonl(out, records)


def load_generations(path: str | Path) -> list[dict[str, Any]]:
    records = io.read_jsonl(path)
    for lineno, rec in enumerate(records, start=1):
        errors = list(_validator("generation").iter_errors(rec))
        if errors:
            raise io.InputError(f"{path}: line {lineno}: {_field_problem(errors[0])}; regenerate it "
                                f"(delete the file and rerun snakemake)")
    return records
