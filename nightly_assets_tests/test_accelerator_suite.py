"""The shipped accelerator integration suite, run for real with jax on CPU (virtual devices).

Each case runs the suite in a child pytest, as the nightly image does, and reads its JUnit XML.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
from defusedxml import ElementTree

import nightly_assets

pytestmark = pytest.mark.slow
SUITE = Path(nightly_assets.__file__).parent / "suites" / "accelerator_integration"
COLLECTIVES = {"test_all_reduce_sum", "test_all_gather", "test_broadcast_from_last_rank", "test_ring_shift"}


def _run_suite(tmp_path: Path, **env: str) -> dict[str, tuple[str, str]]:
    """Run the suite; returns {test name: (outcome, message)} from its JUnit XML."""
    pytest.importorskip("jax", reason="jax (a dev dependency) runs the suite on CPU")
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("NIGHTLY_", "XLA_", "JAX_"))}
    child_env.update(PYTHONDONTWRITEBYTECODE="1", NIGHTLY_FRAMEWORK="jax", NIGHTLY_PLATFORM="cpu", **env)
    junit = tmp_path / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", str(SUITE), "-m", "integration", "-q", f"--junitxml={junit}"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=child_env, capture_output=True, text=True, timeout=600)
    assert junit.exists(), f"no JUnit XML (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    results = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        tag = "passed" if outcome is None else outcome.tag
        message = "" if outcome is None else f"{outcome.get('message', '')}\n{outcome.text or ''}"
        results[case.get("name", "")] = (tag, message)
    return results


def test_suite_passes_on_four_virtual_cpu_devices(tmp_path: Path) -> None:
    results = _run_suite(tmp_path, NIGHTLY_EXPECTED_DEVICES="4", NIGHTLY_EXPECTED_PACKAGES="jax,jaxlib")
    assert {name: r for name, r in results.items() if r[0] != "passed"} == {}
    assert results.keys() >= COLLECTIVES, f"collective tests missing from {sorted(results)}"
    assert {
        "test_device_count",
        "test_expected_package[jax]",
        "test_expected_package[jaxlib]",
    } <= results.keys()
    assert len(results) >= 20


def test_device_count_mismatch_fails_naming_both_counts(tmp_path: Path) -> None:
    results = _run_suite(
        tmp_path, NIGHTLY_EXPECTED_DEVICES="4", XLA_FLAGS="--xla_force_host_platform_device_count=2"
    )
    failed = {name: message for name, (tag, message) in results.items() if tag != "passed"}
    assert failed.keys() == {"test_device_count"}, failed
    assert "NIGHTLY_EXPECTED_DEVICES=4 but jax found 2 cpu device(s)" in failed["test_device_count"]
    assert all(results[name][0] == "passed" for name in COLLECTIVES)  # two devices still communicate


def test_wrong_package_version_fails_naming_package_and_versions(tmp_path: Path) -> None:
    results = _run_suite(
        tmp_path, NIGHTLY_EXPECTED_DEVICES="4", NIGHTLY_EXPECTED_PACKAGES="jax==0.0.1,jaxlib"
    )
    failed = {name: message for name, (tag, message) in results.items() if tag != "passed"}
    assert failed.keys() == {"test_expected_package[jax]"}, failed
    found = importlib.metadata.version("jax")
    assert f"jax: expected version 0.0.1, found {found}" in failed["test_expected_package[jax]"]


def test_missing_framework_is_a_usage_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTLY_")}
    cmd = [sys.executable, "-m", "pytest", str(SUITE), "-q"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "NIGHTLY_FRAMEWORK must be one of ('jax', 'torch')" in proc.stderr
