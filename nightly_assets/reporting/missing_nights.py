"""Missing nights: a night whose summary did not materialize by its deadline, the schedule's tick
plus the pipeline's `thresholds.summary_deadline_hours` (the summary asset's freshness policy).

No run-status sensor hears of a night whose run never started (the schedule was off, the daemon
was down at its tick), and Dagster's freshness state is the whole asset's (its latest
materialization of any night or target), not each night x target's. So each night is judged here,
once, when its deadline passes: the deadline from the pipeline's cron, and each target's summary
partition from Dagster's materializations. The alert says why the night is likely missing.

A deployment alerts only on the nights it was meant to run: a first start on 11-26 does not report
11-24 missing. And it never stalls its tick on Slack: missing nights are queued in the cursor, sent
in parallel with short timeouts, and what is not sent stays queued for the next tick.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import dagster as dg

# Not in Dagster's public API: schedule states and ticks (dagster._core.scheduler, imported where a
# sensor tick reads them: loading the code location does not need it), the scheduler's own cron
# iteration, and the clock its freshness daemon reads (dagster's freeze_time sets it in tests).
from dagster._time import get_current_datetime
from dagster._utils.schedules import cron_string_iterator

from nightly_assets.catalog.cadence import SLOT_MARK
from nightly_assets.catalog.models import Catalog, Pipeline
from nightly_assets.partitions import night_key, partition_key, runs_of_tick
from nightly_assets.reporting.alerts import PIPELINE_TAG, brief
from nightly_assets.reporting.follow_up import summary_stage
from nightly_assets.reporting.resources import Alert, NotifierResource

if TYPE_CHECKING:
    from dagster._core.scheduler.instigation import InstigatorState

PARTITION_TAG = "dagster/partition"
FIRST_LOOKBACK = dt.timedelta(days=1)  # a new sensor (or a reset cursor) judges the latest night
MAX_LOOKBACK = dt.timedelta(days=7)  # after a longer outage, older nights are not alerted one by one
# A sensor tick is cut off after 60 s (Dagster's default): alerts are sent in parallel, and what has no
# answer after SEND_BUDGET_S stays queued in the cursor for the next tick.
SEND_BUDGET_S = 20.0
MAX_PARALLEL_SENDS = 8


@dataclass(frozen=True)
class DueNight:
    """A night (or a run slot) whose summaries were due: the schedule tick that runs it, its
    deadline (UTC), and the partition's target values it runs (a slot: each target's cell)."""

    pipeline: Pipeline
    night: dt.date
    tick: dt.datetime
    deadline: dt.datetime
    cells: tuple[str, ...]

    @property
    def name(self) -> str:
        """How alerts name it: "night 2026-11-27", or "slot 2026-11-28 06:00"."""
        if not self.pipeline.slotted:
            return f"night {self.night.isoformat()}"
        return f"slot {self.night.isoformat()} {self.tick:%H}:00"

    @property
    def partition(self) -> str:
        """The alert's partition: the night, or `<night>@<HH>` (a slot: every target's cell at HH)."""
        night = self.night.isoformat()
        return f"{night}{SLOT_MARK}{self.tick:%H}" if self.pipeline.slotted else night


@dataclass(frozen=True)
class Judged:
    """What one evaluation did: the sensor's next cursor, the alerts sent and the ones not sent."""

    cursor: str
    sent: list[Alert]
    unsent: dict[str, str]  # title -> why; kept in the cursor, sent again on the next evaluation


@dataclass
class MissingNightCursor:
    """What the sensor keeps between evaluations (as JSON in its cursor)."""

    judged: dict[str, str] = field(default_factory=dict)  # pipeline -> the last deadline judged
    # pipeline -> when this sensor first judged it (the deployment, or the pipeline's addition)
    watched_since: dict[str, str] = field(default_factory=dict)
    queued: list[Alert] = field(default_factory=list)  # judged missing, not sent yet

    @classmethod
    def parse(cls, cursor: str | None) -> MissingNightCursor:
        document = json.loads(cursor) if cursor else {}
        if "judged" not in document:  # the first format: only the judged deadlines, by pipeline
            return cls(judged=dict(document))
        return cls(
            judged=dict(document["judged"]),
            watched_since=dict(document.get("watched_since", {})),
            queued=[Alert(**alert) for alert in document.get("queued", [])],
        )

    def dumps(self) -> str:
        document = {
            "judged": self.judged,
            "watched_since": self.watched_since,
            "queued": [asdict(alert) for alert in self.queued],
        }
        return json.dumps(document, sort_keys=True)


def alert_missing_nights(
    instance: dg.DagsterInstance,
    catalog: Catalog,
    schedules: Mapping[str, dg.ScheduleDefinition],
    cursor: str | None,
    notifier: NotifierResource,
    location: str | None = None,
    send_budget_s: float = SEND_BUDGET_S,
) -> Judged:
    """Judge every night whose deadline passed since the cursor (per pipeline: the last deadline
    judged) and alert on each missing one; `location` picks the code location's schedule states.

    Only nights the deployment was meant to run are judged: whose schedule tick came after this
    sensor first watched the pipeline, or no older than the earliest night the pipeline has in this
    instance (a run or a summary). Alerts are queued in the cursor and sent in parallel for at most
    `send_budget_s`; the ones not sent stay queued for the next evaluation."""
    now = get_current_datetime()
    state = MissingNightCursor.parse(cursor)
    states = schedule_states(instance, location)
    for pipeline in catalog.pipelines.values():
        if pipeline.name not in state.judged:
            state.watched_since.setdefault(pipeline.name, now.isoformat())
        state.queued.extend(_judge(instance, catalog, pipeline, schedules[pipeline.name], states, state, now))
    sent, unsent = send_in_parallel(state.queued, notifier, send_budget_s)
    state.queued = [alert for alert in state.queued if alert.title in unsent]
    return Judged(state.dumps(), sent, unsent)


def _judge(
    instance: dg.DagsterInstance,
    catalog: Catalog,
    pipeline: Pipeline,
    schedule: dg.ScheduleDefinition,
    states: Mapping[str, InstigatorState],
    state: MissingNightCursor,
    now: dt.datetime,
) -> list[Alert]:
    """The alerts of the pipeline's nights due since the cursor; advances its judged deadline."""
    summary = dg.AssetKey([pipeline.name, summary_stage(catalog, pipeline.name)])
    schedule_state = states.get(schedule.name)
    expected = meant_to_run(schedule, schedule_state)  # a schedule off by design misses no night
    since = state.watched_since.get(pipeline.name)
    watched_since = dt.datetime.fromisoformat(since) if since else None
    first_night: list[dt.date | None] = []  # looked up once, only for a night ticked before that
    alerts = []
    for due in due_nights(pipeline, _since(state.judged.get(pipeline.name), now), now):
        state.judged[pipeline.name] = due.deadline.isoformat()
        if not expected:
            continue
        if watched_since is not None and due.tick < watched_since:
            if not first_night:
                first_night.append(earliest_night(instance, pipeline.name, summary))
            if first_night[0] is None or due.night < first_night[0]:
                continue  # before this deployment watched it, and before the pipeline first ran
        alert = missing_night_alert(instance, summary, due, schedule, schedule_state)
        if alert is not None:
            alerts.append(alert)
    return alerts


def earliest_night(instance: dg.DagsterInstance, pipeline: str, summary: dg.AssetKey) -> dt.date | None:
    """The earliest night the pipeline has in this instance: of a run, or of a summary."""
    partitions = {
        data.partition
        for data in instance.get_run_partition_data(dg.RunsFilter(tags={PIPELINE_TAG: pipeline}))
    }
    partitions |= instance.get_materialized_partitions(summary)
    nights = []
    for partition in partitions:
        try:
            nights.append(night_key(pipeline, partition).night)
        except ValueError:  # not a night x target key
            continue
    return min(nights, default=None)


def send_in_parallel(
    alerts: Sequence[Alert], notifier: NotifierResource, budget_s: float
) -> tuple[list[Alert], dict[str, str]]:
    """Send each alert on its own thread and wait at most `budget_s` for all of them: the alerts
    sent, and the others by title with why. One that has no answer by then counts as unsent (sent
    again later: it may then arrive twice, never not at all)."""
    if not alerts:
        return [], {}
    pool = ThreadPoolExecutor(min(len(alerts), MAX_PARALLEL_SENDS), thread_name_prefix="missing-night-alert")
    futures = {pool.submit(notifier.notify, alert): alert for alert in alerts}
    done, _ = wait(futures, timeout=budget_s)
    pool.shutdown(wait=False, cancel_futures=True)  # a notifier that ignores its timeout is not waited for
    sent, unsent = [], {}
    for future, alert in futures.items():
        error = future.exception() if future in done else None
        if future not in done:
            unsent[alert.title] = f"no answer within {budget_s:g} s"
        elif error is not None:
            unsent[alert.title] = f"{type(error).__name__}: {error}"
        else:
            sent.append(alert)
    return sent, unsent


def _since(last_judged: str | None, now: dt.datetime) -> dt.datetime:
    if last_judged is None:
        return now - FIRST_LOOKBACK
    return max(dt.datetime.fromisoformat(last_judged), now - MAX_LOOKBACK)


def due_nights(pipeline: Pipeline, after: dt.datetime, until: dt.datetime) -> list[DueNight]:
    """The pipeline's nights whose summary deadline falls in (after, until], oldest first."""
    window = dt.timedelta(hours=pipeline.summary_deadline_hours)
    due: list[DueNight] = []
    for tick in cron_string_iterator((after - window).timestamp(), pipeline.cron, "UTC"):
        deadline = tick + window
        if deadline > until:
            break
        night, cells = runs_of_tick(pipeline, tick)
        if deadline > after and night >= pipeline.start_date:
            due.append(DueNight(pipeline, night, tick, deadline, tuple(cells)))
    return due


def missing_night_alert(
    instance: dg.DagsterInstance,
    summary: dg.AssetKey,
    due: DueNight,
    schedule: dg.ScheduleDefinition,
    state: InstigatorState | None,
) -> Alert | None:
    """The alert for a night some target of which has no summary; None when every target has one."""
    targets = [cell for cell in due.cells if not _summarized(instance, summary, due.night, cell)]
    if not targets:
        return None
    pipeline = due.pipeline
    hours = pipeline.summary_deadline_hours
    return Alert(
        pipeline.name,
        due.partition,
        "error",
        f"{pipeline.name} {due.name} is missing",
        "",
        pipeline.notify_channel,
        [
            f"no summary of {', '.join(targets)} by its deadline {due.deadline:%Y-%m-%d %H:%M} UTC "
            f"({hours} h after the {due.tick:%H:%M} UTC tick of {schedule.name})",
            likely_cause(instance, due, targets, schedule, state),
        ],
    )


def _summarized(instance: dg.DagsterInstance, summary: dg.AssetKey, night: dt.date, target: str) -> bool:
    partition = str(partition_key(night, target))
    records = dg.AssetRecordsFilter(asset_key=summary, asset_partitions=[partition])
    return bool(instance.fetch_materializations(records, limit=1).records)


def likely_cause(
    instance: dg.DagsterInstance,
    due: DueNight,
    targets: list[str],
    schedule: dg.ScheduleDefinition,
    state: InstigatorState | None,
) -> str:
    """Why `targets` have no summary of the night: how their runs ended, else the schedule and its tick."""
    runs = {t: _latest_run(instance, due, t) for t in targets}
    if any(runs.values()):
        ends = "; ".join(
            f"{t} run {r.run_id[:8]} {r.status.value.lower()}" if r else f"{t} no run"
            for t, r in runs.items()
        )
        return f"likely cause: a run started but wrote no summary ({ends})"
    if not is_running(schedule, state):
        return f"likely cause: schedule off: {schedule.name} is stopped (start it, then backfill the night)"
    return f"likely cause: no run started: {_tick_outcome(instance, due, schedule, state)}"


def _tick_outcome(
    instance: dg.DagsterInstance,
    due: DueNight,
    schedule: dg.ScheduleDefinition,
    state: InstigatorState | None,
) -> str:
    """What the schedule did at the night's tick, as the scheduler recorded it."""
    at = f"{due.tick:%Y-%m-%d %H:%M} UTC"
    tick = (
        instance.get_tick(state.instigator_origin_id, state.selector_id, due.tick.timestamp())
        if state is not None
        else None  # the scheduler never ran it
    )
    if tick is None:
        return f"{schedule.name} did not tick at {at} (the daemon was down, or the schedule was off then)"
    from dagster._core.scheduler.instigation import TickStatus

    if tick.status == TickStatus.SUCCESS:
        return f"{schedule.name} ticked at {at}, yet no run of the night exists"
    why = tick.error.message if tick.error else tick.skip_reason or "no reason given"
    return f"{schedule.name}'s tick at {at} {tick.status.value.lower()}: {brief(why)}"


def _latest_run(instance: dg.DagsterInstance, due: DueNight, target: str) -> dg.DagsterRun | None:
    tags = {PIPELINE_TAG: due.pipeline.name, PARTITION_TAG: str(partition_key(due.night, target))}
    runs = instance.get_runs(dg.RunsFilter(tags=tags), limit=1)  # newest first
    return runs[0] if runs else None


def schedule_states(instance: dg.DagsterInstance, location: str | None) -> dict[str, InstigatorState]:
    """The stored state of each schedule by name (none: never started nor stopped by hand, nor ticked)."""
    from dagster._core.scheduler.instigation import InstigatorType

    states = instance.all_instigator_state(instigator_type=InstigatorType.SCHEDULE)
    return {
        s.instigator_name: s
        for s in states
        if location is None or s.origin.repository_origin.code_location_origin.location_name == location
    }


def meant_to_run(schedule: dg.ScheduleDefinition, state: InstigatorState | None) -> bool:
    """Whether the schedule's nights are expected: the deployment runs it by default (a stopped one
    is then the cause of a missing night), or someone started it."""
    from dagster._core.scheduler.instigation import InstigatorStatus

    running_by_default = schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    return running_by_default or (state is not None and state.status == InstigatorStatus.RUNNING)


def is_running(schedule: dg.ScheduleDefinition, state: InstigatorState | None) -> bool:
    from dagster._core.scheduler.instigation import InstigatorStatus

    if state is None or state.status == InstigatorStatus.DECLARED_IN_CODE:
        return schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    return state.status == InstigatorStatus.RUNNING
