"""What follows every finished run that touched a night, whoever launched it: stages it left
`running` are ended, its alerts are filed, and nights it did not summarize, or summarized before
the stages after the summary (a release) ended, get a summary run.

The sensors call this under the daemon, and `nightly run` calls it itself; the run tag
`nightly/followed_up` makes sure only one of them does it for a run. Nothing is lost when Slack
or the warehouse is down: the tag then says `retry` (the warehouse work failed) or `alerts` (some
alerts were not sent, their indexes in `nightly/unsent_alerts`), and `night_status_repair` picks
the run up again; a run-status sensor cannot, its cursor moves past a run whose follow-up raised.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dagster as dg

from nightly_assets.catalog.models import Catalog
from nightly_assets.culprits.sensors import culprit_job_name
from nightly_assets.night_lease import FINISHED_STATUSES, PROCESS_TAG, SUMMARY_OF_TAG, process_gone
from nightly_assets.reporting.alerts import alerts_for_run
from nightly_assets.reporting.night_runs import NightInRun, RunRecord, read_run
from nightly_assets.reporting.resources import Alert, NotifierResource
from nightly_assets.reporting.summary import stages_after
from nightly_assets.results import NightKey
from nightly_assets.warehouse.rows import NightRow

if TYPE_CHECKING:
    from nightly_assets.warehouse.store import Warehouse

FOLLOWED_UP_TAG = "nightly/followed_up"
RETRY = "retry"  # FOLLOWED_UP_TAG: the follow-up failed before its warehouse work was done
ALERTS_UNSENT = "alerts"  # FOLLOWED_UP_TAG: done, but for the alerts listed in UNSENT_TAG
UNSENT_TAG = "nightly/unsent_alerts"
# A night whose run this instance does not know (launched against another DAGSTER_HOME) is only
# taken for abandoned once nobody has written to it for this long.
UNKNOWN_RUN_GRACE = dt.timedelta(hours=24)
FOLLOW_UP_GRACE_S = 600  # a run ended this recently may still be followed up by its sensor
CANCELLED = "cancelled"


@dataclass(frozen=True)
class FollowUp:
    record: RunRecord
    alerts: list[Alert]
    summaries: list[NightInRun]  # nights whose summary a follow-up run must write
    ended: dict[NightKey, list[str]] = field(default_factory=dict)  # stages this run left running
    unsent: dict[int, str] = field(default_factory=dict)  # alert index -> why it was not sent
    # what each summary run materializes: the summary, and the test_health stages the run did not
    selections: dict[NightKey, list[dg.AssetKey]] = field(default_factory=dict)


def summary_stage(catalog: Catalog, pipeline: str) -> str:
    return catalog.pipelines[pipeline].stages_of("night_summary")[0].name


def summary_run_stages(catalog: Catalog, pipeline: str) -> list[str]:
    """What a summary run may materialize: the summary, and the test_health stages before it, which
    read the warehouse only (a night whose suites failed is judged all the same)."""
    stages = catalog.pipelines[pipeline].stages_of("test_health")
    return [*(s.name for s in stages), summary_stage(catalog, pipeline)]


def summary_selection(catalog: Catalog, night: NightInRun) -> list[dg.AssetKey]:
    """The summary, and each test_health stage that neither materialized nor failed in the run."""
    failed = {f.stage for f in night.failed_steps}
    stages = summary_run_stages(catalog, night.key.pipeline)
    wanted = [s for s in stages[:-1] if s not in night.materialized and s not in failed] + stages[-1:]
    return [dg.AssetKey([night.key.pipeline, stage]) for stage in wanted]


def follow_up_run(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    catalog: Catalog,
    notifier: NotifierResource,
    store: Warehouse,
) -> FollowUp | None:
    """Follow up a finished run once; None when another process already did."""
    current = instance.get_run_by_id(run.run_id) or run
    # The tag holds the run's own id: a re-execution inherits its parent's tags, not its follow-up.
    if current.tags.get(FOLLOWED_UP_TAG) in (run.run_id, ALERTS_UNSENT):
        return None
    instance.add_run_tags(run.run_id, {FOLLOWED_UP_TAG: run.run_id})
    try:
        done = _follow_up(instance, current, catalog, notifier, store)
    except BaseException:
        # Not done (the warehouse is down): night_status_repair tries again.
        instance.add_run_tags(run.run_id, {FOLLOWED_UP_TAG: RETRY})
        raise
    if done.unsent:
        instance.add_run_tags(run.run_id, _unsent_tags(done.unsent))
    return done


def _unsent_tags(unsent: dict[int, str]) -> dict[str, str]:
    return {FOLLOWED_UP_TAG: ALERTS_UNSENT, UNSENT_TAG: ",".join(map(str, sorted(unsent)))}


def send_alerts(alerts: list[Alert], notifier: NotifierResource) -> dict[int, str]:
    """Send each alert on its own; the ones that failed, by index, with the error."""
    unsent = {}
    for index, alert in enumerate(alerts):
        try:
            notifier.notify(alert)
        except Exception as exc:  # Slack down, a full disk: the others still go, this one is kept
            unsent[index] = f"{type(exc).__name__}: {exc}"
    return unsent


def resend_unsent_alerts(
    instance: dg.DagsterInstance, run: dg.DagsterRun, catalog: Catalog, notifier: NotifierResource
) -> dict[int, str]:
    """Send again the alerts a follow-up could not send (the alerts are rebuilt from the run's
    events, which do not change); what is still unsent, by index."""
    alerts = alerts_for_run(read_run(instance, run, catalog), catalog)
    wanted = sorted({int(i) for i in run.tags.get(UNSENT_TAG, "").split(",") if i.isdigit()})
    wanted = [i for i in wanted if i < len(alerts)]
    unsent = send_alerts([alerts[i] for i in wanted], notifier)
    still = {wanted[j]: why for j, why in unsent.items()}
    done = {FOLLOWED_UP_TAG: run.run_id, UNSENT_TAG: ""}
    instance.add_run_tags(run.run_id, _unsent_tags(still) if still else done)
    return still


def runs_to_follow_up_again(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """Finished runs whose follow-up failed or left alerts unsent."""
    return list(
        instance.get_runs(
            dg.RunsFilter(tags={FOLLOWED_UP_TAG: [RETRY, ALERTS_UNSENT]}, statuses=list(FINISHED_STATUSES))
        )
    )


def _follow_up(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    catalog: Catalog,
    notifier: NotifierResource,
    store: Warehouse,
) -> FollowUp:
    record = read_run(instance, run, catalog)
    ended: dict[NightKey, list[str]] = {}
    summaries = []
    status = CANCELLED if record.interrupted else "failure"
    for night in record.nights:
        stuck = store.end_stages(night.key, run_id=run.run_id, status=status)
        if stuck:
            ended[night.key] = stuck
        # Only a night this run wrote to: a second run cancelled while it waited for the lease
        # must neither end nor summarize the night the first run is writing.
        if not _ran_there(store, night, run):
            continue
        if record.interrupted:  # final at once: a summary run may not get to run after a Ctrl-C
            store.set_night_status(night.key, CANCELLED, only_if="running")
        pipeline = catalog.pipelines[night.key.pipeline]
        summary = summary_stage(catalog, night.key.pipeline)
        summary_failed = any(f.stage == summary and not f.interrupted for f in night.failed_steps)
        # A run of culprit searches alone (its job, or the asset launched from the UI) comes after
        # the night's summary: it asks for none.
        touched = set(night.materialized) | {f.stage for f in night.failed_steps}
        searches = {s.name for s in pipeline.stages_of("culprit_search")}
        searched = run.job_name == culprit_job_name(night.key.pipeline) or (
            bool(touched) and touched <= searches
        )
        if summary not in night.materialized and not summary_failed and not searched:
            summaries.append(night)
        elif summary in night.materialized and night.planned & set(stages_after(pipeline, summary)):
            # The summary was written before the stages after it (a release) ended: a summary
            # run writes it again with them as they ended.
            summaries.append(night)
    store.release_leases(run.run_id)
    alerts = alerts_for_run(record, catalog)
    unsent = send_alerts(alerts, notifier)
    selections = {night.key: summary_selection(catalog, night) for night in summaries}
    return FollowUp(record, alerts, summaries, ended, unsent, selections)


def _ran_there(store: Warehouse, night: NightInRun, run: dg.DagsterRun) -> bool:
    """Whether the run wrote anything to the night (a run cancelled while it waited for another
    run's lease did not, and must not summarize the night that other run is writing)."""
    if night.materialized:
        return True
    row = store.night(night.key)
    return (
        row is None
        or row.run_id == run.run_id
        or any(s.run_id == run.run_id for s in store.stages(night.key))
    )


def summary_requests(follow_up: FollowUp, summary_job: dict[str, str]) -> list[dg.RunRequest]:
    """One summary run per night the run left unsummarized (`summary_job`: pipeline -> job name)."""
    run_id = follow_up.record.run.run_id
    return [
        dg.RunRequest(
            run_key=f"summary-{run_id}-{night.partition}",
            job_name=summary_job[night.key.pipeline],
            partition_key=night.partition,
            tags={SUMMARY_OF_TAG: run_id},
            asset_selection=follow_up.selections.get(night.key),
        )
        for night in follow_up.summaries
    ]


def abandoned_runs(
    instance: dg.DagsterInstance, store: Warehouse, night: NightRow
) -> list[dg.DagsterRun] | None:
    """The runs of a night still `running` when every one of them has ended (so nothing will give
    it a final status), else None. A run whose `nightly run` process is gone (killed) is reported
    failed first: Dagster only notices that for runs its daemon launched."""
    run_ids = {night.run_id} | {s.run_id for s in store.stages(night.key)}
    runs = instance.get_runs(dg.RunsFilter(run_ids=sorted(run_ids)))
    for run in runs:
        if run.status not in FINISHED_STATUSES and process_gone(run):
            instance.report_run_failed(run, f"its process ({run.tags[PROCESS_TAG]}) is gone")
    runs = instance.get_runs(dg.RunsFilter(run_ids=sorted(run_ids)))
    if any(r.status not in FINISHED_STATUSES for r in runs):
        return None
    if any(_follow_up_pending(instance, r) for r in runs):
        return None  # its follow-up (alerts, then a summary run) is still to come
    from nightly_assets.warehouse.access import utc_now  # SQLAlchemy: for a sensor tick, not for loading

    idle = utc_now() - (night.updated_at or dt.datetime.min)
    if len(runs) < len(run_ids) and idle < UNKNOWN_RUN_GRACE:
        return None  # a run of another instance may still be writing to it
    return list(runs)


def _follow_up_pending(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether the run's follow-up has yet to come: its summary run is queued or running, or it
    ended so recently that the follow-up sensors (every 10 s) may not have seen it yet."""
    summaries = instance.get_runs(dg.RunsFilter(tags={SUMMARY_OF_TAG: run.run_id}))
    if any(r.status not in FINISHED_STATUSES for r in summaries):
        return True
    if run.tags.get(FOLLOWED_UP_TAG) or run.remote_job_origin is None:
        return False  # done, or run in a `nightly run` process (the sensors never see those)
    record = instance.get_run_record_by_id(run.run_id)
    ended = record.end_time if record is not None else None
    return ended is not None and time.time() - ended < FOLLOW_UP_GRACE_S


def end_abandoned(store: Warehouse, night: NightRow, runs: list[dg.DagsterRun]) -> str:
    """End the stages those runs left running; a line saying what happened."""
    for run in runs:
        status = CANCELLED if run.status == dg.DagsterRunStatus.CANCELED else "failure"
        store.end_stages(night.key, run_id=run.run_id, status=status)
    ended = (
        ", ".join(f"{r.run_id[:8]} {r.status.value.lower()}" for r in runs)
        or "runs this instance does not know"
    )
    return f"{night.key} was left running after its runs ended ({ended})"
