"""The TPU VM resource against the real TpuClient (REST) on a fake TPU API, and a real sshd as the VM.

Every scenario ends with no node left in the fake and an outcome that says why the run ended.
"""

from __future__ import annotations

import base64
import getpass
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from nightly_assets.testing.junit import parse_junit
from nightly_assets.tpu import TpuQuotaError, TpuRunOutcome, TpuSuite, TpuTarget, TpuVmResource, ssh
from nightly_assets.tpu.nodes import label_value, node_id_for
from nightly_assets.tpu.ssh import PID_FILE, remote_command
from nightly_assets_tests.peers.sshd import Sshd
from nightly_assets_tests.peers.tpu_api import FakeTpuApi

CATALOG = Path(__file__).parents[1] / "nightly_assets" / "defs" / "tpu" / "defs.yaml"
RUN_ID = "8f0c6a2e-41d7-4c3e-9a55-0c1d2e3f4a5b"
NIGHT = "2026-11-21"
SUITE_SOURCE = """
import json, os, time
import pytest

@pytest.fixture(scope="session", autouse=True)
def timing():
    started = time.time()
    yield
    with open("test_timing.json", "w") as handle:
        json.dump({"elapsed_seconds": time.time() - started, "commit": os.environ.get("COMMIT", "?")}, handle)

def test_adds():
    assert 1 + 1 == 2

def test_runs_for_a_while():
    print("suite started", flush=True)
    time.sleep(float(os.environ.get("SUITE_SLEEP_S", "0")))
"""


@pytest.fixture
def target() -> TpuTarget:
    """The catalog's v6e-1 target, as the stage asset will build it."""
    catalog = yaml.safe_load(CATALOG.read_text())["attributes"]
    first = catalog["targets"][0]
    return TpuTarget.from_params(first["params"], target=first["name"])


@pytest.fixture
def make_vms(tpu_api: FakeTpuApi, sshd: Sshd, tmp_path: Path):
    def make(**overrides: Any) -> TpuVmResource:
        config: dict[str, Any] = {
            "project": "test-project",
            "api_endpoint": tpu_api.url,
            "credentials": "anonymous",
            "ssh_user": getpass.getuser(),
            "ssh_port": sshd.port,
            "ready_timeout_s": "10",
            "poll_interval_s": "0.1",
            "delete_timeout_s": "10",
            "api_timeout_s": 10.0,
            "ssh_connect_timeout_s": "5",
            "remote_root": str(tmp_path / "vm"),
        }
        return TpuVmResource(**{**config, **overrides})

    return make


def run_a_long_suite(
    vms: TpuVmResource, target: TpuTarget, suite_file: Path, tmp_path: Path, on_start: Callable[[], None]
) -> TpuRunOutcome:
    """A 60-s suite on a VM; `on_start` runs once the suite has started (to cancel it)."""
    return vms.run_suite(
        target,
        pytest_suite(suite_file, sleep_s=60),
        run_id=RUN_ID,
        night=NIGHT,
        out_dir=tmp_path / "out",
        on_output=when_started(on_start),
    )


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "test_suite.py"
    path.parent.mkdir()
    path.write_text(SUITE_SOURCE)
    return path


def pytest_suite(suite_file: Path, sleep_s: float = 0.0, timeout_s: float = 120.0) -> TpuSuite:
    argv = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--junitxml=junit.xml"]
    return TpuSuite(
        argv=[*argv, "tests/test_suite.py"],
        junit_file="junit.xml",
        timing_file="test_timing.json",
        uploads={"tests/test_suite.py": suite_file},
        env={"SUITE_SLEEP_S": str(sleep_s), "COMMIT": "abc123"},
        timeout_s=timeout_s,
    )


def when_started(action: Callable[[], object]) -> Callable[[str], None]:
    """An on_output callback that does `action` once, when the suite says it started."""
    output: list[str] = []
    done = False

    def on_output(text: str) -> None:
        nonlocal done
        output.append(text)
        if not done and "suite started" in "".join(output):
            done = True
            action()

    return on_output


def assert_no_vm_left(api: FakeTpuApi) -> None:
    assert api.node_names() == []
    assert not api.queued
    assert api.authorized_keys is not None and api.authorized_keys.read_text() == ""


def assert_suite_process_gone(vm_root: Path) -> None:
    """The remote suite was stopped, not left running on the (shared) 'VM'.

    A suite stopped before its shell wrote the PID file (a loaded machine, a 2 s timeout) never
    ran; either way no live process may still work in the VM's run folder.
    """
    runs = (vm_root / "nightly-runs").resolve()
    for _ in range(100):
        if not _processes_working_in(runs):
            return
        time.sleep(0.05)
    pytest.fail(f"the suite's processes {_processes_working_in(runs)} still run in {runs}")


def _processes_working_in(folder: Path) -> list[int]:
    alive = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if cwd.is_relative_to(folder) and "zombie" not in _proc_state(int(proc.name)):
            alive.append(int(proc.name))
    return alive


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "zombie"


# -- full runs -------------------------------------------------------------------------------


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_run_creates_a_vm_runs_the_suite_fetches_its_files_and_deletes_the_vm(
    make_vms,
    tpu_api: FakeTpuApi,
    target: TpuTarget,
    suite_file: Path,
    tmp_path: Path,
    caplog,
) -> None:
    caplog.set_level(logging.DEBUG)
    tpu_api.provisioning_delay_s = 0.3
    vm = make_vms().vm(target, run_id=RUN_ID, night=NIGHT, labels={"pipeline": "tpu"})
    with vm:
        assert len(tpu_api.node_names()) == 1
        vm.run(pytest_suite(suite_file), tmp_path / "out")
    outcome = vm.outcome
    assert isinstance(outcome, TpuRunOutcome)

    assert outcome.completed and outcome.reason is None
    assert outcome.exit_code == 0
    report = parse_junit(outcome.junit_path, suite="tpu")  # type: ignore[arg-type]
    assert (report.total, report.count("passed")) == (2, 2)
    assert json.loads(outcome.timing_path.read_text())["commit"] == "abc123"  # type: ignore[union-attr]
    assert "2 passed" in outcome.log_path.read_text()  # type: ignore[union-attr]
    assert outcome.cost_usd > 0 and outcome.lifetime_s > 0
    assert outcome.deleted_at is not None and outcome.deleted_at > outcome.created_at
    assert outcome.cost_usd == pytest.approx(outcome.lifetime_s / 3600 * 0.64, rel=1e-3)
    assert_no_vm_left(tpu_api)

    body = tpu_api.created[0]
    assert body["acceleratorType"] == "v6e-1" and body["runtimeVersion"] == "v2-alpha-tpuv6e"
    assert body["schedulingConfig"] == {"preemptible": True}
    assert body["labels"] == {
        "nightly-assets": "1",
        "nightly-run-id": RUN_ID,
        "nightly-night": NIGHT,
        "pipeline": "tpu",
    }
    user, _, public = body["metadata"]["ssh-keys"].partition(":")
    assert user == getpass.getuser() and public.startswith("ssh-ed25519 AAAA")
    assert ("POST", f"/v2/{vm.node_name}:getGuestAttributes") in tpu_api.requests  # host key pinned

    # The run's private key appears nowhere: not in logs, not in the suite's log, not in the outcome.
    seed = vm._key.private._signing_key.encode()  # type: ignore[union-attr]
    traces = caplog.text + outcome.log_path.read_text() + repr(outcome) + repr(vm._key)  # type: ignore[union-attr]
    assert "PRIVATE KEY" not in traces
    assert seed.hex() not in traces and base64.b64encode(seed).decode()[:20] not in traces


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_queued_resource_run_asks_for_a_spot_tier_and_deletes_it(
    make_vms,
    tpu_api: FakeTpuApi,
    target: TpuTarget,
    suite_file: Path,
    tmp_path: Path,
) -> None:
    tpu_api.queue_delay_s = 0.3
    outcome = make_vms(use_queued_resource=True).run_suite(
        target, pytest_suite(suite_file), run_id=RUN_ID, night=NIGHT, out_dir=tmp_path / "out"
    )
    assert outcome.completed and outcome.exit_code == 0 and outcome.junit_path is not None
    assert tpu_api.created[0]["spot"] == {}
    assert tpu_api.created[0]["tpu"]["nodeSpec"][0]["node"]["labels"]["nightly-assets"] == "1"
    assert any(path.endswith(":getGuestAttributes") for _, path in tpu_api.requests)
    assert_no_vm_left(tpu_api)


# -- runs that end early ---------------------------------------------------------------------


@pytest.mark.tpu
@pytest.mark.ssh
@pytest.mark.parametrize("when", ["scripted_after_ready", "mid_suite"])
def test_a_preempted_vm_is_reported_and_deleted(
    make_vms,
    tpu_api: FakeTpuApi,
    sshd: Sshd,
    target,
    suite_file,
    tmp_path,
    when,
) -> None:
    # The VM goes away with its SSH sessions, as a preempted Compute Engine VM does.
    tpu_api.on_preempt = lambda _name: sshd.drop_sessions()
    on_output = None
    if when == "scripted_after_ready":
        tpu_api.preempt_after_s = 2.0
    else:
        on_output = when_started(lambda: tpu_api.preempt(tpu_api.node_names()[0]))
    outcome = make_vms().run_suite(
        target,
        pytest_suite(suite_file, sleep_s=60),
        run_id=RUN_ID,
        night=NIGHT,
        out_dir=tmp_path / "out",
        on_output=on_output,
    )
    assert outcome.reason == "preempted", outcome.detail
    assert outcome.exit_code is None and outcome.junit_path is None
    assert outcome.cost_usd > 0
    if when == "mid_suite":
        assert "suite started" in outcome.log_path.read_text()  # type: ignore[union-attr]
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_dropped_ssh_connection_is_reported_and_the_vm_deleted(
    make_vms,
    tpu_api: FakeTpuApi,
    sshd: Sshd,
    target,
    suite_file,
    tmp_path,
) -> None:
    outcome = make_vms().run_suite(
        target,
        pytest_suite(suite_file, sleep_s=60),
        run_id=RUN_ID,
        night=NIGHT,
        out_dir=tmp_path / "out",
        on_output=when_started(sshd.drop_sessions),
    )
    assert outcome.reason == "ssh_dropped", outcome.detail
    assert outcome.exit_code is None
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_an_eof_from_paramiko_is_reported_as_a_dropped_connection(
    make_vms,
    tpu_api: FakeTpuApi,
    sshd: Sshd,
    target,
    suite_file,
    tmp_path,
    monkeypatch,
) -> None:
    """paramiko raises a bare EOFError when the peer hangs up mid-message (a transport's saved
    exception, an SFTP read): it is a dropped connection like any other, not an unexplained
    `EOFError:` on the night. The session is really cut; the error is the one paramiko gives."""

    def upload_after_a_drop(sftp, uploads, workdir):
        sshd.drop_sessions()
        raise EOFError()

    monkeypatch.setattr(ssh, "upload", upload_after_a_drop)
    outcome = make_vms().run_suite(
        target, pytest_suite(suite_file), run_id=RUN_ID, night=NIGHT, out_dir=tmp_path / "out"
    )
    assert outcome.reason == "ssh_dropped", outcome.detail
    assert outcome.exit_code is None
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_suite_past_its_timeout_is_stopped_and_the_vm_deleted(
    make_vms,
    tpu_api: FakeTpuApi,
    target,
    suite_file,
    tmp_path,
) -> None:
    outcome = make_vms().run_suite(
        target,
        pytest_suite(suite_file, sleep_s=60, timeout_s=2),
        run_id=RUN_ID,
        night=NIGHT,
        out_dir=tmp_path / "out",
    )
    assert outcome.reason == "timeout" and "2 s timeout" in outcome.detail
    assert outcome.exit_code is None and outcome.junit_path is None
    assert_suite_process_gone(tmp_path / "vm")
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
@pytest.mark.parametrize("interrupt", [dg.DagsterExecutionInterruptedError, KeyboardInterrupt])
def test_a_cancelled_run_still_deletes_its_vm(
    make_vms,
    tpu_api: FakeTpuApi,
    target,
    suite_file,
    tmp_path,
    interrupt,
) -> None:
    def cancel() -> None:
        raise interrupt()

    with pytest.raises(interrupt) as raised:
        run_a_long_suite(make_vms(), target, suite_file, tmp_path, on_start=cancel)
    outcome = raised.value.tpu_outcome  # type: ignore[attr-defined]
    assert outcome.reason == "cancelled" and outcome.deleted_at is not None
    assert len(list((tmp_path / "vm").glob(f"nightly-runs/*/{PID_FILE}"))) == 1  # it had started
    assert_suite_process_gone(tmp_path / "vm")
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_run_stopped_from_another_thread_stops_its_suite_and_deletes_its_vm(
    make_vms, tpu_api: FakeTpuApi, target, suite_file, tmp_path
) -> None:
    """An interrupted sharded night sets each shard VM's stop event from the stage's thread."""
    stop = threading.Event()
    started = time.monotonic()
    outcome = make_vms().run_suite(
        target,
        pytest_suite(suite_file, sleep_s=60),
        run_id=RUN_ID,
        night=NIGHT,
        out_dir=tmp_path / "out",
        on_output=when_started(stop.set),
        stop=stop,
    )
    assert outcome.reason == "cancelled" and outcome.deleted_at is not None, outcome.detail
    assert time.monotonic() - started < 30  # not the suite's 60 s
    assert_suite_process_gone(tmp_path / "vm")
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_node_that_never_gets_ready_is_deleted_after_the_timeout(
    make_vms,
    tpu_api: FakeTpuApi,
    target,
    suite_file,
    tmp_path,
) -> None:
    tpu_api.never_ready = True
    outcome = make_vms(ready_timeout_s="0.5").run_suite(
        target, pytest_suite(suite_file), run_id=RUN_ID, night=NIGHT, out_dir=tmp_path / "out"
    )
    assert outcome.reason == "not_ready"
    assert "was not READY after" in outcome.detail and "CREATING" in outcome.detail
    assert outcome.cost_usd > 0 and outcome.log_path is None
    assert any(method == "DELETE" for method, _ in tpu_api.requests)
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
@pytest.mark.parametrize("where", ["create_call", "create_operation"])
def test_a_quota_error_names_zone_and_accelerator_and_leaves_nothing(
    make_vms,
    tpu_api: FakeTpuApi,
    target,
    suite_file,
    tmp_path,
    where,
) -> None:
    if where == "create_call":
        tpu_api.quota_exhausted = True
    else:
        tpu_api.quota_in_operation = True
    with pytest.raises(TpuQuotaError, match=r"v6e-1 in zone us-central1-b") as raised:
        make_vms(create_retry_s="1").run_suite(
            target, pytest_suite(suite_file), run_id=RUN_ID, night=NIGHT, out_dir=tmp_path
        )
    outcome = raised.value.tpu_outcome  # type: ignore[attr-defined]
    assert outcome.reason == "quota" and "RESOURCE_EXHAUSTED" in outcome.detail
    if where == "create_call":  # refused: nothing was made, nothing is paid for
        assert outcome.cost_usd == 0 and outcome.lifetime_s == 0
        assert "nothing was created" in str(raised.value)
    else:  # the create's operation failed after the node was made: it was deleted, and it cost
        assert "the request had made a node, which is deleted now" in str(raised.value)
        assert "nothing was created" not in str(raised.value)
        assert any(method == "DELETE" for method, _ in tpu_api.requests)
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_create_answered_429_is_asked_again_until_it_goes_through(
    make_vms, tpu_api: FakeTpuApi, target, tmp_path
) -> None:
    tpu_api.rate_limited_creates = 2  # "Too many requests; retry later", twice
    outcome = make_vms(create_retry_s="30").run_suite(
        target, TpuSuite(argv=["true"]), run_id=RUN_ID, night=NIGHT, out_dir=tmp_path / "out"
    )
    assert outcome.completed and outcome.exit_code == 0
    creates = [path for method, path in tpu_api.requests if method == "POST" and path.endswith("/nodes")]
    assert len(creates) == 3 and len(tpu_api.created) == 1
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_429_that_outlasts_the_retry_budget_is_a_quota_error_naming_the_attempts(
    make_vms, tpu_api: FakeTpuApi, target, tmp_path
) -> None:
    tpu_api.rate_limited_creates = 100
    with pytest.raises(TpuQuotaError, match=r"asked \d+ times over 2 s\)\); nothing was created"):
        make_vms(create_retry_s="2").run_suite(
            target, TpuSuite(argv=["true"]), run_id=RUN_ID, night=NIGHT, out_dir=tmp_path / "out"
        )
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_second_interrupt_during_the_delete_waits_for_it(
    make_vms, tpu_api: FakeTpuApi, target, suite_file, tmp_path, caplog
) -> None:
    """Ctrl-C, then Ctrl-C again while the VM is being deleted: the delete finishes first."""
    tpu_api.delete_answer_delay_s = 1.5
    # The second Ctrl-C once the delete call is in flight (a fixed delay after the first can land
    # before the delete starts on a loaded machine); the fake answers it 1.5 s later.
    interrupted = threading.Event()

    def interrupt_once() -> None:
        if not interrupted.is_set():
            interrupted.set()
            signal.raise_signal(signal.SIGINT)

    tpu_api.on_delete = interrupt_once

    def cancel_then_interrupt_again() -> None:
        raise KeyboardInterrupt

    with pytest.raises(BaseException) as raised:
        run_a_long_suite(make_vms(), target, suite_file, tmp_path, on_start=cancel_then_interrupt_again)
    assert raised.type is KeyboardInterrupt
    outcome = raised.value.tpu_outcome  # type: ignore[attr-defined]
    assert outcome.reason == "cancelled" and outcome.deleted_at is not None and outcome.delete_error is None
    assert "SIGINT received while deleting TPU node" in caplog.text
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_vm_with_another_host_key_than_its_node_published_is_refused(
    make_vms,
    tpu_api: FakeTpuApi,
    target,
    suite_file,
    tmp_path,
    monkeypatch,
) -> None:
    other = Ed25519PrivateKey.generate().public_key()
    wire = other.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).split()[1]
    monkeypatch.setattr(tpu_api, "host_keys", {"ssh-ed25519": wire.decode()})
    outcome = make_vms().run_suite(
        target, pytest_suite(suite_file), run_id=RUN_ID, night=NIGHT, out_dir=tmp_path / "out"
    )
    assert outcome.reason == "host_key_mismatch"
    assert not list((tmp_path / "vm").glob("nightly-runs/*"))  # nothing was uploaded
    assert_no_vm_left(tpu_api)


@pytest.mark.tpu
@pytest.mark.ssh
def test_a_delete_that_keeps_failing_keeps_the_results_and_the_sweeper_gets_the_node_later(
    make_vms, tpu_api: FakeTpuApi, target, tmp_path, caplog
) -> None:
    tpu_api.delete_unavailable = True
    suite = TpuSuite(argv=["true"])
    outcome = make_vms(api_timeout_s=0.3, delete_timeout_s="1").run_suite(
        target, suite, run_id="lost-run", night=NIGHT, out_dir=tmp_path / "out"
    )
    assert outcome.completed and outcome.exit_code == 0  # the suite's results stand
    assert outcome.deleted_at is None and "HTTP 503 ServiceUnavailable" in (outcome.delete_error or "")
    assert "may be left running" in caplog.text
    assert tpu_api.node_names() == [outcome.node_name]

    tpu_api.delete_unavailable = False
    assert make_vms().sweep([target.zone], alive_run_ids=[], min_age_s=0) == [outcome.node_name]
    assert_no_vm_left(tpu_api)


# -- quoting ---------------------------------------------------------------------------------


@pytest.mark.tpu
@pytest.mark.ssh
def test_arguments_full_of_shell_metacharacters_arrive_literally(
    make_vms,
    tpu_api: FakeTpuApi,
    target,
    tmp_path,
) -> None:
    marker = tmp_path / "pwned"
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep").write_text("still here")
    weird = [
        f"$(touch {marker}); rm -rf {canary} ",
        f"`touch {marker}`",
        f"; touch {marker} #",
        "~",
        "*",
        "a'b\"c\\d",
        "line\nbreak && echo $HOME | cat > /dev/null",
        "",
    ]
    script = "import json, sys; json.dump(sys.argv[1:], open('argv.json', 'w'))"
    fetch = ["argv.json", str(canary / "keep")]  # relative to the work dir, and absolute
    suite = TpuSuite(argv=[sys.executable, "-c", script, *weird], fetch=fetch, env={"X": "$(id)"})
    # Also the path for nodes that publish no host key: the first key seen is accepted.
    vms = make_vms(check_host_keys=False)
    outcome = vms.run_suite(target, suite, run_id=RUN_ID, night=NIGHT, out_dir=tmp_path / "out")

    assert outcome.completed and outcome.exit_code == 0, outcome.detail
    assert not any(path.endswith(":getGuestAttributes") for _, path in tpu_api.requests)
    assert json.loads(outcome.fetched["argv.json"].read_text()) == weird
    assert not marker.exists()
    assert (canary / "keep").read_text() == "still here"
    assert outcome.fetched[str(canary / "keep")].read_text() == "still here"
    assert_no_vm_left(tpu_api)


def test_a_bad_suite_is_refused_before_any_vm_is_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="suite argv: expected at least the program"):
        TpuSuite(argv=[])
    with pytest.raises(ValueError, match=r"suite upload '../x': expected a relative path"):
        TpuSuite(argv=["true"], uploads={"../x": tmp_path})
    with pytest.raises(ValueError, match=r"suite fetch '/tmp/..': expected an absolute path to a file"):
        TpuSuite(argv=["true"], fetch=["/tmp/.."])
    with pytest.raises(ValueError, match=r"suite fetch: junit.xml named twice"):
        TpuSuite(argv=["true"], junit_file="junit.xml", fetch=["/tmp/junit.xml"])
    with pytest.raises(ValueError, match=r"suite timeout_s"):
        TpuSuite(argv=["true"], timeout_s=0)


def test_the_remote_command_rejects_what_the_shell_would_misread() -> None:
    with pytest.raises(ValueError, match="suite env: 'A;B'"):
        remote_command("w", ["true"], {"A;B": "1"})
    with pytest.raises(ValueError, match="argv"):
        remote_command("w", [], {})
    with pytest.raises(ValueError, match=r"argv\[0\] 'A=1'"):
        remote_command("w", ["A=1"], {"B": "2"})
    line = remote_command("dir with space", ["echo", "$(x)"], {"K": "v w"})
    assert line.endswith("exec env -- 'K=v w' echo '$(x)'")
    assert line.startswith("cd -- 'dir with space' && ")


# -- the sweeper -----------------------------------------------------------------------------


@pytest.mark.tpu
@pytest.mark.ssh
def test_the_sweeper_deletes_this_tools_nodes_whose_run_is_gone(
    make_vms,
    tpu_api: FakeTpuApi,
    target,
) -> None:
    zone = target.zone
    ours = {"nightly-assets": "1", "nightly-night": NIGHT}
    dead_old = tpu_api.add_node(zone, "nightly-dead-old", {**ours, "nightly-run-id": "dead-run"}, age_s=7200)
    alive = tpu_api.add_node(zone, "nightly-alive", {**ours, "nightly-run-id": "alive-run"}, age_s=7200)
    foreign = tpu_api.add_node(zone, "someone-elses", {"team": "research"}, age_s=7200)
    other_zone = tpu_api.add_node(
        "europe-west4-a", "nightly-x", {**ours, "nightly-run-id": "dead"}, age_s=7200
    )
    # A crashed orchestrator's VM (queued resource and node): entered, never exited.
    crashed = make_vms(use_queued_resource=True).vm(target, run_id="Crashed_Run", night=NIGHT)
    crashed.__enter__()

    vms = make_vms()
    first = vms.sweep([zone], alive_run_ids={"alive-run"}, min_age_s=3600)
    assert first == [dead_old]  # the crashed VM is too young to be sure its run is not just starting
    second = vms.sweep([zone], alive_run_ids={"alive-run"}, min_age_s=0)
    assert second == [crashed.node_name]
    assert tpu_api.node_names() == sorted([alive, foreign, other_zone]) and not tpu_api.queued


@pytest.mark.tpu
def test_the_start_of_run_sweep_takes_only_vms_of_runs_this_instance_saw_end(
    make_vms, tpu_api: FakeTpuApi, target, tmp_path
) -> None:
    """Before a TPU stage makes its VM it deletes leftovers at once (no 15-minute wait), but only
    those of runs it knows have ended: another deployment sharing the project keeps its VMs."""
    from nightly_assets.tpu.resources import recently_ended_run_ids

    instance = dg.DagsterInstance.ephemeral(tempdir=str(tmp_path))
    ended = instance.add_run(dg.DagsterRun(job_name="tpu_nightly", status=dg.DagsterRunStatus.FAILURE))
    live = instance.add_run(dg.DagsterRun(job_name="tpu_nightly", status=dg.DagsterRunStatus.STARTED))
    zone, ours = target.zone, {"nightly-assets": "1", "nightly-night": NIGHT}
    left = tpu_api.add_node(zone, "nightly-left", {**ours, "nightly-run-id": label_value(ended.run_id)})
    running = tpu_api.add_node(zone, "nightly-live", {**ours, "nightly-run-id": label_value(live.run_id)})
    elsewhere = tpu_api.add_node(zone, "nightly-prod", {**ours, "nightly-run-id": "unknown"}, age_s=7200)

    swept = make_vms().sweep([zone], [], ended_run_ids=recently_ended_run_ids(instance))
    assert swept == [left]
    assert tpu_api.node_names() == sorted([running, elsewhere])


# -- unit: catalog params, labels ------------------------------------------------------------


def test_the_tpu_timeouts_are_settable_from_the_environment(monkeypatch, tmp_path) -> None:
    from nightly_assets.resources import resources_for

    monkeypatch.setenv("NIGHTLY_TPU_DELETE_TIMEOUT_S", "1200")
    monkeypatch.setenv("NIGHTLY_TPU_SSH_CONNECT_TIMEOUT_S", "45")
    monkeypatch.setenv("NIGHTLY_TPU_CREATE_RETRY_S", "90")
    monkeypatch.setenv("NIGHTLY_TPU_QUEUED", "true")
    monkeypatch.delenv("NIGHTLY_TPU_POLL_S", raising=False)
    with dg.build_resources({"tpu_vms": resources_for("local", tmp_path)["tpu_vms"]}) as resources:
        settings = resources.tpu_vms.settings()
    assert (settings.delete_timeout_s, settings.ssh_connect_timeout_s, settings.create_retry_s) == (
        1200,
        45,
        90,
    )
    assert settings.use_queued_resource is True
    assert settings.poll_interval_s == 10  # unset: the resource's default


def test_target_params_are_checked_and_named() -> None:
    good = {"zone": "us-central1-b", "accelerator_type": "v6e-1", "runtime_version": "v2", "hourly_usd": 1}
    assert TpuTarget.from_params(good).preemptible is True
    with pytest.raises(ValueError, match=r"target 'v6e-1': params.zone must be a non-empty string"):
        TpuTarget.from_params({**good, "zone": ""}, target="v6e-1")
    with pytest.raises(ValueError, match=r"params.preemptible must be true or false, got 'yes'"):
        TpuTarget.from_params({**good, "preemptible": "yes"})
    with pytest.raises(ValueError, match=r"params.hourly_usd must be a number >= 0"):
        TpuTarget.from_params({**good, "hourly_usd": -1})


def test_labels_and_node_ids_follow_gcp_rules() -> None:
    assert label_value("Run_ID/ABC.1 x") == "run_id-abc-1-x"
    assert len(label_value("x" * 100)) == 63
    node_id = node_id_for("Nightly", "8F0C6A2E-41d7/4c3e_9a55", "a1b2c3")
    assert node_id == "nightly-8f0c6a2e-41d7-4c3e-9a55-a1b2c3"
    assert node_id_for("9x", "r", "s").startswith("n-9x-")
    assert len(node_id_for("p" * 80, "r" * 80, "abcdef")) <= 63
