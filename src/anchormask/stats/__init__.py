"""Statistics: the paired comparisons of per-query corpus_overlap the study reports.

* ``bootstrap``: the two-level paired percentile bootstrap (queries, and training seeds when there
  are several) and each query set's random stream.
* ``signflip``: the paired sign-flip test and Holm's adjustment.
* ``pairwise``: the statistics job's comparisons and sweep, which put both together.
* ``crossbase``: how much an effect differs between two bases (ratio of ratios, difference of
  differences), from the queries both answered.
"""
