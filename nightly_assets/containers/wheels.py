"""Wheels built in a clean container (seed 000: "built locally in a manylinux container").

The checkout goes into a fresh container of the builder image with `put_archive`, `pip wheel`
runs there with no network and no index, and the wheels come back with `get_archive`. Nothing of
this machine's Python reaches the build; the container is always removed.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]
import requests

from nightly_assets.containers.engine import pull_image
from nightly_assets.containers.runner import copy_files_out

SRC_DIR = "/build/src"
DIST_DIR = "/build/dist"
_SKIPPED = {".git", ".venv", "__pycache__", "build", "dist", ".pytest_cache", ".mypy_cache"}


class WheelBuildError(RuntimeError):
    """The container build failed or timed out; the message names the image and the log."""


@dataclass(frozen=True)
class ContainerWheels:
    wheels: list[Path]
    image_id: str
    duration_s: float


def build_wheels_in_container(
    client: docker.DockerClient,
    *,
    image: str,
    python: str,
    src: Path,
    out: Path,
    log: Path,
    platform: str | None,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> ContainerWheels:
    """`python -m pip wheel` of `src` inside a new container of `image` with `env` set (the
    checkout's `PinnedRepo.build_env`); wheels land in `out`."""
    image_id = _builder_image_id(client, image)
    command = [python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    command += ["--wheel-dir", DIST_DIR, SRC_DIR]
    started = time.monotonic()
    container = client.containers.create(
        image=image,
        command=command,
        network_mode="none",  # offline, as the seed's clean environment: wheels from the checkout only
        working_dir=SRC_DIR,
        environment={"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1", **(env or {})},
        **({"platform": platform} if platform else {}),
    )
    try:
        container.put_archive("/", _source_archive(src))
        container.start()
        status = _wait(container, timeout_s)
        log.write_bytes(container.logs(stdout=True, stderr=True))
        if status is None:
            raise WheelBuildError(
                f"wheel build in {image} ran past {timeout_s:.0f} s and was killed; see {log}"
            )
        if status != 0:
            raise WheelBuildError(
                f"wheel build in {image} exited with {status}: {_tail(log)} (whole log: {log})"
            )
        wheels = copy_files_out(container, DIST_DIR, out, suffix=".whl")
    finally:
        container.remove(force=True)
    if not wheels:
        raise WheelBuildError(f"wheel build in {image} succeeded but wrote no wheel; see {log}")
    return ContainerWheels(wheels, image_id, time.monotonic() - started)


def _builder_image_id(client: docker.DockerClient, image: str) -> str:
    """The builder image's id, pulled (anonymously: builder images are public) when it is missing."""
    try:
        return str(client.images.get(image).id)
    except docker.errors.ImageNotFound:
        pass
    try:
        if pull_image(client, image, None):
            return str(client.images.get(image).id)
    except docker.errors.APIError as exc:
        raise WheelBuildError(
            f"builder image {image} is not on the engine and pulling it failed: {exc}"
        ) from exc
    raise WheelBuildError(f"builder image {image} is not on the engine and its registry does not have it")


def _source_archive(src: Path) -> bytes:
    """The checkout under SRC_DIR, without VCS data and build leftovers."""
    buffer = io.BytesIO()

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if Path(info.name).name in _SKIPPED else info

    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(src, arcname=SRC_DIR[1:], filter=keep)
    return buffer.getvalue()


def _wait(container: Any, timeout_s: float) -> int | None:
    """The exit status, or None after killing a container that ran past `timeout_s`."""
    try:
        return int(container.wait(timeout=timeout_s)["StatusCode"])
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
        with contextlib.suppress(docker.errors.APIError):
            container.kill()
        return None


def _tail(log: Path, lines: int = 5) -> str:
    return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
