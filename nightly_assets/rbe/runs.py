"""What one Bazel command of the RBE resource gives back: a test run's report, a build's outputs,
and how either ran (remote, local, or local after the remote failed). Holds no secret."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nightly_assets.rbe import bazel as bz
from nightly_assets.results import TestReport
from nightly_assets.testing.report_metadata import report_metadata

Mode = Literal["remote", "local", "local-fallback"]


class BazelError(RuntimeError):
    """Bazel could not do what it was asked; the message says why and has the log's tail."""


class BazelTestError(BazelError):
    """Bazel could not run the tests (not: some tests failed)."""

    __test__ = False


class BazelBuildError(BazelError):
    """The build failed, or gave no output the stage asked for."""


class RemoteUnavailableError(BazelTestError, BazelBuildError):
    """The remote endpoint does not answer and falling back to a local build is switched off."""


@dataclass(frozen=True)
class BazelRun:
    """How one `bazel build` or `bazel test` ran."""

    exit_code: int
    mode: Mode
    fallback_reason: str | None
    process_counts: Mapping[str, int]
    wall_time_s: float
    log_path: Path
    command: tuple[str, ...]  # redacted; credentials never reach it (they go in a private rc file)

    @property
    def remote_cache_hits(self) -> int:
        return self.process_counts.get(bz.REMOTE_CACHE_HIT, 0)

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)

    def run_metadata(self) -> dict[str, object]:
        return {
            "bazel_mode": self.mode,
            "bazel_exit_code": self.exit_code,
            "fallback_reason": self.fallback_reason or "",
            "remote_cache_hits": self.remote_cache_hits,
            "processes": self.process_counts.get("total", 0),
            "wall_time_s": round(self.wall_time_s, 3),
            "log_path": str(self.log_path),
            "command": self.command_line,
        }


@dataclass(frozen=True)
class BazelTestRun(BazelRun):
    """One `bazel test` of a suite: its report, the tested targets' verdicts and their logs."""

    __test__ = False

    report: TestReport
    testlogs_dir: Path
    targets: Mapping[str, bz.TargetSummary] = field(default_factory=dict)

    def metadata(self) -> dict[str, object]:
        """Plain values for Dagster asset metadata: the report's counts plus how Bazel ran."""
        return {**report_metadata(self.report), **self.run_metadata()}


@dataclass(frozen=True)
class BazelBuildRun(BazelRun):
    """One `bazel build`: the outputs that matched, copied out of Bazel's tree, by target."""

    outputs: tuple[Path, ...]
    by_target: Mapping[str, tuple[str, ...]]  # label -> the names of its outputs that matched
    bazel_binary: str  # the client that built them (a bootstrapped one, or the configured one)

    def metadata(self) -> dict[str, object]:
        return {**self.run_metadata(), "outputs": len(self.outputs), "bazel_binary": self.bazel_binary}
