"""anchormask_locus's scores: exact match and the study's word-overlap metric against the gold statement."""

from anchormask.measurement import metric


def process_results(doc, results):
    answer, gold = results[0].strip(), doc["gold"]
    same = metric.word_tokens(answer) == metric.word_tokens(gold)
    return {"exact_match": float(same),
            "gold_overlap": metric.score(answer, metric.corpus_vocabulary([gold])).overlap}
