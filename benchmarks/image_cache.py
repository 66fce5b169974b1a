"""Image builds: N targets built cold, then again from the previous night's cache (time, cache hits).

Each target gets a framework image (base image + venv, from `framework_context`) and a runtime
image on top of it (`runtime_context`, the night as a label), as the image stages build them. The
cold night uses build args no earlier build used (a random `BENCH_RUN`, declared by an `ARG`
before the `RUN`, is part of the legacy builder's cache key), the cached night the same targets
with `cache_from` = the cold night's tags and another night label. Needs a Docker engine and
`nightly-base/python:bookworm`: the test peers' engine and base image helpers provide both.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]
import pytest
import requests
from urllib3.exceptions import ProtocolError

from nightly_assets.containers import recipes
from nightly_assets.containers.engine import BuildResult, build_image
from nightly_assets_tests.peers import docker as peer

NIGHTS = ("2026-11-03", "2026-11-04")
TIMEOUT_S = 900


# What the SDK raises when the engine goes away (a dockerd another session started, then stopped).
_GONE = (requests.exceptions.ConnectionError, ProtocolError)


class _Skip(Exception):
    """No engine or no base image: the benchmark prints why and measures nothing."""


@dataclass
class _Night:
    night: str
    wall_s: float
    builds: list[BuildResult]

    def role_s(self, role: str) -> float:
        return sum(b.duration_s for b in self.builds if b.tags[0].startswith(f"bench/{role}-"))

    @property
    def steps(self) -> int:
        return sum(b.steps for b in self.builds)

    @property
    def cached(self) -> int:
        return sum(b.cached_steps for b in self.builds)

    @property
    def share(self) -> float:
        return self.cached / self.steps if self.steps else 0.0


@contextmanager
def _engine() -> Iterator[docker.DockerClient]:
    """DOCKER_HOST's engine if it answers, else the peers' dockerd (started here if none answers)."""
    if os.environ.get("DOCKER_HOST"):
        try:
            answers = peer._answers(docker.from_env(timeout=3))
        except docker.errors.DockerException:
            answers = False
        if answers:
            env_client = docker.from_env(timeout=peer.CLIENT_TIMEOUT_S)
            try:
                yield env_client
            finally:
                env_client.close()
            return
    layout = peer._layout()
    process: subprocess.Popen[bytes] | None = None
    with peer._locked(layout.lock):
        if not peer._answers_at(layout.host):
            if shutil.which(peer.DOCKERD) is None:
                raise _Skip("no Docker engine (apt-get install docker.io)")
            try:
                process = peer._start_dockerd(layout)
            except pytest.fail.Exception as exc:
                raise _Skip(f"no Docker engine: {exc}") from None
    client = docker.DockerClient(base_url=layout.host, timeout=peer.CLIENT_TIMEOUT_S)
    try:
        yield client
    finally:
        client.close()
        if process is not None:
            peer._stop(process)


def _base_image(client: docker.DockerClient) -> str:
    """The peers' base image, imported from the cached (or freshly debootstrapped) rootfs tarball."""
    try:
        return peer.ensure_base_image(client)
    except peer.BaseImageError as exc:
        raise _Skip(f"no base image {peer.BASE_IMAGE}: {exc}") from None


def _build_night(
    client: docker.DockerClient,
    work: Path,
    base: str,
    run_id: str,
    targets: int,
    night: str,
    previous: str | None,
) -> _Night:
    builds = []
    start = time.perf_counter()
    for i in range(targets):
        framework_repo, runtime_repo = f"bench/framework-{run_id}-{i}", f"bench/runtime-{run_id}-{i}"
        build_args = {"FRAMEWORK": f"fw{i}", "BENCH_RUN": run_id}
        framework = recipes.framework_context(work / night / f"framework-{i}", base, build_args)
        framework_tag = f"{framework_repo}:{night}"
        builds.append(
            build_image(
                client,
                framework.path,
                [framework_tag],
                build_args=framework.build_args,
                cache_from=[f"{framework_repo}:{previous}"] if previous else [],
                platform=None,
                log_path=work / night / f"framework-{i}.log",
                timeout_s=TIMEOUT_S,
                dockerfile=framework.dockerfile,
            )
        )
        runtime = recipes.runtime_context(
            work / night / f"runtime-{i}",
            from_image=framework_tag,
            needs_venv=False,
            wheels=[],
            repo_root=None,
            test_paths=[],
            suites=[],
            labels={"nightly.night": night, "nightly.target": f"fw{i}"},
        )
        builds.append(
            build_image(
                client,
                runtime.path,
                [f"{runtime_repo}:{night}"],
                build_args=runtime.build_args,
                cache_from=[f"{runtime_repo}:{previous}"] if previous else [],
                platform=None,
                log_path=work / night / f"runtime-{i}.log",
                timeout_s=TIMEOUT_S,
                dockerfile=runtime.dockerfile,
            )
        )
    return _Night(night, time.perf_counter() - start, builds)


def _remove(client: docker.DockerClient, run_id: str, targets: int) -> None:
    # Runtime images first: each sits on its framework image.
    for role in ("runtime", "framework"):
        for i in range(targets):
            for night in reversed(NIGHTS):
                try:
                    client.images.remove(f"bench/{role}-{run_id}-{i}:{night}", noprune=False)
                except docker.errors.ImageNotFound:
                    pass
                except docker.errors.APIError as exc:
                    print(f"  could not remove bench/{role}-{run_id}-{i}:{night}: {exc}")
                except _GONE:
                    return


def main() -> dict[str, float]:
    targets = int(os.environ.get("BENCH_IMAGE_TARGETS", "3"))
    run_id = secrets.token_hex(4)
    print(f"image builds: {targets} targets cold, then from the previous night's cache")
    try:
        with _engine() as client, tempfile.TemporaryDirectory() as tmp:
            base = _base_image(client)
            try:
                cold = _build_night(client, Path(tmp), base, run_id, targets, NIGHTS[0], None)
                warm = _build_night(client, Path(tmp), base, run_id, targets, NIGHTS[1], NIGHTS[0])
            finally:
                _remove(client, run_id, targets)
    except _Skip as exc:
        print(f"  skipped: {exc}")
        return {}
    except _GONE as exc:
        print(
            "  skipped: the Docker engine stopped answering mid-run (the session that started it "
            f"ended?): {type(exc).__name__}"
        )
        return {}
    print("  night                 wall  framework    runtime   steps from cache  share")
    for label, night in (("cold", cold), ("cached", warm)):
        print(
            f"  {label:<6} {night.night}  {night.wall_s:6.2f} s  {night.role_s('framework'):7.2f} s"
            f"  {night.role_s('runtime'):7.2f} s  {night.cached:8d} / {night.steps:<5d}  {night.share:5.0%}"
        )
    print(f"  cold/cached wall time: {cold.wall_s / warm.wall_s:5.2f}x")
    if cold.cached:
        print(f"  note: the cold night found {cold.cached} steps in the cache (not cold)")
    return {
        "image build cold/cached": cold.wall_s / warm.wall_s,
        "image cache-hit share (cached night)": warm.share,
        "image cache-hit share (cold night)": cold.share,
    }


if __name__ == "__main__":
    main()
