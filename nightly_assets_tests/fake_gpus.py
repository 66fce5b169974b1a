"""Fake nvidia-smi, amd-smi and rocm-smi for tests: executables that replay what the real tools
printed on a recorded host (data/smi/<host>/, described in its README.md).

Each fake answers only the exact argument lists below, spelled out here rather than imported from
nightly_assets.devices so that a change of the calls we make fails the tests until it is recorded.
Anything else exits 2 naming the arguments. Use:

    def test_night_on_an_h100(monkeypatch, tmp_path):
        fake_gpu_host(monkeypatch, tmp_path, "h100x1")  # probe_gpus() now sees that host
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from nightly_assets.devices.visibility import VISIBILITY_VARIABLES

RECORDINGS = Path(__file__).parent / "data" / "smi"
FAKE_TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi")

# tool -> (arguments, the file of the host's folder that holds what the tool printed)
RECORDED_CALLS: dict[str, list[tuple[list[str], str]]] = {
    "nvidia-smi": [
        (
            [
                "--query-gpu=index,uuid,name,memory.total,driver_version,mig.mode.current",
                "--format=csv,noheader,nounits",
            ],
            "nvidia-smi_query-gpu.txt",
        ),
        ([], "nvidia-smi.txt"),
        (["-L"], "nvidia-smi_-L.txt"),
    ],
    "amd-smi": [
        (["version"], "amd-smi_version.txt"),
        (["list", "-e", "--json"], "amd-smi_list.json"),
        (["static", "--asic", "--vram", "--json"], "amd-smi_static.json"),
    ],
    "rocm-smi": [
        (
            ["--showproductname", "--showmeminfo", "vram", "--showdriverversion", "--showuniqueid", "--json"],
            "rocm-smi_json.txt",
        ),
    ],
}

_SCRIPT = '''#!{python}
"""Fake {tool} of the recorded host {host!r}: replays {recordings}."""
import pathlib
import sys

RECORDINGS = pathlib.Path({recordings!r})
CALLS = {calls!r}

args = sys.argv[1:]
for known, name in CALLS:
    if args == known:
        recording = RECORDINGS / name
        if not recording.exists():
            sys.stderr.write("fake {tool}: host {host} has no recording of %r (%s)\\n" % (args, name))
            sys.exit(2)
        sys.stdout.buffer.write(recording.read_bytes())
        sys.stdout.flush()
        status = recording.with_name(name + ".exit")
        sys.exit(int(status.read_text()) if status.exists() else 0)
sys.stderr.write("fake {tool}: no recording answers the arguments %r; recorded: %r\\n" % (args, CALLS))
sys.exit(2)
'''


def recorded_hosts() -> list[str]:
    return sorted(path.name for path in RECORDINGS.iterdir() if path.is_dir())


def install_fake_gpu_tools(bin_dir: Path, host: str) -> Path:
    """Write the fakes of the tools `host` has (those with a recording) into `bin_dir`."""
    recordings = RECORDINGS / host
    if not recordings.is_dir():
        raise ValueError(f"no recorded host {host!r} in {RECORDINGS}; recorded: {recorded_hosts()}")
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool, calls in RECORDED_CALLS.items():
        if not any((recordings / name).exists() for _, name in calls):
            continue
        script = bin_dir / tool
        script.write_text(
            _SCRIPT.format(
                python=sys.executable, tool=tool, host=host, recordings=str(recordings), calls=calls
            )
        )
        script.chmod(0o755)
    return bin_dir


def fake_gpu_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, host: str) -> Path:
    """Make this process (and its children) see the recorded `host`: its fakes first on PATH, no
    real GPU tool after them, no visibility variable inherited, ROCM_PATH at its ROCm install."""
    bin_dir = install_fake_gpu_tools(tmp_path / f"fake-gpu-tools-{host}", host)
    others = [
        folder
        for folder in os.environ.get("PATH", "").split(os.pathsep)
        if folder and not any((Path(folder) / tool).exists() for tool in FAKE_TOOLS)
    ]
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *others]))
    for name in VISIBILITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    rocm = RECORDINGS / host / "rocm"
    if rocm.is_dir():
        monkeypatch.setenv("ROCM_PATH", str(rocm))
    else:
        monkeypatch.delenv("ROCM_PATH", raising=False)
    return bin_dir
