"""The MySQL peer: a MariaDB server on 127.0.0.1:3306 (root, no password) and a fresh database
per test. Load with ``pytest_plugins = ["nightly_assets_tests.peers.mysql"]``."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from nightly_assets_tests.peers.process import free_port

HOST = "127.0.0.1"
PORT = 3306
USER = "root"
MARIADBD = "/usr/sbin/mariadbd"
START_TIMEOUT_S = 30.0


def _answers(port: int = PORT) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            pass
        pymysql.connect(host=HOST, port=port, user=USER, connect_timeout=2).close()
    except (OSError, pymysql.MySQLError):
        return False
    return True


@pytest.fixture(scope="session")
def mysql_server() -> None:
    """Ensure MariaDB answers on 127.0.0.1:3306, starting it if needed."""
    if _answers():
        return
    if not os.path.exists(MARIADBD):
        pytest.fail(
            f"MariaDB is not running on {HOST}:{PORT} and {MARIADBD} is missing: "
            "run `apt-get install mariadb-server` (or deselect with -m 'not mysql')"
        )
    start = ["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", MARIADBD]
    result = subprocess.run(start, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"cannot start MariaDB ({' '.join(start)}): {result.stderr.strip()}")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _answers():
            return
        time.sleep(0.5)
    pytest.fail(f"MariaDB started but did not answer on {HOST}:{PORT} within {START_TIMEOUT_S:.0f} s")


@pytest.fixture
def mysql_url(mysql_server: None) -> Iterator[str]:
    """A fresh, empty database ``nightly_test_<hex>``; dropped after the test."""
    database = f"nightly_test_{secrets.token_hex(6)}"
    _admin(f"CREATE DATABASE `{database}`")  # server default charset: the tables set their own
    try:
        yield f"mysql+pymysql://{USER}@{HOST}:{PORT}/{database}?charset=utf8mb4"
    finally:
        _admin(f"DROP DATABASE IF EXISTS `{database}`")


def _admin(statement: str, port: int = PORT) -> None:
    connection = pymysql.connect(host=HOST, port=port, user=USER, autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement)
    finally:
        connection.close()


class OwnMariaDB:
    """A MariaDB server of the test's own (its data folder, port and socket), to stop and restart."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        data = root / "data"
        # A tmpdir of its own: a MariaDB starting up deletes every #sql* file in its tmpdir, which
        # in the shared /tmp are the temporary tables of another worker's mariadb-install-db.
        self.tmpdir = root / "tmp"
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        installed = subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                f"--tmpdir={self.tmpdir}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if installed.returncode != 0:
            pytest.fail(f"mariadb-install-db failed: {installed.stderr[-2000:]}")
        self.start()
        _admin("CREATE DATABASE nightly", port=self.port)

    @property
    def url(self) -> str:
        return f"mysql+pymysql://{USER}@{HOST}:{self.port}/nightly?charset=utf8mb4"

    def start(self) -> None:
        log = (self.root / "mariadbd.log").open("ab")
        self.process = subprocess.Popen(
            [
                MARIADBD,
                "--no-defaults",
                f"--datadir={self.root / 'data'}",
                f"--socket={self.root / 'mysqld.sock'}",
                f"--pid-file={self.root / 'mysqld.pid'}",
                f"--port={self.port}",
                f"--tmpdir={self.tmpdir}",
                f"--bind-address={HOST}",
                "--user=root",
                "--skip-log-bin",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"own MariaDB did not start: {(self.root / 'mariadbd.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """Gone at once, as a crashed or restarting server is (SIGKILL: no clean shutdown)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        self.kill()


@pytest.fixture
def own_mariadb(tmp_path: Path) -> Iterator[OwnMariaDB]:
    if not os.path.exists(MARIADBD):
        pytest.fail(f"{MARIADBD} is missing: run `apt-get install mariadb-server`")
    server = OwnMariaDB(tmp_path / "mariadb")
    try:
        yield server
    finally:
        server.stop()
