"""Corpora, training pairs and queries: strict loading against the package's schemas (src/anchormask/schemas/)."""

from __future__ import annotations

from dataclasses import dataclass
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


def _check_schema(path: str | Path, records: list[dict[str, Any]], kind: str, fix: str = "") -> None:
    """Every record against schema ``kind`` (src/anchormask/schemas/); the first bad line is named, with
    its first problem (a missing field before the others, then by field)."""
    validator = _validator(kind)
    for lineno, rec in enumerate(records, start=1):
        errors = sorted(validator.iter_errors(rec),
                        key=lambda e: (e.validator != "required", list(map(str, e.absolute_path))))
        if errors:
            raise fileio.InputError(f"{path}: line {lineno}: {_field_problem(errors[0])}{fix}")


def load_records(path: str | Path, kind: str) -> list[dict[str, Any]]:
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


# ---------------------------------------------------------------------------------------------
# Statements as anchors. Generation locks a query's retrieved statement at the start of the answer
# slot, cutting one of generation.answer_len tokens or more to answer_len − 1 (long_anchor: truncate).
# A statement of more than ANCHOR_MARGIN × answer_len tokens would lose more than half of itself, and
# one longer than the base's positions cannot even be read whole: such a record cannot serve as an
# anchor at all, and the DAG build refuses it. Counted with the base's tokenizer.json (the tokens the
# generation job locks; loads in milliseconds, no model); a base without one: whitespace words, fewer
# than the tokens of the usual tokenizers, none of which joins two words in one token.

ANCHOR_MARGIN = 2


@dataclass(frozen=True)
class Statement:
    path: Path
    line: int
    id: str
    domain: str
    tokens: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line} ({self.id}, {self.tokens} tokens)"


def _counter(base: Path):
    """(texts -> their token counts, what counts them): the base's tokenizer.json, or whitespace words."""
    file = base / "tokenizer.json"
    try:
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(str(file))
        count = lambda texts: [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]  # noqa: E731
        return count, f"tokens of {file}"
    except Exception:  # missing, or written by a newer tokenizers: the bound below still holds
        unit = f"whitespace words, fewer than tokens: {base} has no readable tokenizer.json"
        return (lambda texts: [len(t.split()) for t in texts]), unit


def statement_lengths(config: dict) -> tuple[list[Statement], str]:
    """Every corpus statement of the study with its length, and what counted it (for messages)."""
    count, unit = _counter(Path(config["base"]["path"]))
    found = []
    for domain in [config["data"]["in_domain"], *config["data"]["held_out"]]:
        path = corpus_path(config, domain)
        records = load_corpus(path)
        found += [Statement(path, line, rec["id"], domain, n)
                  for line, (rec, n) in enumerate(zip(records, count([r["text"] for r in records])), start=1)]
    return found, unit


def _anchor_problem(statement: Statement, answer_len: int, positions, config_json: Path) -> str:
    where = f"{statement.path}: line {statement.line}: statement {statement.id!r} has {statement.tokens} tokens"
    kept = f"as an anchor it would keep only its first {answer_len - 1}"
    if positions and statement.tokens > positions[1]:
        return (f"{where}, more than the {positions[1]} positions the base reads ({positions[0]} in {config_json}): "
                f"{kept}; shorten or split the statement")
    return (f"{where}, more than {ANCHOR_MARGIN} × generation.answer_len = {ANCHOR_MARGIN * answer_len}: {kept}; "
            f"shorten or split the statement, or raise generation.answer_len to at least "
            f"{-(-statement.tokens // ANCHOR_MARGIN)}")


def check_anchor_lengths(config: dict) -> tuple[list[Statement], str]:
    """Raise InputError naming every statement that cannot serve as an anchor (file, line, id, length,
    limit and fix); otherwise return ``statement_lengths`` for ``format_truncations``."""
    from anchormask.settings.config import max_positions

    statements, unit = statement_lengths(config)
    config_json = Path(config["base"]["path"]) / "config.json"
    positions = max_positions(fileio.read_json(config_json)) if config_json.is_file() else None
    answer_len = config["generation"]["answer_len"]
    limit = min([ANCHOR_MARGIN * answer_len, *([positions[1]] if positions else [])])
    bad = [_anchor_problem(s, answer_len, positions, config_json) for s in statements if s.tokens > limit]
    if bad:
        shown = bad[:20] + ([f"... and {len(bad) - 20} more"] if len(bad) > 20 else [])
        raise fileio.InputError(f"statements that cannot serve as an anchor (counted in {unit}):\n  "
                                + "\n  ".join(shown))
    return statements, unit


def format_truncations(config: dict, checked: tuple[list[Statement], str]) -> str:
    """One line at the top of a run: how many of each query set's anchors (its queries' retrieved statements,
    as the retrieve jobs will pick them) have answer_len tokens or more; empty when none."""
    from anchormask.generation import retrieval
    from anchormask.settings import study

    tokens = {(s.domain, s.id): s for s in checked[0]}
    answer_len = config["generation"]["answer_len"]
    counts, long = [], {}
    for query_set, domains in study.query_sets(config).items():
        anchors = [(a["query_id"], tokens[(d, a["statement_id"])])
                   for d in domains for a in retrieval.study_anchors(config, d, query_set)]
        cut = [(q, s) for q, s in anchors if s.tokens >= answer_len]
        counts.append(f"{len(cut)} of the {query_set} query set's {len(anchors)}")
        long.update(dict(cut))
    if not long:
        return ""
    fate = f"are truncated to answer_len − 1 = {answer_len - 1} tokens (anchor_truncated in their records)"
    if config["generation"].get("long_anchor") == "fail":
        fate = "stop their generation jobs (generation.long_anchor: fail)"
    examples = "; ".join(f"{q}: {s.where}" for q, s in sorted(long.items())[:5]) + ("; …" if len(long) > 5 else "")
    most = max(s.tokens for s in long.values())
    return (f"WARNING: anchors of generation.answer_len = {answer_len} tokens or more, {' and '.join(counts)}, {fate}: "
            f"{examples}; raise generation.answer_len to {most + 1} to keep every anchor whole\n")


def gather_generations(paths: list[str], out: str) -> int:
    """Concatenate per-arm generation files after checking every record against its schema."""
    records = []
    for path in paths:
        records += load_generations(path)
    return fileio.write_jsonl(out, records)


def load_generations(path: str | Path) -> list[dict[str, Any]]:
    """A generation JSONL file, every record checked against the generation schema."""
    records = fileio.read_jsonl(path)
    _check_schema(path, records, "generation", "; regenerate it (delete the file and rerun snakemake)")
    return records
