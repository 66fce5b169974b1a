"""The benchmark_sweep stage: one batch job per grid point (trials x nodes x ranks per node), one row each."""

import datetime as dt
from typing import Any

import dagster as dg
from pydantic import Field, field_validator

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.batch.resources import BatchSchedulerResource, job_name, target_queue
from nightly_assets.batch.sweep import SweepPoint, command_for, expand_grid, row_to_json, run_sweep
from nightly_assets.batch.toy_benchmark import toy_benchmark_argv
from nightly_assets.manifests import ReleaseManifest
from nightly_assets.results import BenchmarkResult
from nightly_assets.stage_kinds.spec import StageKind, StageParams
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.words import plural


class BenchmarkSweepParams(StageParams):
    grid: dict[str, Any]  # {trials, nodes, ranks_per_node}: lists of positive integers
    metric: str = "images_per_sec"  # the value each job prints, recorded per point
    command: list[str] = Field(default_factory=list)  # argv per point; default the toy benchmark
    seconds: float = Field(default=0.5, gt=0)  # the toy benchmark's run time
    walltime_minutes: float = Field(default=30, gt=0)
    max_concurrent_jobs: int = Field(default=4, ge=1)

    @field_validator("grid")
    @classmethod
    def _valid_grid(cls, grid: dict[str, Any]) -> dict[str, Any]:
        expand_grid(grid)  # SweepConfigError (a ValueError) names the key and the value
        return grid


def build_benchmark_sweep_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.params(BenchmarkSweepParams)
    release_stage = spec.upstream_stage("deploy")
    points = expand_grid(params.grid)
    metric = params.metric

    @dg.asset(**spec.asset_args())
    def _sweep(
        context: dg.AssetExecutionContext,
        batch: BatchSchedulerResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """One benchmark job per grid point (trials x nodes x ranks per node), one row each."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            python = (
                artefacts.manifest(run.key, release_stage, ReleaseManifest).python if release_stage else None
            )
            command = [a.replace("{python}", str(python)) for a in params.command] or [
                str(python),
                *toy_benchmark_argv(params.seconds)[1:],
            ]
            context.log.info(f"sweep over {len(points)} point(s): {command_for(command, points[0])} ...")
            rows = run_sweep(
                batch,
                points,
                command,
                walltime=dt.timedelta(minutes=params.walltime_minutes),
                max_concurrent_jobs=params.max_concurrent_jobs,
                metric=metric,
                name=job_name(run.key, spec.stage.name),
                queue=target_queue(run.target.params),
                log=context.log.info,
            )
            failed = [r for r in rows if r.status != "ok"]
            if len(failed) == len(rows):
                raise RuntimeError(f"every sweep point failed; first: {failed[0].message}")
            warehouse.store().record_benchmarks(
                run.key,
                [
                    BenchmarkResult(_point_name(r.point), float(r.value), metric, lower_is_better=False)
                    for r in rows
                    if r.value is not None
                ],
            )
            run.manifest.update(metric=metric, rows=[row_to_json(r) for r in rows])
            run.status = "failure" if failed else "success"
            run.detail = f"{len(rows) - len(failed)} of {plural(len(rows), 'point')} measured"
        return dg.MaterializeResult(
            metadata={"points": len(rows), "failed_points": len(failed), "metric": metric}
        )

    return _sweep


def _point_name(point: SweepPoint) -> str:
    return f"sweep/nodes={point.nodes}/ranks_per_node={point.ranks_per_node}/trial={point.trial}"


KIND = StageKind(
    "benchmark_sweep",
    BenchmarkSweepParams,
    build_benchmark_sweep_asset,
    frozenset({"slurm"}),
    frozenset({"batch"}),
)
