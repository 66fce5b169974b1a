"""Run a suite inside an image through Dagster Pipes, on the Docker host of a runner label.

dagster-docker's `PipesDockerClient` does the Pipes session (context in environment variables,
messages read from the container's log stream). This subclass adds what a test runner pool
needs: an explicit engine per runner (not only DOCKER_HOST), the entry script copied into any
image, GPU device requests, a hard timeout, the output folder copied back, and the container
always removed.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import tarfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import dagster_pipes
import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]
from dagster_docker import PipesDockerClient
from dagster_docker.pipes import PipesDockerLogsMessageReader

from nightly_assets.containers import suite_entry

TOOLS_DIR = "/opt/nightly-pipes"
OUT_DIR = "/tmp/nightly-out"  # noqa: S108 (inside the throwaway container)


class ContainerRunError(RuntimeError):
    """The container could not run the suite (not: some tests failed)."""


@dataclass(frozen=True)
class DeviceSpec:
    """What a runner's host gives a container: `nvidia` device requests or `amd` device nodes."""

    vendor: str = "none"
    count: int = 0

    def container_kwargs(self) -> dict[str, Any]:
        if self.count == 0 or self.vendor == "none":
            return {}
        if self.vendor == "nvidia":
            return {"device_requests": [docker.types.DeviceRequest(count=self.count, capabilities=[["gpu"]])]}
        # ROCm: the compute and render nodes, as AMD documents for `docker run`.
        return {"devices": ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"], "group_add": ["video"]}


@dataclass
class SuiteRun:
    returncode: int
    timed_out: bool
    duration_s: float
    out_dir: Path
    invocation: dg.PipesClientCompletedInvocation | None  # None: a pod that failed after it reported

    def where(self) -> dict[str, str]:
        """Where it ran, for a shard's record (a pod and its node); a container says nothing more."""
        return {}


class RunnerPipesClient(PipesDockerClient):
    """`PipesDockerClient` bound to one engine, copying files in and results out."""

    def __init__(self, client: docker.DockerClient, timeout_s: float, env: Mapping[str, str] | None = None):
        super().__init__(env=env, message_reader=PipesDockerLogsMessageReader())
        self._client = client
        self._timeout_s = timeout_s

    def run_suite(
        self,
        *,
        context: dg.AssetExecutionContext,
        image: str,
        command: Sequence[str],
        out_dir: Path,
        devices: DeviceSpec,
        env: Mapping[str, str],
        on_stop: Callable[[Callable[[], None]], None] | None = None,
    ) -> SuiteRun:
        with dg.open_pipes_session(
            context=context, context_injector=self.context_injector, message_reader=self.message_reader
        ) as session:
            container = self._client.containers.create(
                image=image,
                command=list(command),
                detach=True,
                network_mode="none",  # tests of a nightly image need no network, and get none
                environment={**session.get_bootstrap_env_vars(), **(self.env or {}), **env},
                **devices.container_kwargs(),
            )
            killed = threading.Event()
            timer = threading.Timer(self._timeout_s, _kill, args=(container, killed))
            if on_stop is not None:  # a shard: an interrupted night kills its container
                on_stop(functools.partial(_kill, container, threading.Event()))
            try:
                container.put_archive("/", tools_archive())
                container.start()
                timer.start()
                assert isinstance(self.message_reader, PipesDockerLogsMessageReader)
                self.message_reader.consume_docker_logs(container)
                status = container.wait()
                copy_files_out(container, OUT_DIR, out_dir)
            finally:
                timer.cancel()
                container.remove(force=True)
        invocation = dg.PipesClientCompletedInvocation(session)
        result = read_result(out_dir)
        if killed.is_set() and not result:
            raise ContainerRunError(
                f"container of {image} ran past the hard limit of {self._timeout_s:.0f} s and was killed; "
                f"see {out_dir}"
            )
        if status["StatusCode"] != 0 and not result:
            raise ContainerRunError(
                f"container of {image} exited with {status['StatusCode']} before the suite reported; "
                f"see {out_dir}"
            )
        timed_out = bool(result.get("timed_out")) or killed.is_set()
        return SuiteRun(
            returncode=int(result.get("returncode", status["StatusCode"])),
            timed_out=timed_out,
            duration_s=float(result.get("duration_s", 0.0)),
            out_dir=out_dir,
            invocation=invocation,
        )


def suite_command(
    python: str,
    rootdir: str,
    pytest_args: list[str],
    timeout_s: float,
    collect_only: bool,
    report_files: bool = False,
) -> list[str]:
    """pytest with `pytest_args` (paths, markers, the suite's own) in the image's rootdir;
    `report_files`: the outputs come back as Pipes messages (a pod, whose files cannot be copied)."""
    command = _entry(python, rootdir, timeout_s, report_files)
    return [*command, *(["--collect-only"] if collect_only else []), "--", *pytest_args]


def program_command(
    python: str, rootdir: str, argv: list[str], timeout_s: float, report_files: bool = False
) -> list[str]:
    """Run any program (a benchmark) the same way; it writes its results under OUT_DIR."""
    return [*_entry(python, rootdir, timeout_s, report_files), "--command", json.dumps(argv)]


def _entry(python: str, rootdir: str, timeout_s: float, report_files: bool) -> list[str]:
    command = [python, f"{TOOLS_DIR}/suite_entry.py", "--rootdir", rootdir]
    return [
        *command,
        "--out",
        OUT_DIR,
        "--timeout",
        str(timeout_s),
        *(["--report-files"] if report_files else []),
    ]


def tools_archive(compress: bool = False) -> bytes:
    """A tar of the entry script and the stdlib-only `dagster_pipes` module (gzip'd: `compress`)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if compress else "w") as tar:
        tar.add(suite_entry.__file__, arcname=f"{TOOLS_DIR[1:]}/suite_entry.py")
        tar.add(dagster_pipes.__file__, arcname=f"{TOOLS_DIR[1:]}/dagster_pipes/__init__.py")
    return buffer.getvalue()


def copy_files_out(container: Any, source_dir: str, out_dir: Path, suffix: str = "") -> list[Path]:
    """The files under `source_dir` in the container (those ending in `suffix`), flat in `out_dir`;
    none when the folder is not there (the program never got to write it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        chunks, _ = container.get_archive(source_dir)
    except docker.errors.NotFound:
        return []
    copied = []
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name  # flat: nothing from the container escapes out_dir
            extracted = tar.extractfile(member) if member.isfile() and name.endswith(suffix) else None
            if extracted is not None:
                (out_dir / name).write_bytes(extracted.read())
                copied.append(out_dir / name)
    return sorted(copied)


def read_result(out_dir: Path) -> dict[str, Any]:
    """What the entry script reported (result.json in the run's out folder); {} when it did not."""
    path = out_dir / "result.json"
    if not path.is_file():
        return {}
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def _kill(container: Any, killed: threading.Event) -> None:
    killed.set()
    with contextlib.suppress(docker.errors.APIError):  # it may have ended on its own meanwhile
        container.kill()
