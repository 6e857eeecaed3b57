"""What is measured on a generated text, and the Parquet tables that hold it.

* ``metric``: corpus_overlap, the study's metric.
* ``degeneracy``: what corpus_overlap cannot see (content words, distinct-n, repeats).
* ``tables``: Parquet tables of scored generations and statistics, with explicit schemas.
"""
