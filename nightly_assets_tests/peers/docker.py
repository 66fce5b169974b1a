"""The Docker peer: a Docker engine on a unix socket, and an offline Debian base image with Python.

``docker_engine`` reuses the engine named by ``DOCKER_HOST`` when it answers, else a ``dockerd``
started earlier on this peer's socket, else starts ``dockerd`` itself (no bridge, no iptables: it
runs on CI machines without privileges for networking) and stops it at the end of the session. Its
storage driver is overlay2 where this machine can mount an overlay under the data root, else vfs,
which copies the whole file system for every layer and container (several times slower to build
and start); ``NIGHTLY_DOCKER_STORAGE_DRIVER`` forces one. Its data root lives under
``$NIGHTLY_PEERS_DIR`` (default ``/tmp/nightly-peers``) so images survive between sessions.

``base_image`` is ``nightly-base/python:bookworm``, a Debian bookworm minbase with ``python3``,
``python3-venv`` and ``python3-pytest``, made with ``debootstrap`` (the rootfs tarball is cached
under ``$NIGHTLY_PEERS_DIR/cache``) and ``docker import``-ed: containers have no network, so
images are built ``FROM`` it. Load with ``pytest_plugins = ["nightly_assets_tests.peers.docker"]``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker  # type: ignore[import-untyped]
import pytest
import requests

from nightly_assets_tests.peers import shared
from nightly_assets_tests.peers.process import stop_process
from nightly_assets_tests.peers.shared import peers_dir

DOCKERD = "dockerd"
DEBOOTSTRAP = "debootstrap"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_S = 600
BASE_IMAGE = "nightly-base/python:bookworm"
BASE_SUITE = "bookworm"
# pip, setuptools and wheel: the image is also the clean environment wheels are built in.
BASE_PACKAGES = (
    "python3",
    "python3-venv",
    "python3-pytest",
    "python3-pip",
    "python3-setuptools",
    "python3-wheel",
)
# Names the package set: an image or tarball made from another set is rebuilt, not reused.
BASE_VERSION = hashlib.sha256(",".join(BASE_PACKAGES).encode()).hexdigest()[:12]
BASE_TARBALL = f"bookworm-python-{BASE_VERSION}.tar"
BASE_LABEL = "nightly.peer.base"
# An arm64-labelled import of the same amd64 rootfs: no emulator here, so it stands in for an
# arm64 base image in tests of what the orchestrator does with arm64 targets (build, tag, only
# collect); its binaries are the host's, so it runs.
ARM64_STANDIN_IMAGE = "nightly-base/python:bookworm-arm64-standin"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    "ENV PYTHONDONTWRITEBYTECODE=1",
    'CMD ["python3"]',
    f"LABEL {BASE_LABEL}={BASE_VERSION}",
)
# sockaddr_un.sun_path is 108 bytes; containerd puts its own sockets under the exec root.
_MAX_SOCKET_PATH = 90
_PING_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException, OSError)


@dataclass
class DockerEngine:
    """A Docker engine that answers on ``host`` (``unix:///...`` or whatever ``DOCKER_HOST`` said)."""

    host: str
    started_here: bool = False
    from_env: bool = False
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def client(self, timeout: int = CLIENT_TIMEOUT_S) -> docker.DockerClient:
        """A new SDK client for this engine (close it, or let it be collected)."""
        if self.from_env:
            return docker.from_env(timeout=timeout)
        return docker.DockerClient(base_url=self.host, timeout=timeout)

    def env(self) -> dict[str, str]:
        """Environment variables that point ``docker`` / ``docker.from_env()`` at this engine."""
        if self.from_env:
            return {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}
        return {"DOCKER_HOST": self.host}


@dataclass(frozen=True)
class _Layout:
    data_root: Path
    exec_root: Path
    socket: Path
    pidfile: Path
    log: Path
    lock: Path

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"


def _layout() -> _Layout:
    base = peers_dir() / "docker"
    run_dir = base
    if len(str(base / "x" / "containerd" / "containerd-debug.sock")) > _MAX_SOCKET_PATH:
        digest = hashlib.sha256(str(base).encode()).hexdigest()[:10]
        run_dir = Path("/tmp") / f"nightly-dockerd-{digest}"
    return _Layout(
        data_root=base / "data",
        exec_root=run_dir / "x",
        socket=run_dir / "docker.sock",
        pidfile=base / "dockerd.pid",
        log=base / "dockerd.log",
        lock=base / "lock",
    )


def _answers(client: docker.DockerClient) -> bool:
    try:
        return bool(client.ping())
    except _PING_ERRORS:
        return False
    finally:
        client.close()


def _answers_at(host: str) -> bool:
    try:
        client = docker.DockerClient(base_url=host, timeout=3)
    except _PING_ERRORS:
        return False
    return _answers(client)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``: two pytest sessions never start or build twice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _dockerd_alive(pidfile: Path) -> int | None:
    """The pid in ``pidfile`` if that process is still a dockerd (pids get reused)."""
    try:
        pid = int(pidfile.read_text().strip())
        command = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if command == "dockerd" else None


def _overlay_mounts_under(root: Path) -> bool:
    """Whether an overlay file system mounts under ``root`` (root privileges and a backing file
    system overlay2 supports): what dockerd's overlay2 driver needs."""
    probe = root / "overlay-probe"
    _remove_tree(probe)
    try:
        for name in ("lower", "upper", "work", "merged"):
            (probe / name).mkdir(parents=True)
        options = f"lowerdir={probe / 'lower'},upperdir={probe / 'upper'},workdir={probe / 'work'}"
        mounted = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(probe / "merged")],
            capture_output=True,
            check=False,
        )
        if mounted.returncode != 0:
            return False
        subprocess.run(["umount", str(probe / "merged")], capture_output=True, check=False)
        return True
    except OSError:
        return False
    finally:
        _remove_tree(probe)


def _storage_driver(layout: _Layout) -> str:
    forced = os.environ.get("NIGHTLY_DOCKER_STORAGE_DRIVER")
    if forced:
        return forced
    return "overlay2" if _overlay_mounts_under(layout.data_root) else "vfs"


def _start_dockerd(layout: _Layout) -> subprocess.Popen[bytes]:
    dockerd = shutil.which(DOCKERD)
    if dockerd is None:
        pytest.fail(
            "no Docker engine answers (DOCKER_HOST unset or dead) and `dockerd` is not installed: "
            "run `apt-get install docker.io` (or deselect with -m 'not docker')"
        )
    for directory in (layout.data_root, layout.exec_root, layout.socket.parent):
        directory.mkdir(parents=True, exist_ok=True)
    stale = _dockerd_alive(layout.pidfile)
    if stale is not None:
        pytest.fail(
            f"a dockerd (pid {stale}, {layout.pidfile}) is running but does not answer on "
            f"{layout.host}; stop it or see {layout.log}"
        )
    argv = [
        dockerd,
        "--data-root",
        str(layout.data_root),
        "--exec-root",
        str(layout.exec_root),
        "-H",
        layout.host,
        "--pidfile",
        str(layout.pidfile),
        "--storage-driver",
        _storage_driver(layout),
        "--iptables=false",
        "--ip6tables=false",
        "--bridge=none",
        "--ip-forward=false",
        "--ip-masq=false",
        "--userland-proxy=false",
    ]
    with layout.log.open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C on pytest must not reach dockerd before we stop it
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(
                f"dockerd exited with {process.returncode} while starting; last lines of "
                f"{layout.log}:\n{_log_tail(layout.log)}"
            )
        if _answers_at(layout.host):
            return process
        time.sleep(0.2)
    _stop(process)
    pytest.fail(
        f"dockerd did not answer on {layout.host} within {START_TIMEOUT_S:.0f} s; last lines of "
        f"{layout.log}:\n{_log_tail(layout.log)}"
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    stop_process(process, STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    """A Docker engine that answers ping: ``DOCKER_HOST``'s, ours from earlier, or one we start."""
    env_host = os.environ.get("DOCKER_HOST")
    if env_host:
        try:
            env_client = docker.from_env(timeout=3)
        except docker.errors.DockerException:
            env_client = None
        if env_client is not None and _answers(env_client):
            yield DockerEngine(host=env_host, from_env=True)
            return
    layout = _layout()
    with _locked(layout.lock):
        if _answers_at(layout.host):
            engine = DockerEngine(host=layout.host, log_path=layout.log)
        else:
            process = _start_dockerd(layout)
            engine = DockerEngine(host=layout.host, started_here=True, log_path=layout.log, process=process)
    try:
        yield engine
    finally:
        if engine.process is not None and not shared.hand_over(layout.pidfile):
            _stop(engine.process)


# -- the base image -------------------------------------------------------------------------------


class BaseImageError(RuntimeError):
    """The base image could not be made (no debootstrap, no mirror, import failed)."""


def _mounts_under(root: Path) -> list[Path]:
    prefix = str(root.resolve()) + "/"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    points = [Path(line.split()[1].replace("\\040", " ")) for line in lines if len(line.split()) > 1]
    return sorted((p for p in points if str(p).startswith(prefix)), key=lambda p: -len(str(p)))


def _remove_tree(root: Path) -> None:
    """rm -rf a debootstrap target, unmounting what an interrupted debootstrap left mounted."""
    if not root.exists():
        return
    for point in _mounts_under(root):
        subprocess.run(["umount", "--lazy", str(point)], capture_output=True, check=False)
    if _mounts_under(root):
        raise BaseImageError(f"cannot unmount what is mounted under {root}; remove it by hand")
    shutil.rmtree(root, ignore_errors=True)


def _prune_rootfs(root: Path) -> None:
    """Drop docs, man pages, translations and apt's caches: the image only has to run Python."""
    for relative in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian"):
        shutil.rmtree(root / relative, ignore_errors=True)
    locale = root / "usr/share/locale"
    if locale.is_dir():
        for entry in locale.iterdir():
            if entry.is_dir() and not entry.name.startswith("C"):
                shutil.rmtree(entry, ignore_errors=True)
    for relative in ("var/lib/apt/lists", "var/cache/apt", "var/cache/debconf", "var/log"):
        directory = root / relative
        if not directory.is_dir():
            continue
        for entry in directory.rglob("*"):
            if entry.is_file() and entry.name != "lock":
                entry.unlink()
    for leftover in ("var/cache/apt/archives/partial",):
        (root / leftover).mkdir(parents=True, exist_ok=True)


def _build_rootfs_tarball(tarball: Path) -> None:
    """debootstrap bookworm minbase with Python into a temporary dir, prune it, tar it atomically."""
    if shutil.which(DEBOOTSTRAP) is None:
        raise BaseImageError(
            f"the base image {BASE_IMAGE} is missing and `debootstrap` is not installed: "
            "run `apt-get install debootstrap` (or deselect with -m 'not docker')"
        )
    cache = tarball.parent
    cache.mkdir(parents=True, exist_ok=True)
    rootfs = cache / f"rootfs.{os.getpid()}"
    partial = cache / f"{tarball.name}.{os.getpid()}.partial"
    mirror = os.environ.get("NIGHTLY_DEBIAN_MIRROR") or DEFAULT_MIRROR
    try:
        _remove_tree(rootfs)
        argv = [
            DEBOOTSTRAP,
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            BASE_SUITE,
            str(rootfs),
            mirror,
        ]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
            debootstrap_log = rootfs / "debootstrap" / "debootstrap.log"
            raise BaseImageError(
                f"debootstrap of {BASE_SUITE} from {mirror} failed ({result.returncode}); "
                f"set NIGHTLY_DEBIAN_MIRROR for another mirror; {debootstrap_log}:\n"
                f"{_log_tail(debootstrap_log)}\n{tail}"
            )
        _prune_rootfs(rootfs)
        tar = ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(partial), "."]
        result = subprocess.run(tar, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BaseImageError(f"tar of {rootfs} failed: {result.stderr.strip()}")
        partial.replace(tarball)
    finally:
        _remove_tree(rootfs)
        partial.unlink(missing_ok=True)


def _import_result_error(result: object) -> str | None:
    """The error in `docker import`'s JSON lines, if any."""
    lines = result if isinstance(result, list) else str(result).splitlines()
    for line in lines:
        try:
            message = json.loads(line) if isinstance(line, str) else line
        except json.JSONDecodeError:
            continue
        if isinstance(message, dict) and message.get("error"):
            return str(message["error"])
    return None


def _has_image(client: docker.DockerClient, name: str) -> bool:
    """True when `name` is there and made from this BASE_PACKAGES set."""
    try:
        image = client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return (image.labels or {}).get(BASE_LABEL) == BASE_VERSION


def _import(client: docker.DockerClient, tarball: Path, name: str, platform: str) -> None:
    """`docker import` of the rootfs, or for another platform a build `FROM scratch` that ADDs it.

    Engine 20.10 ignores the platform of an import; the legacy builder honours it for scratch.
    """
    if platform == "linux/amd64":
        repository, tag = name.rsplit(":", 1)
        result = client.api.import_image_from_file(
            str(tarball), repository=repository, tag=tag, changes=list(BASE_CHANGES)
        )
        error = _import_result_error(result)
        if error is not None:
            raise BaseImageError(f"docker import of {tarball} as {name} failed: {error}")
        return
    context = tarball.parent / f"context.{os.getpid()}"
    context.mkdir(exist_ok=True)
    try:
        os.link(tarball, context / "rootfs.tar")
        (context / "Dockerfile").write_text(
            "\n".join(["FROM scratch", "ADD rootfs.tar /", *BASE_CHANGES, ""])
        )
        client.images.build(path=str(context), tag=name, platform=platform, rm=True, forcerm=True)
    except docker.errors.BuildError as exc:
        raise BaseImageError(f"build of {name} ({platform}) from {tarball} failed: {exc}") from exc
    finally:
        shutil.rmtree(context, ignore_errors=True)


def ensure_base_image(
    client: docker.DockerClient, name: str = BASE_IMAGE, platform: str = "linux/amd64"
) -> str:
    """`name` in the engine, imported from the cached (or freshly debootstrapped) rootfs tarball."""
    if _has_image(client, name):
        return name
    cache = peers_dir() / "cache"
    tarball = cache / BASE_TARBALL
    with _locked(cache / "lock"):
        if _has_image(client, name):  # another session imported it while we waited
            return name
        if not tarball.exists():
            _build_rootfs_tarball(tarball)
        _import(client, tarball, name, platform)
    try:
        client.containers.run(
            name,
            ["python3", "-c", "import setuptools, wheel, pip, pytest, venv"],
            network_mode="none",
            remove=True,
        )
    except docker.errors.ContainerError as error:
        client.images.remove(name, force=True)
        tarball.unlink(missing_ok=True)
        raise BaseImageError(
            f"{name} cannot import setuptools, wheel, pip, pytest, venv (removed it and {tarball}): {error}"
        ) from error
    return name


@pytest.fixture(scope="session")
def base_image(docker_engine: DockerEngine) -> str:
    """``nightly-base/python:bookworm`` in the engine: Debian minbase with python3, venv, pytest."""
    client = docker_engine.client()
    try:
        return ensure_base_image(client)
    except BaseImageError as exc:
        pytest.fail(str(exc))
    finally:
        client.close()


@pytest.fixture(scope="session")
def arm64_base_image(docker_engine: DockerEngine) -> str:
    """The base image's rootfs imported as linux/arm64 (see ARM64_STANDIN_IMAGE)."""
    client = docker_engine.client()
    try:
        return ensure_base_image(client, ARM64_STANDIN_IMAGE, "linux/arm64")
    except BaseImageError as exc:
        pytest.fail(str(exc))
    finally:
        client.close()
