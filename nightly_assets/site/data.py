"""What a pipeline's results site shows, read from the warehouse in a few pipeline-wide queries:
the nights grid, test health, benchmark series, costs and alerts. No HTML here (``pages.py``)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

from nightly_assets.catalog.models import Pipeline
from nightly_assets.results import NightKey
from nightly_assets.warehouse.pipeline_reads import BenchmarkName, FailedTest
from nightly_assets.warehouse.rows import (
    BenchmarkNight,
    MachineCost,
    NightOverview,
    Regression,
    SentAlert,
    StageRow,
    TestVerdict,
)
from nightly_assets.warehouse.store import Warehouse

# Two months of nights: a release engineer looks back over a few release cycles, and 60 rows of
# 20 cells stay far under the grid page's 1 MB.
GRID_NIGHTS = 60
# The test_health stage's own default window (30 nights): the pages judge over what it judged.
HEALTH_NIGHTS = 30
# A year of nights per benchmark: seasonality and slow drifts show, and a chart stays one SVG.
TREND_NIGHTS = 365
FAR_FUTURE = dt.date(9999, 12, 31)


@dataclass(frozen=True)
class BenchmarkSeries:
    """One benchmark of one target, night by night, with its confirmed changes."""

    benchmark: BenchmarkName
    points: list[BenchmarkNight]
    regressions: list[Regression]

    @property
    def slug(self) -> str:
        return f"{self.benchmark.target}-{self.benchmark.name}"


@dataclass
class SiteData:
    """Everything one pipeline's pages show, as of `built_at`."""

    pipeline: Pipeline
    built_at: dt.datetime  # naive UTC
    nights: list[NightOverview]  # newest first, at most GRID_NIGHTS distinct nights
    stage_rows: dict[NightKey, list[StageRow]]
    verdicts: dict[str, list[TestVerdict]]  # target -> the newest night's flaky and broken tests
    verdict_nights: dict[str, dt.date]  # target -> the night those verdicts are of
    failed_tests: list[FailedTest]
    benchmarks: list[BenchmarkSeries]
    costs: list[tuple[NightKey, MachineCost]]
    alerts: list[tuple[NightKey, SentAlert]]
    device_lines: dict[NightKey, list[str]] = field(default_factory=dict)

    @property
    def stage_names(self) -> list[str]:
        return [stage.name for stage in self.pipeline.stages]


def read_site_data(pipeline: Pipeline, store: Warehouse, *, now: dt.datetime | None = None) -> SiteData:
    """The pipeline's pages' data from the warehouse."""
    overviews = store.night_overviews([pipeline.name])
    nights = sorted({o.night.night for o in overviews}, reverse=True)[:GRID_NIGHTS]
    shown = [o for o in overviews if nights and o.night.night >= nights[-1]]
    since = nights[-1] if nights else FAR_FUTURE
    verdicts, verdict_nights = _newest_verdicts(store, shown)
    regressions = store.regressions(pipeline.name)
    benchmarks = [
        BenchmarkSeries(
            name,
            store.benchmark_nights(
                pipeline.name, name.target, name.name, before=FAR_FUTURE, limit=TREND_NIGHTS
            ),
            [r for r in regressions if r.target == name.target and r.name == name.name],
        )
        for name in store.benchmark_names(pipeline.name)
    ]
    return SiteData(
        pipeline=pipeline,
        built_at=now or dt.datetime.now(dt.UTC).replace(tzinfo=None),
        nights=shown,
        stage_rows=store.pipeline_stages(pipeline.name, since=since),
        verdicts=verdicts,
        verdict_nights=verdict_nights,
        failed_tests=store.failed_tests(pipeline.name, pipeline.cells(), nights[:HEALTH_NIGHTS]),
        benchmarks=benchmarks,
        costs=store.pipeline_costs(pipeline.name),
        alerts=store.pipeline_alerts(pipeline.name),
        device_lines={
            o.night.key: sorted({facts.describe() for facts in o.devices.values()})
            for o in shown
            if o.devices
        },
    )


def _newest_verdicts(
    store: Warehouse, overviews: list[NightOverview]
) -> tuple[dict[str, list[TestVerdict]], dict[str, dt.date]]:
    """Per target, the verdicts of its newest night that has any (test_health runs on some nights)."""
    by_target: dict[str, list[NightOverview]] = defaultdict(list)
    for overview in overviews:
        by_target[overview.night.target].append(overview)
    verdicts: dict[str, list[TestVerdict]] = {}
    nights: dict[str, dt.date] = {}
    for target, target_nights in by_target.items():
        for overview in target_nights[:HEALTH_NIGHTS]:
            found = store.verdicts(overview.night.key)
            if found:
                verdicts[target], nights[target] = found, overview.night.night
                break
    return verdicts, nights
