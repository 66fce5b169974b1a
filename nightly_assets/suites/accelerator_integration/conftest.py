"""Accelerator integration suite: configuration, read from environment variables.

NIGHTLY_FRAMEWORK          `jax` or `torch` (required).
NIGHTLY_EXPECTED_DEVICES   how many devices the target has, e.g. 8 on an 8xMI300 host (required, >= 1).
NIGHTLY_PLATFORM           `cpu`, `gpu` (CUDA or ROCm) or `auto` (default: whatever the framework reports).
NIGHTLY_EXPECTED_PACKAGES  comma-separated `dist_name` or `dist_name==version`: the night's wheels
                           (default: the framework alone, any version).

On CPU the devices are simulated. jax: XLA_FLAGS gets --xla_force_host_platform_device_count=N
(N = NIGHTLY_EXPECTED_DEVICES) before jax is imported, when NIGHTLY_PLATFORM is `cpu`, or `auto`
and no GPU is visible (JAX_PLATFORMS=cpu, or no /dev/kfd nor /dev/nvidia*); an XLA_FLAGS that
already sets that count is respected. torch: the collectives run in N gloo processes, and the
device count is the number of ranks that joined the process group.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from _backends import Backend, load
from packaging.version import InvalidVersion, Version  # packaging: a dependency of pytest

FRAMEWORKS = ("jax", "torch")
PLATFORMS = ("cpu", "gpu", "auto")
FORCE_COUNT = "--xla_force_host_platform_device_count"
SETTINGS = pytest.StashKey["Settings"]()


@dataclass(frozen=True)
class Settings:
    framework: str
    expected_devices: int
    platform: str
    packages: tuple[tuple[str, str | None], ...]  # (dist name, version or None)


def _settings(env: Mapping[str, str]) -> Settings:
    framework = env.get("NIGHTLY_FRAMEWORK", "").strip().lower()
    if framework not in FRAMEWORKS:
        raise pytest.UsageError(f"NIGHTLY_FRAMEWORK must be one of {FRAMEWORKS}, got {framework!r}")
    count = env.get("NIGHTLY_EXPECTED_DEVICES", "").strip()
    if not count.isdigit() or int(count) < 1:
        raise pytest.UsageError(f"NIGHTLY_EXPECTED_DEVICES must be an integer >= 1, got {count!r}")
    platform = env.get("NIGHTLY_PLATFORM", "auto").strip().lower() or "auto"
    if platform not in PLATFORMS:
        raise pytest.UsageError(f"NIGHTLY_PLATFORM must be one of {PLATFORMS}, got {platform!r}")
    packages = dict(
        _package(item) for item in env.get("NIGHTLY_EXPECTED_PACKAGES", "").split(",") if item.strip()
    )
    if not any(re.sub(r"[-_.]+", "-", n).lower() == framework for n in packages):
        packages = {framework: None, **packages}
    return Settings(framework, int(count), platform, tuple(packages.items()))


def _package(item: str) -> tuple[str, str | None]:
    name, pinned, version = (part.strip() for part in item.partition("=="))
    try:
        valid = bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name)) and (
            not pinned or bool(Version(version))
        )
    except InvalidVersion:
        valid = False
    if not valid:
        raise pytest.UsageError(f"NIGHTLY_EXPECTED_PACKAGES: {item.strip()!r} is not dist_name[==version]")
    return name, version or None


def _gpu_visible() -> bool:
    if os.environ.get("JAX_PLATFORMS", "").strip().lower() == "cpu":
        return False
    return os.path.exists("/dev/kfd") or bool(glob.glob("/dev/nvidia[0-9]*"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: the night's wheels, installed, on the target")
    config.addinivalue_line("markers", "multi_device: communication between all devices of the target")
    settings = _settings(os.environ)
    config.stash[SETTINGS] = settings
    cpu = settings.platform == "cpu" or (settings.platform == "auto" and not _gpu_visible())
    flags = os.environ.get("XLA_FLAGS", "")
    if settings.framework == "jax" and cpu and FORCE_COUNT not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {FORCE_COUNT}={settings.expected_devices}".strip()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "expected_package" in metafunc.fixturenames:
        packages = metafunc.config.stash[SETTINGS].packages
        metafunc.parametrize("expected_package", packages, ids=[name for name, _ in packages])


def pytest_report_header(config: pytest.Config) -> str:
    s = config.stash[SETTINGS]
    return (
        f"nightly: framework={s.framework} expected_devices={s.expected_devices} platform={s.platform}"
        f" XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    )


@pytest.fixture(scope="session")
def settings(pytestconfig: pytest.Config) -> Settings:
    return pytestconfig.stash[SETTINGS]


@pytest.fixture(scope="session")
def backend(settings: Settings) -> Backend:
    """The framework under test, imported on first use (after XLA_FLAGS is set)."""
    return load(settings.framework, cpu_ranks=settings.expected_devices)
