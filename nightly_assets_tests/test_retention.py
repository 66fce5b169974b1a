"""Retention: a night's summary deletes the artefacts (logs, JUnit, build metrics) of the
pipeline's nights older than `retention_days`; the warehouse keeps their rows."""

from __future__ import annotations

import datetime as dt
import secrets
import shutil
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.artefacts.gcs import GcsArtefactStoreResource
from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey, TestCase, TestReport
from nightly_assets.stage_kinds.night_summary import _prune_artefacts
from nightly_assets.warehouse import Warehouse
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_folder
from nightly_assets_tests.peers.gcs import GcsEmulator


def _stage_folder(artefacts: ArtefactStoreResource, key: NightKey, stage: str) -> Path:
    folder = artefacts.stage_dir(key, stage)
    (folder / "junit.xml").write_text("<testsuite/>")
    (folder / "pytest.log").write_text("log")
    return folder


def test_prune_deletes_the_night_folders_before_the_cutoff_but_kept_ones(tmp_path: Path) -> None:
    artefacts = ArtefactStoreResource(root=str(tmp_path / "artefacts"))
    keys = [
        NightKey("p", dt.date(2026, 11, day), target) for day in (1, 2, 3, 9) for target in ("cpu", "gpu")
    ]
    for key in keys:
        _stage_folder(artefacts, key, "tests_unit")
    _stage_folder(artefacts, NightKey("other", dt.date(2026, 11, 1), "cpu"), "tests_unit")
    (tmp_path / "artefacts" / "p" / "notes").mkdir()  # not a night's folder

    removed = artefacts.prune("p", dt.date(2026, 11, 3), keep={(dt.date(2026, 11, 2), "gpu")})
    root = tmp_path / "artefacts"
    assert removed == [root / "p/2026-11-01/cpu", root / "p/2026-11-01/gpu", root / "p/2026-11-02/cpu"]
    assert sorted(p.name for p in (root / "p").iterdir()) == [
        "2026-11-02",
        "2026-11-03",
        "2026-11-09",
        "notes",
    ]
    assert (root / "p/2026-11-02/gpu/tests_unit/junit.xml").is_file()
    assert (root / "other/2026-11-01/cpu/tests_unit/junit.xml").is_file()  # another pipeline
    assert artefacts.prune("missing", dt.date(2026, 11, 3)) == []


@pytest.mark.gcs
def test_the_gcs_store_prunes_the_uploaded_reports_of_expired_nights(
    tmp_path: Path, gcs: GcsEmulator
) -> None:
    """Found by listing the bucket: a night another host uploaded (no local folder here) goes
    too; kept (running) nights, newer nights and another pipeline's reports stay."""
    from dagster_gcp import GCSResource
    from google.cloud import storage

    prefix = f"t{secrets.token_hex(3)}"  # the emulator's bucket is shared by the session's tests
    artefacts = GcsArtefactStoreResource(
        root=str(tmp_path / "artefacts"),
        gcs=GCSResource(project="nightly-test"),
        bucket=gcs.bucket,
        prefix=prefix,
    )
    pipeline = "p"
    nights = [(day, target) for day in (1, 2, 5) for target in ("cpu", "gpu")]
    for day, target in [*nights, (1, "other")]:
        key = NightKey(pipeline if target != "other" else "p2", dt.date(2026, 11, day), target)
        folder = _stage_folder(artefacts, key, "tests_unit")
        artefacts.publish(key, "tests_unit", [folder / "junit.xml", folder / "pytest.log"])
    root = tmp_path / "artefacts"
    shutil.rmtree(root / "p/2026-11-01/gpu")  # pruned here already; its reports came from elsewhere

    removed = artefacts.prune(pipeline, dt.date(2026, 11, 3), keep={(dt.date(2026, 11, 2), "gpu")})
    assert removed == [root / "p/2026-11-01/cpu", root / "p/2026-11-01/gpu", root / "p/2026-11-02/cpu"]
    names = {
        b.name for b in storage.Client(project="nightly-test").list_blobs(gcs.bucket, prefix=f"{prefix}/")
    }
    assert names == {
        f"{prefix}/{night}/tests_unit/{file}"
        for night in ("p/2026-11-02/gpu", "p/2026-11-05/cpu", "p/2026-11-05/gpu", "p2/2026-11-01/other")
        for file in ("junit.xml", "pytest.log")
    }
    assert artefacts.prune(pipeline, dt.date(2026, 11, 3), keep={(dt.date(2026, 11, 2), "gpu")}) == []


def test_the_summary_prunes_by_retention_days_keeps_running_nights_and_warehouse_rows(tmp_path: Path) -> None:
    artefacts = ArtefactStoreResource(root=str(tmp_path / "artefacts"))
    store = Warehouse(f"sqlite:///{tmp_path}/warehouse.sqlite")
    tonight = NightKey("p", dt.date(2026, 11, 10), "cpu")
    for day, status in ((1, "success"), (2, "running"), (3, "failure"), (4, "success")):
        key = NightKey("p", dt.date(2026, 11, day), "cpu")
        _stage_folder(artefacts, key, "tests_unit")
        store.record_night(key, run_id=f"r{day}", status=status, pins={})
        store.record_test_report(key, TestReport("unit", (TestCase("t", "a", "failed"),)))

    pruned = _prune_artefacts(dg.build_asset_context(), artefacts, store, tonight, retention_days=7)
    assert pruned == ["2026-11-01/cpu"]  # 11-02 still runs (a backfill), 11-03 is the cutoff itself
    assert store.suite_counts(NightKey("p", dt.date(2026, 11, 1), "cpu"))["unit"]["failed"] == 1
    assert len(store.nights("p")) == 4
    store.dispose()


def test_a_night_summary_prunes_the_artefacts_of_nights_past_retention(
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
    catalog_nights.run(pipeline, "2026-11-05")  # 11-03 is not older than 11-05 - 2 days
    assert (root / "2026-11-03/cpu/sources/manifest.json").is_file()
    _, stages, outcome = catalog_nights.run(pipeline, "2026-11-06")
    assert outcome.succeeded and stages["night_summary"].status == "success"
    assert sorted(p.name for p in root.iterdir()) == ["2026-11-05", "2026-11-06"]
    with dg.build_resources(
        {"warehouse": resources_for("local", catalog_nights.home)["warehouse"]}
    ) as resolved:
        night = resolved.warehouse.store().night(first)
        assert night is not None and night.status == "success"  # the warehouse keeps the night
        assert [s.stage for s in resolved.warehouse.store().stages(first)] == ["sources", "night_summary"]
