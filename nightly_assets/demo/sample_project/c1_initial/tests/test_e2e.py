import json
import subprocess
import sys
from pathlib import Path

import pytest

from nightlysample.collectives import all_reduce
from nightlysample.devices import ENV_VAR, visible_devices
from nightlysample.ops import matmul, prefix_sum

pytestmark = pytest.mark.e2e


@pytest.mark.gpu_1
def test_benchmark_cli_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable,
        "-m",
        "nightlysample.bench",
        "--json",
        str(out),
        "--repeats",
        "1",
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    result = json.loads(out.read_text(encoding="utf-8"))
    assert [b["name"] for b in result["benchmarks"]] == ["matmul_64", "prefix_sum_100k"]
    assert all(b["value"] > 0 and b["unit"] == "s" for b in result["benchmarks"])


@pytest.mark.gpu_1
def test_single_device_workload() -> None:
    devices = visible_devices()
    product = matmul([[1.0, 2.0], [3.0, 4.0]], [[1.0], [1.0]])
    scanned = prefix_sum([row[0] for row in product])
    assert scanned == [3.0, 10.0]
    assert (
        all_reduce([scanned] * devices) == [[3.0 * devices, 10.0 * devices]] * devices
    )


@pytest.mark.gpu_2
def test_two_device_all_reduce(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "2")
    per_device = [[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]]
    assert all_reduce(per_device) == [[11.0, 22.0, 33.0], [11.0, 22.0, 33.0]]
