"""Tonight's test health from the warehouse's histories: each test that was not plainly stable
over the window (flaky, broken, too new to tell) with its verdict and quarantine, and the shares
torch_spyre's gates read (flaky share, in-scope share)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nightly_assets.results import NightKey, TestCase
from nightly_assets.testing.flakiness import Verdict, classify, in_quarantine
from nightly_assets.warehouse.evidence import Histories
from nightly_assets.warehouse.store import Warehouse
from nightly_assets.warehouse.tables import node_key

SHOWN = 20  # tests named per list in metadata and alerts
MAX_QUARANTINE_LOOKUPS = 1_000  # more failures than this in one suite is no flakiness


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


def quarantined_failures(
    store: Warehouse,
    key: NightKey,
    suite: str,
    failures: Sequence[TestCase],
    *,
    clean_nights: int,
    nights: int,
) -> set[str]:
    """The node ids of tonight's failures that are in quarantine: flaky tests (over the last
    `nights` nights, tonight recorded) short of `clean_nights` clean nights since their last flake.
    A suite failing wholesale quarantines nothing (a broken build is no flake)."""
    if not failures or len(failures) > MAX_QUARANTINE_LOOKUPS:
        return set()
    keys = sorted({node_key(c.node_id) for c in failures})
    histories = store.test_histories(
        key.pipeline, key.target, until=key.night, nights=nights, suites=[suite], only={suite: keys}
    )
    infra = histories.infra.get(suite, set())
    return {
        test_id
        for (_, test_id), observations in histories.tests.items()
        if observations[-1].night == key.night
        and in_quarantine(observations, clean_nights=clean_nights, infra=infra)
    }


def ran(counts: Mapping[str, Mapping[str, int]], suites: list[str] | None = None) -> int:
    """Tests that ran (passed, failed or errored) in the suites' counts (default all of them)."""
    return sum(
        c["passed"] + c["failed"] + c["error"] for s, c in counts.items() if suites is None or s in suites
    )


def share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0
