"""Benchmark stages: tonight's timings, and the baseline from earlier nights they are judged by."""

import statistics
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.benchmarks import checks
from nightly_assets.benchmarks.timing import read_timing_file
from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
from nightly_assets.containers.runner import OUT_DIR
from nightly_assets.containers.suites import run_in_image, runs_in_image
from nightly_assets.process import CommandError, run_command
from nightly_assets.remote.pending import StageNotAvailable, require_local_runner
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.warehouse.resources import WarehouseResource

BENCHMARK_TIMEOUT_S = 3600


def build_benchmarks_asset(spec: StageSpec) -> dg.AssetsDefinition:
    env_stage = spec.upstream_stage("environment", "docker_image")
    params = spec.stage.params

    @dg.asset(**spec.asset_args())
    def _benchmarks(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        docker_pool: DockerRunnerPoolResource,
        registries: ContainerRegistriesResource,
    ) -> dg.MaterializeResult:
        """Tonight's benchmark values, read from the timing JSON the benchmark writes."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            environment = artefacts.read_manifest(run.key, env_stage) if env_stage else {}
            output = run.workdir / "timing.json"
            if "command" in params and runs_in_image(environment):
                inside = f"{OUT_DIR}/timing.json"
                argv = [
                    environment["python"] if a == "python" else str(a).replace("{output}", inside)
                    for a in params["command"]
                ]
                result = run_in_image(
                    context,
                    run,
                    environment,
                    docker_pool,
                    registries,
                    program=argv,
                    timeout_s=BENCHMARK_TIMEOUT_S,
                )
                if result.returncode != 0:
                    log = (result.out_dir / "output.log").read_text(errors="replace")[-3000:]
                    raise CommandError(f"benchmark exited {result.returncode} in the image:\n{log}")
                output = result.out_dir / "timing.json"
            elif "command" in params:
                require_local_runner(spec, run)
                python = artefacts.read_manifest(run.key, str(env_stage))["python"]
                argv = [
                    python if a == "python" else str(a).replace("{output}", str(output))
                    for a in params["command"]
                ]
                run_command(
                    argv,
                    cwd=run.workdir,
                    timeout_s=BENCHMARK_TIMEOUT_S,
                    log_path=run.workdir / "benchmark.log",
                    scratch_home=True,
                )
            else:
                require_local_runner(spec, run)
                upstream = artefacts.read_manifest(run.key, params["from_stage"])
                if "timing_file" not in upstream:
                    raise StageNotAvailable(
                        f"{spec.key.to_user_string()}: stage '{params['from_stage']}' wrote no timing file"
                    )
                output = Path(upstream["timing_file"])
            results = read_timing_file(output)
            warehouse.store().record_benchmarks(run.key, results)
            run.manifest["benchmarks"] = {
                r.name: {"value": r.value, "unit": r.unit, "lower_is_better": r.lower_is_better}
                for r in results
            }
            run.detail = ", ".join(f"{r.name}={r.value:.4g}{r.unit}" for r in results)
        return dg.MaterializeResult(
            metadata={f"benchmark/{r.name}": dg.MetadataValue.float(r.value) for r in results}
        )

    return _benchmarks


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
            tonight = artefacts.read_manifest(run.key, str(bench_stage))["benchmarks"]
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
                    **row,
                    "baseline": baseline,
                    "nights": len(history),
                    "ratio": round(row["value"] / baseline, 4) if baseline else None,
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
