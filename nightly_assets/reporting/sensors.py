"""Alerts: open-source Dagster does not alert on checks by itself, so these sensors do."""

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from nightly_assets.catalog.models import Catalog
from nightly_assets.reporting.alerts import PARTITION_TAG, PIPELINE_TAG, alerts_for_run
from nightly_assets.reporting.resources import NotifierResource


def summary_job_name(pipeline: str) -> str:
    return f"{pipeline}_summary"


def build_alert_sensors(
    catalog: Catalog, summary_jobs: list[UnresolvedAssetJobDefinition]
) -> list[dg.SensorDefinition]:
    @dg.run_failure_sensor(
        name="night_failure_alerts",
        request_jobs=summary_jobs,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Alerts on a failed night and writes its summary table in a follow-up run.",
    )
    def night_failure_alerts(
        context: dg.RunFailureSensorContext, notifier: NotifierResource
    ) -> dg.RunRequest | dg.SkipReason:
        run = context.dagster_run
        for alert in alerts_for_run(context.instance, run, catalog):
            notifier.notify(alert)
        pipeline, partition = run.tags.get(PIPELINE_TAG), run.tags.get(PARTITION_TAG)
        if pipeline is None or partition is None or run.job_name == summary_job_name(pipeline):
            return dg.SkipReason(f"run {run.run_id} is not a night run; alert only")
        return dg.RunRequest(
            run_key=f"summary-{run.run_id}",
            job_name=summary_job_name(pipeline),
            partition_key=partition,
            tags={"nightly/summary_of": run.run_id},
        )

    @dg.run_status_sensor(
        run_status=dg.DagsterRunStatus.SUCCESS,
        name="night_check_alerts",
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Alerts on failed ERROR and WARN checks of a night that otherwise succeeded.",
    )
    def night_check_alerts(context: dg.RunStatusSensorContext, notifier: NotifierResource) -> None:
        for alert in alerts_for_run(context.instance, context.dagster_run, catalog):
            notifier.notify(alert)

    return [night_failure_alerts, night_check_alerts]
