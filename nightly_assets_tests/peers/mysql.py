"""The MySQL peer: a MariaDB server on 127.0.0.1:3306 (root, no password) and a fresh database
per test. Load with ``pytest_plugins = ["nightly_assets_tests.peers.mysql"]``."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator

import pymysql
import pytest

HOST = "127.0.0.1"
PORT = 3306
USER = "root"
MARIADBD = "/usr/sbin/mariadbd"
START_TIMEOUT_S = 30.0


def _answers() -> bool:
    try:
        with socket.create_connection((HOST, PORT), timeout=1):
            pass
        pymysql.connect(host=HOST, port=PORT, user=USER, connect_timeout=2).close()
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


def _admin(statement: str) -> None:
    connection = pymysql.connect(host=HOST, port=PORT, user=USER, autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement)
    finally:
        connection.close()
