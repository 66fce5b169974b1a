"""The batch runner kind: a batch machine (Theta's Cobalt, Slurm) whose wheels are built with Bazel
on the build host beside it, as Theta's Jenkins agent did (seed 004), and whose suites run as batch
jobs with the night's virtualenv (a sharded one as one Slurm job array: batch_suites.py). Jobs on
the machine itself (the sanity job, the sweep, the deploy) go through the `batch` scheduler
resource of their kinds."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path

from nightly_assets.batch.resources import BatchSchedulerResource, job_name, target_queue
from nightly_assets.builds.wheel_params import WheelsParams
from nightly_assets.process import passed_variables
from nightly_assets.results import TestReport
from nightly_assets.runners import docker
from nightly_assets.runners.batch_suites import BatchPytest, run_array
from nightly_assets.runners.local import collected_here, venv_and_rootdir
from nightly_assets.runners.protocol import (
    BuiltWheels,
    Capability,
    RunnerBackend,
    StageWork,
    SuiteOutcome,
    rerun_selection,
    shard_history,
    suite_selection,
)
from nightly_assets.runners.rbe import bazel_wheels
from nightly_assets.stages import StageSpec
from nightly_assets.testing.confirm import Rerunner, pytest_node_id
from nightly_assets.testing.junit import parse_junit
from nightly_assets.testing.pytest_output import parse_collect_only
from nightly_assets.testing.resources import LocalTestRunnerResource


class BatchBackend(RunnerBackend):
    kind = "batch"
    supports = frozenset({"wheels", "suite"})

    def resource_keys(self, spec: StageSpec, capability: Capability) -> set[str]:
        # A suite is collected on this host (test_runner), where the environment stage made its venv.
        return {"batch", "test_runner"} if capability == "suite" else {"bazel_rbe"}

    def build_wheels(self, work: StageWork, params: WheelsParams) -> BuiltWheels:
        return bazel_wheels(work, params, remote=False)

    def run_suite(self, work: StageWork) -> SuiteOutcome:
        if work.in_image:
            raise self.unsupported(
                work,
                "a suite in an image",
                "a batch job runs the night's virtualenv: use an environment stage",
            )
        suite, run, name = work.spec.stage.suite, work.run, work.spec.stage.name
        assert suite is not None
        log = work.context.log.info
        args, collect_only = suite_selection(work, self.gpu_count(work))
        python, rootdir = venv_and_rootdir(work)
        if collect_only:  # no GPUs to run it on: collected on this host, as a local runner does
            test_runner: LocalTestRunnerResource = work.resources.test_runner
            collection = test_runner.collect_pytest(
                python,
                rootdir,
                args,
                suite.timeout_minutes * 60,
                run.workdir / "pytest.log",
                env=docker.suite_env(work),
            )
            return SuiteOutcome(parse_collect_only(collection.output, name, run.runner_name))
        runner = batch_pytest(work, python, rootdir)
        # A job (or job array) an earlier attempt at this night's stage left queued or running would
        # run beside this one, on files about to be rewritten: ended first.
        runner.batch.cancel_earlier(runner.name, log)
        sharded = None
        if suite.sharded and (collected := collected_here(work, python, rootdir, args)) is not None:
            # Collected here, not in a job: the venv is this host's (the environment stage made it
            # here), and a queued cluster would hold the whole suite behind a one-minute job.
            pools, pool = work.spec.catalog.pools, work.spec.pool
            sharded = run_array(
                runner,
                suite,
                name,
                run.runner_name,
                collected,
                shard_history(work),
                functools.partial(rerun_selection, work),
                workdir=run.workdir,
                at_once=pools.get(pool) if pool else None,  # the runner's pool: its tasks at once
            )
            report = sharded.report
        else:
            junit = runner.run_one_job(
                run.workdir / "batch", args, run.workdir / "junit.xml", runner.walltime
            )
            report = parse_junit(junit, name, run.runner_name)
        log(f"{name}: {report.counts()}")
        return SuiteOutcome(report, rerunner=_rerunner(work, runner), shards=sharded)


def batch_pytest(work: StageWork, python: Path, rootdir: Path) -> BatchPytest:
    """The stage's pytest as batch jobs: its job name, the suite's walltime, variables and queue."""
    suite, run = work.spec.stage.suite, work.run
    assert suite is not None
    batch: BatchSchedulerResource = work.resources.batch
    # Named variables only: the suite's own, and the runner's pass_env (its GPU variables are the
    # node's business: Slurm sets them for the cards it gives a job).
    passed = passed_variables(run.runner.pass_env) if run.runner else {}
    return BatchPytest(
        batch,
        python,
        rootdir,
        job_name(run.key, work.spec.stage.name),
        dt.timedelta(minutes=suite.timeout_minutes),
        {**passed, **docker.suite_env(work)},
        target_queue(run.target.params),
        work.context.log.info,
    )


def _rerunner(work: StageWork, runner: BatchPytest) -> Rerunner:
    """Failing tests re-run by node id as one batch job per round, with the suite's variables;
    each round's task file in confirm-<round>/ and its JUnit beside the suite's."""
    workdir, name = work.run.workdir, work.spec.stage.name

    def run_round(node_ids: list[str], number: int, runs: int, timeout_s: float) -> TestReport:
        assert runs == 1  # pytest re-runs round by round
        junit = workdir / f"confirm-{number}.xml"
        walltime = dt.timedelta(seconds=timeout_s)
        runner.run_one_job(workdir / f"confirm-{number}", rerun_selection(work, node_ids), junit, walltime)
        return parse_junit(junit, name, work.run.runner_name)

    why_not = f"no test file of its classname under {runner.rootdir} (a collection error)"
    return Rerunner(functools.partial(pytest_node_id, root=runner.rootdir), run_round, why_not=why_not)


BACKEND = BatchBackend()
