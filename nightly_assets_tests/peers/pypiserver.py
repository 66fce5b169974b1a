"""The package index peer: PyPI's pypiserver on loopback, serving a folder of wheels and sdists.

`pypi_index` (session) takes uploads with htpasswd basic auth (`-a update`: reading stays
anonymous, as on PyPI); `start_pypiserver(folder, auth=False)` serves any folder (a wheelhouse) to
pip, with no auth at all (`-a . -P .`). Neither falls back to pypi.org for a project it lacks.
"""

from __future__ import annotations

import contextlib
import importlib.util
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
import requests

from nightly_assets_tests.peers.process import free_port, stop_process

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
BCRYPT_COST = 5  # pypiserver checks the password on every upload: keep it cheap in tests


@dataclass(frozen=True)
class PypiServer:
    """A running pypiserver: `url` takes twine uploads, `simple_url` is pip's --index-url."""

    url: str
    username: str | None
    password: str | None
    packages_dir: Path
    log: Path

    @property
    def simple_url(self) -> str:
        return f"{self.url}simple/"

    def files(self) -> list[str]:
        """The file names the server holds (what twine uploaded, or the folder served)."""
        return sorted(p.name for p in self.packages_dir.iterdir() if p.is_file())


def _htpasswd(path: Path, username: str, password: str) -> None:
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_COST)).decode()
    path.write_text(f"{username}:{hashed}\n")
    path.chmod(0o600)


@contextlib.contextmanager
def start_pypiserver(
    packages_dir: Path, *, auth: bool = True, username: str = "uploader", log_dir: Path | None = None
) -> Iterator[PypiServer]:
    """pypiserver serving `packages_dir` on a free loopback port until the block ends. `auth`:
    uploads need `username` and a fresh random password (both on the result); without it anyone
    may upload and read."""
    if importlib.util.find_spec("pypiserver") is None:
        pytest.fail("pypiserver is not installed: `pip install -e .[dev]` (or deselect -m pypi)")
    packages_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nightly-pypiserver-") as scratch:
        logs = log_dir or Path(scratch)
        logs.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(16) if auth else None
        if password is not None:
            htpasswd = Path(scratch) / "htpasswd"
            _htpasswd(htpasswd, username, password)
            access = ["-a", "update", "-P", str(htpasswd)]
        else:
            access = ["-a", ".", "-P", "."]
        port = free_port()
        log = logs / f"pypiserver-{port}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "pypiserver", "run"),
                    *("-i", "127.0.0.1", "-p", str(port)),
                    *access,
                    "--disable-fallback",  # a project it lacks is a 404, never a redirect to pypi.org
                    str(packages_dir),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            server = PypiServer(
                url=f"http://127.0.0.1:{port}/",
                username=username if auth else None,
                password=password,
                packages_dir=packages_dir,
                log=log,
            )
            _wait_ready(process, server)
            yield server
        finally:
            stop_process(process, STOP_TIMEOUT_S)


def _wait_ready(process: subprocess.Popen[bytes], server: PypiServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"pypiserver exited {process.returncode}: {server.log.read_text()}")
        try:
            if requests.get(server.simple_url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    pytest.fail(f"pypiserver did not answer on {server.url} within {START_TIMEOUT_S:.0f} s")


@pytest.fixture(scope="session")
def pypi_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PypiServer]:
    """A pypiserver for the session: uploads with its username and password, reads anonymous.
    Tests share it: each publishes its own project name or version."""
    root = tmp_path_factory.mktemp("pypi")
    with start_pypiserver(root / "packages", auth=True, log_dir=root) as server:
        yield server
