"""BM25 retrieval of the locus statement that a query's answer is anchored on.

Each query retrieves from its own domain's corpus. Ties in score go to the statement that
comes first in the corpus file, so the choice never depends on sort stability.
"""

from __future__ import annotations

from typing import Any

import numpy as np


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
