"""Shared fixtures: an isolated NIGHTLY_HOME and DAGSTER_HOME per test, and the peers' fixtures;
the grouping of tests onto pytest-xdist workers by the peer they share."""

import pytest

from nightly_assets_tests.peers import shared

pytest_plugins = [
    "nightly_assets_tests.peers.mysql",
    "nightly_assets_tests.peers.docker",
    "nightly_assets_tests.peers.registry",
    "nightly_assets_tests.peers.bazel",
    "nightly_assets_tests.peers.buildgrid",
    "nightly_assets_tests.peers.tpu_api",
    "nightly_assets_tests.peers.k8s_api",
    "nightly_assets_tests.peers.sshd",
    "nightly_assets_tests.peers.github_api",
    "nightly_assets_tests.peers.gcs",
    "nightly_assets_tests.peers.slack_api",
    "nightly_assets_tests.peers.pypiserver",
    "nightly_assets_tests.peers.slurm",
    "nightly_assets_tests.tpu_harness",
    "nightly_assets_tests.catalog_nights",
]


@pytest.fixture
def nightly_home(tmp_path, monkeypatch):
    """A fresh embedded-default home: artefacts, SQLite warehouse, git caches, alerts."""
    home = tmp_path / "nightly"
    monkeypatch.setenv("NIGHTLY_HOME", str(home))
    monkeypatch.setenv("NIGHTLY_ENV", "local")
    monkeypatch.delenv("NIGHTLY_WAREHOUSE_URL", raising=False)
    monkeypatch.delenv("NIGHTLY_CATALOG_DIR", raising=False)
    for name in ("NIGHTLY_ARTEFACTS_BUCKET", "NIGHTLY_ARTEFACTS_URL", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    # No engine unless a test asks for one (the `docker_engine` fixture): the demo then takes
    # its virtualenv path whatever the developer's machine runs.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/nightly-no-docker.sock")
    monkeypatch.delenv("NIGHTLY_RUNNER_POOL", raising=False)
    return home


@pytest.fixture
def dagster_home(tmp_path, monkeypatch, nightly_home):
    """A fresh DAGSTER_HOME for `nightly` commands (theirs or a subprocess's) beside the fresh home."""
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


# Tests that share a peer which one process must own run on one xdist worker (`--dist loadgroup`):
# Bazel locks its output base per command, Slurm's one node has one name, the browser tests share
# one UI daemon, and the container tests assert that the engine holds no container of theirs after
# them (another worker's builds would show) and clean images up. The first marker that names a
# group wins, so a test is in one group only.
WORKER_GROUP_OF_MARKER = {
    "browser": "browser",
    "docker": "docker",
    "registry": "docker",
    "bazel": "bazel",
    "slurm": "slurm",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = next((m for m in WORKER_GROUP_OF_MARKER if item.get_closest_marker(m)), None)
        if marker is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(WORKER_GROUP_OF_MARKER[marker]))


def pytest_configure(config: pytest.Config) -> None:
    shared.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    shared.stop_owned(config)
