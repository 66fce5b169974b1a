"""A Bazel suite stage of a pipeline (seed 000's tests_multigpu shape) through the RBE resource:
pinned checkout of a repository holding a Bazel workspace, `bazel test` with the catalog's targets,
tag filters and flaky attempts against the real BuildGrid cache, the report in the warehouse."""

import datetime as dt
import os
import shutil
import subprocess

import dagster as dg
import pytest

from nightly_assets.catalog.loader import catalog_dir, load_catalog
from nightly_assets.definitions import build_definitions
from nightly_assets.night import run_night
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey

pytestmark = [pytest.mark.bazel]

PIPELINE = """
name: bazel_sample
title: Bazel suite through RBE
seed: "000"
description: The test workspace's targets with the catalog's filters, through the RBE resource.
cron: "0 2 * * *"
start_date: 2026-11-01
retention_days: 7
repositories:
  - {{name: workspace, url: "{url}", branch: main}}
targets:
  - {{name: rocm-mi300, arch: amd64, devices: 8}}
stages:
  - {{name: sources, kind: sources, description: The pinned workspace.}}
  - name: tests_multigpu
    kind: test_suite
    deps: [sources]
    description: The Bazel suite.
    suite:
      timeout_minutes: 30
      runner: rbe-rocm
      bazel:
        targets: ["//tests/..."]
        tag_filters: "gpu,cpu,-tpu,-config-cuda-only"
        flaky_test_attempts: 3
  - {{name: night_summary, kind: night_summary, deps: [tests_multigpu], description: Summary.}}
"""


def _commit(workspace) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2026-11-02T10:00:00Z",
        "GIT_COMMITTER_DATE": "2026-11-02T10:00:00Z",
    }
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "workspace"]):
        subprocess.run(["git", "-C", str(workspace), *argv], check=True, env=env, capture_output=True)


def test_a_bazel_suite_stage_runs_through_rbe_and_records_the_report(
    nightly_home, tmp_path, monkeypatch, make_bazel_workspace, bazel_peer, buildgrid
):
    workspace = make_bazel_workspace()
    _commit(workspace)
    catalog = tmp_path / "catalog"
    shutil.copytree(catalog_dir(), catalog)
    (catalog / "pipelines" / "bazel_sample.yaml").write_text(PIPELINE.format(url=workspace))
    monkeypatch.setenv("NIGHTLY_RBE_CACHE", buildgrid.url)
    monkeypatch.setenv("NIGHTLY_RBE_INSTANCE", buildgrid.instance_name)
    monkeypatch.setenv("NIGHTLY_BAZEL_OUTPUT_ROOT", str(bazel_peer.output_user_root))
    resources = resources_for("local", nightly_home)
    key = NightKey("bazel_sample", dt.date(2026, 11, 3), "rocm-mi300")
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        run_night(build_definitions(catalog), instance, load_catalog(catalog), key, resources["notifier"])
    store = resources["warehouse"].store()
    stage = {s.stage: s for s in store.stages(key)}["tests_multigpu"]
    counts = store.suite_counts(key)["tests_multigpu"]
    # pass + flaky pass, the failing one fails; the tpu, cuda-only and untagged targets are filtered out.
    assert counts["passed"] == 2 and counts["failed"] + counts["error"] == 1, counts
    assert stage.status == "failure"  # a failing test fails the stage, not the run's bookkeeping
    cases = {c.name: c for c in store.failed_cases(key, "tests_multigpu")}
    assert len(cases) == 1
    manifest = nightly_home / "artefacts/bazel_sample/2026-11-03/rocm-mi300/tests_multigpu/manifest.json"
    assert '"bazel_mode": "remote"' in manifest.read_text()
