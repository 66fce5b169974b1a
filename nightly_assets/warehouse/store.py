"""The results warehouse: the ``Warehouse`` class, the only code that reads and writes the tables
of ``tables.py``. Its reads return the values of ``rows.py`` and ``history.py``; opening the
database, the schema upgrade at start and which errors are transient are in ``connection.py``.

Every write replaces the rows of one key (a night, a stage, a suite, a night's benchmarks) in one
transaction: delete, then insert. A re-run or backfill therefore never duplicates rows, and a
failed write leaves the previous rows. Every read and write retries transient errors. Works on
SQLite and on MySQL/MariaDB (PyMySQL).

Test cases are written with Core ``insert()`` executemany in batches (PyMySQL sends each batch as
multi-row INSERTs), not through the ORM, whose bulk insert splits a suite wherever a row's NULL
columns differ from the previous row's. The query API (``test_history``, ``newly_failing``,
``pass_rates``) reads through the test identity indexes of ``tables.py``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from sqlalchemy import ColumnElement, Table, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.results import BenchmarkResult, CheckOutcome, NightKey, Outcome, TestCase, TestReport
from nightly_assets.warehouse import connection, evidence, history, tallies
from nightly_assets.warehouse.defaults import RETRY_S
from nightly_assets.warehouse.evidence import Histories
from nightly_assets.warehouse.history import PassRate, TestRun, batches, is_key
from nightly_assets.warehouse.rows import (
    COST_COLUMNS,
    COUNT_COLUMNS,
    CULPRIT_COLUMNS,
    REGRESSION_COLUMNS,
    VERDICT_COLUMNS,
    BenchmarkNight,
    Culprit,
    MachineCost,
    NightOverview,
    NightRow,
    Regression,
    StageRow,
    TestVerdict,
    check_outcome,
    culprit,
    device_facts,
    device_facts_row,
    machine_cost,
    night_row,
    regression,
    stage_row,
    suite_counts,
    test_verdict,
)
from nightly_assets.warehouse.tables import (
    ALL_TABLES,
    BenchmarkTable,
    CheckTable,
    CostTable,
    CulpritTable,
    DeviceFactsTable,
    EarlierRunTable,
    LeaseTable,
    NightTable,
    RegressionTable,
    StageTable,
    SuiteTable,
    TestCaseTable,
    TestEvidenceTable,
    TestTallyTable,
    TestVerdictTable,
    node_key,
)

T = TypeVar("T")
# What one run of a night records: a new run of the night (its sources stage) clears them.
NIGHT_RUN_TABLES: tuple[type[Any], ...] = (
    StageTable,
    CheckTable,
    SuiteTable,
    TestCaseTable,
    TestTallyTable,
    TestVerdictTable,
    BenchmarkTable,
    DeviceFactsTable,
    CostTable,
    RegressionTable,
    CulpritTable,
)
_log = logging.getLogger(__name__)

WRITE_BATCH = 10_000  # test-case rows per executemany: bounds the memory a large suite takes (a few MB)
_BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 4.0)  # then 5 s between attempts


class WarehouseError(RuntimeError):
    """The warehouse could not be reached or written; names the URL without its password."""


def utc_now() -> dt.datetime:
    """Now in UTC without tzinfo, as the tables store times (MySQL DATETIME has no zone)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Warehouse:
    """The results warehouse. Every read and write retries transient errors (a lost connection, a
    restarting server, a deadlock) with backoff for up to `retry_s`, so a database restart during a
    night delays its stages instead of failing them."""

    def __init__(self, url: str, *, retry_s: float = RETRY_S) -> None:
        self._url = connection.safe_url(url)
        self._secret = connection.password(url)
        self._retry_s = retry_s
        try:
            self._engine = connection.open_engine(url)
        except (SQLAlchemyError, ImportError, OSError, ValueError) as exc:
            raise self._error("cannot open", exc) from exc
        self._retrying("cannot open", lambda: connection.ensure_schema(self._engine, self._url))
        self._sessions = sessionmaker(self._engine)

    def __repr__(self) -> str:
        return f"Warehouse({self._url!r})"

    def dispose(self) -> None:
        self._engine.dispose()

    # -- writes ---------------------------------------------------------------------------

    def record_night(self, key: NightKey, *, run_id: str, status: str, pins: Mapping[str, str]) -> None:
        row = {
            **_key(key),
            "run_id": run_id,
            "status": status,
            "pins": json.dumps(dict(pins), sort_keys=True),
            "updated_at": utc_now(),
        }
        self._replace(NightTable, is_key(NightTable, key), [row])

    def record_stage(
        self,
        key: NightKey,
        stage: str,
        *,
        status: str,
        runner: str,
        duration_s: float,
        run_id: str,
        artefact: str | None = None,
        detail: str | None = None,
    ) -> None:
        row = {
            **_key(key),
            "stage": stage,
            "status": status,
            "runner": runner,
            "duration_s": duration_s,
            "run_id": run_id,
            "artefact": artefact,
            "detail": detail,
        }
        where = [*is_key(StageTable, key), StageTable.stage == stage]
        self._replace(StageTable, where, [row])

    def clear_night_run(self, key: NightKey, *, keep: str | None = None) -> None:
        """A new run of the night starts (its sources stage, `keep`): forget what earlier runs
        recorded of it (stages, checks, suites, test cases, verdicts, benchmarks, devices, costs,
        regressions, culprits), so that the night's rows come from one run however far the new
        one gets. Kept: the night row (its pins), `keep`'s rows, the `rerun` evidence, and each
        suite's outcomes for the new run's report to compare with (``EarlierRunTable``)."""

        def write(session: Session) -> None:
            for suite in session.scalars(select(SuiteTable.suite).where(*is_key(SuiteTable, key))).all():
                _stash_earlier_run(session, key, suite, evidence.earlier_run(session, key, suite))
            for table in NIGHT_RUN_TABLES:
                where = [*is_key(table, key)]
                if keep is not None and hasattr(table, "stage"):
                    where.append(table.stage != keep)
                session.execute(delete(table).where(*where))
            e = TestEvidenceTable  # a retry's evidence goes with its suite's rows
            session.execute(delete(e).where(*is_key(e, key), e.kind == "retry"))

        self._write(write)

    def end_stages(self, key: NightKey, *, run_id: str, status: str) -> list[str]:
        """Stages of `run_id` still `running` after that run ended (a crash, a cancel) get `status`.
        Returns their names."""
        running = [*is_key(StageTable, key), StageTable.status == "running", StageTable.run_id == run_id]
        stuck: list[str] = []

        def write(session: Session) -> None:
            stuck[:] = session.scalars(select(StageTable.stage).where(*running)).all()
            if stuck:
                session.execute(update(StageTable).where(*running).values(status=status))

        self._write(write)
        return stuck

    def set_night_status(self, key: NightKey, status: str, *, only_if: str) -> bool:
        """Set the night's status when it is `only_if`; whether it was."""
        statement = (
            update(NightTable)
            .where(*is_key(NightTable, key), NightTable.status == only_if)
            .values(status=status, updated_at=utc_now())
        )
        return bool(self._changes(statement))

    def take_lease(self, key: NightKey, run_id: str, is_over: Callable[[str, float], bool]) -> str | None:
        """Take the night's lease for `run_id`. Returns None when this run holds it now, else the
        run that does. A holder for which `is_over(holder, seconds since it took or renewed the
        lease)` is true loses it (compare and swap)."""
        where = is_key(LeaseTable, key)
        query = select(LeaseTable.run_id, LeaseTable.taken_at).where(*where)
        for _ in range(3):  # another run may take or free it between our read and our write
            now = utc_now()
            lease = self._read(lambda s: s.execute(query).first())
            holder = lease.run_id if lease else None
            if holder == run_id:  # each stage of the run renews it: its age says the run is alive
                self._changes(
                    update(LeaseTable).where(*where, LeaseTable.run_id == run_id).values(taken_at=now)
                )
                return None
            if lease is not None and not is_over(lease.run_id, (now - lease.taken_at).total_seconds()):
                return str(holder)
            if holder is None:
                statement: Any = insert(LeaseTable).values(**_key(key), run_id=run_id, taken_at=now)
            else:
                statement = (
                    update(LeaseTable)
                    .where(*where, LeaseTable.run_id == holder)
                    .values(run_id=run_id, taken_at=now)
                )
            if self._changes(statement):
                return None
        holder = self._read(lambda s: s.scalar(select(LeaseTable.run_id).where(*where)))
        return None if holder == run_id else str(holder)

    def release_leases(self, run_id: str) -> None:
        """The run has ended: the nights it held are free."""
        self._changes(delete(LeaseTable).where(LeaseTable.run_id == run_id))

    def record_checks(
        self, key: NightKey, stage: str, checks: Sequence[CheckOutcome], *, run_id: str
    ) -> None:
        """Replace the check rows of (key, stage)."""
        rows = [
            {
                **_key(key),
                "stage": stage,
                "name": c.name,
                "severity": c.severity,
                "passed": c.passed,
                "description": c.description,
                "run_id": run_id,
            }
            for c in checks
        ]
        self._replace(CheckTable, [*is_key(CheckTable, key), CheckTable.stage == stage], rows)

    def record_test_report(self, key: NightKey, report: TestReport) -> None:
        """Replace the suite row and all test-case rows of (key, report.suite)."""
        counts = report.counts()
        suite = {
            **_key(key),
            "suite": report.suite,
            "runner": report.runner,
            **{name: counts[name] for name in COUNT_COLUMNS},
            "duration_s": report.duration_s,
            "collect_only": report.collect_only,
        }
        table = cast(Table, TestCaseTable.__table__)

        def write(session: Session) -> None:
            replaced = evidence.earlier_run(session, key, report.suite)
            s = SuiteTable
            # No rows: a new run's sources stage cleared the earlier run's, and kept its outcomes.
            if session.scalar(select(s.id).where(*is_key(s, key), s.suite == report.suite)) is None:
                replaced = _earlier_run_stash(session, key, report.suite)
            for t in (SuiteTable, TestCaseTable, TestTallyTable, EarlierRunTable):
                session.execute(delete(t).where(*is_key(t, key), t.suite == report.suite))
            session.execute(insert(SuiteTable), [suite])
            tally = tallies.SuiteTally(key, report.suite)
            # Core, not ORM: one executemany per batch, however the rows' NULLs alternate.
            for rows in batches(case_rows(key, report.suite, report.cases), WRITE_BATCH):
                session.execute(insert(table), rows)
                tally.add(rows)
            session.execute(insert(TestTallyTable), [tally.row()])
            evidence.record(session, key, report, replaced)

        self._write(write)

    def record_benchmarks(
        self, key: NightKey, results: Sequence[BenchmarkResult], *, devices: DeviceFacts | None = None
    ) -> None:
        """Replace all benchmark rows of the key (an empty sequence clears them). `devices`: what
        they ran on, whose configuration (``DeviceFacts.key()``) keys their baseline; without
        it, the empty configuration (as every row from before devices were recorded)."""
        config_key = devices.key() if devices is not None else ""
        rows = [
            {
                **_key(key),
                "name": r.name,
                "value": r.value,
                "unit": r.unit,
                "lower_is_better": r.lower_is_better,
                "config_key": config_key,
            }
            for r in results
        ]
        self._replace(BenchmarkTable, is_key(BenchmarkTable, key), rows)

    def record_device_facts(self, key: NightKey, stage: str, runner: str, facts: DeviceFacts) -> None:
        """Replace what (key, stage) ran on."""
        row = {**_key(key), "stage": stage, "runner": runner, **device_facts_row(facts)}
        where = [*is_key(DeviceFactsTable, key), DeviceFactsTable.stage == stage]
        self._replace(DeviceFactsTable, where, [row])

    def record_regressions(self, key: NightKey, found: Sequence[Regression]) -> None:
        """Replace the changes confirmed on the key's night (an empty sequence clears them)."""
        rows = [
            {
                **_key(key),
                **{name: getattr(r, name) for name in REGRESSION_COLUMNS},
                "commits": json.dumps(r.commits, sort_keys=True),
            }
            for r in found
        ]
        self._replace(RegressionTable, is_key(RegressionTable, key), rows)

    def record_culprits(self, key: NightKey, found: Sequence[Culprit]) -> None:
        """Replace the key's culprit search results."""
        rows = [
            {**_key(key), **{n: getattr(c, n) for n in CULPRIT_COLUMNS}, "probes": json.dumps(c.probes)}
            for c in found
        ]
        self._replace(CulpritTable, is_key(CulpritTable, key), rows)

    def culprits(self, key: NightKey) -> list[Culprit]:
        """The key's culprit search results, in the order searched."""
        query = select(CulpritTable).where(*is_key(CulpritTable, key)).order_by(CulpritTable.id)
        return [culprit(r) for r in self._read(lambda s: s.scalars(query).all())]

    def record_cost(self, key: NightKey, cost: MachineCost) -> None:
        """Replace the cost row of (key, cost.stage)."""
        row = {**_key(key), **{name: getattr(cost, name) for name in COST_COLUMNS}}
        self._replace(CostTable, [*is_key(CostTable, key), CostTable.stage == cost.stage], [row])

    # -- reads ----------------------------------------------------------------------------

    def stages(self, key: NightKey) -> list[StageRow]:
        """The stages of a night in the order they were (last) recorded."""
        query = select(StageTable).where(*is_key(StageTable, key)).order_by(StageTable.id)
        rows = self._read(lambda s: s.scalars(query).all())
        return [stage_row(r) for r in rows]

    def suite_counts(self, key: NightKey) -> dict[str, dict[str, int]]:
        query = select(SuiteTable).where(*is_key(SuiteTable, key)).order_by(SuiteTable.suite)
        rows = self._read(lambda s: s.scalars(query).all())
        return {r.suite: suite_counts(r) for r in rows}

    def failed_cases(self, key: NightKey, suite: str) -> list[TestCase]:
        """Failed and errored cases of one suite, in report order."""
        query = (
            select(TestCaseTable)
            .where(
                *is_key(TestCaseTable, key),
                TestCaseTable.suite == suite,
                TestCaseTable.outcome.in_(("failed", "error")),
            )
            .order_by(TestCaseTable.id)
        )
        rows = self._read(lambda s: s.scalars(query).all())
        return [
            TestCase(
                classname=r.classname,
                name=r.name,
                outcome=cast(Outcome, r.outcome),
                duration_s=r.duration_s,
                message=r.message,
                attempts=r.attempts,
            )
            for r in rows
        ]

    def previous_suite_total(self, key: NightKey, suite: str) -> tuple[dt.date, int] | None:
        """(night, total) of the newest earlier night of this suite that ran (not collect-only)."""
        query = (
            select(SuiteTable.night, SuiteTable.total)
            .where(
                SuiteTable.pipeline == key.pipeline,
                SuiteTable.target == key.target,
                SuiteTable.suite == suite,
                SuiteTable.night < key.night,
                SuiteTable.collect_only.is_(False),
            )
            .order_by(SuiteTable.night.desc())
            .limit(1)
        )
        row = self._read(lambda s: s.execute(query).first())
        return (row.night, row.total) if row else None

    def benchmark_series(
        self,
        pipeline: str,
        target: str,
        name: str,
        *,
        before: dt.date,
        limit: int,
        config_key: str | None = None,
    ) -> list[tuple[dt.date, float, dict[str, str]]]:
        """(night, value, the night's pinned commits) of up to ``limit`` nights strictly before
        ``before``, oldest first, of one device configuration when `config_key` is given: what
        the change-point detector replays. ``benchmark_nights`` adds each night's configuration."""
        nights = self.benchmark_nights(
            pipeline, target, name, before=before, limit=limit, config_key=config_key
        )
        return [(n.night, n.value, n.pins) for n in nights]

    def benchmark_nights(
        self,
        pipeline: str,
        target: str,
        name: str,
        *,
        before: dt.date,
        limit: int,
        config_key: str | None = None,
    ) -> list[BenchmarkNight]:
        """Up to ``limit`` nights of the benchmark strictly before ``before``, oldest first, with
        their pins and device configuration; only `config_key`'s nights when it is given."""
        b, n = BenchmarkTable, NightTable
        query = (
            select(b.night, b.value, b.config_key, n.pins)
            .outerjoin(n, (n.pipeline == b.pipeline) & (n.night == b.night) & (n.target == b.target))
            .where(b.pipeline == pipeline, b.target == target, b.name == name, b.night < before)
            .order_by(b.night.desc())
            .limit(limit)
        )
        if config_key is not None:
            query = query.where(b.config_key == config_key)
        rows = self._read(lambda s: s.execute(query).all())
        return [
            BenchmarkNight(r.night, r.value, json.loads(r.pins) if r.pins else {}, r.config_key)
            for r in reversed(rows)
        ]

    def device_facts(self, key: NightKey) -> dict[str, DeviceFacts]:
        """What each stage of the night ran on, by stage (the stages that recorded it)."""
        t = DeviceFactsTable
        query = select(t).where(*is_key(t, key)).order_by(t.stage)
        return {r.stage: device_facts(r) for r in self._read(lambda s: s.scalars(query).all())}

    def device_configuration(self, config_key: str) -> DeviceFacts | None:
        """The devices of a configuration (``DeviceFacts.key()``) as a stage last recorded them,
        on any pipeline (the key is the configuration); None if none did."""
        t = DeviceFactsTable
        query = select(t).where(t.config_key == config_key).order_by(t.night.desc(), t.id.desc()).limit(1)
        row = self._read(lambda s: s.scalars(query).first())
        return None if row is None else device_facts(row)

    def regressions(self, pipeline: str, *, target: str | None = None) -> list[Regression]:
        """The benchmark changes confirmed on the pipeline's nights, newest first."""
        t = RegressionTable
        query = select(t).where(t.pipeline == pipeline).order_by(t.night.desc(), t.target, t.name)
        if target is not None:
            query = query.where(t.target == target)
        return [regression(r) for r in self._read(lambda s: s.scalars(query).all())]

    def checks(self, key: NightKey) -> list[CheckOutcome]:
        """The night's check outcomes, by stage and check name."""
        query = select(CheckTable).where(*is_key(CheckTable, key)).order_by(CheckTable.stage, CheckTable.name)
        rows = self._read(lambda s: s.scalars(query).all())
        return [check_outcome(r) for r in rows]

    def costs(self, key: NightKey) -> list[MachineCost]:
        """The night's machine costs, by stage."""
        query = select(CostTable).where(*is_key(CostTable, key)).order_by(CostTable.stage)
        rows = self._read(lambda s: s.scalars(query).all())
        return [machine_cost(r) for r in rows]

    def nights(self, pipeline: str | None = None, *, status: str | None = None) -> list[NightRow]:
        """All recorded nights (of one pipeline, in one status), by pipeline, night, target."""
        t = NightTable
        query = select(t).order_by(t.pipeline, t.night, t.target)
        if pipeline is not None:
            query = query.where(t.pipeline == pipeline)
        if status is not None:
            query = query.where(t.status == status)
        rows = self._read(lambda s: s.scalars(query).all())
        return [night_row(r) for r in rows]

    def night(self, key: NightKey) -> NightRow | None:
        """The key's night, or None if no run of it has recorded one."""
        query = select(NightTable).where(*is_key(NightTable, key))
        row = self._read(lambda s: s.scalars(query).one_or_none())
        return None if row is None else night_row(row)

    def night_overviews(self, pipelines: Sequence[str]) -> list[NightOverview]:
        """Every night of `pipelines` with its stages, suite counts, checks and devices, newest
        night first (then by target): five queries however many nights there are."""
        if not pipelines:
            return []
        names = list(pipelines)

        def read(session: Session) -> list[NightOverview]:
            nights = session.scalars(select(NightTable).where(NightTable.pipeline.in_(names))).all()
            stages = session.execute(
                select(
                    StageTable.pipeline,
                    StageTable.night,
                    StageTable.target,
                    StageTable.stage,
                    StageTable.status,
                )
                .where(StageTable.pipeline.in_(names))
                .order_by(StageTable.id)
            ).all()
            suites = session.scalars(
                select(SuiteTable).where(SuiteTable.pipeline.in_(names)).order_by(SuiteTable.suite)
            ).all()
            checks = session.scalars(
                select(CheckTable)
                .where(CheckTable.pipeline.in_(names))
                .order_by(CheckTable.stage, CheckTable.name)
            ).all()
            devices = session.scalars(
                select(DeviceFactsTable)
                .where(DeviceFactsTable.pipeline.in_(names))
                .order_by(DeviceFactsTable.stage)
            ).all()
            by_key: dict[tuple[str, dt.date, str], NightOverview] = {
                (n.pipeline, n.night, n.target): NightOverview(night_row(n), {}, {}, []) for n in nights
            }
            for st in stages:
                if (found := by_key.get((st.pipeline, st.night, st.target))) is not None:
                    found.stages[st.stage] = st.status
            for su in suites:
                if (found := by_key.get((su.pipeline, su.night, su.target))) is not None:
                    found.suites[su.suite] = suite_counts(su)
            for c in checks:
                if (found := by_key.get((c.pipeline, c.night, c.target))) is not None:
                    found.checks.append(check_outcome(c))
            for d in devices:
                if (found := by_key.get((d.pipeline, d.night, d.target))) is not None:
                    found.devices[d.stage] = device_facts(d)
            order = {name: i for i, name in enumerate(names)}
            return sorted(
                by_key.values(),
                key=lambda o: (order[o.night.pipeline], -o.night.night.toordinal(), o.night.target),
            )

        return self._read(read)

    # -- test history (queries in history.py) ---------------------------------------------

    def test_history(self, pipeline: str, suite: str, test_id: str, limit: int = 30) -> list[TestRun]:
        """One test (`TestCase.node_id` in `suite`) on up to `limit` nights, newest first, on
        every target of the pipeline."""
        return self._read(lambda session: history.test_history(session, pipeline, suite, test_id, limit))

    def newly_failing(self, key: NightKey) -> list[TestRun]:
        """Cases that failed or errored on the key's night and passed on the previous night of
        the same pipeline and target (the newest earlier night with test results)."""
        return self._read(lambda session: history.newly_failing(session, key))

    def pass_rates(
        self,
        pipeline: str,
        target: str,
        nights: int,
        *,
        until: dt.date | None = None,
        below: float | None = 1.0,
    ) -> list[PassRate]:
        """Per test, how often it passed over the last `nights` nights with test results (see
        history.pass_rates), lowest rate first."""
        return self._read(
            lambda session: history.pass_rates(session, pipeline, target, nights, until=until, below=below)
        )

    def test_histories(
        self,
        pipeline: str,
        target: str,
        *,
        until: dt.date,
        nights: int,
        suites: Sequence[str] | None = None,
        only: dict[str, list[int]] | None = None,
    ) -> Histories:
        """The tests of the window that may not be stable, with their nights (evidence.histories)."""
        return self._read(
            lambda session: evidence.histories(
                session, pipeline, target, until=until, nights=nights, suites=suites, only=only
            )
        )

    def record_verdicts(self, key: NightKey, verdicts: Sequence[TestVerdict]) -> None:
        """Replace the key's test verdicts (the tests that were not plainly stable)."""
        rows = [
            {
                **_key(key),
                **{name: getattr(v, name) for name in VERDICT_COLUMNS},
                "suspects": json.dumps(v.suspects, sort_keys=True),
            }
            for v in verdicts
        ]

        def write(session: Session) -> None:
            session.execute(delete(TestVerdictTable).where(*is_key(TestVerdictTable, key)))
            for chunk in batches(iter(rows), WRITE_BATCH):
                session.execute(insert(TestVerdictTable), chunk)

        self._write(write)

    def verdicts(self, key: NightKey, *, state: str | None = None) -> list[TestVerdict]:
        """The key's test verdicts (of one state), by suite and test."""
        t = TestVerdictTable
        query = select(t).where(*is_key(t, key)).order_by(t.suite, t.id)
        if state is not None:
            query = query.where(t.state == state)
        return [test_verdict(r) for r in self._read(lambda s: s.scalars(query).all())]

    def row_counts(self, key: NightKey) -> dict[str, int]:
        """Rows per table for the key."""

        def count(session: Session) -> dict[str, int]:
            return {
                table.__tablename__: session.scalar(
                    select(func.count()).select_from(table).where(*is_key(table, key))
                )
                or 0
                for table in ALL_TABLES
            }

        return self._read(count)

    # -- plumbing -------------------------------------------------------------------------

    def _replace(
        self,
        table: type[Any],
        where: Sequence[ColumnElement[bool]],
        rows: list[dict[str, Any]],
    ) -> None:
        def write(session: Session) -> None:
            session.execute(delete(table).where(*where))
            if rows:
                session.execute(insert(table), rows)

        self._write(write)

    def _write(self, fn: Callable[[Session], None]) -> None:
        """Run ``fn`` in one transaction. Every write replaces rows, so a retry is safe."""

        def transaction() -> None:
            with self._sessions.begin() as session:
                fn(session)

        self._retrying("cannot write to", transaction)

    def _changes(self, statement: Any) -> int:
        """Rows an insert, update or delete changed; 0 for an insert that met a unique key."""
        changed = 0

        def write(session: Session) -> None:
            nonlocal changed
            changed = int(getattr(session.execute(statement), "rowcount", 0) or 0)

        try:
            self._write(write)
        except WarehouseError as exc:
            if isinstance(exc.__cause__, IntegrityError):
                return 0
            raise
        return changed

    def _read(self, fn: Callable[[Session], T]) -> T:
        def read() -> T:
            with self._sessions() as session:
                return fn(session)

        return self._retrying("cannot read from", read)

    def _retrying(self, what: str, fn: Callable[[], T]) -> T:
        deadline = time.monotonic() + self._retry_s
        for attempt in itertools.count():
            try:
                return fn()
            except SQLAlchemyError as exc:
                pause = _BACKOFF_S[attempt] if attempt < len(_BACKOFF_S) else 5.0
                if not connection.is_transient(exc) or time.monotonic() + pause > deadline:
                    raise self._error(what, exc) from exc
                _log.warning("warehouse %s: %s; retrying in %.2g s", self._url, self._cause(exc), pause)
                time.sleep(pause)
        raise AssertionError("unreachable")

    def _error(self, what: str, exc: BaseException) -> WarehouseError:
        return WarehouseError(f"{what} warehouse {self._url}: {self._cause(exc)}")

    def _cause(self, exc: BaseException) -> str:
        """One line: the driver's own error, without SQLAlchemy's statement dump and help link,
        and without the URL's password should the driver repeat it."""
        orig = getattr(exc, "orig", None) or exc
        cause = f"{type(orig).__name__}: {' '.join(str(orig).split('(Background on this error')[0].split())}"
        return cause.replace(self._secret, "***") if self._secret else cause


def _stash_earlier_run(session: Session, key: NightKey, suite: str, outcomes: dict[int, bool] | None) -> None:
    """Keep a suite's outcomes as the run being cleared had them (nothing for an infra failure,
    whose disagreements say nothing about a test, as ``evidence.earlier_run`` judges)."""
    t = EarlierRunTable
    session.execute(delete(t).where(*is_key(t, key), t.suite == suite))
    if outcomes is not None:
        text = json.dumps({str(k): int(failed) for k, failed in outcomes.items()}, separators=(",", ":"))
        session.execute(insert(t), [{**_key(key), "suite": suite, "outcomes": text}])


def _earlier_run_stash(session: Session, key: NightKey, suite: str) -> dict[int, bool] | None:
    t = EarlierRunTable
    text = session.scalar(select(t.outcomes).where(*is_key(t, key), t.suite == suite))
    return None if text is None else {int(k): bool(v) for k, v in json.loads(text).items()}


def _key(key: NightKey) -> dict[str, Any]:
    return {"pipeline": key.pipeline, "night": key.night, "target": key.target}


def case_rows(key: NightKey, suite: str, cases: Iterable[TestCase]) -> Iterator[dict[str, Any]]:
    """The test_cases rows of a suite's cases (what record_test_report writes)."""
    pipeline, night, target = key.pipeline, key.night, key.target
    for c in cases:
        # Keys spelled out: half the time of `{**night, ...}` per row.
        yield {
            "pipeline": pipeline,
            "night": night,
            "target": target,
            "suite": suite,
            "classname": c.classname,
            "name": c.name,
            "outcome": c.outcome,
            "duration_s": c.duration_s,
            "message": c.message,
            "attempts": c.attempts,
            "test_key": node_key(c.node_id),
        }
