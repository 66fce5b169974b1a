import pytest

from nightlysample.ops import matmul


@pytest.mark.unit
def test_matmul_rejects_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="shape mismatch"):
        matmul([[1.0, 2.0]], [[1.0, 2.0]])
