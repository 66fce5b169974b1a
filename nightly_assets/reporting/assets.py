"""The night summary stage: the table of every stage, written as a file and as Markdown metadata."""

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.reporting.summary import night_status, summary_markdown, summary_rows
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource


def build_night_summary_asset(spec: StageSpec) -> dg.AssetsDefinition:
    judged = set(spec.upstream())  # the night's status; release comes after the summary

    @dg.asset(**spec.asset_args())
    def _night_summary(
        context: dg.AssetExecutionContext, artefacts: ArtefactStoreResource, warehouse: WarehouseResource
    ) -> dg.MaterializeResult:
        """The night's results table: stage, status, runner, duration, artefacts and machine cost."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            store = warehouse.store()
            rows = summary_rows(spec.pipeline, run.key, store, skip=spec.stage.name)
            suites = store.suite_counts(run.key)
            failed_tests = sum(c["failed"] + c["error"] for c in suites.values())
            status = night_status([r for r in rows if r.stage in judged], failed_tests)
            costs = store.costs(run.key)
            markdown = summary_markdown(run.key, rows, suites, costs)
            path = run.workdir / "summary.md"
            path.write_text(markdown)
            night = store.night(run.key)
            pins = night.pins if night else {}
            store.record_night(run.key, run_id=context.run.run_id, status=status, pins=pins)
            cost_usd = round(sum(c.cost_usd for c in costs), 6)
            run.manifest.update(
                status=status, summary=str(path), failed_tests=failed_tests, cost_usd=cost_usd
            )
            run.artefact = str(path)
            run.detail = status
        return dg.MaterializeResult(
            metadata={
                "summary": dg.MetadataValue.md(markdown),
                "status": status,
                "failed_tests": failed_tests,
                "cost_usd": dg.MetadataValue.float(cost_usd),
                "file": dg.MetadataValue.path(str(path)),
            }
        )

    return _night_summary
