import pytest

import nightlygpu


@pytest.mark.unit
def test_matmul_flops():
    assert nightlygpu.matmul_flops(2, 3, 4) == 48


@pytest.mark.unit
def test_handed_devices_reads_the_visibility_variable(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1,GPU-3")
    assert nightlygpu.handed_devices() == ["GPU-1", "GPU-3"]


@pytest.mark.unit
def test_version():
    assert nightlygpu.__version__
