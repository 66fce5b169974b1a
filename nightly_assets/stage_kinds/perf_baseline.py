"""The perf_baseline stage: tonight's benchmarks against their median over the earlier nights."""

import statistics
from collections.abc import Iterator

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.benchmarks import checks
from nightly_assets.manifests import BenchmarksManifest
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, NoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.warehouse.resources import WarehouseResource


def build_perf_baseline_asset(spec: StageSpec) -> dg.AssetsDefinition:
    bench_stage = spec.upstream_stage("benchmarks")
    thresholds = spec.pipeline.thresholds

    @dg.asset(
        **spec.asset_args(check_specs=checks.baseline_check_specs(spec.key, thresholds.benchmark_slowdown))
    )
    def _perf_baseline(
        context: dg.AssetExecutionContext, artefacts: ArtefactStoreResource, warehouse: WarehouseResource
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """Each benchmark's median over the earlier nights, with tonight's ratio to it."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            tonight = artefacts.manifest(run.key, str(bench_stage), BenchmarksManifest).benchmarks
            store = warehouse.store()
            comparison = {}
            for name, row in tonight.items():
                history = store.benchmark_history(
                    run.key.pipeline,
                    run.key.target,
                    name,
                    before=run.key.night,
                    limit=thresholds.baseline_nights,
                )
                baseline = statistics.median(v for _, v in history) if history else None
                comparison[name] = {
                    **row.model_dump(),
                    "baseline": baseline,
                    "nights": len(history),
                    "ratio": round(row.value / baseline, 4) if baseline else None,
                }
            run.manifest["comparison"] = comparison
            run.detail = ", ".join(
                f"{n} {c['ratio']:.2f}x" if c["ratio"] else f"{n} (first night)"
                for n, c in comparison.items()
            )
            run.checks.append(checks.within_baseline(spec.key, comparison, thresholds.benchmark_slowdown))
        table = "| benchmark | tonight | baseline | nights | ratio |\n|---|---|---|---|---|\n" + "\n".join(
            f"| {n} | {c['value']:.4g} | {_fmt(c['baseline'])} "
            f"| {c['nights']} | {c['ratio'] if c['ratio'] is not None else 'n/a'} |"
            for n, c in comparison.items()
        )
        yield from stage_events(run, {"comparison": dg.MetadataValue.md(table)})

    return _perf_baseline


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else format(value, ".4g")


KIND = StageKind(
    "perf_baseline", NoParams, build_perf_baseline_asset, frozenset({"sql"}), frozenset({ORCHESTRATOR})
)
