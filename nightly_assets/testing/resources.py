"""Test runners: pytest by markers in a prepared environment, writing JUnit, or collect-only."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg

from nightly_assets.process import CommandError, CommandResult, cause, run_command

# pytest's exit codes: 0 all passed, 1 some failed, 5 nothing collected; anything else is
# an interrupted, internal or usage error, so the report cannot be trusted.
PYTEST_USABLE_EXIT_CODES = (0, 1, 5)
PYTEST_INTERRUPTED = 2


class TestRunError(RuntimeError):
    """The test runner itself broke (not: some tests failed)."""

    __test__ = False


class LocalTestRunnerResource(dg.ConfigurableResource):
    """Runs pytest with the environment's interpreter on this machine."""

    def run_pytest(
        self, python: Path, rootdir: Path, args: list[str], junit: Path, timeout_s: float, log: Path
    ) -> CommandResult:
        """Run the suite (`args`: paths, markers, the suite's own arguments), writing JUnit to `junit`."""
        extra = [f"--junitxml={junit}", "-o", "junit_family=xunit2"]
        result = self._pytest(python, rootdir, [*args, *extra], timeout_s, log)
        usable(result.returncode, result.tail(), junit)
        return result

    def collect_pytest(
        self, python: Path, rootdir: Path, args: list[str], timeout_s: float, log: Path
    ) -> CommandResult:
        """Only collect the suite (a dry run: seed 001's arm64 targets, suites without their GPUs)."""
        result = self._pytest(python, rootdir, [*args, "--collect-only"], timeout_s, log)
        usable(result.returncode, result.tail(), None, collect_only=True)
        return result

    def _pytest(
        self, python: Path, rootdir: Path, args: list[str | Path], timeout_s: float, log: Path
    ) -> CommandResult:
        return run_command(
            [python, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "--rootdir", rootdir],
            cwd=rootdir,
            timeout_s=timeout_s,
            log_path=log,
            check=False,
            scratch_home=True,
        )

    def visible_gpus(self) -> int:
        """GPUs nvidia-smi lists on this machine (0 where there is no driver)."""
        if shutil.which("nvidia-smi") is None:
            return 0
        try:
            out = run_command(["nvidia-smi", "-L"], timeout_s=30).output
        except CommandError:
            return 0
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))


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
