"""Nights on a GPU host, driven on a CPU machine: recorded nvidia-smi outputs replayed on PATH, and a
stand-in framework stack (a Python whose site-packages holds a `torch` distribution) that the
night's environment reuses. The project under test declares `dependencies = ["torch"]` and the
package sources are the offline wheelhouse, which has no torch: the night passes only if nothing
is downloaded."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nightly_assets.builds.framework_stack import FrameworkStackError, reused_stack
from nightly_assets.catalog.loader import CatalogError, load_catalog
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.process import GPU_VARIABLES, names_a_secret, passed_variables
from nightly_assets.resources import resources_for
from nightly_assets_tests.catalog_files import copy_catalog
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.fake_gpus import fake_gpu_host
from nightly_assets_tests.git_repo import commit_folder

TORCH_VERSION = "2.11.0+cu130"
# The last ones match a GPU prefix the runner passes (CUDA_*, NCCL_*, NVIDIA_*, HSA_*): their names'
# words say they hold a credential.
CANARIES = (
    "SLACK_BOT_TOKEN",
    "NIGHTLY_GITHUB_TOKEN",
    "CUDA_TOKEN",
    "CUDA_PWD",
    "NCCL_IB_PASS",
    "NVIDIA_NGC_KEY",
    "HSA_CREDS",
)

DUMP = """\
import json, os
def dump(name):
    with open(os.path.join({dumps!r}, name + ".json"), "w") as out:
        json.dump(dict(os.environ), out)
"""

PIPELINE = """
name: gpuproj
title: A project whose tests need torch and a GPU
seed: embedded
description: Its environment reuses the host's torch; its GPU suite and benchmark get a card each.
cron: "0 3 * * *"
start_date: 2026-11-01
repositories:
  - {{name: gpuproj, url: "{repo}", branch: main}}
targets:
  - {{name: h100, arch: amd64, devices: 1}}
stages:
  - {{name: sources, kind: sources, description: Pinned.}}
  - {{name: wheels, kind: wheels, deps: [sources], runner: local, description: Built.}}
  - {{name: environment, kind: environment, deps: [wheels], runner: local, description: On the stack.}}
  - name: tests_unit
    kind: test_suite
    deps: [environment]
    description: No GPU needed.
    suite: {{markers: unit, timeout_minutes: 5, runner: local}}
    params: {{env: {{SUITE_TARGET: "{{target}}"}}}}
  - name: tests_gpu
    kind: test_suite
    deps: [environment]
    description: One GPU.
    suite: {{markers: gpu_1, timeout_minutes: 5, runner: local, min_gpus: 1}}
  - name: benchmarks
    kind: benchmarks
    deps: [environment]
    runner: local
    description: One GPU.
    params: {{command: [python, -m, gpuproj.bench, "{{output}}"], min_gpus: 1}}
  - {{name: perf_baseline, kind: perf_baseline, deps: [benchmarks], description: Baseline.}}
  - name: night_summary
    kind: night_summary
    deps: [tests_unit, tests_gpu, perf_baseline]
    description: S.
"""


def framework_stack(root: Path) -> Path:
    """A Python whose site-packages holds a stand-in torch, as a GPU image's /opt/torch/.venv does."""
    stack = root / "stack"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", stack], check=True)
    site = Path(
        subprocess.run(
            [stack / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(f"__version__ = {TORCH_VERSION!r}\n")
    dist_info = site / f"torch-{TORCH_VERSION}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {TORCH_VERSION}\n")
    (dist_info / "RECORD").write_text("")
    return stack / "bin" / "python"


def gpu_project(root: Path, dumps: Path) -> Path:
    repo = root / "gpuproj"
    (repo / "gpuproj").mkdir(parents=True)
    (repo / "tests").mkdir()
    dump = DUMP.format(dumps=str(dumps))
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "gpuproj"\nversion = "1.0"\ndependencies = ["torch>=2"]\n\n'
        '[tool.setuptools]\npackages = ["gpuproj"]\n\n'
        '[tool.pytest.ini_options]\nmarkers = ["unit", "gpu_1"]\n'
    )
    (repo / "gpuproj" / "__init__.py").write_text("import torch\n\nTORCH = torch.__version__\n")
    (repo / "gpuproj" / "bench.py").write_text(
        dump + 'import sys\ndump("benchmark")\njson.dump({"benchmarks": [{"name": "step", "value": 1.0}]}, '
        'open(sys.argv[1], "w"))\n'
    )
    (repo / "tests" / "test_gpu.py").write_text(
        dump + "import pytest\nimport gpuproj\n\n\n"
        "@pytest.mark.unit\ndef test_unit():\n    dump('tests_unit')\n\n\n"
        "@pytest.mark.gpu_1\ndef test_gpu():\n"
        f"    assert gpuproj.TORCH == {TORCH_VERSION!r}\n    dump('tests_gpu')\n"
    )
    commit_folder(repo)
    return repo


@pytest.mark.slow
def test_a_night_on_the_hosts_framework_stack_and_its_gpus(
    catalog_nights: CatalogNights, wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    fake_gpu_host(monkeypatch, tmp_path, "l40x2")
    monkeypatch.setenv("NIGHTLY_BASE_PYTHON", str(framework_stack(tmp_path)))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    monkeypatch.setenv("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
    canaries = {name: f"canary-{secrets.token_hex(6)}" for name in CANARIES}
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)

    key, stages, _ = catalog_nights.run(PIPELINE.format(repo=gpu_project(tmp_path, dumps)), "2026-11-03")

    assert {s.status for s in stages.values()} == {"success"}, {n: s.detail for n, s in stages.items()}
    assert stages["tests_gpu"].detail == "1/1 passed"  # ran, not collect-only: the host has 2 GPUs
    seen = {p.stem: json.loads(p.read_text()) for p in dumps.glob("*.json")}
    assert set(seen) == {"tests_unit", "tests_gpu", "benchmark"}
    for process, environment in seen.items():
        assert environment["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64", process
        assert environment["CUDA_HOME"] == "/usr/local/cuda", process
        assert environment["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility", process
        for name, value in canaries.items():
            assert value not in json.dumps(environment), f"{process} received {name}"
    # A GPU stage sees the one card it was handed, by PCI bus order; the unit suite asked for none.
    for process in ("tests_gpu", "benchmark"):
        assert seen[process]["CUDA_VISIBLE_DEVICES"] in ("0", "1"), process
        assert seen[process]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "CUDA_VISIBLE_DEVICES" not in seen["tests_unit"]
    assert seen["tests_unit"]["SUITE_TARGET"] == "h100"  # a suite's env on a local runner

    artefacts = catalog_nights.home / "artefacts" / "gpuproj" / "2026-11-03" / "h100"
    install_log = (artefacts / "environment" / "install.log").read_text()
    assert "Requirement already satisfied: torch>=2" in install_log, install_log
    manifest = json.loads((artefacts / "environment" / "manifest.json").read_text())
    assert manifest["frameworks"] == {"torch": TORCH_VERSION}
    assert manifest["inherited"] == ["torch"]
    assert manifest["framework_stack"]["python"] == str(tmp_path / "stack" / "bin" / "python")

    with dg.build_resources({"warehouse": resources_for("local", catalog_nights.home)["warehouse"]}) as r:
        facts = r.warehouse.store().device_facts(key)
    assert facts["tests_gpu"].model == "NVIDIA L40"
    assert facts["tests_gpu"].count == 1
    assert facts["tests_gpu"].frameworks == {"torch": TORCH_VERSION}
    assert facts["benchmarks"].key() == facts["tests_gpu"].key()
    assert facts["environment"] == DeviceFacts(frameworks={"torch": TORCH_VERSION})


def test_the_demo_gpu_night_on_a_cpu_host_collects_and_skips_never_fails(
    catalog_nights: CatalogNights, wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")  # no GPU tool
    monkeypatch.delenv("NIGHTLY_BASE_PYTHON", raising=False)
    text = (Path(__file__).parents[1] / "nightly_assets" / "defs" / "demo_gpu" / "defs.yaml").read_text()
    pipeline = yaml.safe_load(text)["attributes"]
    _, stages, _ = catalog_nights.run(yaml.safe_dump(pipeline), "2026-11-20")

    assert {s.status for s in stages.values()} == {"success"}, {n: s.detail for n, s in stages.items()}
    assert stages["tests_gpu_1"].detail == "5 collected, not run: needs 1 GPU, none here"
    assert stages["tests_gpu_2"].detail == "1 collected, not run: needs 2 GPUs, none here"
    assert stages["benchmarks"].detail == "skipped: needs 1 GPU, runner 'local' has 0"
    assert stages["tests_unit"].detail == "3/3 passed"


def test_a_visibility_variable_that_hides_every_card_is_named_in_the_night(
    catalog_nights: CatalogNights, wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host has two L40s, but the orchestrator's CUDA_VISIBLE_DEVICES names none of them (a
    typo): the GPU suites only collect, and their detail says why, not a silent collect-only."""
    fake_gpu_host(monkeypatch, tmp_path, "l40x2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "abc")
    monkeypatch.delenv("NIGHTLY_BASE_PYTHON", raising=False)
    text = (Path(__file__).parents[1] / "nightly_assets" / "defs" / "demo_gpu" / "defs.yaml").read_text()
    _, stages, _ = catalog_nights.run(yaml.safe_dump(yaml.safe_load(text)["attributes"]), "2026-11-20")

    detail = stages["tests_gpu_1"].detail or ""
    assert detail.startswith(
        "5 collected, not run: needs 1 GPU, none here; CUDA_VISIBLE_DEVICES='abc' names none of this "
        "host's 2 GPUs"
    ), detail
    assert stages["tests_unit"].detail == "3/3 passed"


def test_a_base_python_that_cannot_serve_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = "demo_gpu/environment (runner 'local')"
    with pytest.raises(
        FrameworkStackError,
        match=r"demo_gpu/environment \(runner 'local'\): base_python "
        r"/nonexistent/bin/python does not exist",
    ):
        reused_stack("/nonexistent/bin/python", None, where, [])
    monkeypatch.delenv("NIGHTLY_TEST_STACK", raising=False)
    with pytest.raises(FrameworkStackError, match=r"names the variable NIGHTLY_TEST_STACK, which is not set"):
        reused_stack(None, "${NIGHTLY_TEST_STACK}", where, [])
    assert reused_stack(None, "${NIGHTLY_TEST_STACK:-}", where, []) is None  # optional: no stack
    not_python = tmp_path / "python"
    not_python.write_text("#!/bin/sh\necho 'not a python'\n")
    not_python.chmod(0o755)
    with pytest.raises(FrameworkStackError, match="did not run as a Python"):
        reused_stack(str(not_python), None, where, [])
    # A wheel built for another CPython minor version than the stack's.
    stack = framework_stack(tmp_path)
    other = "cp39" if sys.version_info[:2] != (3, 9) else "cp310"
    wheel = tmp_path / f"fast-1.0-{other}-{other}-linux_x86_64.whl"
    wheel.write_bytes(b"")
    with pytest.raises(
        FrameworkStackError,
        match=rf"is Python 3\.\d+, but the night's wheel {wheel.name} is "
        rf"built for {other}",
    ):
        reused_stack(str(stack), None, where, [wheel])


@pytest.mark.parametrize("entry", ["NIGHTLY_WAREHOUSE_URL", "SLACK_BOT_TOKEN", "AWS_*", "NIGHT*", "*"])
def test_a_runner_that_would_pass_a_secret_is_refused_when_the_catalog_loads(
    tmp_path: Path, entry: str
) -> None:
    catalog = copy_catalog(tmp_path / "catalog")
    runners = catalog / "runners.yaml"
    runners.write_text(
        runners.read_text().replace(
            "    description: this machine; the embedded default",
            "    description: this machine; the embedded default\n"
            f"    pass_env: [HSA_OVERRIDE_GFX_VERSION, {entry!r}]",
        )
    )
    with pytest.raises(CatalogError) as raised:
        load_catalog(catalog)
    message = str(raised.value)
    assert "pass_env" in message and entry in message, message


def test_gpu_variables_whose_names_say_they_hold_a_credential_stay_behind() -> None:
    environ = {
        "CUDA_HOME": "/usr/local/cuda",
        "NCCL_IB_HCA": "mlx5",
        "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
        "CUDA_PWD": "hunter2",
        "NCCL_IB_PASS": "hunter2",
        "NVIDIA_NGC_KEY": "hunter2",
        "HSA_CREDS": "hunter2",
        "ROCM_API_KEY": "hunter2",
    }
    assert not names_a_secret("PWD") and not names_a_secret("OLDPWD")  # the shell's, not a password
    gpu_prefixes = [*GPU_VARIABLES["nvidia"], *GPU_VARIABLES["amd"]]
    assert passed_variables(gpu_prefixes, environ) == {
        "CUDA_HOME": "/usr/local/cuda",
        "NCCL_IB_HCA": "mlx5",
        "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
    }
