"""Turn a finished run into alerts: one per night it touched, naming failed stages and checks."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection, Sequence

import dagster as dg

from nightly_assets.catalog.models import Catalog
from nightly_assets.partitions import partition_key
from nightly_assets.reporting.night_runs import NightInRun, RunRecord
from nightly_assets.reporting.resources import Alert, NotifierResource

_log = logging.getLogger(__name__)

PIPELINE_TAG = "nightly/pipeline"
MAX_REASON_LINES = 14
MAX_REASON_CHARS = 2000


def alerts_for_run(record: RunRecord, catalog: Catalog) -> list[Alert]:
    """Error alerts for failed stages and ERROR checks, warn alerts for WARN checks.

    A cancelled or interrupted run gets none: nobody needs paging for what they stopped.
    """
    if record.interrupted:
        return []
    run = record.run
    alerts: list[Alert] = []
    for night in record.nights:
        errors, warnings = _night_lines(night)
        pipeline = catalog.pipelines[night.key.pipeline]
        if (
            run.status == dg.DagsterRunStatus.FAILURE
            and not errors
            and not night.materialized >= night.planned
        ):
            errors = [f"the run failed: {brief(record.run_error or 'before any stage reported')}"]
        where = f"{night.key.night.isoformat()} {night.key.target}"
        for severity, lines, title in (
            ("error", errors, f"{pipeline.name} night {where} failed"),
            ("warn", warnings, f"{pipeline.name} night {where} has warnings"),
        ):
            if lines:
                alerts.append(
                    Alert(
                        pipeline.name,
                        night.partition,
                        severity,
                        title,
                        run.run_id,
                        pipeline.notify_channel,
                        lines,
                    )
                )
    if (
        not record.nights
        and run.status == dg.DagsterRunStatus.FAILURE
        and run.tags.get(PIPELINE_TAG) in catalog.pipelines
    ):
        pipeline = catalog.pipelines[run.tags[PIPELINE_TAG]]
        reason = brief(record.run_error or "before any stage reported")
        alerts.append(
            Alert(
                pipeline.name,
                "unpartitioned",
                "error",
                f"{pipeline.name} run {run.job_name} failed",
                run.run_id,
                pipeline.notify_channel,
                [f"the run failed: {reason}"],
            )
        )
    return alerts


def _night_lines(night: NightInRun) -> tuple[list[str], list[str]]:
    errors = [f"{f.stage} failed: {brief(f.message)}" for f in night.failed_steps if not f.interrupted]
    failed_stages = {f.stage for f in night.failed_steps}
    warnings: list[str] = []
    for check in night.checks:
        if check.passed or (check.severity == "ERROR" and check.stage in failed_stages):
            continue  # a stage that failed on its own gate says why in its error
        line = f"{check.stage}:{check.name} failed: {brief(check.description or 'no description')}"
        (errors if check.severity == "ERROR" else warnings).append(line)
    return errors, warnings


def brief(text: str) -> str:
    """`text` short enough for a chat message, keeping its first line and its end (the cause)."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) > MAX_REASON_LINES:
        head, tail = lines[:2], lines[-(MAX_REASON_LINES - 3) :]
        lines = [*head, f"… {len(lines) - len(head) - len(tail)} lines …", *tail]
    out = "\n".join(lines)
    if len(out) > MAX_REASON_CHARS:
        half = MAX_REASON_CHARS // 2
        out = f"{out[:half]} … {out[-half:]}"
    return out


def record_sent(
    instance: dg.DagsterInstance,
    catalog: Catalog,
    alerts: Sequence[Alert],
    notifier: NotifierResource,
    unsent: Collection[int] = (),
) -> int:
    """Record each sent alert (all but the `unsent` indexes) as an observation of its pipeline's
    night summary, on the night's partition: its text and where it went show in the UI (the
    summary's events, and its partition's metadata when the alert came after the summary). A
    record that fails is logged: the alert went out all the same. Returns how many were recorded."""
    recorded = 0
    for index, alert in enumerate(alerts):
        if index in unsent or alert.pipeline not in catalog.pipelines:
            continue
        try:
            observation = alert_observation(catalog, alert, notifier.destination(alert))
            instance.report_runless_asset_event(observation)
            recorded += 1
        except Exception as exc:  # the event log's database: the alert itself was delivered
            _log.warning(f"alert {alert.title!r} was sent but not recorded in the UI: {exc}")
    return recorded


def alert_observation(catalog: Catalog, alert: Alert, destination: str) -> dg.AssetObservation:
    """The alert as its night summary's observation: what was said, how bad, where it went."""
    pipeline = catalog.pipelines[alert.pipeline]
    summary = pipeline.stages_of("night_summary")[0].name
    metadata: dict[str, dg.RawMetadataValue] = {
        "alert": f"{alert.severity}: {alert.title}",
        "sent_to": destination,
        "text": dg.MetadataValue.md(alert.text()),
    }
    if alert.run_id:
        metadata["alerted_run"] = dg.MetadataValue.dagster_run(alert.run_id)
    return dg.AssetObservation(
        asset_key=dg.AssetKey([pipeline.name, summary]),
        partition=_partition_of(alert, {t.name for t in pipeline.targets}),
        description=alert.title,
        metadata=metadata,
        tags={"nightly/alert_severity": alert.severity},
    )


def _partition_of(alert: Alert, targets: set[str]) -> str | None:
    """The night x target partition the alert is about; None for a whole night (a missing night
    names its targets in its text) or a run of no night."""
    night, _, target = alert.partition.partition("|")
    try:
        day = dt.date.fromisoformat(night)
    except ValueError:
        return None
    return str(partition_key(day, target)) if target in targets else None
