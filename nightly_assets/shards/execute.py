"""Running a planned suite's shards at once, whatever runs each one: a backend gives `run_shards` a
function that runs one attempt of one shard (a pytest process, a container, a pod, an array task,
a TPU VM) and returns its JUnit file, or raises ShardLost. A lost shard (killed, preempted, past
its time, no report) is run again alone, up to `retries` more times; the others' results stand.
Progress is logged shard by shard; an interrupted night ends every shard still running."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightly_assets.shards.plan import Shard, ShardPlan
from nightly_assets.words import plural


class ShardLost(RuntimeError):
    """One attempt of a shard gave no report to trust; the message says why (killed by signal 9,
    timed out after 600 s, the VM was preempted, the job's node failed)."""


@dataclass(frozen=True)
class ShardJob:
    """One attempt of one shard, as handed to a backend."""

    shard: Shard
    of: int  # how many shards the suite has
    attempt: int  # from 1
    started: Callable[[int], None]  # tell it the process group that runs the shard (ended on interrupt)
    notes: dict[str, Any] = field(default_factory=dict)  # what the backend records of it (devices, host)
    stops: list[Callable[[], None]] = field(default_factory=list)  # how to end what is not a process here

    def on_stop(self, stop: Callable[[], None]) -> None:
        """`stop` ends what runs the shard elsewhere (a container, a pod) if the night is interrupted."""
        self.stops.append(stop)

    @property
    def name(self) -> str:
        """The shard's files are named after it: `shard-2` (a re-run: `shard-2-try-2`)."""
        return f"shard-{self.shard.index}" + (f"-try-{self.attempt}" if self.attempt > 1 else "")

    @property
    def label(self) -> str:
        return f"shard {self.shard.index}/{self.of}"


@dataclass
class ShardRecord:
    """What became of one shard: each attempt's seconds and why it was lost, and its report."""

    shard: Shard
    attempts: list[dict[str, Any]] = field(default_factory=list)
    junit: Path | None = None  # the last attempt's report; None: every attempt was lost

    @property
    def lost(self) -> str | None:
        """Why the shard gave no report (its last attempt's reason), or None (reported, or nothing
        was planned on it)."""
        if self.junit is not None or not self.shard.units:
            return None
        return str(self.attempts[-1]["lost"]) if self.attempts else "not started"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.shard.index,
            "expected_s": round(self.shard.seconds, 3),
            "units": len(self.shard.units),
            "attempts": self.attempts,
            "junit": str(self.junit) if self.junit is not None else None,
        }


RunShard = Callable[[ShardJob], Path]
_WAIT_S = 0.5


def run_shards(
    plan: ShardPlan,
    run_one: RunShard,
    *,
    parallel: int | None,
    retries: int,
    log: Callable[[str], None],
) -> list[ShardRecord]:
    """Run every shard of `plan`, at most `parallel` at once (None: all), each lost one again up to `retries`
    times; one record per shard, in shard order."""
    records = [ShardRecord(shard) for shard in plan.shards]
    of = len(records)
    groups: set[int] = set()
    lock = threading.Lock()
    stopping = threading.Event()
    done = [0]

    def started(group: int) -> None:
        with lock:
            groups.add(group)
        if stopping.is_set():  # started after the night was interrupted: end it at once
            _end_group(group)

    jobs: list[ShardJob] = []

    def attempt_of(record: ShardRecord, attempt: int) -> tuple[ShardJob, set[int]]:
        mine: set[int] = set()

        def started_here(group: int) -> None:
            mine.add(group)
            started(group)

        job = ShardJob(record.shard, of, attempt, started_here)
        with lock:
            jobs.append(job)
        return job, mine

    def _forget(ended: set[int]) -> None:
        # An ended process group's id may be reused: an interrupt must not signal a stranger.
        with lock:
            groups.difference_update(ended)

    def shard_worker(record: ShardRecord) -> ShardRecord:
        if not record.shard.units:  # more shards than tests: an empty one runs nothing (not everything)
            log(f"shard {record.shard.index}/{of}: nothing planned on it")
            return record
        for attempt in range(1, retries + 2):
            if stopping.is_set():
                break
            job, mine = attempt_of(record, attempt)
            log(
                f"{job.label}: started{f' (attempt {attempt} of {retries + 1})' if attempt > 1 else ''}: "
                f"{plural(len(record.shard.units), 'unit')}, expected {record.shard.seconds:.0f} s"
            )
            began = time.monotonic()
            junit, lost = None, None
            try:
                junit = run_one(job)
            except ShardLost as exc:
                lost = str(exc)
            _forget(mine)
            seconds = time.monotonic() - began
            record.attempts.append({"seconds": round(seconds, 3), "lost": lost, **job.notes})
            if junit is None:
                again = (
                    "re-running it alone" if attempt <= retries else "no retries left: its tests did not run"
                )
                log(f"{job.label}: lost after {seconds:.0f} s ({lost}); {again}")
                continue
            record.junit = junit
            with lock:
                done[0] += 1
                finished = done[0]
            waited = job.notes.get("waited_s", 0.0)
            waiting = f", {waited:.0f} s of it waiting for devices" if waited >= 1 else ""
            log(f"{job.label}: done in {seconds:.0f} s{waiting} ({finished} of {of} shards done)")
            break
        return record

    pool = concurrent.futures.ThreadPoolExecutor(
        max_workers=max(1, min(parallel or of, of)), thread_name_prefix="shard"
    )
    try:
        pending = {pool.submit(shard_worker, record) for record in records}
        while pending:
            # In short waits: a stage in a thread (`nightly run`) is interrupted by an exception
            # raised in it when it next runs Python, not inside one long wait.
            ended, pending = concurrent.futures.wait(
                pending, timeout=_WAIT_S, return_when=concurrent.futures.FIRST_EXCEPTION
            )
            for future in ended:
                future.result()  # the first shard that raised (not ShardLost) ends the rest
    except BaseException:
        # Interrupted (a cancelled run, Ctrl-C) or a backend's own error: no shard may keep running.
        stopping.set()
        with lock:
            running, stops = list(groups), [stop for job in jobs for stop in job.stops]
        for group in running:
            _end_group(group)
        for stop in stops:
            with contextlib.suppress(Exception):  # each one ended as far as it can be
                stop()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return records


def _end_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already ended
        os.killpg(group, signal.SIGTERM)
