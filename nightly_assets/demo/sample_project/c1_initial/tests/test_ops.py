import pytest

from nightlysample.ops import dot, matmul, prefix_sum, vector_add

pytestmark = pytest.mark.unit


def test_vector_add() -> None:
    assert vector_add([1.0, 2.0], [0.5, -2.0]) == [1.5, 0.0]


def test_vector_add_rejects_length_mismatch() -> None:
    with pytest.raises(ValueError, match="length mismatch"):
        vector_add([1.0], [1.0, 2.0])


def test_dot() -> None:
    assert dot([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == 32.0


def test_matmul_identity() -> None:
    a = [[1.0, 2.0], [3.0, 4.0]]
    assert matmul(a, [[1.0, 0.0], [0.0, 1.0]]) == a


def test_matmul_rectangular() -> None:
    a = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    b = [[7.0, 8.0], [9.0, 10.0], [11.0, 12.0]]
    assert matmul(a, b) == [[58.0, 64.0], [139.0, 154.0]]


def test_prefix_sum() -> None:
    assert prefix_sum([1.0, 2.0, 3.0, 4.0]) == [1.0, 3.0, 6.0, 10.0]
    assert prefix_sum([]) == []
