"""JUnit, the test log and the summary are one click away from the UI: the links in the assets'
metadata and in the summary open, served by `nightly serve` locally and from GCS in production."""

from __future__ import annotations

import datetime as dt
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType

from nightly_assets.artefacts import credentials
from nightly_assets.artefacts import gcs as gcs_module
from nightly_assets.artefacts.gcs import GcsArtefactStoreResource
from nightly_assets.artefacts.resources import ArtefactError
from nightly_assets.artefacts.serve import make_server
from nightly_assets.catalog.loader import load_catalog
from nightly_assets.definitions import build_definitions
from nightly_assets.night import NightOutcome, run_night
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets_tests.peers.gcs import GcsEmulator
from nightly_assets_tests.peers.process import free_port

FAILED_NIGHT = NightKey("demo", dt.date(2026, 11, 7), "cpu")  # commit 0.2.0: test_mean fails


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - the links under test
        return str(response.read().decode())


def run_failed_night(nightly_home: Path, tmp_path: Path) -> tuple[dg.DagsterInstance, NightOutcome]:
    (tmp_path / "dagster_home").mkdir(exist_ok=True)
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path / "dagster_home"))
    outcome = run_night(
        build_definitions(), instance, load_catalog(), FAILED_NIGHT, resources_for("local", nightly_home)
    )
    assert not outcome.succeeded
    return instance, outcome


def latest_metadata(instance: dg.DagsterInstance, stage: str) -> dict[str, dg.MetadataValue]:
    event = instance.get_latest_materialization_event(dg.AssetKey(["demo", stage]))
    assert event is not None and event.asset_materialization is not None
    return dict(event.asset_materialization.metadata)


def failure_metadata(instance: dg.DagsterInstance, run_id: str, step: str) -> dict[str, dg.MetadataValue]:
    for record in instance.all_logs(run_id, of_type=DagsterEventType.STEP_FAILURE):
        event = record.dagster_event
        if event is not None and event.step_key == step:
            data = event.step_failure_data.user_failure_data
            assert data is not None, "the stage's own Failure carries its metadata"
            return dict(data.metadata)
    raise AssertionError(f"no failure of {step}")


@pytest.fixture
def artefact_server(nightly_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`nightly serve` on a free port, and the store's links pointing at it."""
    server = make_server(nightly_home / "artefacts", "127.0.0.1", free_port())
    url = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_URL", url)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield url
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_local_links_open_the_junit_the_log_and_the_summary(nightly_home, tmp_path, artefact_server):
    instance, outcome = run_failed_night(nightly_home, tmp_path)
    folder = nightly_home / "artefacts/demo/2026-11-07/cpu"

    passed = latest_metadata(instance, "tests_integration")
    junit = passed["artefact/junit.xml"]
    assert isinstance(junit, dg.UrlMetadataValue) and junit.value.startswith(artefact_server)
    assert fetch(junit.value) == (folder / "tests_integration/junit.xml").read_text()

    # The failed suite keeps its links on the step's failure: the log names the failing test.
    failed = failure_metadata(instance, outcome.run.run_id, "demo__tests_unit")
    assert "test_mean" in fetch(failed["artefact/pytest.log"].value)  # type: ignore[arg-type]
    assert "test_mean" in fetch(failed["artefact/junit.xml"].value)  # type: ignore[arg-type]
    table = failed["failed_tests"].value.records  # type: ignore[union-attr]
    assert [r.data["test"] for r in table] == ["tests.test_reduce::test_mean"]

    summary = latest_metadata(instance, "night_summary")
    text = fetch(summary["artefact/summary.md"].value)  # type: ignore[arg-type]
    assert text == (folder / "night_summary/summary.md").read_text()
    link = f"[Log & Artifacts]({artefact_server}/demo/2026-11-07/cpu/tests_unit/)"
    assert link in text
    assert "junit.xml" in fetch(f"{artefact_server}/demo/2026-11-07/cpu/tests_unit/")  # a listing
    assert "| tests_unit | tests.test_reduce::test_mean | failed | assert" in text


def test_the_server_never_leaves_the_artefact_folder(nightly_home, artefact_server):
    stage = nightly_home / "artefacts/demo/2026-11-07/cpu/sources"
    stage.mkdir(parents=True)
    (stage / "notes.log").write_text("kept\n")
    (stage / "escape").symlink_to("/etc")  # a tested repository can hold such a link
    assert fetch(f"{artefact_server}/demo/2026-11-07/cpu/sources/notes.log") == "kept\n"
    for path in ("sources/escape/hostname", "../../../../../etc/hostname", "sources/escape/"):
        with pytest.raises(urllib.error.HTTPError) as info:
            fetch(f"{artefact_server}/demo/2026-11-07/cpu/{path}")
        assert info.value.code == 404, path


@pytest.mark.gcs
@pytest.mark.slow
def test_gcs_store_uploads_the_reports_and_its_links_open(nightly_home, tmp_path, gcs: GcsEmulator):
    instance, outcome = run_failed_night(nightly_home, tmp_path)

    failed = failure_metadata(instance, outcome.run.run_id, "demo__tests_unit")
    log = failed["artefact/pytest.log"].value
    assert log == gcs.object_url("nightly/demo/2026-11-07/cpu/tests_unit/pytest.log")
    assert "test_mean" in fetch(str(log))
    summary = latest_metadata(instance, "night_summary")
    summary_url = str(summary["artefact/summary.md"].value)
    assert summary_url.startswith(gcs.url)
    assert "| tests_unit | failure | local |" in fetch(summary_url)

    from google.cloud import storage

    names = {b.name for b in storage.Client(project="nightly-test").list_blobs(gcs.bucket)}
    for suite in ("tests_unit", "tests_integration", "tests_e2e_gpu_1", "tests_e2e_gpu_2"):
        assert f"nightly/demo/2026-11-07/cpu/{suite}/manifest.json" in names, suite
    assert "nightly/demo/2026-11-07/cpu/tests_unit/junit.xml" in names
    assert "nightly/demo/2026-11-07/cpu/wheels/dist/nightlysample-0.2.0-py3-none-any.whl" in names
    assert not any("/venv/" in n or "/nightlysample/" in n for n in names)  # no venv, no checkout


@pytest.mark.slow
def test_an_unreachable_bucket_keeps_the_night_and_says_so(nightly_home, tmp_path, monkeypatch):
    """Publishing is not the night's result: a GCS outage leaves the files in the stage folders."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")  # nothing listens
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("NIGHTLY_GCP_PROJECT", "nightly-test")
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_BUCKET", "nightly-artefacts")
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_UPLOAD_DEADLINE_S", "1")
    instance, outcome = run_failed_night(nightly_home, tmp_path)

    warnings = [
        r.user_message
        for r in instance.all_logs(outcome.run.run_id)
        if "reports not published" in r.user_message
    ]
    assert (
        warnings and "cannot upload" in warnings[0] and "gs://nightly-artefacts/nightly/demo" in warnings[0]
    )
    # Retention lists the bucket too (in the follow-up summary run): that fails within the same
    # deadline, logged, and the summary stands.
    retention = [
        r.user_message
        for run in instance.get_runs()
        for r in instance.all_logs(run.run_id)
        if "retention:" in r.user_message
    ]
    assert retention and "cannot prune gs://nightly-artefacts/" in retention[0]
    store = resources_for("local", nightly_home)["warehouse"].store()
    stages = {s.stage: s.status for s in store.stages(FAILED_NIGHT)}
    assert stages["tests_integration"] == "success" and stages["tests_unit"] == "failure"
    assert (nightly_home / "artefacts/demo/2026-11-07/cpu/tests_unit/junit.xml").is_file()


def test_a_store_that_cannot_upload_names_the_file_and_the_bucket(tmp_path, monkeypatch):
    from dagster_gcp import GCSResource

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    store = GcsArtefactStoreResource(
        root=str(tmp_path), gcs=GCSResource(project="p"), bucket="b", upload_deadline_s="1"
    )
    stage = store.stage_dir(FAILED_NIGHT, "tests_unit")
    (stage / "junit.xml").write_text("<testsuite/>")
    with pytest.raises(ArtefactError, match=r"cannot upload .*junit.xml to gs://b/nightly/demo/2026-11-07"):
        store.publish(FAILED_NIGHT, "tests_unit", [stage / "junit.xml"])


def without_gcp_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A host outside Google Cloud with no credentials configured: no key, no gcloud login, no
    metadata server setting, and not a GCE VM."""
    for name in (
        "STORAGE_EMULATOR_HOST",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_CLOUD_PROJECT",
        "GCE_METADATA_HOST",
        "GCE_METADATA_ROOT",
        "GCE_METADATA_IP",
        "NO_GCE_CHECK",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setattr(credentials, "GCE_PRODUCT_NAME_FILE", tmp_path / "no-dmi" / "product_name")


class Calls:
    """Counts the calls of a function while still calling it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
        self.count = 0
        real = getattr(owner, name)

        def counted(*args: object, **kwargs: object) -> object:
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)


def test_a_run_without_credentials_looks_them_up_once_and_never_waits(nightly_home, tmp_path, monkeypatch):
    """The bucket is set and no credentials are: every step's publish fails at once (local-only)
    without asking google-auth, whose metadata-server probe waits ~12 s per lookup; the lookup is
    made once for the whole run, and the run's log says once, clearly, that reports stay local."""
    import google.auth
    from google.auth.compute_engine import _metadata

    without_gcp_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_BUCKET", "nightly-artefacts")
    adc = Calls(monkeypatch, google.auth, "default")
    metadata = Calls(monkeypatch, _metadata, "ping")
    gce = Calls(monkeypatch, _metadata, "is_on_gce")
    credentials._lookup.cache_clear()
    gcs_module._LOCAL_ONLY_SAID.clear()
    store = resources_for("local", nightly_home)["artefacts"]
    assert isinstance(store, GcsArtefactStoreResource)

    def stage(name: str) -> dg.AssetsDefinition:
        @dg.asset(name=name, required_resource_keys={"artefacts"})
        def _stage(context) -> None:  # unannotated: Dagster rejects a string annotation
            artefacts = context.resources.artefacts
            folder = artefacts.stage_dir(FAILED_NIGHT, name)
            (folder / "junit.xml").write_text("<testsuite/>")
            try:  # as the stages publish: a store that cannot take the reports is a warning
                artefacts.publish(FAILED_NIGHT, name, artefacts.reports(FAILED_NIGHT, name))
            except ArtefactError as exc:
                context.log.warning(f"{name}: reports not published, they stay in {folder}: {exc}")

        return _stage

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [stage("sources"), stage("wheels"), stage("tests_unit")],
        resources={"artefacts": store},
        instance=instance,
    )

    assert result.success
    assert credentials._lookup.cache_info().misses == 1  # one lookup for the run's three steps
    assert (adc.count, metadata.count, gce.count) == (0, 0, 0)  # no google-auth, no metadata server
    messages = [r.user_message for r in instance.all_logs(result.run_id)]
    said = [m for m in messages if "artefact store local-only" in m]
    assert len(said) == 1, said
    assert "no Google Cloud credentials are configured (GOOGLE_APPLICATION_CREDENTIALS" in said[0]
    assert "gs://nightly-artefacts" in said[0] and str(nightly_home / "artefacts") in said[0]
    skipped = [m for m in messages if "reports not published" in m]
    assert len(skipped) == 3
    assert all("local-only, no credentials for gs://nightly-artefacts" in m for m in skipped)


def test_credentials_that_fail_to_load_make_the_store_local_only(tmp_path, monkeypatch):
    """A key file that is not there: google-auth is asked once (no metadata server), the store
    names the bucket, and the reason is logged once."""
    from dagster_gcp import GCSResource

    without_gcp_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing-key.json"))
    credentials._lookup.cache_clear()
    store = GcsArtefactStoreResource(root=str(tmp_path), gcs=GCSResource(project="p"), bucket="b")
    stage = store.stage_dir(FAILED_NIGHT, "tests_unit")
    (stage / "junit.xml").write_text("<testsuite/>")
    for _ in range(2):
        with pytest.raises(ArtefactError, match=r"local-only, no credentials for gs://b"):
            store.publish(FAILED_NIGHT, "tests_unit", [stage / "junit.xml"])
    found = credentials.gcp_credentials("p")
    assert found.missing.startswith("GOOGLE_APPLICATION_CREDENTIALS (")
    assert "DefaultCredentialsError" in found.missing and "missing-key.json" in found.missing
    assert credentials._lookup.cache_info().misses == 1


@pytest.mark.gcs
def test_the_emulator_needs_no_credentials_and_publishing_works(nightly_home, tmp_path, monkeypatch, gcs):
    """With the emulator (as with a real bucket and credentials) the reports are uploaded and their
    links open; the lookup asks google-auth nothing."""
    import google.auth
    from dagster_gcp import GCSResource

    adc = Calls(monkeypatch, google.auth, "default")
    credentials._lookup.cache_clear()
    store = GcsArtefactStoreResource(
        root=str(nightly_home / "artefacts"),
        gcs=GCSResource(project="nightly-test"),
        bucket=gcs.bucket,
        base_url=gcs.url,
    )
    stage = store.stage_dir(FAILED_NIGHT, "tests_unit")
    (stage / "pytest.log").write_text("test_mean failed\n")

    links = store.publish(FAILED_NIGHT, "tests_unit", store.reports(FAILED_NIGHT, "tests_unit"))

    assert links == {"pytest.log": gcs.object_url("nightly/demo/2026-11-07/cpu/tests_unit/pytest.log")}
    assert fetch(links["pytest.log"]) == "test_mean failed\n"
    assert adc.count == 0


@pytest.mark.gcs
def test_an_earlier_attempt_set_aside_keeps_its_reports_in_the_bucket(nightly_home, monkeypatch, gcs):
    """A re-run's attempt of a stage replaces the stage's objects in the bucket; the earlier
    attempt's reports are uploaded under .runs/<its run>/ first, so both stay one click away."""
    from dagster_gcp import GCSResource

    credentials._lookup.cache_clear()
    store = GcsArtefactStoreResource(
        root=str(nightly_home / "artefacts"),
        gcs=GCSResource(project="nightly-test"),
        bucket=gcs.bucket,
        base_url=gcs.url,
    )
    stage = store.stage_dir(FAILED_NIGHT, "tests_unit")
    (stage / "pytest.log").write_text("the first run: test_mean failed\n")
    store.publish(FAILED_NIGHT, "tests_unit", store.reports(FAILED_NIGHT, "tests_unit"))
    (stage / "venv").mkdir()
    (stage / "venv" / "pyvenv.cfg").write_text("home = /usr\n")

    aside = store.set_aside(FAILED_NIGHT, "tests_unit", "run-1")
    assert aside is not None and not stage.exists()
    stage = store.stage_dir(FAILED_NIGHT, "tests_unit", fresh=True)
    (stage / "pytest.log").write_text("the re-run: passed\n")
    store.publish(FAILED_NIGHT, "tests_unit", store.reports(FAILED_NIGHT, "tests_unit"))
    store.keep_evidence_only(aside)
    link = store.publish_aside(aside)

    prefix = "nightly/demo/2026-11-07/cpu"
    assert link.endswith(f"{gcs.bucket}/{prefix}/.runs/run-1/tests_unit/")
    assert (
        fetch(gcs.object_url(f"{prefix}/.runs/run-1/tests_unit/pytest.log"))
        == "the first run: test_mean failed\n"
    )
    assert fetch(gcs.object_url(f"{prefix}/tests_unit/pytest.log")) == "the re-run: passed\n"
    assert not (aside / "venv").exists() and (aside / "pytest.log").is_file()


def test_an_attempt_without_results_puts_the_earlier_one_back(nightly_home, tmp_path):
    store = resources_for("local", nightly_home)["artefacts"]
    stage = store.stage_dir(FAILED_NIGHT, "sources")
    (stage / "repo" / ".git").mkdir(parents=True)
    (stage / "manifest.json").write_text('{"run_id": "run-1"}')
    assert store.folder_run_id(FAILED_NIGHT, "sources") == "run-1"
    aside = store.set_aside(FAILED_NIGHT, "sources", "run-1")
    assert aside is not None
    new = store.stage_dir(FAILED_NIGHT, "sources", fresh=True)
    (new / "git.log").write_text("fatal: repository not found\n")

    failed = store.put_back(FAILED_NIGHT, "sources", aside, "run-2")

    assert (stage / "repo" / ".git").is_dir()  # the checkout the night's other stages point to
    assert (failed / "git.log").read_text() == "fatal: repository not found\n"
    assert failed == stage.parent / ".runs" / "run-2" / "sources"
    assert not (stage.parent / ".runs" / "run-1").exists()  # nothing left behind
    again = store.set_aside(FAILED_NIGHT, "sources", "run-2")  # the same run's second attempt
    assert again == stage.parent / ".runs" / "run-2-2" / "sources"
