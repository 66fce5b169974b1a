import pytest

from nightlysample.collectives import all_reduce
from nightlysample.devices import ENV_VAR, device_names, visible_devices
from nightlysample.ops import dot

pytestmark = pytest.mark.integration


def test_device_detection_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert visible_devices() == 1
    monkeypatch.setenv(ENV_VAR, "4")
    assert device_names() == ["sim:0", "sim:1", "sim:2", "sim:3"]


def test_sharded_dot_matches_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "3")
    a = [float(i) for i in range(9)]
    b = [float(9 - i) for i in range(9)]
    shards = [[dot(a[d::3], b[d::3])] for d in range(visible_devices())]
    assert all_reduce(shards) == [[dot(a, b)]] * 3
