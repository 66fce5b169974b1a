"""The `tpu` pipeline's nightly tier end to end: the catalog's graph with the suite on a TPU VM made
by the real TpuClient against the fake TPU API, reached over a real sshd, deleted always; the
cost in the warehouse, the summary and a check; the timing JSON into the benchmarks."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._core.events import DagsterEventType

from nightly_assets.catalog.loader import catalog_dir, load_catalog
from nightly_assets.definitions import build_definitions
from nightly_assets.night import NightOutcome, run_night
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets.tpu.checks import COST_WITHIN_BUDGET
from nightly_assets_tests.peers.sshd import Sshd
from nightly_assets_tests.peers.tpu_api import FakeTpuApi

pytestmark = [pytest.mark.tpu, pytest.mark.ssh]

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
        self.assertEqual(scoreapi.score(2), 4)

    def test_batch(self):
        self.assertEqual([scoreapi.score(x) for x in (1, 2)], [2, 4])


def test_cpu_only_is_deselected():
    raise AssertionError("not marked tpu: must not run")
"""


def _git(repo: Path, *argv: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2026-11-02T10:00:00Z",
        "GIT_COMMITTER_DATE": "2026-11-02T10:00:00Z",
    }
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    done = subprocess.run(
        ["git", "-C", str(repo), *argv], check=True, env=env, capture_output=True, text=True
    )
    return done.stdout.strip()


def make_sglang_repo(root: Path, sleep_s: float = 0.0) -> tuple[Path, str]:
    """A tiny package with seed 003's test layout, committed on `main`; (path, sha)."""
    (root / "test" / "srt").mkdir(parents=True)
    (root / "setup.py").write_text(
        'from setuptools import setup\nsetup(name="scoreapi", version="0.1", py_modules=["scoreapi"])\n'
    )
    (root / "scoreapi.py").write_text("def score(x):\n    return 2 * x\n")
    (root / "conftest.py").write_text(
        'def pytest_configure(config):\n    config.addinivalue_line("markers", "tpu: on a TPU")\n'
    )
    (root / "test" / "srt" / "test_score_api.py").write_text(SUITE.format(sleep_s=sleep_s))
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "score api")
    return root, _git(root, "rev-parse", "HEAD")


@pytest.fixture(scope="session")
def vm_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The VM image's Python: a venv that also sees this one's packages (pytest), so the run's
    `pip install -e` lands in it and not in the developer's environment."""
    root = tmp_path_factory.mktemp("vm-image")
    venv.EnvBuilder(with_pip=False).create(root)
    site = next((root / "lib").glob("python3*/site-packages"))
    (site / "image.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(root / "bin" / "python")


@pytest.fixture
def tpu_night(nightly_home, tmp_path, monkeypatch, tpu_api: FakeTpuApi, sshd: Sshd, vm_python: str):
    """Run one night of the catalog's `tpu` pipeline against the peers: (outcome, check -> passed)."""

    def run(sleep_s: float = 0.0, **target_params: Any) -> tuple[NightOutcome, dict[str, bool]]:
        repo, _ = make_sglang_repo(tmp_path / "sglang", sleep_s)
        catalog = tmp_path / "catalog"
        shutil.copytree(catalog_dir(), catalog)
        path = catalog / "pipelines" / "tpu.yaml"
        document = yaml.safe_load(path.read_text())
        document["repositories"][0]["url"] = str(repo)
        document["targets"][0]["params"].update(target_params)
        stage = next(s for s in document["stages"] if s["name"] == "tests_tpu")
        stage["params"] = {
            "python": vm_python,
            "venv": False,
            "install": True,
            "pip_args": ["--no-index", "--no-build-isolation", "--no-deps"],
            "timing_file": "test_timing.json",
        }
        path.write_text(yaml.safe_dump(document, sort_keys=False))
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
        resources = resources_for("local", nightly_home)
        (tmp_path / "dagster_home").mkdir(exist_ok=True)
        with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
            outcome = run_night(
                build_definitions(catalog), instance, load_catalog(catalog), KEY, resources["notifier"]
            )
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


def test_a_nightly_tier_runs_the_suite_on_a_vm_and_records_cost_timing_and_summary(
    tpu_night, tpu_api: FakeTpuApi, nightly_home: Path
) -> None:
    outcome, checks = tpu_night()
    store = resources_for("local", nightly_home)["warehouse"].store()
    stages = {s.stage: s for s in store.stages(KEY)}
    assert outcome.succeeded, {s: (r.status, r.detail) for s, r in stages.items()}
    assert {s: r.status for s, r in stages.items()} == dict.fromkeys(
        ["sources", "tests_tpu", "benchmarks", "perf_baseline", "night_summary"], "success"
    )
    # The two tpu-marked tests ran on the "VM" from the installed checkout; the unmarked one did not.
    assert store.suite_counts(KEY)["tests_tpu"] | {} == {
        "total": 2,
        "passed": 2,
        "failed": 0,
        "error": 0,
        "skipped": 0,
        "collected": 0,
    }
    [cost] = store.costs(KEY)
    assert cost.stage == "tests_tpu" and cost.machine_type == "v6e-1" and cost.ended == "completed"
    assert cost.lifetime_s > 0 and cost.hourly_usd == 0.64
    assert cost.cost_usd == pytest.approx(cost.lifetime_s / 3600 * 0.64, rel=1e-3)
    summary = (nightly_home / "artefacts/tpu/2026-11-03/v6e-1/night_summary/summary.md").read_text()
    assert "| tests_tpu | " + cost.machine.rsplit("/", 1)[-1] + " | v6e-1 |" in summary
    assert f"Machine cost tonight: ${cost.cost_usd:.4f}" in summary
    # The suite's own timing JSON (tearDownClass) became tonight's benchmark.
    manifest = json.loads(
        (nightly_home / "artefacts/tpu/2026-11-03/v6e-1/benchmarks/manifest.json").read_text()
    )
    assert 0 < manifest["benchmarks"]["elapsed_seconds"]["value"] < cost.lifetime_s
    assert checks[COST_WITHIN_BUDGET] is True and checks["tests_passed"] is True
    assert tpu_api.node_names() == [] and not tpu_api.queued


def test_a_vm_preempted_in_the_middle_of_the_suite_fails_the_stage_with_the_reason_and_its_cost(
    tpu_night, tpu_api: FakeTpuApi, sshd: Sshd, nightly_home: Path
) -> None:
    tpu_api.preempt_after_s = 2.0
    tpu_api.on_preempt = lambda _name: sshd.drop_sessions()
    outcome, _ = tpu_night(sleep_s=30)
    assert not outcome.succeeded
    store = resources_for("local", nightly_home)["warehouse"].store()
    stage = {s.stage: s for s in store.stages(KEY)}["tests_tpu"]
    assert stage.status == "failure" and "ended early (preempted)" in (stage.detail or ""), stage.detail
    [cost] = store.costs(KEY)
    assert cost.ended == "preempted" and cost.cost_usd > 0
    assert any("preempted" in line for alert in outcome.alerts for line in alert.lines), outcome.alerts
    summary = (nightly_home / "artefacts/tpu/2026-11-03/v6e-1/night_summary/summary.md").read_text()
    assert "| preempted |" in summary
    assert tpu_api.node_names() == []


def test_a_run_over_the_cost_budget_warns(tpu_night, tpu_api: FakeTpuApi) -> None:
    outcome, checks = tpu_night(hourly_usd=3600.0)  # $1 a second: any run is over the $0.10 budget
    assert outcome.succeeded and checks[COST_WITHIN_BUDGET] is False
    warnings = [a for a in outcome.alerts if a.severity == "warn"]
    assert any(COST_WITHIN_BUDGET in line and "budget $0.1" in line for a in warnings for line in a.lines)
    assert tpu_api.node_names() == []


def test_the_remote_runner_refuses_an_archive_that_escapes_its_folder(tmp_path: Path) -> None:
    import tarfile

    evil = tmp_path / "evil.txt"
    evil.write_text("x")
    tarball = tmp_path / "source.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(evil, arcname="../escaped.txt")
    script = Path(__file__).parents[1] / "nightly_assets" / "tpu" / "remote_suite.py"
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), "--source", str(tarball), "--junit", "j.xml", "--timing", "t.json"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert not (tmp_path / "escaped.txt").exists()
    assert "escaped.txt" in done.stderr + done.stdout
