"""Peers shared by the xdist workers of one test run: the first worker to need one starts it, and
the controller stops it when the whole run ends (a worker that finishes early must not stop an
engine that another worker's tests still use). Without xdist the session that started a peer stops
it, as before."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

OWNER_FILE = "started-by-run"
STOP_TIMEOUT_S = 30.0
_registered: list[Path] = []  # the controller's pidfiles to check at the end


def _run_id() -> str | None:
    """This worker's test-run id under xdist, else None (a plain session owns its peers)."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID")


def configure(config: pytest.Config) -> None:
    """In the xdist controller: fix the run id that its workers will carry."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    if getattr(config.option, "testrunuid", None) is None:
        config.option.testrunuid = uuid.uuid4().hex
    config.stash[_RUN_ID] = config.option.testrunuid


_RUN_ID = pytest.StashKey[str]()


def hand_over(pidfile: Path) -> bool:
    """Called by the worker that started the peer whose pid is in `pidfile`: True when the run's
    controller will stop it (the worker must not), False outside xdist (the caller stops it)."""
    run_id = _run_id()
    if run_id is None:
        return False
    (pidfile.parent / OWNER_FILE).write_text(f"{run_id} {pidfile}\n")
    return True


def peers_dir() -> Path:
    """The cache root shared by all peers: ``$NIGHTLY_PEERS_DIR`` or ``/tmp/nightly-peers``."""
    return Path(os.environ.get("NIGHTLY_PEERS_DIR") or "/tmp/nightly-peers")


def stop_owned(config: pytest.Config) -> None:
    """In the controller at the end of the run: stop every peer that one of its workers started."""
    run_id = config.stash.get(_RUN_ID, None)
    if run_id is None:
        return
    for owner in peers_dir().glob(f"*/{OWNER_FILE}"):
        try:
            owner_run, pidfile = owner.read_text().split()
        except (OSError, ValueError):
            continue
        if owner_run != run_id:
            continue
        _terminate(Path(pidfile))
        owner.unlink(missing_ok=True)


def _terminate(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.2)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
