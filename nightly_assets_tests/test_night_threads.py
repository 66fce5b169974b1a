"""`nightly run` runs a night's independent stages at once (issue 39): two suites that each wait for
the other to start both pass (one after another, the first would wait in vain and fail), and the
stages after them still wait for both."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.errors import DagsterExecutionInterruptedError

from nightly_assets import process
from nightly_assets.interrupts import deferred_interrupts, deferring_threads, interrupt_thread
from nightly_assets.process import CommandError, end_running_commands, run_command
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_files
from nightly_assets_tests.suite_projects import flit_project, project_pipeline, suite_stage
from nightly_assets_tests.waiting import wait_for

# Each test says it started, then waits (up to a minute) for the other one's word.
MEETING = """import pathlib, time

HERE = pathlib.Path({folder!r})


def test_meet():
    HERE.joinpath("{me}").touch()
    deadline = time.monotonic() + 60
    while not HERE.joinpath("{other}").exists():
        assert time.monotonic() < deadline, "the other suite never started: the stages ran one after another"
        time.sleep(0.05)
"""


@pytest.mark.slow
def test_independent_stages_run_at_once_and_their_dependents_wait_for_both(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    folder = tmp_path / "meeting"
    folder.mkdir()
    files = {"meetpkg/__init__.py": '"""Nothing."""\n'}
    for me, other in (("a", "b"), ("b", "a")):
        files[f"tests/test_{me}.py"] = MEETING.format(folder=str(folder), me=me, other=other)
    repo = tmp_path / "upstream" / "meetpkg"
    commit_files(repo, flit_project("meetpkg", "Two suites that meet.", files))
    stages = []
    for me in ("a", "b"):
        stage = suite_stage(confirm={"attempts": 0}, paths=[f"tests/test_{me}.py"])
        stage["name"] = f"tests_{me}"
        stages.append(stage)
    document = yaml.safe_load(project_pipeline("meetpkg", repo, "Two suites that meet.", stages))
    document["stages"][-1]["deps"] = ["tests_a", "tests_b"]  # the summary after both
    _, rows, outcome = catalog_nights.run(yaml.safe_dump(document, sort_keys=False), "2026-11-03")
    assert outcome.succeeded, {s.stage: s.detail for s in rows.values()}
    assert rows["tests_a"].detail == rows["tests_b"].detail == "1/1 passed"

    # The summary started after both suites ended: the step loop kept the dependencies.
    events = catalog_nights.instance.all_logs(outcome.run.run_id)
    at = {
        (e.dagster_event.event_type, e.step_key): e.timestamp
        for e in events
        if e.dagster_event is not None and e.step_key is not None
    }
    summary_start = at[(dg.DagsterEventType.STEP_START, "meetpkg__night_summary")]
    for suite in ("meetpkg__tests_a", "meetpkg__tests_b"):
        assert at[(dg.DagsterEventType.STEP_SUCCESS, suite)] <= summary_start


def test_an_interrupted_step_thread_finishes_cleanup_that_must_finish_first() -> None:
    """A stage deleting a rented machine (interrupts.deferred_interrupts) in a step thread: the
    interrupt neither ends its command nor raises inside the block; it raises after it."""
    started, outcome = threading.Event(), dict[str, object]()

    def cleanup() -> None:
        try:
            with deferred_interrupts(logging.getLogger("test"), "deleting the VM"):
                started.set()
                outcome["command"] = run_command(["sleep", "1"], timeout_s=30).returncode
        except DagsterExecutionInterruptedError as exc:
            outcome["raised"] = str(exc)

    thread = threading.Thread(target=cleanup)
    thread.start()
    assert started.wait(10)
    time.sleep(0.2)  # the command is running
    end_running_commands(sparing=deferring_threads())
    interrupt_thread(thread)
    thread.join(30)
    assert outcome == {"command": 0, "raised": "interrupted while deleting the VM"}


def test_an_interrupted_step_thread_ends_its_command_and_raises() -> None:
    outcome: dict[str, str] = {}

    def stage() -> None:
        try:
            run_command(["sleep", "60"], timeout_s=120)
        except CommandError as exc:  # its command was ended under it
            outcome["command"] = str(exc).splitlines()[0]
            time.sleep(5)  # the interrupt lands while the stage still runs Python
        except DagsterExecutionInterruptedError:
            outcome["raised"] = "at once"

    thread = threading.Thread(target=stage)
    thread.start()
    wait_for("the stage's command to start", lambda: process._RUNNING, timeout_s=10, every_s=0.02)
    end_running_commands(sparing=deferring_threads())
    interrupt_thread(thread)
    thread.join(30)
    assert not thread.is_alive()
    assert (
        outcome.get("command", "").startswith("sleep exited with -15") or outcome.get("raised") == "at once"
    )
