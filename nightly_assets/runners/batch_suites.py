"""A suite on the batch machine: pytest with the night's virtualenv as batch jobs (runners/batch.py).

Every pytest there is one fixed program (TASK_PROGRAM, run with `python -c`) that reads its pytest
arguments from a task file, `<folder>/task-<k>.json`, on the file system the compute nodes share:
k is the job array's SLURM_ARRAY_TASK_ID, or the number after the folder for a plain job. So no
test id, marker or catalog value ever goes through a shell or onto a command line.

A sharded suite is ONE job array (`--array=1-N%M`): task k runs shard k. A lost task (node failure,
walltime, preemption, cancelled) is run again as a plain job of its own; the other tasks' results
stand. Without arrays (the local scheduler) each shard is a plain job from the start.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nightly_assets.batch.resources import (
    BatchJobError,
    BatchSchedulerResource,
    Earlier,
    JobResult,
    describe_failure,
)
from nightly_assets.catalog.suite import Suite
from nightly_assets.shards.execute import ShardJob, ShardLost
from nightly_assets.shards.plan import ShardPlan
from nightly_assets.shards.suite import ShardedRun, run_sharded
from nightly_assets.testing.resources import TestRunError, usable
from nightly_assets.words import plural

# Runs in the environment's Python on a compute node: only the standard library and pytest.
TASK_PROGRAM = """\
import json, os, sys
from pathlib import Path
import pytest
folder = Path(sys.argv[1])
task = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("SLURM_ARRAY_TASK_ID", "")
if not task.isdigit():
    sys.exit(f"no task: expected SLURM_ARRAY_TASK_ID (a job array's task) or a task number, got {task!r}")
spec = json.loads((folder / f"task-{task}.json").read_text())
os.chdir(spec["rootdir"])
sys.path[0] = spec["rootdir"]  # as `python -m pytest` in the rootdir puts it first
sys.exit(pytest.main(spec["args"]))
"""


@dataclass(frozen=True)
class BatchPytest:
    """How one suite's pytest runs as batch jobs: the environment's Python and rootdir (both on the
    shared file system), the stage's job name (every job of the stage bears it, so an earlier
    attempt's are found and cancelled), its walltime, its variables (named, nothing else of ours)
    and queue."""

    batch: BatchSchedulerResource
    python: Path
    rootdir: Path
    name: str
    walltime: dt.timedelta
    env: Mapping[str, str]
    queue: str | None
    log: Callable[[str], None]

    def write_task(self, folder: Path, task: int, args: Sequence[str], junit: Path) -> None:
        """Task `task`'s file in `folder`: pytest's arguments, run in the rootdir, JUnit to `junit`."""
        folder.mkdir(parents=True, exist_ok=True)
        junit.unlink(missing_ok=True)  # an earlier attempt's report must never pass for this one's
        pytest_args = [
            *args,
            *("-q", "-p", "no:cacheprovider", "--rootdir", str(self.rootdir)),
            *(f"--junitxml={junit}", "-o", "junit_family=xunit2"),
        ]
        spec = {"rootdir": str(self.rootdir), "args": pytest_args}
        (folder / f"task-{task}.json").write_text(json.dumps(spec, indent=1))

    def submit(
        self,
        folder: Path,
        task: int | None,
        *,
        earlier: Earlier,
        array: Sequence[int] = (),
        at_once: int | None = None,
        walltime: dt.timedelta | None = None,
    ) -> str:
        """A job of TASK_PROGRAM on `folder`'s task `task` (None: each array task its own)."""
        argv = [str(self.python), "-c", TASK_PROGRAM, str(folder), *([str(task)] if task is not None else [])]
        return self.batch.submit(
            self.name,
            argv,
            walltime=walltime or self.walltime,
            env=self.env,
            queue=self.queue,
            earlier=earlier,
            log=self.log,
            array=array,
            at_once=at_once,
        )

    def junit_of(self, job_id: str, junit: Path) -> Path:
        """Wait for the job (or array task) and return its JUnit; BatchJobError whose first line
        says why there is none to trust (walltime exceeded, node failure, cancelled, pytest's exit)."""
        status = self.batch.wait(job_id, log=self.log)
        result = JobResult(status, self.batch.output(job_id))
        if status.state == "failed" and not status.reason.startswith("exit code"):
            raise BatchJobError(f"batch job {job_id}: {describe_failure(status)}\n{result.tail()}")
        returncode = 0 if status.state == "done" else status.exit_code
        try:
            usable(-1 if returncode is None else returncode, result.stdout_text()[-3000:], junit)
        except TestRunError as exc:
            raise BatchJobError(f"batch job {job_id}: {exc}") from None
        if not junit.is_file():
            raise BatchJobError(
                f"batch job {job_id}: pytest wrote no JUnit report ({junit})\n{result.tail()}"
            )
        return junit

    def run_one_job(self, folder: Path, args: Sequence[str], junit: Path, walltime: dt.timedelta) -> Path:
        """pytest `args` as one plain job, waited for; interrupted, the job is cancelled."""
        self.write_task(folder, 1, args, junit)
        job_id = self.submit(folder, 1, earlier="beside", walltime=walltime)
        self.log(f"batch job {job_id} submitted: {self.name}, walltime {walltime}")
        try:
            return self.junit_of(job_id, junit)
        except BatchJobError:
            raise
        except BaseException:
            self.batch.cancel_quietly(job_id, self.log)
            raise


def run_array(
    runner: BatchPytest,
    suite: Suite,
    stage: str,
    runner_name: str,
    collected: Sequence[str],
    history: tuple[Mapping[str, float], int],
    select: Callable[[list[str]], list[str]],
    *,
    workdir: Path,
    at_once: int | None,
) -> ShardedRun:
    """The collected tests planned into shards (run_sharded) and run as one job array, `at_once`
    tasks at most running together (None: as many as the cluster gives); `select` gives the pytest
    arguments of some node ids (the suite's markers and arguments kept)."""
    submitted: list[str] = []  # the array's id first (when arrays run), then re-runs' jobs
    arrays = runner.batch.arrays()

    def on_plan(plan: ShardPlan) -> None:
        tasks = [shard.index for shard in plan.shards if shard.units]  # an empty shard runs nothing
        if not arrays or not tasks:
            return
        folder = workdir / "array"
        for shard in plan.shards:
            if shard.units:
                junit = workdir / f"junit-shard-{shard.index}.xml"
                runner.write_task(folder, shard.index, select(list(shard.units)), junit)
        array_id = runner.submit(folder, None, earlier="replace", array=tasks, at_once=at_once)
        submitted.append(array_id)
        runner.log(
            f"{stage}: batch job array {array_id} submitted: {plural(len(tasks), 'shard')} as its tasks, "
            f"{at_once or 'all'} at once, walltime {runner.walltime} each"
        )

    def run_one(job: ShardJob) -> Path:
        index = job.shard.index
        if job.attempt == 1 and arrays:
            array_id = submitted[0]
            job_id, junit = f"{array_id}_{index}", workdir / f"junit-shard-{index}.xml"
            # Interrupted, the whole array goes (each shard's stop asks; the second finds it gone).
            job.on_stop(functools.partial(runner.batch.cancel_quietly, array_id, runner.log))
        else:  # a lost task run again alone (or, without arrays, each shard): a plain job of its own
            junit = workdir / f"junit-{job.name}.xml"
            runner.write_task(workdir / job.name, index, select(list(job.shard.units)), junit)
            job_id = runner.submit(workdir / job.name, index, earlier="beside")
            submitted.append(job_id)
            runner.log(f"{job.label}: batch job {job_id} submitted")
            job.on_stop(functools.partial(runner.batch.cancel_quietly, job_id, runner.log))
        job.notes["job"] = job_id
        try:
            return runner.junit_of(job_id, junit)
        except BatchJobError as exc:
            raise ShardLost(str(exc).splitlines()[0]) from None

    try:
        return run_sharded(
            suite,
            stage,
            runner_name,
            collected,
            history,
            run_one,
            gpus=None,  # every task waited for at once: the array's throttle holds how many run
            workdir=workdir,
            log=runner.log,
            on_plan=on_plan,
        )
    except BaseException:
        # Interrupted before a task's wait registered its stop, the array would be left: ended here
        # too (scancel of an ended job is no error).
        for job_id in submitted:
            runner.batch.cancel_quietly(job_id, runner.log)
        raise
