"""Shared fixtures: an isolated NIGHTLY_HOME and DAGSTER_HOME per test, and the peers' fixtures."""

import pytest

pytest_plugins = [
    "nightly_assets_tests.peers.mysql",
    "nightly_assets_tests.peers.docker",
    "nightly_assets_tests.peers.registry",
]


@pytest.fixture
def nightly_home(tmp_path, monkeypatch):
    """A fresh embedded-default home: artefacts, SQLite warehouse, git caches, alerts."""
    home = tmp_path / "nightly"
    monkeypatch.setenv("NIGHTLY_HOME", str(home))
    monkeypatch.setenv("NIGHTLY_ENV", "local")
    monkeypatch.delenv("NIGHTLY_WAREHOUSE_URL", raising=False)
    monkeypatch.delenv("NIGHTLY_CATALOG_DIR", raising=False)
    return home
