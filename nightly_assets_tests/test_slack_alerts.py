"""Alerts in production: the failure sensor posts through dagster-slack's SlackResource to the
pipeline's channel (a fake chat.postMessage on loopback), and a Slack outage loses nothing."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.definitions import build_definitions
from nightly_assets.night import run_night
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey

pytestmark = pytest.mark.slow


def test_the_failure_sensor_posts_to_slack_and_retries_after_an_outage(
    nightly_home, tmp_path, monkeypatch, slack_api
):
    fake, api_url = slack_api
    (tmp_path / "dagster_home").mkdir()
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster_home"))
    key = NightKey("demo", dt.date(2026, 11, 7), "cpu")  # test_mean fails
    outcome = run_night(
        build_definitions(), instance, load_catalog(), key, resources_for("local", nightly_home)
    )
    assert not outcome.succeeded
    # As if the daemon, not the CLI, were following this run up: with the prod notifier.
    instance.add_run_tags(outcome.run.run_id, {"nightly/followed_up": ""})
    monkeypatch.setenv("SLACK_BOT_TOKEN", fake.token)
    monkeypatch.setenv("NIGHTLY_SLACK_API_URL", api_url)
    monkeypatch.setenv("NIGHTLY_WAREHOUSE_URL", f"sqlite:///{nightly_home}/warehouse.sqlite")
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_BUCKET", "unused")
    prod = resources_for("prod", nightly_home)
    sensor = build_definitions().resolve_sensor_def("night_failure_alerts")
    failure = instance.all_logs(outcome.run.run_id, of_type=DagsterEventType.RUN_FAILURE)[0]

    def evaluate() -> object:
        with dg.build_run_status_sensor_context(
            sensor_name=sensor.name,
            dagster_event=failure.dagster_event,
            dagster_instance=instance,
            dagster_run=outcome.run,
            resources={
                "notifier": prod["notifier"],
                "warehouse": prod["warehouse"],
                "artefacts": prod["artefacts"],
            },
        ).for_run_failure() as context:
            return sensor(context)

    fake.down = True
    [request] = evaluate()  # Slack is down: the summary is still requested, the alert is kept
    assert isinstance(request, dg.RunRequest) and request.job_name == "demo_summary"
    assert fake.posts == []
    tags = instance.get_run_by_id(outcome.run.run_id).tags  # type: ignore[union-attr]
    assert tags["nightly/followed_up"] == "alerts" and tags["nightly/unsent_alerts"] == "0"
    # A run-status sensor never sees that run again (its cursor moved on): the repair sensor
    # sends the alert once Slack is back.
    repair = build_definitions().resolve_sensor_def("night_status_repair")

    def evaluate_repair() -> object:
        with dg.build_sensor_context(
            instance=instance,
            resources={
                "notifier": prod["notifier"],
                "warehouse": prod["warehouse"],
                "artefacts": prod["artefacts"],
            },
        ) as context:
            return repair(context)

    evaluate_repair()  # still down: still kept
    assert fake.posts == []
    fake.down = False
    evaluate_repair()
    [post] = fake.posts
    assert post["channel"] == "#nightly-demo"
    assert "demo night 2026-11-07 cpu failed" in post["text"]
    assert "tests.test_reduce::test_mean" in post["text"]
    assert fake.token not in post["text"]
    tags = instance.get_run_by_id(outcome.run.run_id).tags  # type: ignore[union-attr]
    assert tags["nightly/followed_up"] == outcome.run.run_id
    evaluate_repair()
    assert isinstance(evaluate(), dg.SkipReason) and len(fake.posts) == 1  # sent once

    # Each alert that went out is kept in the warehouse and shows on the night's summary as its
    # night_alert check, failed at ERROR, with where it went: the CLI's file inbox first, then
    # Slack's channel; the bot token and the API URL never.
    with dg.build_resources({"warehouse": prod["warehouse"]}) as resolved:
        kept = resolved.warehouse.store().alerts(key)
    assert [a.destination for a in kept] == [
        f"file {nightly_home / 'alerts.jsonl'}",
        "Slack channel #nightly-demo",
    ]
    check = dg.AssetCheckKey(dg.AssetKey(["demo", "night_summary"]), "night_alert")
    history = instance.event_log_storage.get_asset_check_execution_history(check, limit=10)
    [record] = [r for r in history if r.run_id == outcome.run.run_id]
    assert record.status.value == "FAILED" and record.event is not None and record.event.dagster_event
    evaluation = record.event.dagster_event.event_specific_data
    assert isinstance(evaluation, dg.AssetCheckEvaluation) and evaluation.partition == "2026-11-07|cpu"
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    shown = " ".join(str(v.value) for v in evaluation.metadata.values()) + (evaluation.description or "")
    assert "Slack channel #nightly-demo" in shown and f"file {nightly_home / 'alerts.jsonl'}" in shown
    assert fake.token not in shown and api_url not in shown
    assert all(fake.token not in a.text and api_url not in a.text for a in kept)
