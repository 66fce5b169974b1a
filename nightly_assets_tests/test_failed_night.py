"""A failed night as the UI shows it: the failed stage's partition is Failed, its step failure
carries the evidence (verdict, counts, failing tests with messages, artefact links), nothing after
it runs and the night's summary is materialized with the failures; the alerts that went out show
on the night's summary as failed checks (ERROR or WARN) with where they went; and an image stage
without a Docker engine says so in words."""

from __future__ import annotations

import datetime as dt
import logging
import socket
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType
from dagster._core.storage.partition_status_cache import AssetPartitionStatus

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.containers.resources import DockerRunnerPoolResource
from nightly_assets.definitions import build_definitions
from nightly_assets.night import execute_partition, run_night
from nightly_assets.partitions import partition_key
from nightly_assets.pipelines import nightly_job_name
from nightly_assets.reporting.alerts import alert_evaluation, alert_keys
from nightly_assets.reporting.resources import Alert
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets.warehouse.rows import SentAlert
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_files
from nightly_assets_tests.suite_projects import flit_project, project_pipeline, suite_stage

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
def test_a_failed_night_is_failed_in_dagster_with_its_evidence_one_click_away(
    nightly_home, tmp_path, monkeypatch, closed_socket
):
    monkeypatch.setenv("DOCKER_HOST", closed_socket)
    (tmp_path / "dagster_home").mkdir()
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster_home"))
    defs = build_definitions()
    outcome = run_night(defs, instance, load_catalog(), FAILED_NIGHT, resources_for("local", nightly_home))
    assert not outcome.succeeded and outcome.run.status == dg.DagsterRunStatus.FAILURE

    # The failed suite's partition is Failed, not Materialized: what the partitions bar, the
    # asset's badge and "backfill failed and missing partitions" read.
    suite = dg.AssetKey(["demo", "tests_unit"])
    assert partition_status(instance, defs, suite) == AssetPartitionStatus.FAILED
    assert PARTITION not in instance.get_materialized_partitions(suite)

    # Its step failed with the stage's own words and carries the evidence: what the failed
    # partition's "Run ... failed" link opens.
    [failure] = [
        r.dagster_event
        for r in instance.all_logs(outcome.run.run_id, of_type=DagsterEventType.STEP_FAILURE)
        if r.dagster_event is not None and r.dagster_event.step_key == "demo__tests_unit"
    ]
    failure_data = failure.step_failure_data.user_failure_data
    assert failure_data is not None
    metadata = dict(failure_data.metadata)
    verdict = str(metadata["verdict"].value)
    assert verdict.startswith("FAILED: ") and "1 failed of" in verdict
    assert metadata["failed"].value == 1
    [row] = metadata["failed_tests"].value.records  # type: ignore[attr-defined]
    assert row.data["test"] == "tests.test_reduce::test_mean" and "assert" in row.data["message"]
    assert "artefact/pytest.log" in metadata and "artefact/junit.xml" in metadata
    description = failure_data.description or ""
    assert description.startswith(verdict.removeprefix("FAILED: "))
    assert "tests.test_reduce::test_mean" in description
    checks = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(suite, "tests_passed")]
    )
    assert checks[dg.AssetCheckKey(suite, "tests_passed")].status.value == "FAILED"

    # The release never ran; the night's summary is materialized all the same (by its follow-up
    # run, which judges test health too), with the failures.
    assert PARTITION not in instance.get_materialized_partitions(dg.AssetKey(["demo", "release"]))
    summary = dg.AssetKey(["demo", "night_summary"])
    assert partition_status(instance, defs, summary) == AssetPartitionStatus.MATERIALIZED
    event = instance.get_latest_materialization_event(summary)
    assert event is not None and event.asset_materialization is not None
    text = str(event.asset_materialization.metadata["summary"].value)
    assert "### Failing tests" in text and "tests.test_reduce::test_mean" in text
    assert event.asset_materialization.metadata["status"].value == "failure"

    # A run may select the release alone for this night (from its asset's page): it refuses,
    # naming the stage that failed.
    released, release_run = execute_partition(
        defs, instance, nightly_job_name("demo"), FAILED_NIGHT, assets=[dg.AssetKey(["demo", "release"])]
    )
    assert not released
    assert PARTITION not in instance.get_materialized_partitions(dg.AssetKey(["demo", "release"]))
    release_row = next(s for s in outcome_stages(nightly_home) if s.stage == "release")
    assert release_row.status == "failure" and release_row.run_id == release_run.run_id
    assert "is not released: upstream stages did not succeed: " in (release_row.detail or "")
    assert "tests_unit (failure)" in (release_row.detail or "")

    # The alert it sent is on the night's summary as what it is: its night_alert check failed at
    # ERROR, with its text, where it went and the run; the warehouse keeps it, the run's log says it.
    [alert] = [a for a in outcome.alerts if a.severity == "error"]
    check = dg.AssetCheckKey(dg.AssetKey(["demo", "night_summary"]), "night_alert")
    [evaluation] = [
        e
        for e in alert_evaluations(instance, check)
        if e.partition == PARTITION and not e.passed and alert.title in (e.description or "")
    ][-1:]
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    seen = {k: v.value for k, v in evaluation.metadata.items()}
    assert seen["sent_to"] == f"file {nightly_home / 'alerts.jsonl'}"
    assert seen["alert"] == f"error: {alert.title}"
    assert "tests.test_reduce::test_mean" in str(seen["text"])
    assert seen["alerted_run"] == outcome.run.run_id
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key([check])[check]
    assert latest.status.value == "FAILED" and latest.partition == PARTITION  # the summary run kept it so
    [kept] = resources_for("local", nightly_home)["warehouse"].store().alerts(FAILED_NIGHT)
    assert (kept.severity, kept.title, kept.run_id) == ("error", alert.title, outcome.run.run_id)
    [line] = [
        r
        for r in instance.all_logs(outcome.run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
        if "alert sent to" in (r.dagster_event.message or "" if r.dagster_event else "")
    ]
    assert line.level == logging.ERROR and line.dagster_event is not None
    assert line.dagster_event.message == f"error alert sent to {seen['sent_to']}: {alert.title}"

    # The image stage fell back to a virtualenv, and says why in words.
    image = next(s for s in outcome_stages(nightly_home) if s.stage == "image")
    detail = image.detail or ""
    assert f"no Docker engine answers at {closed_socket} (DOCKER_HOST): nothing listens there" in detail
    assert "DockerException" not in detail and "Connection aborted" not in detail


def partition_status(
    instance: dg.DagsterInstance, defs: dg.Definitions, asset: dg.AssetKey, partition: str = PARTITION
) -> AssetPartitionStatus | None:
    """The partition's status as the UI's partitions bar and badge show it."""
    partitions_def = defs.resolve_assets_def(asset).partitions_def
    assert partitions_def is not None
    statuses = instance.get_status_by_partition(asset, [partition], partitions_def) or {}
    return statuses.get(partition)


def outcome_stages(nightly_home: Path) -> list:
    store = resources_for("local", nightly_home)["warehouse"].store()
    return list(store.stages(FAILED_NIGHT))


def alert_evaluations(instance: dg.DagsterInstance, check: dg.AssetCheckKey) -> list[dg.AssetCheckEvaluation]:
    """Every evaluation of `check`, oldest first (the runless ones included)."""
    records = instance.event_log_storage.get_asset_check_execution_history(check, limit=100)
    found = []
    for record in reversed(records):
        event = record.event.dagster_event if record.event else None
        if event is not None and isinstance(event.event_specific_data, dg.AssetCheckEvaluation):
            found.append(event.event_specific_data)
    return found


def test_an_alert_is_about_its_partition_or_every_target_of_its_night_or_none(tmp_path):
    catalog = load_catalog()
    for partition, expected in [
        ("2026-11-07|cpu", [FAILED_NIGHT]),
        ("2026-11-07", [FAILED_NIGHT]),  # a missing night: every target of the pipeline (one here)
        ("unpartitioned", []),  # a run of no night: only its run's log says it
        ("2026-11-07|no_such_target", []),
    ]:
        alert = Alert("demo", partition, "error", "t", "", "#nightly-demo", ["why"])
        assert alert_keys(catalog, alert) == expected, partition
    sent = SentAlert("", "warn", "t", "text", "file x", dt.datetime(2026, 11, 8))
    evaluation = alert_evaluation(catalog, FAILED_NIGHT, [sent])
    assert evaluation.asset_key == dg.AssetKey(["demo", "night_summary"])
    assert (evaluation.passed, evaluation.severity) == (False, dg.AssetCheckSeverity.WARN)
    assert evaluation.partition == PARTITION
    assert "alerted_run" not in evaluation.metadata  # no run to link
    quiet = alert_evaluation(catalog, FAILED_NIGHT, [])
    assert quiet.passed and quiet.description == "no alert was sent about this run"


FAILING_PROJECT = flit_project(
    "failpkg",
    "A value, and a test that fails while a file outside the checkout exists.",
    {
        "failpkg/__init__.py": '"""The value."""\nVALUE = 1\n',
        "tests/test_value.py": "import pathlib\n\nimport failpkg\n\nBROKEN = pathlib.Path({broken!r})\n\n\n"
        "def test_value():\n    assert failpkg.VALUE == 1\n\n\n"
        "def test_not_broken():\n    assert not BROKEN.exists(), 'broken tonight'\n",
    },
)


@pytest.mark.slow
def test_a_failed_night_of_a_pipeline_without_release_is_failed_until_a_re_run_passes(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    broken = tmp_path / "broken"
    broken.touch()
    repo = tmp_path / "upstream" / "failpkg"
    commit_files(repo, {n: t.format(broken=str(broken)) for n, t in FAILING_PROJECT.items()})
    document = project_pipeline(
        "failpkg", repo, "A failing test, no release.", [suite_stage(confirm={"attempts": 0})]
    )
    key, stages, outcome = catalog_nights.run(document, "2026-11-03")
    assert not outcome.succeeded and stages["tests"].status == "failure"
    defs = build_definitions(catalog_nights.catalog)
    partition = str(partition_key(key.night, key.target))
    tests, summary = dg.AssetKey(["failpkg", "tests"]), dg.AssetKey(["failpkg", "night_summary"])
    instance = catalog_nights.instance
    assert partition_status(instance, defs, tests, partition) == AssetPartitionStatus.FAILED
    assert partition not in instance.get_materialized_partitions(tests)
    assert partition_status(instance, defs, summary, partition) == AssetPartitionStatus.MATERIALIZED
    # The stages before it stand as materialized: a backfill of failed and missing nights re-runs
    # from the suite on (Dagster plans it from these statuses).
    for before in ("sources", "wheels", "environment"):
        asset = dg.AssetKey(["failpkg", before])
        assert partition_status(instance, defs, asset, partition) == AssetPartitionStatus.MATERIALIZED

    broken.unlink()
    key, stages, outcome = catalog_nights.run(document, "2026-11-03")
    assert outcome.succeeded and stages["tests"].status == "success"
    assert partition_status(instance, defs, tests, partition) == AssetPartitionStatus.MATERIALIZED
