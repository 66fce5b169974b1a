"""A missing night alerts once: `missing_night_alerts` evaluated as the daemon would, after the demo
night's summary deadline (its 03:00 UTC tick + 12 h), names the night, its deadline and the likely
cause; the next evaluation does not alert again, and a summarized night never alerts."""

import datetime as dt
import json

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

from nightly_assets.definitions import build_definitions
from nightly_assets.reporting.alerts import PIPELINE_TAG
from nightly_assets.reporting.resources import FileNotifierResource

NIGHT = "2026-11-03"
TICK = dt.datetime(2026, 11, 4, 3, 0, tzinfo=dt.UTC)  # demo_schedule's "0 3 * * *" runs 11-03
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
        self.sensor = build_definitions().resolve_sensor_def("missing_night_alerts")
        self.cursor: str | None = None

    def evaluate(self, when: dt.datetime) -> dg.SensorResult:
        """One evaluation at `when`, from the cursor the previous one left (as the daemon keeps it)."""
        with (
            freeze_time(when),
            dg.build_sensor_context(
                instance=self.instance,
                cursor=self.cursor,
                resources={"notifier": FileNotifierResource(path=str(self.inbox))},
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
def night(nightly_home, tmp_path):
    with dg.instance_for_test() as instance:
        yield Night(instance, tmp_path / "alerts.jsonl")


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
