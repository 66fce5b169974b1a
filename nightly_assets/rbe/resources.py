"""`bazel test` and `bazel build` against remote execution / a remote cache, falling back to a local
build when the remote endpoint does not answer (seed 000: the JAX ROCm RBE pipeline's redundancy),
and Bazel bootstrapped from a pinned source tree (seed 004). Where the remote endpoints are and how
they are reached is ``remote.py``; the bootstrap itself is ``bootstrap.py``."""

from __future__ import annotations

import fnmatch
import hashlib
import re
import shlex
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import dagster as dg
from pydantic import Field

from nightly_assets.catalog.models import BazelBootstrap, BazelTests
from nightly_assets.process import CommandError, run_command
from nightly_assets.rbe import bazel as bz
from nightly_assets.rbe.bootstrap import bootstrap_bazel
from nightly_assets.rbe.remote import RemoteSettings
from nightly_assets.rbe.runs import (
    BazelBuildError,
    BazelBuildRun,
    BazelError,
    BazelTestError,
    BazelTestRun,
    Mode,
)
from nightly_assets.results import TestReport
from nightly_assets.settings import FromEnv, ShellWords
from nightly_assets.testing.junit import parse_bazel_testlogs

WORKSPACE_FILES = ("WORKSPACE", "WORKSPACE.bazel", "MODULE.bazel")
DEFAULT_MAX_IDLE_SECS = 900  # Bazel's own default keeps an idle server (and its memory) for 3 hours


class TestTimeouts(dg.Config):
    """Bazel's per-size test timeouts in seconds: --test_timeout=short,moderate,long,eternal."""

    __test__ = False

    short: int = Field(default=60, gt=0)
    moderate: int = Field(default=300, gt=0)
    long: int = Field(default=900, gt=0)
    eternal: int = Field(default=3600, gt=0)

    def flag(self) -> str:
        return f"--test_timeout={self.short},{self.moderate},{self.long},{self.eternal}"


@dataclass(frozen=True)
class _Attempt:
    """One Bazel process: what it printed (redacted) and its argv (redacted)."""

    verb: str  # build or test
    returncode: int
    output: str
    log_path: Path
    command: tuple[str, ...]
    started: float = 0.0  # monotonic start of the whole run, a fallback's first attempt included
    ended: float = 0.0  # when Bazel exited (reading and copying its outputs is not Bazel's time)

    def failure(self, workspace: Path) -> str:
        meaning = bz.EXIT_MEANINGS.get(self.returncode, "error")
        tail = "\n".join(self.output.splitlines()[-30:])
        return (
            f"bazel {self.verb} in {workspace} exited {self.returncode} ({meaning}): "
            f"{bz.error_lines(self.output)}\nlog {self.log_path}; last output:\n{tail}"
        )

    def run_fields(self, mode: Mode, fallback_reason: str | None) -> dict[str, Any]:
        """The fields every BazelRun shares."""
        return {
            "exit_code": self.returncode,
            "mode": mode,
            "fallback_reason": fallback_reason,
            "process_counts": bz.process_counts(self.output),
            "wall_time_s": self.ended - self.started,
            "log_path": self.log_path,
            "command": self.command,
        }


class BazelRbeResource(dg.ConfigurableResource):
    """Runs a catalog suite's `bazel:` block (targets, tag filters, flaky attempts) in a workspace."""

    bazel: str = Field(default="bazel", description="the Bazel client binary")
    output_user_root: str | None = Field(default=None, description="--output_user_root (a cache folder)")
    host_jvm_args: list[str] = Field(default_factory=list, description="e.g. ['-Xmx1g'] on small machines")
    host_jvm_options: ShellWords = Field(
        default="", description="more --host_jvm_args, space-separated (a setting: NIGHTLY_BAZEL_JVM_ARGS)"
    )
    max_idle_secs: Annotated[int | None, FromEnv] = Field(
        default=None, ge=0, description="Bazel server idle shutdown"
    )
    remote: RemoteSettings = Field(default_factory=RemoteSettings)
    test_timeouts: TestTimeouts | None = None
    test_env: dict[str, str] = Field(default_factory=dict, description="non-secret --test_env K=V")
    extra_args: list[str] = Field(default_factory=list, description="more options, e.g. --config=rocm")

    def run_tests(
        self,
        workspace: Path,
        tests: BazelTests,
        *,
        suite: str,
        out_dir: Path,
        timeout_s: float = 4 * 3600,
        runner: str = "bazel",
        output_key: str | None = None,
        runs_per_test: int = 1,
    ) -> BazelTestRun:
        """`bazel test` the suite in `workspace`; logs, build events and testlogs go under `out_dir`.
        Exit codes 0, 3 (some tests failed) and 4 (no tests) give a result; others raise BazelTestError.
        Runs given the same `output_key` share one output base (see `_startup`). `runs_per_test` > 1
        runs each test that often, none served from the cache (a confirmation re-run)."""
        workspace = _checked_workspace(workspace, BazelTestError)
        targets = bz.checked_patterns("targets", tests.targets)
        filters = bz.checked_patterns("tag_filters", [tests.tag_filters]) if tests.tag_filters else []
        bz.checked_options("extra_args", self.extra_args)
        bep_file = out_dir / "build_events.json"
        options = self._test_options(filters, tests.flaky_test_attempts, bep_file)
        if runs_per_test > 1:
            options += [f"--runs_per_test={runs_per_test}", "--cache_test_results=no"]
        attempt, mode, fallback_reason = self._run(
            "test",
            workspace,
            options,
            targets,
            out_dir,
            timeout_s=timeout_s,
            error=BazelTestError,
            output_key=output_key,
        )
        if attempt.returncode not in bz.REPORT_EXIT_CODES:
            raise BazelTestError(attempt.failure(workspace))
        summaries = bz.read_test_summaries(bep_file)
        testlogs = bz.collect_testlogs(
            workspace / "bazel-testlogs", summaries, out_dir / "testlogs", runs_per_test
        )
        report = (
            parse_bazel_testlogs(testlogs, suite, runner)
            if any(testlogs.rglob("test.xml"))
            else TestReport(suite=suite, cases=(), runner=runner)
        )
        return BazelTestRun(
            **attempt.run_fields(mode, fallback_reason),
            report=report,
            testlogs_dir=testlogs,
            targets=summaries,
        )

    def build(
        self,
        workspace: Path,
        targets: Sequence[str],
        *,
        out_dir: Path,
        dest: Path,
        outputs: str = "*.whl",
        options: Sequence[str] = (),
        use_remote: bool = True,
        bazel: str | None = None,
        timeout_s: float = 4 * 3600,
        output_key: str | None = None,
    ) -> BazelBuildRun:
        """`bazel build` the targets in `workspace` and copy their outputs whose names match the glob
        `outputs` into `dest`; logs and build events go under `out_dir`. `use_remote=False` builds
        locally whatever the remote settings; `bazel` replaces the client (a bootstrapped one)."""
        workspace = _checked_workspace(workspace, BazelBuildError)
        targets = bz.checked_patterns("targets", targets)
        options = [*bz.checked_options("args", options), *bz.checked_options("extra_args", self.extra_args)]
        bep_file = out_dir / "build_events.json"
        attempt, mode, fallback_reason = self._run(
            "build",
            workspace,
            ["--color=no", "--curses=no", f"--build_event_json_file={bep_file}", *options],
            targets,
            out_dir,
            timeout_s=timeout_s,
            error=BazelBuildError,
            use_remote=use_remote,
            bazel=bazel,
            output_key=output_key,
        )
        if attempt.returncode != bz.EXIT_PASSED:
            raise BazelBuildError(attempt.failure(workspace))
        try:
            built = bz.read_build_outputs(bep_file, workspace)
        except ValueError as exc:
            raise BazelBuildError(f"bazel build in {workspace}: {exc}") from None
        matched = {
            label: [f for f in files if fnmatch.fnmatch(f.name, outputs)] for label, files in built.items()
        }
        if not any(matched.values()):
            seen = ", ".join(f.name for files in built.values() for f in files) or "none"
            raise BazelBuildError(
                f"bazel build of {', '.join(targets)} in {workspace} gave no output matching {outputs!r} "
                f"(outputs: {seen}); log {attempt.log_path}"
            )
        # dict.fromkeys: a file two targets give (a filegroup of a wheel rule) is copied once.
        copied = _copy_outputs(list(dict.fromkeys(f for files in matched.values() for f in files)), dest)
        return BazelBuildRun(
            **attempt.run_fields(mode, fallback_reason),
            outputs=tuple(copied),
            by_target={label: tuple(f.name for f in files) for label, files in matched.items() if files},
            bazel_binary=bazel or self.bazel,
        )

    def bootstrap(self, source: Path, commit: str, spec: BazelBootstrap, *, log_path: Path) -> Path:
        """Bazel built from the pinned source tree `source` (at `commit`) with the catalog's command,
        kept under the output user root per commit: the next night at the same commit reuses it."""
        return bootstrap_bazel(source, commit, spec, cache_root=self._cache_root(), log_path=log_path)

    def shutdown(self, workspace: Path, *, expunge: bool = False, output_key: str | None = None) -> None:
        """Stop the Bazel server of the workspace (or of `output_key`'s output base); `expunge` also
        deletes that output base."""
        workspace = _checked_workspace(workspace, BazelError)
        command = ["clean", "--expunge"] if expunge else ["shutdown"]
        rc_path = self._rc_path(workspace)
        bz.write_private_bazelrc(rc_path, [])  # the same startup options as the runs, or Bazel restarts
        startup = self._startup(rc_path, output_key)
        try:
            result = run_command([self.bazel, *startup, *command], cwd=workspace, check=False)
        finally:
            rc_path.unlink(missing_ok=True)
        if result.returncode != 0:
            raise BazelError(f"bazel {' '.join(command)} in {workspace} failed:\n{result.tail()}")

    # -- internals --

    def _startup(self, rc_path: Path, output_key: str | None = None) -> list[str]:
        """Startup options. Each night checks out into a new folder, and Bazel keys its output base
        by folder: with an `output_key` (pipeline, target, repository) the nights share one output
        base instead, so a night builds incrementally and old ones leave no output base behind."""
        startup = [f"--bazelrc={rc_path}"]
        if self.output_user_root:
            startup.append(f"--output_user_root={self.output_user_root}")
        if output_key is not None:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", output_key):
                raise bz.BazelConfigError(
                    f"output_key {output_key!r}: expected letters, digits, '.', '_', '-'"
                )
            startup.append(f"--output_base={self._cache_root() / 'bases' / output_key}")
        jvm_args = [*self.host_jvm_args, *shlex.split(self.host_jvm_options)]
        startup += [f"--host_jvm_args={arg}" for arg in jvm_args]
        if self.max_idle_secs is not None:
            startup.append(f"--max_idle_secs={self.max_idle_secs}")
        return startup

    def _test_options(self, filters: list[str], flaky_attempts: int, bep_file: Path) -> list[str]:
        options = ["--color=no", "--curses=no", f"--build_event_json_file={bep_file}"]
        options += [f"--test_tag_filters={f}" for f in filters]
        options.append(f"--flaky_test_attempts={flaky_attempts}")
        if self.test_timeouts is not None:
            options.append(self.test_timeouts.flag())
        options += [f"--test_env={name}={value}" for name, value in self.test_env.items()]
        return options + self.extra_args

    def _run(
        self,
        command: str,
        workspace: Path,
        options: list[str],
        targets: list[str],
        out_dir: Path,
        *,
        timeout_s: float,
        error: type[BazelError],
        use_remote: bool = True,
        bazel: str | None = None,
        output_key: str | None = None,
    ) -> tuple[_Attempt, Mode, str | None]:
        """Run `bazel <command>` remotely when configured and answering, else locally; a remote
        failure during the run (exit 34) reruns it locally, the remote attempt's log kept beside."""
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "build_events.json").unlink(missing_ok=True)  # an earlier run's events must not count
        started = time.monotonic()
        mode, fallback_reason = self.remote.choose_mode() if use_remote else ("local", None)
        call: dict[str, Any] = {
            "command": command,
            "bazel": bazel or self.bazel,
            "error": error,
            "output_key": output_key,
        }
        attempt = self._invoke(
            workspace, options, targets, out_dir, remote=mode == "remote", timeout_s=timeout_s, **call
        )
        if attempt.returncode == bz.EXIT_REMOTE_ERROR and mode == "remote" and self.remote.fallback_to_local:
            attempt.log_path.replace(out_dir / f"bazel-{command}-remote.log")
            mode = "local-fallback"
            fallback_reason = (
                f"bazel exited {bz.EXIT_REMOTE_ERROR} (remote error): {bz.error_lines(attempt.output)}"
            )
            left_s = max(1.0, timeout_s - (time.monotonic() - started))
            attempt = self._invoke(
                workspace, options, targets, out_dir, remote=False, timeout_s=left_s, **call
            )
        return replace(attempt, started=started, ended=time.monotonic()), mode, fallback_reason

    def _invoke(
        self,
        workspace: Path,
        options: list[str],
        targets: list[str],
        out_dir: Path,
        *,
        command: str,
        bazel: str,
        error: type[BazelError],
        remote: bool,
        timeout_s: float,
        output_key: str | None,
    ) -> _Attempt:
        public, private, secrets = self.remote.bazel_options() if remote else ([], [], [])
        redact = bz.Redactor.of(secrets)
        rc_path = self._rc_path(workspace)
        argv = bz.bazel_argv(bazel, self._startup(rc_path, output_key), command, [*options, *public], targets)
        log_path = out_dir / f"bazel-{command}.log"
        bz.write_private_bazelrc(rc_path, private)
        try:
            result = run_command(argv, cwd=workspace, timeout_s=timeout_s, check=False)
        except CommandError as exc:
            message = redact(str(exc))
            log_path.write_text(message + "\n")
            raise error(f"{message}\nlog {log_path}") from None
        finally:
            rc_path.unlink(missing_ok=True)
        output = redact(result.output)
        log_path.write_text(output)
        return _Attempt(command, result.returncode, output, log_path, tuple(redact(arg) for arg in argv))

    def _cache_root(self) -> Path:
        return Path(self.output_user_root) if self.output_user_root else Path.home() / ".cache" / "bazel"

    def _rc_path(self, workspace: Path) -> Path:
        # One path per workspace: --bazelrc is a startup option, and a new path would restart the server.
        digest = hashlib.sha256(str(workspace).encode()).hexdigest()[:16]
        return self._cache_root() / "nightly-rc" / f"{digest}.bazelrc"


def _checked_workspace(workspace: Path, error: type[BazelError]) -> Path:
    workspace = Path(workspace).resolve()
    if not any((workspace / name).is_file() for name in WORKSPACE_FILES):
        raise error(f"workspace {workspace}: no {' or '.join(WORKSPACE_FILES)}, expected a Bazel workspace")
    return workspace


def _copy_outputs(files: list[Path], dest: Path) -> list[Path]:
    """Copies out of Bazel's read-only tree, which the next build replaces; one name, one file."""
    dest.mkdir(parents=True, exist_ok=True)
    copied: dict[str, Path] = {}
    for source in files:
        if source.name in copied:
            raise BazelBuildError(f"two outputs are named {source.name}: {copied[source.name]} and {source}")
        copied[source.name] = source
        target = dest / source.name
        shutil.copyfile(source, target)
    return [dest / name for name in sorted(copied)]
