"""TPU VM lifetime against test time per run (overhead ratio), with the fake's simulated provisioning delay.

Each run goes through `TpuVmResource.run_suite` as the `tests_tpu` stage does: a fresh node from the
real TpuClient (REST) on the test peers' fake TPU API, the suite over SSH on a loopback sshd (the
"VM"), its files fetched, the node deleted. The suite is pytest with one test that sleeps
BENCH_TPU_SUITE_S seconds (default 3); a session fixture writes the suite's own elapsed time to a
timing JSON. Test time is that figure; lifetime is the outcome's (create requested -> delete
confirmed). Runs BENCH_TPU_REPEATS times (default 2) with provisioning delays 0 s and
BENCH_TPU_PROVISION_S (default 2). Needs /usr/sbin/sshd (openssh-server).
"""

from __future__ import annotations

import getpass
import json
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from nightly_assets.tpu import TpuSuite, TpuTarget, TpuVmResource
from nightly_assets_tests.peers import sshd as sshd_peer
from nightly_assets_tests.peers.process import stop_process
from nightly_assets_tests.peers.tpu_api import FakeTpuApi

CATALOG = Path(__file__).parents[1] / "nightly_assets" / "defs" / "tpu" / "defs.yaml"
NIGHT = "2026-11-21"
SUITE_SOURCE = """
import json, os, time
import pytest

@pytest.fixture(scope="session", autouse=True)
def timing():
    started = time.monotonic()
    yield
    with open("test_timing.json", "w") as handle:
        json.dump({"elapsed_seconds": time.monotonic() - started}, handle)

def test_sleeps():
    time.sleep(float(os.environ["SUITE_SLEEP_S"]))
"""


class _Skip(Exception):
    """No sshd: the benchmark prints why and measures nothing."""


@contextmanager
def _peers(tmp: Path) -> Iterator[tuple[FakeTpuApi, sshd_peer.Sshd]]:
    """The fake TPU API and the sshd that trusts its READY nodes' keys, as the test fixtures pair them."""
    if not sshd_peer.SSHD.exists():
        raise _Skip(f"{sshd_peer.SSHD} not found (apt-get install -y openssh-server)")
    api = FakeTpuApi(authorized_keys=tmp / "authorized_keys").start()
    try:
        try:
            server = sshd_peer.start_sshd(tmp / "sshd", tmp / "authorized_keys")
        except pytest.fail.Exception as exc:
            raise _Skip(f"sshd did not start: {exc}") from None
        api.host_keys = {"ssh-ed25519": server.host_key_b64}
        try:
            yield api, server
        finally:
            server.drop_sessions()
            stop_process(server.process, grace_s=5)
    finally:
        api.stop()


def _resource(api: FakeTpuApi, server: sshd_peer.Sshd, tmp: Path) -> TpuVmResource:
    """Configured as the tests' `make_vms` fixture does."""
    return TpuVmResource(
        project="test-project",
        api_endpoint=api.url,
        credentials="anonymous",
        ssh_user=getpass.getuser(),
        ssh_port=server.port,
        ready_timeout_s="60",
        poll_interval_s="0.1",
        delete_timeout_s="10",
        api_timeout_s=10.0,
        ssh_connect_timeout_s="5",
        remote_root=str(tmp / "vm"),
    )


def _suite(suite_file: Path, sleep_s: float) -> TpuSuite:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=junit.xml"]
    return TpuSuite(
        argv=[*argv, "tests/test_suite.py"],
        junit_file="junit.xml",
        timing_file="test_timing.json",
        uploads={"tests/test_suite.py": suite_file},
        env={"SUITE_SLEEP_S": str(sleep_s)},
        timeout_s=sleep_s + 120,
    )


def _target() -> TpuTarget:
    """The catalog's first TPU target (v6e-1), as the stage asset builds it."""
    first = yaml.safe_load(CATALOG.read_text())["attributes"]["targets"][0]
    return TpuTarget.from_params(first["params"], target=first["name"])


def _run(
    resource: TpuVmResource, api: FakeTpuApi, target: TpuTarget, suite: TpuSuite, out_dir: Path
) -> tuple[float, float]:
    """One run: (VM lifetime, the suite's own elapsed time), after checking it ended cleanly."""
    outcome = resource.run_suite(target, suite, run_id=str(uuid.uuid4()), night=NIGHT, out_dir=out_dir)
    if not outcome.completed or outcome.exit_code != 0 or outcome.timing_path is None:
        raise RuntimeError(
            f"TPU run did not complete: {outcome.reason} {outcome.detail} (exit {outcome.exit_code})"
        )
    if api.node_names():
        raise RuntimeError(f"nodes left in the fake TPU API after the run: {api.node_names()}")
    return outcome.lifetime_s, float(json.loads(outcome.timing_path.read_text())["elapsed_seconds"])


def main() -> dict[str, float]:
    sleep_s = float(os.environ.get("BENCH_TPU_SUITE_S", "3"))
    delays = (0.0, float(os.environ.get("BENCH_TPU_PROVISION_S", "2")))
    repeats = int(os.environ.get("BENCH_TPU_REPEATS", "2"))
    print(f"TPU VM per run: lifetime vs the suite's own time (a {sleep_s:g} s test, {repeats} runs each)")
    ratios: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp, _peers(Path(tmp)) as (api, server):
            suite_file = Path(tmp) / "src" / "test_suite.py"
            suite_file.parent.mkdir()
            suite_file.write_text(SUITE_SOURCE)
            resource, target = _resource(api, server, Path(tmp)), _target()
            print("  provisioning  run  lifetime      test  overhead  lifetime/test")
            for delay in delays:
                api.provisioning_delay_s = delay
                runs = []
                for i in range(repeats):
                    out_dir = Path(tmp) / "out" / f"{delay:g}-{i}"
                    lifetime, test = _run(resource, api, target, _suite(suite_file, sleep_s), out_dir)
                    runs.append(lifetime / test)
                    print(
                        f"  {delay:10.1f} s  {i + 1:3d}  {lifetime:6.2f} s  {test:6.2f} s"
                        f"  {lifetime - test:6.2f} s  {lifetime / test:11.2f}x"
                    )
                ratios[f"tpu lifetime/test ({delay:g}s provisioning)"] = statistics.median(runs)
    except _Skip as exc:
        print(f"  skipped: {exc}")
        return {}
    return ratios


if __name__ == "__main__":
    main()
