"""Seed 004's stages on a batch machine: sanity job, deploy, benchmark sweep, analysis report."""

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.batch.deploy import deploy
from nightly_assets.batch.report import write_report
from nightly_assets.batch.resources import BatchSchedulerResource, require_output, require_success
from nightly_assets.batch.sweep import SweepPoint, SweepRow, command_for, expand_grid, run_sweep
from nightly_assets.batch.toy_benchmark import toy_benchmark_argv
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.results import BenchmarkResult
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource

DEFAULT_METRIC = "images_per_sec"


def build_batch_job_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.stage.params
    wheels_stage = spec.upstream_stage("wheels")

    @dg.asset(**spec.asset_args())
    def _batch_job(
        context: dg.AssetExecutionContext,
        batch: BatchSchedulerResource,
        builder: PythonBuildResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """A job on the batch machine (the sanity check of the night's build), polled to its end."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            manifest = artefacts.read_manifest(run.key, str(wheels_stage)) if wheels_stage else {}
            wheels = [Path(w) for w in manifest.get("wheels", [])]
            # The ephemeral build root: a fresh environment with only the night's wheels.
            build_root = run.workdir / "build_root"
            python = builder.create_environment(build_root, wheels, run.workdir / "install.log")
            # Only {python} is filled in: a command's own braces (an f-string, say) stay as they are.
            argv = [
                str(a).replace("{python}", str(python))
                for a in params.get("command", [python, "-c", "print('ok')"])
            ]
            result = batch.run_job(
                f"{spec.pipeline.name}-{spec.stage.name}",
                argv,
                nodes=int(params.get("nodes", 1)),
                walltime=dt.timedelta(minutes=float(params.get("walltime_minutes", 10))),
                queue=str(run.target.params["queue"]) if "queue" in run.target.params else None,
                log=context.log.info,
            )
            require_success(result)
            if "expect_output" in params:
                require_output(result, str(params["expect_output"]))
            run.manifest.update(
                job_id=result.job_id,
                build_root=str(build_root),
                python=str(python),
                stdout=str(result.output.stdout),
            )
            run.artefact = str(result.output.stdout)
            run.detail = (
                f"job {result.job_id}: {result.status.state} in {result.status.duration_s or 0:.0f} s"
            )
        return dg.MaterializeResult(
            metadata={
                "job_id": result.job_id,
                "state": result.status.state,
                "output_tail": dg.MetadataValue.md(f"```\n{result.tail(10)}\n```"),
            }
        )

    return _batch_job


def build_deploy_asset(spec: StageSpec) -> dg.AssetsDefinition:
    build_stage = spec.upstream_stage("batch_job")

    @dg.asset(**spec.asset_args())
    def _deploy(
        context: dg.AssetExecutionContext,
        batch: BatchSchedulerResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """The night's build copied from the ephemeral build root to the release root."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            built = artefacts.read_manifest(run.key, str(build_stage))
            if batch.release_root is None:
                raise ValueError("the batch resource has no release_root: set NIGHTLY_RELEASE_ROOT")
            release = deploy(
                Path(built["build_root"]),
                Path(batch.release_root) / spec.pipeline.name / run.target.name,
                run.key.night.isoformat(),
                keep=int(spec.stage.params.get("keep", spec.pipeline.retention_days)),
            )
            python = release.path / Path(built["python"]).relative_to(built["build_root"])
            run.manifest.update(
                release=str(release.path), python=str(python), current=str(release.current_target)
            )
            run.manifest["removed"] = [str(p) for p in release.removed]
            run.artefact = str(release.path)
            run.detail = f"released to {release.path}" + (
                f", removed {len(release.removed)}" if release.removed else ""
            )
            context.log.info(run.detail)
        return dg.MaterializeResult(
            metadata={
                "release": dg.MetadataValue.path(str(release.path)),
                "current": str(release.current_target),
                "removed": ", ".join(p.name for p in release.removed) or "none",
            }
        )

    return _deploy


def build_benchmark_sweep_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.stage.params
    release_stage = spec.upstream_stage("deploy")
    points = expand_grid(params.get("grid", {}))  # a bad grid fails when definitions load
    metric = str(params.get("metric", DEFAULT_METRIC))

    @dg.asset(**spec.asset_args())
    def _sweep(
        context: dg.AssetExecutionContext,
        batch: BatchSchedulerResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """One benchmark job per grid point (trials x nodes x ranks per node), one row each."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            python = artefacts.read_manifest(run.key, str(release_stage))["python"] if release_stage else None
            command = [str(a).replace("{python}", str(python)) for a in params.get("command", [])] or [
                str(python),
                *toy_benchmark_argv(float(params.get("seconds", 0.5)))[1:],
            ]
            context.log.info(f"sweep over {len(points)} point(s): {command_for(command, points[0])} ...")
            rows = run_sweep(
                batch,
                points,
                command,
                walltime=dt.timedelta(minutes=float(params.get("walltime_minutes", 30))),
                max_concurrent_jobs=int(params.get("max_concurrent_jobs", 4)),
                metric=metric,
                name=f"{spec.pipeline.name}-{spec.stage.name}",
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
            run.manifest.update(metric=metric, rows=[_row_json(r) for r in rows])
            run.status = "failure" if failed else "success"
            run.detail = f"{len(rows) - len(failed)}/{len(rows)} point(s) measured"
        return dg.MaterializeResult(
            metadata={"points": len(rows), "failed_points": len(failed), "metric": metric}
        )

    return _sweep


def build_analysis_report_asset(spec: StageSpec) -> dg.AssetsDefinition:
    sweep_stage = spec.upstream_stage("benchmark_sweep")

    @dg.asset(**spec.asset_args())
    def _report(
        context: dg.AssetExecutionContext, artefacts: ArtefactStoreResource, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:
        """The sweep's results as tables and plots: a PDF, a Markdown summary and a CSV."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            sweep = artefacts.read_manifest(run.key, str(sweep_stage))
            rows = [_row_from_json(r) for r in sweep["rows"]]
            files = write_report(
                rows, run.workdir, title=f"{spec.pipeline.title}: {run.key}", metric=sweep["metric"]
            )
            run.manifest.update(pdf=str(files.pdf), markdown=str(files.markdown), csv=str(files.csv))
            run.artefact = str(files.pdf)
            run.detail = files.message
            context.log.info(files.message)
        return dg.MaterializeResult(
            metadata={
                "report": dg.MetadataValue.path(str(files.pdf)),
                "pages": files.pages,
                "summary": dg.MetadataValue.md(files.markdown.read_text()),
            }
        )

    return _report


def _point_name(point: SweepPoint) -> str:
    return f"sweep/nodes={point.nodes}/ranks_per_node={point.ranks_per_node}/trial={point.trial}"


def _row_json(row: SweepRow) -> dict[str, Any]:
    return {**dataclasses.asdict(row), "point": dataclasses.asdict(row.point)}


def _row_from_json(data: dict[str, Any]) -> SweepRow:
    return SweepRow(**{**data, "point": SweepPoint(**data["point"])})
