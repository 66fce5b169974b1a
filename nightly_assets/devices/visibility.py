"""The environment variables that choose which GPUs a process sees, read as the runtimes read them,
and written so that a child sees exactly the devices it was handed."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from nightly_assets.devices.facts import Vendor

# Every variable a runtime reads to choose its devices: strip these from an environment before
# adding visible_devices_env()'s, so that nothing inherited re-filters the hand-out.
VISIBILITY_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
)

# An index no device has: every runtime stops reading its list there, so it sees no device. (An
# empty value is read as "unset", i.e. all devices, by some of them: ROCm's HIP runtime.)
NO_DEVICE = "-1"

Device = TypeVar("Device")


def visible_devices_env(vendor: Vendor, ids: Sequence[str]) -> dict[str, str]:
    """The variables a child process gets so that it sees exactly `ids` (HostGpus ids), in order."""
    ids = list(ids)
    if vendor == "nvidia":
        # Our indices are nvidia-smi's, which count in PCI bus order; CUDA's default order is
        # fastest first, which differs on a host of mixed cards. MIG-… ids name one slice.
        return {"CUDA_VISIBLE_DEVICES": ",".join(ids) or NO_DEVICE, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if vendor == "amd":
        if not ids:
            return {name: NO_DEVICE for name in VISIBILITY_VARIABLES if name != "CUDA_DEVICE_ORDER"}
        # ROCR_VISIBLE_DEVICES picks the physical devices. HIP then counts from 0 within what ROCr
        # left, through HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES (and OpenCL/HIP through
        # GPU_DEVICE_ORDINAL): a physical index left in any of them would pick the wrong card or
        # none, so each is set to "all of ROCr's", in order.
        within = ",".join(str(position) for position in range(len(ids)))
        return {
            "ROCR_VISIBLE_DEVICES": ",".join(ids),
            "HIP_VISIBLE_DEVICES": within,
            "CUDA_VISIBLE_DEVICES": within,
            "GPU_DEVICE_ORDINAL": within,
        }
    if ids:
        raise ValueError(f"cannot hand devices {ids} of a host with no GPU (vendor {vendor!r})")
    return {}


def leading_index(entry: str) -> int | None:
    """The device index an entry starts with, read as the runtimes do (strtol: "00", "+1" and
    "0x1" are 0, 1 and 0); None for an entry that starts with no digits ("-1", "foo", "")."""
    match = re.match(r"\+?\d+", entry)
    return int(match.group()) if match else None


def pick_visible(
    devices: Sequence[Device],
    value: str | None,
    resolve: Callable[[str], Sequence[Device] | None],
) -> tuple[Device, ...]:
    """The devices a comma-separated visibility list selects, in its order. `resolve` maps one
    stripped entry to its devices (None: not a device). As CUDA does, the list ends at the first
    entry that names no device, and at one that repeats a device (CUDA refuses "0,0" outright;
    the devices before the repeat are kept here). Unset (None): all devices."""
    if value is None:
        return tuple(devices)
    chosen: list[Device] = []
    for entry in value.split(","):
        found = resolve(entry.strip())
        if found is None or any(device in chosen for device in found):
            break
        chosen.extend(found)
    return tuple(chosen)


def hides_every_device(count: int, env: Mapping[str, str], names: Sequence[str]) -> str:
    """Why no device is visible though the host has `count`: the visibility variables among `names`
    that are set (a typo, "-1", another host's UUID); "" when none is set or the host has none."""
    set_ = {name: env[name] for name in names if name in env}
    if not count or not set_:
        return ""
    values = ", ".join(f"{name}={value!r}" for name, value in set_.items())
    return (
        f"{values} names none of this host's {count} GPUs (expected indices 0-{count - 1} or their "
        "UUIDs): no GPU is handed out and GPU suites only collect"
    )
