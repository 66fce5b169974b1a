"""The `tpu` pipeline's nightly tier end to end: the catalog's graph with the suite on a TPU VM made
by the real TpuClient against the fake TPU API, reached over a real sshd, deleted always; the
cost in the warehouse, the summary and a check; the timing JSON into the benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.definitions import build_definitions
from nightly_assets.resources import resources_for
from nightly_assets.tpu.checks import COST_WITHIN_BUDGET
from nightly_assets_tests.peers.sshd import Sshd
from nightly_assets_tests.peers.tpu_api import FakeTpuApi
from nightly_assets_tests.tpu_harness import KEY

pytestmark = [pytest.mark.tpu, pytest.mark.ssh]


def test_a_nightly_tier_runs_the_suite_on_a_vm_and_records_cost_timing_and_summary(
    tpu_night, tpu_api: FakeTpuApi, nightly_home: Path
) -> None:
    outcome, checks = tpu_night()
    store = resources_for("local", nightly_home)["warehouse"].store()
    stages = {s.stage: s for s in store.stages(KEY)}
    assert outcome.succeeded, {s: (r.status, r.detail) for s, r in stages.items()}
    assert {s: r.status for s, r in stages.items()} == dict.fromkeys(
        ["sources", "tests_tpu", "benchmarks", "perf_baseline", "night_summary"], "success"
    )
    # The two tpu-marked tests ran on the "VM" from the installed checkout; the unmarked one did not.
    assert store.suite_counts(KEY)["tests_tpu"] | {} == {
        "total": 2,
        "passed": 2,
        "failed": 0,
        "error": 0,
        "skipped": 0,
        "collected": 0,
    }
    [cost] = store.costs(KEY)
    assert cost.stage == "tests_tpu" and cost.machine_type == "v6e-1" and cost.ended == "completed"
    assert cost.lifetime_s > 0 and cost.hourly_usd == 0.64
    assert cost.cost_usd == pytest.approx(cost.lifetime_s / 3600 * 0.64, rel=1e-3)
    summary = (nightly_home / "artefacts/tpu/2026-11-03/v6e-1/night_summary/summary.md").read_text()
    assert "| tests_tpu | " + cost.machine.rsplit("/", 1)[-1] + " | v6e-1 |" in summary
    assert f"Machine cost tonight: ${cost.cost_usd:.4f}" in summary
    # The suite's own timing JSON (tearDownClass) became tonight's benchmark.
    manifest = json.loads(
        (nightly_home / "artefacts/tpu/2026-11-03/v6e-1/benchmarks/manifest.json").read_text()
    )
    assert 0 < manifest["benchmarks"]["elapsed_seconds"]["value"] < cost.lifetime_s
    assert checks[COST_WITHIN_BUDGET] is True and checks["tests_passed"] is True
    assert tpu_api.node_names() == [] and not tpu_api.queued


def test_a_vm_preempted_in_the_middle_of_the_suite_fails_the_stage_with_the_reason_and_its_cost(
    tpu_night, tpu_api: FakeTpuApi, sshd: Sshd, nightly_home: Path
) -> None:
    tpu_api.preempt_after_s = 2.0
    tpu_api.on_preempt = lambda _name: sshd.drop_sessions()
    outcome, _ = tpu_night(sleep_s=30)
    assert not outcome.succeeded
    store = resources_for("local", nightly_home)["warehouse"].store()
    stage = {s.stage: s for s in store.stages(KEY)}["tests_tpu"]
    assert stage.status == "failure" and "ended early (preempted)" in (stage.detail or ""), stage.detail
    [cost] = store.costs(KEY)
    assert cost.ended == "preempted" and cost.cost_usd > 0
    assert any("preempted" in line for alert in outcome.alerts for line in alert.lines), outcome.alerts
    summary = (nightly_home / "artefacts/tpu/2026-11-03/v6e-1/night_summary/summary.md").read_text()
    assert "| preempted |" in summary
    assert tpu_api.node_names() == []


def _drop_ssh_while(sshd: Sshd, running: threading.Event) -> threading.Thread:
    """Drops every SSH session every second from 3 s on, while `running` is set: whenever the
    suite's session is up (setup or tests), it is cut while the node stays READY."""

    def drop() -> None:
        time.sleep(3)
        while running.is_set():
            sshd.drop_sessions()
            time.sleep(1)

    thread = threading.Thread(target=drop, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("failure", ["ssh_dropped", "not_ready", "quota"])
def test_a_failed_vm_fails_the_night_with_its_reason_and_leaves_no_node(
    tpu_night, tpu_api: FakeTpuApi, sshd: Sshd, nightly_home: Path, failure: str
) -> None:
    running = threading.Event()
    env = {}
    if failure == "ssh_dropped":
        running.set()
        dropper = _drop_ssh_while(sshd, running)
    elif failure == "not_ready":
        tpu_api.never_ready = True
        env["NIGHTLY_TPU_READY_TIMEOUT_S"] = "1"
    else:
        tpu_api.quota_exhausted = True
        env["NIGHTLY_TPU_CREATE_RETRY_S"] = "2"  # asked again for 2 s, then the night fails
    try:
        outcome, _ = tpu_night(sleep_s=30, env=env)
    finally:
        running.clear()
    if failure == "ssh_dropped":
        dropper.join(timeout=5)
    assert not outcome.succeeded
    store = resources_for("local", nightly_home)["warehouse"].store()
    stage = {s.stage: s for s in store.stages(KEY)}["tests_tpu"]
    expected = {
        "ssh_dropped": "ended early (ssh_dropped)",
        "not_ready": "was not READY after",
        "quota": "RESOURCE_EXHAUSTED",
    }[failure]
    assert stage.status == "failure" and expected in (stage.detail or ""), stage.detail
    assert any(expected in line for alert in outcome.alerts for line in alert.lines), outcome.alerts
    assert tpu_api.node_names() == []


def test_a_run_over_the_cost_budget_warns(tpu_night, tpu_api: FakeTpuApi) -> None:
    outcome, checks = tpu_night(hourly_usd=3600.0)  # $1 a second: any run is over the $0.10 budget
    assert outcome.succeeded and checks[COST_WITHIN_BUDGET] is False
    warnings = [a for a in outcome.alerts if a.severity == "warn"]
    assert any(COST_WITHIN_BUDGET in line and "budget $0.1" in line for a in warnings for line in a.lines)
    assert tpu_api.node_names() == []


def test_the_remote_runner_refuses_an_archive_that_escapes_its_folder(tmp_path: Path) -> None:
    import tarfile

    evil = tmp_path / "evil.txt"
    evil.write_text("x")
    tarball = tmp_path / "source.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(evil, arcname="../escaped.txt")
    script = Path(__file__).parents[1] / "nightly_assets" / "tpu" / "remote_suite.py"
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), "--source", str(tarball), "--junit", "j.xml", "--timing", "t.json"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert not (tmp_path / "escaped.txt").exists()
    assert "escaped.txt" in done.stderr + done.stdout


def test_the_sweeper_sensor_deletes_vms_of_runs_the_instance_no_longer_runs(
    nightly_home: Path, monkeypatch: pytest.MonkeyPatch, tpu_api: FakeTpuApi
) -> None:
    monkeypatch.setenv("NIGHTLY_TPU_PROJECT", "test-project")
    monkeypatch.setenv("NIGHTLY_TPU_API_ENDPOINT", tpu_api.url)
    monkeypatch.setenv("NIGHTLY_TPU_CREDENTIALS", "anonymous")
    monkeypatch.setenv("NIGHTLY_TPU_POLL_S", "0.1")
    defs = build_definitions()
    sensor = defs.resolve_sensor_def("tpu_vm_sweeper")
    ours = {"nightly-assets": "1", "nightly-night": "2026-11-03"}
    with dg.instance_for_test() as instance:
        started = instance.create_run_for_job(
            defs.resolve_job_def("tpu_nightly"), status=dg.DagsterRunStatus.STARTED
        )
        failed = instance.create_run_for_job(
            defs.resolve_job_def("tpu_nightly"), status=dg.DagsterRunStatus.FAILURE
        )
        alive = tpu_api.add_node(
            "us-central1-b", "nightly-a", {**ours, "nightly-run-id": started.run_id}, age_s=7200
        )
        orphan = tpu_api.add_node(
            "us-central1-b", "nightly-b", {**ours, "nightly-run-id": failed.run_id}, age_s=7200
        )
        foreign = tpu_api.add_node("us-central1-b", "research", {"team": "x"}, age_s=7200)
        resources = {"tpu_vms": resources_for("local", nightly_home)["tpu_vms"]}
        with dg.build_sensor_context(instance=instance, resources=resources) as context:
            result = sensor(context)
    assert isinstance(result, dg.SkipReason)
    assert "deleted 1 orphaned TPU VM(s): nightly-b" in (result.skip_message or "")
    assert tpu_api.node_names() == sorted([alive, foreign])
    assert orphan not in tpu_api.node_names()


def test_the_sweeper_sensor_skips_without_a_project(
    nightly_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NIGHTLY_TPU_PROJECT", raising=False)
    sensor = build_definitions().resolve_sensor_def("tpu_vm_sweeper")
    resources = {"tpu_vms": resources_for("local", nightly_home)["tpu_vms"]}
    with (
        dg.instance_for_test() as instance,
        dg.build_sensor_context(instance=instance, resources=resources) as context,
    ):
        result = sensor(context)
    assert isinstance(result, dg.SkipReason) and "NIGHTLY_TPU_PROJECT" in (result.skip_message or "")
