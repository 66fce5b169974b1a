"""A failed night as the UI shows it: the failed stage's partition carries its evidence (verdict,
counts, failing tests with messages, artefact links) while the run fails there and nothing after it
runs; the alerts that went out are recorded on the night's summary with where they went; and an
image stage without a Docker engine says so in words."""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.containers.resources import DockerRunnerPoolResource
from nightly_assets.definitions import build_definitions
from nightly_assets.night import execute_partition, run_night
from nightly_assets.partitions import partition_key
from nightly_assets.pipelines import nightly_job_name
from nightly_assets.reporting.alerts import alert_observation
from nightly_assets.reporting.resources import Alert, FileNotifierResource
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey

FAILED_NIGHT = NightKey("demo", dt.date(2026, 11, 7), "cpu")  # commit 0.2.0: test_mean fails
PARTITION = str(partition_key(FAILED_NIGHT.night, FAILED_NIGHT.target))


@pytest.fixture
def closed_socket(tmp_path: Path) -> str:
    """A unix socket path nothing listens on any more (bound, then closed): connection refused."""
    path = tmp_path / "docker.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.close()
    return f"unix://{path}"


@pytest.mark.parametrize(
    ("host", "cause"),
    [
        ("closed", "nothing listens there (connection refused)"),
        ("unix:///nonexistent/nightly-no-docker.sock", "no socket exists at that path"),
    ],
)
def test_an_absent_engine_is_named_in_words(host, cause, closed_socket, monkeypatch):
    address = closed_socket if host == "closed" else host
    monkeypatch.setenv("DOCKER_HOST", address)
    reason = DockerRunnerPoolResource().unavailable_reason("local", "amd64")
    assert reason is not None
    assert reason.startswith(f"runner 'local': no Docker engine answers at {address} (DOCKER_HOST): {cause}.")
    assert "Start Docker there" in reason
    for raw in ("DockerException", "Connection aborted", "FileNotFoundError(", "Errno"):
        assert raw not in reason


@pytest.mark.slow
def test_a_failed_night_materializes_its_evidence_and_still_fails(
    nightly_home, tmp_path, monkeypatch, closed_socket
):
    monkeypatch.setenv("DOCKER_HOST", closed_socket)
    (tmp_path / "dagster_home").mkdir()
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster_home"))
    outcome = run_night(
        build_definitions(), instance, load_catalog(), FAILED_NIGHT, resources_for("local", nightly_home)
    )
    assert not outcome.succeeded and outcome.run.status == dg.DagsterRunStatus.FAILURE

    # The failed suite's partition holds its report: what the partitions view shows.
    suite = dg.AssetKey(["demo", "tests_unit"])
    assert PARTITION in instance.get_materialized_partitions(suite)
    event = instance.get_latest_materialization_event(suite)
    assert event is not None and event.asset_materialization is not None
    metadata = dict(event.asset_materialization.metadata)
    verdict = str(metadata["verdict"].value)
    assert verdict.startswith("FAILED: ") and "1 failed of" in verdict
    assert metadata["failed"].value == 1
    [row] = metadata["failed_tests"].value.records  # type: ignore[attr-defined]
    assert row.data["test"] == "tests.test_reduce::test_mean" and "assert" in row.data["message"]
    assert "artefact/pytest.log" in metadata and "artefact/junit.xml" in metadata

    # ... and its step failed with the stage's own words, so the run failed and release never ran.
    [failure] = [
        r.dagster_event
        for r in instance.all_logs(outcome.run.run_id, of_type=DagsterEventType.STEP_FAILURE)
        if r.dagster_event is not None and r.dagster_event.step_key == "demo__tests_unit"
    ]
    description = failure.step_failure_data.user_failure_data.description  # type: ignore[union-attr]
    assert description.startswith(verdict.removeprefix("FAILED: "))
    assert "tests.test_reduce::test_mean" in description
    assert PARTITION not in instance.get_materialized_partitions(dg.AssetKey(["demo", "release"]))
    checks = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(suite, "tests_passed")]
    )
    assert checks[dg.AssetCheckKey(suite, "tests_passed")].status.value == "FAILED"

    # A backfill of missing partitions may select the release alone for this night (the failed
    # suite's partition is materialized): the release refuses, naming the stage that failed.
    defs = build_definitions()
    released, release_run = execute_partition(
        defs, instance, nightly_job_name("demo"), FAILED_NIGHT, assets=[dg.AssetKey(["demo", "release"])]
    )
    assert not released
    assert PARTITION not in instance.get_materialized_partitions(dg.AssetKey(["demo", "release"]))
    release_row = next(s for s in outcome_stages(nightly_home) if s.stage == "release")
    assert release_row.status == "failure" and release_row.run_id == release_run.run_id
    assert "is not released: upstream stages did not succeed: " in (release_row.detail or "")
    assert "tests_unit (failure)" in (release_row.detail or "")

    # The alert it sent is on the night's summary, with where it went.
    [alert] = [a for a in outcome.alerts if a.severity == "error"]
    observations = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(["demo", "night_summary"])), limit=10
    ).records
    recorded = [o.asset_observation for o in observations if o.asset_observation is not None]
    [observation] = [o for o in recorded if o.description == alert.title]
    assert observation.partition == PARTITION
    seen = {k: v.value for k, v in observation.metadata.items()}
    assert seen["sent_to"] == f"file {nightly_home / 'alerts.jsonl'}"
    assert seen["alert"] == f"error: {alert.title}"
    assert "tests.test_reduce::test_mean" in str(seen["text"])
    assert seen["alerted_run"] == outcome.run.run_id

    # The image stage fell back to a virtualenv, and says why in words.
    image = next(s for s in outcome_stages(nightly_home) if s.stage == "image")
    detail = image.detail or ""
    assert f"no Docker engine answers at {closed_socket} (DOCKER_HOST): nothing listens there" in detail
    assert "DockerException" not in detail and "Connection aborted" not in detail


def outcome_stages(nightly_home: Path) -> list:
    store = resources_for("local", nightly_home)["warehouse"].store()
    return list(store.stages(FAILED_NIGHT))


def test_an_alert_of_a_whole_night_or_of_no_night_is_recorded_without_a_partition(tmp_path):
    catalog = load_catalog()
    notifier = FileNotifierResource(path=str(tmp_path / "alerts.jsonl"))
    for partition, expected in [
        ("2026-11-07|cpu", PARTITION),
        ("2026-11-07", None),  # a missing night: its text names the targets
        ("unpartitioned", None),  # a run of no night
        ("2026-11-07|no_such_target", None),
    ]:
        alert = Alert("demo", partition, "error", "t", "", "#nightly-demo", ["why"])
        observation = alert_observation(catalog, alert, notifier.destination(alert))
        assert observation.partition == expected, partition
        assert observation.asset_key == dg.AssetKey(["demo", "night_summary"])
        assert "alerted_run" not in observation.metadata  # no run to link
