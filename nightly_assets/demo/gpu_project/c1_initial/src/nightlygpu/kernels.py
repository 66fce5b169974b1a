"""The two kernels: a matmul in a chosen dtype and a device-to-device copy, each timed on the GPU."""

from __future__ import annotations

import time

from nightlygpu import backend


def _torch():
    import torch

    return torch


def matmul(a, b):
    return a @ b


def random_matrix(n: int, dtype: str = "bfloat16", device: int = 0, seed: int = 0):
    torch = _torch()
    generator = torch.Generator(device=f"cuda:{device}").manual_seed(seed)
    return torch.randn(n, n, device=f"cuda:{device}", dtype=getattr(torch, dtype), generator=generator)


def time_matmul(n: int, dtype: str = "bfloat16", repeats: int = 10, warmup: int = 3) -> float:
    """Seconds per (n x n) @ (n x n) product on device 0: the mean of `repeats` after `warmup`."""
    if backend() == "cupy":
        return _time_matmul_cupy(n, repeats, warmup)
    torch = _torch()
    a, b = random_matrix(n, dtype, seed=1), random_matrix(n, dtype, seed=2)
    for _ in range(warmup):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / repeats


def _time_matmul_cupy(n: int, repeats: int, warmup: int) -> float:
    import cupy

    a = cupy.random.standard_normal((n, n), dtype=cupy.float32)
    b = cupy.random.standard_normal((n, n), dtype=cupy.float32)
    for _ in range(warmup):
        a @ b
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - start) / repeats


def time_copy(megabytes: int = 1024, repeats: int = 10) -> float:
    """Seconds per device-to-device copy of `megabytes` on device 0."""
    torch = _torch()
    src = torch.empty(megabytes * 2**20, dtype=torch.uint8, device="cuda:0")
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / repeats
