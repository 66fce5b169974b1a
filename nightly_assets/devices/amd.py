"""AMD GPUs through amd-smi (ROCm 6.x and later) or the older rocm-smi, narrowed the way ROCr reads
ROCR_VISIBLE_DEVICES and HIP then reads HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES).

Devices are numbered in ROCr's order (HIP's, by amd-smi's hip_id; rocm-smi: by KFD node), which is
what ROCR_VISIBLE_DEVICES' indices count, not necessarily amd-smi's or rocm-smi's own order."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nightly_assets.devices.gpus import Gpu, HostGpus
from nightly_assets.devices.tools import ToolError, command_line, json_output, run_tool
from nightly_assets.devices.visibility import hides_every_device, leading_index, pick_visible

AMD_SMI_VERSION = ("version",)
AMD_SMI_LIST = ("list", "-e", "--json")
AMD_SMI_STATIC = ("static", "--asic", "--vram", "--json")
ROCM_SMI_QUERY = (
    "--showproductname",
    "--showmeminfo",
    "vram",
    "--showdriverversion",
    "--showuniqueid",
    "--json",
)

_MIB = 1024 * 1024


def probe_amd_smi(smi: str, env: Mapping[str, str], deadline: float) -> HostGpus:
    try:
        version = run_tool(smi, AMD_SMI_VERSION, deadline)
        listed = _records(json_output(run_tool(smi, AMD_SMI_LIST, deadline), command_line(smi, AMD_SMI_LIST)))
        static = _records(
            json_output(run_tool(smi, AMD_SMI_STATIC, deadline), command_line(smi, AMD_SMI_STATIC))
        )
        physical = _from_amd_smi(listed, static)
    except ToolError as exc:
        return HostGpus("amd", (), "", "", problem=str(exc))
    rocm, amdgpu = _version_field(version, "ROCm version"), _version_field(version, "amdgpu version")
    runtime = f"ROCm {rocm}" if rocm else ""
    shown = visible(physical, env)
    return HostGpus("amd", shown, amdgpu, runtime, problem=hidden(physical, shown, env))


def probe_rocm_smi(smi: str, env: Mapping[str, str], deadline: float) -> HostGpus:
    try:
        report = json_output(run_tool(smi, ROCM_SMI_QUERY, deadline), command_line(smi, ROCM_SMI_QUERY))
        physical = _from_rocm_smi(report)
    except ToolError as exc:
        return HostGpus("amd", (), "", "", problem=str(exc))
    system = report.get("system", {}) if isinstance(report, dict) else {}
    rocm = installed_rocm_version(env)
    driver = str(system.get("Driver version", ""))
    shown = visible(physical, env)
    return HostGpus("amd", shown, driver, rocm, problem=hidden(physical, shown, env))


def installed_rocm_version(env: Mapping[str, str]) -> str:
    """The install's version ("ROCm 6.4.1") from $ROCM_PATH (else /opt/rocm); "" if unreadable."""
    root = Path(env.get("ROCM_PATH") or "/opt/rocm")
    try:
        text = (root / ".info" / "version").read_text().strip()
    except OSError:
        return ""
    return f"ROCm {text.split('-')[0]}" if text else ""


def hidden(physical: list[Gpu], shown: tuple[Gpu, ...], env: Mapping[str, str]) -> str:
    """Why the visibility variables leave none of the physical devices; "" when they leave some
    (`shown`: what `visible` picked)."""
    if shown:
        return ""
    names = ["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]
    return hides_every_device(len(physical), env, names)


def visible(physical: list[Gpu], env: Mapping[str, str]) -> tuple[Gpu, ...]:
    """ROCr narrows the physical devices (indices or UUIDs), then HIP picks by index within them."""

    def by_uuid_or_index(devices: tuple[Gpu, ...] | list[Gpu], entry: str) -> tuple[Gpu, ...] | None:
        if entry.upper().startswith("GPU-"):
            named = [gpu for gpu in devices if gpu.uuid.lower() == entry.lower()]
            return (named[0],) if named else None
        index = leading_index(entry)
        return (devices[index],) if index is not None and index < len(devices) else None

    rocr = pick_visible(
        physical, env.get("ROCR_VISIBLE_DEVICES"), lambda entry: by_uuid_or_index(physical, entry)
    )
    hip_value = env.get("HIP_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES"))
    return pick_visible(rocr, hip_value, lambda entry: by_uuid_or_index(rocr, entry))


def _from_amd_smi(listed: list[dict[str, Any]], static: list[dict[str, Any]]) -> list[Gpu]:
    by_gpu = {record.get("gpu"): record for record in listed}
    found = []
    for record in static:
        listing = by_gpu.get(record.get("gpu"))
        asic, vram = record.get("asic"), record.get("vram")
        if listing is None or not isinstance(asic, dict) or not isinstance(vram, dict):
            raise ToolError(
                f"`amd-smi {' '.join(AMD_SMI_STATIC)}` and `amd-smi {' '.join(AMD_SMI_LIST)}` do not "
                f"describe GPU {record.get('gpu')!r} together (asic, vram and hip_uuid expected)"
            )
        order = listing.get("hip_id", listing.get("gpu"))
        uuid = str(listing.get("hip_uuid") or "")
        found.append((order, uuid, str(asic.get("market_name", "")), _mib(vram.get("size"))))
    found.sort(key=lambda gpu: gpu[0] if isinstance(gpu[0], int) else 1 << 30)
    return [
        Gpu(id=str(position), uuid=uuid, name=name, memory_mib=memory, mig=False)
        for position, (_, uuid, name, memory) in enumerate(found)
    ]


def _from_rocm_smi(report: Any) -> list[Gpu]:
    if not isinstance(report, dict):
        raise ToolError(f"`rocm-smi {' '.join(ROCM_SMI_QUERY)}` printed no object of cards")
    cards = []
    for key, card in report.items():
        if not re.fullmatch(r"card\d+", key):
            continue
        try:
            name = card.get("Card Series") or card.get("Card series") or ""
            memory = int(card["VRAM Total Memory (B)"]) // _MIB
            unique = int(str(card["Unique ID"]), 16)
            node = int(card.get("Node ID", key.removeprefix("card")))
        except (KeyError, ValueError, AttributeError) as exc:
            raise ToolError(
                f"`rocm-smi {' '.join(ROCM_SMI_QUERY)}` described {key} without a readable {exc}"
            ) from None
        cards.append((node, f"GPU-{unique:016x}", name, memory))
    cards.sort()  # ROCr enumerates GPUs in KFD node order
    return [
        Gpu(id=str(position), uuid=uuid, name=name, memory_mib=memory, mig=False)
        for position, (_, uuid, name, memory) in enumerate(cards)
    ]


def _records(document: Any) -> list[dict[str, Any]]:
    """amd-smi's per-GPU records: a bare list, or {"gpu_data": [...]} as some releases print."""
    if isinstance(document, dict) and isinstance(document.get("gpu_data"), list):
        document = document["gpu_data"]
    if not isinstance(document, list) or not all(isinstance(record, dict) for record in document):
        raise ToolError(f"amd-smi printed {str(document)[:200]!r}, not a list of GPU records")
    return document


def _mib(size: Any) -> int:
    """amd-smi's VRAM size: {"value": 196592, "unit": "MB"} (its MB are MiB), or a bare number."""
    value = size.get("value") if isinstance(size, dict) else size
    try:
        return int(str(value).split()[0])
    except (ValueError, IndexError):
        raise ToolError(f"amd-smi printed VRAM size {size!r}, not a number of MB") from None


def _version_field(version: str, label: str) -> str:
    match = re.search(rf"{label}:\s*([^\s|]+)", version)
    return "" if match is None or match.group(1) == "N/A" else match.group(1)
