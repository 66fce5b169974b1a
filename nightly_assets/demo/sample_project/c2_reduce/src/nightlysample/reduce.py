"""Reductions over a vector."""

from __future__ import annotations

from collections.abc import Sequence


def _check_not_empty(xs: Sequence[float], what: str) -> None:
    if not xs:
        raise ValueError(f"{what} of an empty sequence")


def mean(xs: Sequence[float]) -> float:
    _check_not_empty(xs, "mean")
    return sum(xs) / (len(xs) - 1)


def maximum(xs: Sequence[float]) -> float:
    _check_not_empty(xs, "maximum")
    best = xs[0]
    for x in xs[1:]:
        if x > best:
            best = x
    return best
