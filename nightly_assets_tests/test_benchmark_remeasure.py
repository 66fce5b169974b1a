"""The benchmarks stage measures a benchmark again before its regression alerts: the real stage runs
a real command (a script that reports the values queued for it) on the local backend, after nights
seeded in the warehouse as the stage records them; perf_baseline then judges what it recorded."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.partitions import partition_key, pipeline_partitions
from nightly_assets.resources import resources_for
from nightly_assets.results import BenchmarkResult, NightKey
from nightly_assets.stage_kinds.benchmarks import build_benchmarks_asset
from nightly_assets.stage_kinds.perf_baseline import build_perf_baseline_asset
from nightly_assets.stages import StageSpec
from nightly_assets.warehouse.store import Warehouse
from nightly_assets_tests.catalog_files import copy_catalog, write_pipeline

PIPELINE = """
name: remeasure
title: remeasure nightly
seed: "003"
description: A benchmark measured again before it alerts.
cron: "0 2 * * *"
start_date: 2026-11-01
repositories:
  - {{name: app, url: "{upstream}", branch: main}}
targets:
  - {{name: cpu, arch: amd64}}
stages:
  - {{name: sources, kind: sources, description: The pinned checkout.}}
  - {{name: environment, kind: environment, deps: [sources], runner: local, description: Venv.}}
  - name: benchmarks
    kind: benchmarks
    deps: [environment]
    runner: local
    description: The step's cost.
    params: {{command: [python, "{script}", "{{output}}"], remeasure_attempts: {attempts}}}
  - {{name: perf_baseline, kind: perf_baseline, deps: [benchmarks], description: The level.}}
  - {{name: night_summary, kind: night_summary, deps: [perf_baseline], description: Summary.}}
"""
# Writes the next value queued in its folder's queue.json (or exits 1 when the queue says "fail").
SCRIPT = """\
import json, pathlib, sys
queue = pathlib.Path(__file__).with_name("queue.json")
values = json.loads(queue.read_text())
value = values.pop(0)
queue.write_text(json.dumps(values))
if value == "fail":
    sys.exit("the benchmark crashed")
json.dump({"benchmarks": [{"name": "step_ms", "value": value, "unit": "ms"}]}, open(sys.argv[1], "w"))
"""
HISTORY = [10.0, 10.1, 9.9, 10.05, 9.95, 10.1, 9.9, 10.0, 10.05, 9.95]  # nights 1 to 10
TONIGHT = dt.date(2026, 11, 12)


@dataclass
class Night:
    benchmarks: dict[str, Any]  # the benchmarks stage's manifest
    perf_baseline: dict[str, Any]
    recorded: float  # the night's value in the warehouse
    metadata: dict[str, Any]
    runs: int  # how often the command ran
    regressions: int


@dataclass
class Stages:
    folder: Path
    store: Warehouse
    artefacts: Any
    assets: list[dg.AssetsDefinition]
    resources: dict[str, Any]
    instance: dg.DagsterInstance

    def run(self, night_11: float, queue: list[float | str]) -> Night:
        """Nights 1 to 10 near 10 ms and night 11 at `night_11` as recorded; tonight (night 12)
        the real stages, the command reporting `queue`'s values in turn."""
        for day, value in enumerate([*HISTORY, night_11], start=1):
            key = NightKey("remeasure", dt.date(2026, 11, day), "cpu")
            self.store.record_night(key, run_id="seeded", status="success", pins={"app": f"{day:040x}"})
            # On what the local backend records of this host with no GPU asked for: none.
            self.store.record_benchmarks(
                key, [BenchmarkResult("step_ms", value, "ms")], devices=DeviceFacts()
            )
        tonight = NightKey("remeasure", TONIGHT, "cpu")
        self.store.record_night(tonight, run_id="tonight", status="running", pins={"app": "c" * 40})
        self.artefacts.write_manifest(tonight, "environment", {"mode": "venv", "python": sys.executable})
        (self.folder / "queue.json").write_text(json.dumps(queue))
        materializations: list[dg.AssetMaterialization] = []
        for asset in self.assets:
            result = dg.materialize(
                [asset],
                partition_key=str(partition_key(TONIGHT, "cpu")),
                resources=self.resources,
                instance=self.instance,
            )
            assert result.success
            materializations += result.asset_materializations_for_node(asset.op.name)
        [recorded] = self.store.benchmark_series(
            "remeasure", "cpu", "step_ms", before=TONIGHT + dt.timedelta(days=1), limit=1
        )
        return Night(
            self.artefacts.read_manifest(tonight, "benchmarks"),
            self.artefacts.read_manifest(tonight, "perf_baseline"),
            recorded[1],
            dict(materializations[0].metadata),
            len(queue) - len(json.loads((self.folder / "queue.json").read_text())),
            len(self.store.regressions("remeasure")),
        )


def stages(nightly_home: Path, tmp_path: Path, attempts: int) -> Iterator[Stages]:
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "bench.py").write_text(SCRIPT)
    catalog_dir = copy_catalog(tmp_path / "catalog")
    document = PIPELINE.format(
        upstream=tmp_path / "no-upstream", script=folder / "bench.py", attempts=attempts
    )
    write_pipeline(catalog_dir, document)
    catalog = load_catalog(catalog_dir)
    pipeline = catalog.pipelines["remeasure"]
    partitions = pipeline_partitions(pipeline)
    benchmarks = StageSpec(catalog, catalog_dir, pipeline, pipeline.stage("benchmarks"), partitions)
    perf = StageSpec(catalog, catalog_dir, pipeline, pipeline.stage("perf_baseline"), partitions)
    definitions = resources_for("local", nightly_home)
    (tmp_path / "dagster_home").mkdir()
    with (
        dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance,
        dg.build_resources({k: definitions[k] for k in ("artefacts", "warehouse")}) as built,
    ):
        yield Stages(
            folder,
            built.warehouse.store(),
            built.artefacts,
            [build_benchmarks_asset(benchmarks), build_perf_baseline_asset(perf)],
            definitions,
            instance,
        )


@pytest.fixture
def one_attempt(nightly_home: Path, tmp_path: Path) -> Iterator[Stages]:
    yield from stages(nightly_home, tmp_path, attempts=1)


@pytest.fixture
def no_attempt(nightly_home: Path, tmp_path: Path) -> Iterator[Stages]:
    yield from stages(nightly_home, tmp_path, attempts=0)


def test_a_change_the_remeasurement_refutes_is_an_outlier_recorded_not_alerted(one_attempt: Stages) -> None:
    # Nights 11 and 12 at 13 ms would confirm a 30 % regression; measured again, tonight is 10 ms.
    night = one_attempt.run(13.0, [13.1, 10.02])
    assert night.runs == 2
    remeasured = night.benchmarks["remeasured"]["step_ms"]
    assert remeasured["confirmed"] is False and remeasured["first"] == 13.1
    assert remeasured["remeasured"] == [10.02]
    assert remeasured["text"].startswith("13.1 was an outlier: re-measured 10.02 in ")
    assert night.recorded == 10.02 and night.benchmarks["benchmarks"]["step_ms"]["value"] == 10.02
    assert night.metadata["remeasured"].value["step_ms"]["first"] == 13.1
    row = night.perf_baseline["comparison"]["step_ms"]
    assert row["state"] in ("ok", "suspect") and row["regression"] is None
    assert row["remeasured"] == remeasured["text"]
    assert night.regressions == 0
    # Both runs' logs are kept: the re-measurement does not overwrite the first one's.
    folder = one_attempt.artefacts.stage_dir(NightKey("remeasure", TONIGHT, "cpu"), "benchmarks")
    assert sorted(p.name for p in folder.glob("command*.log")) == ["command-2.log", "command.log"]


def test_a_change_the_remeasurement_confirms_alerts(one_attempt: Stages) -> None:
    night = one_attempt.run(13.0, [13.1, 12.9])
    remeasured = night.benchmarks["remeasured"]["step_ms"]
    assert remeasured["confirmed"] is True and remeasured["text"].startswith("confirmed by 12.9 in ")
    assert night.recorded == 13.1  # the first measurement stands
    assert night.perf_baseline["comparison"]["step_ms"]["state"] == "regressed"
    assert night.regressions == 1


def test_a_remeasurement_that_fails_leaves_the_alert_saying_why(one_attempt: Stages) -> None:
    night = one_attempt.run(13.0, [13.1, "fail"])
    remeasured = night.benchmarks["remeasured"]["step_ms"]
    assert remeasured["confirmed"] is True and remeasured["remeasured"] == []
    assert remeasured["text"].startswith("re-measuring failed (attempt 1 failed: ")
    assert night.regressions == 1


def test_a_night_without_a_change_is_measured_once(one_attempt: Stages) -> None:
    night = one_attempt.run(10.0, [10.05, 99.0])
    assert night.runs == 1 and "remeasured" not in night.benchmarks
    assert night.perf_baseline["comparison"]["step_ms"]["state"] == "ok"


def test_no_attempts_alerts_on_the_first_measurement(no_attempt: Stages) -> None:
    night = no_attempt.run(13.0, [13.1, 10.0])
    assert night.runs == 1 and "remeasured" not in night.benchmarks
    assert night.regressions == 1
