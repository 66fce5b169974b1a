"""Retention: a night's summary deletes the artefacts (logs, JUnit, build metrics) of the
pipeline's nights older than `retention_days`; the warehouse keeps their rows."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.artefacts.gcs import GcsArtefactStoreResource
from nightly_assets.artefacts.resources import MANIFEST, ArtefactStoreResource, last_written
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey, TestCase, TestReport
from nightly_assets.stage_kinds.night_summary import _prune_artefacts, kept_nights
from nightly_assets.warehouse import Warehouse
from nightly_assets.warehouse.rows import NightRow
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_folder
from nightly_assets_tests.peers.gcs import GcsEmulator


def _stage_folder(artefacts: ArtefactStoreResource, key: NightKey, stage: str) -> Path:
    folder = artefacts.stage_dir(key, stage)
    (folder / "junit.xml").write_text("<testsuite/>")
    (folder / "pytest.log").write_text("log")
    (folder / "manifest.json").write_text("{}")
    return folder


def written(target_dir: Path, days_ago: float) -> None:
    """As if every stage of the night x target folder had last been written `days_ago` days ago."""
    when = (dt.datetime.now(dt.UTC) - dt.timedelta(days=days_ago)).timestamp()
    for path in sorted(target_dir.rglob("*"), reverse=True):  # contents before their folders
        os.utime(path, (when, when))
    os.utime(target_dir, (when, when))


def test_last_written_is_the_newest_stage_folder_or_manifest(tmp_path: Path) -> None:
    artefacts = ArtefactStoreResource(root=str(tmp_path))
    key = NightKey("p", dt.date(2026, 11, 1), "cpu")
    _stage_folder(artefacts, key, "sources")
    target = tmp_path / "p/2026-11-01/cpu"
    now = dt.datetime.now(dt.UTC)
    written(target, 10)
    assert abs((last_written(target) - (now - dt.timedelta(days=10))).total_seconds()) < 60
    _stage_folder(artefacts, key, "night_summary")  # a summary run written today
    assert (now - last_written(target)).total_seconds() < 60
    written(target, 10)
    (target / "sources" / MANIFEST).write_text("{}")  # a stage re-run in its old folder
    assert (now - last_written(target)).total_seconds() < 60


def test_prune_deletes_the_folders_written_before_the_cutoff_but_kept_ones(tmp_path: Path) -> None:
    artefacts = ArtefactStoreResource(root=str(tmp_path / "artefacts"))
    root = tmp_path / "artefacts"
    # (night, days since written): 11-02 was backfilled today, long after 11-09 ran.
    ages = {1: 9.0, 2: 0.1, 3: 8.0, 9: 2.0}
    for day, age in ages.items():
        for target in ("cpu", "gpu"):
            key = NightKey("p", dt.date(2026, 11, day), target)
            _stage_folder(artefacts, key, "tests_unit")
            written(root / f"p/{key.night}/{target}", age)
    _stage_folder(artefacts, NightKey("other", dt.date(2026, 11, 1), "cpu"), "tests_unit")
    written(root / "other/2026-11-01/cpu", 30)
    (root / "p" / "notes").mkdir()  # not a night's folder

    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=7)
    removed = artefacts.prune("p", cutoff, keep={(dt.date(2026, 11, 3), "gpu")})
    assert removed == [root / "p/2026-11-01/cpu", root / "p/2026-11-01/gpu", root / "p/2026-11-03/cpu"]
    assert sorted(p.name for p in (root / "p").iterdir()) == [
        "2026-11-02",
        "2026-11-03",
        "2026-11-09",
        "notes",
    ]
    assert (root / "p/2026-11-02/gpu/tests_unit/junit.xml").is_file()  # old night, fresh artefacts
    assert (root / "p/2026-11-03/gpu/tests_unit/junit.xml").is_file()  # kept
    assert (root / "other/2026-11-01/cpu/tests_unit/junit.xml").is_file()  # another pipeline
    assert artefacts.prune("missing", cutoff) == []


def test_kept_nights_are_the_running_ones_and_each_targets_unresolved_failure() -> None:
    def night(day: int, target: str, status: str) -> NightRow:
        return NightRow("p", dt.date(2026, 11, day), target, f"r{day}", status, {})

    nights = [
        night(1, "cpu", "failure"),  # a later cpu night succeeded: not kept
        night(2, "cpu", "success"),
        night(3, "cpu", "failure"),  # an older failure than 11-05's: not kept
        night(4, "cpu", "running"),
        night(5, "cpu", "failure"),  # the latest failure, nothing after it succeeded
        night(6, "cpu", "partial"),
        night(1, "gpu", "failure"),  # gpu's own failure: cpu's successes do not end it
        night(3, "gpu", "warn"),  # a night that ran whole ends the failure before it
        night(4, "gpu", "failure"),
    ]
    assert kept_nights(nights) == {
        (dt.date(2026, 11, 4), "cpu"),
        (dt.date(2026, 11, 5), "cpu"),
        (dt.date(2026, 11, 4), "gpu"),
    }
    # A backfill of an old night that succeeds does not end a later failure.
    assert (dt.date(2026, 11, 5), "cpu") in kept_nights([*nights, night(2, "cpu", "success")])


@pytest.mark.gcs
def test_the_gcs_store_prunes_the_reports_uploaded_before_the_cutoff(
    tmp_path: Path, gcs: GcsEmulator
) -> None:
    """Found by listing the bucket: a night another host uploaded (no local folder here) goes
    too; kept nights, reports uploaded after the cutoff, a night whose local folder stays and
    another pipeline's reports stay."""
    from dagster_gcp import GCSResource
    from google.cloud import storage

    prefix = f"t{secrets.token_hex(3)}"  # the emulator's bucket is shared by the session's tests
    artefacts = GcsArtefactStoreResource(
        root=str(tmp_path / "artefacts"),
        gcs=GCSResource(project="nightly-test"),
        bucket=gcs.bucket,
        prefix=prefix,
    )
    root = tmp_path / "artefacts"

    def upload(pipeline: str, day: int, target: str, age_days: float) -> None:
        key = NightKey(pipeline, dt.date(2026, 11, day), target)
        folder = _stage_folder(artefacts, key, "tests_unit")
        artefacts.publish(key, "tests_unit", [folder / "junit.xml", folder / "pytest.log"])
        written(root / pipeline / key.night.isoformat() / target, age_days)

    for day, target in [(1, "cpu"), (1, "gpu"), (2, "cpu"), (2, "gpu")]:
        upload("p", day, target, 9)
    upload("p2", 1, "other", 9)
    time.sleep(1.1)  # the emulator stamps uploads with its clock: the cutoff falls between them
    cutoff = dt.datetime.now(dt.UTC)
    time.sleep(1.1)
    upload("p", 5, "cpu", 0)
    upload("p", 1, "new", 9)  # an old night backfilled on another host: recent upload, local copy old
    shutil.rmtree(root / "p/2026-11-01/gpu")  # pruned here already; its reports came from elsewhere
    shutil.rmtree(root / "p/2026-11-01/new")  # uploaded from another host
    written(root / "p/2026-11-02/cpu", 0)  # rewritten here after the cutoff: the local folder stays

    removed = artefacts.prune("p", cutoff, keep={(dt.date(2026, 11, 2), "gpu")})
    assert removed == [root / "p/2026-11-01/cpu", root / "p/2026-11-01/gpu"]
    names = {
        b.name for b in storage.Client(project="nightly-test").list_blobs(gcs.bucket, prefix=f"{prefix}/")
    }
    assert names == {
        f"{prefix}/{night}/tests_unit/{file}"
        for night in (
            "p/2026-11-01/new",
            "p/2026-11-02/cpu",
            "p/2026-11-02/gpu",
            "p/2026-11-05/cpu",
            "p2/2026-11-01/other",
        )
        for file in ("junit.xml", "pytest.log")
    }
    assert artefacts.prune("p", cutoff, keep={(dt.date(2026, 11, 2), "gpu")}) == []


def test_the_summary_keeps_tonight_running_and_unresolved_failed_nights(tmp_path: Path) -> None:
    artefacts = ArtefactStoreResource(root=str(tmp_path / "artefacts"))
    store = Warehouse(f"sqlite:///{tmp_path}/warehouse.sqlite")
    tonight = NightKey("p", dt.date(2026, 11, 10), "cpu")
    statuses = {
        (1, "cpu"): "success",
        (2, "cpu"): "running",
        (3, "cpu"): "failure",
        (4, "cpu"): "success",
        (5, "cpu"): "failure",
        (10, "cpu"): "success",
        (5, "gpu"): "failure",
        (6, "gpu"): "partial",
    }
    for (day, target), status in statuses.items():
        key = NightKey("p", dt.date(2026, 11, day), target)
        _stage_folder(artefacts, key, "tests_unit")
        written(tmp_path / "artefacts/p" / key.night.isoformat() / target, 30)  # all long ago
        store.record_night(key, run_id=f"r{day}", status=status, pins={})
        store.record_test_report(key, TestReport("unit", (TestCase("t", "a", "failed"),)))

    pruned = _prune_artefacts(dg.build_asset_context(), artefacts, store, tonight, retention_days=7)
    # Kept: 11-02 still runs (a backfill), 11-10 is tonight, gpu's 11-05 failed and no later gpu
    # night succeeded. cpu's failures of 11-03 and 11-05 were followed by a success.
    assert pruned == [
        "2026-11-01/cpu",
        "2026-11-03/cpu",
        "2026-11-04/cpu",
        "2026-11-05/cpu",
        "2026-11-06/gpu",
    ]
    assert store.suite_counts(NightKey("p", dt.date(2026, 11, 1), "cpu"))["unit"]["failed"] == 1
    assert len(store.nights("p")) == 8
    store.dispose()


def test_a_night_summary_prunes_what_was_written_before_retention_and_keeps_a_backfill(
    catalog_nights: CatalogNights, tmp_path: Path
) -> None:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    (upstream / "README").write_text("x")
    commit_folder(upstream)
    pipeline = f"""
name: kept_short
title: Two days of artefacts
seed: "000"
description: Sources and a summary, artefacts kept two days.
cron: "0 2 * * *"
start_date: 2026-11-01
retention_days: 2
repositories:
  - {{name: repo, url: "{upstream}", branch: main}}
targets:
  - {{name: cpu, arch: amd64}}
stages:
  - {{name: sources, kind: sources, description: The pinned repository.}}
  - {{name: night_summary, kind: night_summary, deps: [sources], description: Summary.}}
"""
    root = catalog_nights.home / "artefacts" / "kept_short"
    first, _, outcome = catalog_nights.run(pipeline, "2026-11-03")
    assert outcome.succeeded and (root / "2026-11-03/cpu/sources/manifest.json").is_file()
    catalog_nights.run(pipeline, "2026-11-05")
    written(root / "2026-11-03/cpu", 3)  # as if the nights had run on their own days
    written(root / "2026-11-05/cpu", 1)
    _, stages, outcome = catalog_nights.run(pipeline, "2026-11-06")
    assert outcome.succeeded and stages["night_summary"].status == "success"
    assert sorted(p.name for p in root.iterdir()) == ["2026-11-05", "2026-11-06"]
    # A backfill of an old night is written today: the next night keeps it for two days more.
    catalog_nights.run(pipeline, "2026-11-01")
    written(root / "2026-11-05/cpu", 3)
    written(root / "2026-11-06/cpu", 2.5)
    catalog_nights.run(pipeline, "2026-11-07")
    assert sorted(p.name for p in root.iterdir()) == ["2026-11-01", "2026-11-07"]
    with dg.build_resources(
        {"warehouse": resources_for("local", catalog_nights.home)["warehouse"]}
    ) as resolved:
        night = resolved.warehouse.store().night(first)
        assert night is not None and night.status == "success"  # the warehouse keeps the night
        assert [s.stage for s in resolved.warehouse.store().stages(first)] == ["sources", "night_summary"]
