"""Run one night of one target through a Dagster instance, as the CLI and the tests do.

What follows the run is what the sensors do under the daemon (`reporting/follow_up.py`): stages
left running are ended, the alerts filed, and a night the run did not summarize gets its summary
in a follow-up run. An interrupted night (Ctrl-C, SIGTERM) ends `cancelled`, with no error alert.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dagster as dg

from nightly_assets.catalog.models import Catalog
from nightly_assets.night_lease import this_process_tag
from nightly_assets.night_threads import execute_in_threads
from nightly_assets.partitions import partition_key
from nightly_assets.pipelines import nightly_job_name
from nightly_assets.reporting.alerts import ALERT_CHECK, record_sent
from nightly_assets.reporting.follow_up import (
    CANCELLED,
    SUMMARY_OF_TAG,
    abandoned_runs,
    end_abandoned,
    follow_up_run,
    summary_stage,
)
from nightly_assets.reporting.night_runs import stage_error, was_interrupted
from nightly_assets.reporting.resources import Alert
from nightly_assets.reporting.sensors import summary_job_name
from nightly_assets.results import NightKey
from nightly_assets.warehouse.access import WarehouseError

if TYPE_CHECKING:
    from nightly_assets.warehouse.store import Warehouse

PROGRESS_EVENTS = {
    dg.DagsterEventType.STEP_START,
    dg.DagsterEventType.STEP_SUCCESS,
    dg.DagsterEventType.STEP_FAILURE,
    dg.DagsterEventType.STEP_SKIPPED,
    dg.DagsterEventType.ASSET_CHECK_EVALUATION,
}
# Progress lines report failures; Dagster's console log would repeat them with stack traces.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


class NightNotFinished(WarehouseError):
    """The night's run ended but the warehouse could not be reached to end the night: it reads
    `running` there until `unfinished_nights.end_unfinished` (or the daemon) ends it."""

    def __init__(self, key: NightKey, run_id: str, cause: str) -> None:
        super().__init__(f"{key}: run {run_id} ended but the night could not be ended: {cause}")
        self.key, self.run_id, self.cause = key, run_id, cause


@dataclass(frozen=True)
class NightOutcome:
    key: NightKey
    run: dg.DagsterRun
    succeeded: bool
    summary_run: dg.DagsterRun | None
    alerts: list[Alert]
    cancelled: bool = False
    unsent: dict[int, str] = field(default_factory=dict)  # alert index -> why it was not sent


def run_night(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    catalog: Catalog,
    key: NightKey,
    resources: Mapping[str, Any],
    progress: Callable[[str], None] | None = None,
) -> NightOutcome:
    """`resources`: the code location's resource definitions (`resources_for`); the notifier and the
    warehouse are resolved from them as a run would (EnvVars included)."""
    wanted = {name: resources[name] for name in ("notifier", "warehouse", "artefacts")}
    # On the run's instance: without one, Dagster makes an ephemeral instance for them each night.
    with dg.build_resources(wanted, instance=instance) as resolved:
        store = resolved.warehouse.store()
        earlier = store.night(key)
        if earlier is not None and earlier.status == "running":
            runs = abandoned_runs(instance, store, earlier)
            if runs is not None and progress:
                progress(f"{end_abandoned(store, earlier, runs)}; this run replaces it")
        succeeded, run = execute_partition(defs, instance, nightly_job_name(key.pipeline), key, progress)
        try:
            return _followed_up(defs, instance, catalog, key, run, succeeded, resolved, store, progress)
        except WarehouseError as exc:
            raise NightNotFinished(key, run.run_id, str(exc)) from exc


def _followed_up(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    catalog: Catalog,
    key: NightKey,
    run: dg.DagsterRun,
    succeeded: bool,
    resolved: Any,
    store: Warehouse,
    progress: Callable[[str], None] | None,
) -> NightOutcome:
    """What follows the night's run: alerts, the summary run where it is due, the outcome."""
    cancelled = run.status == dg.DagsterRunStatus.CANCELED
    done = follow_up_run(instance, run, catalog, resolved.notifier, store)
    if done is not None:  # the UI shows what was sent, as under the daemon's sensors
        record_sent(instance, catalog, done.alerts, resolved.notifier, done.unsent, store, resolved.artefacts)
    summary_run = None
    alerts, unsent = (done.alerts, dict(done.unsent)) if done else ([], {})
    summaries, selections = (done.summaries, done.selections) if done else ([], {})
    for night in summaries:
        if progress and summary_stage(catalog, night.key.pipeline) in night.materialized:
            progress("the stages after the summary ended; writing it again in a follow-up run")
        elif progress:
            why = "was cancelled" if cancelled else "ended before its summary"
            progress(f"the night {why}; writing its summary in a follow-up run")
        _, summary_run = execute_partition(
            defs,
            instance,
            summary_job_name(night.key.pipeline),
            night.key,
            progress,
            tags={SUMMARY_OF_TAG: run.run_id},
            assets=selections.get(night.key),
        )
        # Its checks (the test health judged there) alert as the daemon's sensor would.
        summarized = follow_up_run(instance, summary_run, catalog, resolved.notifier, store)
        if summarized is not None:
            record_sent(
                instance,
                catalog,
                summarized.alerts,
                resolved.notifier,
                summarized.unsent,
                store,
                resolved.artefacts,
            )
            unsent |= {len(alerts) + i: why for i, why in summarized.unsent.items()}
            alerts = [*alerts, *summarized.alerts]
    run = instance.get_run_by_id(run.run_id) or run
    return NightOutcome(key, run, succeeded, summary_run, alerts, cancelled, unsent)


def execute_partition(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    job: str,
    key: NightKey,
    progress: Callable[[str], None] | None = None,
    tags: dict[str, str] | None = None,
    assets: list[dg.AssetKey] | None = None,
) -> tuple[bool, dg.DagsterRun]:
    """Execute `job` for the key's partition in this process, independent stages at once
    (night_threads.py). Ctrl-C or SIGTERM cancels the run:
    Dagster interrupts the running step (which ends its commands, containers and machines), and
    the run is then marked cancelled rather than failed."""
    run_id = str(uuid.uuid4())
    if progress:
        instance.add_event_listener(run_id, _ProgressPrinter(progress))
    succeeded = execute_in_threads(
        defs.resolve_job_def(job),
        instance,
        partition_key=str(partition_key(key.night, key.target)),
        run_id=run_id,
        run_config=QUIET_LOGS,
        tags={**this_process_tag(run_id), **(tags or {})},
        asset_selection=assets,
    )
    run = instance.get_run_by_id(run_id)
    assert run is not None
    if run.status == dg.DagsterRunStatus.FAILURE and _interrupted(instance, run_id):
        instance.report_run_canceled(run, message="Interrupted (Ctrl-C or SIGTERM): the night is cancelled.")
        run = instance.get_run_by_id(run_id) or run
    return succeeded, run


def _interrupted(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Whether the run ended because this process was interrupted, not because a stage failed."""
    for record in instance.get_records_for_run(
        run_id, of_type={dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE}
    ).records:
        event = record.event_log_entry.dagster_event
        if event is None:
            continue
        if event.event_type == dg.DagsterEventType.STEP_FAILURE:
            if was_interrupted(event.step_failure_data):
                return True
        elif "interrupted" in (event.message or ""):
            return True
    return False


class _ProgressPrinter:
    """A progress line for each event of the run as the instance stores it: the run executes in
    this process, so the instance hands each event to its listeners (no polling of the event log)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say: Callable[[str], None] | None = say
        self.started = time.monotonic()

    def __call__(self, entry: Any) -> None:
        line = progress_line(entry)
        if line is None or self.say is None:
            return
        try:
            self.say(f"[{time.monotonic() - self.started:6.1f}s] {line}")
        except OSError:  # the output is gone (`nightly run | head` ended): the night goes on unprinted
            self.say = None


def progress_line(entry: Any) -> str | None:
    event = entry.dagster_event
    if event is None:  # a stage's own log line: only its warnings are progress
        if entry.level < logging.WARNING or not entry.user_message:
            return None
        return f"warning  {entry.step_key or ''}: {entry.user_message.splitlines()[0][:300]}"
    if event.event_type not in PROGRESS_EVENTS:
        return None
    step = event.step_key or ""
    match event.event_type:
        case dg.DagsterEventType.STEP_START:
            return f"started  {step}"
        case dg.DagsterEventType.STEP_SUCCESS:
            return f"done     {step} ({event.event_specific_data.duration_ms / 1000:.1f}s)"
        case dg.DagsterEventType.STEP_FAILURE:
            data = event.step_failure_data
            if was_interrupted(data):
                return f"{CANCELLED.upper():<8} {step} (interrupted)"
            lines = stage_error(data.error, data.user_failure_data).splitlines() or ["failed"]
            more = f"\n{'':11}".join(lines[1:8])
            return f"FAILED   {step}: {lines[0][:300]}" + (f"\n{'':11}{more}" if more else "")
        case dg.DagsterEventType.STEP_SKIPPED:
            return f"skipped  {step} (an upstream stage failed)"
        case dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            ev = event.event_specific_data
            if ev.check_name == ALERT_CHECK:  # the alerts, which the command prints as it sends them
                return None
            verdict = "passed" if ev.passed else f"FAILED ({ev.severity.value})"
            line = f"check    {ev.asset_key.to_user_string()}:{ev.check_name} {verdict}"
            if not ev.passed and ev.description:
                line += f": {ev.description.splitlines()[0][:200]}"
            return line
    return None
