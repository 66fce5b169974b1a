"""Harness for `tpu` pipeline tests: a repository shaped like seed 003's, the "VM image" Python,
a catalog copy pointed at the peers, and `tpu_night` to run one night of it."""

from __future__ import annotations

import datetime as dt
import getpass
import shutil
import sysconfig
import venv
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.definitions import build_definitions
from nightly_assets.night import NightOutcome, run_night
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets_tests.catalog_files import copy_catalog, read_pipeline, write_pipeline
from nightly_assets_tests.git_repo import commit_folder
from nightly_assets_tests.peers.sshd import Sshd
from nightly_assets_tests.peers.tpu_api import FakeTpuApi

KEY = NightKey("tpu", dt.date(2026, 11, 3), "v6e-1")

# Seed 003's suite shape: a unittest class whose tearDownClass writes the timing JSON.
SUITE = """
import json, os, time, unittest

import pytest

import scoreapi


@pytest.mark.tpu
class TestScoreAPI(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.start_time = time.time()

    @classmethod
    def tearDownClass(cls):
        results = {{"timestamp": time.time(), "elapsed_seconds": time.time() - cls.start_time,
                   "commit": os.getenv("GITHUB_SHA", "unknown")}}
        with open(os.environ["NIGHTLY_TIMING_FILE"], "w") as handle:
            json.dump(results, handle)

    def test_score(self):
        print("suite started", flush=True)
        time.sleep({sleep_s})
        self.assertEqual(scoreapi.score(2), {expected})

    def test_batch(self):
        self.assertEqual([scoreapi.score(x) for x in (1, 2)], [2, 4])


def test_cpu_only_is_deselected():
    raise AssertionError("not marked tpu: must not run")
"""


def make_sglang_repo(root: Path, sleep_s: float = 0.0, expected: int = 4) -> tuple[Path, str]:
    """A tiny package with seed 003's test layout, committed on `main`; (path, sha)."""
    (root / "test" / "srt").mkdir(parents=True)
    (root / "setup.py").write_text(
        'from setuptools import setup\nsetup(name="scoreapi", version="0.1", py_modules=["scoreapi"])\n'
    )
    (root / "scoreapi.py").write_text("def score(x):\n    return 2 * x\n")
    (root / "conftest.py").write_text(
        'def pytest_configure(config):\n    config.addinivalue_line("markers", "tpu: on a TPU")\n'
    )
    (root / "test" / "srt" / "test_score_api.py").write_text(SUITE.format(sleep_s=sleep_s, expected=expected))
    return root, commit_folder(root, "score api")


@pytest.fixture(scope="session")
def vm_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The VM image's Python: a venv that also sees this one's packages (pytest), so the run's
    `pip install -e` lands in it and not in the developer's environment."""
    root = tmp_path_factory.mktemp("vm-image")
    venv.EnvBuilder(with_pip=False).create(root)
    site = next((root / "lib").glob("python3*/site-packages"))
    (site / "image.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(root / "bin" / "python")


def tpu_catalog(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    repo: Path,
    vm_python: str,
    tpu_api: FakeTpuApi,
    sshd: Sshd,
    github_repo: str | None = None,
    suite: dict[str, Any] | None = None,
    **target_params: Any,
) -> Path:
    """A copy of the catalog whose `tpu` pipeline tests `repo` on the peers' "VM" with `vm_python`;
    the TPU resource pointed at the fake TPU API and the sshd through its variables. Failure
    issues go to `github_repo` (None: none are opened); `suite` changes the stage's suite block."""
    catalog = tmp_path / "catalog"
    shutil.rmtree(catalog, ignore_errors=True)
    copy_catalog(catalog)
    document = read_pipeline(catalog, "tpu")
    document["repositories"][0]["url"] = str(repo)
    document["targets"][0]["params"].update(target_params)
    document["github"].update(repo=github_repo or "acme/unused", issue_on_failure=github_repo is not None)
    stage = next(s for s in document["stages"] if s["name"] == "tests_tpu")
    stage["suite"].update(suite or {})
    stage["params"] = {
        "python": vm_python,
        "venv": False,
        "install": True,
        "pip_args": ["--no-index", "--no-build-isolation", "--no-deps"],
        "timing_file": "test_timing.json",
    }
    write_pipeline(catalog, document)
    for name, value in {
        "PROJECT": "test-project",
        "API_ENDPOINT": tpu_api.url,
        "CREDENTIALS": "anonymous",
        "SSH_USER": getpass.getuser(),
        "SSH_PORT": str(sshd.port),
        "REMOTE_ROOT": str(tmp_path / "vm"),
        "POLL_S": "0.1",
        "READY_TIMEOUT_S": "10",
    }.items():
        monkeypatch.setenv(f"NIGHTLY_TPU_{name}", value)
    return catalog


@pytest.fixture
def tpu_night(nightly_home, tmp_path, monkeypatch, tpu_api: FakeTpuApi, sshd: Sshd, vm_python: str):
    """Run one night of the catalog's `tpu` pipeline against the peers: (outcome, check -> passed);
    `suite` changes the stage's suite block, `events` gets the run's log messages."""

    def run(
        sleep_s: float = 0.0,
        expected: int = 4,
        key: NightKey = KEY,
        github_repo: str | None = None,
        env: dict[str, str] | None = None,
        suite: dict[str, Any] | None = None,
        events: list[str] | None = None,
        **target_params: Any,
    ) -> tuple[NightOutcome, dict[str, bool]]:
        repo = tmp_path / "sglang"
        if not repo.exists():
            make_sglang_repo(repo, sleep_s, expected)
        catalog = tpu_catalog(
            tmp_path, monkeypatch, repo, vm_python, tpu_api, sshd, github_repo, suite, **target_params
        )
        for name, value in (env or {}).items():  # e.g. NIGHTLY_TPU_READY_TIMEOUT_S
            monkeypatch.setenv(name, value)
        resources = resources_for("local", nightly_home)
        (tmp_path / "dagster_home").mkdir(exist_ok=True)
        with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
            outcome = run_night(build_definitions(catalog), instance, load_catalog(catalog), key, resources)
            if events is not None:
                events.extend(e.message for e in instance.all_logs(outcome.run.run_id))
            evaluations = instance.all_logs(
                outcome.run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
            )
            checks = {
                e.dagster_event.event_specific_data.check_name: e.dagster_event.event_specific_data.passed  # type: ignore[union-attr]
                for e in evaluations
                if e.dagster_event is not None
            }
        return outcome, checks

    return run
