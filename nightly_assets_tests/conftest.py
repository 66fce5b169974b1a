"""Shared fixtures: an isolated NIGHTLY_HOME and DAGSTER_HOME per test, and the peers' fixtures;
the grouping of tests onto pytest-xdist workers by the peer they share."""

import pytest

from nightly_assets_tests.peers import shared, worker_groups

pytest_plugins = [
    "nightly_assets_tests.peers.mysql",
    "nightly_assets_tests.peers.docker",
    "nightly_assets_tests.peers.registry",
    "nightly_assets_tests.peers.bazel",
    "nightly_assets_tests.peers.buildgrid",
    "nightly_assets_tests.peers.tpu_api",
    "nightly_assets_tests.peers.k8s_api",
    "nightly_assets_tests.peers.sshd",
    "nightly_assets_tests.peers.smtp",
    "nightly_assets_tests.peers.github_api",
    "nightly_assets_tests.peers.gcs",
    "nightly_assets_tests.peers.slack_api",
    "nightly_assets_tests.peers.pypiserver",
    "nightly_assets_tests.peers.slurm",
    "nightly_assets_tests.tpu_harness",
    "nightly_assets_tests.catalog_nights",
    "nightly_assets_tests.deploy_builds",
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
    # The results site's rebuild costs each night its imports (Jinja, matplotlib): on in the
    # tests that read the site (test_results_site.py), off in the hundreds of nights that do not.
    monkeypatch.setenv("NIGHTLY_RESULTS_SITE", "0")
    return home


@pytest.fixture
def dagster_home(tmp_path, monkeypatch, nightly_home):
    """A fresh DAGSTER_HOME for `nightly` commands (theirs or a subprocess's) beside the fresh home."""
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    worker_groups.record(items)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> worker_groups.PeerGroupScheduling:
    """Tests sharing a one-owner peer on one worker (see peers/worker_groups.py)."""
    return worker_groups.PeerGroupScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    shared.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    shared.stop_owned(config)
    worker_groups.forget(config)
