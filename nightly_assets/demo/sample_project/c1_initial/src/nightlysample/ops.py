"""Array kernels on plain lists of floats."""

from __future__ import annotations

from collections.abc import Sequence

Vector = Sequence[float]
Matrix = Sequence[Sequence[float]]


def _check_same_length(a: Vector, b: Vector) -> None:
    if len(a) != len(b):
        raise ValueError(f"length mismatch: {len(a)} != {len(b)}")


def vector_add(a: Vector, b: Vector) -> list[float]:
    _check_same_length(a, b)
    return [x + y for x, y in zip(a, b)]


def dot(a: Vector, b: Vector) -> float:
    _check_same_length(a, b)
    return sum(x * y for x, y in zip(a, b))


def matmul(a: Matrix, b: Matrix) -> list[list[float]]:
    if not a or not b:
        return []
    if len(a[0]) != len(b):
        raise ValueError(f"shape mismatch: {len(a)}x{len(a[0])} @ {len(b)}x{len(b[0])}")
    columns = list(zip(*b))  # transpose once
    return [[sum(x * y for x, y in zip(row, col)) for col in columns] for row in a]


def prefix_sum(xs: Vector) -> list[float]:
    out: list[float] = []
    total = 0.0
    for x in xs:
        total += x
        out.append(total)
    return out
