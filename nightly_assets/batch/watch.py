"""Asking a batch scheduler how its jobs stand, with patience: what `wait` and the sweep share."""

from __future__ import annotations

import time
from collections.abc import Callable

from nightly_assets.batch.schedulers import JobStatus, Scheduler, SchedulerUnavailable

# Why a pending job will never start as submitted (Slurm keeps it pending: EnforcePartLimits=NO).
# An admin may change the partition back, so a job is given up only after it stayed so a while.
NEVER_STARTS = {
    "PartitionNodeLimit": "more nodes than the partition allows",
    "PartitionConfig": "more than the partition's nodes can give",
    "PartitionTimeLimit": "a walltime over the partition's limit",
    "BadConstraints": "constraints no node meets",
    "InvalidAccount": "an account Slurm does not know",
    "InvalidQOS": "a QOS Slurm does not know",
}


def never_starts(status: JobStatus) -> str | None:
    """What a queued job asks for that it will never get, from its scheduler's reason; or None."""
    if status.state != "queued":
        return None
    return next((why for word, why in NEVER_STARTS.items() if word in status.reason), None)


class JobWatch:
    """One caller's view of its jobs: a scheduler that does not answer (a controller restart) is
    asked again until `unreachable_grace_s` has passed; a job that cannot start as submitted is
    cancelled once it has stayed so for `never_starts_grace_s`, and reported failed saying why."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        unreachable_grace_s: float,
        never_starts_grace_s: float,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.unreachable_grace_s = unreachable_grace_s
        self.never_starts_grace_s = never_starts_grace_s
        self.log = log
        self._silent_since: float | None = None
        self._stuck_since: dict[str, float] = {}

    def status(self, job_id: str) -> JobStatus | None:
        """The job's status; None when the scheduler did not answer this time."""
        now = time.monotonic()
        try:
            status = self.scheduler.status(job_id)
        except SchedulerUnavailable as exc:
            if self._silent_since is None:
                self._silent_since = now
                if self.log:
                    self.log(f"batch job {job_id}: the scheduler does not answer, asking again: {exc}")
            if now - self._silent_since > self.unreachable_grace_s:
                raise
            return None
        self._silent_since = None
        why = never_starts(status)
        if why is None:
            self._stuck_since.pop(job_id, None)
            return status
        if now - self._stuck_since.setdefault(job_id, now) < self.never_starts_grace_s:
            return status
        self.scheduler.cancel(job_id)
        return JobStatus(job_id, "failed", reason=f"cannot run: it asks for {why} ({status.reason})")
