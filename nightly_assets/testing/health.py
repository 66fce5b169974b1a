"""Tonight's test health from the warehouse's histories: each test that was not plainly stable
over the window (flaky, broken, too new to tell) with its verdict and quarantine, and the shares
torch_spyre's gates read (flaky share, in-scope share)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nightly_assets.results import NightKey, TestCase
from nightly_assets.testing.clusters import FAILED, Cluster, infra_for
from nightly_assets.testing.flakiness import Suite, Verdict, classify, failed_with, in_quarantine
from nightly_assets.testing.signatures import common_resource, is_known_infra

if TYPE_CHECKING:
    from nightly_assets.warehouse.evidence import Histories, TestName
    from nightly_assets.warehouse.store import Warehouse

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
    # broken tonight and not the night before (a new failure, a flaky test that broke, a suite
    # outage that outlasted infra): what alerts and is searched for its culprit, once
    new_failure: bool = False
    # flaky in a burst tonight (`Verdict.flakier_since`) and not in one on the night before: what
    # the no_flakier_test check names, once a burst
    new_flakier: bool = False


def judge(
    histories: Histories,
    night: dt.date,
    *,
    clean_nights: int | None,
    broken_before: AbstractSet[TestName] = frozenset(),
) -> list[Judged]:
    """The verdict of every test of `histories` observed on `night` that is not stable; with
    `clean_nights` (quarantine opted into) whether its failures are quarantined; a broken test
    not in `broken_before` (the previous night's broken tests) is a new failure. A flaky test in a
    burst (flakier since a night) is newly flakier when its history up to the night before, judged
    the same way, was in none: its burst is named once, on the night it is first seen."""
    judged = []
    verdicts: dict[TestName, tuple[Verdict, AbstractSet[dt.date]]] = {}
    for (suite, test_id), observations in histories.tests.items():
        if observations[-1].night != night:
            continue  # not run tonight: a removed or renamed test says nothing about tonight
        infra = infra_for(observations, histories.infra.get(suite, set()), histories.clusters.get(suite, {}))
        wide = histories.suite_wide.get(suite, set())
        flakes = histories.flakes.get((suite, test_id), frozenset())
        verdicts[suite, test_id] = classify(observations, infra=infra, suite_wide=wide, flakes=flakes), infra
    suites = _suites(histories, night, verdicts)
    for (suite, test_id), (verdict, infra) in verdicts.items():
        observations = histories.tests[suite, test_id]
        if verdict.state == "broken" and suite in suites:  # weighed against the suite's flaky tests
            wide = histories.suite_wide.get(suite, set())
            flakes = histories.flakes.get((suite, test_id), frozenset())
            verdict = classify(observations, infra=infra, suite=suites[suite], suite_wide=wide, flakes=flakes)
        if verdict.state == "stable":
            continue
        quarantined = (
            clean_nights is not None
            and verdict.state == "flaky"
            and in_quarantine(observations, clean_nights=clean_nights, infra=infra)
        )
        new = verdict.state == "broken" and (suite, test_id) not in broken_before
        flakier = (
            verdict.flakier_since is not None
            and classify(observations[:-1], infra=infra).flakier_since is None
        )
        key = histories.keys[(suite, test_id)]
        judged.append(Judged(suite, test_id, key, verdict, quarantined, new, flakier))
    return sorted(judged, key=lambda j: (j.verdict.state, j.suite, j.test_id))


def _suites(
    histories: Histories, night: dt.date, verdicts: Mapping[TestName, tuple[Verdict, AbstractSet[dt.date]]]
) -> dict[str, Suite]:
    """Per suite with flaky tests, what its tests' failures tonight are weighed with
    (`flakiness.Suite`): its tests that ran tonight, the failure rates of those judged flaky, and
    how many failed tonight without being flaky and being flaky (each judged alike)."""
    rates: dict[str, list[float]] = {}
    failing: Counter[tuple[str, bool]] = Counter()  # (suite, flaky) -> failing tonight
    for (suite, test_id), (verdict, _) in verdicts.items():
        flaky = verdict.state == "flaky"
        if flaky and verdict.fail_rate is not None:
            rates.setdefault(suite, []).append(verdict.fail_rate)
        if histories.tests[suite, test_id][-1].outcome in FAILED:
            failing[suite, flaky] += 1
    suites = {}
    for suite, by_night in histories.tallies.items():
        ran, _ = by_night.get(night, (0, 0))
        if ran and suite in rates:
            suites[suite] = Suite(ran, tuple(rates[suite]), failing[suite, False], failing[suite, True])
    return suites


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
    from nightly_assets.warehouse.tables import node_key  # SQLAlchemy: for a run, not for loading

    keys = sorted({node_key(c.node_id) for c in failures})
    histories = store.test_histories(
        key.pipeline, key.target, until=key.night, nights=nights, suites=[suite], only={suite: keys}
    )
    infra = histories.infra.get(suite, set())
    if key.night in infra:
        return set()  # a suite failing wholesale tonight: its failures are no flakes
    clusters = histories.clusters.get(suite, {})
    return {
        test_id
        for (_, test_id), observations in histories.tests.items()
        if observations[-1].night == key.night
        and in_quarantine(
            observations, clean_nights=clean_nights, infra=infra_for(observations, infra, clusters)
        )
    }


def infra_events(histories: Histories, night: dt.date) -> list[Cluster]:
    """`night`'s infra clusters (testing/clusters.py), one per suite and signature, each with its
    tests and the resource their messages name."""
    tests: dict[tuple[str, str], list[str]] = {}
    for (suite, test_id), observations in histories.tests.items():
        tonight = observations[-1]
        sig = failed_with(tonight) if tonight.night == night else None
        if sig is not None and sig in histories.clusters.get(suite, {}).get(night, ()):
            tests.setdefault((suite, sig), []).append(test_id)
    return [
        Cluster(
            suite,
            night,
            sig,
            tuple(sorted(names)),
            is_known_infra(sig),
            common_resource(histories.messages.get((suite, night, sig), [])),
        )
        for (suite, sig), names in sorted(tests.items())
    ]


def ran(counts: Mapping[str, Mapping[str, int]], suites: list[str] | None = None) -> int:
    """Tests that ran (passed, failed or errored) in the suites' counts (default all of them)."""
    return sum(
        c["passed"] + c["failed"] + c["error"] for s, c in counts.items() if suites is None or s in suites
    )


def share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0
