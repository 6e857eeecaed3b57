"""The base evaluation: masked-token scores, generation gates, samples, and the decoded continuation."""

import pytest
from transformers import AutoTokenizer

from anchormask import base_eval
from anchormask.generation import arm_answers

pytestmark = pytest.mark.unit


def test_masked_scores_count_the_masked_tokens_and_repeat_with_the_seed(tiny_backbone):
    backbone, runtime = tiny_backbone
    texts = ["the river flows into the sea", "the deepest lake of the world is in the north"] * 20
    words = sum(len(t.split()) for t in texts)
    low = base_eval.masked_token_scores(backbone, runtime, texts, 0.15, seed=0)
    high = base_eval.masked_token_scores(backbone, runtime, texts, 0.5, seed=0)
    assert 0.05 * words < low["masked_tokens"] < 0.3 * words < high["masked_tokens"] < 0.7 * words
    assert 0 <= low["accuracy"] <= 1 and low["nll"] > 0
    assert low == base_eval.masked_token_scores(backbone, runtime, texts, 0.15, seed=0)


def test_dictionary_words_accept_inflections_of_listed_lemmas():
    words = frozenset({"river", "flow", "carry", "bake", "quick"})
    assert all(base_eval.is_dictionary_word(w, words)
               for w in ["rivers", "flows", "flowed", "carries", "baked", "baking", "quickly", "1928"])
    assert not any(base_eval.is_dictionary_word(w, words) for w in ["sss", "ws", "riverz", "s"])


def _record(text: str, domain="law", query_id="law-q01", mid=False) -> dict:
    return {"post_anchor_text": text, "continues_anchor_word": mid, "domain": domain, "query_id": query_id,
            "statement": "anchor"}


def test_generation_gates_see_repetition_and_non_words():
    words = frozenset({"the", "river", "flow", "into", "sea", "is", "a", "long"})
    degenerate = base_eval.generation_quality([_record("the the the is is the"), _record("the the sss")], words)
    assert degenerate["adjacent_repeat_share"] == pytest.approx(4 / 7)
    assert degenerate["distinct_2"] == pytest.approx(5 / 7)   # the-the, the-is, is-is, is-the, the-sss
    assert degenerate["dictionary_share"] == pytest.approx(8 / 9)
    fluent = base_eval.generation_quality([_record("the river flows into a long sea", mid=True), _record("")],
                                          words)
    assert fluent["adjacent_repeat_share"] == 0 and fluent["distinct_2"] == 1 and fluent["dictionary_share"] == 1
    assert fluent["stop_word_share"] == pytest.approx(3 / 7)  # the, into, a: degeneracy.STOP_WORDS
    assert fluent["mid_word_share"] == 0.5 and fluent["empty_share"] == 0.5
    nothing = base_eval.generation_quality([_record("")], words)
    assert nothing["adjacent_repeat_share"] == 0 and nothing["distinct_2"] == 0 and nothing["empty_share"] == 1


def test_the_gates_read_one_text_as_the_studys_degeneracy_columns_do():
    from anchormask.measurement import degeneracy

    text = "Don't the river, the river flows flows into the sea of the river"
    gated = base_eval.generation_quality([_record(text)], frozenset())
    assert gated["adjacent_repeat_share"] == degeneracy.adjacent_repeat_share(text) > 0
    assert gated["distinct_2"] == degeneracy.distinct_n(text, 2) < 1
    words = degeneracy.words(text)
    assert gated["stop_word_share"] == pytest.approx(1 - len(degeneracy.content_words(words)) / len(words))


def test_gates_compare_each_value_with_its_target():
    summary = {"corpora_accuracy_15": 0.4, "adjacent_repeat_share": 0.2, "distinct_2": 0.5,
               "dictionary_share": 0.9, "mid_word_share": 0.0}
    met = {k: g["met"] for k, g in base_eval.gates(summary).items()}
    assert met == {"corpora_accuracy_15": True, "adjacent_repeat_share": False, "distinct_2": True,
                   "dictionary_share": False, "mid_word_share": True}


def test_samples_take_the_first_queries_of_each_domain_by_id():
    records = [_record("x", "law", "law-q03"), _record("y", "law", "law-q01"), _record("z", "sea", "sea-q02")]
    chosen = base_eval.samples(records, per_domain=1)
    assert [(s["domain"], s["query_id"]) for s in chosen] == [("law", "law-q01"), ("sea", "sea-q02")]


def test_continuation_is_decoded_with_the_anchor_and_a_word_piece_stays_with_its_word(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.add_tokens(["##s"])  # a continuation piece, as WordPiece vocabularies have
    anchor = tok("the river flow", add_special_tokens=False)["input_ids"]
    tail = tok.convert_tokens_to_ids(["##s", "into", "the", "sea"])
    text, mid_word = arm_answers.split_post_anchor(tok, anchor + tail, len(anchor), tail)
    assert (text, mid_word) == ("into the sea", True)
    tail = tok.convert_tokens_to_ids(["into", "the", "sea"])
    assert arm_answers.split_post_anchor(tok, anchor + tail, len(anchor), tail) == ("into the sea", False)
