"""Waiting on processes with deadlines that stretch with the machine's load.

A deadline that holds on a quiet machine is missed when the suite runs in parallel on two cores
beside a Docker engine: the same work takes longer in wall time. Each wait's deadline is its quiet
budget times how oversubscribed the CPUs were over the last minute (load average / cores), re-read
while waiting, capped at MAX_STRETCH so that a test that truly hangs still fails.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
MAX_STRETCH = 4.0  # beyond 4x oversubscription the machine is unusable, not slow: fail rather than wait


def stretch() -> float:
    """How much longer than on a quiet machine work takes now: 1 up to MAX_STRETCH."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(MAX_STRETCH, max(1.0, load))


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 60, every_s: float = 0.2) -> T:
    """`probe()`'s first truthy value, polled every `every_s`; AssertionError naming `what` when
    `timeout_s` (quiet-machine seconds, stretched by the load) passes first."""
    started = time.monotonic()
    while True:
        value = probe()
        if value:
            return value
        waited = time.monotonic() - started
        if waited > timeout_s * stretch():
            raise AssertionError(
                f"timed out after {waited:.0f} s waiting for {what} "
                f"(budget {timeout_s:.0f} s on a quiet machine, load {os.getloadavg()[0]:.1f})"
            )
        time.sleep(every_s)
