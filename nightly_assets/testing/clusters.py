"""Infra clusters below a whole suite: the tests of one suite-night that failed with one failure
signature (`testing/signatures.py`) of a shared resource, one infra event rather than so many
broken tests. Pure Python (`benchmarks/flaky_detection.py` scores it on a simulated history).

A signature's failures on a suite-night are a cluster when either
* the signature is known infrastructure (connection refused, a timeout to a host, out of memory or
  disk, a lost device, NCCL/RCCL, the driver) and at least MIN_KNOWN_CLUSTER tests share it, or
* at least MIN_CLUSTER tests share it and it says more than a comparison of values (not generic).
A cluster's tests do not count that night (`Observation`s carry their signature): it neither
breaks nor starts a failed streak, and a retry or re-run that passed is no flaky evidence. A test
of the suite that failed with another signature that night is judged on its own.

A cluster that has lasted more than `max_outage_nights` up to the newest night is no outage but a
breakage (a commit that makes tests run out of memory, an import broken for many tests): like a
wholesale failure (`flakiness.infra_nights`), its nights count again and its tests are broken.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from nightly_assets.testing.flakiness import Observation, failed_with
from nightly_assets.testing.signatures import is_generic, is_known_infra

# One test failing with an infra-like message may be its own (a regression that needs more memory,
# a test of the retry logic); two tests of one suite hitting the same resource message on the same
# night are the resource.
MIN_KNOWN_CLUSTER = 2
# Any other signature: independent real failures of one suite-night share a normalised message
# with words in it rarely. Even at a generous 1 in 10 that two of them match, five sharing one
# has a chance of (1/10)^4 = 1e-4 per suite-night, about one false infra event in 27 years of a
# seven-suite nightly; a commit that breaks many tests alike is caught by the outage limit instead.
# It is also the least failure count of a wholesale failure (`flakiness.MIN_WHOLESALE_FAILURES`).
MIN_CLUSTER = 5
FAILED = frozenset({"failed", "error"})


@dataclass(frozen=True)
class Cluster:
    """One infra event: the tests of a suite that failed with `signature` on `night`."""

    suite: str
    night: dt.date
    signature: str
    tests: tuple[str, ...]  # sorted
    known: bool  # a known infrastructure signature (else: many tests alike)
    resource: str | None = None  # the host:port or device the messages name, where they name one

    def line(self, shown: int = 5) -> str:
        names = ", ".join(self.tests[:shown]) + (
            f" … {len(self.tests) - shown} more" if len(self.tests) > shown else ""
        )
        on = f" on {self.resource}" if self.resource else ""
        why = "a known infrastructure failure" if self.known else "one failure of many tests"
        return f"{self.suite}: {len(self.tests)} tests failed with `{self.signature}`{on} ({why}): {names}"


def is_cluster(signature: str, size: int) -> bool:
    """Whether `size` tests of a suite-night failing with `signature` are an infra event."""
    if is_known_infra(signature):
        return size >= MIN_KNOWN_CLUSTER
    return size >= MIN_CLUSTER and not is_generic(signature)


def night_clusters(failures: Iterable[tuple[str, str | None]]) -> dict[str, tuple[str, ...]]:
    """A suite-night's (test, signature) failures -> its clusters: signature -> tests."""
    by_signature: dict[str, set[str]] = {}
    for test, sig in failures:
        if sig is not None:
            by_signature.setdefault(sig, set()).add(test)
    return {sig: tuple(sorted(tests)) for sig, tests in by_signature.items() if is_cluster(sig, len(tests))}


def outages(
    by_night: Mapping[dt.date, AbstractSet[str]], nights: Sequence[dt.date], *, max_outage_nights: int = 3
) -> dict[dt.date, set[str]]:
    """The cluster signatures of each night (`by_night`) that are outages: not one that has been a
    cluster on every one of the suite's `nights` for more than `max_outage_nights` up to the
    newest (a breakage, whose tests must be judged)."""
    found = {night: set(sigs) for night, sigs in by_night.items() if sigs}
    newest_first = sorted(nights, reverse=True)
    for sig in {s for sigs in found.values() for s in sigs}:
        ongoing = next(
            (i for i, n in enumerate(newest_first) if sig not in found.get(n, ())), len(newest_first)
        )
        if ongoing > max_outage_nights:
            for night in newest_first[:ongoing]:
                found[night].discard(sig)
    return {night: sigs for night, sigs in found.items() if sigs}


def infra_for(
    observations: Iterable[Observation],
    suite_infra: AbstractSet[dt.date],
    clusters: Mapping[dt.date, AbstractSet[str]],
) -> AbstractSet[dt.date]:
    """One test's infra nights: its suite's (wholesale failures) and those it failed in a cluster."""
    mine = {o.night for o in observations if o.night in clusters and failed_with(o) in clusters[o.night]}
    return suite_infra | mine if mine else suite_infra
