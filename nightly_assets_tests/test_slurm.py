"""The batch scheduler resource on a real one-node Slurm cluster: sbatch, srun, scontrol, scancel."""

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import TypedDict, Unpack

import pytest

from nightly_assets.batch.resources import BatchSchedulerResource, require_output
from nightly_assets.batch.schedulers import SchedulerError, SchedulerUnavailable
from nightly_assets_tests.peers.slurm import BACKGROUND, SlurmCluster

pytestmark = pytest.mark.slurm

WALLTIME = dt.timedelta(minutes=5)
COMPLETION_AFTER_RESTART_S = 240
SECRETS = {
    "NIGHTLY_GITHUB_TOKEN": "ghp-secret-never-in-a-job",
    "SLACK_BOT_TOKEN": "xoxb-secret-never-in-a-job",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-never-in-a-job",
}


class _Settings(TypedDict, total=False):
    """The BatchSchedulerResource settings these tests set."""

    queue: str
    poll_interval_s: str
    slurm_conf: str
    unreachable_grace_s: str
    never_starts_grace_s: str


def _resource(cluster: SlurmCluster, spool: Path, **overrides: Unpack[_Settings]) -> BatchSchedulerResource:
    settings: _Settings = {
        "queue": "debug",
        "poll_interval_s": "0.2",
        "slurm_conf": str(cluster.conf),
        **overrides,
    }
    return BatchSchedulerResource(kind="slurm", spool_dir=str(spool), **settings)


@pytest.fixture(scope="module", autouse=True)
def walltime_probe(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A job past its walltime, submitted before this module's first test: Slurm counts whole
    minutes and checks limits every 30 s, so it ends after 60-90 s, while the other tests run."""
    spool = tmp_path_factory.mktemp("walltime") / "spool"
    batch = _resource(slurm_cluster, spool)
    return batch.submit(f"{BACKGROUND}overrun", ["sleep", "600"], walltime=dt.timedelta(minutes=1)), spool


def _job(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    shown = cluster.run("scontrol", "--oneliner", "show", "job", job_id)
    return dict(word.split("=", 1) for word in shown.split() if "=" in word)


def _until(what: str, check, timeout_s: float = 30):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def test_a_job_runs_two_srun_tasks_with_arguments_untouched_by_a_shell(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    batch = _resource(slurm, tmp_path / "spool")
    hostile = "session ok; echo $(id) `id` 'quoted'"
    code = "import os, sys; print('rank', os.environ['SLURM_PROCID'], sys.argv[1])"
    result = batch.run_job(
        "sanity-2026-11-03",
        ["srun", "--ntasks=2", sys.executable, "-c", code, hostile],
        walltime=WALLTIME,
        tasks_per_node=2,
    )
    assert result.ok, result.tail()
    lines = sorted(result.stdout_text().splitlines())
    assert lines == [f"rank 0 {hostile}", f"rank 1 {hostile}"]
    job = _job(slurm, result.job_id)
    assert (job["JobName"], job["JobState"], job["NumTasks"]) == ("sanity-2026-11-03", "COMPLETED", "2")
    assert result.status.duration_s is not None
    require_output(result, "session ok")


def test_a_failing_job_reports_its_exit_code_and_output(slurm: SlurmCluster, tmp_path: Path) -> None:
    batch = _resource(slurm, tmp_path / "spool")
    result = batch.run_job("fails", ["sh", "-c", "echo to stderr >&2; exit 7"], walltime=WALLTIME)
    assert (result.status.state, result.status.exit_code, result.status.reason) == (
        "failed",
        7,
        "exit code 7",
    )
    assert "to stderr" in result.tail()


def test_the_job_environment_holds_no_secret_of_the_orchestrator(
    slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    batch = _resource(slurm, tmp_path / "spool")
    result = batch.run_job("env", ["env"], walltime=WALLTIME, env={"BENCH_SETTING": "kept"})
    assert result.ok, result.tail()
    job_env = dict(line.split("=", 1) for line in result.stdout_text().splitlines() if "=" in line)
    assert job_env["BENCH_SETTING"] == "kept"
    leaked = [name for name, value in SECRETS.items() if value in result.stdout_text()]
    assert leaked == []
    # The job is the code under test: a scratch HOME in the spool, not ours.
    assert Path(job_env["HOME"]).is_relative_to(tmp_path / "spool") and Path(job_env["HOME"]).is_dir()
    assert job_env["SLURM_JOB_ID"] == result.job_id


def test_an_interrupted_run_job_cancels_its_slurm_job(slurm: SlurmCluster, tmp_path: Path) -> None:
    batch = _resource(slurm, tmp_path / "spool")
    submitted: list[str] = []

    def interrupt_once_running(line: str) -> None:
        if " submitted: " in line:
            submitted.append(line.split()[2])
        if line.endswith(": running"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        batch.run_job("sleeper", ["sleep", "600"], walltime=WALLTIME, log=interrupt_once_running)
    state = _until("the job is cancelled", lambda: _job(slurm, submitted[0])["JobState"] == "CANCELLED")
    assert state and batch.status(submitted[0]).reason == "cancelled"


# The job ends once the test opens its gate (a file): it is still running whatever the machine's load.
GATED = 'while [ ! -e "$0" ]; do sleep 0.1; done; echo measured'
_ORCHESTRATOR = textwrap.dedent(
    f"""
    import datetime as dt, sys
    GATED = {GATED!r}
    from nightly_assets.batch.resources import BatchSchedulerResource
    batch = BatchSchedulerResource(
        kind="slurm", spool_dir=sys.argv[1], slurm_conf=sys.argv[2], queue="debug", poll_interval_s="0.2"
    )
    batch.run_job(
        "sweep-n1-r1-t1", ["sh", "-c", GATED, sys.argv[3]], walltime=dt.timedelta(minutes=5),
        earlier="adopt", log=lambda line: print(line, flush=True),
    )
    """
)


def _orchestrator_killed_mid_job(cluster: SlurmCluster, spool: Path, gate: Path) -> str:
    """Runs a gated job from a process that is then SIGKILLed (no chance to cancel): the job's id."""
    process = subprocess.Popen(
        [sys.executable, "-c", _ORCHESTRATOR, str(spool), str(cluster.conf), str(gate)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert process.stdout is not None
    job_id = ""
    for line in process.stdout:
        if match := re.match(r"batch job (\d+) submitted", line):
            job_id = match.group(1)
        if job_id and line.rstrip().endswith(": running"):
            break
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert job_id and cluster.queue() == [job_id], "the killed orchestrator's job should still run"
    return job_id


def test_a_job_left_by_a_killed_orchestrator_is_adopted_by_the_next_attempt(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    spool, gate = tmp_path / "spool", tmp_path / "gate"
    job_id = _orchestrator_killed_mid_job(slurm, spool, gate)
    lines: list[str] = []
    batch = _resource(slurm, spool)
    threading.Timer(2, gate.touch).start()  # once the next attempt waits for the job
    result = batch.run_job(
        "sweep-n1-r1-t1",
        ["sh", "-c", GATED, str(gate)],
        walltime=WALLTIME,
        earlier="adopt",
        log=lines.append,
    )
    assert result.job_id == job_id and result.ok and result.stdout_text() == "measured\n"
    assert f"batch job {job_id} (sweep-n1-r1-t1) from an earlier attempt is still live: adopted" in lines


def test_a_stale_job_of_an_earlier_attempt_is_cancelled_not_left_beside_the_new_one(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    stale = _orchestrator_killed_mid_job(slurm, spool, tmp_path / "gate")
    batch = _resource(slurm, spool)
    # Another command under the same name (or earlier="replace"): the old job is cancelled.
    result = batch.run_job("sweep-n1-r1-t1", ["echo", "fresh"], walltime=WALLTIME, earlier="adopt")
    assert result.job_id != stale and result.stdout_text() == "fresh\n"
    assert _until("the stale job is cancelled", lambda: _job(slurm, stale)["JobState"] == "CANCELLED")


def test_a_controller_restart_while_a_job_runs_is_waited_out(slurm: SlurmCluster, tmp_path: Path) -> None:
    batch = _resource(slurm, tmp_path / "spool")
    job_id = batch.submit("survivor", ["sh", "-c", "sleep 5; echo still here"], walltime=WALLTIME)
    _until("the job runs", lambda: batch.status(job_id).state == "running")
    slurm.stop_controller()
    lines: list[str] = []
    waiter = threading.Thread(
        target=lambda: lines.append(batch.wait(job_id, log=lines.append).state), daemon=True
    )
    waiter.start()
    try:
        _until("the wait notices", lambda: any("does not answer" in str(line) for line in lines))
    finally:
        slurm.start_controller()
    # slurmstepd re-sends a completion the stopped controller missed every 15 s (RETRY_DELAY), and a
    # loaded machine slows the restarted controller's recovery: minutes, not seconds, to be sure.
    waiter.join(timeout=COMPLETION_AFTER_RESTART_S)
    assert not waiter.is_alive() and lines[-1] == "done", f"{lines}\n{slurm.logs()}"
    assert batch.output(job_id).stdout.read_text() == "still here\n"


def test_an_unreachable_controller_is_named_in_a_clear_error(slurm: SlurmCluster, tmp_path: Path) -> None:
    dead = tmp_path / "dead-slurm.conf"
    dead.write_text(
        re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=9", slurm.conf.read_text()) + "MessageTimeout=1\n"
    )
    batch = _resource(slurm, tmp_path / "spool", slurm_conf=str(dead), unreachable_grace_s="0")
    with pytest.raises(
        SchedulerUnavailable, match=rf"the Slurm controller does not answer \(SLURM_CONF={dead}\)"
    ):
        batch.submit("nowhere", ["true"], walltime=WALLTIME)
    with pytest.raises(SchedulerUnavailable, match="scontrol: the Slurm controller does not answer"):
        batch.wait("42")


def test_a_job_slurm_forgot_is_reported_lost_and_bad_ids_are_refused(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    batch = _resource(slurm, tmp_path / "spool")
    status = batch.status("999999")
    assert status.state == "failed" and status.reason.startswith("lost: Slurm no longer knows it")
    with pytest.raises(SchedulerError, match="not a Slurm job id"):
        batch.status("1; scancel --user=root")
    with pytest.raises(SchedulerError, match="job name 'tf sanity': expected letters, digits"):
        batch.submit("tf sanity", ["true"], walltime=WALLTIME)


def test_slurm_refusing_a_request_says_why(slurm: SlurmCluster, tmp_path: Path) -> None:
    batch = _resource(slurm, tmp_path / "spool", never_starts_grace_s="0")
    with pytest.raises(SchedulerError, match=r"(?s)sbatch failed.*(Invalid partition|invalid partition)"):
        batch.submit("nowhere", ["true"], walltime=WALLTIME, queue="no-such-partition")
    # Slurm accepts a job bigger than the partition and keeps it pending: it is ended, and why said.
    result = batch.run_job("too-big", ["true"], walltime=WALLTIME, nodes=64)
    assert result.status.state == "failed"
    assert result.status.reason.startswith("cannot run: it asks for more than the partition's nodes")
    assert slurm.queue() == []


def test_a_job_past_its_walltime_ends_as_walltime_exceeded(
    slurm: SlurmCluster, walltime_probe: tuple[str, Path]
) -> None:
    job_id, spool = walltime_probe
    status = _resource(slurm, spool).wait(job_id)
    assert (status.state, status.reason) == ("failed", "walltime exceeded")
    assert _job(slurm, job_id)["JobState"] == "TIMEOUT"
