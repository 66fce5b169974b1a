"""The store's writes: each replaces the rows of one key (a night, a stage, a suite, a night's
benchmarks) in one transaction, delete then insert. A re-run or backfill therefore never duplicates
rows, and a failed write leaves the previous rows; a retry (``access.py``) is safe. A new run of a
night replaces its rows stage by stage, each when that stage has its own outcome: until then the
earlier run's stay, and every stage outcome of every run is kept in ``stage_runs``.

Test cases are written with Core ``insert()`` executemany in batches (PyMySQL sends each batch as
multi-row INSERTs), not through the ORM, whose bulk insert splits a suite wherever a row's NULL
columns differ from the previous row's. The night's lease (``take_lease``) is a compare and swap on
its row, for runs that start the same night at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select, update
from sqlalchemy.orm import Session

from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.results import BenchmarkResult, CheckOutcome, NightKey, TestCase, TestReport
from nightly_assets.warehouse import evidence, tallies
from nightly_assets.warehouse.access import DatabaseAccess, key_columns, utc_now
from nightly_assets.warehouse.history import batches, is_key
from nightly_assets.warehouse.rows import (
    COST_COLUMNS,
    COUNT_COLUMNS,
    CULPRIT_COLUMNS,
    REGRESSION_COLUMNS,
    SENT_ALERT_COLUMNS,
    VERDICT_COLUMNS,
    Culprit,
    MachineCost,
    Regression,
    SentAlert,
    TestVerdict,
    device_facts_row,
)
from nightly_assets.warehouse.tables import (
    AlertTable,
    BenchmarkTable,
    CheckTable,
    CostTable,
    CulpritTable,
    DeviceFactsTable,
    LeaseTable,
    NightTable,
    RegressionTable,
    StageRunTable,
    StageTable,
    SuiteTable,
    TestCaseTable,
    TestTallyTable,
    TestVerdictTable,
    node_key,
)

WRITE_BATCH = 10_000  # test-case rows per executemany: bounds the memory a large suite takes (a few MB)


class WarehouseWrites(DatabaseAccess):
    """Every write of the store; ``store.Warehouse`` has them with the reads."""

    def record_night(self, key: NightKey, *, run_id: str, status: str, pins: Mapping[str, str]) -> None:
        row = {
            **key_columns(key),
            "run_id": run_id,
            "status": status,
            "pins": json.dumps(dict(pins), sort_keys=True),
            "updated_at": utc_now(),
            "detail": None,
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
        follows: str = "",
    ) -> None:
        """The stage's latest outcome (or `running`); an outcome (not `running`) is also added to
        the night's record of its runs. `follows`: the run a follow-up run writes it for."""
        row = {
            **key_columns(key),
            "stage": stage,
            "status": status,
            "runner": runner,
            "duration_s": duration_s,
            "run_id": run_id,
            "artefact": artefact,
            "detail": detail,
        }
        where = [*is_key(StageTable, key), StageTable.stage == stage]

        def write(session: Session) -> None:
            session.execute(delete(StageTable).where(*where))
            session.execute(insert(StageTable), [row])
            if status != "running":
                history = {**row, "follows": follows, "recorded_at": utc_now()}
                session.execute(insert(StageRunTable), [history])

        self._write(write)

    def move_stage_artefact(self, key: NightKey, stage: str, run_id: str, artefact: str) -> None:
        """The run's outcome of the stage keeps its evidence at `artefact` now (its folder moved
        under ``.runs/`` when a later run of the stage started)."""
        r = StageRunTable
        self._changes(
            update(r).where(*is_key(r, key), r.stage == stage, r.run_id == run_id).values(artefact=artefact)
        )

    def end_stages(self, key: NightKey, *, run_id: str, status: str, why: str = "") -> list[str]:
        """Stages of `run_id` still `running` after that run ended (a crash, a cancel) get `status`
        (and `why` as their detail), in the night's record too. Returns their names."""
        running = [*is_key(StageTable, key), StageTable.status == "running", StageTable.run_id == run_id]
        stuck: list[str] = []

        def write(session: Session) -> None:
            rows = session.scalars(select(StageTable).where(*running)).all()
            stuck[:] = [r.stage for r in rows]
            if not rows:
                return
            session.execute(update(StageTable).where(*running).values(status=status, detail=why or None))
            now = utc_now()
            history = [
                {
                    **key_columns(key),
                    "stage": r.stage,
                    "status": status,
                    "runner": r.runner,
                    "duration_s": r.duration_s,
                    "run_id": run_id,
                    "follows": "",
                    "artefact": r.artefact,
                    "detail": why or None,
                    "recorded_at": now,
                }
                for r in rows
            ]
            session.execute(insert(StageRunTable), history)

        self._write(write)
        return stuck

    def set_night_status(self, key: NightKey, status: str, *, only_if: str, why: str | None = None) -> bool:
        """Set the night's status (and `why`, where no stage says it) when it is `only_if`;
        whether it was."""
        statement = (
            update(NightTable)
            .where(*is_key(NightTable, key), NightTable.status == only_if)
            .values(status=status, updated_at=utc_now(), detail=why)
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
                statement: Any = insert(LeaseTable).values(**key_columns(key), run_id=run_id, taken_at=now)
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

    def record_alert(self, key: NightKey, alert: SentAlert) -> None:
        """Keep an alert sent about the night (never replaced: the night's record of its alerts)."""
        row = {**key_columns(key), **{name: getattr(alert, name) for name in SENT_ALERT_COLUMNS}}
        self._changes(insert(AlertTable).values(**row))

    def record_checks(
        self, key: NightKey, stage: str, checks: Sequence[CheckOutcome], *, run_id: str
    ) -> None:
        """Replace the check rows of (key, stage)."""
        rows = [
            {
                **key_columns(key),
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

    def record_test_report(self, key: NightKey, report: TestReport, *, run_id: str = "") -> None:
        """Replace the suite row and all test-case rows of (key, report.suite) with `run_id`'s."""
        counts = report.counts()
        suite = {
            **key_columns(key),
            "suite": report.suite,
            "run_id": run_id,
            "runner": report.runner,
            **{name: counts[name] for name in COUNT_COLUMNS},
            "duration_s": report.duration_s,
            "collect_only": report.collect_only,
        }
        table = cast(Table, TestCaseTable.__table__)

        def write(session: Session) -> None:
            replaced = evidence.earlier_run(session, key, report.suite)
            for t in (SuiteTable, TestCaseTable, TestTallyTable):
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
                **key_columns(key),
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
        row = {**key_columns(key), "stage": stage, "runner": runner, **device_facts_row(facts)}
        where = [*is_key(DeviceFactsTable, key), DeviceFactsTable.stage == stage]
        self._replace(DeviceFactsTable, where, [row])

    def record_regressions(self, key: NightKey, found: Sequence[Regression]) -> None:
        """Replace the changes confirmed on the key's night (an empty sequence clears them)."""
        rows = [
            {
                **key_columns(key),
                **{name: getattr(r, name) for name in REGRESSION_COLUMNS},
                "commits": json.dumps(r.commits, sort_keys=True),
            }
            for r in found
        ]
        self._replace(RegressionTable, is_key(RegressionTable, key), rows)

    def record_culprits(self, key: NightKey, found: Sequence[Culprit]) -> None:
        """Replace the key's culprit search results."""
        rows = [
            {
                **key_columns(key),
                **{n: getattr(c, n) for n in CULPRIT_COLUMNS},
                "probes": json.dumps(c.probes),
            }
            for c in found
        ]
        self._replace(CulpritTable, is_key(CulpritTable, key), rows)

    def record_cost(self, key: NightKey, cost: MachineCost) -> None:
        """Replace the cost row of (key, cost.stage)."""
        row = {**key_columns(key), **{name: getattr(cost, name) for name in COST_COLUMNS}}
        self._replace(CostTable, [*is_key(CostTable, key), CostTable.stage == cost.stage], [row])

    def forget_costs(self, key: NightKey, stage: str) -> None:
        """Delete the cost rows of (key, stage) and of its machines (`stage/shard-2`): a stage run
        again records its own, whether it runs on one machine or on one per shard."""
        of_stage = (CostTable.stage == stage) | CostTable.stage.startswith(f"{stage}/", autoescape=True)
        self._replace(CostTable, [*is_key(CostTable, key), of_stage], [])

    def record_verdicts(self, key: NightKey, verdicts: Sequence[TestVerdict]) -> None:
        """Replace the key's test verdicts (the tests that were not plainly stable)."""
        rows = [
            {
                **key_columns(key),
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
