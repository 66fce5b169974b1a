"""Communication between all devices: all-reduce, all-gather, broadcast and a ring shift (ppermute).

jax: shard_map over a one-axis Mesh of every device. torch: torch.distributed, one process per
device with nccl (RCCL on ROCm), or NIGHTLY_EXPECTED_DEVICES gloo processes on CPU.
"""

import pytest
from _backends import Collectives, rank_values

pytestmark = [pytest.mark.integration, pytest.mark.multi_device]


def _collectives(backend, settings) -> Collectives:
    if settings.expected_devices == 1:
        pytest.skip("NIGHTLY_EXPECTED_DEVICES=1: a single device has no peer to communicate with")
    found = backend.device_count()
    if found < 2:
        pytest.fail(
            f"collectives need at least 2 devices, {settings.framework} found {found} "
            f"(NIGHTLY_EXPECTED_DEVICES={settings.expected_devices}): {backend.describe()}"
        )
    result = backend.collectives()
    assert result.world_size == found, f"{result.transport} group of {result.world_size}, {found} devices"
    return result


def test_all_reduce_sum(backend, settings) -> None:
    result = _collectives(backend, settings)
    n = result.world_size
    total = [sum(rank_values(r)[i] for r in range(n)) for i in range(2)]
    assert result.all_reduce == [total] * n


def test_all_gather(backend, settings) -> None:
    result = _collectives(backend, settings)
    n = result.world_size
    assert result.all_gather == [[v for r in range(n) for v in rank_values(r)]] * n


def test_broadcast_from_last_rank(backend, settings) -> None:
    result = _collectives(backend, settings)
    n = result.world_size
    assert result.broadcast == [rank_values(n - 1)] * n


def test_ring_shift(backend, settings) -> None:
    """ppermute (jax) / isend-irecv (torch): rank r receives rank r-1's values."""
    result = _collectives(backend, settings)
    n = result.world_size
    assert result.ring_shift == [rank_values((r - 1) % n) for r in range(n)]
