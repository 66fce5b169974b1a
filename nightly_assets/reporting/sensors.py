"""Alerts and summaries under the daemon: open-source Dagster does not alert on checks by itself.

Every finished run that touched a night is followed up the same way (`follow_up.py`), whether
a schedule, the CLI, an asset group's "Materialize", a UI backfill or a re-execution launched it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.catalog.models import Catalog
from nightly_assets.partitions import partition_key
from nightly_assets.reporting.alerts import alerts_for_run, record_sent
from nightly_assets.reporting.follow_up import (
    ALERTS_UNSENT,
    FOLLOWED_UP_TAG,
    SUMMARY_OF_TAG,
    UNSENT_TAG,
    abandoned_runs,
    end_abandoned,
    follow_up_run,
    resend_unsent_alerts,
    runs_to_follow_up_again,
    summary_requests,
)
from nightly_assets.reporting.missing_nights import alert_missing_nights
from nightly_assets.reporting.night_runs import read_run
from nightly_assets.reporting.resources import NotifierResource
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.words import plural

if TYPE_CHECKING:  # what dg.define_asset_job returns; the class is not exported
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

    from nightly_assets.warehouse.store import Warehouse

REPAIR_TAG = "nightly/repair_of"
FOLLOW_UP_INTERVAL_S = 10  # how soon after a run ends its alerts go out (cheap: a cursor query)
REPAIR_INTERVAL_S = 300
MISSING_NIGHT_INTERVAL_S = 300  # a deadline is a whole minute; an alert 5 minutes late is on time


def summary_job_name(pipeline: str) -> str:
    return f"{pipeline}_summary"


def build_alert_sensors(
    catalog: Catalog, summary_jobs: list[UnresolvedAssetJobDefinition]
) -> list[dg.SensorDefinition]:
    jobs = {p: summary_job_name(p) for p in catalog.pipelines}

    def follow_up(
        context: dg.RunStatusSensorContext,
        notifier: NotifierResource,
        warehouse: WarehouseResource,
        artefacts: ArtefactStoreResource,
    ) -> list[dg.RunRequest] | dg.SkipReason:
        run = context.dagster_run
        done = follow_up_run(context.instance, run, catalog, notifier, warehouse.store())
        if done is None:
            return dg.SkipReason(f"run {run.run_id} was already followed up")
        record_sent(
            context.instance, catalog, done.alerts, notifier, done.unsent, warehouse.store(), artefacts
        )
        for key, stages in done.ended.items():
            context.log.warning(f"{key}: {', '.join(stages)} left running by run {run.run_id}; ended")
        for index, why in done.unsent.items():
            context.log.error(
                f"alert {done.alerts[index].title!r} of run {run.run_id} was not sent ({why}); "
                "night_status_repair sends it again"
            )
        if not done.record.nights:
            return dg.SkipReason(
                f"run {run.run_id} materialized no night ({plural(len(done.alerts), 'alert')})"
            )
        return summary_requests(done, jobs) or dg.SkipReason(
            f"run {run.run_id}: {plural(len(done.alerts), 'alert')}; every night it touched has its summary"
        )

    def follow_up_sensor(name: str, status: dg.DagsterRunStatus, description: str) -> dg.SensorDefinition:
        @dg.run_status_sensor(
            run_status=status,
            name=name,
            minimum_interval_seconds=FOLLOW_UP_INTERVAL_S,
            request_jobs=summary_jobs,
            default_status=dg.DefaultSensorStatus.RUNNING,
            description=description,
        )
        def _sensor(
            context: dg.RunStatusSensorContext,
            notifier: NotifierResource,
            warehouse: WarehouseResource,
            artefacts: ArtefactStoreResource,
        ) -> list[dg.RunRequest] | dg.SkipReason:
            return follow_up(context, notifier, warehouse, artefacts)

        return _sensor

    followers = [
        follow_up_sensor(
            "night_failure_alerts",
            dg.DagsterRunStatus.FAILURE,
            "Alerts on a failed night run and writes the summary it did not reach.",
        ),
        follow_up_sensor(
            "night_check_alerts",
            dg.DagsterRunStatus.SUCCESS,
            "Alerts on failed checks of a successful night run; summarizes a partial re-run.",
        ),
        follow_up_sensor(
            "night_cancelled",
            dg.DagsterRunStatus.CANCELED,
            "Ends a cancelled night as `cancelled` (no error alert) and writes its summary.",
        ),
    ]

    @dg.sensor(
        name="night_status_repair",
        minimum_interval_seconds=REPAIR_INTERVAL_S,
        jobs=summary_jobs,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Follows up again runs whose alerts or follow-up failed (Slack or the warehouse "
        "was down), and writes the summary of any night left `running` after all of its runs ended.",
    )
    def night_status_repair(
        context: dg.SensorEvaluationContext,
        notifier: NotifierResource,
        warehouse: WarehouseResource,
        artefacts: ArtefactStoreResource,
    ) -> list[dg.RunRequest] | dg.SkipReason:
        store = warehouse.store()
        requests = []
        for run in runs_to_follow_up_again(context.instance):
            if run.tags.get(FOLLOWED_UP_TAG) == ALERTS_UNSENT:
                wanted = {int(i) for i in run.tags.get(UNSENT_TAG, "").split(",") if i.isdigit()}
                still = resend_unsent_alerts(context.instance, run, catalog, notifier)
                alerts = alerts_for_run(read_run(context.instance, run, catalog), catalog)
                not_sent_now = set(range(len(alerts))) - wanted | set(still)
                record_sent(context.instance, catalog, alerts, notifier, not_sent_now, store, artefacts)
                context.log.info(f"run {run.run_id}: unsent alerts sent again, {len(still)} still unsent")
                continue
            context.log.warning(f"run {run.run_id}: its follow-up failed earlier; following it up again")
            done = follow_up_run(context.instance, run, catalog, notifier, store)
            if done is not None:
                record_sent(context.instance, catalog, done.alerts, notifier, done.unsent, store, artefacts)
                requests.extend(summary_requests(done, jobs))
        for night in store.nights(status="running"):
            if night.pipeline not in catalog.pipelines:
                continue
            runs = abandoned_runs(context.instance, store, night)
            if runs is None:
                continue
            partition = str(partition_key(night.night, night.target))
            repairs = context.instance.get_runs(dg.RunsFilter(tags={REPAIR_TAG: night.run_id}))
            if any(r.tags.get("dagster/partition") == partition for r in repairs):
                # Its repair summary ran and still left it running (that run failed): end it here.
                end_abandoned(store, night, runs)
                store.set_night_status(night.key, "failure", only_if="running")
                context.log.error(
                    f"{night.pipeline} {partition}: its repair summary failed; status set to failure"
                )
                continue
            context.log.warning(f"{end_abandoned(store, night, runs)}; writing its summary")
            requests.append(
                dg.RunRequest(
                    run_key=f"repair-{night.run_id}-{partition}",
                    job_name=jobs[night.pipeline],
                    partition_key=partition,
                    tags={SUMMARY_OF_TAG: night.run_id, REPAIR_TAG: night.run_id},
                )
            )
        return requests or dg.SkipReason("no night is left running")

    return [*followers, night_status_repair]


def build_missing_night_sensor(
    catalog: Catalog, schedules: Mapping[str, dg.ScheduleDefinition]
) -> dg.SensorDefinition:
    """`schedules`: each pipeline's night schedule, by pipeline name."""

    @dg.sensor(
        name="missing_night_alerts",
        minimum_interval_seconds=MISSING_NIGHT_INTERVAL_S,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Alerts once on a night with no summary by its deadline (the schedule's tick + "
        "thresholds.summary_deadline_hours), naming the likely cause: the schedule was off, the "
        "daemon down at its tick, or the night's run ended without a summary.",
    )
    def missing_night_alerts(
        context: dg.SensorEvaluationContext,
        notifier: NotifierResource,
        warehouse: WarehouseResource,
        artefacts: ArtefactStoreResource,
    ) -> dg.SensorResult:
        origin = context.code_location_origin
        judged = alert_missing_nights(
            context.instance,
            catalog,
            schedules,
            context.cursor,
            notifier,
            location=origin.location_name if origin else None,
        )
        record_sent(
            context.instance,
            catalog,
            judged.sent,
            notifier,
            store=_store_or_none(context, warehouse),
            artefacts=artefacts,
        )
        for title, why in judged.unsent.items():
            context.log.error(f"alert {title!r} was not sent ({why}); the next evaluation sends it again")
        alerted = "; ".join(a.title for a in judged.sent)
        return dg.SensorResult(
            cursor=judged.cursor,
            skip_reason=f"alerted: {alerted}" if alerted else "no night missed its summary's deadline",
        )

    return missing_night_alerts


def _store_or_none(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> Warehouse | None:
    """The warehouse to record missing nights' alerts in; None (logged) when it cannot be opened:
    those alerts go out all the same, and show on the summaries' checks."""
    try:
        return warehouse.store()
    except Exception as exc:  # WarehouseError: a missing night is still worth an alert
        context.log.warning(f"missing-night alerts are not recorded in the warehouse: {exc}")
        return None
