"""Test runners: pytest by markers in a prepared environment, writing JUnit, or collect-only."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import dagster as dg

from nightly_assets.devices.leases import GpuLeases, Lease
from nightly_assets.devices.probe import HostGpus, probe_gpus
from nightly_assets.process import CommandResult, cause, run_command
from nightly_assets.settings import nightly_home

# pytest's exit codes: 0 all passed, 1 some failed, 5 nothing collected; anything else is
# an interrupted, internal or usage error, so the report cannot be trusted.
PYTEST_USABLE_EXIT_CODES = (0, 1, 5)
PYTEST_INTERRUPTED = 2


class TestRunError(RuntimeError):
    """The test runner itself broke (not: some tests failed)."""

    __test__ = False


class LocalTestRunnerResource(dg.ConfigurableResource):
    """Runs pytest with the environment's interpreter on this machine, on the GPUs it is handed."""

    lease_dir: str = ""  # where GPU leases are held (lock files); default $NIGHTLY_HOME/gpu-leases

    def run_pytest(
        self,
        python: Path,
        rootdir: Path,
        args: list[str],
        junit: Path,
        timeout_s: float,
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        passed: Sequence[str] = (),
        lease: Lease | None = None,
        started: Callable[[int], None] | None = None,
    ) -> CommandResult:
        """Run the suite (`args`: paths, markers, the suite's own arguments), writing JUnit to `junit`;
        `env` and the orchestrator's variables `passed` (a runner's GPU set) reach it. The GPUs'
        `lease` is held by pytest too, as long as it runs; `started` is told pytest's process group."""
        extra = [f"--junitxml={junit}", "-o", "junit_family=xunit2"]
        result = self._pytest(python, rootdir, [*args, *extra], timeout_s, log, env, passed, lease, started)
        usable(result.returncode, result.tail(), junit)
        return result

    def collect_pytest(
        self,
        python: Path,
        rootdir: Path,
        args: list[str],
        timeout_s: float,
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        passed: Sequence[str] = (),
    ) -> CommandResult:
        """Only collect the suite (a dry run: seed 001's arm64 targets, suites without their GPUs)."""
        result = self._pytest(python, rootdir, [*args, "--collect-only"], timeout_s, log, env, passed)
        usable(result.returncode, result.tail(), None, collect_only=True)
        return result

    def _pytest(
        self,
        python: Path,
        rootdir: Path,
        args: list[str | Path],
        timeout_s: float,
        log: Path,
        env: Mapping[str, str] | None = None,
        passed: Sequence[str] = (),
        lease: Lease | None = None,
        started: Callable[[int], None] | None = None,
    ) -> CommandResult:
        def on_start(pid: int) -> None:
            if lease is not None:
                lease.tests_started(pid)
            if started is not None:
                started(pid)

        return run_command(
            [python, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "--rootdir", rootdir],
            cwd=rootdir,
            env=env,
            timeout_s=timeout_s,
            log_path=log,
            check=False,
            scratch_home=True,
            passed=passed,
            pass_fds=lease.fds if lease is not None else (),
            on_start=on_start,
        )

    def host_gpus(self) -> HostGpus:
        """The GPUs this machine shows (nvidia-smi, amd-smi or rocm-smi), within the orchestrator's
        own CUDA/HIP/ROCR_VISIBLE_DEVICES; none where there is no driver."""
        return probe_gpus()

    def leases(self) -> GpuLeases:
        """Who holds which of this machine's GPUs: one lock file per device, across runs and steps."""
        return GpuLeases(Path(self.lease_dir) if self.lease_dir else nightly_home() / "gpu-leases")


def usable(returncode: int, tail: str, junit: Path | None, *, collect_only: bool = False) -> None:
    """Raise TestRunError unless pytest's exit code leaves a report to trust. Collection errors
    (exit 2, "Interrupted: N errors during collection") do: the report shows them as errors."""
    if returncode in PYTEST_USABLE_EXIT_CODES:
        return
    collection_errors = returncode == PYTEST_INTERRUPTED and "during collection" in tail
    if collection_errors and (collect_only or (junit is not None and junit.is_file())):
        return
    raise TestRunError(f"pytest exited with {returncode} ({cause(tail)}); last output:\n{tail}")


def without_installed_packages(checkout: Path, packages: list[str], dest: Path) -> Path:
    """The folder pytest runs in: the checkout, or where the checkout holds packages the night's
    wheels install (a flat layout), a tree of links to everything else in it, so the tests import
    the installed wheel rather than the sources beside them (pytest puts its rootdir on sys.path)."""
    shadowing = {p for p in packages if (checkout / p).is_dir() or (checkout / f"{p}.py").is_file()}
    if not shadowing:
        return checkout
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for entry in checkout.iterdir():
        if entry.name == ".git" or entry.name in shadowing or entry.name.removesuffix(".py") in shadowing:
            continue
        (dest / entry.name).symlink_to(entry)
    return dest
