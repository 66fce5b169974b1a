"""Two runs of one night at once (a schedule tick and a manual re-run): the second waits for the
first to end, then replaces its rows; neither destroys the other's work, and the warehouse and the
alerts agree."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import uuid

import dagster as dg
import pytest

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.reporting.follow_up import summary_run_stages
from nightly_assets.results import NightKey
from nightly_assets.warehouse.store import Warehouse
from nightly_assets_tests.cli_nights import (
    read_until,
    start_night_with_a_slow_benchmark,
    wait_for_the_benchmark,
)

KEY = NightKey("demo", dt.date(2026, 11, 3), "cpu")


@pytest.mark.slow
def test_a_second_run_of_a_night_waits_for_the_first(dagster_home, nightly_home, tmp_path):
    marker = f"nightly-lease-{uuid.uuid4().hex}"
    release = tmp_path / "release-the-benchmark"
    # The first night's benchmark runs until the second night says it waits (at most 120 s).
    first = start_night_with_a_slow_benchmark(tmp_path, marker, seconds=120, release=release)
    second_process = None
    try:
        first_lines = wait_for_the_benchmark(first, marker)
        env = {**os.environ, "NIGHTLY_CATALOG_DIR": str(tmp_path / "catalog"), "PYTHONUNBUFFERED": "1"}
        second_process = subprocess.Popen(
            [sys.executable, "-m", "nightly_assets.cli", "run", "demo", "--night", "2026-11-03"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        waiting = read_until(second_process, "waiting for it to end")
        release.touch()
        second_rest, second_err = second_process.communicate(timeout=300)
        second = subprocess.CompletedProcess(
            second_process.args, second_process.returncode, "".join(waiting) + second_rest, second_err
        )
        first_rest, _ = first.communicate(timeout=300)
    finally:
        first.kill()
        if second_process is not None:
            second_process.kill()
    first_output = "".join(first_lines) + first_rest
    assert first.returncode == 0, first_output  # its checkout and rows were left alone
    assert second.returncode == 0, second.stdout + second.stderr
    assert "demo/2026-11-03/cpu is being run by run" in second.stdout
    assert "waiting for it to end" in second.stdout

    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    night = store.night(KEY)
    assert night is not None and night.status == "success"
    stages = store.stages(KEY)
    assert len(stages) == 12 and {s.status for s in stages} == {"success"}
    # All the second's: its night run's, and the summary its follow-up wrote again after release.
    [first_run] = re.findall(r"is being run by run (\S+?)[;,\s]", second.stdout)[:1]
    rewritten = set(summary_run_stages(load_catalog(tmp_path / "catalog"), "demo"))
    assert len({s.run_id for s in stages if s.stage not in rewritten}) == 1  # one night run
    assert "night_summary" in rewritten and first_run not in {s.run_id for s in stages}
    alerts = nightly_home / "alerts.jsonl"
    errors = [a for a in map(json.loads, alerts.read_text().splitlines())] if alerts.exists() else []
    assert [a for a in errors if a["severity"] == "error"] == []


def test_a_lease_of_a_run_that_ended_is_taken_over(tmp_path):
    store = Warehouse(f"sqlite:///{tmp_path}/w.sqlite")
    over = {"a": False}
    assert store.take_lease(KEY, "a", lambda run, _age: over[run]) is None
    assert store.take_lease(KEY, "a", lambda run, _age: over[run]) is None  # its own stages share it
    assert store.take_lease(KEY, "b", lambda run, _age: over[run]) == "a"  # a is live: b waits
    over["a"] = True
    assert store.take_lease(KEY, "b", lambda run, _age: over[run]) is None  # a ended (crashed): b takes it
    store.release_leases("b")
    assert store.take_lease(KEY, "c", lambda run, _age: False) is None


def test_a_pooled_step_gives_its_slot_back_while_another_run_holds_the_night(tmp_path, monkeypatch):
    """Waiting inside a gpu-pool step would hold the slot the live run may need to end: the step
    asks Dagster to retry it later instead, and the slot is free meanwhile."""
    from dagster._core.events import DagsterEventType

    from nightly_assets import night_lease

    monkeypatch.setattr(night_lease, "POOLED_RETRY_S", 0)
    monkeypatch.setattr(night_lease, "POOLED_MAX_RETRIES", 2)
    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path))
    holder = instance.add_run(dg.DagsterRun(job_name="demo_nightly", status=dg.DagsterRunStatus.STARTED))
    store = Warehouse(f"sqlite:///{tmp_path}/w.sqlite")
    assert store.take_lease(KEY, holder.run_id, lambda run, _age: False) is None
    attempts: list[int] = []

    @dg.asset(pool="gpu", partitions_def=dg.StaticPartitionsDefinition(["x"]))
    def tests_e2e_gpu_1(context) -> None:  # type: ignore[no-untyped-def]
        attempts.append(context.retry_number)
        night_lease.hold_night(context, store, KEY, pooled=True)

    result = dg.materialize([tests_e2e_gpu_1], instance=instance, partition_key="x", raise_on_error=False)
    assert not result.success
    retries = instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY)
    assert len(retries) == 2 and attempts == [0, 1, 2]  # asked again twice, then failed
    warnings = [r.user_message for r in instance.all_logs(result.run_id) if "giving back" in r.user_message]
    assert warnings and f"run {holder.run_id}" in warnings[0]
    assert store.take_lease(KEY, "someone", lambda run, _age: False) == holder.run_id  # left alone


def test_a_run_of_another_instance_keeps_the_night_until_its_lease_goes_stale(tmp_path, monkeypatch):
    """A `nightly run` on another DAGSTER_HOME writing to the same warehouse is not a run that ended:
    its lease holds until no stage has renewed it for the grace period."""
    from nightly_assets import night_lease

    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path))
    store = Warehouse(f"sqlite:///{tmp_path}/w.sqlite")

    def over(run: str, age_s: float) -> bool:
        return night_lease.run_is_over(instance, run, age_s)

    assert store.take_lease(KEY, "elsewhere", over) is None
    assert store.take_lease(KEY, "here", over) == "elsewhere"
    monkeypatch.setattr(night_lease, "UNKNOWN_RUN_GRACE_S", 0)
    assert store.take_lease(KEY, "here", over) is None


@pytest.mark.slow
def test_cancelling_the_waiting_run_leaves_the_first_runs_night_alone(dagster_home, nightly_home, tmp_path):
    """Ctrl-C on the second `nightly run` while it waits for the lease: that run is cancelled, but
    the night belongs to the first run, which ends it `success` with no error alert."""
    import signal

    marker = f"nightly-lease-cancel-{uuid.uuid4().hex}"
    # the first night holds until the second run is cancelled (a fixed sleep ended first on a
    # loaded machine, and the second run then ran a night of its own)
    release = tmp_path / "release"
    first = start_night_with_a_slow_benchmark(tmp_path, marker, seconds=120, release=release)
    try:
        wait_for_the_benchmark(first, marker)
        env = {**os.environ, "NIGHTLY_CATALOG_DIR": str(tmp_path / "catalog"), "PYTHONUNBUFFERED": "1"}
        second = subprocess.Popen(
            [sys.executable, "-m", "nightly_assets.cli", "run", "demo", "--night", "2026-11-03"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        assert second.stdout is not None
        for line in second.stdout:
            if "waiting for it to end" in line:
                break
        second.send_signal(signal.SIGINT)
        second_rest, _ = second.communicate(timeout=120)
        release.touch()
        first_rest, _ = first.communicate(timeout=300)
    finally:
        first.kill()
    assert second.returncode == 130, second_rest
    assert "writing its summary" not in second_rest  # it never touched the night: nothing to summarize
    assert first.returncode == 0, first_rest
    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    night = store.night(KEY)
    assert night is not None and night.status == "success"
    assert {s.status for s in store.stages(KEY)} == {"success"}
    alerts = nightly_home / "alerts.jsonl"
    sent = [json.loads(line) for line in alerts.read_text().splitlines()] if alerts.exists() else []
    assert [a for a in sent if a["severity"] == "error"] == []
