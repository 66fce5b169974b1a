"""A missing night alerts once: `missing_night_alerts` evaluated as the daemon would, after the demo
night's summary deadline (its 03:00 UTC tick + 12 h), names the night, its deadline and the likely
cause; the next evaluation does not alert again, and a summarized night never alerts. A first start
does not alert nights from before it, and a Slack that never answers does not stall a tick."""

import datetime as dt
import json
import time

import dagster as dg
import pytest
from dagster._core.remote_origin import (
    RegisteredCodeLocationOrigin,
    RemoteInstigatorOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.scheduler.instigation import (
    InstigatorState,
    InstigatorStatus,
    InstigatorType,
    ScheduleInstigatorData,
    TickData,
    TickStatus,
)
from dagster._core.test_utils import create_run_for_test, freeze_time
from dagster._utils.error import SerializableErrorInfo
from dagster_slack import SlackResource

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.catalog.loader import load_catalog
from nightly_assets.definitions import build_definitions
from nightly_assets.reporting.alerts import PIPELINE_TAG
from nightly_assets.reporting.missing_nights import SEND_BUDGET_S, alert_missing_nights
from nightly_assets.reporting.resources import FileNotifierResource, NotifierResource, SlackNotifierResource
from nightly_assets.warehouse import WarehouseResource

NIGHT = "2026-11-03"
TICK = dt.datetime(2026, 11, 4, 3, 0, tzinfo=dt.UTC)  # demo_schedule's "0 3 * * *" runs 11-03
WATCHED_SINCE = TICK - dt.timedelta(hours=1)  # the deployment was up before the night's tick
AFTER_DEADLINE = dt.datetime(2026, 11, 4, 15, 5, tzinfo=dt.UTC)  # due at 15:00
SUMMARY = dg.AssetKey(["demo", "night_summary"])
DEADLINE_LINE = (
    "no summary of cpu by its deadline 2026-11-04 15:00 UTC (12 h after the 03:00 UTC tick of demo_schedule)"
)


class Night:
    """The code location (local: only the demo schedule runs), an instance, and the alert inbox."""

    def __init__(self, instance: dg.DagsterInstance, inbox_path) -> None:
        self.instance = instance
        self.inbox = inbox_path
        self.definitions = build_definitions()
        self.sensor = self.definitions.resolve_sensor_def("missing_night_alerts")
        self.cursor: str | None = None
        self.notifier: NotifierResource | None = None  # None: the file inbox
        self.warehouse = WarehouseResource(url=f"sqlite:///{inbox_path.parent}/warehouse.sqlite")
        self.artefacts = ArtefactStoreResource(root=str(inbox_path.parent / "artefacts"), results_site=False)

    def evaluate(self, when: dt.datetime) -> dg.SensorResult:
        """One evaluation at `when`, from the cursor the previous one left (as the daemon keeps it)."""
        notifier = self.notifier or FileNotifierResource(path=str(self.inbox))
        with (
            freeze_time(when),
            dg.build_sensor_context(
                instance=self.instance,
                cursor=self.cursor,
                resources={"notifier": notifier, "warehouse": self.warehouse, "artefacts": self.artefacts},
            ) as context,
        ):
            result = self.sensor(context)
        assert isinstance(result, dg.SensorResult)
        self.cursor = result.cursor
        return result

    def alerts(self) -> list[dict]:
        return (
            [json.loads(line) for line in self.inbox.read_text().splitlines()] if self.inbox.exists() else []
        )

    def summarize(self, night: str) -> None:
        """The demo night's summary materialized (for its one target, cpu)."""
        partition = str(dg.MultiPartitionKey({"night": night, "target": "cpu"}))
        self.instance.report_runless_asset_event(dg.AssetMaterialization(SUMMARY, partition=partition))

    def schedule_state(self, status: InstigatorStatus) -> InstigatorState:
        """demo_schedule's stored state, as the UI's toggle or the scheduler leaves it."""
        repository = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("nightly_assets"), "__repository__")
        state = InstigatorState(
            RemoteInstigatorOrigin(repository, "demo_schedule"),
            InstigatorType.SCHEDULE,
            status,
            ScheduleInstigatorData("0 3 * * *"),
        )
        return self.instance.add_instigator_state(state)


@pytest.fixture
def fresh_night(nightly_home, tmp_path):
    """A deployment whose sensor has not evaluated yet."""
    with dg.instance_for_test() as instance:
        yield Night(instance, tmp_path / "alerts.jsonl")


@pytest.fixture
def night(fresh_night):
    """A deployment whose sensor first evaluated before the 11-03 night's tick."""
    fresh_night.evaluate(WATCHED_SINCE)
    assert fresh_night.alerts() == []  # the nights before it are not its own
    return fresh_night


def test_a_night_the_daemon_missed_alerts_once_with_its_deadline_and_cause(night):
    night.summarize("2026-11-02")  # the night before ran
    night.evaluate(AFTER_DEADLINE - dt.timedelta(minutes=10))
    assert night.alerts() == []  # 14:55: 11-03 is not due yet

    result = night.evaluate(AFTER_DEADLINE)

    [alert] = night.alerts()  # the demo schedule's night; the other schedules are off locally
    assert (
        result.skip_reason is not None
        and "demo night 2026-11-03 is missing" in result.skip_reason.skip_message
    )
    assert (alert["pipeline"], alert["partition"], alert["severity"]) == ("demo", NIGHT, "error")
    assert alert["channel"] == "#nightly-demo"
    assert alert["lines"] == [
        DEADLINE_LINE,
        "likely cause: no run started: demo_schedule did not tick at 2026-11-04 03:00 UTC "
        "(the daemon was down, or the schedule was off then)",
    ]
    assert alert["text"].startswith(":rotating_light: *demo night 2026-11-03 is missing* (demo 2026-11-03)\n")

    night.evaluate(AFTER_DEADLINE + dt.timedelta(minutes=5))
    night.evaluate(AFTER_DEADLINE + dt.timedelta(hours=6))
    assert len(night.alerts()) == 1  # judged once


def test_a_summarized_night_does_not_alert(night):
    night.summarize(NIGHT)

    result = night.evaluate(AFTER_DEADLINE)

    assert night.alerts() == []
    assert result.skip_reason is not None
    assert result.skip_reason.skip_message == "no night missed its summary's deadline"


def test_a_night_whose_run_ended_before_its_summary_names_the_run(night):
    run = create_run_for_test(
        night.instance,
        job_name="demo_nightly",
        status=dg.DagsterRunStatus.FAILURE,
        tags={PIPELINE_TAG: "demo", "dagster/partition": f"{NIGHT}|cpu"},
    )

    night.evaluate(AFTER_DEADLINE)

    [alert] = night.alerts()
    assert alert["lines"] == [
        DEADLINE_LINE,
        f"likely cause: a run started but wrote no summary (cpu run {run.run_id[:8]} failure)",
    ]


def test_a_stopped_schedule_is_the_cause(night):
    night.schedule_state(InstigatorStatus.STOPPED)  # turned off in the UI

    night.evaluate(AFTER_DEADLINE)

    [alert] = night.alerts()
    assert alert["lines"] == [
        DEADLINE_LINE,
        "likely cause: schedule off: demo_schedule is stopped (start it, then backfill the night)",
    ]


def test_a_failed_schedule_tick_is_the_cause(night):
    state = night.schedule_state(InstigatorStatus.DECLARED_IN_CODE)
    night.instance.create_tick(
        TickData(
            instigator_origin_id=state.instigator_origin_id,
            instigator_name="demo_schedule",
            instigator_type=InstigatorType.SCHEDULE,
            status=TickStatus.FAILURE,
            timestamp=TICK.timestamp(),
            selector_id=state.selector_id,
            error=SerializableErrorInfo("DagsterUserCodeUnreachableError: the code server is down", [], None),
        )
    )

    night.evaluate(AFTER_DEADLINE)

    [alert] = night.alerts()
    assert alert["lines"][1] == (
        "likely cause: no run started: demo_schedule's tick at 2026-11-04 03:00 UTC failure: "
        "DagsterUserCodeUnreachableError: the code server is down"
    )


def test_an_unsent_alert_is_sent_on_the_next_evaluation(night, tmp_path):
    night.inbox = tmp_path / "not-a-folder" / "alerts.jsonl"
    (tmp_path / "not-a-folder").write_text("")  # the notifier cannot write there

    night.evaluate(AFTER_DEADLINE)
    night.inbox = tmp_path / "alerts.jsonl"
    night.evaluate(AFTER_DEADLINE + dt.timedelta(minutes=5))
    night.evaluate(AFTER_DEADLINE + dt.timedelta(minutes=10))

    assert [a["title"] for a in night.alerts()] == ["demo night 2026-11-03 is missing"]


def test_a_first_start_alerts_only_the_nights_it_was_meant_to_run(fresh_night):
    """A deployment started on 2026-11-26 at 10:00: nights 11-24 and 11-25 were ticked before it ran
    and the pipeline never ran before, so they are not missing; 11-26 (ticked 11-27 03:00) is."""
    started = dt.datetime(2026, 11, 26, 10, 0, tzinfo=dt.UTC)
    fresh_night.evaluate(started)  # night 11-24 is due (its deadline 11-25 15:00 is within a day)
    fresh_night.evaluate(dt.datetime(2026, 11, 26, 15, 5, tzinfo=dt.UTC))  # night 11-25 due
    assert fresh_night.alerts() == []

    fresh_night.evaluate(dt.datetime(2026, 11, 27, 15, 5, tzinfo=dt.UTC))

    assert [a["title"] for a in fresh_night.alerts()] == ["demo night 2026-11-26 is missing"]


def test_a_first_start_alerts_nights_since_the_pipeline_first_ran(fresh_night):
    """The instance already ran the pipeline's 11-23 night (a deployment moved, or a backfill): the
    nights after it that have no summary are missing, even if ticked before the sensor started."""
    create_run_for_test(
        fresh_night.instance,
        job_name="demo_nightly",
        status=dg.DagsterRunStatus.SUCCESS,
        tags={PIPELINE_TAG: "demo", "dagster/partition": "2026-11-23|cpu"},
    )

    fresh_night.evaluate(dt.datetime(2026, 11, 26, 10, 0, tzinfo=dt.UTC))

    assert [a["title"] for a in fresh_night.alerts()] == ["demo night 2026-11-24 is missing"]


def test_a_summary_in_the_instance_counts_as_the_pipeline_having_run(fresh_night):
    fresh_night.summarize("2026-11-23")

    fresh_night.evaluate(dt.datetime(2026, 11, 26, 10, 0, tzinfo=dt.UTC))

    assert [a["title"] for a in fresh_night.alerts()] == ["demo night 2026-11-24 is missing"]


def test_a_cursor_of_the_first_format_keeps_judging_where_it_was(fresh_night):
    """A sensor that ran before this change: its cursor holds only the judged deadlines."""
    fresh_night.cursor = json.dumps({"demo": "2026-11-03T15:00:00+00:00"})

    fresh_night.evaluate(AFTER_DEADLINE)

    assert [a["partition"] for a in fresh_night.alerts()] == [NIGHT]


def start_every_schedule(night: Night) -> None:
    """Every pipeline's schedule started (as prod runs them)."""
    names = [s.name for s in night.definitions.schedules]  # type: ignore[union-attr]
    repository = RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("nightly_assets"), "__repository__")
    for name in names:
        schedule = night.definitions.resolve_schedule_def(name)
        night.instance.add_instigator_state(
            InstigatorState(
                RemoteInstigatorOrigin(repository, name),
                InstigatorType.SCHEDULE,
                InstigatorStatus.RUNNING,
                ScheduleInstigatorData(str(schedule.cron_schedule)),
            )
        )


def test_a_slack_that_hangs_never_stalls_a_tick_and_loses_no_alert(fresh_night, slack_api):
    """Every pipeline (eight, all started as in prod) misses a night while Slack hangs: the tick
    ends within its send budget (well under Dagster's 60 s tick limit) with all of them queued, and
    the next tick after Slack answers again sends each once."""
    fake, api_url = slack_api
    start_every_schedule(fresh_night)
    pipelines = set(load_catalog().pipelines)
    fresh_night.notifier = SlackNotifierResource(
        slack=SlackResource(token=fake.token), api_url=api_url, timeout_s=1
    )
    # Watched from 11-01 00:00: by 11-02 23:59 every pipeline's night 11-01 is past its deadline
    # (their crons and deadlines differ), and none was summarized.
    fresh_night.evaluate(dt.datetime(2026, 11, 1, 0, 0, tzinfo=dt.UTC))
    fake.answering.clear()  # from now on Slack accepts connections and never answers

    started = time.monotonic()
    result = fresh_night.evaluate(dt.datetime(2026, 11, 2, 23, 59, tzinfo=dt.UTC))
    elapsed = time.monotonic() - started

    assert elapsed < SEND_BUDGET_S
    queued = json.loads(fresh_night.cursor or "{}")["queued"]
    assert sorted(a["pipeline"] for a in queued) == sorted(pipelines) and len(pipelines) >= 7
    assert fake.posts == []
    assert result.skip_reason is not None
    assert result.skip_reason.skip_message == "no night missed its summary's deadline"  # none sent

    fake.answering.set()
    fresh_night.evaluate(dt.datetime(2026, 11, 3, 0, 4, tzinfo=dt.UTC))
    fresh_night.evaluate(dt.datetime(2026, 11, 3, 0, 9, tzinfo=dt.UTC))

    titles = sorted(p["text"].split("*")[1] for p in fake.posts)
    assert titles == sorted(a["title"] for a in queued)  # each once
    assert json.loads(fresh_night.cursor or "{}")["queued"] == []


def test_sending_gives_up_at_its_budget_when_a_request_outlives_its_timeout(night, slack_api):
    """However the notifier's own timeout is set, the alerts not answered by the send budget stay
    queued, and go out on a later evaluation."""
    fake, api_url = slack_api
    notifier = SlackNotifierResource(slack=SlackResource(token=fake.token), api_url=api_url, timeout_s=30)
    catalog = load_catalog()
    schedules = {p: night.definitions.resolve_schedule_def(f"{p}_schedule") for p in catalog.pipelines}
    fake.answering.clear()

    started = time.monotonic()
    with freeze_time(AFTER_DEADLINE):
        judged = alert_missing_nights(
            night.instance, catalog, schedules, night.cursor, notifier, send_budget_s=1
        )

    assert time.monotonic() - started < 5
    assert judged.sent == [] and judged.unsent == {"demo night 2026-11-03 is missing": "no answer within 1 s"}
    fake.answering.set()
    with freeze_time(AFTER_DEADLINE + dt.timedelta(minutes=5)):
        again = alert_missing_nights(night.instance, catalog, schedules, judged.cursor, notifier)
    assert [a.title for a in again.sent] == ["demo night 2026-11-03 is missing"]
    assert [p["channel"] for p in fake.posts] == ["#nightly-demo"]
