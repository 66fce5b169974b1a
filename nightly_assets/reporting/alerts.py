"""Turn a finished run into alerts: failed steps and failed checks, read from the run's own events."""

from __future__ import annotations

import dagster as dg
from dagster._core.events import DagsterEventType  # event types are not re-exported at top level

from nightly_assets.catalog.models import Catalog
from nightly_assets.reporting.resources import Alert

PIPELINE_TAG = "nightly/pipeline"
PARTITION_TAG = "dagster/partition"


def alerts_for_run(instance: dg.DagsterInstance, run: dg.DagsterRun, catalog: Catalog) -> list[Alert]:
    pipeline = run.tags.get(PIPELINE_TAG)
    if pipeline is None or pipeline not in catalog.pipelines:
        return []
    channel = catalog.pipelines[pipeline].notify_channel
    partition = run.tags.get(PARTITION_TAG, "unpartitioned")
    errors: list[str] = []
    warnings: list[str] = []
    for record in instance.all_logs(
        run.run_id, of_type={DagsterEventType.STEP_FAILURE, DagsterEventType.ASSET_CHECK_EVALUATION}
    ):
        event = record.dagster_event
        if event is None:
            continue
        if event.event_type == DagsterEventType.STEP_FAILURE:
            error = event.step_failure_data.error
            # Dagster wraps what the asset raised ("Error occurred while executing op ..."): say the cause.
            while (
                error is not None
                and error.cause is not None
                and "DagsterExecutionStepExecutionError" in (error.cls_name or error.message)
            ):
                error = error.cause
            message = error.message.strip().splitlines()[0] if error else "failed"
            errors.append(f"step {event.step_key} failed: {message[:300]}")
            continue
        evaluation = event.event_specific_data
        if evaluation.passed:  # type: ignore[union-attr]
            continue
        line = f"check {evaluation.asset_key.to_user_string()}:{evaluation.check_name} failed"  # type: ignore[union-attr]
        if evaluation.description:  # type: ignore[union-attr]
            line += f": {evaluation.description[:300]}"  # type: ignore[union-attr]
        (errors if evaluation.severity == dg.AssetCheckSeverity.ERROR else warnings).append(line)  # type: ignore[union-attr]
    alerts = []
    if errors or run.status == dg.DagsterRunStatus.FAILURE:
        alerts.append(
            Alert(
                pipeline,
                partition,
                "error",
                f"{pipeline} night failed",
                run.run_id,
                channel,
                errors or ["the run failed before any step reported"],
            )
        )
    if warnings:
        alerts.append(
            Alert(
                pipeline, partition, "warn", f"{pipeline} night has warnings", run.run_id, channel, warnings
            )
        )
    return alerts
