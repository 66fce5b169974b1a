"""The perf_baseline stage: each benchmark's nightly series through the change-point detector, tonight
included; a change for the worse confirmed tonight is a regression, recorded with its suspect commits."""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.benchmarks import changepoint, checks
from nightly_assets.manifests import BenchmarksManifest, BenchmarkValue
from nightly_assets.results import NightKey
from nightly_assets.sources.resources import GitSourcesResource
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, NoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.warehouse.rows import Regression

HISTORY_NIGHTS = 180  # nights replayed: enough for the regime a benchmark is in now
SUSPECTS_LISTED = 10  # commits named per repository


def build_perf_baseline_asset(spec: StageSpec) -> dg.AssetsDefinition:
    bench_stage = spec.upstream_stage("benchmarks")
    thresholds = spec.pipeline.thresholds
    settings = changepoint.Settings(
        min_history=thresholds.regression_min_history, min_change=thresholds.regression_min_change
    )
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
            tonight = artefacts.manifest(run.key, str(bench_stage), BenchmarksManifest).benchmarks
            store = warehouse.store()
            night = store.night(run.key)
            pins = night.pins if night else {}
            comparison: dict[str, dict[str, Any]] = {}
            regressions: list[Regression] = []
            reported = {
                (r.name, r.first_bad): r.night
                for r in store.regressions(run.key.pipeline, target=run.key.target)
                if r.night != run.key.night and r.worse
            }
            for name, result in tonight.items():
                history = store.benchmark_series(
                    run.key.pipeline, run.key.target, name, before=run.key.night, limit=HISTORY_NIGHTS
                )
                series = [changepoint.Point.of(n, v, p) for n, v, p in history]
                series.append(changepoint.Point.of(run.key.night, result.value, pins))
                verdict = changepoint.assess(
                    series, lower_is_better=result.lower_is_better, settings=settings
                )
                row = _comparison(result, verdict)
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
            run.detail = ", ".join(_detail(n, c) for n, c in comparison.items())
            run.checks.append(checks.no_new_regression(spec.key, comparison))
        table = (
            "| benchmark | tonight | baseline | nights | ratio | state |\n|---|---|---|---|---|---|\n"
            + "\n".join(
                f"| {n} | {c['value']:.4g} | {_fmt(c['baseline'])} | {c['nights']} "
                f"| {c['ratio'] if c['ratio'] is not None else 'n/a'} | {c['state']} |"
                for n, c in comparison.items()
            )
        )
        yield from stage_events(run, {"comparison": dg.MetadataValue.md(table)})

    return _perf_baseline


def _comparison(result: BenchmarkValue, verdict: changepoint.Assessment) -> dict[str, Any]:
    baseline = verdict.baseline
    return {
        "value": result.value,
        "unit": result.unit,
        "lower_is_better": result.lower_is_better,
        "state": verdict.state,
        "baseline": baseline,
        "nights": verdict.nights,
        "ratio": round(result.value / baseline, 4) if baseline else None,
        "regression": None,
    }


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


def _detail(name: str, row: dict[str, Any]) -> str:
    if row["regression"] is not None:
        return f"{name} {row['regression']['text']}"
    if row["ratio"] is None:
        return f"{name} ({row['state']})"
    return f"{name} {row['ratio']:.2f}x ({row['state']})"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else format(value, ".4g")


KIND = StageKind(
    "perf_baseline", NoParams, build_perf_baseline_asset, frozenset({"sql"}), frozenset({ORCHESTRATOR})
)
