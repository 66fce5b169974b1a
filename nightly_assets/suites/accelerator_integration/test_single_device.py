"""Single-device basics on device 0: placement, elementwise ops, dtypes, host round-trip, a large buffer."""

import math

import pytest

pytestmark = pytest.mark.integration

BUFFER_ELEMENTS = 64 * 2**20  # 256 MiB of float32


def test_data_lands_on_device_zero(backend) -> None:
    x = backend.put([1.0, 2.0, 3.0])
    assert backend.device_of(x) == backend.devices()[0]
    assert backend.device_of(x * 2) == backend.devices()[0]


def test_elementwise_ops(backend) -> None:
    xp, a, b = backend.xp, [0.5, 1.0, 2.0, 4.0], [4.0, 3.0, 2.0, 1.0]
    x, y = backend.put(a), backend.put(b)
    assert backend.to_host(x + y) == [p + q for p, q in zip(a, b, strict=True)]
    assert backend.to_host(x * y - y) == [p * q - q for p, q in zip(a, b, strict=True)]
    assert backend.to_host(x / y) == pytest.approx([p / q for p, q in zip(a, b, strict=True)], rel=1e-6)
    assert backend.to_host(xp.exp(x)) == pytest.approx([math.exp(p) for p in a], rel=1e-5)
    assert backend.to_host(xp.sqrt(x)) == pytest.approx([math.sqrt(p) for p in a], rel=1e-6)


@pytest.mark.parametrize(
    ("dtype", "values"),
    [("float32", [1.5, -2.0, 0.25, 3.0]), ("bfloat16", [1.5, -2.0, 0.25, 3.0]), ("int32", [1, -2, 3, 40000])],
    ids=["float32", "bfloat16", "int32"],
)
def test_dtype(backend, dtype: str, values: list[float]) -> None:
    if not backend.supports(dtype):
        pytest.skip(f"{dtype} is not supported on {backend.describe()}")
    x = backend.put(values, dtype=dtype)
    assert backend.dtype_name(x) == dtype
    assert backend.dtype_name(x + x) == dtype
    assert backend.to_host(x + x) == [2 * v for v in values]


def test_bfloat16_rounds_and_float32_does_not(backend) -> None:
    if not backend.supports("bfloat16"):
        pytest.skip(f"bfloat16 is not supported on {backend.describe()}")
    value = 1.0 + 2.0**-9  # below bfloat16's precision (8 bits), exact in float32
    assert backend.to_host(backend.put([value], dtype="bfloat16")) == [1.0]
    assert backend.to_host(backend.put([value], dtype="float32")) == [value]


def test_host_round_trip(backend) -> None:
    values = [[k / 8.0 for k in range(row * 16, row * 16 + 16)] for row in range(-4, 4)]
    assert backend.to_host(backend.put(values)) == values


def test_allocate_moderately_sized_buffer(backend) -> None:
    xp, x = backend.xp, backend.full(BUFFER_ELEMENTS, 1.0)
    assert tuple(x.shape) == (BUFFER_ELEMENTS,)
    assert backend.device_of(x) == backend.devices()[0]
    assert (backend.to_host(xp.min(x)), backend.to_host(xp.max(x))) == (1.0, 1.0)
    assert backend.to_host(x[BUFFER_ELEMENTS - 1]) == 1.0
