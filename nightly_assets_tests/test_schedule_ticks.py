"""A schedule tick as the daemon evaluates it: Dagster's own scheduler loop, over the code location
loaded in a gRPC server as `dagster dev` loads it, with the clock frozen around the cron time."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._core.workspace.load_target import ModuleTarget
from dagster._scheduler.scheduler import launch_scheduled_runs

ROOT = Path(__file__).resolve().parents[1]
DYNAMO_TARGETS = ["vllm-amd64", "vllm-arm64", "sglang-amd64", "sglang-arm64", "trtllm-amd64", "trtllm-arm64"]


def tick(context, when: dt.datetime) -> None:
    with freeze_time(when):
        list(
            launch_scheduled_runs(
                context,
                logging.getLogger("nightly-test-scheduler"),
                end_datetime_utc=when,
                iteration_times={},
            )
        )


@pytest.fixture
def scheduler_instance(nightly_home, tmp_path, monkeypatch):
    """The repo's own dagster.yaml (a queued run coordinator: ticks queue runs, nothing executes)."""
    monkeypatch.setenv("NIGHTLY_ENV", "prod")  # every pipeline's schedule runs in prod
    # A run is only created when its resources' settings resolve (the daemon checks them).
    monkeypatch.setenv("NIGHTLY_WAREHOUSE_URL", f"sqlite:///{tmp_path}/warehouse.sqlite")
    monkeypatch.setenv("NIGHTLY_ARTEFACTS_BUCKET", "nightly-artefacts")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-unused")
    overrides = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(overrides=overrides, temp_dir=str(tmp_path / "dagster_home")) as instance:
        yield instance


def code_location() -> ModuleTarget:
    """The code location as `dagster dev` loads it (workspace.yaml)."""
    return ModuleTarget(
        module_name="nightly_assets.definitions",
        attribute="defs",
        working_directory=str(ROOT),
        location_name="nightly_assets",
    )


def test_schedule_ticks_queue_one_run_per_target_for_the_night_that_ended(scheduler_instance):
    with create_test_daemon_workspace_context(code_location(), scheduler_instance) as context:
        tick(context, dt.datetime(2026, 11, 4, 1, 59, tzinfo=dt.UTC))  # the daemon starts: no tick due
        assert scheduler_instance.get_runs() == []

        tick(context, dt.datetime(2026, 11, 4, 8, 0, 30, tzinfo=dt.UTC))  # 02:00 to 08:00 ticks fall due
        runs = scheduler_instance.get_runs()
        by_schedule: dict[str, list[dg.DagsterRun]] = {}
        for run in runs:
            by_schedule.setdefault(run.tags["dagster/schedule_name"], []).append(run)

        dynamo = by_schedule["dynamo_schedule"]
        assert sorted(r.tags["dagster/partition"] for r in dynamo) == sorted(
            f"2026-11-03|{t}" for t in DYNAMO_TARGETS
        )
        assert {r.job_name for r in dynamo} == {"dynamo_nightly"}
        assert {r.status for r in dynamo} == {dg.DagsterRunStatus.QUEUED}
        # 02:00 (jax x2, tpu), 03:00 demo, 04:00 torch_spyre x2, 05:00 tf_theta, 08:00 dynamo x6
        assert {name: len(rs) for name, rs in by_schedule.items()} == {
            "jax_rocm_rbe_schedule": 1,
            "jax_rocm_integration_schedule": 1,
            "tpu_schedule": 1,
            "demo_schedule": 1,
            "demo_gpu_schedule": 1,
            "torch_spyre_schedule": 2,
            "tf_theta_schedule": 1,
            "dynamo_schedule": 6,
        }
        assert {r.tags["dagster/partition"].split("|")[0] for r in runs} == {"2026-11-03"}

        tick(context, dt.datetime(2026, 11, 4, 8, 1, 30, tzinfo=dt.UTC))  # the same ticks never run twice
        assert len(scheduler_instance.get_runs()) == len(runs)
