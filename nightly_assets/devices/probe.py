"""Which GPUs this host offers, as the vendors' tools report them and the visibility variables
narrow them: NVIDIA through nvidia-smi, else AMD through amd-smi (or the older rocm-smi).

Counting never raises: a tool that fails, hangs or prints what cannot be read gives no GPUs and a
`problem` naming the call and why; no tool on PATH gives vendor "none"."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping

from nightly_assets.devices.amd import probe_amd_smi, probe_rocm_smi
from nightly_assets.devices.gpus import Gpu, HostGpus
from nightly_assets.devices.nvidia import probe_nvidia
from nightly_assets.devices.visibility import VISIBILITY_VARIABLES, visible_devices_env

__all__ = ["VISIBILITY_VARIABLES", "Gpu", "HostGpus", "probe_gpus", "visible_devices_env"]

Probe = Callable[[str, Mapping[str, str], float], HostGpus]

# In the order asked; rocm-smi only answers where amd-smi is missing or failed.
_TOOLS: tuple[tuple[str, Probe], ...] = (
    ("nvidia-smi", probe_nvidia),
    ("amd-smi", probe_amd_smi),
    ("rocm-smi", probe_rocm_smi),
)


def probe_gpus(env: Mapping[str, str] | None = None, timeout_s: float = 30) -> HostGpus:
    """The devices this process may hand out. `env` (default os.environ) holds the visibility
    variables read; the tools are looked up on its PATH (else ours). `timeout_s` bounds all
    calls together."""
    env = os.environ if env is None else env
    search_path = env.get("PATH") or os.environ.get("PATH", "")
    deadline = time.monotonic() + timeout_s
    answers: list[HostGpus] = []
    for tool, probe in _TOOLS:
        program = shutil.which(tool, path=search_path)
        if program is None:
            continue
        if tool == "rocm-smi" and any(host.vendor == "amd" and not host.problem for host in answers):
            continue  # amd-smi has answered for the AMD cards
        host = probe(program, env, deadline)
        if host.gpus:
            return host
        answers.append(host)
    # No GPU visible: the first tool's answer, which says why where something failed.
    return answers[0] if answers else HostGpus("none", (), "", "")
