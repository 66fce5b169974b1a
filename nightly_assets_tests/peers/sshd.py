"""The "TPU VM" peer: a real OpenSSH sshd on 127.0.0.1 (a free port), the user is whoever runs the
tests (root in CI). Its ``AuthorizedKeysFile`` is the file the fake TPU API writes from the READY
nodes' ``ssh-keys`` metadata, and the fake publishes its host key as the nodes' guest attribute,
so a run gets in only with the per-run key it put in its node, and checks the host key it got.

``drop_sessions()`` kills every connection's processes (not the listener): what a dropped SSH
connection or a VM that died under its session looks like from the orchestrator.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from nightly_assets_tests.peers.process import free_port, stop_process
from nightly_assets_tests.peers.tpu_api import FakeTpuApi

SSHD = Path("/usr/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")  # sshd refuses to start without it
LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 10.0


@dataclass
class Sshd:
    port: int
    config: Path
    authorized_keys: Path
    host_key_b64: str  # the ed25519 host key as guest attributes carry it (base64 of the wire blob)
    process: subprocess.Popen[bytes]
    log: Path

    def session_pids(self) -> list[int]:
        """The processes serving connections: every descendant of the listener."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        found: list[int] = []
        todo = list(children.get(self.process.pid, []))
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def drop_sessions(self) -> int:
        """SIGKILL every connection of this sshd (and what runs under it); how many processes."""
        pids = self.session_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)


def _host_key(directory: Path) -> tuple[Path, str]:
    key = Ed25519PrivateKey.generate()
    path = directory / "ssh_host_ed25519_key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return path, public.decode().split()[1]


def _wait_for_banner(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"sshd exited with {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=1) as conn:
            if conn.recv(64).startswith(b"SSH-2.0"):
                return
        time.sleep(0.05)
    pytest.fail(f"sshd did not answer on {LOOPBACK}:{port} within {START_TIMEOUT_S} s")


def start_sshd(directory: Path, authorized_keys: Path) -> Sshd:
    if not SSHD.exists():
        pytest.fail(f"{SSHD} not found: apt-get install -y openssh-server")
    try:
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    except PermissionError:
        pytest.fail(f"sshd needs {PRIVSEP_DIR}: create it as root (mkdir -p {PRIVSEP_DIR})")
    directory.mkdir(parents=True, exist_ok=True)
    authorized_keys.touch()
    host_key, host_key_b64 = _host_key(directory)
    port = free_port()
    config = directory / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"ListenAddress {LOOPBACK}",
                f"Port {port}",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {authorized_keys}",
                f"PidFile {directory / 'sshd.pid'}",
                "UsePAM no",
                "StrictModes no",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "Subsystem sftp internal-sftp",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    log = directory / "sshd.log"
    # -D: stay in the foreground, a child of the test run; -e: log to stderr (the log file).
    with log.open("wb") as stderr:
        process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=stderr)
    _wait_for_banner(port, process, log)
    return Sshd(port, config, authorized_keys, host_key_b64, process, log)


@pytest.fixture(scope="session", name="sshd")
def sshd_fixture(tmp_path_factory: pytest.TempPathFactory, tpu_api_server: FakeTpuApi) -> Iterator[Sshd]:
    """A loopback sshd that trusts the keys of the fake TPU API's READY nodes; stopped at the end."""
    assert tpu_api_server.authorized_keys is not None
    server = start_sshd(tmp_path_factory.mktemp("sshd"), tpu_api_server.authorized_keys)
    tpu_api_server.host_keys = {"ssh-ed25519": server.host_key_b64}
    try:
        yield server
    finally:
        server.drop_sessions()
        stop_process(server.process, grace_s=5)
