"""The results warehouse: the only code that knows the schema in ``tables.py``.

Every write replaces the rows of one key (a night, a stage, a suite, a night's benchmarks) in one
transaction: delete, then insert. A re-run or backfill therefore never duplicates rows, and a
failed write leaves the previous rows. Works on SQLite and on MySQL/MariaDB (PyMySQL).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import ColumnElement, create_engine, delete, event, func, insert, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from nightly_assets.results import BenchmarkResult, NightKey, Outcome, TestCase, TestReport
from nightly_assets.warehouse.tables import (
    ALL_TABLES,
    Base,
    BenchmarkTable,
    CostTable,
    NightTable,
    StageTable,
    SuiteTable,
    TestCaseTable,
)

T = TypeVar("T")

_MYSQL_RETRY_CODES = frozenset({1205, 1213})  # lock wait timeout, deadlock
_WRITE_ATTEMPTS = 3


class WarehouseError(RuntimeError):
    """The warehouse could not be reached or written; names the URL without its password."""


@dataclass(frozen=True)
class StageRow:
    pipeline: str
    night: dt.date
    target: str
    stage: str
    status: str
    runner: str
    duration_s: float
    run_id: str
    artefact: str | None
    detail: str | None


@dataclass(frozen=True)
class MachineCost:
    """What one stage's rented machine cost: lifetime x hourly price, and how its life ended."""

    stage: str
    machine: str
    machine_type: str
    lifetime_s: float
    hourly_usd: float
    cost_usd: float
    ended: str  # "completed", or why it ended early (preempted, timeout, ...)


@dataclass(frozen=True)
class NightRow:
    pipeline: str
    night: dt.date
    target: str
    run_id: str
    status: str
    pins: dict[str, str]


def safe_url(url: str) -> str:
    """The URL with its password replaced by ``***``, also when SQLAlchemy cannot parse it."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def _password(url: str) -> str | None:
    try:
        return make_url(url).password
    except (ArgumentError, ValueError):
        match = re.search(r"://[^:/@]*:([^@]*)@", url)
        return match.group(1) if match else None


class Warehouse:
    def __init__(self, url: str) -> None:
        self._url = safe_url(url)
        self._secret = _password(url)
        try:
            self._engine = create_engine(url, pool_pre_ping=True, **_engine_options(url))
            if self._engine.dialect.name == "sqlite":
                event.listen(self._engine, "connect", _sqlite_on_connect)
            Base.metadata.create_all(self._engine)
        except (SQLAlchemyError, ImportError, OSError, ValueError) as exc:
            raise self._error("cannot open", exc) from exc
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
            "updated_at": dt.datetime.now(dt.UTC).replace(tzinfo=None),
        }
        self._replace(NightTable, _is_key(NightTable, key), [row])

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
        where = [*_is_key(StageTable, key), StageTable.stage == stage]
        self._replace(StageTable, where, [row])

    def clear_stages(self, key: NightKey, *, keep: str | None = None) -> None:
        """Forget the key's stage rows (but `keep`'s): a new run of the night starts a new table."""
        where = [*_is_key(StageTable, key)]
        if keep is not None:
            where.append(StageTable.stage != keep)
        self._replace(StageTable, where, [])

    def record_test_report(self, key: NightKey, report: TestReport) -> None:
        """Replace the suite row and all test-case rows of (key, report.suite)."""
        counts = report.counts()
        suite = {
            **_key(key),
            "suite": report.suite,
            "runner": report.runner,
            **{name: counts[name] for name in _COUNT_COLUMNS},
            "duration_s": report.duration_s,
            "collect_only": report.collect_only,
        }
        cases = [
            {
                **_key(key),
                "suite": report.suite,
                "classname": c.classname,
                "name": c.name,
                "outcome": c.outcome,
                "duration_s": c.duration_s,
                "message": c.message,
                "attempts": c.attempts,
            }
            for c in report.cases
        ]

        def write(session: Session) -> None:
            for table in (SuiteTable, TestCaseTable):
                session.execute(delete(table).where(*_is_key(table, key), table.suite == report.suite))
            session.execute(insert(SuiteTable), [suite])
            if cases:
                session.execute(insert(TestCaseTable), cases)

        self._write(write)

    def record_benchmarks(self, key: NightKey, results: Sequence[BenchmarkResult]) -> None:
        """Replace all benchmark rows of the key (an empty sequence clears them)."""
        rows = [
            {
                **_key(key),
                "name": r.name,
                "value": r.value,
                "unit": r.unit,
                "lower_is_better": r.lower_is_better,
            }
            for r in results
        ]
        self._replace(BenchmarkTable, _is_key(BenchmarkTable, key), rows)

    def record_cost(self, key: NightKey, cost: MachineCost) -> None:
        """Replace the cost row of (key, cost.stage)."""
        row = {**_key(key), **{name: getattr(cost, name) for name in _COST_COLUMNS}}
        self._replace(CostTable, [*_is_key(CostTable, key), CostTable.stage == cost.stage], [row])

    # -- reads ----------------------------------------------------------------------------

    def stages(self, key: NightKey) -> list[StageRow]:
        """The stages of a night in the order they were (last) recorded."""
        query = select(StageTable).where(*_is_key(StageTable, key)).order_by(StageTable.id)
        rows = self._read(lambda s: s.scalars(query).all())
        return [
            StageRow(
                pipeline=r.pipeline,
                night=r.night,
                target=r.target,
                stage=r.stage,
                status=r.status,
                runner=r.runner,
                duration_s=r.duration_s,
                run_id=r.run_id,
                artefact=r.artefact,
                detail=r.detail,
            )
            for r in rows
        ]

    def suite_counts(self, key: NightKey) -> dict[str, dict[str, int]]:
        query = select(SuiteTable).where(*_is_key(SuiteTable, key)).order_by(SuiteTable.suite)
        rows = self._read(lambda s: s.scalars(query).all())
        return {r.suite: {name: getattr(r, name) for name in _COUNT_COLUMNS} for r in rows}

    def failed_cases(self, key: NightKey, suite: str) -> list[TestCase]:
        """Failed and errored cases of one suite, in report order."""
        query = (
            select(TestCaseTable)
            .where(
                *_is_key(TestCaseTable, key),
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

    def benchmark_history(
        self, pipeline: str, target: str, name: str, *, before: dt.date, limit: int
    ) -> list[tuple[dt.date, float]]:
        """(night, value) of up to ``limit`` nights strictly before ``before``, newest first."""
        query = (
            select(BenchmarkTable.night, BenchmarkTable.value)
            .where(
                BenchmarkTable.pipeline == pipeline,
                BenchmarkTable.target == target,
                BenchmarkTable.name == name,
                BenchmarkTable.night < before,
            )
            .order_by(BenchmarkTable.night.desc())
            .limit(limit)
        )
        rows = self._read(lambda s: s.execute(query).all())
        return [(r.night, r.value) for r in rows]

    def costs(self, key: NightKey) -> list[MachineCost]:
        """The night's machine costs, by stage."""
        query = select(CostTable).where(*_is_key(CostTable, key)).order_by(CostTable.stage)
        rows = self._read(lambda s: s.scalars(query).all())
        return [MachineCost(**{name: getattr(r, name) for name in _COST_COLUMNS}) for r in rows]

    def nights(self, pipeline: str | None = None) -> list[NightRow]:
        """All recorded nights (of one pipeline), by pipeline, night, target."""
        t = NightTable
        query = select(t).order_by(t.pipeline, t.night, t.target)
        if pipeline is not None:
            query = query.where(t.pipeline == pipeline)
        rows = self._read(lambda s: s.scalars(query).all())
        return [_night_row(r) for r in rows]

    def night(self, key: NightKey) -> NightRow | None:
        """The key's night, or None if no run of it has recorded one."""
        query = select(NightTable).where(*_is_key(NightTable, key))
        row = self._read(lambda s: s.scalars(query).one_or_none())
        return None if row is None else _night_row(row)

    def row_counts(self, key: NightKey) -> dict[str, int]:
        """Rows per table for the key."""

        def count(session: Session) -> dict[str, int]:
            return {
                table.__tablename__: session.scalar(
                    select(func.count()).select_from(table).where(*_is_key(table, key))
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
        """Run ``fn`` in one transaction; retry it on a MySQL deadlock or lock-wait timeout."""
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                with self._sessions.begin() as session:
                    fn(session)
                return
            except DBAPIError as exc:
                if attempt < _WRITE_ATTEMPTS and _is_retryable(exc):
                    time.sleep(0.2 * attempt)
                    continue
                raise self._error("cannot write to", exc) from exc
            except SQLAlchemyError as exc:
                raise self._error("cannot write to", exc) from exc

    def _read(self, fn: Callable[[Session], T]) -> T:
        try:
            with self._sessions() as session:
                return fn(session)
        except SQLAlchemyError as exc:
            raise self._error("cannot read from", exc) from exc

    def _error(self, what: str, exc: BaseException) -> WarehouseError:
        cause = f"{type(exc).__name__}: {exc}"
        if self._secret:
            cause = cause.replace(self._secret, "***")
        return WarehouseError(f"{what} warehouse {self._url}: {cause}")


_COUNT_COLUMNS = ("total", "passed", "failed", "error", "skipped", "collected")
_COST_COLUMNS = tuple(MachineCost.__dataclass_fields__)


def _key(key: NightKey) -> dict[str, Any]:
    return {"pipeline": key.pipeline, "night": key.night, "target": key.target}


def _is_key(table: type[Any], key: NightKey) -> list[ColumnElement[bool]]:
    return [table.pipeline == key.pipeline, table.night == key.night, table.target == key.target]


def _is_retryable(exc: DBAPIError) -> bool:
    args: tuple[Any, ...] = getattr(exc.orig, "args", ())
    return bool(args) and args[0] in _MYSQL_RETRY_CODES


def _engine_options(url: str) -> dict[str, Any]:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        # Several run workers may write one file: wait for the lock instead of failing at once.
        return {"connect_args": {"timeout": 60}}
    if backend in ("mysql", "mariadb"):
        # No gap locks: concurrent delete+insert of different keys cannot deadlock each other.
        return {"isolation_level": "READ COMMITTED", "pool_recycle": 3600}
    return {}


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer
    finally:
        cursor.close()


def _night_row(row: NightTable) -> NightRow:
    return NightRow(row.pipeline, row.night, row.target, row.run_id, row.status, json.loads(row.pins))
