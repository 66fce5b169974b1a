"""Slurm through its command-line tools (`sbatch`, `scontrol`, `squeue`, `sacct`, `scancel`).

Tested against a real one-node cluster (slurmctld + slurmd + munged, the `slurm` marker). Every call
is an argument list, never a shell line. The job's environment is named variable by variable
(`--export=NAME,...`): the allow-listed variables of ours plus the job's own, so nothing of the
orchestrator's (tokens, passwords) reaches a job, whatever sbatch's own environment held.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

from nightly_assets.batch.schedulers import (
    JobOutput,
    JobRequest,
    JobStatus,
    LiveJob,
    SchedulerError,
    SchedulerUnavailable,
    check_submission,
)
from nightly_assets.process import CommandError, CommandResult, child_env, run_command

# The controller's answers that mean "try again later", not "this job or request is bad".
_UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused", "Zero Bytes")
_UNKNOWN_JOB = "Invalid job id specified"
_COMMENT_PREFIX = "nightly:"

_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
# STOPPED: held by a signal, resumable; the job still holds its nodes.
_RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING", "STOPPED"}
_REASONS = {
    "TIMEOUT": "walltime exceeded",
    "CANCELLED": "cancelled",
    "NODE_FAIL": "node failure",
    "PREEMPTED": "preempted",
    "OUT_OF_MEMORY": "out of memory",
    "BOOT_FAIL": "node boot failure",
    "DEADLINE": "deadline passed",
}


class SlurmScheduler:
    """Slurm's command-line tools with argument lists. `conf` is the slurm.conf the tools read
    (SLURM_CONF; None: the site's default). `spool_dir` must be on a file system the compute nodes
    share: the job's stdout/stderr and its scratch HOME are there."""

    arrays = True

    def __init__(self, spool_dir: Path, conf: str | None = None, command_timeout_s: float = 120) -> None:
        if "%" in str(spool_dir):
            raise SchedulerError(f"spool_dir {spool_dir}: '%' would be read as a Slurm filename pattern")
        self.spool_dir = spool_dir
        self.conf = conf
        self.command_timeout_s = command_timeout_s

    def submit(self, request: JobRequest) -> str:
        check_submission(request)
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        # The job is the code under test: a scratch HOME of its own, not the service account's.
        home = self.spool_dir / "home" / f"{request.name}-{secrets.token_hex(4)}"
        home.mkdir(parents=True)
        env = {**child_env(), "HOME": str(home), **request.env}
        argv = sbatch_argv(request, self.spool_dir.resolve(), sorted(env))
        return parse_sbatch(self._run(argv, env=env).output)

    def status(self, job_id: str) -> JobStatus:
        _check_slurm_id(job_id)
        shown = self._run(["scontrol", "--oneliner", "show", "job", job_id], check=False)
        if shown.returncode == 0:
            return parse_scontrol(job_id, shown.output)
        if _UNKNOWN_JOB not in shown.output:
            raise SchedulerError(f"scontrol show job {job_id} failed:\n{shown.tail()}")
        # Past MinJobAge the controller forgets a finished job: accounting, if the site keeps it.
        accounted = self._run(sacct_argv(job_id), check=False)
        if accounted.returncode == 0 and accounted.output.strip():
            return parse_sacct(job_id, accounted.output)
        return JobStatus(
            job_id,
            "failed",
            reason="lost: Slurm no longer knows it (gone from slurmctld after MinJobAge, no sacct record)",
        )

    def output(self, job_id: str) -> JobOutput:
        """A plain job's files, or an array task's (`<array>_<task>`: sbatch_argv names them so)."""
        _check_slurm_id(job_id)
        return JobOutput(self.spool_dir / f"slurm-{job_id}.out", self.spool_dir / f"slurm-{job_id}.err")

    def cancel(self, job_id: str) -> None:
        _check_slurm_id(job_id)
        self._run(["scancel", job_id])

    def live_jobs(self, name: str) -> list[LiveJob]:
        """This user's queued or running jobs called `name`, oldest first; a job array once, by its
        own id (cancelling it ends every task), however many of its tasks squeue lists."""
        listed = self._run(["squeue", "--noheader", "--me", f"--name={name}", "--format=%F|%k", "--sort=i"])
        return parse_live_jobs(listed.output)

    def _run(
        self, argv: list[str], *, env: Mapping[str, str] | None = None, check: bool = True
    ) -> CommandResult:
        extra = {**(env or {}), **({"SLURM_CONF": self.conf} if self.conf else {})}
        try:
            result = run_command(argv, env=extra, timeout_s=self.command_timeout_s, check=False)
        except CommandError as exc:
            if "No such file" in str(exc) or "not found" in str(exc):
                raise SchedulerError(
                    f"{argv[0]} not found: the Slurm client tools must be installed and on PATH"
                ) from exc
            raise SchedulerUnavailable(f"{argv[0]}: {exc}") from exc
        if result.returncode != 0 and any(word in result.output for word in _UNREACHABLE):
            where = f" (SLURM_CONF={self.conf})" if self.conf else ""
            raise SchedulerUnavailable(
                f"{argv[0]}: the Slurm controller does not answer{where}:\n{result.tail(5)}"
            )
        if check and result.returncode != 0:
            raise SchedulerError(f"{argv[0]} failed with exit code {result.returncode}:\n{result.tail()}")
        return result


def slurm_time(walltime: dt.timedelta) -> str:
    """Slurm's --time: [D-]HH:MM:SS, rounded up to the second (Slurm itself counts whole minutes)."""
    total = int(-(-walltime.total_seconds() // 1))
    days, rest = divmod(total, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def sbatch_argv(request: JobRequest, out_dir: Path, exported: list[str]) -> list[str]:
    pattern = "slurm-%A_%a" if request.array else "slurm-%j"
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={request.name}",
        f"--nodes={request.nodes}",
        f"--ntasks-per-node={request.tasks_per_node}",
        f"--time={slurm_time(request.walltime)}",
        f"--partition={request.queue}",
        f"--chdir={out_dir}",
        # An array task's files are named <array>_<task>, as its id is (--array: %A_%a).
        f"--output={out_dir / (pattern + '.out')}",
        f"--error={out_dir / (pattern + '.err')}",
        f"--comment={_COMMENT_PREFIX}{request.fingerprint}",
        # Names only: each value comes from sbatch's environment, never through a parser of ours.
        f"--export={','.join(exported)}",
    ]
    if request.account:
        argv.append(f"--account={request.account}")
    if request.array:
        throttle = f"%{request.at_once}" if request.at_once is not None else ""
        argv.append(f"--array={','.join(str(t) for t in sorted(request.array))}{throttle}")
    return [*argv, str(request.script.resolve())]


def sacct_argv(job_id: str) -> list[str]:
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        f"--jobs={job_id}",
        "--format=JobID,State,ExitCode,ElapsedRaw",
    ]


def parse_sbatch(output: str) -> str:
    """`sbatch --parsable` prints `<id>` or `<id>;<cluster>`."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    job_id = lines[-1].split(";")[0] if lines else ""
    if not job_id.isdigit():
        raise SchedulerError(f"sbatch printed no job id; its output was:\n{output[-2000:]}")
    return job_id


def parse_scontrol(job_id: str, output: str) -> JobStatus:
    """`scontrol --oneliner show job`: one line of `Key=Value` words per record (an array's or a
    heterogeneous job's parent shows several); the record of `job_id` itself is read."""
    lines = output.splitlines()
    array, _, task = job_id.partition("_")
    # An array task's record carries its own JobId: it is found by ArrayJobId and ArrayTaskId.
    mine = f"ArrayJobId={array} ArrayTaskId={task} " if task else ""
    record = next(
        (line for line in lines if line.startswith(f"JobId={job_id} ") or (mine and mine in line)),
        lines[0] if lines else "",
    )
    fields = dict(word.split("=", 1) for word in record.split() if "=" in word)
    state = fields.get("JobState", "")
    if not state:
        raise SchedulerError(f"scontrol show job {job_id} printed no JobState:\n{output[-2000:]}")
    duration = _run_time_s(fields.get("RunTime", ""))
    return _status(job_id, state, fields.get("ExitCode", ""), duration, fields.get("Reason", "None"))


def parse_sacct(job_id: str, output: str) -> JobStatus:
    """The allocation's line of `sacct --parsable2` (JobID|State|ExitCode|ElapsedRaw)."""
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 4 or fields[0] != job_id:
            continue
        duration = float(fields[3]) if fields[3].isdigit() else None
        return _status(job_id, fields[1], fields[2], duration, "None")
    # sacct can lag a few seconds behind sbatch: not known yet is not an end.
    return JobStatus(job_id, "queued", reason="not yet in sacct")


def parse_live_jobs(output: str) -> list[LiveJob]:
    """`squeue --format=%F|%k` lines: job id (an array's own, on each of its tasks' lines) and
    comment (ours: `nightly:<fingerprint>`)."""
    jobs: list[LiveJob] = []
    for line in output.splitlines():
        job_id, _, comment = line.strip().partition("|")
        if job_id.isdigit() and job_id not in (j.job_id for j in jobs):
            fingerprint = comment.removeprefix(_COMMENT_PREFIX) if comment.startswith(_COMMENT_PREFIX) else ""
            jobs.append(LiveJob(job_id, fingerprint))
    return jobs


def _status(job_id: str, raw_state: str, exit_text: str, duration: float | None, why: str) -> JobStatus:
    word = raw_state.split()[0] if raw_state else ""
    detail = raw_state.lower() if why in ("None", "") else f"{raw_state.lower()}: {why}"
    if word in _QUEUED:
        return JobStatus(job_id, "queued", reason=detail)
    if word in _RUNNING:
        return JobStatus(job_id, "running", reason="" if word == "RUNNING" else detail)
    exit_code = _slurm_exit_code(exit_text)
    if word == "COMPLETED" and exit_code == 0:
        return JobStatus(job_id, "done", 0, "", duration)
    reason = _REASONS.get(word, raw_state.lower() or "unknown")
    if word == "FAILED" and exit_code is not None and exit_code >= 0:
        reason = f"exit code {exit_code}"
    return JobStatus(job_id, "failed", exit_code, reason, duration)


def _slurm_exit_code(text: str) -> int | None:
    code, _, sig = text.partition(":")
    if not code.isdigit():
        return None
    return -int(sig) if sig.isdigit() and int(sig) else int(code)


def _run_time_s(text: str) -> float | None:
    match = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+):(\d+)", text)
    if not match:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def _check_slurm_id(job_id: str) -> None:
    if not re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id):
        raise SchedulerError(f"{job_id!r} is not a Slurm job id (digits, or <array>_<task>)")
