"""Run one night of one target through a Dagster instance, as the CLI and the tests do.

A failed night still gets its summary (a follow-up run of the summary job, as the failure
sensor does under the daemon) and its alerts (the same function the sensors call).
"""

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEventType

from nightly_assets.catalog.models import Catalog
from nightly_assets.partitions import partition_key
from nightly_assets.pipelines import nightly_job_name
from nightly_assets.reporting.alerts import alerts_for_run
from nightly_assets.reporting.resources import Alert, NotifierResource
from nightly_assets.reporting.sensors import summary_job_name
from nightly_assets.results import NightKey

PROGRESS_EVENTS = {
    DagsterEventType.STEP_START,
    DagsterEventType.STEP_SUCCESS,
    DagsterEventType.STEP_FAILURE,
    DagsterEventType.STEP_SKIPPED,
    DagsterEventType.ASSET_CHECK_EVALUATION,
}
# Progress lines report failures; Dagster's console log would repeat them with stack traces.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass(frozen=True)
class NightOutcome:
    key: NightKey
    run: dg.DagsterRun
    succeeded: bool
    summary_run: dg.DagsterRun | None
    alerts: list[Alert]


def run_night(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    catalog: Catalog,
    key: NightKey,
    notifier: NotifierResource,
    progress: Callable[[str], None] | None = None,
) -> NightOutcome:
    succeeded, run = execute_partition(defs, instance, nightly_job_name(key.pipeline), key, progress)
    summary_run = None
    if not succeeded:
        if progress:
            progress("the night failed; writing its summary in a follow-up run")
        _, summary_run = execute_partition(defs, instance, summary_job_name(key.pipeline), key, progress)
    alerts = alerts_for_run(instance, run, catalog)
    for alert in alerts:
        notifier.notify(alert)
    return NightOutcome(key, run, succeeded, summary_run, alerts)


def execute_partition(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    job: str,
    key: NightKey,
    progress: Callable[[str], None] | None = None,
    tags: dict[str, str] | None = None,
) -> tuple[bool, dg.DagsterRun]:
    run_id = str(uuid.uuid4())
    done = threading.Event()
    printer = None
    if progress:
        printer = threading.Thread(target=_follow, args=(instance, run_id, done, progress), daemon=True)
        printer.start()
    try:
        result = defs.resolve_job_def(job).execute_in_process(
            instance=instance,
            partition_key=str(partition_key(key.night, key.target)),
            run_id=run_id,
            raise_on_error=False,
            run_config=QUIET_LOGS,
            tags=tags,
        )
    finally:
        done.set()
        if printer:
            printer.join()
    run = instance.get_run_by_id(run_id)
    assert run is not None
    return result.success, run


def _follow(
    instance: dg.DagsterInstance, run_id: str, done: threading.Event, say: Callable[[str], None]
) -> None:
    cursor: str | None = None
    started = time.monotonic()
    while True:
        finished = done.is_set()
        conn = instance.get_records_for_run(run_id, cursor=cursor, of_type=PROGRESS_EVENTS)
        cursor = conn.cursor
        for record in conn.records:
            line = progress_line(record.event_log_entry)
            if line:
                say(f"[{time.monotonic() - started:6.1f}s] {line}")
        if finished and not conn.has_more:
            return
        if not conn.has_more:
            done.wait(0.3)


def progress_line(entry: Any) -> str | None:
    event = entry.dagster_event
    if event is None:
        return None
    step = event.step_key or ""
    match event.event_type:
        case DagsterEventType.STEP_START:
            return f"started  {step}"
        case DagsterEventType.STEP_SUCCESS:
            return f"done     {step} ({event.event_specific_data.duration_ms / 1000:.1f}s)"
        case DagsterEventType.STEP_FAILURE:
            error = event.step_failure_data.error
            first = error.message.strip().splitlines()[0] if error else ""
            return f"FAILED   {step}: {first[:200]}"
        case DagsterEventType.STEP_SKIPPED:
            return f"skipped  {step} (an upstream stage failed)"
        case DagsterEventType.ASSET_CHECK_EVALUATION:
            ev = event.event_specific_data
            verdict = "passed" if ev.passed else f"FAILED ({ev.severity.value})"
            return f"check    {ev.asset_key.to_user_string()}:{ev.check_name} {verdict}"
    return None
