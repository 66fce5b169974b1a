import os

import pytest

import nightlygpu
from nightlygpu.kernels import random_matrix, time_matmul


@pytest.mark.gpu_1
def test_sees_exactly_the_handed_devices(gpu_backend):
    handed = nightlygpu.handed_devices()
    if handed:
        assert nightlygpu.device_count() == len(handed)
    assert nightlygpu.device_count() >= 1


@pytest.mark.gpu_1
def test_matmul_matches_float64_on_the_cpu(torch_cuda):
    a, b = random_matrix(256, "float32", seed=3), random_matrix(256, "float32", seed=4)
    got = (a @ b).double().cpu()
    want = a.double().cpu() @ b.double().cpu()
    assert torch_cuda.allclose(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu_1
def test_matmul_is_timed(gpu_backend):
    assert time_matmul(512, repeats=2, warmup=1) > 0


@pytest.mark.gpu_2
def test_peer_copy_between_two_devices(torch_cuda):
    if torch_cuda.cuda.device_count() < 2:
        pytest.skip(
            f"needs two GPUs, sees {torch_cuda.cuda.device_count()} ({os.environ.get('CUDA_VISIBLE_DEVICES')})"
        )
    x = torch_cuda.arange(1024, device="cuda:0")
    assert torch_cuda.equal(x.to("cuda:1").cpu(), x.cpu())
