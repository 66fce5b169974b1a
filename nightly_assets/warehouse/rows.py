"""The values the warehouse's reads return: a night, its stages, its machine costs, a benchmark's
nights, the devices a stage ran on, and a night's overview for `nightly status` (test runs and pass
rates are in ``history.py``). Plain frozen dataclasses, and the functions that turn a row of
``tables.py`` into one (and a ``DeviceFacts`` into a row)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.results import CheckOutcome, NightKey

if TYPE_CHECKING:  # the tables (SQLAlchemy) only type the converters: rows are read without them
    from nightly_assets.warehouse.tables import (
        CheckTable,
        CostTable,
        CulpritTable,
        DeviceFactsTable,
        NightTable,
        RegressionTable,
        StageTable,
        SuiteTable,
        TestVerdictTable,
    )


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
class StageOutcome:
    """One stage's outcome in one run of a night, as the night's record of its runs keeps it."""

    stage: str
    status: str
    duration_s: float
    artefact: str | None  # where its folder is now
    detail: str | None
    recorded_at: dt.datetime  # naive UTC


@dataclass(frozen=True)
class NightRun:
    """One run of a night and what it found: its stages' outcomes in the order they ended (a
    follow-up summary run's are its run's). `current`: the newest run, whose outcomes the night's
    stages show; an earlier run's results stay where the newer did not reach (``SuiteTable``)."""

    run_id: str
    outcomes: list[StageOutcome]
    current: bool = False

    @property
    def started(self) -> dt.datetime:
        first = self.outcomes[0]
        return first.recorded_at - dt.timedelta(seconds=first.duration_s)

    @property
    def status(self) -> str:
        """failure > cancelled > success, over the outcomes of its stages."""
        found = {o.status for o in self.outcomes}
        return next((s for s in ("failure", "cancelled") if s in found), "success")


@dataclass(frozen=True)
class SentAlert:
    """An alert sent about a night (see tables.AlertTable)."""

    run_id: str
    severity: str  # "error" or "warn"
    title: str
    text: str
    destination: str
    sent_at: dt.datetime  # naive UTC


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
    updated_at: dt.datetime | None = None  # naive UTC
    detail: str | None = None  # why it ended so, where no stage says it

    @property
    def key(self) -> NightKey:
        return NightKey(self.pipeline, self.night, self.target)


@dataclass(frozen=True)
class NightOverview:
    """A night with its stages, suite counts, checks and devices, as `nightly status` shows it."""

    night: NightRow
    stages: dict[str, str]  # stage -> status
    suites: dict[str, dict[str, int]]  # suite -> counts, as `suite_counts`
    checks: list[CheckOutcome]
    devices: dict[str, DeviceFacts] = field(default_factory=dict)  # stage -> what it ran on


@dataclass(frozen=True)
class BenchmarkNight:
    """One night of a benchmark: its value, the commits the night pinned, and the device
    configuration it ran on ("" when none was recorded)."""

    night: dt.date
    value: float
    pins: dict[str, str]
    config_key: str


SENT_ALERT_COLUMNS = tuple(SentAlert.__dataclass_fields__)
COUNT_COLUMNS = ("total", "passed", "failed", "error", "skipped", "collected")  # of a suite row
COST_COLUMNS = tuple(MachineCost.__dataclass_fields__)  # the cost row's columns, but the key


def night_row(row: NightTable) -> NightRow:
    return NightRow(
        row.pipeline,
        row.night,
        row.target,
        row.run_id,
        row.status,
        json.loads(row.pins),
        row.updated_at,
        row.detail,
    )


def stage_row(row: StageTable) -> StageRow:
    return StageRow(
        pipeline=row.pipeline,
        night=row.night,
        target=row.target,
        stage=row.stage,
        status=row.status,
        runner=row.runner,
        duration_s=row.duration_s,
        run_id=row.run_id,
        artefact=row.artefact,
        detail=row.detail,
    )


def suite_counts(row: SuiteTable) -> dict[str, int]:
    return {name: getattr(row, name) for name in COUNT_COLUMNS}


def check_outcome(row: CheckTable) -> CheckOutcome:
    return CheckOutcome(row.stage, row.name, cast(Any, row.severity), row.passed, row.description or "")


def machine_cost(row: CostTable) -> MachineCost:
    return MachineCost(**{name: getattr(row, name) for name in COST_COLUMNS})


@dataclass(frozen=True)
class Regression:
    """A benchmark change confirmed on `night` (see tables.RegressionTable)."""

    pipeline: str
    night: dt.date
    target: str
    name: str
    first_bad: dt.date
    last_good: dt.date
    before: float
    after: float
    unit: str
    worse: bool
    commits: dict[str, Any]


def regression(row: RegressionTable) -> Regression:
    return Regression(
        pipeline=row.pipeline,
        night=row.night,
        target=row.target,
        name=row.name,
        first_bad=row.first_bad,
        last_good=row.last_good,
        before=row.before,
        after=row.after,
        unit=row.unit,
        worse=row.worse,
        commits=json.loads(row.commits),
    )


REGRESSION_COLUMNS = ("name", "first_bad", "last_good", "before", "after", "unit", "worse")


@dataclass(frozen=True)
class TestVerdict:
    """One test's verdict over the window ending on a night (see tables.TestVerdictTable)."""

    __test__ = False
    suite: str
    test_key: int
    test_id: str
    state: str  # "flaky", "broken" or "insufficient"
    reason: str
    pass_rate: float | None
    quarantined: bool
    new_failure: bool  # broken tonight and not the night before: alerted and searched once
    first_bad: dt.date | None
    last_good: dt.date | None
    suspects: dict[str, Any]  # repo -> {"good", "bad", "commits": [{"sha", "author", "subject"}]}


VERDICT_COLUMNS = (
    "suite",
    "test_key",
    "test_id",
    "state",
    "reason",
    "pass_rate",
    "quarantined",
    "new_failure",
    "first_bad",
    "last_good",
)


def test_verdict(row: TestVerdictTable) -> TestVerdict:
    return TestVerdict(
        **{name: getattr(row, name) for name in VERDICT_COLUMNS}, suspects=json.loads(row.suspects)
    )


@dataclass(frozen=True)
class Culprit:
    """What a culprit search of a night found for one subject (see tables.CulpritTable)."""

    subject: str
    outcome: str
    repo: str | None
    commit: str | None
    author: str | None
    title: str | None
    detail: str
    probes: list[dict[str, str]]


CULPRIT_COLUMNS = ("subject", "outcome", "repo", "commit", "author", "title", "detail")


def culprit(row: CulpritTable) -> Culprit:
    return Culprit(**{name: getattr(row, name) for name in CULPRIT_COLUMNS}, probes=json.loads(row.probes))


def device_facts_row(facts: DeviceFacts) -> dict[str, Any]:
    """The device_facts columns of `facts` (but the key, the stage and the runner)."""
    return {
        "vendor": facts.vendor,
        "model": facts.model,
        "count": facts.count,
        "memory_mib": facts.memory_mib,
        "driver": facts.driver,
        "runtime": facts.runtime,
        "mig": facts.mig,
        "devices": json.dumps(facts.devices),
        "frameworks": json.dumps(facts.frameworks, sort_keys=True),
        "config_key": facts.key(),
    }


def device_facts(row: DeviceFactsTable) -> DeviceFacts:
    return DeviceFacts(
        vendor=cast(Any, row.vendor),
        model=row.model,
        count=row.count,
        memory_mib=row.memory_mib,
        driver=row.driver,
        runtime=row.runtime,
        mig=row.mig,
        devices=json.loads(row.devices),
        frameworks=json.loads(row.frameworks),
    )
