"""The analysis_report stage: the sweep's results as tables and plots (a PDF, Markdown and a CSV),
written in the orchestrator or, on a batch runner, by an analysis job on the batch machine (seed 004)."""

import datetime as dt
import json
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.batch.resources import BatchSchedulerResource, job_name, require_success, target_queue
from nightly_assets.batch.sweep import row_from_json
from nightly_assets.manifests import SweepManifest
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, StageKind, StageParams
from nightly_assets.stages import StageRun, StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource

if TYPE_CHECKING:  # the report (tables and plots) is imported by the asset when it runs
    from nightly_assets.batch.report import ReportFiles


class AnalysisReportParams(StageParams):
    walltime_minutes: float = Field(default=10, gt=0)  # the analysis job's, on a batch runner


def build_analysis_report_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.params(AnalysisReportParams)
    sweep_stage = spec.upstream_stage("benchmark_sweep")

    @dg.asset(**spec.asset_args())
    def _report(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        batch: BatchSchedulerResource,
    ) -> dg.MaterializeResult:
        """The sweep's results as tables and plots: a PDF, a Markdown summary and a CSV."""
        from nightly_assets.batch.report import write_report

        with recorded_stage(context, spec, artefacts, warehouse) as run:
            sweep = artefacts.manifest(run.key, str(sweep_stage), SweepManifest)
            title = f"{spec.pipeline.title}: {run.key}"
            if run.runner_kind == "batch":
                files = _report_job(context, spec, run, batch, sweep, title, params.walltime_minutes)
            else:
                rows = [row_from_json(r) for r in sweep.rows]
                files = write_report(rows, run.workdir, title=title, metric=sweep.metric)
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


def _report_job(
    context: dg.AssetExecutionContext,
    spec: StageSpec,
    run: StageRun,
    batch: BatchSchedulerResource,
    sweep: SweepManifest,
    title: str,
    walltime_minutes: float,
) -> "ReportFiles":
    """The analysis as a job on the batch machine, reading the rows from and writing into the
    stage's folder (on the file system the compute nodes share)."""
    from nightly_assets.batch.report import read_report_result, report_job_argv

    rows_file = run.workdir / "sweep_rows.json"
    rows_file.write_text(json.dumps(sweep.rows))
    result = batch.run_job(
        job_name(run.key, spec.stage.name),
        report_job_argv(rows_file, run.workdir, title=title, metric=sweep.metric),
        walltime=dt.timedelta(minutes=walltime_minutes),
        queue=target_queue(run.target.params),
        log=context.log.info,
    )
    require_success(result)
    run.manifest.update(job_id=result.job_id)
    return read_report_result(run.workdir)


KIND = StageKind(
    "analysis_report",
    AnalysisReportParams,
    build_analysis_report_asset,
    frozenset({"pdf"}),
    frozenset({ORCHESTRATOR, "batch"}),
)
