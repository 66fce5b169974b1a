"""Tonight's test health from the warehouse's histories: each test that was not plainly stable
over the window (flaky, broken, too new to tell) with its verdict and quarantine, and the shares
torch_spyre's gates read (flaky share, in-scope share)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from nightly_assets.testing.flakiness import Verdict, classify, in_quarantine
from nightly_assets.warehouse.evidence import Histories

SHOWN = 20  # tests named per list in metadata and alerts


@dataclass(frozen=True)
class Judged:
    """One test that was not plainly stable, as judged on `night`."""

    suite: str
    test_id: str
    test_key: int
    verdict: Verdict
    quarantined: bool
    night: dt.date

    @property
    def new_failure(self) -> bool:
        """Broken from this night on: what alerts, once."""
        return self.verdict.state == "broken" and self.verdict.first_bad == self.night


def judge(histories: Histories, night: dt.date, *, clean_nights: int | None) -> list[Judged]:
    """The verdict of every test of `histories` observed on `night` that is not stable; with
    `clean_nights` (quarantine opted into) whether its failures are quarantined."""
    judged = []
    for (suite, test_id), observations in histories.tests.items():
        if observations[-1].night != night:
            continue  # not run tonight: a removed or renamed test says nothing about tonight
        infra = histories.infra.get(suite, set())
        verdict = classify(observations, infra=infra)
        if verdict.state == "stable":
            continue
        quarantined = clean_nights is not None and in_quarantine(
            observations, clean_nights=clean_nights, infra=infra
        )
        judged.append(Judged(suite, test_id, histories.keys[(suite, test_id)], verdict, quarantined, night))
    return sorted(judged, key=lambda j: (j.verdict.state, j.suite, j.test_id))


def ran(counts: Mapping[str, Mapping[str, int]], suites: list[str] | None = None) -> int:
    """Tests that ran (passed, failed or errored) in the suites' counts (default all of them)."""
    return sum(
        c["passed"] + c["failed"] + c["error"] for s, c in counts.items() if suites is None or s in suites
    )


def share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0
