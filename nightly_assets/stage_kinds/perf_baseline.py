"""The perf_baseline stage: each benchmark's nightly series through the change-point detector, tonight
included; a change for the worse confirmed tonight is a regression, recorded with its suspect commits.

A baseline belongs to one device configuration (``DeviceFacts.key()``: GPU model and count, driver,
runtime, framework builds), tonight's being the one the benchmarks manifest names (none in older
manifests: the empty configuration). The detector replays only that configuration's nights, so
another card, driver or torch build is never taken for a regression. A benchmark whose newest
earlier night ran on another configuration, and which has no night on tonight's, starts a new
baseline tonight, saying what changed; a configuration that comes back (a card swapped back)
resumes its own series."""

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.catalog.models import Pipeline
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.manifests import BenchmarksManifest, BenchmarkValue
from nightly_assets.perf import changepoint, checks
from nightly_assets.results import NightKey
from nightly_assets.sources.resources import GitSourcesResource
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, NoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.warehouse.rows import Regression

if TYPE_CHECKING:
    from nightly_assets.warehouse.store import Warehouse

HISTORY_NIGHTS = 180  # nights replayed: enough for the regime a benchmark is in now
NEW_BASELINE = "new baseline"  # the state of a benchmark whose device configuration changed tonight
INSUFFICIENT = "insufficient data"  # the detector's state before a baseline has enough nights
_UNRECORDED = "devices not recorded"  # older manifests and rows, and benchmarks recorded without devices
SUSPECTS_LISTED = 10  # commits named per repository


def build_perf_baseline_asset(spec: StageSpec) -> dg.AssetsDefinition:
    bench_stage = spec.upstream_stage("benchmarks")
    settings = detector_settings(spec.pipeline)
    urls = {repo.name: repo.url for repo in spec.pipeline.repositories}

    @dg.asset(**spec.asset_args(check_specs=checks.regression_check_specs(spec.key, settings.min_change)))
    def _perf_baseline(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        git: GitSourcesResource,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """Each benchmark's level over the nights, and the regressions confirmed tonight."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            benchmarks = artefacts.manifest(run.key, str(bench_stage), BenchmarksManifest)
            tonight, devices = benchmarks.benchmarks, benchmarks.devices
            remeasured: dict[str, Any] = (
                benchmarks.model_extra.get("remeasured", {}) if benchmarks.model_extra else {}
            )
            config_key = devices.key() if devices is not None else ""
            store = warehouse.store()
            comparison: dict[str, dict[str, Any]] = {}
            regressions: list[Regression] = []
            reported = {
                (r.name, r.first_bad): r.night
                for r in store.regressions(run.key.pipeline, target=run.key.target)
                if r.night != run.key.night and r.worse
            }
            new_baselines: dict[str, list[str]] = {}  # what changed -> the benchmarks it restarts
            for name, result in tonight.items():
                verdict = assess_tonight(
                    store, run.key, name, result.value, result.lower_is_better, config_key, settings
                )
                change = _configuration_change(store, run.key, name, devices) if verdict is None else None
                if change is not None:
                    comparison[name] = _new_baseline(result, change)
                    new_baselines.setdefault(change, []).append(name)
                    continue
                if verdict is None:  # the benchmark's first night: nothing to compare it with
                    verdict = changepoint.assess(
                        [changepoint.Point.of(run.key.night, result.value)],
                        lower_is_better=result.lower_is_better,
                        settings=settings,
                    )
                row = _comparison(result, verdict, settings)
                if name in remeasured:
                    row["remeasured"] = remeasured[name]["text"]
                if (
                    verdict.new is not None
                    and verdict.new.worse
                    and (name, verdict.new.first_bad) in reported
                ):
                    # Confirmed again by a night backfilled out of order: alerted once, on that night.
                    row["state"] = f"regressed (reported on {reported[(name, verdict.new.first_bad)]})"
                elif verdict.new is not None and verdict.new.worse:
                    commits = {
                        repo: git.suspects(repo, urls.get(repo), good, bad, SUSPECTS_LISTED)
                        for repo, (good, bad) in verdict.new.commits.items()
                    }
                    for span in commits.values():
                        if "error" in span:
                            context.log.warning(f"cannot list the suspect commits: {span['error']}")
                    row["regression"] = {"text": verdict.new.describe(result.unit), "commits": commits}
                    regressions.append(_regression(run.key, name, result, verdict.new, commits))
                comparison[name] = row
            store.record_regressions(run.key, regressions)
            run.manifest["comparison"] = comparison
            run.manifest["devices"] = {"config_key": config_key, "describe": _describe(devices)}
            run.manifest["new_baseline"] = new_baselines
            run.detail = _night_detail(comparison, new_baselines)
            run.checks.append(checks.no_new_regression(spec.key, comparison))
        table = (
            "| benchmark | tonight | baseline | nights | ratio | state |\n|---|---|---|---|---|---|\n"
            + "\n".join(
                f"| {n} | {c['value']:.4g} | {_fmt(c['baseline'])} | {c['nights']} "
                f"| {c['ratio'] if c['ratio'] is not None else 'n/a'} | {c['state']} |"
                for n, c in comparison.items()
            )
        )
        metadata = {
            "comparison": dg.MetadataValue.md(table),
            "devices": dg.MetadataValue.text(_describe(devices)),
            "config_key": dg.MetadataValue.text(config_key),
            "baseline_nights_needed": settings.min_history,
        }
        yield from stage_events(run, metadata)

    return _perf_baseline


def detector_settings(pipeline: Pipeline) -> changepoint.Settings:
    """The change-point detector as the pipeline's thresholds set it."""
    thresholds = pipeline.thresholds
    return changepoint.Settings(
        min_history=thresholds.regression_min_history, min_change=thresholds.regression_min_change
    )


def assess_tonight(
    store: "Warehouse",
    key: NightKey,
    name: str,
    value: float,
    lower_is_better: bool,
    config_key: str,
    settings: changepoint.Settings,
) -> changepoint.Assessment | None:
    """Tonight's `value` of benchmark `name` after its earlier nights on configuration
    `config_key`; None when it has none there (a first night, or a new baseline)."""
    history = store.benchmark_series(
        key.pipeline, key.target, name, before=key.night, limit=HISTORY_NIGHTS, config_key=config_key
    )
    if not history:
        return None
    night = store.night(key)
    series = [changepoint.Point.of(n, v, p) for n, v, p in history]
    series.append(changepoint.Point.of(key.night, value, night.pins if night else {}))
    return changepoint.assess(series, lower_is_better=lower_is_better, settings=settings)


def _comparison(
    result: BenchmarkValue, verdict: changepoint.Assessment, settings: changepoint.Settings
) -> dict[str, Any]:
    baseline = verdict.baseline
    state: str = verdict.state
    if state == INSUFFICIENT:
        state = f"{INSUFFICIENT}: {verdict.nights} of {settings.min_history} nights needed for a baseline"
    return {
        "value": result.value,
        "unit": result.unit,
        "lower_is_better": result.lower_is_better,
        "state": state,
        "baseline": baseline,
        "nights": verdict.nights,
        "ratio": round(result.value / baseline, 4) if baseline else None,
        "regression": None,
    }


def _configuration_change(
    store: "Warehouse", key: NightKey, name: str, devices: DeviceFacts | None
) -> str | None:
    """What changed since the benchmark's newest earlier night, which ran on another configuration
    than tonight's (tonight has no earlier night on its own); None when there is no earlier night."""
    earlier = store.benchmark_nights(key.pipeline, key.target, name, before=key.night, limit=1)
    if not earlier:
        return None
    before_key = earlier[-1].config_key
    before = store.device_configuration(before_key) if before_key else None
    if before is not None and devices is not None:
        return "; ".join(devices.changes_from(before)) or f"configuration {before_key} -> {devices.key()}"
    # One side recorded no devices (a night from before they were recorded), or its facts are gone.
    was = before.describe() if before else f"configuration {before_key}" if before_key else _UNRECORDED
    return f"{was} -> {devices.describe() if devices else _UNRECORDED}"


def _new_baseline(result: BenchmarkValue, change: str) -> dict[str, Any]:
    """Tonight's row of a benchmark whose configuration changed: the first night of a new
    baseline, compared with nothing (no regression is possible)."""
    return {
        "value": result.value,
        "unit": result.unit,
        "lower_is_better": result.lower_is_better,
        "state": f"{NEW_BASELINE}: {change}",
        "baseline": None,
        "nights": 0,
        "ratio": None,
        "regression": None,
    }


def _describe(devices: DeviceFacts | None) -> str:
    return devices.describe() if devices is not None else _UNRECORDED


def _regression(
    key: NightKey,
    name: str,
    result: BenchmarkValue,
    change: changepoint.ChangePoint,
    commits: dict[str, Any],
) -> Regression:
    return Regression(
        pipeline=key.pipeline,
        night=key.night,
        target=key.target,
        name=name,
        first_bad=change.first_bad,
        last_good=change.last_good,
        before=change.before,
        after=change.after,
        unit=result.unit,
        worse=change.worse,
        commits=commits,
    )


def _night_detail(comparison: dict[str, dict[str, Any]], new_baselines: dict[str, list[str]]) -> str:
    """One line: each configuration change with the benchmarks it restarted, then the others."""
    restarted = {name for names in new_baselines.values() for name in names}
    return ", ".join(
        [
            *(f"{NEW_BASELINE} for {', '.join(names)} ({change})" for change, names in new_baselines.items()),
            *(_detail(name, row) for name, row in comparison.items() if name not in restarted),
        ]
    )


def _detail(name: str, row: dict[str, Any]) -> str:
    if row["regression"] is not None:
        return f"{name} {row['regression']['text']}"
    state = f"{row['state']}; {row['remeasured']}" if row.get("remeasured") else row["state"]
    if row["ratio"] is None:
        return f"{name} ({state})"
    return f"{name} {row['ratio']:.2f}x ({state})"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else format(value, ".4g")


KIND = StageKind(
    "perf_baseline", NoParams, build_perf_baseline_asset, frozenset({"sql"}), frozenset({ORCHESTRATOR})
)
