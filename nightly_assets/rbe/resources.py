"""`bazel test` against remote execution / a remote cache, falling back to a local build when the
remote endpoint does not answer (seed 000: the JAX ROCm RBE pipeline's redundancy)."""

from __future__ import annotations

import hashlib
import os
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import dagster as dg
from pydantic import Field

from nightly_assets.catalog.models import BazelTests
from nightly_assets.process import CommandError, run_command
from nightly_assets.rbe import bazel as bz
from nightly_assets.results import TestReport
from nightly_assets.testing.junit import parse_bazel_testlogs, report_metadata

Mode = Literal["remote", "local", "local-fallback"]
WORKSPACE_FILES = ("WORKSPACE", "WORKSPACE.bazel", "MODULE.bazel")
LOG_NAME = "bazel-test.log"
REMOTE_LOG_NAME = "bazel-test-remote.log"  # the remote attempt's log when a fallback reran it


class BazelTestError(RuntimeError):
    """Bazel could not run the tests (not: some tests failed); the message has the log's tail."""

    __test__ = False


class RemoteUnavailableError(BazelTestError):
    """The remote endpoint does not answer and falling back to a local build is switched off."""


class TestTimeouts(dg.Config):
    """Bazel's per-size test timeouts in seconds: --test_timeout=short,moderate,long,eternal."""

    __test__ = False

    short: int = Field(default=60, gt=0)
    moderate: int = Field(default=300, gt=0)
    long: int = Field(default=900, gt=0)
    eternal: int = Field(default=3600, gt=0)

    def flag(self) -> str:
        return f"--test_timeout={self.short},{self.moderate},{self.long},{self.eternal}"


class RemoteSettings(dg.Config):
    """Where builds and tests run remotely. Secrets are named, never held: config carries the
    environment variables' names and their values are read when Bazel starts."""

    executor: str | None = Field(default=None, description="--remote_executor, e.g. grpcs://rbe.example:443")
    cache: str | None = Field(default=None, description="--remote_cache, e.g. grpc://127.0.0.1:50051")
    instance_name: str = Field(default="", description="--remote_instance_name")
    headers: dict[str, str] = Field(default_factory=dict, description="non-secret --remote_header K=V")
    header_envs: dict[str, str] = Field(
        default_factory=dict, description="header name -> environment variable holding its (secret) value"
    )
    google_credentials_env: str | None = Field(
        default=None, description="environment variable holding the --google_credentials JSON file path"
    )
    tls_certificate: str | None = Field(default=None, description="--tls_certificate: CA of a grpcs endpoint")
    timeout_s: int = Field(default=60, gt=0, description="--remote_timeout")
    probe_timeout_s: float = Field(default=3.0, gt=0, description="how long the endpoint probe waits")
    fallback_to_local: bool = Field(default=True, description="build locally when the endpoint is down")

    def endpoints(self) -> list[bz.Endpoint]:
        named = (("remote executor", self.executor), ("remote cache", self.cache))
        return [bz.parse_endpoint(setting, url) for setting, url in named if url]


@dataclass(frozen=True)
class BazelTestRun:
    """One `bazel test` of a suite: its report and how it ran. Holds no secret."""

    __test__ = False

    report: TestReport
    exit_code: int
    mode: Mode
    fallback_reason: str | None
    process_counts: Mapping[str, int]
    wall_time_s: float
    log_path: Path
    command: tuple[str, ...]  # redacted; credentials never reach it (they go in a private rc file)
    testlogs_dir: Path
    targets: Mapping[str, bz.TargetSummary] = field(default_factory=dict)

    @property
    def remote_cache_hits(self) -> int:
        return self.process_counts.get(bz.REMOTE_CACHE_HIT, 0)

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)

    def metadata(self) -> dict[str, object]:
        """Plain values for Dagster asset metadata: the report's counts plus how Bazel ran."""
        return {
            **report_metadata(self.report),
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
class _Attempt:
    returncode: int
    output: str
    log_path: Path
    command: tuple[str, ...]


class BazelRbeResource(dg.ConfigurableResource):
    """Runs a catalog suite's `bazel:` block (targets, tag filters, flaky attempts) in a workspace."""

    bazel: str = Field(default="bazel", description="the Bazel client binary")
    output_user_root: str | None = Field(default=None, description="--output_user_root (a cache folder)")
    host_jvm_args: list[str] = Field(default_factory=list, description="e.g. ['-Xmx1g'] on small machines")
    max_idle_secs: int | None = Field(default=None, ge=0, description="Bazel server idle shutdown")
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
    ) -> BazelTestRun:
        """`bazel test` the suite in `workspace`; logs, build events and testlogs go under `out_dir`.
        Exit codes 0, 3 (some tests failed) and 4 (no tests) give a result; others raise BazelTestError."""
        workspace = _checked_workspace(workspace)
        targets = bz.checked_patterns("targets", tests.targets)
        filters = bz.checked_patterns("tag_filters", [tests.tag_filters]) if tests.tag_filters else []
        bz.checked_options("extra_args", self.extra_args)
        out_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        mode, fallback_reason = self._choose_mode()
        bep_file = out_dir / "build_events.json"
        bep_file.unlink(missing_ok=True)  # an earlier run's events must not name this run's targets
        options = self._test_options(filters, tests.flaky_test_attempts, bep_file)
        attempt = self._invoke(
            workspace, options, targets, out_dir, remote=mode == "remote", timeout_s=timeout_s
        )
        if attempt.returncode == bz.EXIT_REMOTE_ERROR and mode == "remote" and self.remote.fallback_to_local:
            attempt.log_path.replace(out_dir / REMOTE_LOG_NAME)
            mode = "local-fallback"
            fallback_reason = (
                f"bazel exited {bz.EXIT_REMOTE_ERROR} (remote error): {bz.error_lines(attempt.output)}"
            )
            left_s = max(1.0, timeout_s - (time.monotonic() - started))
            attempt = self._invoke(workspace, options, targets, out_dir, remote=False, timeout_s=left_s)
        if attempt.returncode not in bz.REPORT_EXIT_CODES:
            meaning = bz.EXIT_MEANINGS.get(attempt.returncode, "error")
            tail = "\n".join(attempt.output.splitlines()[-30:])
            raise BazelTestError(
                f"bazel test in {workspace} exited {attempt.returncode} ({meaning}): "
                f"{bz.error_lines(attempt.output)}\nlog {attempt.log_path}; last output:\n{tail}"
            )
        summaries = bz.read_test_summaries(bep_file)
        testlogs = bz.collect_testlogs(workspace / "bazel-testlogs", summaries, out_dir / "testlogs")
        report = (
            parse_bazel_testlogs(testlogs, suite, runner)
            if any(testlogs.rglob("test.xml"))
            else TestReport(suite=suite, cases=(), runner=runner)
        )
        return BazelTestRun(
            report=report,
            exit_code=attempt.returncode,
            mode=mode,
            fallback_reason=fallback_reason,
            process_counts=bz.process_counts(attempt.output),
            wall_time_s=time.monotonic() - started,
            log_path=attempt.log_path,
            command=attempt.command,
            testlogs_dir=testlogs,
            targets=summaries,
        )

    def shutdown(self, workspace: Path, *, expunge: bool = False) -> None:
        """Stop the workspace's Bazel server; `expunge` also deletes its output base."""
        workspace = _checked_workspace(workspace)
        command = ["clean", "--expunge"] if expunge else ["shutdown"]
        rc_path = self._rc_path(workspace)
        bz.write_private_bazelrc(rc_path, [])  # the same startup options as the runs, or Bazel restarts
        try:
            result = run_command([self.bazel, *self._startup(rc_path), *command], cwd=workspace, check=False)
        finally:
            rc_path.unlink(missing_ok=True)
        if result.returncode != 0:
            raise BazelTestError(f"bazel {' '.join(command)} in {workspace} failed:\n{result.tail()}")

    # -- internals --

    def _choose_mode(self) -> tuple[Mode, str | None]:
        endpoints = self.remote.endpoints()
        if not endpoints:
            return "local", None
        root_certs = _read_certificate(self.remote.tls_certificate) if self.remote.tls_certificate else None
        for endpoint in endpoints:
            reason = bz.probe(endpoint, self.remote.instance_name, self.remote.probe_timeout_s, root_certs)
            if reason is None:
                continue
            if not self.remote.fallback_to_local:
                raise RemoteUnavailableError(f"{reason}; fallback_to_local is off")
            return "local-fallback", reason
        return "remote", None

    def _startup(self, rc_path: Path) -> list[str]:
        startup = [f"--bazelrc={rc_path}"]
        if self.output_user_root:
            startup.append(f"--output_user_root={self.output_user_root}")
        startup += [f"--host_jvm_args={arg}" for arg in self.host_jvm_args]
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

    def _remote_options(self) -> tuple[list[str], list[str], list[str]]:
        """(options for argv, options for the private rc file, secret values to redact)."""
        remote = self.remote
        public = [f"--remote_executor={remote.executor}"] if remote.executor else []
        public += [f"--remote_cache={remote.cache}"] if remote.cache else []
        public += [f"--remote_instance_name={remote.instance_name}"] if remote.instance_name else []
        public += [bz.header_flag(name, value) for name, value in remote.headers.items()]
        public.append(f"--remote_timeout={remote.timeout_s}")
        public += [f"--tls_certificate={remote.tls_certificate}"] if remote.tls_certificate else []
        private: list[str] = []
        secrets: list[str] = []
        for name, variable in remote.header_envs.items():
            secrets.append(_secret(variable, f"remote header {name!r}"))
            private.append(bz.header_flag(name, secrets[-1]))
        if remote.google_credentials_env:
            secrets.append(_secret(remote.google_credentials_env, "google_credentials"))
            private.append(f"--google_credentials={secrets[-1]}")
        return public, private, secrets

    def _invoke(
        self,
        workspace: Path,
        options: list[str],
        targets: list[str],
        out_dir: Path,
        *,
        remote: bool,
        timeout_s: float,
    ) -> _Attempt:
        public, private, secrets = self._remote_options() if remote else ([], [], [])
        redact = bz.Redactor.of(secrets)
        rc_path = self._rc_path(workspace)
        argv = bz.bazel_test_argv(self.bazel, self._startup(rc_path), [*options, *public], targets)
        log_path = out_dir / LOG_NAME
        bz.write_private_bazelrc(rc_path, private)
        try:
            result = run_command(argv, cwd=workspace, timeout_s=timeout_s, check=False)
        except CommandError as exc:
            message = redact(str(exc))
            log_path.write_text(message + "\n")
            raise BazelTestError(f"{message}\nlog {log_path}") from None
        finally:
            rc_path.unlink(missing_ok=True)
        output = redact(result.output)
        log_path.write_text(output)
        return _Attempt(result.returncode, output, log_path, tuple(redact(arg) for arg in argv))

    def _rc_path(self, workspace: Path) -> Path:
        # One path per workspace: --bazelrc is a startup option, and a new path would restart the server.
        root = Path(self.output_user_root) if self.output_user_root else Path.home() / ".cache" / "bazel"
        digest = hashlib.sha256(str(workspace).encode()).hexdigest()[:16]
        return root / "nightly-rc" / f"{digest}.bazelrc"


def _checked_workspace(workspace: Path) -> Path:
    workspace = Path(workspace).resolve()
    if not any((workspace / name).is_file() for name in WORKSPACE_FILES):
        raise BazelTestError(
            f"workspace {workspace}: no {' or '.join(WORKSPACE_FILES)}, expected a Bazel workspace"
        )
    return workspace


def _read_certificate(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise bz.BazelConfigError(f"tls_certificate={path!r}: cannot read it ({exc.strerror})") from None


def _secret(variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise bz.BazelConfigError(f"{what}: environment variable {variable} is not set or empty")
    return value


def bazel_rbe_from_env(home: Path) -> BazelRbeResource:
    """NIGHTLY_RBE_EXECUTOR / _CACHE / _INSTANCE; the token is read from NIGHTLY_RBE_TOKEN at use."""
    header_envs = {"authorization": "NIGHTLY_RBE_TOKEN"} if os.environ.get("NIGHTLY_RBE_TOKEN") else {}
    return BazelRbeResource(
        output_user_root=os.environ.get("NIGHTLY_BAZEL_OUTPUT_ROOT") or str(home / "bazel"),
        remote=RemoteSettings(
            executor=os.environ.get("NIGHTLY_RBE_EXECUTOR") or None,
            cache=os.environ.get("NIGHTLY_RBE_CACHE") or None,
            instance_name=os.environ.get("NIGHTLY_RBE_INSTANCE", ""),
            header_envs=header_envs,
        ),
    )
