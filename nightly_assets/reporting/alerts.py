"""Turn a finished run into alerts: one per night it touched, naming failed stages and checks."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import dagster as dg

from nightly_assets.catalog.cadence import SLOT_MARK
from nightly_assets.catalog.models import Catalog
from nightly_assets.partitions import partition_key
from nightly_assets.reporting.night_runs import NightInRun, RunRecord
from nightly_assets.reporting.resources import Alert, NotifierResource
from nightly_assets.results import NightKey
from nightly_assets.warehouse.rows import SentAlert

if TYPE_CHECKING:
    from nightly_assets.artefacts.resources import ArtefactStoreResource
    from nightly_assets.warehouse.store import Warehouse

_log = logging.getLogger(__name__)

PIPELINE_TAG = "nightly/pipeline"
ALERT_CHECK = "night_alert"  # the summary's check that shows the alerts sent about its night
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
        if check.name == ALERT_CHECK:
            continue  # the alerts already sent, shown on the summary: never an alert again
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
    store: Warehouse | None = None,
    artefacts: ArtefactStoreResource | None = None,
) -> int:
    """Record each sent alert (all but the `unsent` indexes) where people look, as what it is:
    - in the warehouse, the night's record of its alerts (`store`);
    - as the `night_alert` check of its night's summary, on the night x target's partition:
      failed, ERROR for an error alert and WARN for a warning (red or yellow in the UI, never a
      success colour), with the alerts' texts, where they went and the run they are about; the
      evaluation is an error or warning event in the log of that run;
    - on the pipeline's results site (its alerts page), when `artefacts` keeps one.
    A record that fails is logged: the alert went out all the same. Returns how many were recorded."""
    recorded = 0
    for index, alert in enumerate(alerts):
        if index in unsent or alert.pipeline not in catalog.pipelines:
            continue
        destination = notifier.destination(alert)
        try:
            keys = alert_keys(catalog, alert)
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)  # naive UTC, as the warehouse keeps times
            sent = SentAlert(alert.run_id, alert.severity, alert.title, alert.text(), destination, now)
            for key in keys:
                about_run = [sent]
                if store is not None:
                    try:
                        store.record_alert(key, sent)
                        about_run = store.alerts(key, run_id=alert.run_id)
                    except Exception as exc:  # WarehouseError: the UI still shows it
                        _log.warning(f"alert {alert.title!r} was sent but not kept in the warehouse: {exc}")
                evaluation = alert_evaluation(catalog, key, about_run)
                run = instance.get_run_by_id(alert.run_id) if alert.run_id else None
                if run is not None:
                    _report_in_run(instance, run, evaluation, alert, destination)
                else:  # a missing night: no run to tell
                    instance.report_runless_asset_event(evaluation)
            recorded += 1
        except Exception as exc:  # the event log's database: the alert was delivered all the same
            _log.warning(f"alert {alert.title!r} was sent but not recorded in the UI: {exc}")
    if recorded and store is not None and artefacts is not None and artefacts.results_site:
        from nightly_assets.site.publish import update_sites  # run time only: Jinja, matplotlib

        shown = sorted(
            {a.pipeline for i, a in enumerate(alerts) if i not in unsent and a.pipeline in catalog.pipelines}
        )
        update_sites([catalog.pipelines[name] for name in shown], store, artefacts, _log)
    return recorded


def alert_keys(catalog: Catalog, alert: Alert) -> list[NightKey]:
    """The night x target keys an alert is about: its partition's; every target of its night for
    a whole night (a missing night); none for a run of no night."""
    pipeline = catalog.pipelines[alert.pipeline]
    night, _, target = alert.partition.partition("|")
    night, slot, hour = night.partition(SLOT_MARK)  # a missing slot: "<night>@<HH>", every target's cell
    try:
        day = dt.date.fromisoformat(night)
        targets = pipeline.cells(int(hour) if slot else None)
    except ValueError:
        return []
    if not target:
        return [NightKey(pipeline.name, day, t) for t in targets]
    return [NightKey(pipeline.name, day, target)] if target in targets else []


def night_alert_spec(summary: dg.AssetKey) -> dg.AssetCheckSpec:
    """The summary's check that shows the alerts sent about its night as what they are."""
    return dg.AssetCheckSpec(
        ALERT_CHECK,
        asset=summary,
        description="The alerts sent about the night's run: failed ERROR for an error alert, failed "
        "WARN for a warning, passed while none was sent; with their texts, destination and run.",
    )


def alert_check(about_run: Sequence[SentAlert], run_id: str) -> dg.AssetCheckResult:
    """The `night_alert` result of a night whose run `run_id` sent `about_run` (summary runs)."""
    passed, severity, description, metadata = _alert_verdict(about_run, run_id)
    return dg.AssetCheckResult(
        check_name=ALERT_CHECK, passed=passed, severity=severity, description=description, metadata=metadata
    )


def alert_evaluation(
    catalog: Catalog, key: NightKey, about_run: Sequence[SentAlert]
) -> dg.AssetCheckEvaluation:
    """The `night_alert` evaluation of the key's partition once alerts were sent about a run."""
    pipeline = catalog.pipelines[key.pipeline]
    summary = pipeline.stages_of("night_summary")[0].name
    run_id = about_run[-1].run_id if about_run else ""
    passed, severity, description, metadata = _alert_verdict(about_run, run_id)
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey([pipeline.name, summary]),
        check_name=ALERT_CHECK,
        passed=passed,
        severity=severity,
        description=description,
        metadata=metadata,
        partition=str(partition_key(key.night, key.target)),
    )


def _alert_verdict(
    about_run: Sequence[SentAlert], run_id: str
) -> tuple[bool, dg.AssetCheckSeverity, str, dict[str, dg.RawMetadataValue]]:
    """Passed with no alert; else failed at the worst alert's severity, naming each alert."""
    metadata: dict[str, dg.RawMetadataValue] = {}
    if run_id:
        metadata["alerted_run"] = dg.MetadataValue.dagster_run(run_id)
    if not about_run:
        return True, dg.AssetCheckSeverity.WARN, "no alert was sent about this run", metadata
    worst = "error" if any(a.severity == "error" for a in about_run) else "warn"
    severity = dg.AssetCheckSeverity.ERROR if worst == "error" else dg.AssetCheckSeverity.WARN
    metadata["alert"] = "; ".join(f"{a.severity}: {a.title}" for a in about_run)
    metadata["sent_to"] = ", ".join(dict.fromkeys(a.destination for a in about_run))
    metadata["text"] = dg.MetadataValue.md("\n\n".join(a.text for a in about_run))
    description = "; ".join(f"{a.severity} alert sent to {a.destination}: {a.title}" for a in about_run)
    return False, severity, description, metadata


def _report_in_run(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    evaluation: dg.AssetCheckEvaluation,
    alert: Alert,
    destination: str,
) -> None:
    """The evaluation as an event of the run the alert is about: an error (or warning) line in its
    log, and the check's execution for that run x partition, replaced as more alerts about the
    run go out (Dagster keeps one runless execution per check x partition, not one per alert)."""
    from dagster._core.events import DagsterEvent, DagsterEventType  # no public way to add it to a run

    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_CHECK_EVALUATION.value,
        job_name=run.job_name,
        message=f"{alert.severity} alert sent to {destination}: {alert.title}",
        event_specific_data=evaluation,
    )
    level = logging.ERROR if alert.severity == "error" else logging.WARNING
    instance.report_dagster_event(event, run_id=run.run_id, log_level=level)
