"""Whole nights of a pipeline written in a test: a copy of the shipped catalog plus that pipeline's
YAML, run by `run_night` on a test instance with the home's local resources."""

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.definitions import build_definitions
from nightly_assets.night import NightOutcome, run_night
from nightly_assets.resources import REPO_WHEELHOUSE, resources_for
from nightly_assets.results import NightKey
from nightly_assets.warehouse.rows import StageRow
from nightly_assets_tests.catalog_files import copy_catalog, write_pipeline


@dataclass
class CatalogNights:
    catalog: Path
    instance: dg.DagsterInstance
    home: Path
    keys: list[NightKey] = field(default_factory=list)  # every night run, in order

    def run(self, text: str, date: str) -> tuple[NightKey, dict[str, StageRow], NightOutcome]:
        """One night of the pipeline `text` (written as <its name>/defs.yaml), for its first target:
        the night's key, its stage rows by name, and the outcome."""
        name = yaml.safe_load(text)["name"]
        write_pipeline(self.catalog, text)
        catalog = load_catalog(self.catalog)
        key = NightKey(name, dt.date.fromisoformat(date), catalog.pipelines[name].targets[0].name)
        resources = resources_for("local", self.home)  # from the environment as the test set it
        outcome = run_night(build_definitions(self.catalog), self.instance, catalog, key, resources)
        self.keys.append(key)
        with dg.build_resources({"warehouse": resources["warehouse"]}) as resolved:  # EnvVars resolved
            stages = {s.stage: s for s in resolved.warehouse.store().stages(key)}
        return key, stages, outcome


@pytest.fixture
def catalog_nights(nightly_home: Path, tmp_path: Path) -> Iterator[CatalogNights]:
    catalog = copy_catalog(tmp_path / "catalog")
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        yield CatalogNights(catalog, instance, nightly_home)


@pytest.fixture
def wheelhouse(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Offline builds and installs from the repository's wheelhouse (what `make setup` fills)."""
    if not any(REPO_WHEELHOUSE.glob("flit_core-3*.whl")):
        pytest.fail(f"{REPO_WHEELHOUSE} lacks the fixture projects' packages: run `make setup`")
    monkeypatch.setenv("NIGHTLY_WHEELHOUSE", str(REPO_WHEELHOUSE))
    monkeypatch.delenv("NIGHTLY_PACKAGE_INDEX_URL", raising=False)
    return REPO_WHEELHOUSE
