"""The paired sign-flip permutation test of a mean difference, and Holm's adjustment.

Beside the bootstrap interval (``bootstrap``), ``p_perm`` is the two-sided paired sign-flip
p-value of the mean difference: under H0 the two arms are exchangeable within a query, so
each query's difference (averaged over seeds) keeps or flips its sign. With n <=
``EXACT_MAX_QUERIES`` every one of the 2^n sign patterns is enumerated (p = share of
patterns at least as extreme); otherwise ``permutations`` random patterns from a Generator
of their own, p = (1 + extreme) / (1 + permutations) (never 0). ``holm`` adjusts the
p-values of one table (``run_comparisons`` / ``run_sweep`` call) for its number of
comparisons, so a dozen comparisons are not read as a dozen independent findings.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Up to this many queries the sign-flip test enumerates all 2^n patterns (65,536 at 16).
EXACT_MAX_QUERIES = 16
#: ``query_set_rng`` stream of the sign-flip patterns (the bootstrap uses the plain Generator).
PERMUTATION_STREAM = 1


def sign_flip_pvalues(d: np.ndarray, permutations: int, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """Two-sided paired sign-flip p-values of the mean of each row of (m, n) differences; (p, exact)."""
    d = np.atleast_2d(np.asarray(d, dtype=np.float64))
    n = d.shape[1]
    exact = n <= EXACT_MAX_QUERIES
    if exact:  # every sign pattern: bit j of pattern i flips query j
        signs = 1.0 - 2.0 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
    else:
        if permutations < 1:
            raise ValueError("permutations must be >= 1")
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(permutations, n))
    null = np.abs(d @ signs.T)
    observed = np.abs(d.sum(axis=1))[:, None]
    # A pattern that reproduces |sum| sums in another order: allow its rounding, not a real difference.
    extreme = (null >= observed * (1 - 1e-9)).sum(axis=1)
    p = extreme / signs.shape[0] if exact else (extreme + 1) / (permutations + 1)
    return p, exact


def holm(p: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values, in the order given (monotone, capped at 1)."""
    p = np.asarray(p, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted
