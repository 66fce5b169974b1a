"""Running a suite's shards (issue 39): every shard at once, a lost one re-run alone, an interrupted
night ends what runs; the shards' JUnit as one report with every planned test exactly once."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from nightly_assets.interrupts import interrupt_thread
from nightly_assets.shards.execute import ShardJob, ShardLost, ShardRecord, run_shards
from nightly_assets.shards.merge import NOT_RUN, junit_name_of, merge_shard_reports
from nightly_assets.shards.plan import Shard, ShardPlan, plan_shards
from nightly_assets.shards.suite import planned_tests
from nightly_assets.testing import junit
from nightly_assets.testing.streamed_cases import StreamedCases
from nightly_assets_tests.waiting import wait_for


def _plan(*units: tuple[str, ...]) -> ShardPlan:
    shards = tuple(Shard(i + 1, u, float(len(u))) for i, u in enumerate(units))
    return ShardPlan(shards, sum(s.seconds for s in shards), 1.0, ())


def _junit(path: Path, cases: list[tuple[str, str, str]]) -> Path:
    """A pytest-shaped JUnit file of (classname, name, outcome)."""
    body = []
    for classname, name, outcome in cases:
        inner = {"failed": '<failure message="boom"/>', "error": '<error message="oops"/>'}.get(outcome, "")
        body.append(f'<testcase classname="{classname}" name="{name}" time="0.5">{inner}</testcase>')
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(body)}</testsuite></testsuites>')
    return path


def test_pytest_node_ids_are_named_as_its_junit_names_them() -> None:
    assert junit_name_of("tests/test_a.py::test_x") == ("tests.test_a", "test_x")
    assert junit_name_of("tests/sub/test_b.py::TestK::test_y[1-a::b]") == (
        "tests.sub.test_b.TestK",
        "test_y[1-a::b]",
    )
    assert junit_name_of("tests/test_c.py::TestK::TestInner::test_z") == (
        "tests.test_c.TestK.TestInner",
        "test_z",
    )


def test_all_shards_run_at_once_and_a_lost_one_runs_again_alone() -> None:
    plan = _plan(("a.py",), ("b.py",), ("c.py",), ("d.py",))
    running, most, lock = [0], [0], threading.Lock()
    tries: dict[int, int] = {}
    all_started = threading.Barrier(4, timeout=10)  # fails unless the four run at the same time

    def run_one(job: ShardJob) -> Path:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            tries[job.shard.index] = job.attempt
        if job.attempt == 1:
            all_started.wait()
        with lock:
            running[0] -= 1
        if job.shard.index == 3 and job.attempt == 1:
            raise ShardLost("pytest was killed by signal 9")
        return Path(f"/reports/{job.name}.xml")

    lines: list[str] = []
    records = run_shards(plan, run_one, parallel=None, retries=1, log=lines.append)
    assert most[0] == 4
    assert tries == {1: 1, 2: 1, 3: 2, 4: 1}  # only the lost shard ran again
    assert [r.junit for r in records] == [
        Path("/reports/shard-1.xml"),
        Path("/reports/shard-2.xml"),
        Path("/reports/shard-3-try-2.xml"),
        Path("/reports/shard-4.xml"),
    ]
    assert [len(r.attempts) for r in records] == [1, 1, 2, 1]
    assert records[2].attempts[0]["lost"] == "pytest was killed by signal 9" and records[2].lost is None
    assert any("shard 3/4: lost after" in line and "re-running it alone" in line for line in lines)
    assert any(line.startswith("shard 3/4: done in") for line in lines)


def test_a_shard_lost_on_every_attempt_is_lost_and_a_bound_holds_how_many_run_at_once() -> None:
    plan = _plan(("a.py",), ("b.py",), ("c.py",), ())
    running, most, lock = [0], [0], threading.Lock()

    def run_one(job: ShardJob) -> Path:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        if job.shard.index == 2:
            raise ShardLost(f"preempted (attempt {job.attempt})")
        return Path(job.name)

    lines: list[str] = []
    records = run_shards(plan, run_one, parallel=2, retries=2, log=lines.append)
    assert most[0] <= 2
    assert [r.lost for r in records] == [None, "preempted (attempt 3)", None, None]
    assert len(records[1].attempts) == 3  # 1 + shard_retries
    assert records[3].attempts == [] and records[3].junit is None  # an empty shard runs nothing
    assert "shard 4/4: nothing planned on it" in lines


def test_an_interrupted_night_ends_the_shards_that_still_run(tmp_path: Path) -> None:
    plan = _plan(("a.py",), ("b.py",))
    sleeper: list[subprocess.Popen[bytes]] = []

    def run_one(job: ShardJob) -> Path:
        if job.shard.index == 1:
            proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
            job.started(proc.pid)
            sleeper.append(proc)  # only once the night knows of it: else the cancel could come first
            proc.wait()
            raise ShardLost(f"ended by signal {-proc.returncode}")
        wait_for("shard 1's command to start", lambda: sleeper, timeout_s=10, every_s=0.01)
        raise KeyboardInterrupt  # the run was cancelled while shard 1 ran

    with pytest.raises(KeyboardInterrupt):
        run_shards(plan, run_one, parallel=None, retries=3, log=lambda _: None)
    assert sleeper[0].poll() == -signal.SIGTERM  # ended, and not started again


def test_the_merged_report_holds_every_planned_test_once(tmp_path: Path) -> None:
    collected = [
        "tests/test_a.py::test_1",
        "tests/test_a.py::test_2",
        "tests/test_b.py::test_3",
        "tests/test_c.py::test_4",
    ]
    plan = ShardPlan(
        (
            Shard(1, ("tests/test_a.py",), 2.0),
            Shard(2, ("tests/test_b.py::test_3",), 1.0),
            Shard(3, ("tests/test_c.py",), 1.0),
        ),
        4.0,
        2.0,
        (),
    )
    one = _junit(
        tmp_path / "shard-1.xml", [("tests.test_a", "test_1", "passed"), ("tests.test_a", "test_2", "passed")]
    )
    # Shard 2 also ran test_2 (failing) and a test nobody planned: the failure stands, both are named.
    two = _junit(
        tmp_path / "shard-2.xml",
        [
            ("tests.test_b", "test_3", "passed"),
            ("tests.test_a", "test_2", "failed"),
            ("tests.test_z", "test_9", "passed"),
        ],
    )
    lost = ShardRecord(plan.shards[2], attempts=[{"seconds": 3.0, "lost": "killed by signal 9"}] * 2)
    records = [ShardRecord(plan.shards[0], junit=one), ShardRecord(plan.shards[1], junit=two), lost]
    report, findings = merge_shard_reports(records, planned_tests(plan, collected), "tests", "local")

    outcomes = {c.node_id: c.outcome for c in report.cases}
    assert outcomes == {
        "tests.test_a::test_1": "passed",
        "tests.test_a::test_2": "failed",  # the worst of its two reports
        "tests.test_b::test_3": "passed",
        "tests.test_z::test_9": "passed",
        "tests.test_c::test_4": "skipped",  # never as passed
    }
    assert len(report.cases) == 5
    [not_run] = [c for c in report.cases if c.outcome == "skipped"]
    assert not_run.message == NOT_RUN + "shard 3 of 3 was lost (killed by signal 9)"
    assert findings.duplicates == {"tests.test_a::test_2": 2}
    assert findings.not_run == ("tests.test_c::test_4",)
    assert findings.unplanned == ("tests.test_z::test_9",)
    assert findings.sentence() == "1 of 4 planned tests did not run (shard 3 lost: killed by signal 9)"
    assert not findings.complete


def test_a_report_too_large_to_hold_stays_streamed_when_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(junit, "STREAM_ABOVE_BYTES", 0)
    collected = [f"tests/test_{f}.py::test_{t}" for f in range(3) for t in range(50)]
    plan = plan_shards({}, 2, tests=collected)
    records = []
    for shard in plan.shards:
        tests = [t for unit in shard.units for t in collected if t.startswith(unit)]
        cases = [(*junit_name_of(t), "passed") for t in tests if not t.endswith("::test_7")]
        records.append(ShardRecord(shard, junit=_junit(tmp_path / f"s{shard.index}.xml", cases)))
    report, findings = merge_shard_reports(records, planned_tests(plan, collected), "tests", "local")
    assert isinstance(report.cases, StreamedCases)
    assert report.count("passed") == 147 and report.count("skipped") == 3
    assert sorted(findings.not_run) == [f"tests.test_{f}::test_7" for f in range(3)]
    assert sum(1 for _ in report.cases) == 150  # a second pass gives the same


def test_a_sharded_suite_asks_for_shards_or_minutes_and_no_bazel() -> None:
    from pydantic import ValidationError

    from nightly_assets.catalog.models import BazelTests, Suite

    assert Suite(timeout_minutes=5, runner="local", shards=4).sharded
    assert not Suite(timeout_minutes=5, runner="local").sharded
    with pytest.raises(ValidationError, match="not both"):
        Suite(timeout_minutes=5, runner="local", shards=4, shard_minutes=10)
    with pytest.raises(ValidationError, match="shard_count"):
        Suite(timeout_minutes=5, runner="local", shards=2, bazel=BazelTests(targets=["//:t"]))
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Suite(timeout_minutes=5, runner="local", shards=0)


def test_a_stage_thread_interrupted_while_its_shards_run_ends_them(tmp_path: Path) -> None:
    """`nightly run` interrupts a stage in a thread by raising in it: the wait for the shards
    gives way within a moment, and the shards' processes are ended, not re-run."""
    plan = _plan(("a.py",), ("b.py",))
    sleepers: list[subprocess.Popen[bytes]] = []
    raised: list[BaseException] = []

    def run_one(job: ShardJob) -> Path:
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        job.started(proc.pid)
        sleepers.append(proc)
        proc.wait()
        raise ShardLost(f"ended by signal {-proc.returncode}")

    def stage() -> None:
        try:
            run_shards(plan, run_one, parallel=None, retries=3, log=lambda _: None)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=stage)
    thread.start()
    wait_for("both shards' commands to start", lambda: len(sleepers) >= 2, timeout_s=10, every_s=0.02)
    interrupt_thread(thread)
    thread.join(20)
    assert not thread.is_alive()
    assert [type(e).__name__ for e in raised] == ["DagsterExecutionInterruptedError"]
    assert [p.wait(5) for p in sleepers] == [-signal.SIGTERM, -signal.SIGTERM]  # none started again


def test_an_interrupted_night_stops_what_runs_a_shard_elsewhere() -> None:
    """A shard in a container or a pod is no process of this machine: its backend says how to end
    it (`on_stop`), and an interrupted night does."""
    plan = _plan(("a.py",), ("b.py",))
    stopped = threading.Event()

    def run_one(job: ShardJob) -> Path:
        if job.shard.index == 1:
            job.on_stop(stopped.set)  # as a container's kill
            assert stopped.wait(30), "never stopped"
            raise ShardLost("container killed")
        time.sleep(0.2)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_shards(plan, run_one, parallel=None, retries=2, log=lambda _: None)
    assert stopped.is_set()
