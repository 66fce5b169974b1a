"""The batch_job stage: a job on the batch machine, the sanity check of the night's build (seed 004)."""

import datetime as dt
from pathlib import Path

import dagster as dg
from pydantic import Field

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.batch.resources import (
    BatchSchedulerResource,
    job_name,
    require_output,
    require_success,
    target_queue,
)
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.manifests import WheelsManifest
from nightly_assets.partitions import night_key
from nightly_assets.stage_kinds.spec import StageKind, StageParams
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource


class BatchJobParams(StageParams):
    # argv run on the batch machine ({python}: the build root's Python); default a Python "ok"
    command: list[str] | None = Field(default=None, min_length=1)
    nodes: int = Field(default=1, ge=1)
    ranks_per_node: int = Field(default=1, ge=1)  # tasks per node the job may start (srun)
    walltime_minutes: float = Field(default=10, gt=0)
    expect_output: str | None = None  # the job's output must contain it


def build_batch_job_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.params(BatchJobParams)
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
        name = job_name(night_key(spec.pipeline.name, context.partition_key), spec.stage.name)
        # A job an earlier attempt left running uses the build root about to be rebuilt: ended first.
        batch.cancel_earlier(name, context.log.info)
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            built = artefacts.manifest(run.key, wheels_stage, WheelsManifest) if wheels_stage else None
            wheels = [Path(w) for w in built.wheels] if built else []
            # The ephemeral build root: a fresh environment with only the night's wheels.
            build_root = run.workdir / "build_root"
            python = builder.create_environment(build_root, wheels, run.workdir / "install.log")
            # Only {python} is filled in: a command's own braces (an f-string, say) stay as they are.
            argv = [
                str(a).replace("{python}", str(python))
                for a in params.command or [str(python), "-c", "print('ok')"]
            ]
            result = batch.run_job(
                name,
                argv,
                nodes=params.nodes,
                tasks_per_node=params.ranks_per_node,
                walltime=dt.timedelta(minutes=params.walltime_minutes),
                queue=target_queue(run.target.params),
                log=context.log.info,
            )
            require_success(result)
            if params.expect_output is not None:
                require_output(result, params.expect_output)
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


KIND = StageKind(
    "batch_job", BatchJobParams, build_batch_job_asset, frozenset({"slurm"}), frozenset({"batch"})
)
