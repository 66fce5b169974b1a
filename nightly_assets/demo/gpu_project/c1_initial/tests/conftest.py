import pytest

import nightlygpu


@pytest.fixture
def gpu_backend():
    kind = nightlygpu.backend()
    if kind is None:
        pytest.skip("no GPU visible to torch or CuPy")
    return kind


@pytest.fixture
def torch_cuda(gpu_backend):
    if gpu_backend != "torch":
        pytest.skip("needs torch with CUDA")
    import torch

    return torch
