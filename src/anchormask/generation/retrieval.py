"""BM25 retrieval of the locus statement that a query's answer is anchored on.

Each query retrieves from its own domain's corpus. Ties in score go to the statement that
comes first in the corpus file, so the choice never depends on sort stability.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from anchormask import data, study


def retrieve(queries: list[dict[str, Any]], corpus: list[dict[str, Any]], *, k1: float, b: float
             ) -> list[dict[str, Any]]:
    """One record per query: the top statement, its score, and whether it is the gold one."""
    import bm25s

    texts = [rec["text"] for rec in corpus]
    index = bm25s.BM25(k1=k1, b=b)
    index.index(bm25s.tokenize(texts, stopwords="en", return_ids=True, show_progress=False),
                show_progress=False)
    results = []
    for query in queries:
        tokens = bm25s.tokenize(query["query"], stopwords="en", return_ids=False, show_progress=False)[0]
        scores = np.asarray(index.get_scores(tokens), dtype=np.float64)
        best = int(np.argmax(scores))  # first maximum: ties go to the earlier statement
        results.append({
            "query_id": query["id"], "query": query["query"], "statement_id": corpus[best]["id"],
            "statement": corpus[best]["text"], "score": round(float(scores[best]), 6),
            "gold_id": query.get("gold_id"), "hit": query.get("gold_id") == corpus[best]["id"],
        })
    return results


def study_anchors(config: dict[str, Any], domain: str, query_set: str = "main",
                  root: Path | None = None) -> list[dict[str, Any]]:
    """A domain's queries of one query set with their retrieved statements, as results/retrieval/ holds them.

    ``root`` resolves the config's relative data paths (the benchmarks run from elsewhere).
    """
    def at(path: Path) -> Path:
        return path if root is None or path.is_absolute() else root / path

    return anchors(at(data.queries_path(config, domain, query_set)), at(data.corpus_path(config, domain)),
                   domain=domain, split=study.split_of(config, domain), query_set=query_set,
                   max_queries=config["data"].get("max_queries_per_domain"), settings=config["retrieval"])


def anchors(queries_path: str | Path, corpus_path: str | Path, *, domain: str, split: str, query_set: str,
            max_queries: int | None, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """One query file's queries (the first ``max_queries``) with their statements retrieved from one corpus."""
    queries = data.load_queries(queries_path, max_queries)
    return [{"domain": domain, "split": split, "query_set": query_set, **r}
            for r in retrieve(queries, data.load_corpus(corpus_path), **settings)]
