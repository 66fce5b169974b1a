"""Device configurations as real nights report them (nvidia-smi, torch), for the tests of
per-configuration baselines: an H100 night, an H200 night, and the H100 after a driver upgrade."""

from nightly_assets.devices.facts import DeviceFacts

H100 = DeviceFacts(
    vendor="nvidia",
    model="NVIDIA H100 80GB HBM3",
    count=1,
    memory_mib=81559,
    driver="580.159.04",
    runtime="CUDA 13.0",
    devices=["0"],
    frameworks={"torch": "2.11.0+cu130"},
)
H200 = DeviceFacts(
    vendor="nvidia",
    model="NVIDIA H200",
    count=1,
    memory_mib=143771,
    driver="580.159.03",
    runtime="CUDA 13.0",
    devices=["GPU-5b3f0c1e-8d2a-4f7e-9c61-0a7d2e4b9f13"],
    frameworks={"torch": "2.11.0+cu130"},
)
H100_DRIVER_UPGRADE = H100.model_copy(update={"driver": "590.44.01", "runtime": "CUDA 13.1"})
