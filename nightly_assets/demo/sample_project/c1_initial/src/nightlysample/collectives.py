"""Collectives over the simulated devices."""

from __future__ import annotations

from collections.abc import Sequence

from nightlysample.devices import visible_devices


def all_reduce(per_device: Sequence[Sequence[float]]) -> list[list[float]]:
    """Sum one list per device element-wise; every device receives the total."""
    devices = visible_devices()
    if len(per_device) != devices:
        raise ValueError(f"expected {devices} per-device lists, got {len(per_device)}")
    lengths = {len(xs) for xs in per_device}
    if len(lengths) > 1:
        raise ValueError(f"per-device lists differ in length: {sorted(lengths)}")
    total = [sum(column) for column in zip(*per_device)]
    return [list(total) for _ in range(devices)]
