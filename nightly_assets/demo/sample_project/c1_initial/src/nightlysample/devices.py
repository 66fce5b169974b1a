"""Simulated device detection: the number of devices comes from the environment."""

from __future__ import annotations

import os

ENV_VAR = "NIGHTLYSAMPLE_DEVICES"


def visible_devices() -> int:
    """The number of visible devices, from ``NIGHTLYSAMPLE_DEVICES`` (default 1)."""
    raw = os.environ.get(ENV_VAR, "1")
    try:
        count = int(raw)
    except ValueError:
        raise ValueError(f"{ENV_VAR} must be an integer, got {raw!r}") from None
    if count < 1:
        raise ValueError(f"{ENV_VAR} must be >= 1, got {count}")
    return count


def device_names() -> list[str]:
    return [f"sim:{i}" for i in range(visible_devices())]
