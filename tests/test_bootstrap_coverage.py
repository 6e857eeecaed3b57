"""The two-level bootstrap's coverage, by simulation (slow: 1,000 simulated studies, 2,000 bootstraps of
1,000 resamples). Its mechanics, fast: tests/test_bootstrap.py (the hand-computed two-level distribution)."""

import numpy as np
import pytest

from anchormask.stats import bootstrap

pytestmark = pytest.mark.slow


def _coverage(seeds, queries, sd_seed, sd_query, sd_cell, reps, gen):
    """Share of 95% intervals of the mean difference that contain its true value: (two-level, one-level)."""
    truth, hits = 0.05, np.zeros(2)
    for _ in range(reps):
        d = (truth + gen.normal(0, sd_seed, (seeds, 1)) + gen.normal(0, sd_query, (1, queries))
             + gen.normal(0, sd_cell, (seeds, queries)))
        for i, values in enumerate((d[None], d.mean(axis=0)[None])):
            out = bootstrap.paired_bootstrap_batch(values, np.zeros_like(values), 1000, 0.95, gen)
            hits[i] += out["diff_lo"][0] <= truth <= out["diff_hi"][0]
    return hits / reps


def test_two_level_interval_covers_the_seed_variance():
    # Known variance components: training seed (sd 0.1), query (0.1), seed x query (0.05); 20 seeds x 30
    # queries, 1000 simulated studies. The seed term dominates the variance of the mean, so an interval
    # over queries alone (seeds averaged first) misses it, while the two-level one covers near 95%.
    two_level, one_level = _coverage(20, 30, 0.1, 0.1, 0.05, 1000, np.random.default_rng(2026))
    assert 0.925 <= two_level <= 0.975, two_level
    assert one_level < 0.8, one_level
