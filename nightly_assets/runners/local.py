"""The local runner kind: this machine. pytest in the night's virtualenv, wheels with pip (or
Bazel without remote execution), commands as processes; where the night's environment is an
image, the suite or command runs in it on this machine's Docker engine instead."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.wheel_params import WheelsParams
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.devices.leases import Lease
from nightly_assets.devices.probe import HostGpus, visible_devices_env
from nightly_assets.process import CommandError, run_command
from nightly_assets.results import TestReport
from nightly_assets.runners import docker
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
from nightly_assets.shards.execute import ShardJob, ShardLost
from nightly_assets.shards.suite import ShardedRun, run_sharded
from nightly_assets.stages import StageSpec
from nightly_assets.testing.confirm import Rerunner, pytest_node_id
from nightly_assets.testing.junit import parse_junit
from nightly_assets.testing.pytest_output import parse_collect_only
from nightly_assets.testing.resources import (
    PYTEST_INTERRUPTED,
    LocalTestRunnerResource,
    TestRunError,
    without_installed_packages,
)


class LocalBackend(RunnerBackend):
    kind = "local"
    supports = frozenset({"suite", "wheels", "command"})

    def resource_keys(self, spec: StageSpec, capability: Capability) -> set[str]:
        if capability == "wheels":
            return {"bazel_rbe"} if spec.params(WheelsParams).builder == "bazel" else {"builder"}
        image = spec.environment is not None and spec.environment.kind == "docker_image"
        used = {"test_runner"}  # it hands out this host's GPUs, to suites and commands alike
        return used | (docker.IMAGE_RESOURCES if image else set())

    def run_suite(self, work: StageWork) -> SuiteOutcome:
        if work.in_image:
            return docker.BACKEND.run_suite(work)
        report, rootdir, sharded = _pytest_here(work)
        return SuiteOutcome(report, rerunner=_rerunner_here(work, rootdir), shards=sharded)

    def build_wheels(self, work: StageWork, params: WheelsParams) -> BuiltWheels:
        if params.builder == "bazel":
            return bazel_wheels(work, params, remote=False)
        builder: PythonBuildResource = work.resources.builder
        pinned = work.spec.pinned_repo(work.artefacts, work.run.key)
        workdir = work.run.workdir
        return BuiltWheels(
            builder.build_wheels(Path(pinned.path), workdir / "dist", workdir / "build.log", pinned.build_env)
        )

    def gpu_count(self, work: StageWork) -> int:
        if work.in_image:
            return docker.BACKEND.gpu_count(work)
        return _gpus(work, work.resources.test_runner.host_gpus())

    def run_command(self, work: StageWork, argv: list[str], output: str, timeout_s: float) -> Path:
        if work.in_image:
            return docker.command_in_image(work, argv, output, timeout_s)
        workdir = work.run.workdir
        python = work.env.python
        path = workdir / output
        # Probed only for work that needs GPUs: a plain command starts without asking the driver.
        host = work.resources.test_runner.host_gpus() if work.gpus else NO_GPUS
        with handed_devices(work, host, work.gpus, timeout_s) as handed:
            run_command(
                [python if a == "python" else str(a).replace("{output}", str(path)) for a in argv],
                cwd=workdir,
                env=handed.env,
                pass_fds=handed.lease.fds,
                on_start=handed.lease.tests_started,
                timeout_s=timeout_s,
                log_path=_unused(workdir / "command.log"),
                scratch_home=True,
                passed=work.run.runner.passed_variables() if work.run.runner else (),
            )
        return path


def _unused(path: Path) -> Path:
    """`path`, or `name-2.log`, `name-3.log`...: a command run again in the same stage (a benchmark
    re-measured) keeps the first run's log beside its own."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def _pytest_here(work: StageWork) -> tuple[TestReport, Path, ShardedRun | None]:
    """The suite with the environment's Python on this host, on GPUs handed to it alone;
    collect-only where the target's arch is dry-run or this machine has fewer GPUs than it needs;
    a sharded suite as that many pytest processes at once, a GPU suite's each on cards of its own.
    With the report, the folder it ran in (pytest's rootdir) and the shards where it was sharded."""
    suite, run, name = work.spec.stage.suite, work.run, work.spec.stage.name
    assert suite is not None
    test_runner: LocalTestRunnerResource = work.resources.test_runner
    host = test_runner.host_gpus()
    gpus = _gpus(work, host)
    args, collect_only = suite_selection(work, gpus)
    python, rootdir = venv_and_rootdir(work)
    log = run.workdir / "pytest.log"
    timeout_s = suite.timeout_minutes * 60
    passed = run.runner.passed_variables() if run.runner else ()
    if collect_only:
        work.context.log.info(
            f"{name}: collect-only ({run.target.arch}, {gpus} GPU(s), suite needs {suite.min_gpus})"
        )
        result = test_runner.collect_pytest(
            python, rootdir, args, timeout_s, log, env=docker.suite_env(work), passed=passed
        )
        report = parse_collect_only(result.output, name, run.runner_name)
    elif suite.sharded and (sharded := _shards_here(work, host, python, rootdir, args)) is not None:
        work.context.log.info(f"{name}: {sharded.report.counts()}")
        return sharded.report, rootdir, sharded
    else:
        junit = run.workdir / "junit.xml"
        with handed_devices(work, host, suite.min_gpus, timeout_s) as handed:
            work.context.log.info(f"{name}: pytest {' '.join(args)} on {run.runner_name}")
            test_runner.run_pytest(
                python,
                rootdir,
                args,
                junit,
                timeout_s,
                log,
                env={**docker.suite_env(work), **handed.env},
                passed=passed,
                lease=handed.lease,
            )
        report = parse_junit(junit, name, run.runner_name)
    work.context.log.info(f"{name}: {report.counts()}")
    return report, rootdir, None


def venv_and_rootdir(work: StageWork) -> tuple[Path, Path]:
    """The environment's Python and the folder its pytest runs in: the night's checkout, or a tree
    of links to it without the packages the night's wheels install (so tests import the wheel)."""
    run, name = work.run, work.spec.stage.name
    checkout = work.spec.checkout(work.artefacts, run.key)
    rootdir = without_installed_packages(checkout, work.env.packages, run.workdir / "tree")
    if rootdir != checkout:
        work.context.log.info(
            f"{name}: the checkout's {work.env.packages} left out so tests import the wheel"
        )
    return Path(work.env.python), rootdir


def collected_here(work: StageWork, python: Path, rootdir: Path, args: list[str]) -> list[str] | None:
    """The suite's pytest node ids, collected on this host with the environment's Python; None
    where collection failed, so that the suite runs unsharded and reports its collection errors
    as such a run does."""
    suite, run, name = work.spec.stage.suite, work.run, work.spec.stage.name
    assert suite is not None
    test_runner: LocalTestRunnerResource = work.resources.test_runner
    collection = test_runner.collect_pytest(
        python,
        rootdir,
        args,
        suite.timeout_minutes * 60,
        run.workdir / "collect.log",
        env=docker.suite_env(work),
        passed=run.runner.passed_variables() if run.runner else (),
    )
    if collection.returncode == PYTEST_INTERRUPTED:
        work.context.log.warning(f"{name}: collection errors: run unsharded, so the report shows them")
        return None
    return [c.node_id for c in parse_collect_only(collection.output, name, run.runner_name).cases]


def _shards_here(
    work: StageWork, host: HostGpus, python: Path, rootdir: Path, args: list[str]
) -> ShardedRun | None:
    """The suite's collected tests planned into shards and run as pytest processes on this host, all
    at once (a GPU suite: as many as the cards allow, each on its own); None where collection
    failed (collected_here)."""
    suite, run, name = work.spec.stage.suite, work.run, work.spec.stage.name
    assert suite is not None
    test_runner: LocalTestRunnerResource = work.resources.test_runner
    timeout_s = suite.timeout_minutes * 60
    passed = run.runner.passed_variables() if run.runner else ()
    collected = collected_here(work, python, rootdir, args)
    if collected is None:
        return None

    def run_one(job: ShardJob) -> Path:
        junit = run.workdir / f"junit-{job.name}.xml"
        asked = time.monotonic()
        with handed_devices(work, host, suite.min_gpus, timeout_s) as handed:
            if handed.lease.ids:
                job.notes["devices"] = list(handed.lease.ids)
                # A shard waiting for a card held by another shard or stage is not a slow shard.
                job.notes["waited_s"] = round(time.monotonic() - asked, 3)
            try:
                test_runner.run_pytest(
                    python,
                    rootdir,
                    rerun_selection(work, list(job.shard.units)),
                    junit,
                    timeout_s,
                    run.workdir / f"pytest-{job.name}.log",
                    env={**docker.suite_env(work), **handed.env},
                    passed=passed,
                    lease=handed.lease,
                    started=job.started,
                )
            except (TestRunError, CommandError) as exc:
                raise ShardLost(str(exc).splitlines()[0]) from None
        if not junit.is_file():
            raise ShardLost("pytest ended without writing its JUnit report")
        return junit

    return run_sharded(
        suite,
        name,
        run.runner_name,
        collected,
        shard_history(work),
        run_one,
        gpus=host.count,
        workdir=run.workdir,
        log=work.context.log.info,
    )


def _rerunner_here(work: StageWork, rootdir: Path) -> Rerunner:
    """Failing tests re-run by node id with the same Python, folder, variables and GPU count as
    the suite; each round's JUnit and log beside the suite's (confirm-<round>.xml / .log)."""
    suite, run, name = work.spec.stage.suite, work.run, work.spec.stage.name
    assert suite is not None
    test_runner: LocalTestRunnerResource = work.resources.test_runner

    def run_round(node_ids: list[str], number: int, runs: int, timeout_s: float) -> TestReport:
        assert runs == 1  # pytest re-runs round by round
        junit = run.workdir / f"confirm-{number}.xml"
        host = test_runner.host_gpus()
        with handed_devices(work, host, suite.min_gpus, timeout_s) as handed:
            test_runner.run_pytest(
                Path(work.env.python),
                rootdir,
                rerun_selection(work, node_ids),
                junit,
                timeout_s,
                run.workdir / f"confirm-{number}.log",
                env={**docker.suite_env(work), **handed.env},
                passed=run.runner.passed_variables() if run.runner else (),
                lease=handed.lease,
            )
        return parse_junit(junit, name, run.runner_name)

    why_not = f"no test file of its classname under {rootdir} (a collection error)"
    return Rerunner(functools.partial(pytest_node_id, root=rootdir), run_round, why_not=why_not)


def _gpus(work: StageWork, host: HostGpus) -> int:
    """The GPUs the stage's runner has: what this host shows for `gpus: auto`, else as declared."""
    if host.problem:
        work.context.log.warning(f"{work.spec.key.to_user_string()}: GPUs not counted: {host.problem}")
        work.run.manifest["gpu_problem"] = host.problem  # the stage's detail says why it only collected
    declared = work.run.runner.gpus if work.run.runner else 0
    return host.count if declared == "auto" else declared


@dataclass(frozen=True)
class Handed:
    """The devices a stage's command runs on: its visibility variables and the lease it inherits."""

    env: dict[str, str]
    lease: Lease


@contextlib.contextmanager
def handed_devices(work: StageWork, host: HostGpus, count: int, timeout_s: float) -> Iterator[Handed]:
    """Hold `count` of this host's GPUs for the block, for this stage alone: the child's
    *_VISIBLE_DEVICES name them, the child holds the lease as long as it runs, and the stage's
    manifest records what it ran on."""
    frameworks = work.environment.frameworks if work.environment is not None else {}
    if count == 0 or host.count < count:
        if count:  # a runner that declares more GPUs than the host shows: nothing to hand out
            work.context.log.warning(
                f"{work.spec.key.to_user_string()}: needs {count} GPU(s), this host shows {host.count}: "
                "none handed out, the visibility variables are left as they are"
            )
        work.run.manifest["devices"] = DeviceFacts(frameworks=frameworks).model_dump()
        yield Handed({}, Lease([]))
        return
    key = work.run.key
    owner = f"{work.spec.key.to_user_string()} {key.night} {key.target} run {work.context.run.run_id[:8]}"
    leases = work.resources.test_runner.leases()
    with leases.hold(host, count, owner=owner, timeout_s=timeout_s, log=work.context.log.info) as lease:
        ids = lease.ids
        facts = host.facts(ids, frameworks)
        work.run.manifest["devices"] = facts.model_dump()
        work.context.log.info(
            f"{work.spec.key.to_user_string()}: handed {', '.join(ids)} ({facts.describe()})"
        )
        yield Handed(visible_devices_env(host.vendor, ids), lease)


NO_GPUS = HostGpus(vendor="none", gpus=(), driver="", runtime="")
BACKEND = LocalBackend()
