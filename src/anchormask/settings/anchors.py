"""Statements as anchors. Generation locks a query's retrieved statement at the start of the answer
slot, cutting one of generation.answer_len tokens or more to answer_len − 1 (long_anchor: truncate).
A statement of more than ANCHOR_MARGIN × answer_len tokens would lose more than half of itself, and
one longer than the base's positions cannot even be read whole: such a record cannot serve as an
anchor at all, and the DAG build refuses it. Counted with the base's tokenizer.json (the tokens the
generation job locks; loads in milliseconds, no model); a base without one: whitespace words, fewer
than the tokens of the usual tokenizers, none of which joins two words in one token.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from anchormask import data, fileio, study
from anchormask.generation import retrieval
from anchormask.model.layout import max_positions

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
        path = data.corpus_path(config, domain)
        records = data.load_corpus(path)
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
