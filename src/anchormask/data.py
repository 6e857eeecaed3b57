"""Corpora, training pairs and queries: strict loading against the package's schemas (src/anchormask/schemas/)."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

from anchormask import fileio, schemas


@cache
def _validator(kind: str):
    import jsonschema

    return jsonschema.Draft202012Validator(schemas.document(kind))


def _unknown_field(error) -> str:
    import difflib

    allowed = sorted(error.schema.get("properties", {}))
    unknown = sorted(set(error.instance) - set(allowed))
    close = difflib.get_close_matches(unknown[0], allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"field '{unknown[0]}': unknown field{hint}; allowed fields: {', '.join(allowed)}"


def _field_problem(error) -> str:
    if error.validator == "additionalProperties":
        return _unknown_field(error)
    if error.validator == "required":
        missing = error.message.split("'")[1]
        return f"field '{missing}': missing; every line needs {', '.join(error.validator_value)}"
    field = ".".join(map(str, error.absolute_path)) or "(record)"
    if error.validator in ("minLength", "pattern") and isinstance(error.instance, str) and not error.instance.strip():
        return f"field '{field}': empty text; give it content or remove the line"
    return f"field '{field}': {error.message}"


def _check_schema(path: str | os.PathLike[str], records: list[dict[str, Any]], kind: str, fix: str = "") -> None:
    """Every record against schema ``kind`` (src/anchormask/schemas/); the first bad line is named, with
    its first problem (a missing field before the others, then by field)."""
    validator = _validator(kind)
    for lineno, rec in enumerate(records, start=1):
        errors = sorted(validator.iter_errors(rec),
                        key=lambda e: (e.validator != "required", list(map(str, e.absolute_path))))
        if errors:
            raise fileio.InputError(f"{path}: line {lineno}: {_field_problem(errors[0])}{fix}")


def load_records(path: str | os.PathLike[str], kind: str) -> list[dict[str, Any]]:
    """Read a JSONL file of one kind (corpus, pairs, queries); fail at the first bad line."""
    records = fileio.read_jsonl(path)
    _check_schema(path, records, kind)
    seen: dict[str, int] = {}
    for lineno, rec in enumerate(records, start=1):
        if rec["id"] in seen:
            raise fileio.InputError(f"{path}: line {lineno}: field 'id': duplicate id {rec['id']!r} "
                                f"(first on line {seen[rec['id']]}); ids must be unique")
        seen[rec["id"]] = lineno
    if not records:
        raise fileio.InputError(f"{path}: no records")
    return records


def corpus_path(config: dict, domain: str) -> Path:
    return Path(config["data"]["corpora_dir"]) / f"{domain}.jsonl"


def queries_path(config: dict, domain: str, query_set: str = "main") -> Path:
    key = {"main": "queries_dir", "alt": "alt_queries_dir"}[query_set]
    return Path(config["data"][key]) / f"{domain}.jsonl"


def load_corpus(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return load_records(path, "corpus")


def load_pairs(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return load_records(path, "pairs")


def load_queries(path: str | os.PathLike[str], limit: int | None = None) -> list[dict[str, Any]]:
    records = load_records(path, "queries")
    return records[:limit] if limit else records


def select_pairs(pairs: list[dict[str, Any]], size: int, subset: str, seed: int) -> list[dict[str, Any]]:
    """The training set of a job: the first ``size`` pairs, or a seeded sample of them."""
    if size > len(pairs):
        raise fileio.InputError(f"data size {size} asks for more pairs than the {len(pairs)} in the pairs file; "
                            "lower sweep.sizes / train.default.size or add pairs")
    if subset == "first":
        return pairs[:size]
    import random

    idx = sorted(random.Random(seed).sample(range(len(pairs)), size))
    return [pairs[i] for i in idx]


def _existing(path: Path, key: str, domain: str, role: str) -> Path:
    """The data file of one domain; a missing one names the config keys that point at it."""
    if not path.is_file():
        raise fileio.InputError(f"{path}: file not found; {role} names domain {domain!r}, whose file must be "
                            f"{key}/{domain}.jsonl: add the file or remove {domain!r} from {role}")
    return path


def _query_sets(config: dict, domain: str) -> list[tuple[str, str]]:
    """(query set, its config key) of one domain: the second set covers the held-out domains only."""
    alt = config["data"].get("alt_queries_dir") and domain != config["data"]["in_domain"]
    return [("main", "data.queries_dir")] + ([("alt", "data.alt_queries_dir")] if alt else [])


def _role(config: dict, domain: str) -> str:
    return "data.in_domain" if domain == config["data"]["in_domain"] else "data.held_out"


def _check_query_ids_unique(queries: dict[tuple[str, str], tuple[Path, list[dict[str, Any]]]]) -> None:
    """Query ids key the generations and seed each query's sampler: one id, one query, across domains."""
    first: dict[str, tuple[Path, int]] = {}
    for path, records in queries.values():
        for lineno, rec in enumerate(records, start=1):
            if rec["id"] in first:
                other, line = first[rec["id"]]
                raise fileio.InputError(f"{path}: line {lineno}: field 'id': query id {rec['id']!r} is also on line "
                                    f"{line} of {other}; query ids must be unique across domains: rename one")
            first[rec["id"]] = (path, lineno)


def _check_gold_ids(path: Path, records: list[dict[str, Any]], corpus_file: Path, corpus: list[dict[str, Any]]):
    ids = {rec["id"] for rec in corpus}
    for lineno, rec in enumerate(records, start=1):
        if "gold_id" in rec and rec["gold_id"] not in ids:
            raise fileio.InputError(f"{path}: line {lineno}: field 'gold_id': {rec['gold_id']!r} is not the id of a "
                                f"statement in {corpus_file}; correct the id or remove the field")


def _check_pair_answers(path: str, pairs: list[dict[str, Any]], corpus_file: Path, corpus: list[dict[str, Any]]):
    """A pair's answer is its locus statement: the text of one statement of the in-domain corpus."""
    texts = {rec["text"]: rec["id"] for rec in corpus}
    ids = {rec["id"]: rec["text"] for rec in corpus}
    for lineno, pair in enumerate(pairs, start=1):
        where = f"{path}: line {lineno}"
        if pair["answer"] not in texts:
            raise fileio.InputError(f"{where}: field 'answer': not the text of any statement of the in-domain corpus "
                                f"{corpus_file}; a pair's answer is its locus statement: copy that statement's "
                                "text exactly")
        sid = pair.get("statement_id")
        if sid is not None and sid not in ids:
            raise fileio.InputError(f"{where}: field 'statement_id': {sid!r} is not an id of {corpus_file}; the answer "
                                f"is statement {texts[pair['answer']]!r}")
        if sid is not None and ids[sid] != pair["answer"]:
            raise fileio.InputError(f"{where}: field 'statement_id': {sid!r} has another text than the answer, "
                                    f"which is statement {texts[pair['answer']]!r} of {corpus_file}; "
                                    "correct one of them")


def check_all(config: dict) -> dict[str, int]:
    """Load every data file the study uses and check them against each other, before any compute.

    Raises InputError on the first problem, naming the file, the line and the field.
    """
    in_domain = config["data"]["in_domain"]
    corpora, queries = {}, {}
    for domain in [in_domain, *config["data"]["held_out"]]:
        role = _role(config, domain)
        corpus_file = _existing(corpus_path(config, domain), "data.corpora_dir", domain, role)
        corpora[domain] = (corpus_file, load_corpus(corpus_file))
        for query_set, key in _query_sets(config, domain):
            query_file = _existing(queries_path(config, domain, query_set), key, domain, role)
            queries[(query_set, domain)] = (query_file, load_queries(query_file))
            _check_gold_ids(*queries[(query_set, domain)], *corpora[domain])
    _check_query_ids_unique(queries)  # across sets too: the arms' generations hold every set
    pairs = load_pairs(config["data"]["pairs"])
    _check_pair_answers(config["data"]["pairs"], pairs, *corpora[in_domain])
    counts = {"pairs": len(pairs)}
    for domain in corpora:
        counts[f"corpus:{domain}"] = len(corpora[domain][1])
        counts[f"queries:{domain}"] = len(queries[("main", domain)][1])
        if ("alt", domain) in queries:
            counts[f"alt_queries:{domain}"] = len(queries[("alt", domain)][1])
    return counts


def gather_generations(paths: list[str], out: str) -> int:
    """Concatenate per-arm generation files after checking every record against its schema."""
    records = []
    for path in paths:
        records += load_generations(path)
    return fileio.write_jsonl(out, records)


def load_generations(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """A generation JSONL file, every record checked against the generation schema."""
    records = fileio.read_jsonl(path)
    _check_schema(path, records, "generation", "; regenerate it (delete the file and rerun snakemake)")
    return records
