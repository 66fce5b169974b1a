import pytest

from nightlysample.reduce import maximum, mean

pytestmark = pytest.mark.unit


def test_mean() -> None:
    assert mean([1.0, 2.0, 3.0, 6.0]) == 3.0


def test_maximum() -> None:
    assert maximum([1.0, 7.5, -2.0]) == 7.5


def test_maximum_all_negative() -> None:
    assert maximum([-3.0, -1.0, -2.0]) == -1.0


def test_mean_single_element() -> None:
    assert mean([4.0]) == 4.0


def test_empty_reductions_raise() -> None:
    with pytest.raises(ValueError, match="empty"):
        mean([])
    with pytest.raises(ValueError, match="empty"):
        maximum([])
