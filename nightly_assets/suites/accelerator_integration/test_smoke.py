"""A computation smoke test: known answers, computed on the device and in pure Python."""

import math

import pytest

pytestmark = pytest.mark.integration


def _matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in zip(*b, strict=True)] for row in a]


def test_matmul_of_small_integers_is_exact(backend) -> None:
    a = [[float((i + 2 * j) % 7 - 3) for j in range(32)] for i in range(16)]
    b = [[float((3 * i + j) % 5 - 2) for j in range(8)] for i in range(32)]
    assert backend.to_host(backend.matmul(backend.put(a), backend.put(b))) == _matmul(a, b)


def test_matmul_of_floats_within_tolerance(backend) -> None:
    a = [[math.sin(1.0 + 64 * i + j) for j in range(64)] for i in range(64)]
    b = [[math.cos(1.0 + 64 * i + j) for j in range(64)] for i in range(64)]
    got = backend.to_host(backend.matmul(backend.put(a), backend.put(b)))
    for got_row, want_row in zip(got, _matmul(a, b), strict=True):
        assert got_row == pytest.approx(want_row, rel=1e-4, abs=1e-4)


def test_reductions(backend) -> None:
    xp, x = backend.xp, backend.put([float(i) for i in range(1000)])
    assert backend.to_host(xp.sum(x)) == 499500.0
    assert backend.to_host(xp.mean(x)) == pytest.approx(499.5, rel=1e-6)
    assert (backend.to_host(xp.min(x)), backend.to_host(xp.max(x))) == (0.0, 999.0)
    rows = backend.put([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert backend.to_host(xp.sum(rows, axis=1)) == [6.0, 15.0]


def test_jit_compiled_function(backend) -> None:
    """jax: jax.jit; torch runs eagerly (torch.compile is not part of this suite)."""
    xp = backend.xp

    @backend.jit
    def f(x, y):
        return xp.sum(xp.sin(x) ** 2 + xp.cos(x) ** 2) + xp.sum(x * y)

    x = [0.1 * i for i in range(256)]
    want = 256 + sum(v * 2.0 for v in x)
    for _ in range(2):  # the second call runs the compiled function from the cache
        got = backend.to_host(f(backend.put(x), backend.put([2.0] * 256)))
        assert got == pytest.approx(want, rel=1e-5)
    assert math.isfinite(got)
