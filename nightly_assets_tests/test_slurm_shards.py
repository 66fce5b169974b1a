"""A sharded suite as one Slurm job array on the real one-node cluster (issue 39): each shard an array
task, the merged report equal to one unsharded job's test by test; a task cancelled mid-run (as a
failed node) re-run alone as a plain job; a shard lost on every attempt reported as not run; an
interrupted night cancels the array. The suite runs with this test run's own Python (its pytest)
on files under tmp_path: on the one-node cluster this host is the shared file system."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nightly_assets.batch.resources import BatchSchedulerResource
from nightly_assets.catalog.suite import Suite
from nightly_assets.interrupts import interrupt_thread
from nightly_assets.runners.batch_suites import BatchPytest, run_array
from nightly_assets.shards.merge import NOT_RUN
from nightly_assets.testing.junit import parse_junit
from nightly_assets.testing.pytest_output import parse_collect_only
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_files
from nightly_assets_tests.peers.slurm import SlurmCluster
from nightly_assets_tests.suite_projects import flit_project, project_pipeline, suite_stage

pytestmark = pytest.mark.slurm

PROJECTS = Path(__file__).parent / "data" / "projects"
# itsdangerous's suite but the files that need freezegun (not in this test run's environment).
ITSDANGEROUS = [f"tests/test_itsdangerous/test_{name}.py" for name in ("encoding", "serializer", "signer")]
WALLTIME = dt.timedelta(minutes=5)

# test_c's first test waits to be cancelled (scancel, as a failed node ends it) where KILL says so:
# "once" in an array task (its re-run, a plain job, passes), "always" in every attempt. It writes
# its job id (an array task's as <array>_<task>) to MARKERS, where the test's watcher reads it.
KILLED = """import os, pathlib, time


def test_killed():
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    kill = os.environ.get("KILL", "")
    if kill == "always" or (kill == "once" and task):
        job = f"{array}_{task}" if task else os.environ["SLURM_JOB_ID"]
        pathlib.Path(os.environ["MARKERS"], job).write_text("")
        time.sleep(120)


def test_after():
    pass
"""
SMALL = {
    "tests/test_a.py": "def test_one():\n    pass\n\n\ndef test_fails():\n    assert 1 == 2\n",
    "tests/test_b.py": "import pytest\n\n\n@pytest.mark.parametrize('n', [1, 2, 3, 4])\ndef test_n(n):\n"
    "    pass\n",
    "tests/test_c.py": KILLED,
    "tests/test_d.py": "import time\n\n\ndef test_d():\n    time.sleep(0.5)\n",
}


def _runner(
    cluster: SlurmCluster, tmp_path: Path, root: Path, env: dict[str, str]
) -> tuple[BatchPytest, list[str]]:
    batch = BatchSchedulerResource(
        kind="slurm",
        spool_dir=str(tmp_path / "spool"),
        slurm_conf=str(cluster.conf),
        queue="debug",
        poll_interval_s="0.2",
    )
    lines: list[str] = []
    name = "shards-tests-20261103-cpu"
    (tmp_path / "sharded").mkdir()  # the stage's workdir
    return BatchPytest(batch, Path(sys.executable), root, name, WALLTIME, env, None, lines.append), lines


def _collected(root: Path, args: list[str], env: dict[str, str]) -> list[str]:
    """The suite's node ids, collected on this host with the environment's Python (as the backend does)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=root,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return [c.node_id for c in parse_collect_only(done.stdout, "tests").cases]


def _small_project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for path, text in SMALL.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def _suite(retries: int = 1) -> Suite:
    return Suite(paths=["tests"], timeout_minutes=5, runner="theta", shards=4, shard_retries=retries)


def _array_id(lines: list[str]) -> str:
    [array] = [m.group(1) for line in lines if (m := re.search(r"batch job array (\d+) submitted", line))]
    return array


def _job(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    shown = cluster.run("scontrol", "--oneliner", "show", "job", job_id).splitlines()[0]
    return dict(word.split("=", 1) for word in shown.split() if "=" in word)


class _Canceller:
    """Cancels each job whose id a test wrote to `markers` (as a failed node ends it), once."""

    def __init__(self, cluster: SlurmCluster, markers: Path) -> None:
        self.cluster, self.markers, self.cancelled = cluster, markers, list[str]()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self.stop.is_set():
            for marker in sorted(self.markers.iterdir()):
                if marker.name not in self.cancelled:
                    self.cluster.run("scancel", marker.name)
                    self.cancelled.append(marker.name)
            time.sleep(0.1)

    def __enter__(self) -> _Canceller:
        self.markers.mkdir(exist_ok=True)
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)


def test_a_job_array_of_four_shards_reports_what_one_unsharded_job_reports(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    root = tmp_path / "itsdangerous"
    shutil.copytree(PROJECTS / "itsdangerous", root)
    env = {"PYTHONPATH": str(root / "src")}  # the package, as the environment's venv would hold it
    runner, lines = _runner(slurm, tmp_path, root, env)

    junit = runner.run_one_job(tmp_path / "whole", ITSDANGEROUS, tmp_path / "whole" / "junit.xml", WALLTIME)
    whole = {c.node_id: c.outcome for c in parse_junit(junit, "tests").cases}
    assert len(whole) == 66 and set(whole.values()) == {"passed"}

    collected = _collected(root, ITSDANGEROUS, env)
    sharded = run_array(
        runner,
        _suite(),
        "tests",
        "theta",
        collected,
        ({}, 0),
        lambda ids: ids,
        workdir=tmp_path / "sharded",
        at_once=2,
    )
    assert {c.node_id: c.outcome for c in sharded.report.cases} == whole
    assert sharded.findings.complete and not sharded.findings.duplicates
    array = _array_id(lines)
    assert _job(slurm, f"{array}_1")["ArrayTaskThrottle"] == "2"
    for record in sharded.records:
        k = record.shard.index
        assert [a["job"] for a in record.attempts] == [f"{array}_{k}"]  # each shard ran as task k, once
        task = _job(slurm, f"{array}_{k}")
        assert (task["ArrayJobId"], task["ArrayTaskId"], task["JobState"]) == (array, str(k), "COMPLETED")
    # Node ids reach each task in its task file, never on a command line.
    assert not any("::" in _job(slurm, f"{array}_{k}").get("Command", "") for k in range(1, 5))


def test_a_task_cancelled_mid_run_is_re_run_alone_as_a_job_of_its_own(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    root, markers = _small_project(tmp_path), tmp_path / "markers"
    env = {"KILL": "once", "MARKERS": str(markers)}
    runner, lines = _runner(slurm, tmp_path, root, env)
    collected = _collected(root, ["tests"], env)
    with _Canceller(slurm, markers) as canceller:
        sharded = run_array(
            runner, _suite(), "tests", "theta", collected, ({}, 0), lambda ids: ids,
            workdir=tmp_path / "sharded", at_once=None,
        )  # fmt: skip
    array = _array_id(lines)
    [killed] = canceller.cancelled
    assert killed.startswith(f"{array}_")
    jobs = {r.shard.index: [a["job"] for a in r.attempts] for r in sharded.records}
    index = int(killed.partition("_")[2])
    assert jobs[index][0] == killed and len(jobs[index]) == 2  # the cancelled task, then its re-run
    assert "_" not in jobs[index][1] and _job(slurm, jobs[index][1])["JobState"] == "COMPLETED"
    assert all(ids == [f"{array}_{k}"] for k, ids in jobs.items() if k != index)  # the others ran once
    [lost] = [r.attempts[0]["lost"] for r in sharded.records if r.shard.index == index]
    assert lost.startswith(f"batch job {killed}: cancelled")  # as scancel ends a task (exit code -15)
    outcomes = {c.node_id: c.outcome for c in sharded.report.cases}
    assert len(outcomes) == len(collected) == 9 and sharded.findings.complete
    assert (
        outcomes["tests.test_c::test_killed"] == "passed" and outcomes["tests.test_a::test_fails"] == "failed"
    )


def test_a_shard_lost_on_every_attempt_is_reported_not_run_and_the_others_kept(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    root, markers = _small_project(tmp_path), tmp_path / "markers"
    env = {"KILL": "always", "MARKERS": str(markers)}
    runner, _ = _runner(slurm, tmp_path, root, env)
    collected = _collected(root, ["tests"], env)
    with _Canceller(slurm, markers) as canceller:
        sharded = run_array(
            runner, _suite(retries=1), "tests", "theta", collected, ({}, 0), lambda ids: ids,
            workdir=tmp_path / "sharded", at_once=None,
        )  # fmt: skip
    assert len(canceller.cancelled) == 2  # the array task, then its one re-run
    [(index, why)] = sharded.findings.lost.items()
    assert why.startswith(f"batch job {canceller.cancelled[-1]}: cancelled")
    cases = {c.node_id: c for c in sharded.report.cases}
    killed = cases["tests.test_c::test_killed"]
    assert killed.outcome == "skipped" and killed.message == f"{NOT_RUN}shard {index} of 4 was lost ({why})"
    assert not sharded.findings.complete  # tests_passed fails the night on it
    assert "tests.test_c::test_killed" in sharded.findings.not_run
    ran = {n: c.outcome for n, c in cases.items() if n not in sharded.findings.not_run}
    assert ran["tests.test_a::test_fails"] == "failed" and ran["tests.test_d::test_d"] == "passed"
    assert len(ran) + len(sharded.findings.not_run) == 9


def test_an_interrupted_night_cancels_the_array(slurm: SlurmCluster, tmp_path: Path) -> None:
    root, markers = _small_project(tmp_path), tmp_path / "markers"
    markers.mkdir()
    env = {"KILL": "always", "MARKERS": str(markers)}  # test_killed waits: the array is still running
    runner, lines = _runner(slurm, tmp_path, root, env)
    collected = _collected(root, ["tests"], env)
    raised: list[BaseException] = []

    def stage() -> None:
        try:
            run_array(
                runner, _suite(), "tests", "theta", collected, ({}, 0), lambda ids: ids,
                workdir=tmp_path / "sharded", at_once=1,
            )  # fmt: skip
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=stage)
    thread.start()
    deadline = time.monotonic() + 60
    while not any(markers.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert slurm.queue(), "the array should be queued or running"
    interrupt_thread(thread)
    thread.join(30)
    assert not thread.is_alive() and [type(e).__name__ for e in raised] == [
        "DagsterExecutionInterruptedError"
    ]
    assert slurm.queue() == []  # every task, running or still pending behind the throttle, cancelled
    [running] = [marker.name for marker in markers.iterdir()]
    assert running.startswith(f"{_array_id(lines)}_") and _job(slurm, running)["JobState"] == "CANCELLED"
    assert not [line for line in lines if line.startswith("shard ") and " submitted" in line]  # no re-run


def test_a_stale_array_of_an_earlier_attempt_is_cancelled_by_name(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """An orchestrator that died left its array: the next attempt at the stage cancels it whole,
    pending tasks too, before it submits its own (squeue lists each task; the array is one job)."""
    runner, lines = _runner(slurm, tmp_path, tmp_path, {})
    array = runner.batch.submit(runner.name, ["sleep", "120"], walltime=WALLTIME, array=(1, 2, 3), at_once=1)
    assert _job(slurm, f"{array}_1")["ArrayTaskThrottle"] == "1"
    runner.batch.cancel_earlier(runner.name, lines.append)
    assert lines == [f"batch job {array} ({runner.name}) from an earlier attempt is still live: cancelled"]
    assert slurm.queue() == []


@pytest.mark.slow
def test_a_night_s_sharded_suite_on_a_batch_runner_is_one_job_array(
    slurm: SlurmCluster,
    catalog_nights: CatalogNights,
    tmp_path: Path,
    wheelhouse: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole night: the wheel installed in the environment stage's venv (on this host, which is
    the one-node cluster's shared file system), the suite collected here and run as one array."""
    for name, value in {
        "NIGHTLY_BATCH_KIND": "slurm",
        "NIGHTLY_SLURM_CONF": str(slurm.conf),
        "NIGHTLY_BATCH_POLL_S": "0.2",
        "NIGHTLY_BATCH_QUEUE": "debug",
    }.items():
        monkeypatch.setenv(name, value)
    repo = tmp_path / "upstream" / "arraypkg"
    files = {k: v for k, v in SMALL.items() if k != "tests/test_c.py"}
    commit_files(repo, flit_project("arraypkg", "Tests in an array.", {"arraypkg/__init__.py": "", **files}))
    stage = suite_stage("theta-cobalt", confirm={"attempts": 0}, shards=3)
    _, stages, outcome = catalog_nights.run(
        project_pipeline("arraypkg", repo, "Array.", [stage]), "2026-11-03"
    )
    assert not outcome.succeeded  # test_a's real failure
    assert stages["tests"].detail == "6/7 passed (1 failed); 3 shards"
    folder = catalog_nights.home / "artefacts/arraypkg/2026-11-03/cpu/tests"
    shards = json.loads((folder / "manifest.json").read_text())["shards"]
    jobs = [a["job"] for s in shards["shards"] for a in s["attempts"]]
    array = jobs[0].partition("_")[0]
    assert jobs == [f"{array}_{k}" for k in (1, 2, 3)]
    assert _job(slurm, f"{array}_1")["JobName"] == "arraypkg-tests-20261103-cpu"
