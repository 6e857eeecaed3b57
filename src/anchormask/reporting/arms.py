"""The arms as the reports show them: in the config's order, the base arm (no adapter), and the arms
and comparisons the probes' summary reports, found by what they are rather than by their names.

The config's ``arms`` is the one list of arm names (and ``statistics.comparisons`` the one list of
comparisons): the jobs that draw or write a report receive the arms' names in config order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from anchormask.study import sweep_arm

HELD_OUT = "split=held_out"  # a comparison's selector over the held-out queries pooled (pairwise.run_comparisons)


def is_missing(x: Any) -> bool:
    """None, pd.NA or a float NaN: a value a table shows as missing."""
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def order_arms(arms: Iterable[str], config_order: Sequence[str]) -> list[str]:
    """``arms`` in the order of ``config_order`` (the names of config ``arms``), then any it does not
    name, alphabetically."""
    arms = set(arms)
    known = [a for a in config_order if a in arms]
    return known + sorted(arms - set(known))


def base_arm(arms: Sequence[str], strategies: Mapping[str, Any]) -> str | None:
    """The first of ``arms`` without a strategy (None, NaN or absent in ``strategies``), or None."""
    base = [a for a in arms if is_missing(strategies.get(a))]
    return base[0] if base else None


def arm_with(arms: Mapping[str, Mapping[str, Any]], strategy: str, targets: str) -> str | None:
    """The first arm of config ``arms`` (name -> {strategy, targets}) with this strategy and LoRA targets."""
    found = [a for a, spec in arms.items() if (spec or {}).get("strategy") == strategy
             and (spec or {}).get("targets") == targets]
    return found[0] if found else None


def sweep_pair(sweep_df, strategies: Sequence[str], other: str):
    """The sweep statistics' rows of the first of ``strategies`` (config ``sweep.strategies``) against
    ``other``, one per (size, steps) point, in the table's order."""
    first = strategies[0]
    keep = [(a, b) == (sweep_arm(first, n, k), sweep_arm(other, n, k))
            for a, b, n, k in zip(sweep_df["a"], sweep_df["b"], sweep_df["train_size"], sweep_df["train_steps"])]
    return sweep_df[keep]


def comparison_of(rows: Iterable[Mapping[str, Any]], a: str | None, b: str | None,
                  selector: str = HELD_OUT) -> Mapping[str, Any] | None:
    """The first comparison row of arm ``a`` against arm ``b`` over ``selector``'s queries, or None."""
    found = [r for r in rows if a is not None and (r["a"], r["b"], r.get("selector")) == (a, b, selector)]
    return found[0] if found else None
