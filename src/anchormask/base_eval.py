"""Quality gates for a base checkpoint: does it predict masked words, and does it write English?

Two measurements, for any base the backbone layer loads:

- masked-token accuracy and NLL (nats per masked token) at 15% and 50% masking, on the
  pretraining validation lines (never trained on) and on each of the study's corpora, one
  ``[CLS] text [SEP]`` sequence per line, masks drawn from a fixed seed;
- the base's own generations for the study's anchors (the retrieved statement of every query,
  the default sampler, no adapter): share of adjacent repeated words, distinct-2, share of
  English dictionary words, share of stop words, share of answers that begin mid-word, and
  three sample continuations per domain.

Dictionary words: the union of the ``web2`` and ``gcide`` lists of the PyPI package
``english-words``; those lists hold lemmas, so a word also counts when removing one
inflectional suffix (-s, -es, -ies -> -y, -ed, -d, -ing, -er, -est, -ly) gives a listed word.
Stop words, repeats and distinct-2 are the study's own (``quality.STOP_WORDS``,
``quality.pooled_adjacent_repeat_share``, ``quality.pooled_distinct_n``), so the base's gates and
the degeneracy columns of the study's tables read a text the same way.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from anchormask import data, study
from anchormask.embedded_base.pretrain import prediction_scores
from anchormask.generation import arm_answers, retrieval, sampler
from anchormask.measurement import degeneracy, metric
from anchormask.model import backbone as bb
from anchormask.model import modeljob
from anchormask.repro import provenance

log = logging.getLogger(__name__)

MASK_RATIOS = (0.15, 0.50)
SAMPLES_PER_DOMAIN = 3
MAX_TOKENS = 96  # longer lines are cut: the embedded base was pretrained on sequences this long
GATES = {  # issue gates for the embedded base: (key, comparison, threshold)
    "corpora_accuracy_15": (">=", 0.35),
    "adjacent_repeat_share": ("<=", 0.10),
    "distinct_2": (">=", 0.50),
    "dictionary_share": (">=", 0.95),
    "mid_word_share": ("<=", 0.0),
}
_SUFFIXES = (("ies", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ed", "e"), ("d", ""), ("ing", ""),
             ("ing", "e"), ("er", ""), ("est", ""), ("ly", ""))


@torch.inference_mode()
def masked_token_scores(backbone: bb.Backbone, runtime: bb.Runtime, texts: list[str], ratio: float,
                        seed: int, batch_rows: int = 64) -> dict[str, float]:
    """Accuracy and NLL of the base's predictions at a fraction ``ratio`` of masked tokens."""
    tok = backbone.tokenizer
    special = torch.tensor(tok.all_special_ids)
    gen = torch.Generator().manual_seed(seed)

    def predictions():
        for start in range(0, len(texts), batch_rows):
            enc = tok(texts[start:start + batch_rows], padding=True, truncation=True,
                      max_length=MAX_TOKENS, return_tensors="pt")
            ids, attention = enc["input_ids"], enc["attention_mask"]
            masked = (torch.rand(ids.shape, generator=gen) < ratio) & ~torch.isin(ids, special) & attention.bool()
            if not masked.any():
                continue
            noisy = torch.where(masked, torch.full_like(ids, backbone.mask_token_id), ids)
            rows, cols = masked.nonzero(as_tuple=True)
            with runtime.autocast():
                logits = backbone.logits_at(noisy.to(runtime.device), attention.to(runtime.device), rows, cols)
            yield logits.cpu(), ids[rows, cols]

    return prediction_scores(predictions())


def dictionary_words() -> frozenset[str]:
    from english_words import get_english_words_set

    return frozenset(get_english_words_set(["web2", "gcide"], lower=True, alpha=True))


def is_dictionary_word(word: str, words: frozenset[str]) -> bool:
    if word in words or word.isdigit():
        return True
    return any(word.endswith(suffix) and word[: len(word) - len(suffix)] + stem in words
               for suffix, stem in _SUFFIXES if len(word) > len(suffix) + 1)


def _or_zero(value: float) -> float:
    """No word pair at all has none repeated and no distinct one (``empty_share`` shows such a base);
    JSON has no NaN."""
    return 0.0 if math.isnan(value) else value


def generation_quality(records: list[dict[str, Any]], dictionary: frozenset[str]) -> dict[str, float]:
    """Gates over the post-anchor words of all answers, pooled (one degenerate habit shows)."""
    answers = [metric.word_tokens(rec["post_anchor_text"]) for rec in records]
    every = [w for words in answers for w in words]
    n = max(1, len(records))
    return {
        "answers": len(records),
        "post_anchor_words_mean": len(every) / n,
        "adjacent_repeat_share": _or_zero(degeneracy.pooled_adjacent_repeat_share(answers)),
        "distinct_2": _or_zero(degeneracy.pooled_distinct_n(answers, 2)),
        "dictionary_share": sum(is_dictionary_word(w, dictionary) for w in every) / max(1, len(every)),
        "stop_word_share": sum(w in degeneracy.STOP_WORDS for w in every) / max(1, len(every)),
        "mid_word_share": sum(bool(rec["continues_anchor_word"]) for rec in records) / n,
        "empty_share": sum(not words for words in answers) / n,
    }


def samples(records: list[dict[str, Any]], per_domain: int = SAMPLES_PER_DOMAIN) -> list[dict[str, str]]:
    """The first ``per_domain`` answers of each domain, in query-id order (a fixed rule)."""
    chosen: list[dict[str, str]] = []
    for domain in dict.fromkeys(rec["domain"] for rec in records):
        ranked = sorted((rec for rec in records if rec["domain"] == domain), key=lambda rec: rec["query_id"])
        chosen += [{"domain": domain, "query_id": rec["query_id"], "anchor": rec["statement"],
                    "continuation": rec["post_anchor_text"]} for rec in ranked[:per_domain]]
    return chosen


def gates(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target with the measured value and whether it is met."""
    out = {}
    for key, (op, threshold) in GATES.items():
        value = summary[key]
        out[key] = {"value": value, "target": f"{op} {threshold}",
                    "met": value >= threshold if op == ">=" else value <= threshold}
    return out


def study_anchors(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every study query with its BM25-retrieved statement (the anchors the study generates from)."""
    return [a for domain in study.domains(config) for a in retrieval.study_anchors(config, domain)]


def evaluate(config: dict[str, Any], *, base: modeljob.Base, validation_lines: list[str] | None,
             seed: int, threads: int) -> dict[str, Any]:
    """Masked-token scores, generation gates and samples of one base (no adapter)."""
    runtime = modeljob.start(base, threads)
    backbone = modeljob.load(base, runtime)
    texts = {domain: [r["text"] for r in data.load_corpus(data.corpus_path(config, domain))]
             for domain in study.domains(config)}
    texts = {"validation": validation_lines, **texts} if validation_lines else texts
    texts["corpora"] = [t for domain in study.domains(config) for t in texts[domain]]
    masked: dict[str, dict[str, Any]] = {}
    for name, lines in texts.items():
        masked[name] = {"lines": len(lines)}
        for ratio in MASK_RATIOS:
            masked[name][str(ratio)] = masked_token_scores(backbone, runtime, lines, ratio, seed)
        log.info("%s: accuracy %.3f at 15%% masking", name, masked[name]["0.15"]["accuracy"])
    settings = sampler.SamplerSettings.from_config(config["generation"])
    records = arm_answers.generation_records(backbone, runtime, study_anchors(config), settings, {})
    scores = generation_quality(records, dictionary_words())
    summary = {"corpora_accuracy_15": masked["corpora"]["0.15"]["accuracy"], **scores}
    return {"base": {"path": base.path, "sha256": base.sha256, "trust_remote_code": base.trust_remote_code},
            "runtime": runtime.name,
            "seed": seed, "mask_ratios": list(MASK_RATIOS), "sampler": settings.record(),
            "masked": masked, "generation": scores, "gates": gates(summary), "samples": samples(records),
            "versions": provenance.versions()}
