"""A database restart during a night: the warehouse reconnects and retries with backoff, so the
night's stages wait for it instead of failing, and the night ends with its final status; an outage
longer than that leaves nothing `running` for long: the next command ends the night."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from nightly_assets.results import NightKey
from nightly_assets.warehouse.access import WarehouseError
from nightly_assets.warehouse.store import Warehouse
from nightly_assets_tests.cli_nights import start_night_with_a_slow_benchmark, wait_for_the_benchmark
from nightly_assets_tests.peers.mysql import OwnMariaDB

pytestmark = pytest.mark.mysql
KEY = NightKey("demo", dt.date(2026, 11, 3), "cpu")


def restart_after(server: OwnMariaDB, down_s: float) -> threading.Thread:
    """Kill the server now and start it again `down_s` later, in the background."""
    server.kill()

    def back() -> None:
        time.sleep(down_s)
        server.start()

    thread = threading.Thread(target=back)
    thread.start()
    return thread


def test_reads_and_writes_outlive_a_three_second_restart(own_mariadb: OwnMariaDB) -> None:
    store = Warehouse(own_mariadb.url, retry_s=30)
    store.record_night(KEY, run_id="r1", status="running", pins={"repo": "abc"})
    restarting = restart_after(own_mariadb, 3.0)
    started = time.monotonic()
    store.record_stage(KEY, "sources", status="success", runner="local", duration_s=1.0, run_id="r1")
    assert time.monotonic() - started >= 2.5  # it did wait for the server
    assert [s.stage for s in store.stages(KEY)] == ["sources"]
    restarting.join()
    night = store.night(KEY)
    assert night is not None and night.pins == {"repo": "abc"}


def test_an_outage_longer_than_the_budget_is_one_named_error(own_mariadb: OwnMariaDB) -> None:
    store = Warehouse(own_mariadb.url, retry_s=2)
    own_mariadb.kill()
    started = time.monotonic()
    with pytest.raises(WarehouseError, match=r"cannot read from warehouse .*Can't connect to MySQL server"):
        store.nights()
    assert time.monotonic() - started < 10


@pytest.mark.slow
def test_a_night_survives_a_database_restart_and_ends_with_its_status(
    own_mariadb: OwnMariaDB, tmp_path, dagster_home
) -> None:
    marker = f"nightly-outage-{uuid.uuid4().hex}"
    cli = start_night_with_a_slow_benchmark(
        tmp_path,
        marker,
        seconds=2,
        env={"NIGHTLY_WAREHOUSE_URL": own_mariadb.url, "NIGHTLY_WAREHOUSE_RETRY_S": "60"},
    )
    try:
        lines = wait_for_the_benchmark(cli, marker)
        restarting = restart_after(own_mariadb, 3.0)  # the benchmark's results are written meanwhile
        rest, _ = cli.communicate(timeout=300)
        restarting.join()
    finally:
        cli.kill()
    output = "".join(lines) + rest
    assert cli.returncode == 0, output
    assert "retrying in" in output  # a write did meet the outage
    store = Warehouse(own_mariadb.url)
    night = store.night(KEY)
    assert night is not None and night.status == "success", output
    stages = {s.stage: s.status for s in store.stages(KEY)}
    assert set(stages.values()) == {"success"} and len(stages) == 12
    [(night_, value, pins)] = store.benchmark_series(
        "demo", "cpu", "sleep", before=dt.date(2026, 11, 4), limit=1
    )
    assert (night_, value) == (dt.date(2026, 11, 3), 2.0) and pins == night.pins


@pytest.mark.slow
def test_a_night_the_cli_could_not_end_is_ended_by_the_next_command_once_the_warehouse_is_back(
    own_mariadb: OwnMariaDB, tmp_path, dagster_home, nightly_home
) -> None:
    """The warehouse goes down for longer than the night's retry budget: `nightly run` exits 2 and
    the night reads `running` there. Once the warehouse is back, the next command (here `nightly
    status`, no re-run, no daemon) ends it as failed, with the reason."""
    marker = f"nightly-outage-{uuid.uuid4().hex}"
    env = {"NIGHTLY_WAREHOUSE_URL": own_mariadb.url, "NIGHTLY_WAREHOUSE_RETRY_S": "2"}
    cli = start_night_with_a_slow_benchmark(tmp_path, marker, seconds=2, env=env)
    try:
        lines = wait_for_the_benchmark(cli, marker)
        own_mariadb.kill()  # down until the run has ended
        rest, _ = cli.communicate(timeout=300)
    finally:
        cli.kill()
    output = "".join(lines) + rest
    assert cli.returncode == 2, output
    assert "could not be ended" in output and "the next nightly command that reaches the warehouse" in output
    [note] = (nightly_home / "unfinished").glob("*.json")

    own_mariadb.start()
    store = Warehouse(own_mariadb.url)
    night = store.night(KEY)
    assert night is not None and night.status == "running"  # what the outage left
    status = subprocess.run(
        [sys.executable, "-m", "nightly_assets.cli", "status", "--pipeline", "demo"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"nightly: {KEY}: ended as failure" in status.stderr
    assert "the warehouse could not be reached when run" in status.stderr
    assert "2026-11-03  cpu             failure" in status.stdout
    assert "the warehouse could not be reached" in status.stdout  # the night's reason, under it
    night = store.night(KEY)
    assert night is not None and night.status == "failure" and "could not be reached" in (night.detail or "")
    assert "running" not in {s.status for s in store.stages(KEY)}
    assert not note.exists()  # ended once
    store.dispose()
