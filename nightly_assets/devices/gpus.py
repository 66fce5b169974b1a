"""The GPUs a host offers to test suites, and the facts of the ones a stage was handed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nightly_assets.devices.facts import DeviceFacts, Vendor


@dataclass(frozen=True)
class Gpu:
    """One device a suite can be handed: a whole GPU, or a MIG slice of one."""

    id: str  # what the visibility variable names: the physical index, or a slice's MIG-… UUID
    uuid: str  # NVIDIA GPU-…/MIG-…; AMD GPU-<unique id> (what ROCR_VISIBLE_DEVICES accepts)
    name: str  # "NVIDIA H100 80GB HBM3"; a slice names its profile: "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    memory_mib: int
    mig: bool


@dataclass(frozen=True)
class HostGpus:
    """The devices this process may hand out (after the visibility variables), in their order."""

    vendor: Vendor
    gpus: tuple[Gpu, ...]
    driver: str  # "580.159.04"; AMD: the amdgpu version
    runtime: str  # "CUDA 13.0", "ROCm 6.4.1"; "" where the tools do not say
    problem: str = ""  # why no GPU was found where a tool is installed (which command, what it said)

    @property
    def count(self) -> int:
        return len(self.gpus)

    def ids(self) -> list[str]:
        return [gpu.id for gpu in self.gpus]

    def gpu(self, device_id: str) -> Gpu:
        for gpu in self.gpus:
            if gpu.id == device_id:
                return gpu
        raise ValueError(f"no device {device_id!r} on this host; its {self.vendor} devices: {self.ids()}")

    def facts(
        self, ids: Sequence[str] | None = None, frameworks: Mapping[str, str] | None = None
    ) -> DeviceFacts:
        """What a stage handed `ids` (all devices when None) ran on. Handed none, it ran on no GPU:
        its facts then carry no vendor, driver or runtime, so a CPU-only stage's baseline does
        not change with the host's GPU driver."""
        chosen = list(self.gpus) if ids is None else [self.gpu(device_id) for device_id in ids]
        if not chosen:
            return DeviceFacts(frameworks=dict(frameworks or {}))
        names = list(dict.fromkeys(gpu.name for gpu in chosen))  # distinct, in hand-out order
        return DeviceFacts(
            vendor=self.vendor,
            model=" + ".join(names),
            count=len(chosen),
            memory_mib=min(gpu.memory_mib for gpu in chosen),
            driver=self.driver,
            runtime=self.runtime,
            devices=[gpu.id for gpu in chosen],
            mig=any(gpu.mig for gpu in chosen),
            frameworks=dict(frameworks or {}),
        )
