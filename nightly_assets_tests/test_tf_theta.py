"""Seed 004's shape end to end on the local batch scheduler: the night's wheel in a build root, a
sanity job that must print its line, the deploy to a release root, a 2x2x2 benchmark sweep (one
row per point) and the analysis report."""

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets.warehouse.store import Warehouse
from nightly_assets_tests.catalog_files import copy_catalog, write_pipeline
from nightly_assets_tests.cli_nights import read_until
from nightly_assets_tests.waiting import wait_for

# tf_theta's stages on the sample project: TensorFlow's build is replaced by the sample's wheel.
THETA_PIPELINE = """
name: theta_sample
title: Theta-shaped nightly of the sample project
seed: "004"
description: Sanity job, deploy, sweep and report on the local batch scheduler.
cron: "0 5 * * *"
start_date: 2026-11-01
retention_days: 2
repositories:
  - {name: nightlysample, url: "sample:nightlysample", branch: main}
targets:
  - {name: theta-knl, arch: amd64, params: {queue: debug-cache-quad}}
stages:
  - {name: sources, kind: sources, description: Pinned sample.}
  - {name: wheels, kind: wheels, deps: [sources], runner: local, description: The wheel.}
  - name: sanity_job
    kind: batch_job
    deps: [wheels]
    runner: theta-cobalt
    description: Imports the night's package in a job.
    params:
      nodes: 1
      walltime_minutes: 2
      expect_output: "session ok"
      command: ["{python}", "-c", "import nightlysample; print('session ok')"]
  - {name: deploy, kind: deploy, deps: [sanity_job], runner: theta-cobalt, description: Released.}
  - name: benchmark_sweep
    kind: benchmark_sweep
    deps: [deploy]
    runner: theta-cobalt
    description: The sweep.
    params:
      seconds: 0.2
      max_concurrent_jobs: 2
      grid: {trials: [1, 2], nodes: [1, 2], ranks_per_node: [1, 2]}
  - {name: analysis_report, kind: analysis_report, deps: [benchmark_sweep], description: The report.}
  - {name: night_summary, kind: night_summary, deps: [analysis_report], description: Summary.}
"""

# The same night on a real one-node Slurm cluster: the sanity job starts two ranks with srun, the
# sweep fits one node, and the analysis report is a job too.
SLURM_PIPELINE = (
    THETA_PIPELINE.replace("queue: debug-cache-quad", "queue: debug")
    .replace(
        """command: ["{python}", "-c", "import nightlysample; print('session ok')"]""",
        "ranks_per_node: 2\n      command: [srun, --ntasks=2, '{python}', -c, "
        "\"import os, nightlysample; print('session ok', os.environ['SLURM_PROCID'])\"]",
    )
    .replace("nodes: [1, 2], ranks_per_node: [1, 2]", "nodes: [1], ranks_per_node: [1, 2]")
    .replace(
        "{name: analysis_report, kind: analysis_report, deps: [benchmark_sweep],",
        "{name: analysis_report, kind: analysis_report, deps: [benchmark_sweep], runner: theta-cobalt,",
    )
)


@pytest.fixture
def theta(catalog_nights, nightly_home):
    """Runs a night of a Theta-shaped pipeline (THETA_PIPELINE, or the text given)."""

    def night(date: str, pipeline: str = THETA_PIPELINE) -> tuple[NightKey, dict]:
        key, stages, outcome = catalog_nights.run(pipeline, date)
        assert outcome.succeeded == all(s.status == "success" for s in stages.values())
        return key, stages

    return night, resources_for("local", nightly_home)["warehouse"].store()


def test_a_theta_night_runs_job_deploy_sweep_and_report(theta, nightly_home):
    night, store = theta
    _, stages = night("2026-11-03")
    assert all(s.status == "success" for s in stages.values()), {n: s.detail for n, s in stages.items()}
    artefacts = nightly_home / "artefacts/theta_sample/2026-11-03/theta-knl"
    sanity = json.loads((artefacts / "sanity_job/manifest.json").read_text())
    assert "session ok" in Path(sanity["stdout"]).read_text()
    release_root = nightly_home / "releases/theta_sample/theta-knl"
    assert (release_root / "current").resolve() == (release_root / "2026-11-03").resolve()
    sweep = json.loads((artefacts / "benchmark_sweep/manifest.json").read_text())
    assert len(sweep["rows"]) == 8 and all(r["status"] == "ok" and r["value"] > 0 for r in sweep["rows"])
    point = {"nodes": 2, "ranks_per_node": 2, "trial": 1}
    name = "sweep/nodes=2/ranks_per_node=2/trial=1"
    history = store.benchmark_series("theta_sample", "theta-knl", name, before=dt.date(2026, 11, 4), limit=5)
    assert [v for _, v, _ in history] == [next(r["value"] for r in sweep["rows"] if r["point"] == point)]
    report = json.loads((artefacts / "analysis_report/manifest.json").read_text())
    assert Path(report["pdf"]).read_bytes().startswith(b"%PDF")
    assert len(Path(report["csv"]).read_text().splitlines()) == 1 + 8  # a header and one row per point


def test_a_sanity_job_without_its_line_fails_the_night_and_names_the_job(theta, nightly_home):
    night, _ = theta
    broken = THETA_PIPELINE.replace("print('session ok')", "print('session broken')")
    assert broken != THETA_PIPELINE
    _, stages = night("2026-11-04", broken)
    assert stages["sanity_job"].status == "failure"
    assert "session ok" in (stages["sanity_job"].detail or "") and "session broken" in (
        stages["sanity_job"].detail or ""
    )
    assert "deploy" not in stages or stages["deploy"].status != "success"
    assert not (nightly_home / "releases/theta_sample/theta-knl/2026-11-04").exists()


@pytest.mark.slurm
def test_a_theta_night_on_slurm_runs_its_jobs_as_slurm_jobs(theta, nightly_home, slurm, monkeypatch):
    monkeypatch.setenv("NIGHTLY_BATCH_KIND", "slurm")
    monkeypatch.setenv("NIGHTLY_SLURM_CONF", str(slurm.conf))
    monkeypatch.setenv("NIGHTLY_BATCH_POLL_S", "0.2")
    # What an attempt killed with its orchestrator leaves: its sanity job, still running. This
    # night's attempt cancels it before it rebuilds the build root that job uses.
    with dg.build_resources({"batch": resources_for("local", nightly_home)["batch"]}) as resolved:
        stale = resolved.batch.submit(
            "theta_sample-sanity_job-20261105-theta-knl",
            ["sleep", "600"],
            walltime=dt.timedelta(minutes=10),
            queue="debug",
        )
    night, _ = theta
    _, stages = night("2026-11-05", SLURM_PIPELINE)
    assert all(s.status == "success" for s in stages.values()), {n: s.detail for n, s in stages.items()}
    artefacts = nightly_home / "artefacts/theta_sample/2026-11-05/theta-knl"

    def slurm_job(job_id: str) -> dict[str, str]:
        shown = slurm.run("scontrol", "--oneliner", "show", "job", job_id)
        return dict(word.split("=", 1) for word in shown.split() if "=" in word)

    assert "JobState=CANCELLED" in slurm.run("scontrol", "--oneliner", "show", "job", stale)
    sanity = json.loads((artefacts / "sanity_job/manifest.json").read_text())
    assert sanity["job_id"] != stale
    assert sorted(Path(sanity["stdout"]).read_text().split("\n")[:2]) == ["session ok 0", "session ok 1"]
    job = slurm_job(sanity["job_id"])
    assert (job["JobName"], job["JobState"], job["NumTasks"]) == (
        "theta_sample-sanity_job-20261105-theta-knl",
        "COMPLETED",
        "2",
    )
    sweep = json.loads((artefacts / "benchmark_sweep/manifest.json").read_text())
    assert len(sweep["rows"]) == 4 and all(r["status"] == "ok" for r in sweep["rows"])
    for row in sweep["rows"]:
        point = row["point"]
        job = slurm_job(row["job_id"])
        assert job["JobState"] == "COMPLETED" and job["NumTasks"] == str(point["ranks_per_node"])
        suffix = f"-n{point['nodes']}-r{point['ranks_per_node']}-t{point['trial']}"
        assert job["JobName"] == "theta_sample-benchmark_sweep-20261105-theta-knl" + suffix
    report = json.loads((artefacts / "analysis_report/manifest.json").read_text())
    assert slurm_job(report["job_id"])["JobName"] == "theta_sample-analysis_report-20261105-theta-knl"
    assert Path(report["pdf"]).read_bytes().startswith(b"%PDF")
    assert len(Path(report["csv"]).read_text().splitlines()) == 1 + 4


@pytest.mark.slurm
def test_a_night_terminated_while_its_slurm_job_runs_cancels_the_job(
    nightly_home, dagster_home, slurm, tmp_path, monkeypatch
):
    """SIGTERM to `nightly run` (a scheduler stopping it, a run terminated) while the sanity job
    runs on Slurm: the job is scancelled, the stage and the night say cancelled."""
    catalog = copy_catalog(tmp_path / "catalog")
    long_sanity, count = re.subn(r"command: \[srun, [^\n]*", 'command: [sleep, "600"]', SLURM_PIPELINE)
    assert count == 1
    write_pipeline(catalog, long_sanity)
    env = {
        **os.environ,
        "NIGHTLY_CATALOG_DIR": str(catalog),
        "NIGHTLY_BATCH_KIND": "slurm",
        "NIGHTLY_SLURM_CONF": str(slurm.conf),
        "NIGHTLY_BATCH_POLL_S": "0.2",
        "PYTHONUNBUFFERED": "1",
    }
    cli = subprocess.Popen(
        [sys.executable, "-m", "nightly_assets.cli", "run", "theta_sample", "--night", "2026-11-06"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        lines = read_until(cli, "started  theta_sample__sanity_job")
        deadline = time.monotonic() + 60
        while not slurm.queue() and time.monotonic() < deadline:
            time.sleep(0.2)
        (job_id,) = slurm.queue()
        cli.send_signal(signal.SIGTERM)
        rest, _ = cli.communicate(timeout=120)
    finally:
        cli.kill()
    output = "".join(lines) + rest
    assert cli.returncode == 130, output

    # scancel is asynchronous: on a loaded machine the controller shows the job as it ends first.
    def cancelled() -> str | None:
        shown = slurm.run("scontrol", "--oneliner", "show", "job", job_id)
        return shown if "JobState=CANCELLED" in shown else None

    shown = wait_for(f"job {job_id} cancelled", cancelled, timeout_s=30)
    assert "JobState=CANCELLED" in shown and "JobName=theta_sample-sanity_job-20261106-theta-knl" in shown
    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    key = NightKey("theta_sample", dt.date(2026, 11, 6), "theta-knl")
    stages = {s.stage: s.status for s in store.stages(key)}
    night = store.night(key)
    store.dispose()
    assert stages["sanity_job"] == "cancelled" and night is not None and night.status == "cancelled"
