import pytest

from nightlysample.reduce import maximum, mean

pytestmark = pytest.mark.unit


def test_mean() -> None:
    assert mean([1.0, 2.0, 3.0, 6.0]) == 3.0


def test_maximum() -> None:
    assert maximum([1.0, 7.5, -2.0]) == 7.5


def test_maximum_all_negative() -> None:
    assert maximum([-3.0, -1.0, -2.0]) == -1.0
