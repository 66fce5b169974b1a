"""Batch schedulers (Cobalt, PBS, Slurm in production): submit a script, poll it, read its output, cancel it.

`LocalBatchScheduler` runs the script on this machine under a detached supervisor process, keeping
each job's state in a JSON file in a spool folder, so any process (a new resource instance after an
orchestrator restart) can poll a job another one submitted. `slurm.SlurmScheduler` drives the real
`sbatch`/`scontrol`/`squeue`/`scancel` commands with argument lists. PBS or Cobalt sites would be
one more class with the same five methods.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from nightly_assets.process import child_env

JobState = Literal["queued", "running", "done", "failed"]
FINAL_STATES: tuple[JobState, ...] = ("done", "failed")

_JOB_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,63}$")
_JOB_NAME = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,127}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CANCEL_MARKER = "cancel-requested"
_SUPERVISOR_POLL_S = 0.05


class SchedulerError(RuntimeError):
    """A scheduler refused a request or a job id is unknown; says which and why."""


class SchedulerUnavailable(SchedulerError):
    """The scheduler did not answer (its controller restarting, the network): ask again later."""


@dataclass(frozen=True)
class JobRequest:
    """One job: `script` run on `nodes` nodes with `tasks_per_node` tasks each, within `walltime`."""

    script: Path
    name: str  # the same for every attempt at the same work: how a restarted run finds its job
    nodes: int
    walltime: dt.timedelta
    queue: str
    env: Mapping[str, str]
    tasks_per_node: int = 1
    account: str | None = None
    # A job array's task ids (Slurm's --array; each task sees SLURM_ARRAY_TASK_ID); (): a plain job.
    array: tuple[int, ...] = ()
    at_once: int | None = None  # how many of the array's tasks may run at once; None: all

    @property
    def fingerprint(self) -> str:
        """What the job does, hashed: a live job with the same name and fingerprint is this one."""
        what = [self.name, self.nodes, self.tasks_per_node, self.walltime.total_seconds(), self.queue]
        if self.array:  # a plain job's fingerprint stays what it was before arrays
            what += [list(self.array), self.at_once]
        blob = json.dumps([*what, self.account, sorted(self.env.items())]).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class LiveJob:
    """A queued or running job the scheduler knows by name."""

    job_id: str
    fingerprint: str


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: JobState
    exit_code: int | None = None  # negative: killed by that signal
    reason: str = ""  # why it failed (walltime exceeded, cancelled, ...) or the scheduler's own word
    duration_s: float | None = None  # run time on the nodes, queue time excluded

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES


@dataclass(frozen=True)
class JobOutput:
    stdout: Path
    stderr: Path


class Scheduler(Protocol):
    arrays: bool  # whether it runs job arrays (JobRequest.array); if not, one job per task

    def submit(self, request: JobRequest) -> str: ...

    def status(self, job_id: str) -> JobStatus: ...

    def output(self, job_id: str) -> JobOutput: ...

    def cancel(self, job_id: str) -> None: ...

    def live_jobs(self, name: str) -> list[LiveJob]: ...


def check_submission(request: JobRequest) -> None:
    """The checks every scheduler makes before it submits anything."""
    if not request.script.is_file():
        raise SchedulerError(f"job script {request.script} does not exist or is not a file")
    if not _JOB_NAME.match(request.name):
        raise SchedulerError(
            f"job name {request.name!r}: expected letters, digits, '.', '_' or '-' (at most 128)"
        )
    for field in ("nodes", "tasks_per_node"):
        count = getattr(request, field)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise SchedulerError(f"{field} must be a positive integer, got {count!r}")
    if request.walltime.total_seconds() <= 0:
        raise SchedulerError(f"walltime must be positive, got {request.walltime}")
    if request.array and (
        len(set(request.array)) != len(request.array)
        or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in request.array)
    ):
        raise SchedulerError(f"array: expected distinct task ids of 0 or more, got {list(request.array)}")
    if request.at_once is not None and (not request.array or request.at_once < 1):
        raise SchedulerError(f"at_once {request.at_once!r}: expected 1 or more, and only for a job array")
    for key, value in request.env.items():
        if not _ENV_NAME.match(key):
            raise SchedulerError(f"environment variable name {key!r} is not a valid name")
        if not isinstance(value, str) or "\0" in value:
            raise SchedulerError(f"environment variable {key}: expected a string without NUL bytes")


class LocalBatchScheduler:
    """Runs each job as a local process in its own process group: a stand-in for a batch system.

    Nodes and queue are recorded and handed to the job (BATCH_NODES, BATCH_QUEUE), not enforced;
    walltime is: past it the whole process group is killed and the job fails "walltime exceeded".
    """

    arrays = False

    def __init__(self, spool_dir: Path, kill_grace_s: float = 10.0) -> None:
        self.spool_dir = spool_dir
        self.kill_grace_s = kill_grace_s
        # Job ids by name, beside the spool (whose entries are all job folders).
        self.names_dir = spool_dir.with_name(f"{spool_dir.name}-by-name")

    def submit(self, request: JobRequest) -> str:
        check_submission(request)
        if request.array:
            # One process per job here; a caller that wants many tasks submits one job each.
            raise SchedulerError(
                f"job {request.name}: job arrays need a Slurm scheduler (kind slurm); the local "
                "scheduler runs plain jobs only: submit one job per task"
            )
        job_id = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"
        job_dir = self.spool_dir / job_id
        job_dir.mkdir(parents=True)
        _write_state(
            job_dir,
            {
                "job_id": job_id,
                "name": request.name,
                "fingerprint": request.fingerprint,
                "script": str(request.script.resolve()),
                "nodes": request.nodes,
                "tasks_per_node": request.tasks_per_node,
                "queue": request.queue,
                "account": request.account,
                "walltime_s": request.walltime.total_seconds(),
                "kill_grace_s": self.kill_grace_s,
                "env": dict(request.env),
                "submitted_at": time.time(),
                "state": "queued",
            },
        )
        self.names_dir.mkdir(exist_ok=True)
        with (self.names_dir / request.name).open("a") as index:  # how live_jobs finds it by name
            index.write(job_id + "\n")
        with (job_dir / "supervisor.log").open("ab") as log:
            # The supervisor forks away at once, so this returns in one interpreter start.
            started = subprocess.run(
                [sys.executable, "-m", "nightly_assets.batch.schedulers", "supervise", str(job_dir)],
                cwd=job_dir,
                env=child_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                timeout=60,
                check=False,
            )
        if started.returncode != 0:
            detail = (job_dir / "supervisor.log").read_text(errors="replace")[-2000:]
            raise SchedulerError(f"job {job_id}: the local supervisor did not start:\n{detail}")
        return job_id

    def status(self, job_id: str) -> JobStatus:
        job_dir = self._job_dir(job_id)
        state = _read_state(job_dir)
        if state["state"] not in FINAL_STATES and not _supervisor_alive(job_dir):
            state = _read_state(job_dir)  # it may have finished between the two reads
            if state["state"] not in FINAL_STATES:
                return JobStatus(job_id, "failed", None, "lost: its supervisor process is gone")
        return _status_from(state)

    def output(self, job_id: str) -> JobOutput:
        job_dir = self._job_dir(job_id)
        return JobOutput(job_dir / "stdout", job_dir / "stderr")

    def cancel(self, job_id: str) -> None:
        """Ask the supervisor to end the job; a job whose supervisor is gone is killed from here."""
        job_dir = self._job_dir(job_id)
        (job_dir / _CANCEL_MARKER).touch()
        if not _supervisor_alive(job_dir):
            pid = _read_state(job_dir).get("pid")
            if pid and _is_job_process(pid, job_id):
                _kill_group(pid, signal.SIGKILL)

    def live_jobs(self, name: str) -> list[LiveJob]:
        index = self.names_dir / name
        if not _JOB_NAME.match(name) or not index.is_file():
            return []
        live = []
        for job_id in index.read_text().split():
            with contextlib.suppress(SchedulerError, OSError, ValueError):
                if not self.status(job_id).finished:
                    live.append(LiveJob(job_id, _read_state(self._job_dir(job_id)).get("fingerprint", "")))
        return live

    def _job_dir(self, job_id: str) -> Path:
        if not _JOB_ID.match(job_id) or not (self.spool_dir / job_id / "job.json").is_file():
            raise SchedulerError(f"no local batch job {job_id!r} in spool {self.spool_dir}")
        return self.spool_dir / job_id


def _status_from(state: Mapping[str, Any]) -> JobStatus:
    started, ended = state.get("started_at"), state.get("ended_at")
    duration = ended - started if started is not None and ended is not None else None
    return JobStatus(
        state["job_id"], state["state"], state.get("exit_code"), state.get("reason", ""), duration
    )


def _read_state(job_dir: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((job_dir / "job.json").read_text())
    return state


def _write_state(job_dir: Path, state: Mapping[str, Any]) -> None:
    # Readers in other processes must never see half a file: write beside it, then rename over it.
    tmp = job_dir / f".job.json.{os.getpid()}"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, job_dir / "job.json")


def _supervisor_alive(job_dir: Path) -> bool:
    try:
        pid = int((job_dir / "supervisor.pid").read_text())
    except (OSError, ValueError):
        return False
    if Path("/proc/self/cmdline").exists():
        # The pid alone could have been reused after a reboot: it must still be this job's supervisor
        # (a zombie's cmdline is empty, so a finished one reads as gone too).
        try:
            return job_dir.name.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _is_job_process(pid: int, job_id: str) -> bool:
    try:
        return f"BATCH_JOB_ID={job_id}\0".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group has already ended
        os.killpg(pgid, sig)


def _supervise(job_dir: Path) -> None:
    """Run the job to its end: own process group, walltime, cancellation; record every transition."""
    state = _read_state(job_dir)
    if (job_dir / _CANCEL_MARKER).exists():
        _write_state(job_dir, {**state, "state": "failed", "reason": "cancelled before it started"})
        return
    home = job_dir / "home"  # the job is the code under test: not our HOME and its credential files
    home.mkdir(exist_ok=True)
    env = {
        **child_env(),
        "HOME": str(home),
        **state["env"],
        "BATCH_JOB_ID": state["job_id"],
        "BATCH_NODES": str(state["nodes"]),
        "BATCH_TASKS_PER_NODE": str(state.get("tasks_per_node", 1)),
        "BATCH_QUEUE": state["queue"],
    }
    script = state["script"]
    argv = [script] if os.access(script, os.X_OK) else ["/bin/sh", script]
    with (job_dir / "stdout").open("wb") as out, (job_dir / "stderr").open("wb") as err:
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True
            )
        except OSError as exc:
            _write_state(job_dir, {**state, "state": "failed", "reason": f"cannot start: {exc}"})
            return
        started = time.time()
        state = {**state, "state": "running", "pid": proc.pid, "started_at": started}
        _write_state(job_dir, state)
        reason = ""
        deadline = time.monotonic() + state["walltime_s"]
        while proc.poll() is None:
            if (job_dir / _CANCEL_MARKER).exists():
                reason = "cancelled"
            elif time.monotonic() > deadline:
                reason = f"walltime exceeded ({state['walltime_s']:g} s)"
            if reason:
                _end_group(proc, state["kill_grace_s"])
                break
            time.sleep(_SUPERVISOR_POLL_S)
        # What the script left behind in its group ends with the job, as on a real batch system.
        _kill_group(proc.pid, signal.SIGKILL)
    code = proc.returncode
    final = "done" if code == 0 and not reason else "failed"
    if final == "failed" and not reason:
        reason = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    _write_state(
        job_dir, {**state, "state": final, "exit_code": code, "reason": reason, "ended_at": time.time()}
    )


def _end_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid, signal.SIGKILL)
        proc.wait()


def _daemonize_and_supervise(job_dir: Path) -> None:
    child = os.fork()
    if child:
        (job_dir / "supervisor.pid").write_text(str(child))
        os._exit(0)
    os.setsid()  # no terminal, no signals aimed at the submitter's group
    try:
        _supervise(job_dir)
    except Exception as exc:  # the job must still end in a final state a poller can read
        state = _read_state(job_dir)
        _write_state(job_dir, {**state, "state": "failed", "reason": f"supervisor error: {exc!r}"})
        raise


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "supervise":
        sys.exit("usage: python -m nightly_assets.batch.schedulers supervise JOB_DIR")
    _daemonize_and_supervise(Path(sys.argv[2]))
