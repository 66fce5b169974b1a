"""The Bazel remote cache peer: a real BuildGrid server (PyPI ``buildgrid``, ``bgd``) on 127.0.0.1
with a disk CAS, an action cache and ByteStream under instance ``nightly``, insecure (plain gRPC),
one per session on a free port, its storage in the session's temporary directory.

Remote *execution* would also need a PostgreSQL scheduler and a worker; the cache is what the
resource's tests need (remote cache hits on a second, fresh-output-base run).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from nightly_assets_tests.peers.process import free_port, stop_process

LOOPBACK = "127.0.0.1"
INSTANCE = "nightly"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0

_CONFIG = """\
server:
  - !channel
    address: "{address}"
    insecure-mode: true
storages:
  - !disk-storage &cas
    path: {cas}
caches:
  - !lru-action-cache &action-cache
    storage: *cas
    max-cached-refs: 10000
    allow-updates: true
    cache-failed-actions: false
instances:
  - name: {instance}
    services:
      - !action-cache
        cache: *action-cache
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
"""


@dataclass(frozen=True)
class BuildGrid:
    url: str  # grpc://127.0.0.1:PORT, as --remote_cache takes it
    instance_name: str
    log_path: Path


def _bgd() -> str:
    beside_python = Path(sys.executable).with_name("bgd")
    found = str(beside_python) if beside_python.is_file() else shutil.which("bgd")
    if found is None:
        pytest.fail("BuildGrid's `bgd` is not installed: run `.venv/bin/pip install buildgrid`")
    return found


def _ready(address: str, process: subprocess.Popen[bytes], deadline: float) -> bool:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        with grpc.insecure_channel(address) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=1)
            except grpc.FutureTimeoutError:
                continue
            return True
    return False


def start_buildgrid(root: Path) -> tuple[BuildGrid, subprocess.Popen[bytes]]:
    """Start a BuildGrid remote cache on a free port, its config, CAS and log under `root`, and wait
    until it answers. The caller stops the process (`stop_process(process, STOP_TIMEOUT_S)`).

    Fails the test (`pytest.fail`) if `bgd` is not installed; raises RuntimeError, with the log's
    tail, if it does not answer within START_TIMEOUT_S (the process is stopped first).
    """
    bgd = _bgd()
    root.mkdir(parents=True, exist_ok=True)
    address = f"{LOOPBACK}:{free_port()}"
    config = root / "bgd.yml"
    config.write_text(_CONFIG.format(address=address, cas=root / "cas", instance=INSTANCE))
    log_path = root / "bgd.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [bgd, "server", "start", str(config)], stdout=log, stderr=subprocess.STDOUT, cwd=root
        )
    try:
        ready = _ready(address, process, time.monotonic() + START_TIMEOUT_S)
    except BaseException:
        stop_process(process, STOP_TIMEOUT_S)
        raise
    if not ready:
        stop_process(process, STOP_TIMEOUT_S)
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"BuildGrid did not answer on {address} within {START_TIMEOUT_S:.0f} s:\n{tail}")
    return BuildGrid(url=f"grpc://{address}", instance_name=INSTANCE, log_path=log_path), process


@pytest.fixture(scope="session", name="buildgrid")
def buildgrid_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuildGrid]:
    """A BuildGrid remote cache for the session; stopped at its end."""
    grid, process = start_buildgrid(tmp_path_factory.mktemp("buildgrid"))
    try:
        yield grid
    finally:
        stop_process(process, STOP_TIMEOUT_S)
