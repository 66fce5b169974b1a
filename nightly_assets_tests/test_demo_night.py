"""Real demo nights on the embedded default: built, installed, tested, benchmarked, gated, recorded."""

import datetime as dt
import json
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.catalog.models import Catalog
from nightly_assets.definitions import build_definitions
from nightly_assets.demo.sample_repo import ensure_sample_repo, load_history
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.night import NightOutcome, run_night
from nightly_assets.resources import resources_for
from nightly_assets.results import BenchmarkResult, NightKey
from nightly_assets_tests.catalog_files import copy_catalog, edit_pipeline

pytestmark = pytest.mark.slow
HISTORY = load_history()  # commits of 11-01, 11-06, 11-12, 11-18


@dataclass
class Night:
    defs: dg.Definitions
    instance: dg.DagsterInstance
    catalog: Catalog
    resources: dict
    home: Path

    def run(self, night: str, pipeline: str = "demo", target: str = "cpu") -> NightOutcome:
        key = NightKey(pipeline, dt.date.fromisoformat(night), target)
        return run_night(self.defs, self.instance, self.catalog, key, self.resources)

    @property
    def store(self):
        return self.resources["warehouse"].store()

    def materialized(self, stage: str, night: str, pipeline: str = "demo") -> bool:
        key = dg.AssetKey([pipeline, stage])
        partitions = self.instance.get_materialized_partitions(key)
        return f"{night}|cpu" in partitions

    def sha(self, commit: int) -> str | None:
        """SHA of the sample history's commit `commit` (0-based), as the demo's upstream has it."""
        return ensure_sample_repo(self.home / "git" / "sample" / "nightlysample")[commit].sha

    def alerts(self) -> list[dict]:
        path = self.home / "alerts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def nights(nightly_home, tmp_path):
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        yield Night(
            build_definitions(), instance, load_catalog(), resources_for("local", nightly_home), nightly_home
        )


def key(night: str) -> NightKey:
    return NightKey("demo", dt.date.fromisoformat(night), "cpu")


def test_demo_night_materializes_every_asset_and_fills_the_warehouse(nights):
    outcome = nights.run("2026-11-03")
    # The summary is written before the release; a summary run writes it again once it ended.
    assert outcome.succeeded and outcome.summary_run is not None
    assert outcome.summary_run.status == dg.DagsterRunStatus.SUCCESS
    for stage in [s.name for s in nights.catalog.pipelines["demo"].stages]:
        assert nights.materialized(stage, "2026-11-03"), stage
    expect = HISTORY[0].expect  # the commit of 11-01 is what 11-03 had at its end
    counts = nights.store.suite_counts(key("2026-11-03"))
    assert (
        counts["tests_unit"]["passed"] == counts["tests_unit"]["total"] == expect["unit"] + 1
    )  # + the patch's test
    assert counts["tests_integration"]["passed"] == expect["integration"]
    # No GPU here: the GPU suites are collected, not run (seed 001's arm64 dry run).
    assert counts["tests_e2e_gpu_1"]["collected"] == expect["e2e_gpu_1"]
    assert counts["tests_e2e_gpu_2"]["collected"] == expect["e2e_gpu_2"]
    night = next(n for n in nights.store.nights("demo") if n.night == dt.date(2026, 11, 3))
    assert night.status == "success"
    assert night.pins["nightlysample"] == nights.sha(0)
    history = nights.store.benchmark_series("demo", "cpu", "matmul_64", before=dt.date(2026, 11, 4), limit=5)
    assert len(history) == 1 and history[0][1] > 0 and history[0][2] == {"nightlysample": nights.sha(0)}
    published = list((nights.home / "index" / "demo").glob("nightlysample-0.1.0-*.whl"))
    assert len(published) == 1
    summary = (nights.home / "artefacts/demo/2026-11-03/cpu/night_summary/summary.md").read_text()
    assert "| Stage | Status | Runner | Duration (min) | Artifacts |" in summary
    assert "| tests_unit | success | local |" in summary
    assert "| release | success | orchestrator |" in summary and "did not start" not in summary
    records = nights.instance.fetch_materializations(dg.AssetKey(["demo", "night_summary"]), limit=5).records
    first, last = (
        r.asset_materialization.metadata["summary"].value  # type: ignore[union-attr]
        for r in sorted(records, key=lambda r: r.storage_id)
    )
    assert "| release | pending | - | - | - | runs after this summary |" in first
    assert last == summary  # the asset's metadata is the rewritten summary too
    [row] = [s for s in nights.store.stages(key("2026-11-03")) if s.stage == "night_summary"]
    assert row.run_id == outcome.summary_run.run_id and row.detail == "success"
    assert nights.alerts() == []


def test_failing_tests_block_release_and_alert_with_the_failure(nights):
    outcome = nights.run("2026-11-07")  # commit 0.2.0: mean() divides by len - 1
    assert not outcome.succeeded
    assert not nights.materialized("release", "2026-11-07")
    assert outcome.summary_run is not None and outcome.summary_run.status == dg.DagsterRunStatus.SUCCESS
    failed = nights.store.failed_cases(key("2026-11-07"), "tests_unit")
    assert [c.name for c in failed] == ["test_mean"]
    assert "assert" in (failed[0].message or "")
    night = next(n for n in nights.store.nights("demo") if n.night == dt.date(2026, 11, 7))
    assert night.status == "failure"
    errors = [a for a in nights.alerts() if a["severity"] == "error"]
    assert len(errors) == 1 and errors[0]["partition"] == "2026-11-07|cpu"
    # The alert names the stage, the count and the failing test with its message.
    [line] = errors[0]["lines"]
    assert line.startswith("tests_unit failed: ") and "1 failed of" in line
    assert "test_reduce::test_mean: assert" in line
    rows = {s.stage: s.status for s in nights.store.stages(key("2026-11-07"))}
    assert rows["tests_unit"] == "failure" and "release" not in rows


def test_rerun_of_a_failed_night_uses_that_nights_pin_and_replaces_its_rows(nights):
    first = nights.run("2026-11-07")
    assert not first.succeeded
    rows_before = nights.store.row_counts(key("2026-11-07"))
    pinned = nights.store.nights("demo")[0].pins["nightlysample"]
    assert pinned == nights.sha(1)
    # Upstream moves on today, long after the night ended (its fix landed on 11-12 already).
    upstream = nights.home / "git" / "sample" / "nightlysample"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "dev",
        "GIT_AUTHOR_EMAIL": "d@x",
        "GIT_COMMITTER_NAME": "dev",
        "GIT_COMMITTER_EMAIL": "d@x",
    }
    subprocess.run(
        ["git", "-C", str(upstream), "commit", "-q", "--allow-empty", "-m", "today's work"],
        check=True,
        env=env,
    )
    head = subprocess.run(
        ["git", "-C", str(upstream), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert head != pinned

    again = nights.run("2026-11-07")  # what a backfill of the failed night does
    assert not again.succeeded  # still the night's code, still the night's bug
    assert nights.store.nights("demo")[0].pins["nightlysample"] == pinned
    # The same rows, replaced; the night's record of its runs and alerts grows by the re-run's.
    rows_after = nights.store.row_counts(key("2026-11-07"))
    history = {"stage_runs": 0, "alerts": 0}
    assert {**rows_after, **history} == {**rows_before, **history}
    assert rows_after["stage_runs"] == 2 * rows_before["stage_runs"]
    assert rows_after["alerts"] == 2 * rows_before["alerts"] == 2  # one error alert a run
    runs = nights.store.night_runs(key("2026-11-07"))
    assert [r.run_id for r in runs] == [again.run.run_id, first.run.run_id]
    assert [c.name for c in nights.store.failed_cases(key("2026-11-07"), "tests_unit")] == ["test_mean"]


def test_a_perf_regression_alerts_once_with_the_first_bad_night_and_the_suspect_commit(nights):
    assert nights.run("2026-11-13").succeeded  # 0.2.1: the level the benchmarks had
    # A week of earlier nights in the warehouse around that level, each on its own commit (the
    # sample repository has four commits; a real upstream moves every night).
    tonight = {b.name: b for b in _benchmarks(nights, "2026-11-13")}
    devices = _devices(nights, "2026-11-13")  # the history ran on this machine's configuration too
    for i, day in enumerate(range(5, 13)):
        night = NightKey("demo", dt.date(2026, 11, day), "cpu")
        nights.store.record_night(
            night, run_id="seeded", status="success", pins={"nightlysample": f"{i:040x}"}
        )
        wobble = 1 + 0.01 * ((-1) ** i) * (i % 3)
        nights.store.record_benchmarks(
            night, [replace(b, value=b.value * wobble) for b in tonight.values()], devices=devices
        )
    first = nights.run("2026-11-19")  # 0.3.0: matmul rewritten, several times slower
    assert first.succeeded
    assert not [a for a in nights.alerts() if a["severity"] == "warn"]  # one slow night is no change yet
    comparison = _comparison(nights, "2026-11-19")["matmul_64"]
    assert comparison["state"] == "suspect" and comparison["ratio"] > 1.2

    outcome = nights.run("2026-11-20")  # the second night at the new level confirms it
    assert outcome.succeeded  # WARN checks alert, they do not gate
    assert nights.materialized("release", "2026-11-20")
    [warn] = [a for a in nights.alerts() if a["severity"] == "warn"]
    line = warn["lines"][0]
    assert line.startswith("perf_baseline:no_new_regression failed: matmul_64 regressed ")
    assert "from 2026-11-19 on" in line and "last good night 2026-11-13" in line
    good, bad = nights.sha(2), nights.sha(3)
    assert f"suspects: nightlysample {good[:10]}..{bad[:10]} [{bad[:10]} " in line
    # The night is `warn`, not `success`, wherever its status is read.
    night = next(n for n in nights.store.nights("demo") if n.night == dt.date(2026, 11, 20))
    assert night.status == "warn"
    [check] = [c for c in nights.store.checks(key("2026-11-20")) if not c.passed]
    assert (check.stage, check.name, check.severity) == ("perf_baseline", "no_new_regression", "WARN")
    summary = (nights.home / "artefacts/demo/2026-11-20/cpu/night_summary/summary.md").read_text()
    assert "## demo — night 2026-11-20 — cpu: warn" in summary
    assert "| perf_baseline | no_new_regression | WARN | matmul_64 regressed" in summary
    [found] = [r for r in nights.store.regressions("demo") if r.name == "matmul_64"]
    assert (found.night, found.first_bad, found.last_good) == (
        dt.date(2026, 11, 20),
        dt.date(2026, 11, 19),
        dt.date(2026, 11, 13),
    )
    assert found.worse and found.after > 1.2 * found.before
    assert found.commits["nightlysample"]["good"] == good
    assert [c["sha"] for c in found.commits["nightlysample"]["commits"]] == [bad]

    # Once: the next night at the same level is the new normal, no second alert.
    assert nights.run("2026-11-21").succeeded
    # (Other benchmarks are real timings too: on a loaded machine one may drift for two nights and
    # warn on its own; what must not come again is matmul_64's.)
    later = [a for a in nights.alerts() if a["severity"] == "warn" and a["partition"] == "2026-11-21|cpu"]
    assert not [line for a in later for line in a["lines"] if "matmul_64" in line], later
    assert _comparison(nights, "2026-11-21")["matmul_64"]["state"] == "ok"


def _benchmarks(nights, night: str) -> list[BenchmarkResult]:
    manifest = json.loads((nights.home / f"artefacts/demo/{night}/cpu/benchmarks/manifest.json").read_text())
    return [BenchmarkResult(name, **row) for name, row in manifest["benchmarks"].items()]


def _devices(nights, night: str) -> DeviceFacts:
    manifest = json.loads((nights.home / f"artefacts/demo/{night}/cpu/benchmarks/manifest.json").read_text())
    return DeviceFacts.model_validate(manifest["devices"])


def _comparison(nights, night: str) -> dict:
    path = nights.home / f"artefacts/demo/{night}/cpu/perf_baseline/manifest.json"
    return json.loads(path.read_text())["comparison"]


def test_a_failed_build_starts_no_test(nights, tmp_path, monkeypatch):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text('[project]\nname = "broken"\nversion = "not a version"\n')
    git_env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2026-11-02T10:00:00Z",
        "GIT_COMMITTER_DATE": "2026-11-02T10:00:00Z",
        "GIT_AUTHOR_NAME": "dev",
        "GIT_AUTHOR_EMAIL": "d@x",
        "GIT_COMMITTER_NAME": "dev",
        "GIT_COMMITTER_EMAIL": "d@x",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "broken build"]):
        subprocess.run(["git", "-C", str(broken), *args], check=True, env=git_env)
    catalog_dir = copy_catalog(tmp_path / "catalog")

    def from_broken(document: dict) -> None:
        document["repositories"][0].update(url=str(broken))
        del document["repositories"][0]["patches"]

    edit_pipeline(catalog_dir, "demo", from_broken)
    nights.defs = build_definitions(catalog_dir)
    nights.catalog = load_catalog(catalog_dir)

    outcome = nights.run("2026-11-03")
    assert not outcome.succeeded
    stages = {s.stage: s for s in nights.store.stages(key("2026-11-03"))}
    assert stages["wheels"].status == "failure"
    assert "not a version" in (stages["wheels"].detail or "") or "version" in (stages["wheels"].detail or "")
    assert not any(name.startswith("tests_") for name in stages)
    assert nights.store.suite_counts(key("2026-11-03")) == {}
    for suite in ("tests_unit", "tests_integration", "tests_e2e_gpu_1", "tests_e2e_gpu_2"):
        assert not nights.materialized(suite, "2026-11-03")
    summary = (nights.home / "artefacts/demo/2026-11-03/cpu/night_summary/summary.md").read_text()
    assert "| wheels | failure | local |" in summary
    assert "| tests_unit | skipped | - |" in summary
    assert any(line.startswith("wheels failed: ") for a in nights.alerts() for line in a["lines"])


@pytest.mark.mysql
def test_demo_night_on_the_mysql_warehouse(nightly_home, tmp_path, monkeypatch, mysql_url):
    monkeypatch.setenv("NIGHTLY_WAREHOUSE_URL", mysql_url)
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        resources = resources_for("local", nightly_home)
        night = Night(build_definitions(), instance, load_catalog(), resources, nightly_home)
        assert night.run("2026-11-13").succeeded
        from nightly_assets.warehouse.store import Warehouse

        counts = Warehouse(mysql_url).suite_counts(key("2026-11-13"))
        assert counts["tests_unit"]["passed"] == HISTORY[2].expect["unit"] + 1
        assert counts["tests_integration"]["passed"] == HISTORY[2].expect["integration"]


def test_failure_sensor_alerts_and_requests_the_summary_run(nights, tmp_path):
    from dagster._core.events import DagsterEventType

    from nightly_assets.reporting.resources import FileNotifierResource

    outcome = nights.run("2026-11-07")
    failure = nights.instance.all_logs(outcome.run.run_id, of_type=DagsterEventType.RUN_FAILURE)[0]
    sensor = next(s for s in nights.defs.sensors if s.name == "night_failure_alerts")
    inbox = tmp_path / "sensor_alerts.jsonl"
    nights.instance.add_run_tags(outcome.run.run_id, {"nightly/followed_up": ""})  # as if nobody had yet
    with dg.build_run_status_sensor_context(
        sensor_name=sensor.name,
        dagster_event=failure.dagster_event,
        dagster_instance=nights.instance,
        dagster_run=outcome.run,
        resources={
            "notifier": FileNotifierResource(path=str(inbox)),
            "warehouse": nights.resources["warehouse"],
            "artefacts": nights.resources["artefacts"],
        },
    ).for_run_failure() as context:
        [request] = sensor(context)
    assert isinstance(request, dg.RunRequest)
    assert request.job_name == "demo_summary" and request.partition_key == "2026-11-07|cpu"
    assert request.run_key == f"summary-{outcome.run.run_id}-2026-11-07|cpu"
    alerts = [json.loads(line) for line in inbox.read_text().splitlines()]
    assert [a["severity"] for a in alerts] == ["error"]
    assert alerts[0]["channel"] == "#nightly-demo"
