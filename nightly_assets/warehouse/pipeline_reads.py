"""Reads over a pipeline's recorded nights in one query each (not night by night): what the results
site (``nightly_assets/site``) draws. Each returns the values of ``rows.py`` keyed by night."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Executable, Row, func, select
from sqlalchemy.orm import Session

from nightly_assets.results import NightKey, TestCase, node_id_of
from nightly_assets.warehouse.access import DatabaseAccess
from nightly_assets.warehouse.history import TestRun
from nightly_assets.warehouse.rows import (
    SENT_ALERT_COLUMNS,
    MachineCost,
    SentAlert,
    StageRow,
    machine_cost,
    stage_row,
)
from nightly_assets.warehouse.tables import (
    AlertTable,
    BenchmarkTable,
    CostTable,
    NightTable,
    StageTable,
    TestCaseTable,
    node_key,
)

FAILED_OUTCOMES = ("failed", "error")


@dataclass(frozen=True)
class BenchmarkName:
    """One benchmark a pipeline's target records, with how to read its values."""

    target: str
    name: str
    unit: str
    lower_is_better: bool


@dataclass(frozen=True)
class FailedTest:
    """A test that failed or errored on at least one night of a window."""

    suite: str
    test_id: str
    count: int  # the nights it failed on
    last: dt.date  # the newest of them
    last_message: str | None


class PipelineReads(DatabaseAccess):
    """The pipeline-wide reads; ``store.Warehouse`` has them with the rest."""

    def pipeline_stages(self, pipeline: str, *, since: dt.date) -> dict[NightKey, list[StageRow]]:
        """Every stage row of the pipeline's nights from `since` on, in recorded order."""
        t = StageTable
        query = select(t).where(t.pipeline == pipeline, t.night >= since).order_by(t.id)
        found: dict[NightKey, list[StageRow]] = {}
        for row in self._read(lambda s: s.scalars(query).all()):
            found.setdefault(NightKey(row.pipeline, row.night, row.target), []).append(stage_row(row))
        return found

    def pipeline_costs(self, pipeline: str) -> list[tuple[NightKey, MachineCost]]:
        """The machine costs of the pipeline's nights (not of PR runs, which have no night row),
        oldest night first."""
        c, n = CostTable, NightTable
        query = (
            select(c)
            .join(n, (n.pipeline == c.pipeline) & (n.night == c.night) & (n.target == c.target))
            .where(c.pipeline == pipeline)
            .order_by(c.night, c.target, c.stage)
        )
        rows = self._read(lambda s: s.scalars(query).all())
        return [(NightKey(r.pipeline, r.night, r.target), machine_cost(r)) for r in rows]

    def pipeline_alerts(self, pipeline: str) -> list[tuple[NightKey, SentAlert]]:
        """Every alert sent about the pipeline, newest first."""
        t = AlertTable
        query = select(t).where(t.pipeline == pipeline).order_by(t.sent_at.desc(), t.id.desc())
        rows = self._read(lambda s: s.scalars(query).all())
        return [
            (NightKey(r.pipeline, r.night, r.target), SentAlert(*(getattr(r, c) for c in SENT_ALERT_COLUMNS)))
            for r in rows
        ]

    def benchmark_names(self, pipeline: str) -> list[BenchmarkName]:
        """The benchmarks the pipeline records, by target and name, as their newest night reads."""
        t = BenchmarkTable
        query = (
            select(t.target, t.name, t.unit, t.lower_is_better)
            .where(t.pipeline == pipeline)
            .order_by(t.target, t.name, t.night.desc())
        )
        seen: dict[tuple[str, str], BenchmarkName] = {}
        for r in self._read(lambda s: s.execute(query).all()):
            seen.setdefault(
                (r.target, r.name), BenchmarkName(r.target, r.name, r.unit, bool(r.lower_is_better))
            )
        return list(seen.values())

    def failed_tests(
        self, pipeline: str, targets: Sequence[str], nights: Sequence[dt.date]
    ) -> list[FailedTest]:
        """The tests that failed or errored on one of `nights` on one of `targets`, most failures
        first. One query: each night and outcome an index range, and the database (window
        functions over the test's hashed key, never its text columns, which would sort on disk)
        keeps one row a test, its newest failure, with how many nights it failed; a year of
        120,000-case nights sends thousands of rows, not every failure of the window."""
        t = TestCaseTable
        test = (t.suite, t.test_key)
        failures = (
            select(
                t.id,
                func.row_number().over(partition_by=test, order_by=(t.night.desc(), t.id)).label("newest"),
                func.dense_rank().over(partition_by=test, order_by=t.night).label("nights_failed"),
            )
            .where(
                t.pipeline == pipeline,
                t.target.in_(list(targets)),
                t.night.in_(list(nights)),
                t.outcome.in_(FAILED_OUTCOMES),
            )
            .subquery()
        )
        query = (
            select(t.suite, t.classname, t.name, t.night, t.message, failures.c.nights_failed)
            .join(failures, failures.c.id == t.id)
            .where(failures.c.newest == 1)
        )
        found: dict[tuple[str, str], FailedTest] = {}
        for r in self._read(_rows_of(query)):
            test_id = node_id_of(r.classname, r.name)
            seen = found.get((r.suite, test_id))
            if seen is None or (r.nights_failed, r.night) > (seen.count, seen.last):
                found[(r.suite, test_id)] = FailedTest(r.suite, test_id, r.nights_failed, r.night, r.message)
        return sorted(found.values(), key=lambda f: (-f.count, f.suite, f.test_id))

    def suite_durations(
        self, pipeline: str, target: str, suite: str, *, nights: int
    ) -> tuple[dict[str, float], list[dt.date]]:
        """Each test's mean seconds on the suite's newest `nights` nights with results (tests that
        ran: passed, failed or errored), by node id; with the nights read, newest first."""
        t = TestCaseTable
        of_suite = (t.pipeline == pipeline, t.target == target, t.suite == suite)
        recent = select(t.night).where(*of_suite).distinct().order_by(t.night.desc()).limit(nights)
        read = [r.night for r in self._read(_rows_of(recent))]
        query = (
            select(t.classname, t.name, func.avg(t.duration_s).label("seconds"))
            .where(*of_suite, t.night.in_(read), t.outcome.in_((*FAILED_OUTCOMES, "passed")))
            .group_by(t.classname, t.name)
        )
        found = {node_id_of(r.classname, r.name): float(r.seconds) for r in self._read(_rows_of(query))}
        return found, read

    def test_histories_of(
        self, pipeline: str, tests: Sequence[tuple[str, str]], *, since: dt.date
    ) -> dict[tuple[str, str], list[TestRun]]:
        """Each (suite, node id)'s runs from `since` on, newest first, every target: one query a
        suite through the test identity index, its columns (not ORM objects) read."""
        t = TestCaseTable
        wanted: dict[str, dict[int, set[str]]] = {}
        for suite, test_id in tests:
            wanted.setdefault(suite, {}).setdefault(node_key(test_id), set()).add(test_id)
        found: dict[tuple[str, str], list[TestRun]] = {test: [] for test in tests}
        columns = (
            t.night,
            t.target,
            t.suite,
            t.classname,
            t.name,
            t.outcome,
            t.duration_s,
            t.message,
            t.attempts,
        )
        for suite, keys in wanted.items():
            query = (
                select(*columns, t.test_key)
                .where(t.pipeline == pipeline, t.suite == suite, t.test_key.in_(list(keys)), t.night >= since)
                .order_by(t.night.desc(), t.target, t.id)
            )
            for r in self._read(_rows_of(query)):
                test_id = node_id_of(r.classname, r.name)
                if test_id in keys.get(r.test_key or 0, ()):  # not another id of the same hash
                    case = TestCase(r.classname, r.name, r.outcome, r.duration_s, r.message, r.attempts)
                    found[(suite, test_id)].append(TestRun(r.night, r.target, r.suite, case))
        return found


def _rows_of(query: Executable) -> Callable[[Session], Sequence[Row[Any]]]:
    """A read of every row `query` selects (a function per query: a lambda in a loop sees the last)."""
    return lambda session: session.execute(query).all()
