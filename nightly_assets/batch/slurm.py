"""Slurm through its command-line tools (`sbatch`, `squeue`, `sacct`, `scancel`), argument lists only."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from pathlib import Path

from nightly_assets.batch.schedulers import JobOutput, JobStatus, SchedulerError, check_submission
from nightly_assets.process import CommandResult, run_command


class SlurmScheduler:
    """Slurm through its command-line tools, each called with an argument list (no shell).

    Only the argument lists and the parsing of the tools' output are tested (with outputs recorded
    in Slurm's real formats): there is no Slurm on the machines this project is tested on. The
    job's environment is sbatch's own (`--export=ALL`, Slurm's default) plus `env`, handed over
    in sbatch's process environment, so no value passes through a shell. `spool_dir` must be on
    a file system the compute nodes share: the job's stdout/stderr are written there.
    """

    def __init__(self, spool_dir: Path, command_timeout_s: float = 120) -> None:
        if "%" in str(spool_dir):
            raise SchedulerError(f"spool_dir {spool_dir}: '%' would be read as a Slurm filename pattern")
        self.spool_dir = spool_dir
        self.command_timeout_s = command_timeout_s

    def submit(
        self,
        script: Path,
        *,
        nodes: int,
        walltime: dt.timedelta,
        queue: str,
        env: Mapping[str, str],
        name: str,
        account: str | None = None,
    ) -> str:
        check_submission(script, nodes, walltime, env)
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        argv = sbatch_argv(script.resolve(), self.spool_dir.resolve(), nodes, walltime, queue, name, account)
        return parse_sbatch(self._run(argv, env=env).output)

    def status(self, job_id: str) -> JobStatus:
        _check_slurm_id(job_id)
        active = self._run(squeue_argv(job_id), check=False)
        if active.returncode == 0:
            found = parse_squeue(job_id, active.output)
            if found is not None:
                return found
        # Gone from the queue (or only just submitted): accounting knows how it ended.
        return parse_sacct(job_id, self._run(sacct_argv(job_id)).output)

    def output(self, job_id: str) -> JobOutput:
        _check_slurm_id(job_id)
        return JobOutput(self.spool_dir / f"slurm-{job_id}.out", self.spool_dir / f"slurm-{job_id}.err")

    def cancel(self, job_id: str) -> None:
        _check_slurm_id(job_id)
        self._run(["scancel", job_id])

    def _run(
        self, argv: list[str], *, env: Mapping[str, str] | None = None, check: bool = True
    ) -> CommandResult:
        return run_command(argv, env=env, timeout_s=self.command_timeout_s, check=check)


_SQUEUE_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
_SQUEUE_RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}


def slurm_time(walltime: dt.timedelta) -> str:
    """Slurm's --time: [D-]HH:MM:SS, rounded up to the second."""
    total = int(-(-walltime.total_seconds() // 1))
    days, rest = divmod(total, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def sbatch_argv(
    script: Path,
    out_dir: Path,
    nodes: int,
    walltime: dt.timedelta,
    queue: str,
    name: str,
    account: str | None = None,
) -> list[str]:
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--nodes={nodes}",
        f"--time={slurm_time(walltime)}",
        f"--partition={queue}",
        f"--output={out_dir / 'slurm-%j.out'}",
        f"--error={out_dir / 'slurm-%j.err'}",
        "--export=ALL",
    ]
    if account:
        argv.append(f"--account={account}")
    return [*argv, str(script)]


def squeue_argv(job_id: str) -> list[str]:
    return ["squeue", "--noheader", f"--jobs={job_id}", "--format=%T"]


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


def parse_squeue(job_id: str, output: str) -> JobStatus | None:
    """The state squeue shows, or None when the job has left the queue (or is a final state)."""
    words = output.split()
    if not words:
        return None
    if words[0] in _SQUEUE_QUEUED:
        return JobStatus(job_id, "queued", reason=words[0].lower())
    if words[0] in _SQUEUE_RUNNING:
        return JobStatus(job_id, "running", reason=words[0].lower())
    return None


def parse_sacct(job_id: str, output: str) -> JobStatus:
    """The allocation's line of `sacct --parsable2` (JobID|State|ExitCode|ElapsedRaw)."""
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 4 or fields[0] != job_id:
            continue
        raw_state = fields[1]
        word = raw_state.split()[0] if raw_state else ""
        exit_code = _slurm_exit_code(fields[2])
        duration = float(fields[3]) if fields[3].isdigit() else None
        if word in ("PENDING", "REQUEUED", "SUSPENDED"):
            return JobStatus(job_id, "queued", reason=raw_state.lower())
        if word in ("RUNNING", "COMPLETING"):
            return JobStatus(job_id, "running", reason=raw_state.lower())
        if word == "COMPLETED" and exit_code == 0:
            return JobStatus(job_id, "done", 0, "", duration)
        reason = "walltime exceeded" if word == "TIMEOUT" else raw_state.lower() or "unknown"
        return JobStatus(job_id, "failed", exit_code, reason, duration)
    # sacct can lag a few seconds behind sbatch: not known yet is not an end.
    return JobStatus(job_id, "queued", reason="not yet in squeue or sacct")


def _slurm_exit_code(text: str) -> int | None:
    code, _, sig = text.partition(":")
    if not code.isdigit():
        return None
    return -int(sig) if sig.isdigit() and int(sig) else int(code)


def _check_slurm_id(job_id: str) -> None:
    if not re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id):
        raise SchedulerError(f"{job_id!r} is not a Slurm job id (digits, or <array>_<task>)")
