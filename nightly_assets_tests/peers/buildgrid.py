"""The Bazel remote cache and remote execution peers: real BuildGrid servers (PyPI ``buildgrid``,
``bgd``) on 127.0.0.1, insecure (plain gRPC), one of each kind per session on a free port, their
storage in the session's temporary directory, instance ``nightly``.

``buildgrid``: a disk CAS, an action cache and ByteStream (remote cache hits on a second,
fresh-output-base run). ``buildgrid_execution``: the same plus the Execution, Operations and Bots
services on an SQL scheduler in a fresh PostgreSQL database (127.0.0.1:5432, trust auth; its
tables made by ``bgd migrate apply``, dropped at the end), and a worker whose bots run the actions
(``nightly_assets_tests.peers.bazel_worker``).
"""

from __future__ import annotations

import importlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    process, log_path = _launch(
        bgd, root, address, _CONFIG.format(address=address, cas=root / "cas", instance=INSTANCE)
    )
    return BuildGrid(url=f"grpc://{address}", instance_name=INSTANCE, log_path=log_path), process


def _launch(bgd: str, root: Path, address: str, config_text: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`bgd server start` with this config under `root`, once it answers on `address`."""
    config = root / "bgd.yml"
    config.write_text(config_text)
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
        raise RuntimeError(
            f"BuildGrid did not answer on {address} within {START_TIMEOUT_S:.0f} s:\n{_tail(log_path)}"
        )
    return process, log_path


def _tail(log_path: Path, lines: int = 20) -> str:
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="session", name="buildgrid")
def buildgrid_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuildGrid]:
    """A BuildGrid remote cache for the session; stopped at its end."""
    grid, process = start_buildgrid(tmp_path_factory.mktemp("buildgrid"))
    try:
        yield grid
    finally:
        stop_process(process, STOP_TIMEOUT_S)


# -- remote execution --------------------------------------------------------------------------

# The scheduler's database server; trust auth, so no password. NIGHTLY_TEST_POSTGRES_DSN overrides
# it (libpq keywords, the maintenance database: the fixture creates and drops its own).
POSTGRES_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
WORKER_BOTS = 4  # bots (one lease each), so independent actions run side by side
_REPO_ROOT = Path(__file__).resolve().parents[2]  # where `-m nightly_assets_tests...` imports from

_EXECUTION_CONFIG = """\
server:
  - !channel
    address: "{address}"
    insecure-mode: true
thread-pool-size: 64
connections:
  - !sql-connection &sql
    connection-string: {database_url}
    pool-size: 10
    max-overflow: 20
storages:
  - !disk-storage &cas
    path: {cas}
caches:
  - !lru-action-cache &action-cache
    storage: *cas
    max-cached-refs: 10000
    allow-updates: true
    cache-failed-actions: false
schedulers:
  - !sql-scheduler &scheduler
    sql: *sql
    storage: *cas
    action-cache: *action-cache
    bot-session-keepalive-timeout: 60
    poll-interval: 0.1
    bot-poll-interval: 0.1
    assigners:
      - !priority-age-assigner
        count: 1
        interval: 0.1
instances:
  - name: {instance}
    services:
      - !action-cache
        cache: *action-cache
      - !execution
        scheduler: *scheduler
        endpoints: [execution, operations, bots]
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
"""


@dataclass(frozen=True)
class ExecutedAction:
    """One action the worker ran (a line of its JSON-lines log): what, where, and how it ended."""

    bot_id: str
    action_digest: str  # hash/size_bytes
    argv: tuple[str, ...]
    working_directory: str
    exit_code: int
    output_files: tuple[str, ...]
    output_directories: tuple[str, ...]
    status: str  # the lease's status: OK, DEADLINE_EXCEEDED, or UNKNOWN for the worker's own failure
    duration_s: float

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> ExecutedAction:
        tuples = ("argv", "output_files", "output_directories")
        fields: dict[str, Any] = {
            key: tuple(value) if key in tuples else value for key, value in entry.items()
        }
        return cls(**fields)


@dataclass(frozen=True)
class BuildGridExecution:
    url: str  # grpc://127.0.0.1:PORT, as --remote_executor takes it
    instance_name: str
    log_path: Path
    worker_log: Path  # the worker's JSON lines: {"started": ...}, {"executed": ...}, {"error": ...}
    database: str

    def executed(self) -> list[ExecutedAction]:
        """The actions the worker has run so far, in the order they finished."""
        return [
            ExecutedAction.from_json(entry["executed"]) for entry in self._entries() if "executed" in entry
        ]

    def worker_errors(self) -> list[str]:
        """The worker's own failures (not actions' non-zero exits)."""
        return [str(entry["error"]) for entry in self._entries() if "error" in entry]

    def _entries(self) -> list[dict[str, Any]]:
        if not self.worker_log.is_file():
            return []
        lines = self.worker_log.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]


def _postgres_dsn() -> str:
    return os.environ.get("NIGHTLY_TEST_POSTGRES_DSN") or POSTGRES_DSN


def _psycopg2() -> Any:
    try:
        return importlib.import_module("psycopg2")
    except ImportError:
        pytest.fail(
            "psycopg2 is not installed (BuildGrid's SQL scheduler needs it): "
            "run `.venv/bin/pip install psycopg2-binary`"
        )


def _admin(psycopg2: Any, statement: str) -> None:
    """One statement on the maintenance database, outside a transaction (CREATE/DROP DATABASE)."""
    dsn = _postgres_dsn()
    try:
        connection = psycopg2.connect(dsn)
    except psycopg2.OperationalError as exc:
        pytest.fail(f"PostgreSQL is unreachable ({dsn}; set NIGHTLY_TEST_POSTGRES_DSN): {exc}".strip())
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(statement)
    finally:
        connection.close()


def _database_url(database: str) -> str:
    params = dict(part.split("=", 1) for part in _postgres_dsn().split())
    user = params.get("user", "postgres")
    host, port = params.get("host", LOOPBACK), params.get("port", "5432")
    return f"postgresql+psycopg2://{user}@{host}:{port}/{database}"


@contextmanager
def _scheduler_database(bgd: str, root: Path) -> Iterator[str]:
    """A fresh database `nightly_bgd_<hex>` with BuildGrid's tables; its SQLAlchemy URL. Dropped
    at the end, connections left over by a killed server included."""
    psycopg2 = _psycopg2()
    database = f"nightly_bgd_{secrets.token_hex(6)}"
    _admin(psycopg2, f"CREATE DATABASE {database}")
    try:
        url = _database_url(database)
        migrate = subprocess.run(
            [bgd, "migrate", "apply", url], cwd=root, capture_output=True, text=True, check=False
        )
        if migrate.returncode != 0:
            raise RuntimeError(f"`bgd migrate apply {url}` failed:\n{migrate.stdout}{migrate.stderr}")
        yield url
    finally:
        _admin(psycopg2, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


@contextmanager
def running_buildgrid_execution(root: Path, *, bots: int = WORKER_BOTS) -> Iterator[BuildGridExecution]:
    """BuildGrid with remote execution under `root` (config, CAS, logs, the worker's scratch) and
    its worker, for the block; everything is stopped and the database dropped after it.

    Fails the test if `bgd` or psycopg2 is missing or PostgreSQL is unreachable."""
    bgd = _bgd()
    root.mkdir(parents=True, exist_ok=True)
    with _scheduler_database(bgd, root) as database_url, ExitStack() as stack:
        address = f"{LOOPBACK}:{free_port()}"
        config = _EXECUTION_CONFIG.format(
            address=address, database_url=database_url, cas=root / "cas", instance=INSTANCE
        )
        process, log_path = _launch(bgd, root, address, config)
        stack.callback(stop_process, process, STOP_TIMEOUT_S)
        worker_log = root / "worker.jsonl"
        worker = _start_worker(address, root, worker_log, bots)
        stack.callback(stop_process, worker, STOP_TIMEOUT_S)  # first: its calls cancelled, not refused
        yield BuildGridExecution(
            url=f"grpc://{address}",
            instance_name=INSTANCE,
            log_path=log_path,
            worker_log=worker_log,
            database=database_url.rsplit("/", 1)[1],
        )


def _start_worker(address: str, root: Path, worker_log: Path, bots: int) -> subprocess.Popen[bytes]:
    """The worker (`python -m nightly_assets_tests.peers.bazel_worker`), once its bots started."""
    output = root / "worker.out"
    command = [
        sys.executable, "-m", "nightly_assets_tests.peers.bazel_worker",
        "--address", address, "--instance", INSTANCE, "--root", str(root / "worker"),
        "--log", str(worker_log), "--bots", str(bots), "--parent-pid", str(os.getpid()),
    ]  # fmt: skip
    with output.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=_REPO_ROOT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if worker_log.is_file() and '"started"' in worker_log.read_text():
            return process
        time.sleep(0.1)
    stop_process(process, STOP_TIMEOUT_S)
    raise RuntimeError(f"the BuildGrid worker did not start (exit {process.returncode}):\n{_tail(output)}")


@pytest.fixture(scope="session", name="buildgrid_execution")
def buildgrid_execution_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BuildGridExecution]:
    """A BuildGrid remote executor (scheduler in PostgreSQL, a worker running the actions) for the
    session; stopped, and its database dropped, at its end."""
    with running_buildgrid_execution(tmp_path_factory.mktemp("buildgrid-execution")) as grid:
        yield grid
