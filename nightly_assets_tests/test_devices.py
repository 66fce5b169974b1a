"""GPU probing and hand-out against fake nvidia-smi / amd-smi / rocm-smi replaying recorded hosts
(real subprocesses; fake_gpus.py), and GPU leases held by separate processes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nightly_assets.devices.gpus import Gpu, HostGpus
from nightly_assets.devices.leases import GpuLeases, GpuLeaseTimeout, Holder, process_start
from nightly_assets.devices.probe import VISIBILITY_VARIABLES, probe_gpus, visible_devices_env
from nightly_assets_tests.fake_gpus import fake_gpu_host, install_fake_gpu_tools, recorded_hosts

REPO = Path(__file__).resolve().parents[1]
A100_UUIDS = [
    "GPU-1c6e7b2a-84f0-2d39-5a1e-9b3c0f7d6e21",
    "GPU-8a4d2f9e-13b7-6c50-e2a8-47f1d0b9c364",
    "GPU-e5b07c13-9f62-48ad-3c17-b20e8d4a5f96",
    "GPU-4f91a3d8-2c6e-7b05-d8f3-1a6c9e2b0745",
    "GPU-9d2c5e70-b418-3fa6-87c2-5e0d1f9a3b68",
    "GPU-27e8b4f1-6d93-0c5a-f1b7-8c42a6e9d013",
    "GPU-b3f60a9c-5e27-4d18-a69e-3d7b1c0f8e52",
    "GPU-60a1d7e4-c83b-9f2e-4b06-e9f53a7c1d28",
]
MIG_SLICES = ["MIG-5f3a9c1e-2b7d-5e84-a0c6-9d1f4b8e2a73", "MIG-b81e4d07-6c3a-59f2-8d15-e2a7c0f96b34"]

# host -> vendor, count, model, MiB per device, driver, runtime, MIG
EXPECTED = {
    "h100x1": ("nvidia", 1, "NVIDIA H100 80GB HBM3", 81559, "580.159.04", "CUDA 13.0", False),
    "h100x1_driver_upgrade": ("nvidia", 1, "NVIDIA H100 80GB HBM3", 81559, "590.44.01", "CUDA 13.1", False),
    "h200x1": ("nvidia", 1, "NVIDIA H200", 143771, "580.159.03", "CUDA 13.0", False),
    "l40x2": ("nvidia", 2, "NVIDIA L40", 46068, "550.54.15", "CUDA 12.4", False),
    "a100x8": ("nvidia", 8, "NVIDIA A100-SXM4-80GB", 81920, "550.54.15", "CUDA 12.4", False),
    "a100_mig": ("nvidia", 2, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 20096, "550.54.15", "CUDA 12.4", True),
    "mi300x8": ("amd", 8, "AMD Instinct MI300X", 196592, "6.12.12", "ROCm 6.4.1", False),
}


def host_env(monkeypatch, tmp_path, host: str, **visibility: str) -> dict[str, str]:
    """The fake host on PATH, and an explicit env holding only PATH, ROCM_PATH and `visibility`."""
    fake_gpu_host(monkeypatch, tmp_path, host)
    env = {"PATH": os.environ["PATH"], **visibility}
    if "ROCM_PATH" in os.environ:
        env["ROCM_PATH"] = os.environ["ROCM_PATH"]
    return env


def write_tool(folder: Path, name: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(f"#!{sys.executable}\n{textwrap.dedent(body)}")
    (folder / name).chmod(0o755)


# -- what each recorded host offers ------------------------------------------------------------------


def test_every_recorded_host_is_checked():
    assert set(recorded_hosts()) == set(EXPECTED) | {"broken"}


@pytest.mark.parametrize("host", sorted(EXPECTED))
def test_probe_counts_and_describes_each_recorded_host(monkeypatch, tmp_path, host):
    fake_gpu_host(monkeypatch, tmp_path, host)
    vendor, count, model, memory, driver, runtime, mig = EXPECTED[host]

    found = probe_gpus()

    assert (found.vendor, found.count, found.driver, found.runtime, found.problem) == (
        vendor,
        count,
        driver,
        runtime,
        "",
    )
    facts = found.facts()
    assert (facts.vendor, facts.model, facts.count, facts.memory_mib, facts.mig) == (
        vendor,
        model,
        count,
        memory,
        mig,
    )
    assert (facts.driver, facts.runtime, facts.devices) == (driver, runtime, found.ids())
    assert found.ids() == (MIG_SLICES if mig else [str(i) for i in range(count)])


def test_nvidia_gpus_carry_their_uuids(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "a100x8")
    assert [gpu.uuid for gpu in probe_gpus().gpus] == A100_UUIDS


def test_mig_slices_are_the_devices_with_their_profile_and_memory(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "a100_mig")
    assert probe_gpus().gpus == tuple(
        Gpu(id=uuid, uuid=uuid, name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", memory_mib=20096, mig=True)
        for uuid in MIG_SLICES
    )


def test_amd_gpus_carry_the_uuids_rocr_accepts(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "mi300x8")
    gpus = probe_gpus().gpus
    assert [gpu.uuid for gpu in gpus[:2]] == ["GPU-80a39d1e3bfe5a21", "GPU-4c17e6b09a2d5f83"]


def test_rocm_smi_alone_reports_what_amd_smi_does(monkeypatch, tmp_path):
    bin_dir = fake_gpu_host(monkeypatch, tmp_path, "mi300x8")
    with_amd_smi = probe_gpus()
    (bin_dir / "amd-smi").unlink()  # an older ROCm: rocm-smi only; the version from $ROCM_PATH

    assert probe_gpus() == with_amd_smi


def test_rocm_smi_answers_when_amd_smi_fails(monkeypatch, tmp_path):
    bin_dir = fake_gpu_host(monkeypatch, tmp_path, "mi300x8")
    write_tool(bin_dir, "amd-smi", "import sys; print('ERROR: amdsmi failed to initialize'); sys.exit(1)")
    found = probe_gpus()
    assert (found.vendor, found.count, found.runtime, found.problem) == ("amd", 8, "ROCm 6.4.1", "")


def test_rocm_version_unknown_without_a_readable_version_file(monkeypatch, tmp_path):
    bin_dir = fake_gpu_host(monkeypatch, tmp_path, "mi300x8")
    (bin_dir / "amd-smi").unlink()
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm-here"))
    found = probe_gpus()
    assert (found.count, found.driver, found.runtime) == (8, "6.12.12", "")


# -- visibility variables ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        ("3,1", ["3", "1"]),
        (" 4 , 6", ["4", "6"]),
        ("", []),
        ("-1", []),
        ("-1,0", []),
        ("2,foo,3", ["2"]),  # the list stops at the first entry that names no device
        ("1,9,2", ["1"]),
        ("0,0,1", ["0"]),
        ("00,+1", ["0", "1"]),  # indices read as strtol reads them (seen with CUDA 13)
        ("0x2", ["0"]),
        (A100_UUIDS[5], ["5"]),
        ("GPU-9d2c5e70", ["4"]),  # a UUID prefix
        ("6,GPU-1c6e7b2a", ["6", "0"]),
        ("GPU-", []),  # a prefix of every GPU names none
        ("9d2c5e70-b418", []),  # a UUID without GPU- is no device
        ("GPU-ffffffff", []),
    ],
)
def test_cuda_visible_devices_narrows_like_cuda(monkeypatch, tmp_path, value, ids):
    env = host_env(monkeypatch, tmp_path, "a100x8", CUDA_VISIBLE_DEVICES=value)
    host = probe_gpus(env)
    assert host.ids() == ids
    # A value that leaves no card is named, not a silent collect-only night.
    named = f"CUDA_VISIBLE_DEVICES={value!r} names none of this host's 8 GPUs (expected indices 0-7"
    assert host.problem.startswith(named) if not ids else host.problem == ""


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        ("0", MIG_SLICES),  # a GPU running MIG stands for its slices
        ("GPU-d7a03e5b", MIG_SLICES),
        ("MIG-b81e4d07", MIG_SLICES[1:]),
        (f"{MIG_SLICES[1]},{MIG_SLICES[0]}", MIG_SLICES[::-1]),
        ("MIG-", []),  # ambiguous
        ("1", []),
    ],
)
def test_cuda_visible_devices_names_mig_slices(monkeypatch, tmp_path, value, ids):
    env = host_env(monkeypatch, tmp_path, "a100_mig", CUDA_VISIBLE_DEVICES=value)
    assert probe_gpus(env).ids() == ids


def test_a_mig_prefixed_gpu_uuid_selects_that_gpu_as_cuda_13_does(monkeypatch, tmp_path):
    env = host_env(
        monkeypatch, tmp_path, "h100x1", CUDA_VISIBLE_DEVICES="MIG-726a834d-a647-9ff1-e90e-912c6b30335b"
    )
    assert probe_gpus(env).ids() == ["0"]


@pytest.mark.parametrize(
    ("visibility", "ids"),
    [
        ({"ROCR_VISIBLE_DEVICES": "1,3,5"}, ["1", "3", "5"]),
        ({"ROCR_VISIBLE_DEVICES": "GPU-a7c51e84b2f9036d,2"}, ["6", "2"]),
        ({"ROCR_VISIBLE_DEVICES": "GPU-A7C51E84B2F9036D"}, ["6"]),
        ({"ROCR_VISIBLE_DEVICES": "1,8,2"}, ["1"]),
        ({"ROCR_VISIBLE_DEVICES": ""}, []),
        # HIP counts within what ROCr left
        ({"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "2,0"}, ["6", "4"]),
        ({"ROCR_VISIBLE_DEVICES": "4,5", "HIP_VISIBLE_DEVICES": "2"}, []),
        ({"HIP_VISIBLE_DEVICES": "3"}, ["3"]),
        ({"CUDA_VISIBLE_DEVICES": "5,1"}, ["5", "1"]),  # HIP reads it where HIP_VISIBLE_DEVICES is unset
        ({"CUDA_VISIBLE_DEVICES": "5,1", "HIP_VISIBLE_DEVICES": "0"}, ["0"]),
    ],
)
def test_rocr_then_hip_visible_devices_narrow_amd_gpus(monkeypatch, tmp_path, visibility, ids):
    env = host_env(monkeypatch, tmp_path, "mi300x8", **visibility)
    host = probe_gpus(env)
    assert host.ids() == ids
    assert ("names none of this host's 8 GPUs" in host.problem) == (ids == []), host.problem
    assert all(f"{name}={value!r}" in host.problem for name, value in visibility.items()) or ids


def test_visible_devices_env_for_nvidia_names_nvidia_smi_indices():
    assert visible_devices_env("nvidia", ["5", "2"]) == {
        "CUDA_VISIBLE_DEVICES": "5,2",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert visible_devices_env("nvidia", [])["CUDA_VISIBLE_DEVICES"] == "-1"


def test_visible_devices_env_for_amd_picks_physical_cards_and_resets_hip():
    assert visible_devices_env("amd", ["6", "1"]) == {
        "ROCR_VISIBLE_DEVICES": "6,1",
        "HIP_VISIBLE_DEVICES": "0,1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GPU_DEVICE_ORDINAL": "0,1",
    }
    assert set(visible_devices_env("amd", []).values()) == {"-1"}


def test_visible_devices_env_names_only_visibility_variables():
    for vendor, ids in (("nvidia", ["0"]), ("amd", ["0"]), ("amd", []), ("none", [])):
        assert set(visible_devices_env(vendor, ids)) <= set(VISIBILITY_VARIABLES)  # type: ignore[arg-type]


def test_visible_devices_env_refuses_devices_of_a_host_without_gpus():
    assert visible_devices_env("none", []) == {}
    with pytest.raises(ValueError, match=r"\['0'\]"):
        visible_devices_env("none", ["0"])


@pytest.mark.parametrize(
    ("host", "ids"),
    [
        ("a100x8", ["5", "2"]),
        ("a100_mig", MIG_SLICES[1:]),
        ("mi300x8", ["6", "1"]),
        ("mi300x8", []),
        ("l40x2", []),
    ],
)
def test_a_child_given_visible_devices_env_sees_exactly_its_devices(monkeypatch, tmp_path, host, ids):
    # The orchestrator's own narrowing must not leak into what the child sees.
    inherited = {"ROCR_VISIBLE_DEVICES": "7,6,5,4,3,2,1,0", "CUDA_VISIBLE_DEVICES": "1"}
    vendor = EXPECTED[host][0]
    handed = {**inherited, **visible_devices_env(vendor, ids)}  # type: ignore[arg-type]
    env = host_env(monkeypatch, tmp_path, host, **handed)
    assert probe_gpus(env).ids() == ids


# -- failures: counted as no GPU, with the reason ----------------------------------------------------


def test_a_broken_driver_gives_no_gpus_and_says_why(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "broken")
    found = probe_gpus()
    assert (found.vendor, found.count) == ("nvidia", 0)
    assert "nvidia-smi --query-gpu=" in found.problem and "exited with 9" in found.problem
    assert "couldn't communicate with the NVIDIA driver" in found.problem


def test_no_gpu_tool_on_path_is_a_host_without_gpus(tmp_path):
    (tmp_path / "bin").mkdir()
    assert probe_gpus({"PATH": str(tmp_path / "bin")}) == HostGpus("none", (), "", "")


def test_a_hanging_tool_times_out_and_is_named(tmp_path):
    write_tool(tmp_path / "bin", "nvidia-smi", "import time; time.sleep(60)")
    started = time.monotonic()
    found = probe_gpus({"PATH": str(tmp_path / "bin")}, timeout_s=1)
    assert time.monotonic() - started < 15
    assert found.count == 0 and "nvidia-smi --query-gpu=" in found.problem and "timed out" in found.problem


def test_output_that_cannot_be_read_is_named(tmp_path):
    write_tool(tmp_path / "bin", "nvidia-smi", "print('GPU 0 is fine, trust me')")
    found = probe_gpus({"PATH": str(tmp_path / "bin")})
    assert found.count == 0
    assert "`nvidia-smi --query-gpu=" in found.problem and "GPU 0 is fine, trust me" in found.problem


def test_amd_smi_printing_no_json_is_named(tmp_path):
    write_tool(tmp_path / "bin", "amd-smi", "print('AMDSMI Tool: 25.4.2 | ROCm version: 6.4.1')")
    found = probe_gpus({"PATH": str(tmp_path / "bin")})
    assert (found.vendor, found.count) == ("amd", 0)
    assert "`amd-smi list -e --json` printed no JSON" in found.problem


def test_the_fake_tools_refuse_arguments_nobody_recorded(tmp_path):
    bin_dir = install_fake_gpu_tools(tmp_path / "bin", "h100x1")
    done = subprocess.run(
        [bin_dir / "nvidia-smi", "--query-gpu=index,name", "--format=csv"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "--query-gpu=index,name" in done.stderr
    assert not (bin_dir / "amd-smi").exists()


def test_fake_gpu_host_hides_inherited_visibility(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    fake_gpu_host(monkeypatch, tmp_path, "h200x1")
    assert probe_gpus().ids() == ["0"]


# -- facts and their baseline keys ----------------------------------------------------------------------


def test_facts_of_a_hand_out_describe_only_those_devices(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "a100x8")
    facts = probe_gpus().facts(["3", "5"], frameworks={"torch": "2.11.0"})
    assert (facts.count, facts.devices, facts.memory_mib) == (2, ["3", "5"], 81920)
    assert (
        facts.describe() == "2x NVIDIA A100-SXM4-80GB (81920 MiB), driver 550.54.15, CUDA 12.4; torch 2.11.0"
    )


def test_facts_of_mixed_cards_join_the_models_and_take_the_smallest_memory():
    host = HostGpus(
        "nvidia",
        (
            Gpu("0", "GPU-a", "NVIDIA L40", 46068, False),
            Gpu("1", "GPU-b", "NVIDIA H100 80GB HBM3", 81559, False),
        ),
        "550.54.15",
        "CUDA 12.4",
    )
    facts = host.facts(["1", "0"])
    assert (facts.model, facts.memory_mib) == ("NVIDIA H100 80GB HBM3 + NVIDIA L40", 46068)
    with pytest.raises(ValueError, match=r"'7'.*\['0', '1'\]"):
        host.facts(["7"])


def test_the_same_configuration_on_other_cards_keeps_its_baseline_key(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "a100x8")
    host = probe_gpus()
    first, last = host.facts(["0"]), host.facts(["7"])
    assert first.devices != last.devices and first.key() == last.key()


def test_a_driver_upgrade_starts_a_new_baseline_and_says_so(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path / "before", "h100x1")
    before = probe_gpus().facts(frameworks={"torch": "2.11.0"})
    fake_gpu_host(monkeypatch, tmp_path / "after", "h100x1_driver_upgrade")
    after = probe_gpus().facts(frameworks={"torch": "2.11.0"})

    assert before.key() != after.key()
    assert after.changes_from(before) == ["driver 580.159.04 -> 590.44.01", "runtime CUDA 13.0 -> CUDA 13.1"]
    assert (
        after.describe() == "1x NVIDIA H100 80GB HBM3 (81559 MiB), driver 590.44.01, CUDA 13.1; torch 2.11.0"
    )


def test_a_stage_handed_no_gpu_keeps_its_key_across_driver_upgrades(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path / "before", "h100x1")
    before = probe_gpus().facts([])
    fake_gpu_host(monkeypatch, tmp_path / "after", "h100x1_driver_upgrade")
    after = probe_gpus().facts([])
    assert (after.vendor, after.count) == ("none", 0) and after.key() == before.key()


# -- leases -------------------------------------------------------------------------------------------

HOLDER = """
import sys
from pathlib import Path
from nightly_assets.devices.leases import GpuLeases, GpuLeaseTimeout
from nightly_assets.devices.probe import probe_gpus

lock_dir, count, owner, timeout_s = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
try:
    leases = GpuLeases(lock_dir)
    with leases.hold(probe_gpus(), count, owner=owner, timeout_s=timeout_s, poll_s=0.05) as lease:
        print("holding " + ",".join(lease.ids), flush=True)
        sys.stdin.readline()  # until the test lets go
except GpuLeaseTimeout as exc:
    print(f"timeout: {exc}", flush=True)
    sys.exit(3)
"""


def start_holder(lock_dir: Path, count: int, owner: str, timeout_s: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_dir), str(count), owner, str(timeout_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def said(holder: subprocess.Popen[str], within_s: float = 120) -> str:  # a loaded 2-core machine
    assert holder.stdout is not None
    ready, _, _ = select.select([holder.stdout], [], [], within_s)
    assert ready, f"the holder said nothing in {within_s} s"
    return holder.stdout.readline().strip()


def let_go(*holders: subprocess.Popen[str]) -> None:
    for holder in holders:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=30)


def test_two_processes_holding_one_card_each_get_different_cards_and_a_third_waits_for_them(
    monkeypatch, tmp_path
):
    fake_gpu_host(monkeypatch, tmp_path, "l40x2")
    locks = tmp_path / "locks"
    first = start_holder(locks, 1, "demo/tests_e2e_gpu_1 2026-11-03 cpu run abc123", 30)
    second = start_holder(locks, 1, "demo/tests_e2e_gpu_2 2026-11-03 cpu run abc123", 30)
    try:
        assert {said(first), said(second)} == {"holding 0", "holding 1"}
        third = start_holder(locks, 1, "demo/benchmarks_gpu 2026-11-03 cpu run abc123", 1.0)
        output, _ = third.communicate(timeout=60)
        assert third.returncode == 3, output
        assert "1 of 2 nvidia GPUs ['0', '1'] did not come free in 1 s" in output
        assert "demo/tests_e2e_gpu_1 2026-11-03 cpu run abc123 (pid" in output
        assert "demo/tests_e2e_gpu_2 2026-11-03 cpu run abc123 (pid" in output
    finally:
        let_go(first, second)


def test_a_killed_holder_releases_its_cards(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "l40x2")
    locks = tmp_path / "locks"
    first = start_holder(locks, 2, "first", 30)
    assert said(first) == "holding 0,1"  # before the waiter starts: else it may take a card first
    waiter = start_holder(locks, 1, "waiter", 30)
    try:
        assert waiter.stdout is not None
        assert select.select([waiter.stdout], [], [], 0.5)[0] == [], "the waiter got a held card"
        first.kill()
        assert said(waiter) == "holding 0"
    finally:
        let_go(first, waiter)


NIGHT = """
import sys
from pathlib import Path
from nightly_assets.devices.leases import GpuLeases
from nightly_assets.devices.probe import probe_gpus
from nightly_assets.process import run_command

leases = GpuLeases(Path(sys.argv[1]))
with leases.hold(probe_gpus(), 1, owner="demo_gpu/tests_unit old", timeout_s=30) as lease:
    def started(pid):
        lease.tests_started(pid)
        print(f"tests {pid}", flush=True)

    tests = [sys.executable, "-c", "import time; time.sleep(600)"]
    run_command(tests, pass_fds=lease.fds, on_start=started, timeout_s=600)
"""


def test_a_killed_nights_tests_keep_their_card_until_the_next_holder_ends_them(monkeypatch, tmp_path):
    """The night is SIGKILLed while its suite runs (the suite in a process group of its own lives
    on): the card stays held by the suite, not handed to a second test; the next night's lease ends
    the orphaned suite (TERM) and then takes the card."""
    fake_gpu_host(monkeypatch, tmp_path, "h100x1")
    locks = tmp_path / "locks"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    night = subprocess.Popen(
        [sys.executable, "-c", NIGHT, str(locks)], stdout=subprocess.PIPE, text=True, env=env
    )
    tests_pid = int(said(night).removeprefix("tests "))
    try:
        night.kill()
        night.wait(timeout=30)
        assert process_start(tests_pid) is not None, "the suite ended with the night"
        host, leases = probe_gpus(), GpuLeases(locks)
        lock = leases.lock_path(host, host.gpus[0])
        with lock.open("r+") as probe, pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the suite still holds the card
        logged: list[str] = []
        with leases.hold(
            host, 1, owner="demo_gpu/tests_unit new", timeout_s=60, poll_s=0.1, log=logged.append
        ) as lease:
            assert lease.ids == ["0"]
            assert process_start(tests_pid) is None, "the card was handed out while the old suite ran"
            assert lock.read_text().startswith("demo_gpu/tests_unit new (pid ")
        [ended] = [line for line in logged if "has ended" in line]  # once, beside the wait's own line
        assert f"GPU 0: its holder 'demo_gpu/tests_unit old' (pid {night.pid}) has ended" in ended
        assert f"its tests (process group {tests_pid}) still run on the card" in ended
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(tests_pid, signal.SIGKILL)
        let_go(night)


def test_a_waiter_gets_the_cards_released_and_logs_what_it_waits_for_once(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "l40x2")
    host, leases, logged = probe_gpus(), GpuLeases(tmp_path / "locks"), []

    with leases.hold(host, 2, owner="holder", timeout_s=5) as held:
        waiter_ids: list[str] = []

        def wait_for_one() -> None:
            with leases.hold(host, 1, owner="waiter", timeout_s=10, poll_s=0.02, log=logged.append) as lease:
                waiter_ids.extend(lease.ids)

        waiter = threading.Thread(target=wait_for_one)
        waiter.start()
        time.sleep(0.5)
        assert held.ids == ["0", "1"] and waiter_ids == []
    waiter.join(timeout=10)

    assert waiter_ids == ["0"]
    assert len(logged) == 1  # once a minute, not once a poll
    assert "waiter waits for 1 of 2 GPUs ['0', '1']" in logged[0] and "0: holder (pid" in logged[0]


def test_a_lease_ends_with_its_block(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "h100x1")
    host, leases = probe_gpus(), GpuLeases(tmp_path / "locks")
    with leases.hold(host, 1, owner="one", timeout_s=1) as first:
        pass
    with leases.hold(host, 1, owner="two", timeout_s=1) as second:
        assert first.ids == second.ids == ["0"]
        lock = leases.lock_path(host, host.gpus[0])
        assert lock.name == "nvidia-GPU-726a834d-a647-9ff1-e90e-912c6b30335b.lock"
        assert lock.read_text().startswith("two (pid ")


def test_holding_no_card_takes_nothing(tmp_path):
    with GpuLeases(tmp_path / "locks").hold(
        HostGpus("none", (), "", ""), 0, owner="cpu", timeout_s=0
    ) as lease:
        assert lease.ids == [] and lease.fds == []
    assert not (tmp_path / "locks").exists()


def test_holding_more_cards_than_the_host_has_names_both_numbers(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "l40x2")
    leases = GpuLeases(tmp_path / "locks")
    with (
        pytest.raises(ValueError, match=r"cannot hold 3 GPUs: this host offers 2 nvidia devices"),
        leases.hold(probe_gpus(), 3, owner="greedy", timeout_s=1),
    ):
        pass


def test_a_timeout_in_the_same_process_names_count_cards_and_holders(monkeypatch, tmp_path):
    fake_gpu_host(monkeypatch, tmp_path, "l40x2")
    host, leases = probe_gpus(), GpuLeases(tmp_path / "locks")
    with (
        leases.hold(host, 1, owner="nightly demo/tests_gpu", timeout_s=1) as held,
        pytest.raises(GpuLeaseTimeout) as waited,
        leases.hold(host, 2, owner="benchmarks", timeout_s=0.2, poll_s=0.05),
    ):
        pass
    assert held.ids == ["0"]
    assert str(waited.value).startswith(
        "2 of 2 nvidia GPUs ['0', '1'] did not come free in 0.2 s for benchmarks"
    )
    assert "held by: 0: nightly demo/tests_gpu (pid " in str(waited.value)


def test_only_the_tests_of_a_holder_known_to_have_ended_are_ever_ended() -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()
    tests = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        me, started = os.getpid(), process_start(tests.pid)
        assert started is not None
        assert Holder("gone", ended.pid, 12345, tests.pid, started).stale_tests() == tests.pid
        assert Holder("alive", me, process_start(me), tests.pid, started).stale_tests() is None
        # No start times to tell processes apart (no /proc): never end what may be alive.
        assert Holder("unknown", ended.pid, None, tests.pid, started).stale_tests() is None
        assert Holder("unknown", ended.pid, 12345, tests.pid, None).stale_tests() is None
        # The tests' pid now names another process (started later): not the holder's tests.
        assert Holder("reused", ended.pid, 12345, tests.pid, started - 1).stale_tests() is None
    finally:
        tests.kill()
        tests.wait()


def test_a_holder_reads_back_as_written_and_keeps_when_it_took_the_card(tmp_path: Path) -> None:
    lock = tmp_path / "nvidia-GPU-x.lock"
    holder = Holder("demo_gpu/tests_unit 2026-11-03 gpu run ab12", 41, 7, since="2026-11-03T03:00:00+00:00")
    lock.write_text(holder.text())
    assert Holder.read(lock) == holder
    lock.write_text("demo_gpu/tests_unit (pid 41, since 2026-11-03T03:00:00+00:00)\n")  # an older version's
    assert Holder.read(lock) is None
