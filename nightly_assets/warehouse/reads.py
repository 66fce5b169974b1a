"""The store's reads: each returns the values of ``rows.py`` and ``history.py`` (never a table
row), in one session retried through transient errors (``access.py``). The test-history queries
(``test_history``, ``newly_failing``, ``pass_rates``) are ``history.py``'s, and read through the
test identity indexes of ``tables.py``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import cast

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.results import CheckOutcome, NightKey, Outcome, TestCase
from nightly_assets.warehouse import evidence, history
from nightly_assets.warehouse.access import DatabaseAccess
from nightly_assets.warehouse.evidence import Histories
from nightly_assets.warehouse.history import PassRate, TestRun, is_key
from nightly_assets.warehouse.rows import (
    SENT_ALERT_COLUMNS,
    BenchmarkNight,
    Culprit,
    MachineCost,
    NightOverview,
    NightRow,
    NightRun,
    Regression,
    SentAlert,
    StageOutcome,
    StageRow,
    TestVerdict,
    check_outcome,
    culprit,
    device_facts,
    machine_cost,
    night_row,
    regression,
    stage_row,
    suite_counts,
    test_verdict,
)
from nightly_assets.warehouse.tables import (
    ALL_TABLES,
    AlertTable,
    BenchmarkTable,
    CheckTable,
    CostTable,
    CulpritTable,
    DeviceFactsTable,
    NightTable,
    RegressionTable,
    StageRunTable,
    StageTable,
    SuiteTable,
    TestCaseTable,
    TestVerdictTable,
)


class WarehouseReads(DatabaseAccess):
    """Every read of the store; ``store.Warehouse`` has them with the writes."""

    def stages(self, key: NightKey) -> list[StageRow]:
        """The stages of a night in the order they were (last) recorded."""
        query = select(StageTable).where(*is_key(StageTable, key)).order_by(StageTable.id)
        rows = self._read(lambda s: s.scalars(query).all())
        return [stage_row(r) for r in rows]

    def night_runs(self, key: NightKey) -> list[NightRun]:
        """Every run of the night, newest first, with what each found: its stages' outcomes."""
        r = StageRunTable
        query = select(r).where(*is_key(r, key)).order_by(r.id)
        rows = self._read(lambda s: s.scalars(query).all())
        runs: dict[str, list[StageOutcome]] = {}
        for row in rows:
            runs.setdefault(row.follows or row.run_id, []).append(
                StageOutcome(row.stage, row.status, row.duration_s, row.artefact, row.detail, row.recorded_at)
            )
        newest_first = list(reversed(runs.items()))  # by each run's first outcome
        return [NightRun(run_id, outcomes, i == 0) for i, (run_id, outcomes) in enumerate(newest_first)]

    def alerts(self, key: NightKey, *, run_id: str | None = None) -> list[SentAlert]:
        """The alerts sent about the night (about one run of it), oldest first."""
        t = AlertTable
        query = select(t).where(*is_key(t, key)).order_by(t.id)
        if run_id is not None:
            query = query.where(t.run_id == run_id)
        rows = self._read(lambda s: s.scalars(query).all())
        return [SentAlert(**{name: getattr(r, name) for name in SENT_ALERT_COLUMNS}) for r in rows]

    def suite_runs(self, key: NightKey) -> dict[str, str]:
        """The run whose report each suite of the night holds ("" for rows from before that was
        recorded)."""
        query = select(SuiteTable.suite, SuiteTable.run_id).where(*is_key(SuiteTable, key))
        return {r.suite: r.run_id for r in self._read(lambda s: s.execute(query).all())}

    def suite_counts(self, key: NightKey) -> dict[str, dict[str, int]]:
        query = select(SuiteTable).where(*is_key(SuiteTable, key)).order_by(SuiteTable.suite)
        rows = self._read(lambda s: s.scalars(query).all())
        return {r.suite: suite_counts(r) for r in rows}

    def failed_cases(self, key: NightKey, suite: str) -> list[TestCase]:
        """Failed and errored cases of one suite, in report order."""
        return self.test_cases(key, suite, outcomes=("failed", "error"))

    def test_cases(
        self, key: NightKey, suite: str, *, outcomes: Sequence[str] | None = None
    ) -> list[TestCase]:
        """One suite's cases of the night (of `outcomes` only, where given), in report order."""
        wanted = (TestCaseTable.outcome.in_(tuple(outcomes)),) if outcomes is not None else ()
        query = (
            select(TestCaseTable)
            .where(*is_key(TestCaseTable, key), TestCaseTable.suite == suite, *wanted)
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

    # -- test history (queries in history.py and evidence.py) ------------------------------

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

    def culprits(self, key: NightKey) -> list[Culprit]:
        """The key's culprit search results, in the order searched."""
        query = select(CulpritTable).where(*is_key(CulpritTable, key)).order_by(CulpritTable.id)
        return [culprit(r) for r in self._read(lambda s: s.scalars(query).all())]
