"""perf_baseline keeps one baseline per device configuration: nights on another GPU model, driver
or framework build are never compared (a step at the change is a new baseline, not a regression),
a regression within one configuration still alerts, and a configuration that comes back resumes
its own series. Earlier nights are seeded in the warehouse as the benchmarks stage records them;
the nights under test run the real perf_baseline asset on a manifest the benchmarks stage writes."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import dagster as dg
import pytest

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.catalog.models import Pipeline
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.partitions import partition_key, pipeline_partitions
from nightly_assets.reporting.summary import night_summary
from nightly_assets.resources import resources_for
from nightly_assets.results import BenchmarkResult, NightKey
from nightly_assets.stage_kinds.perf_baseline import build_perf_baseline_asset
from nightly_assets.stages import StageSpec
from nightly_assets.warehouse.rows import StageRow
from nightly_assets.warehouse.store import Warehouse
from nightly_assets_tests.catalog_files import copy_catalog, write_pipeline
from nightly_assets_tests.device_configs import H100, H100_DRIVER_UPGRADE, H200

PIPELINE = """
name: gpubench
title: gpubench nightly
seed: "003"
description: Benchmarks on a GPU runner whose card, driver and torch build change now and then.
cron: "0 2 * * *"
start_date: 2026-11-01
repositories:
  - {{name: app, url: "{upstream}", branch: main}}
targets:
  - {{name: gpu, arch: amd64}}
stages:
  - {{name: sources, kind: sources, description: The pinned checkout.}}
  - name: benchmarks
    kind: benchmarks
    deps: [sources]
    runner: local
    description: The training step's cost, as timing JSON.
    params: {{command: [python, -m, bench, "{{output}}"]}}
  - name: tests_gpu
    kind: test_suite
    deps: [sources]
    description: The GPU tests.
    suite: {{markers: gpu, timeout_minutes: 10, runner: local, min_gpus: 1}}
  - name: tests_cpu
    kind: test_suite
    deps: [sources]
    description: The tests that need no GPU.
    suite: {{markers: not gpu, timeout_minutes: 10, runner: local}}
  - {{name: perf_baseline, kind: perf_baseline, deps: [benchmarks], description: The level.}}
  - name: night_summary
    kind: night_summary
    deps: [perf_baseline, tests_gpu, tests_cpu]
    description: Summary.
"""
STEP = "train_step_ms"  # lower is better
RESERVED = "reserved_mib"  # the caching allocator's reserve: lower is better


def _wobble(day: int) -> float:
    """Night-to-night noise of about 1 %, as the demo's seeded nights have."""
    return 1 + 0.01 * ((-1) ** day) * (day % 3)


@dataclass
class Nights:
    """Nights of `gpubench` on its gpu target, day by day in November 2026."""

    store: Warehouse
    artefacts: Any
    resources: dict[str, Any]
    instance: dg.DagsterInstance
    pipeline: Pipeline
    perf_baseline: dg.AssetsDefinition

    def key(self, day: int) -> NightKey:
        return NightKey("gpubench", dt.date(2026, 11, day), "gpu")

    def seed(self, days: range, devices: DeviceFacts | None, step_ms: float, reserved_mib: float) -> None:
        """Earlier nights as the benchmarks stage recorded them, each on its own commit."""
        for day in days:
            self._benchmarked(day, devices, step_ms * _wobble(day), reserved_mib * _wobble(day + 1))

    def run(
        self, day: int, devices: DeviceFacts | None, step_ms: float, reserved_mib: float
    ) -> tuple[dict[str, Any], StageRow, dg.AssetMaterialization]:
        """Tonight: the benchmarks stage's manifest and rows, then the perf_baseline asset. Returns
        its manifest, its stage row and its materialization."""
        key = self._benchmarked(day, devices, step_ms, reserved_mib)
        manifest: dict[str, Any] = {
            "benchmarks": {
                STEP: {"value": step_ms, "unit": "ms", "lower_is_better": True},
                RESERVED: {"value": reserved_mib, "unit": "MiB", "lower_is_better": True},
            }
        }
        if devices is not None:  # manifests from before devices were recorded have none
            manifest["devices"] = devices.model_dump()
        self.artefacts.write_manifest(key, "benchmarks", manifest)
        result = dg.materialize(
            [self.perf_baseline],
            partition_key=str(partition_key(key.night, key.target)),
            resources=self.resources,
            instance=self.instance,
        )
        assert result.success
        [materialization] = result.asset_materializations_for_node(self.perf_baseline.op.name)
        stage = next(s for s in self.store.stages(key) if s.stage == "perf_baseline")
        return self.artefacts.read_manifest(key, "perf_baseline"), stage, materialization

    def _benchmarked(
        self, day: int, devices: DeviceFacts | None, step_ms: float, reserved_mib: float
    ) -> NightKey:
        key = self.key(day)
        self.store.record_night(key, run_id="seeded", status="success", pins={"app": f"{day:040x}"})
        results = [BenchmarkResult(STEP, step_ms, "ms"), BenchmarkResult(RESERVED, reserved_mib, "MiB")]
        self.store.record_benchmarks(key, results, devices=devices)
        if devices is not None:
            self.store.record_device_facts(key, "benchmarks", "local", devices)
        return key


@pytest.fixture
def nights(nightly_home: Path, tmp_path: Path) -> Iterator[Nights]:
    catalog_dir = copy_catalog(tmp_path / "catalog")
    write_pipeline(catalog_dir, PIPELINE.format(upstream=tmp_path / "no-upstream"))
    catalog = load_catalog(catalog_dir)
    pipeline = catalog.pipelines["gpubench"]
    spec = StageSpec(
        catalog, catalog_dir, pipeline, pipeline.stage("perf_baseline"), pipeline_partitions(pipeline)
    )
    definitions = resources_for("local", nightly_home)
    (tmp_path / "dagster_home").mkdir()
    with (
        dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance,
        dg.build_resources({k: definitions[k] for k in ("artefacts", "warehouse")}) as built,
    ):
        resources = {k: definitions[k] for k in ("artefacts", "warehouse", "git")}
        perf_baseline = build_perf_baseline_asset(spec)
        yield Nights(built.warehouse.store(), built.artefacts, resources, instance, pipeline, perf_baseline)


@pytest.mark.parametrize(
    ("before", "after", "change"),
    [
        pytest.param(
            H100,
            H200,
            "GPU 1x NVIDIA H100 80GB HBM3 -> 1x NVIDIA H200; driver 580.159.04 -> 580.159.03",
            id="another-gpu-model",
        ),
        pytest.param(
            H100,
            H100_DRIVER_UPGRADE,
            "driver 580.159.04 -> 590.44.01; runtime CUDA 13.0 -> CUDA 13.1",
            id="driver-upgrade",
        ),
        pytest.param(
            None,
            H100,
            "devices not recorded -> 1x NVIDIA H100 80GB HBM3 (81559 MiB), driver 580.159.04, CUDA 13.0; "
            "torch 2.11.0+cu130",
            id="first-night-with-devices",
        ),
    ],
)
def test_a_step_at_a_configuration_change_is_a_new_baseline_not_a_regression(
    nights: Nights, before: DeviceFacts | None, after: DeviceFacts, change: str
) -> None:
    nights.seed(range(1, 11), before, step_ms=10.0, reserved_mib=40_000)
    # Tonight's card, driver or runtime makes both benchmarks 30 % worse from tonight on.
    manifest, stage, materialization = nights.run(11, after, step_ms=13.0, reserved_mib=52_000)
    assert {name: row["state"] for name, row in manifest["comparison"].items()} == {
        STEP: f"new baseline: {change}",
        RESERVED: f"new baseline: {change}",
    }
    assert manifest["comparison"][STEP]["baseline"] is None and manifest["comparison"][STEP]["ratio"] is None
    assert manifest["new_baseline"] == {change: [RESERVED, STEP]}  # the manifest's order: by name
    assert manifest["devices"] == {"config_key": after.key(), "describe": after.describe()}
    assert stage.detail == f"new baseline for {RESERVED}, {STEP} ({change})"
    metadata = materialization.metadata
    comparison = cast(dg.MarkdownMetadataValue, metadata["comparison"])  # the asset's Markdown table
    assert f"| {STEP} | 13 | n/a | 0 | n/a | new baseline: {change} |" in comparison.value
    assert (metadata["devices"].value, metadata["config_key"].value) == (after.describe(), after.key())
    [check] = nights.store.checks(nights.key(11))
    assert check.passed and check.description == "2 benchmark(s): 2 new baseline"

    # The second night at the new level: compared with tonight's configuration only, whose one
    # night is too few for a verdict. Across configurations this step would be confirmed tonight.
    manifest, stage, _ = nights.run(12, after, step_ms=13.1, reserved_mib=52_100)
    needed = "insufficient data: 1 of 7 nights needed for a baseline"
    assert {row["state"] for row in manifest["comparison"].values()} == {needed}
    assert f"{STEP} ({needed})" in (stage.detail or "")
    assert manifest["new_baseline"] == {} and "new baseline" not in (stage.detail or "")
    assert nights.store.regressions("gpubench") == []
    [check] = nights.store.checks(nights.key(12))
    assert check.passed and check.description == (
        f"2 benchmark(s): 2 insufficient data ({RESERVED}, {STEP}: 1 of 7 nights needed for a baseline)"
    )


@pytest.mark.parametrize("devices", [H100, None], ids=["one-configuration", "no-devices-recorded"])
def test_a_regression_within_one_configuration_still_alerts(
    nights: Nights, devices: DeviceFacts | None
) -> None:
    nights.seed(range(1, 4), H200, step_ms=13.0, reserved_mib=52_000)  # another card, long ago
    nights.seed(range(4, 14), devices, step_ms=10.0, reserved_mib=40_000)
    nights.seed(range(14, 15), devices, step_ms=12.0, reserved_mib=40_000)  # tonight's code is slower
    manifest, stage, _ = nights.run(15, devices, step_ms=12.1, reserved_mib=40_100)
    step = manifest["comparison"][STEP]
    assert step["state"] == "regressed" and step["regression"]["text"].startswith("regressed 2")
    assert manifest["comparison"][RESERVED]["state"] == "ok"
    assert manifest["new_baseline"] == {}
    assert stage.detail is not None and f"{STEP} regressed 2" in stage.detail
    [found] = nights.store.regressions("gpubench")
    assert (found.name, found.first_bad, found.last_good) == (
        STEP,
        dt.date(2026, 11, 14),
        dt.date(2026, 11, 13),
    )
    assert found.before == pytest.approx(10.0, rel=0.02)  # the level of tonight's configuration
    [check] = [c for c in nights.store.checks(nights.key(15)) if not c.passed]
    assert check.severity == "WARN" and check.description.startswith(f"{STEP} regressed")


def test_a_card_swapped_back_resumes_its_own_series(nights: Nights) -> None:
    nights.seed(range(1, 11), H100, step_ms=10.0, reserved_mib=40_000)
    nights.seed(range(11, 14), H200, step_ms=13.0, reserved_mib=52_000)
    manifest, stage, materialization = nights.run(14, H100, step_ms=10.05, reserved_mib=40_100)
    step = manifest["comparison"][STEP]
    assert step["state"] == "ok" and step["baseline"] == pytest.approx(10.0, rel=0.02)
    assert step["nights"] == 10 and step["ratio"] == pytest.approx(1.0, rel=0.02)
    assert manifest["comparison"][RESERVED]["state"] == "ok"
    assert manifest["new_baseline"] == {} and "new baseline" not in (stage.detail or "")
    assert materialization.metadata["devices"].value == H100.describe()
    assert nights.store.regressions("gpubench") == []
    assert json.dumps(manifest).count("new baseline") == 0


def test_the_night_summary_names_each_configuration_with_its_stages_and_the_new_baseline(
    nights: Nights,
) -> None:
    nights.seed(range(1, 11), H100, step_ms=10.0, reserved_mib=40_000)
    tonight = nights.key(11)
    cpu_only = DeviceFacts(frameworks={"torch": "2.11.0+cu130"})
    nights.store.record_device_facts(tonight, "tests_gpu", "local", H200)
    nights.store.record_device_facts(tonight, "tests_cpu", "local", cpu_only)
    nights.run(11, H200, step_ms=13.0, reserved_mib=52_000)
    markdown = night_summary(nights.pipeline, tonight, nights.store, nights.artefacts).markdown()
    devices = markdown.split("### Devices\n\n")[1].split("\n\n")[0].splitlines()
    assert devices == [
        "- benchmarks, tests_gpu: 1x NVIDIA H200 (143771 MiB), driver 580.159.03, CUDA 13.0; "
        "torch 2.11.0+cu130",
        "- tests_cpu: no GPU; torch 2.11.0+cu130",
        "- perf_baseline: new baseline for reserved_mib, train_step_ms (GPU 1x NVIDIA H100 80GB HBM3 -> "
        "1x NVIDIA H200; driver 580.159.04 -> 580.159.03)",
    ]

    # A new run of the night that has not reached perf_baseline: the earlier run's row and manifest
    # stand, so its note does too (a re-run replaces a stage's results only with its own).
    nights.store.record_device_facts(tonight, "tests_cpu", "local", cpu_only)
    markdown = night_summary(nights.pipeline, tonight, nights.store, nights.artefacts).markdown()
    assert "perf_baseline: new baseline for reserved_mib, train_step_ms" in markdown
    assert "- tests_cpu: no GPU; torch 2.11.0+cu130" in markdown
    nights.seed(range(11, 12), H200, step_ms=13.0, reserved_mib=52_000)  # the new run's benchmarks

    # The next night on the same card: its devices, and no new baseline.
    nights.store.record_device_facts(nights.key(12), "tests_gpu", "local", H200)
    nights.run(12, H200, step_ms=13.1, reserved_mib=52_100)
    markdown = night_summary(nights.pipeline, nights.key(12), nights.store, nights.artefacts).markdown()
    assert "new baseline" not in markdown
    assert "- benchmarks, tests_gpu: 1x NVIDIA H200 (143771 MiB)" in markdown
    # A night whose stages recorded no devices (before they were) has no such section.
    nights.seed(range(13, 14), None, step_ms=13.0, reserved_mib=52_000)
    summary = night_summary(nights.pipeline, nights.key(13), nights.store, nights.artefacts)
    assert "### Devices" not in summary.markdown()
