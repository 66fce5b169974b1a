"""Test runners: pytest by markers in a prepared environment, writing JUnit, or collect-only."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg

from nightly_assets.process import CommandError, CommandResult, run_command

# pytest's exit codes: 0 all passed, 1 some failed, 5 nothing collected; anything else is
# an interrupted, internal or usage error, so the report cannot be trusted.
PYTEST_USABLE_EXIT_CODES = (0, 1, 5)


class TestRunError(RuntimeError):
    """The test runner itself broke (not: some tests failed)."""

    __test__ = False


class LocalTestRunnerResource(dg.ConfigurableResource):
    """Runs pytest with the environment's interpreter on this machine."""

    def run_pytest(
        self,
        python: Path,
        rootdir: Path,
        paths: list[str],
        markers: str,
        junit: Path,
        timeout_s: float,
        log: Path,
    ) -> CommandResult:
        """Run the suite, writing JUnit to `junit`."""
        extra = [f"--junitxml={junit}", "-o", "junit_family=xunit2"]
        return self._pytest(python, rootdir, [*paths, "-m", markers, *extra], timeout_s, log)

    def collect_pytest(
        self,
        python: Path,
        rootdir: Path,
        paths: list[str],
        markers: str,
        timeout_s: float,
        log: Path,
    ) -> CommandResult:
        """Only collect the suite (a dry run: seed 001's arm64 targets, suites without their GPUs)."""
        return self._pytest(python, rootdir, [*paths, "-m", markers, "--collect-only"], timeout_s, log)

    def _pytest(
        self, python: Path, rootdir: Path, args: list[str | Path], timeout_s: float, log: Path
    ) -> CommandResult:
        result = run_command(
            [python, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "--rootdir", rootdir],
            cwd=rootdir,
            timeout_s=timeout_s,
            log_path=log,
            check=False,
            scratch_home=True,
        )
        _usable(result)
        return result

    def visible_gpus(self) -> int:
        """GPUs nvidia-smi lists on this machine (0 where there is no driver)."""
        if shutil.which("nvidia-smi") is None:
            return 0
        try:
            out = run_command(["nvidia-smi", "-L"], timeout_s=30).output
        except CommandError:
            return 0
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _usable(result: CommandResult) -> None:
    if result.returncode not in PYTEST_USABLE_EXIT_CODES:
        raise TestRunError(
            f"pytest exited with {result.returncode} (interrupted, internal or usage error); "
            f"last output:\n{result.tail()}"
        )
