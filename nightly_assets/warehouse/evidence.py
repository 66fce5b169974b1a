"""Flaky-test evidence in the warehouse: what a suite's write keeps beside its test cases (retries
that passed, re-runs of the night that disagree: `tables.TestEvidenceTable`), and the histories
the flaky / broken classifier (`testing/flakiness.py`) reads, found through the indexes: only the
tests that failed or left evidence in the window, each with its every night in it."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, insert, null, or_, select
from sqlalchemy.orm import Session

from nightly_assets.results import NightKey, TestReport, node_id_of
from nightly_assets.testing.clusters import FAILED as FAILED_OUTCOMES
from nightly_assets.testing.clusters import night_clusters, outages
from nightly_assets.testing.flakiness import (
    Observation,
    failed_with,
    is_wholesale,
    wholesale_nights,
)
from nightly_assets.testing.signatures import signature
from nightly_assets.warehouse.history import FAILED, RAN, batches, is_key
from nightly_assets.warehouse.tables import NightTable, SuiteTable, TestCaseTable, TestEvidenceTable, node_key

INFRA_SHARE = 0.5  # a run in which this share of the tests that ran failed is an infra failure
TestName = tuple[str, str]  # (suite, node id)
MESSAGES_KEPT = 20  # of a cluster, for the resource most of them name


def earlier_run(session: Session, key: NightKey, suite: str) -> dict[int, bool] | None:
    """The run of the suite that a new report is about to replace: test key -> failed. None when
    there is none, or it was an infra failure (its disagreement says nothing about any test); the
    tests it failed in an infra cluster (testing/clusters.py) are left out for the same reason."""
    t = TestCaseTable
    rows = session.execute(
        select(t.test_key, t.outcome, t.message).where(*is_key(t, key), t.suite == suite, t.outcome.in_(RAN))
    ).all()
    failed = {k: outcome in FAILED for k, outcome, _ in rows if k is not None}
    if is_wholesale(len(failed), sum(failed.values()), INFRA_SHARE):
        return None
    signatures = [(k, signature(m)) for k, outcome, m in rows if k is not None and outcome in FAILED]
    clustered = {
        k for tests in night_clusters((str(k), sig) for k, sig in signatures).values() for k in tests
    }
    return {k: f for k, f in failed.items() if str(k) not in clustered}


def record(session: Session, key: NightKey, report: TestReport, replaced: dict[int, bool] | None) -> None:
    """Keep the report's retries that passed (replacing the suite's earlier ones) and, when it
    replaces an earlier run, each test whose outcome that run disagrees with."""
    t = TestEvidenceTable
    session.execute(delete(t).where(*is_key(t, key), t.suite == report.suite, t.kind == "retry"))
    counts = report.counts()
    failed = sum(counts[o] for o in FAILED)
    infra = is_wholesale(sum(counts[o] for o in RAN), failed, INFRA_SHARE)
    rows = []
    night = {"pipeline": key.pipeline, "night": key.night, "target": key.target, "suite": report.suite}
    compare = replaced is not None and not infra
    # One pass over the cases only to compare them (a large report's are read again from its
    # files); the retries that passed are the report's flaky cases, already tallied.
    for case in report.cases if compare else report.flaky:
        if case.outcome not in RAN:
            continue
        retried = case.outcome == "passed" and case.attempts > 1
        if not (retried or compare):
            continue
        test_key = node_key(case.node_id)
        if retried:
            rows.append({**night, "test_key": test_key, "kind": "retry", "outcome": "failed"})
        if compare and replaced is not None:
            before = replaced.get(test_key)
            if before is not None and before != (case.outcome in FAILED):
                outcome = "failed" if before else "passed"
                rows.append({**night, "test_key": test_key, "kind": "rerun", "outcome": outcome})
    for chunk in batches(iter(rows), 5_000):
        session.execute(insert(t), chunk)


@dataclass
class Histories:
    """The tests of a window that may not be stable, each with its nights (oldest first)."""

    nights: list[dt.date]  # the window: nights with test results, oldest first
    tests: dict[TestName, list[Observation]] = field(default_factory=dict)
    keys: dict[TestName, int] = field(default_factory=dict)
    infra: dict[str, set[dt.date]] = field(default_factory=dict)  # per suite
    # per suite, the nights of a breakage of the whole suite (`flakiness.wholesale_nights`)
    suite_wide: dict[str, set[dt.date]] = field(default_factory=dict)
    # per suite, night -> (tests that ran, of them failed or errored) of its last run
    tallies: dict[str, dict[dt.date, tuple[int, int]]] = field(default_factory=dict)
    # per suite, night -> the signatures of its infra clusters (testing/clusters.py: outages only)
    clusters: dict[str, dict[dt.date, set[str]]] = field(default_factory=dict)
    # (suite, night, signature) -> a few of a cluster's messages, for the resource they name
    messages: dict[tuple[str, dt.date, str], list[str]] = field(default_factory=dict)
    pins: dict[dt.date, dict[str, str]] = field(default_factory=dict)
    # test failing on the newest night -> the signatures it failed with before the window, over
    # all the warehouse holds (a failure's message names its cause, which does not age as a rate
    # does): what `flakiness.classify` knows as its earlier flakes
    flakes: dict[TestName, frozenset[str]] = field(default_factory=dict)


def histories(
    session: Session,
    pipeline: str,
    target: str,
    *,
    until: dt.date,
    nights: int,
    suites: Sequence[str] | None = None,
    only: dict[str, list[int]] | None = None,
) -> Histories:
    """Over the last `nights` nights with results up to `until`: every test (of `suites`) that
    failed, errored, passed on a retry or disagreed with a re-run on one of them (or the test keys
    of `only`, per suite), with all its nights in the window, the night's pins and earlier runs."""
    s = SuiteTable
    in_suites = [s.suite.in_(list(suites))] if suites is not None else []
    window = (
        select(s.night)
        .where(s.pipeline == pipeline, s.target == target, s.night <= until, *in_suites)
        .group_by(s.night)
        .order_by(s.night.desc())
        .limit(nights)
    )
    days = sorted(session.scalars(window))
    found = Histories(days)
    if not days:
        return found
    first, last = days[0], days[-1]
    n = NightTable
    pins = select(n.night, n.pins).where(
        n.pipeline == pipeline, n.target == target, n.night.between(first, last)
    )
    found.pins = {night: json.loads(text) for night, text in session.execute(pins)}
    found.tallies = tallies = _tallies(session, pipeline, target, first, last, suites)
    for suite, by_night in tallies.items():
        found.infra[suite], found.suite_wide[suite] = wholesale_nights(by_night, INFRA_SHARE)
    e = TestEvidenceTable
    in_window = [e.pipeline == pipeline, e.target == target, e.night.between(first, last)]
    if suites is not None:
        in_window.append(e.suite.in_(list(suites)))
    evidence = session.execute(
        select(e.suite, e.test_key, e.night, e.kind, e.outcome).where(*in_window)
    ).all()
    candidates = only if only is not None else _candidates(session, pipeline, target, days, suites, evidence)
    earlier: dict[tuple[str, int, dt.date], list[str]] = {}
    for row in evidence:
        if row.kind == "rerun":
            earlier.setdefault((row.suite, row.test_key, row.night), []).append(row.outcome)
    t = TestCaseTable
    for suite, keys in candidates.items():
        for chunk in batches(iter(sorted(set(keys))), 500):
            rows = session.execute(
                select(t.night, t.test_key, t.classname, t.name, t.outcome, t.attempts, t.message)
                .where(
                    t.pipeline == pipeline,
                    t.suite == suite,
                    t.test_key.in_(chunk),
                    t.night.between(first, last),
                    t.target == target,
                )
                .order_by(t.night)
            )
            for night, key_, classname, name, outcome, attempts, message in rows:
                if key_ is None:
                    continue  # a row of an older warehouse not migrated yet
                test = (suite, node_id_of(classname, name))
                found.keys[test] = key_
                failing = outcome in FAILED_OUTCOMES or (outcome == "passed" and attempts > 1)
                sig = signature(message) if failing else None
                if sig is not None and message is not None:
                    kept = found.messages.setdefault((suite, night, sig), [])
                    if len(kept) < MESSAGES_KEPT:
                        kept.append(message)
                found.tests.setdefault(test, []).append(
                    Observation(
                        night,
                        found.pins.get(night, {}),
                        outcome,
                        attempts,
                        tuple(earlier.get((suite, key_, night), ())),
                        sig,
                    )
                )
    found.clusters = _clusters(found, tallies)
    found.flakes = _flakes(session, pipeline, target, found)
    found.messages = {
        k: v for k, v in found.messages.items() if k[2] in found.clusters.get(k[0], {}).get(k[1], ())
    }
    return found


def _flakes(session: Session, pipeline: str, target: str, found: Histories) -> dict[TestName, frozenset[str]]:
    """Per test failing on the window's newest night, the signatures of its failures (and of the
    failed attempts of its retried passes) on the nights before the window."""
    newest, first = found.nights[-1], found.nights[0]
    failing: dict[str, dict[int, str]] = {}  # suite -> test key -> node id
    for (suite, test_id), observations in found.tests.items():
        if observations[-1].night == newest and observations[-1].outcome in FAILED_OUTCOMES:
            failing.setdefault(suite, {})[found.keys[suite, test_id]] = test_id
    t = TestCaseTable
    flakes: dict[TestName, set[str]] = {}
    for suite, by_key in failing.items():
        for chunk in batches(iter(sorted(by_key)), 500):
            rows = session.execute(
                select(t.test_key, t.message).where(
                    t.pipeline == pipeline,
                    t.suite == suite,
                    t.test_key.in_(chunk),
                    t.night < first,
                    t.target == target,
                    t.message.is_not(None),
                    or_(t.outcome.in_(tuple(FAILED_OUTCOMES)), t.attempts > 1),
                )
            )
            for key_, message in rows:
                if key_ is not None and (sig := signature(message)) is not None:
                    flakes.setdefault((suite, by_key[key_]), set()).add(sig)
    return {test: frozenset(sigs) for test, sigs in flakes.items()}


def _clusters(
    found: Histories, tallies: dict[str, dict[dt.date, tuple[int, int]]]
) -> dict[str, dict[dt.date, set[str]]]:
    """Per suite, the signatures of each night's infra clusters that are outages (not wholesale
    failures, which are infra already, nor clusters lasting into a breakage)."""
    failures: dict[str, dict[dt.date, list[tuple[str, str | None]]]] = {}
    for (suite, test_id), observations in found.tests.items():
        for obs in observations:
            sig = failed_with(obs)
            if sig is not None and obs.night not in found.infra.get(suite, ()):
                failures.setdefault(suite, {}).setdefault(obs.night, []).append((test_id, sig))
    clusters = {}
    for suite, by_night in failures.items():
        signatures = {night: set(night_clusters(tests)) for night, tests in by_night.items()}
        nights = sorted(tallies.get(suite, by_night))
        if lasting := outages(signatures, nights):
            clusters[suite] = lasting
    return clusters


def _candidates(
    session: Session,
    pipeline: str,
    target: str,
    days: list[dt.date],
    suites: Sequence[str] | None,
    evidence: Iterable[Any],
) -> dict[str, list[int]]:
    """Per suite, the keys of the tests that failed in the window (through the outcome index) or
    left evidence in it."""
    t = TestCaseTable
    failing = select(t.suite, t.test_key).where(
        t.pipeline == pipeline, t.target == target, t.night.in_(days), t.outcome.in_(FAILED)
    )
    if suites is not None:
        failing = failing.where(t.suite.in_(list(suites)))
    found: dict[str, set[int]] = {}
    for suite, key_ in session.execute(failing.group_by(t.suite, t.test_key).order_by(null())):
        if key_ is not None:
            found.setdefault(suite, set()).add(key_)
    for row in evidence:
        found.setdefault(row.suite, set()).add(row.test_key)
    return {suite: sorted(keys) for suite, keys in found.items()}


def _tallies(
    session: Session, pipeline: str, target: str, first: dt.date, last: dt.date, suites: Sequence[str] | None
) -> dict[str, dict[dt.date, tuple[int, int]]]:
    """Per suite, its nights of the window: (ran, failed), for `flakiness.infra_nights`."""
    s = SuiteTable
    query = select(s.suite, s.night, s.passed, s.failed, s.error).where(
        s.pipeline == pipeline, s.target == target, s.night.between(first, last), s.collect_only.is_(False)
    )
    if suites is not None:
        query = query.where(s.suite.in_(list(suites)))
    tallies: dict[str, dict[dt.date, tuple[int, int]]] = {}
    for suite, night, passed, failed, error in session.execute(query):
        tallies.setdefault(suite, {})[night] = (passed + failed + error, failed + error)
    return tallies
