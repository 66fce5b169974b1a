"""Reads over a pipeline's recorded nights in one query each (not night by night): what the results
site (``nightly_assets/site``) draws. Each returns the values of ``rows.py`` keyed by night."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import select

from nightly_assets.results import NightKey, node_id_of
from nightly_assets.warehouse.access import DatabaseAccess
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
    nights: tuple[dt.date, ...]  # newest first
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

    def failed_tests(self, pipeline: str, *, since: dt.date) -> list[FailedTest]:
        """The tests that failed or errored on a night from `since` on, most failures first."""
        t = TestCaseTable
        query = (
            select(t.suite, t.classname, t.name, t.night, t.message)
            .where(t.pipeline == pipeline, t.night >= since, t.outcome.in_(FAILED_OUTCOMES))
            .order_by(t.night.desc(), t.id)
        )
        nights: dict[tuple[str, str], list[dt.date]] = {}
        messages: dict[tuple[str, str], str | None] = {}
        for r in self._read(lambda s: s.execute(query).all()):
            key = (r.suite, node_id_of(r.classname, r.name))
            if r.night not in nights.setdefault(key, []):
                nights[key].append(r.night)
            messages.setdefault(key, r.message)
        found = [FailedTest(s, i, tuple(n), messages[(s, i)]) for (s, i), n in nights.items()]
        return sorted(found, key=lambda f: (-len(f.nights), f.suite, f.test_id))
