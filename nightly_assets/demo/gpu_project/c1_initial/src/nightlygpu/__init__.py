"""nightlygpu: matmul and copy kernels on the host's GPU, through torch or else CuPy."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

__version__ = importlib.metadata.version("nightlygpu")  # one place: pyproject.toml


def matmul_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of an (m x k) @ (k x n) product: one multiply and one add each."""
    return 2 * m * n * k


def backend() -> str | None:
    """ "torch" or "cupy" where that framework sees a GPU, else None (nothing to run on)."""
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return "torch"
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                return "cupy"
        except cupy.cuda.runtime.CUDARuntimeError:
            pass
    return None


def device_count() -> int:
    kind = backend()
    if kind == "torch":
        import torch

        return torch.cuda.device_count()
    if kind == "cupy":
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    return 0


def device_name(index: int = 0) -> str:
    kind = backend()
    if kind == "torch":
        import torch

        return torch.cuda.get_device_name(index)
    if kind == "cupy":
        import cupy

        return cupy.cuda.runtime.getDeviceProperties(index)["name"].decode()
    return "none"


def handed_devices() -> list[str]:
    """The devices the nightly runner handed this process (its *_VISIBLE_DEVICES)."""
    for name in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        value = os.environ.get(name)
        if value:
            return value.split(",")
    return []
