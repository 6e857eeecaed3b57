import pytest

from anchormask import data, fileio
from anchormask.embedded_base.pretrain_text import lowercase_alnum_words
from anchormask.settings import anchors
from helpers import REPO

pytestmark = pytest.mark.unit

HELD_OUT = ["astronomy", "medicine", "law", "culinary"]


def write_lines(path, lines):
    path.write_text("".join(lines))
    return path


def test_malformed_json_line_names_file_and_line(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", ['{"id": "a", "text": "x"}\n', '{"id": "b", "text": \n'])
    with pytest.raises(fileio.InputError, match=r"c.jsonl: line 2"):
        data.load_corpus(path)


def test_missing_field_and_empty_text_name_the_field(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", ['{"id": "q1", "gold_id": "x"}\n'])
    with pytest.raises(fileio.InputError, match=r"line 1: field 'query': missing"):
        data.load_queries(path)
    path = write_lines(tmp_path / "c.jsonl", ['{"id": "a", "text": "  "}\n'])
    with pytest.raises(fileio.InputError, match=r"field 'text'"):
        data.load_corpus(path)


def test_duplicate_ids_are_refused(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", ['{"id": "a", "text": "x"}\n', '{"id": "a", "text": "y"}\n'])
    with pytest.raises(fileio.InputError, match=r"line 2: field 'id': duplicate id 'a' \(first on line 1\)"):
        data.load_corpus(path)


def test_seeded_subset_is_reproducible_and_first_takes_the_head():
    pairs = data.load_pairs(REPO / "data" / "train" / "pairs.jsonl")
    assert data.select_pairs(pairs, 72, "first", 1) == pairs[:72]
    seeded = data.select_pairs(pairs, 72, "seeded", 1)
    assert seeded == data.select_pairs(pairs, 72, "seeded", 1) and seeded != pairs[:72]
    with pytest.raises(fileio.InputError, match="more pairs than"):
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
    train_text = " ".join(lowercase_alnum_words(p["question"] + " " + p["answer"]) for p in pairs)
    for statement in _held_out_statements():
        assert lowercase_alnum_words(statement) not in train_text


def test_every_query_gold_statement_exists_in_its_corpus():
    for domain in ["in_domain", *HELD_OUT]:
        ids = {r["id"] for r in data.load_corpus(REPO / "data" / "corpora" / f"{domain}.jsonl")}
        for q in data.load_queries(REPO / "data" / "queries" / f"{domain}.jsonl"):
            assert q["gold_id"] in ids, (domain, q["id"])


def test_no_query_appears_in_the_training_pairs_and_in_domain_queries_are_new():
    pairs = data.load_pairs(REPO / "data" / "train" / "pairs.jsonl")
    questions = {lowercase_alnum_words(p["question"]) for p in pairs}
    train_text = " ".join(lowercase_alnum_words(p["question"] + " " + p["answer"]) for p in pairs)
    for domain in ["in_domain", *HELD_OUT]:
        for q in data.load_queries(REPO / "data" / "queries" / f"{domain}.jsonl"):
            assert lowercase_alnum_words(q["query"]) not in questions, q["id"]
            if domain != "in_domain":
                assert lowercase_alnum_words(q["query"]) not in train_text, q["id"]


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
            assert lowercase_alnum_words(q["query"]) not in {lowercase_alnum_words(f["query"]) for f in first.values()}
            seen.add(q["id"])


def test_unknown_field_is_named_with_the_allowed_ones(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", ['{"id": "q1", "query": "Why?", "goldid": "x"}\n'])
    with pytest.raises(fileio.InputError, match=r"q.jsonl: line 1: field 'goldid': unknown field \(did you mean "
                                            r"'gold_id'\?\); allowed fields: gold_id, id, query"):
        data.load_queries(path)
    path = write_lines(tmp_path / "p.jsonl", ['{"id": "p1", "question": "Q?", "answer": "A.", "anwser": "A."}\n'])
    with pytest.raises(fileio.InputError,
                       match=r"p.jsonl: line 1: field 'anwser': unknown field \(did you mean 'answer'"):
        data.load_pairs(path)


def test_a_byte_that_is_not_utf8_names_file_line_and_column(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"id": "a", "text": "x"}\n{"id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(fileio.InputError, match=r"c.jsonl: line 2: byte 0xe9 at column 25 is not UTF-8; save the file"):
        data.load_corpus(path)
    json_path = tmp_path / "r.json"
    json_path.write_bytes(b'{\n"a": "\xff"\n}\n')
    with pytest.raises(fileio.InputError, match=r"r.json: line 2: byte 0xff"):
        fileio.read_json(json_path)


def _study(tmp_path, **edits):
    """A two-domain study in tmp_path; ``edits`` maps a data file name to the lines it holds instead."""
    files = {
        "corpora/geo.jsonl": ['{"id": "geo-1", "text": "The Nile flows north."}\n',
                              '{"id": "geo-2", "text": "Everest is high."}\n'],
        "corpora/law.jsonl": ['{"id": "law-1", "text": "Courts decide cases."}\n'],
        "queries/geo.jsonl": ['{"id": "geo-q1", "query": "Where does the Nile flow?", "gold_id": "geo-1"}\n'],
        "queries/law.jsonl": ['{"id": "law-q1", "query": "What do courts do?", "gold_id": "law-1"}\n'],
        "pairs.jsonl": ['{"id": "p1", "statement_id": "geo-2", "question": "How high?", '
                        '"answer": "Everest is high."}\n'],
    }
    files.update({k.replace("__", "/"): v for k, v in edits.items()})
    for name, lines in files.items():
        if lines is not None:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            write_lines(tmp_path / name, lines)
    return {"data": {"corpora_dir": str(tmp_path / "corpora"), "queries_dir": str(tmp_path / "queries"),
                     "pairs": str(tmp_path / "pairs.jsonl"), "in_domain": "geo", "held_out": ["law"]}}


def test_a_consistent_study_passes_the_cross_file_checks(tmp_path):
    assert data.check_all(_study(tmp_path)) == {"pairs": 1, "corpus:geo": 2, "queries:geo": 1, "corpus:law": 1,
                                                "queries:law": 1}


@pytest.mark.parametrize("edits,expected", [
    ({"queries__law.jsonl": ['{"id": "geo-q1", "query": "Again?", "gold_id": "law-1"}\n']},
     r"law.jsonl: line 1: field 'id': query id 'geo-q1' is also on line 1 of .*geo.jsonl; query ids must be unique"),
    ({"queries__law.jsonl": ['{"id": "law-q1", "query": "What?", "gold_id": "law-9"}\n']},
     r"law.jsonl: line 1: field 'gold_id': 'law-9' is not the id of a statement in .*corpora/law.jsonl"),
    ({"pairs.jsonl": ['{"id": "p1", "question": "How high?", "answer": "Everest is very high."}\n']},
     r"pairs.jsonl: line 1: field 'answer': not the text of any statement of the in-domain corpus .*geo.jsonl"),
    ({"pairs.jsonl": ['{"id": "p1", "statement_id": "geo-1", "question": "Q?", "answer": "Everest is high."}\n']},
     r"pairs.jsonl: line 1: field 'statement_id': 'geo-1' has another text than the answer, which is statement "
     r"'geo-2'"),
    ({"corpora__law.jsonl": None},
     r"corpora/law.jsonl: file not found; data.held_out names domain 'law', whose file must be "
     r"data.corpora_dir/law.jsonl: add the file or remove 'law' from data.held_out"),
    ({"queries__geo.jsonl": None}, r"queries/geo.jsonl: file not found; data.in_domain names domain 'geo'"),
])
def test_cross_file_problems_name_file_line_and_field(tmp_path, edits, expected):
    with pytest.raises(fileio.InputError, match=expected):
        data.check_all(_study(tmp_path, **edits))


def test_the_second_query_set_is_checked_like_the_first(tmp_path):
    cfg = _study(tmp_path, **{"alt__law.jsonl": ['{"id": "law-q1", "query": "Again?", "gold_id": "law-1"}\n']})
    cfg["data"]["alt_queries_dir"] = str(tmp_path / "alt")
    with pytest.raises(fileio.InputError,
                       match=r"alt/law.jsonl: line 1: field 'id': query id 'law-q1' is also on line 1"):
        data.check_all(cfg)
    (tmp_path / "alt" / "law.jsonl").unlink()
    with pytest.raises(fileio.InputError, match=r"alt/law.jsonl: file not found; data.held_out names domain 'law', "
                                            r"whose file must be data.alt_queries_dir/law.jsonl"):
        data.check_all(cfg)
    write_lines(tmp_path / "alt" / "law.jsonl", ['{"id": "law-a1", "query": "And?", "gold_id": "law-1"}\n'])
    assert data.check_all(cfg)["alt_queries:law"] == 1


# --------------------------------------------------------------------------- statements as anchors (issue 39)

BASE = REPO / "data" / "base"  # max_position_embeddings 128
OUTLIER = "Courts decide cases between parties under the law. " * 400  # one statement pasted 400 times


def _anchor_study(tmp_path, answer_len=24, **edits):
    cfg = _study(tmp_path, **edits)
    return cfg | {"base": {"path": str(BASE)}, "generation": {"answer_len": answer_len},
                  "retrieval": {"k1": 1.5, "b": 0.75}}


def _law(text: str) -> dict:
    return {"corpora__law.jsonl": ['{"id": "law-1", "text": "Courts decide cases."}\n',
                                   f'{{"id": "law-2", "text": "{text.strip()}"}}\n']}


def _generation_tokens(text: str) -> int:
    """The anchor's tokens as the generation job counts them (layout.anchor_ids with the base's tokenizer)."""
    from transformers import AutoTokenizer

    from anchormask.model import layout

    return len(layout.anchor_ids(AutoTokenizer.from_pretrained(BASE), text.strip()))


def test_a_statement_longer_than_the_bases_positions_is_named_with_file_line_length_and_fix(tmp_path):
    n = _generation_tokens(OUTLIER)
    with pytest.raises(fileio.InputError) as err:
        anchors.check_anchor_lengths(_anchor_study(tmp_path, **_law(OUTLIER)))
    assert str(err.value) == (
        f"statements that cannot serve as an anchor (counted in tokens of {BASE}/tokenizer.json):\n"
        f"  {tmp_path}/corpora/law.jsonl: line 2: statement 'law-2' has {n} tokens, more than the 128 positions "
        f"the base reads (max_position_embeddings in {BASE}/config.json): as an anchor it would keep only its "
        "first 23; shorten or split the statement")


def test_a_statement_of_more_than_twice_the_answer_slot_is_named_with_the_fix(tmp_path):
    text = "Courts decide cases between parties under the law. " * 7
    n = _generation_tokens(text)
    assert 2 * 24 < n <= 128, n
    with pytest.raises(fileio.InputError) as err:
        anchors.check_anchor_lengths(_anchor_study(tmp_path, **_law(text)))
    assert str(err.value).splitlines()[1] == (
        f"  {tmp_path}/corpora/law.jsonl: line 2: statement 'law-2' has {n} tokens, more than 2 × "
        "generation.answer_len = 48: as an anchor it would keep only its first 23; shorten or split the "
        f"statement, or raise generation.answer_len to at least {-(-n // 2)}")
    anchors.check_anchor_lengths(_anchor_study(tmp_path, answer_len=-(-n // 2), **_law(text)))  # the fix it names


def test_without_a_tokenizer_json_whitespace_words_bound_the_tokens(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text((BASE / "config.json").read_text())
    cfg = _anchor_study(tmp_path, **_law(OUTLIER))
    cfg["base"]["path"] = str(base)
    with pytest.raises(fileio.InputError) as err:
        anchors.check_anchor_lengths(cfg)
    assert str(err.value).splitlines()[:2] == [
        f"statements that cannot serve as an anchor (counted in whitespace words, fewer than tokens: {base} has "
        "no readable tokenizer.json):",
        f"  {tmp_path}/corpora/law.jsonl: line 2: statement 'law-2' has 3200 tokens, more than the 128 positions "
        f"the base reads (max_position_embeddings in {base}/config.json): as an anchor it would keep only its "
        "first 23; shorten or split the statement"]


def test_anchors_that_will_be_truncated_are_summarised_in_one_line(tmp_path):
    text = ("Courts decide cases between parties under the law of the land and the rules of procedure there, "
            "as courts do in every county.")
    n = _generation_tokens(text)
    assert 24 <= n <= 48, n
    cfg = _anchor_study(tmp_path, **{"corpora__law.jsonl": [
        f'{{"id": "law-1", "text": "{text}"}}\n']})
    line = (f"anchors of generation.answer_len = 24 tokens or more, 1 of the main query set's 2, {{}}: law-q1: "
            f"{tmp_path}/corpora/law.jsonl:1 (law-1, {n} tokens); raise generation.answer_len to {n + 1} to keep "
            "every anchor whole\n")
    assert anchors.format_truncations(cfg, anchors.check_anchor_lengths(cfg)) == "WARNING: " + line.format(
        "are truncated to answer_len − 1 = 23 tokens (anchor_truncated in their records)")
    cfg["generation"]["long_anchor"] = "fail"
    assert anchors.format_truncations(cfg, anchors.check_anchor_lengths(cfg)) == "WARNING: " + line.format(
        "stop their generation jobs (generation.long_anchor: fail)")
    cfg["generation"]["answer_len"] = n + 1
    assert anchors.format_truncations(cfg, anchors.check_anchor_lengths(cfg)) == ""


def test_the_default_study_has_no_statement_too_long_and_no_anchor_truncated():
    from anchormask.settings import config

    cfg = config.load(REPO / "config.yaml")
    assert anchors.format_truncations(cfg, anchors.check_anchor_lengths(cfg)) == ""
