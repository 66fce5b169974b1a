"""The analysis_report stage: the sweep's results as tables and plots (a PDF, Markdown and a CSV)."""

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.batch.report import write_report
from nightly_assets.batch.sweep import row_from_json
from nightly_assets.manifests import SweepManifest
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, NoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource


def build_analysis_report_asset(spec: StageSpec) -> dg.AssetsDefinition:
    sweep_stage = spec.upstream_stage("benchmark_sweep")

    @dg.asset(**spec.asset_args())
    def _report(
        context: dg.AssetExecutionContext, artefacts: ArtefactStoreResource, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:
        """The sweep's results as tables and plots: a PDF, a Markdown summary and a CSV."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            sweep = artefacts.manifest(run.key, str(sweep_stage), SweepManifest)
            rows = [row_from_json(r) for r in sweep.rows]
            files = write_report(
                rows, run.workdir, title=f"{spec.pipeline.title}: {run.key}", metric=sweep.metric
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


KIND = StageKind(
    "analysis_report", NoParams, build_analysis_report_asset, frozenset({"pdf"}), frozenset({ORCHESTRATOR})
)
