"""Test history queries of the warehouse, through the test identity indexes of tables.py: one
test across nights, tests newly failing tonight, pass rates over a window (the store's
`test_history`, `newly_failing` and `pass_rates` run these in its retrying session). Every
test's pass rates are counted from the per-suite tally rows of tallies.py where a window has them."""

from __future__ import annotations

import datetime as dt
import gc
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar, cast

from sqlalchemy import ColumnElement, case, func, null, select
from sqlalchemy.orm import Session

from nightly_assets.results import NightKey, Outcome, TestCase, node_id_of
from nightly_assets.warehouse.tables import SuiteTable, TestCaseTable, node_key
from nightly_assets.warehouse.tallies import SuiteCounts, window_counts

T = TypeVar("T")
FAILED = ("failed", "error")
RAN = ("passed", "failed", "error")
TestId = tuple[str, int | None]  # (suite, test_key)


@dataclass(frozen=True)
class TestRun:
    """One test case of one night and target, as the warehouse holds it."""

    __test__ = False  # not a pytest test class
    night: dt.date
    target: str
    suite: str
    case: TestCase

    @property
    def test_id(self) -> str:
        return self.case.node_id


@dataclass(frozen=True)
class PassRate:
    """How often one test passed over a window of nights: `passed` of `runs` (runs that passed,
    failed or errored; skipped and collect-only ones do not count)."""

    suite: str
    test_id: str
    runs: int
    passed: int

    @property
    def rate(self) -> float:
        return self.passed / self.runs


def test_history(session: Session, pipeline: str, suite: str, test_id: str, limit: int = 30) -> list[TestRun]:
    """One test (`TestCase.node_id` in `suite`) on up to `limit` nights, newest first, on
    every target of the pipeline."""
    t = TestCaseTable
    query = (
        select(t)
        .where(t.pipeline == pipeline, t.suite == suite, t.test_key == node_key(test_id))
        .order_by(t.night.desc(), t.target, t.id)
    )

    runs: list[TestRun] = []
    # Rows in pages: another node id of the same key (a hash collision) is skipped.
    for row in session.scalars(query.execution_options(yield_per=limit + 1)):
        run = test_run(row)
        if run.test_id == test_id:
            runs.append(run)
            if len(runs) >= limit:
                break
    return runs


def newly_failing(session: Session, key: NightKey) -> list[TestRun]:
    """Cases that failed or errored on the key's night and passed on the previous night of
    the same pipeline and target (the newest earlier night with test results), by suite and
    report order. Empty when there is no earlier night."""
    t = TestCaseTable
    earlier = (
        select(func.max(SuiteTable.night))
        .where(
            SuiteTable.pipeline == key.pipeline,
            SuiteTable.target == key.target,
            SuiteTable.night < key.night,
            SuiteTable.collect_only.is_(False),
        )
        .scalar_subquery()
    )

    previous = session.scalar(select(earlier))
    if previous is None:
        return []
    before = TestCaseTable.__table__.alias("before")
    passed_before = (
        select(before.c.id)
        .where(
            before.c.pipeline == key.pipeline,
            before.c.target == key.target,
            before.c.night == previous,
            before.c.outcome == "passed",
            before.c.suite == t.suite,
            before.c.test_key == t.test_key,
        )
        .exists()
    )
    query = select(t).where(*is_key(t, key), t.outcome.in_(FAILED), passed_before).order_by(t.suite, t.id)
    # Same key on both nights; the node id itself decides (a hash collision is no match).
    rows = session.scalars(query).all()
    if not rows:
        return []
    ids = {(r.suite, r.test_key) for r in rows}
    passed_ids = node_ids(session, key, previous, ids, outcome="passed")
    return [run for r in rows if (run := test_run(r)).test_id in passed_ids.get((r.suite, r.test_key), ())]


def pass_rates(
    session: Session,
    pipeline: str,
    target: str,
    nights: int,
    *,
    until: dt.date | None = None,
    below: float | None = 1.0,
) -> list[PassRate]:
    """Per test, how often it passed over the last `nights` nights with test results of
    the pipeline and target (up to and including `until`, default the newest), lowest rate
    first. With `below` (default 1.0: every test that did not pass every run) only tests
    whose rate is lower; `below=None` returns every test that ran. A test that passed every
    run is not listed unless `below` is None or above 1."""
    window = (
        select(SuiteTable.night)
        .where(SuiteTable.pipeline == pipeline, SuiteTable.target == target)
        .group_by(SuiteTable.night)
        .order_by(SuiteTable.night.desc())
        .limit(nights)
    )
    if until is not None:
        window = window.where(SuiteTable.night <= until)
    days = list(session.scalars(window))
    if not days:
        return []
    every = below is None or below > 1
    if every:
        with _no_collection():
            if (counted := window_counts(session, pipeline, target, days)) is not None:
                return _every_rate(counted)
    t = TestCaseTable
    in_window = [t.pipeline == pipeline, t.target == target]
    candidates: dict[str, list[int | None]] = {}
    if every:
        suites = select(SuiteTable.suite).where(
            SuiteTable.pipeline == pipeline, SuiteTable.target == target, SuiteTable.night.in_(days)
        )
        candidates = {suite: [] for suite in session.scalars(suites.distinct())}
    else:  # only a test that failed can be below 1: those come from the outcome index alone
        failing = select(t.suite, t.test_key).where(*in_window, t.night.in_(days), t.outcome.in_(FAILED))
        for suite, key_ in session.execute(failing.group_by(t.suite, t.test_key).order_by(null())):
            candidates.setdefault(suite, []).append(key_)
    tallies = _tallies(session, [*in_window, t.night.between(days[-1], days[0])], candidates)
    if below is not None:
        tallies = {sk: tally for sk, tally in tallies.items() if tally[1] / tally[0] < below}
    names: dict[TestId, str] = {}
    if every:  # most tests' names by one range of the newest night, not one by one
        newest = NightKey(pipeline, days[0], target)
        for suite, key_, classname, name in session.execute(
            select(t.suite, t.test_key, t.classname, t.name).where(*is_key(t, newest))
        ):
            names.setdefault((suite, key_), node_id_of(classname, name))
    by_id = _names(session, [row_id for sk, (_, _, row_id) in tallies.items() if sk not in names])
    result = [
        PassRate(suite, names.get((suite, key_)) or by_id[row_id], runs, passed)
        for (suite, key_), (runs, passed, row_id) in tallies.items()
    ]
    return sorted(result, key=lambda r: (r.rate, r.suite, r.test_id))


@contextmanager
def _no_collection() -> Iterator[None]:
    """The garbage collector paused while every test's rate is built: 100,000 new objects
    set off collections that walk all of them (and what the caller holds) again and again,
    as long as building them, for no garbage (they hold no cycles)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _every_rate(counted: dict[str, SuiteCounts]) -> list[PassRate]:
    """Every test's rate from its suite's counts, lowest first. Grouped by (rate, suite), each
    group sorted by node id alone: a sort of strings, several times faster than of tuples at
    100,000 tests."""
    groups: dict[tuple[float, str], list[PassRate]] = {}
    for suite, (runs, failures, node_ids) in counted.items():
        by_rate: dict[float, list[PassRate]] = {}
        for test_key, ran in runs.items():
            passed = ran - failures.get(test_key, 0)
            by_rate.setdefault(passed / ran, []).append(PassRate(suite, node_ids[test_key], ran, passed))
        groups.update(((rate, suite), rates) for rate, rates in by_rate.items())
    by_id = attrgetter("test_id")
    return [rate for group in sorted(groups) for rate in sorted(groups[group], key=by_id)]


def _tallies(
    session: Session, in_range: list[ColumnElement[bool]], candidates: dict[str, list[int | None]]
) -> dict[TestId, tuple[int, int, int]]:
    """(runs, passed, one row's id) per test of `candidates` (suite: test keys, or [] for all
    the suite's tests) over the rows of `in_range` (a range of nights: with an IN list of
    test keys as well, MariaDB gave up ranges on an IN x IN product; the same rows, as every
    night with results between its ends is in the window). Grouped by the BIGINT key within
    one suite and unordered (MariaDB sorts a GROUP BY otherwise), the server aggregates in a
    small temporary table through the test index alone, without sorting (suite, key) strings."""
    t = TestCaseTable
    tally = select(
        t.test_key, func.count(), func.sum(case((t.outcome == "passed", 1), else_=0)), func.max(t.id)
    ).where(*in_range, t.outcome.in_(RAN))
    found: dict[TestId, tuple[int, int, int]] = {}
    for suite, keys in candidates.items():
        for chunk in batches(iter(keys), 500) if keys else iter([None]):
            where = [t.suite == suite] + ([t.test_key.in_(chunk)] if chunk else [])
            for key_, runs, passed, row_id in session.execute(
                tally.where(*where).group_by(t.test_key).order_by(null())
            ):
                found[(suite, key_)] = (int(runs), int(passed or 0), int(row_id))
    return found


def _names(session: Session, row_ids: list[int]) -> dict[int, str]:
    """Node ids of test case rows, by primary key (1,000 a query)."""
    t = TestCaseTable
    found: dict[int, str] = {}
    for chunk in batches(iter(sorted(row_ids)), 1000):
        for row_id, classname, name in session.execute(
            select(t.id, t.classname, t.name).where(t.id.in_(chunk))
        ):
            found[row_id] = node_id_of(classname, name)
    return found


def test_run(row: TestCaseTable) -> TestRun:
    case_ = TestCase(
        classname=row.classname,
        name=row.name,
        outcome=cast(Outcome, row.outcome),
        duration_s=row.duration_s,
        message=row.message,
        attempts=row.attempts,
    )
    return TestRun(row.night, row.target, row.suite, case_)


def node_ids(
    session: Session, key: NightKey, night: dt.date, ids: set[TestId], *, outcome: str
) -> dict[TestId, list[str]]:
    """The node ids of (suite, test_key) pairs with `outcome` on `night` of the key's pipeline
    and target, looked up through the test index (500 keys a query)."""
    t = TestCaseTable
    by_suite: dict[str, list[int | None]] = {}
    for suite, key_ in ids:
        by_suite.setdefault(suite, []).append(key_)
    found: dict[TestId, list[str]] = {}
    for suite, keys in by_suite.items():
        for chunk in batches(iter(keys), 500):
            rows = session.execute(
                select(t.test_key, t.classname, t.name).where(
                    t.pipeline == key.pipeline,
                    t.suite == suite,
                    t.test_key.in_(chunk),
                    t.night == night,
                    t.target == key.target,
                    t.outcome == outcome,
                )
            )
            for key_, classname, name in rows:
                names = found.setdefault((suite, key_), [])
                if (test_id := node_id_of(classname, name)) not in names:
                    names.append(test_id)
    return found


def is_key(table: type[Any], key: NightKey) -> list[ColumnElement[bool]]:
    return [table.pipeline == key.pipeline, table.night == key.night, table.target == key.target]


def batches(items: Iterator[T], size: int) -> Iterator[list[T]]:
    while batch := list(itertools.islice(items, size)):
        yield batch
