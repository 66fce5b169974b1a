import pytest

from nightlygpu.kernels import random_matrix


@pytest.mark.gpu_1
@pytest.mark.parametrize("n", [64, 1000])
def test_matmul_at_odd_sizes(torch_cuda, n):
    a, b = random_matrix(n, "float32", seed=5), random_matrix(n, "float32", seed=6)
    got = (a @ b).double().cpu()
    want = a.double().cpu() @ b.double().cpu()
    assert torch_cuda.allclose(got, want, rtol=1e-2, atol=1e-2)
