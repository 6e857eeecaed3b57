"""The order in which figures and tables show arms, and which arm is the base (no adapter)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from anchormask.reporting.markdown import is_missing

ARM_ORDER = ("base", "anchor", "random", "reverse", "anchor-vo", "anchor-qk", "random-vo", "random-qk")


def order_arms(arms: Sequence[str]) -> list[str]:
    """Config order for the known arms, then the rest alphabetically."""
    known = [a for a in ARM_ORDER if a in arms]
    return known + sorted(set(arms) - set(known))


def base_arm(arms: Sequence[str], strategies: Mapping[str, Any]) -> str | None:
    """The first of ``arms`` without a strategy (None, NaN or absent in ``strategies``), or None."""
    base = [a for a in arms if is_missing(strategies.get(a))]
    return base[0] if base else None
