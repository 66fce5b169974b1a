"""What a night ran on: the accelerators a stage was handed and the framework builds it used. These
facts key every performance baseline: a night on another GPU model, driver or framework build is
never compared with the old configuration's nights."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Vendor = Literal["nvidia", "amd", "none"]
RUNTIME_LIBRARY_PREFIXES = ("nvidia-", "cuda-", "rocm-", "hip-")


class DeviceFacts(BaseModel):
    """The accelerators one stage ran on (after hand-out) and the framework packages it used."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vendor: Vendor = "none"
    model: str = ""  # "NVIDIA H200"; several models on one host: joined with " + "
    count: int = Field(default=0, ge=0)  # devices handed to the stage
    memory_mib: int = Field(default=0, ge=0)  # per device (the smallest, where they differ)
    driver: str = ""  # "580.159.03"
    runtime: str = ""  # "CUDA 13.0", "ROCm 6.4.1"
    devices: list[str] = Field(default_factory=list)  # the ids handed out (indices or UUIDs)
    mig: bool = False  # the devices are MIG slices (their model names the profile)
    frameworks: dict[str, str] = Field(default_factory=dict)  # distribution name -> version

    def key(self) -> str:
        """The configuration a benchmark's baseline belongs to: hardware, driver, runtime and
        framework builds (not which ids were handed out: two identical cards are one baseline)."""
        identity = {
            "vendor": self.vendor,
            "model": self.model,
            "count": self.count,
            "memory_mib": self.memory_mib,
            "driver": self.driver,
            "runtime": self.runtime,
            "mig": self.mig,
            "frameworks": dict(sorted(self.frameworks.items())),
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line for people: "1x NVIDIA H200 (143771 MiB), driver 580.159.03, CUDA 13.0; torch 2.11.0"."""
        if self.vendor == "none" or self.count == 0:
            hardware = "no GPU"
        else:
            hardware = f"{self.count}x {self.model}" + (
                f" ({self.memory_mib} MiB)" if self.memory_mib else ""
            )
            hardware += "".join(
                f", {part}" for part in (f"driver {self.driver}" if self.driver else "", self.runtime) if part
            )
        # The CUDA/ROCm runtime wheels (a dozen on a torch host) are counted, not listed: they key
        # the baseline all the same, and changes_from names the one that moved.
        libraries = [n for n in self.frameworks if n.startswith(RUNTIME_LIBRARY_PREFIXES)]
        named = [f"{n} {v}" for n, v in sorted(self.frameworks.items()) if n not in libraries]
        stack = ", ".join(named + ([f"{len(libraries)} CUDA/ROCm runtime libraries"] if libraries else []))
        return hardware + (f"; {stack}" if stack else "")

    def changes_from(self, earlier: DeviceFacts) -> list[str]:
        """What differs from `earlier`, for people: ["GPU 1x NVIDIA H100 -> 1x NVIDIA H200", ...]."""
        changes = []
        if (self.vendor, self.model, self.count, self.mig) != (
            earlier.vendor,
            earlier.model,
            earlier.count,
            earlier.mig,
        ):
            changes.append(f"GPU {_hw(earlier)} -> {_hw(self)}")
        elif self.memory_mib != earlier.memory_mib:
            changes.append(f"GPU memory {earlier.memory_mib} -> {self.memory_mib} MiB")
        if self.driver != earlier.driver:
            changes.append(f"driver {earlier.driver or 'none'} -> {self.driver or 'none'}")
        if self.runtime != earlier.runtime:
            changes.append(f"runtime {earlier.runtime or 'none'} -> {self.runtime or 'none'}")
        for name in sorted(set(self.frameworks) | set(earlier.frameworks)):
            before, after = earlier.frameworks.get(name), self.frameworks.get(name)
            if before != after:
                changes.append(f"{name} {before or 'absent'} -> {after or 'absent'}")
        return changes


def _hw(facts: DeviceFacts) -> str:
    return "no GPU" if facts.vendor == "none" or facts.count == 0 else f"{facts.count}x {facts.model}"
