import pytest

from anchormask import data, io
from anchormask.pretrain_text import normalise
from helpers import REPO

HELD_OUT = ["astronomy", "medicine", "law", "culinary"]


def write_lines(path, lines):
    path.write_text("".join(lines))
    return path


def test_malformed_json_line_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", ['{"id": "a", "text": "x"}\n', '{"id": "b", "text": \n'])
    with pytest.raises(io.InputError, match=r"c.jsonl: line 2"):
        data.load_corpus(path)


def test_missing_field_and_empty_text_name_the_field(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", ['{"id": "q1", "gold_id": "x"}\n'])
    with pytest.raises(io.InputError, match=r"line 1: field 'query': missing"):
        data.load_queries(path)
    path = write_lines(tmp_path / "c.jsonl", ['{"id": "a", "text": "  "}\n'])
    with pytest.raises(io.InputError, match=r"field 'text'"):
        data.load_corpus(path)


def test_duplicate_ids_are_refused(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", ['{"id": "a", "text": "x"}\n', '{"id": "a", "text": "y"}\n'])
    with pytest.raises(io.InputError, match=r"line 2: field 'id': duplicate id 'a' \(first on line 1\)"):
        data.load_corpus(path)


def test_seeded_subset_is_reproducible_and_first_takes_the_head():
    pairs = data.load_pairs(REPO / "data" / "train" / "pairs.jsonl")
    assert data.select_pairs(pairs, 72, "first", 1) == pairs[:72]
    seeded = data.select_pairs(pairs, 72, "seeded", 1)
    assert seeded == data.select_pairs(pairs, 72, "seeded", 1) and seeded != pairs[:72]
    with pytest.raises(io.InputError, match="more pairs than"):
        data.select_pairs(pairs, 1000, "first", 1)


def test_shipped_data_has_the_protocol_sizes():
    import yaml

    counts = data.check_all(yaml.safe_load((REPO / "config.yaml").read_text()))
    assert counts["queries:in_domain"] == 15
    assert all(counts[f"queries:{d}"] == 12 for d in HELD_OUT)
    assert counts["pairs"] >= 144


def _held_out_statements():
    return [rec["text"] for d in HELD_OUT for rec in data.load_corpus(REPO / "data" / "corpora" / f"{d}.jsonl")]


def test_no_held_out_statement_is_in_the_training_pairs():
    pairs = data.load_pairs(REPO / "data" / "train" / "pairs.jsonl")
    train_text = " ".join(normalise(p["question"] + " " + p["answer"]) for p in pairs)
    for statement in _held_out_statements():
        assert normalise(statement) not in train_text


def test_every_query_gold_statement_exists_in_its_corpus():
    for domain in ["in_domain", *HELD_OUT]:
        ids = {r["id"] for r in data.load_corpus(REPO / "data" / "corpora" / f"{domain}.jsonl")}
        for q in data.load_queries(REPO / "data" / "queries" / f"{domain}.jsonl"):
            assert q["gold_id"] in ids, (domain, q["id"])


def test_no_query_appears_in_the_training_pairs_and_in_domain_queries_are_new():
    pairs = data.load_pairs(REPO / "data" / "train" / "pairs.jsonl")
    questions = {normalise(p["question"]) for p in pairs}
    train_text = " ".join(normalise(p["question"] + " " + p["answer"]) for p in pairs)
    for domain in ["in_domain", *HELD_OUT]:
        for q in data.load_queries(REPO / "data" / "queries" / f"{domain}.jsonl"):
            assert normalise(q["query"]) not in questions, q["id"]
            if domain != "in_domain":
                assert normalise(q["query"]) not in train_text, q["id"]


def test_second_query_set_is_new_unique_and_answered_in_its_corpus():
    first = {q["id"]: q for d in ["in_domain", *HELD_OUT]
             for q in data.load_queries(REPO / "data" / "queries" / f"{d}.jsonl")}
    seen: set[str] = set()
    for domain in HELD_OUT:
        ids = {r["id"] for r in data.load_corpus(REPO / "data" / "corpora" / f"{domain}.jsonl")}
        alt = data.load_queries(REPO / "data" / "queries_alt" / f"{domain}.jsonl")
        assert len(alt) == 12
        for q in alt:
            assert q["gold_id"] in ids and q["id"] not in first and q["id"] not in seen, q["id"]
            assert normalise(q["query"]) not in {normalise(f["query"]) for f in first.values()}
            seen.add(q["id"])
