"""One run per night x target at a time.

Two runs of one night (a schedule tick and a manual re-run, a backfill and a re-execution) would
replace each other's work folders and warehouse rows mid-way. Each stage therefore holds the
night's lease in the warehouse before it touches anything: the stages of one run share it, and a
second run's stages wait, logging for whom, until the first run has ended. A lease whose run has
ended (or whose `nightly run` process is gone) is taken over, so a crash never blocks a night.
Dagster's tag concurrency limits cannot do this: runs launched from the UI carry no tag that
names the pipeline, and two pipelines may share a partition key.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

from nightly_assets.results import NightKey

if TYPE_CHECKING:
    from nightly_assets.warehouse.store import Warehouse

# Statuses a run does not leave (Dagster's own list is not public).
FINISHED_STATUSES = frozenset(
    {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
)

# "host:pid:run_id" of a `nightly run` executing the run in its own process. The run id is part of
# it because a re-execution (launched from the UI, run by the daemon) inherits its parent's tags.
PROCESS_TAG = "nightly/process"
# The run a follow-up run (the night's summary) is written for.
SUMMARY_OF_TAG = "nightly/summary_of"
POLL_S = 5.0
UNKNOWN_RUN_GRACE_S = 12 * 3600  # longer than any one stage runs
POOLED_RETRY_S = 30  # a step holding a pool slot gives it back and retries after this long
POOLED_MAX_RETRIES = 480  # four hours of waiting for the other run, then the step fails saying so


def this_process_tag(run_id: str) -> dict[str, str]:
    return {PROCESS_TAG: f"{socket.gethostname()}:{os.getpid()}:{run_id}"}


def run_is_over(instance: dg.DagsterInstance, run_id: str, lease_age_s: float) -> bool:
    """Whether a run has ended or lost its `nightly run` process. A run this instance does not know
    (a `nightly run` on another DAGSTER_HOME writing to the same warehouse) is taken for over only
    once its lease went `UNKNOWN_RUN_GRACE_S` without a stage renewing it."""
    run = instance.get_run_by_id(run_id)
    if run is None:
        return lease_age_s > UNKNOWN_RUN_GRACE_S
    return run.status in FINISHED_STATUSES or process_gone(run)


def process_gone(run: dg.DagsterRun) -> bool:
    host, pid, run_id = [*run.tags.get(PROCESS_TAG, "").rsplit(":", 2), "", ""][:3]
    if run_id != run.run_id or host != socket.gethostname() or not pid.isdigit():
        return False  # not run by a `nightly run` process of this host (or inherited by a re-run)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"nightly" not in cmdline  # the pid now belongs to another program


def hold_night(
    context: dg.AssetExecutionContext,
    store: Warehouse,
    key: NightKey,
    pooled: bool = False,
    poll_s: float = POLL_S,
) -> None:
    """Take the night's lease for this run, waiting while another live run holds it.

    A step of a concurrency pool (gpu, tpu, ...) does not wait holding its slot: the other run may
    need that very slot to end (a deadlock), and other pipelines would wait too. It asks Dagster
    to retry it later instead, which gives the slot back meanwhile."""
    run_id = context.run.run_id
    said = ""
    while True:
        holder = store.take_lease(key, run_id, functools.partial(run_is_over, context.instance))
        if holder is None:
            if said:
                context.log.info(f"{key}: run {said} has ended; this run goes on")
            return
        if pooled:
            context.log.warning(
                f"{key} is being run by run {holder}; giving back the pool slot, retrying in "
                f"{POOLED_RETRY_S} s (attempt {context.retry_number + 1} of {POOLED_MAX_RETRIES})"
            )
            raise dg.RetryRequested(max_retries=POOLED_MAX_RETRIES, seconds_to_wait=POOLED_RETRY_S)
        if holder != said:
            unknown = "" if context.instance.get_run_by_id(holder) else " (unknown to this Dagster instance)"
            context.log.warning(f"{key} is being run by run {holder}{unknown}; waiting for it to end")
            said = holder
        time.sleep(poll_s)
