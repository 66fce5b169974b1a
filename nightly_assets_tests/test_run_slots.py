"""A pipeline that runs every 6 hours (seed 002's "3-4 times a day"): four slots a day, each its
own partition (`<day>|<target>@<HH>`), queued by the schedule's four ticks as the daemon runs them,
one slot run for real and backfilled alone, and a slot that missed its deadline alerted by itself."""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.execution.backfill import PartitionBackfill
from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
from dagster._daemon.backfill import execute_backfill_iteration

from nightly_assets.catalog.cadence import CadenceError, cron_hours, split_cell
from nightly_assets.catalog.loader import CatalogError, load_catalog
from nightly_assets.catalog.outline import BUILTIN_CATALOG_DIR
from nightly_assets.definitions import build_definitions
from nightly_assets.night import run_night
from nightly_assets.partitions import night_end, pipeline_partitions, runs_of_tick
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets_tests.catalog_files import copy_catalog, edit_pipeline
from nightly_assets_tests.test_missing_night import Night
from nightly_assets_tests.test_schedule_ticks import code_location, scheduler_instance, tick

__all__ = ["scheduler_instance"]  # the fixture, shared with the schedule's own test

DAY = dt.date(2026, 11, 4)
SLOTS = ["cpu@00", "cpu@06", "cpu@12", "cpu@18"]


@pytest.fixture
def slotted_catalog(nightly_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped catalog with the demo pipeline run every 6 hours, as the code location's catalog."""
    catalog = copy_catalog(tmp_path / "catalog")
    edit_pipeline(catalog, "demo", lambda d: d.update(cron="0 */6 * * *"))
    monkeypatch.setenv("NIGHTLY_CATALOG_DIR", str(catalog))
    return catalog


def test_a_cron_of_several_hours_gives_each_target_a_cell_per_slot(slotted_catalog: Path) -> None:
    demo = load_catalog(slotted_catalog).pipelines["demo"]

    assert demo.slotted and demo.slot_hours == (0, 6, 12, 18)
    assert demo.cells() == SLOTS
    assert demo.target("cpu@06").name == "cpu"
    # Each slot's summary is due before the next slot (6 h: the default deadline, 12 h, is longer).
    assert demo.summary_deadline_hours == 6 and demo.summary_deadline_cron() == "0 0,6,12,18 * * *"
    partitions = pipeline_partitions(demo)
    with freeze_time(dt.datetime(2026, 11, 4, 7, 0, tzinfo=dt.UTC)):
        keys = set(partitions.get_partition_keys())
    # Today's slots are partitions (the 06:00 one has begun); tomorrow's are not yet.
    assert {f"2026-11-04|{cell}" for cell in SLOTS} <= keys
    assert not any(key.startswith("2026-11-05") for key in keys)
    # A slot's sources are pinned at its hour; a nightly pipeline's at the midnight after its night.
    assert night_end(NightKey("demo", DAY, "cpu@06")) == dt.datetime(2026, 11, 4, 6, tzinfo=dt.UTC)
    assert night_end(NightKey("demo", DAY, "cpu")) == dt.datetime(2026, 11, 5, tzinfo=dt.UTC)
    assert runs_of_tick(demo, dt.datetime(2026, 11, 4, 18, 0, tzinfo=dt.UTC)) == (DAY, ["cpu@18"])
    daily = load_catalog(BUILTIN_CATALOG_DIR).pipelines["demo"]  # the shipped one stays a night a day
    assert not daily.slotted and daily.cells() == ["cpu"]
    assert runs_of_tick(daily, dt.datetime(2026, 11, 4, 3, 0, tzinfo=dt.UTC)) == (
        DAY - dt.timedelta(1),
        ["cpu"],
    )


@pytest.mark.parametrize(
    ("cron", "hours"),
    [
        ("0 2 * * *", (2,)),
        ("30 */6 * * *", (0, 6, 12, 18)),
        ("0 1,9,17 * * *", (1, 9, 17)),
        ("0 8-20/4 * * *", (8, 12, 16, 20)),
    ],
)
def test_cron_hours_read_lists_steps_and_ranges(cron: str, hours: tuple[int, ...]) -> None:
    assert cron_hours(cron) == hours


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("*/30 8 * * *", "expected a fixed minute (0-59), got '*/30'"),
        ("0 * * * *", "every hour ('*'): expected the hours of the runs (e.g. */6)"),
        ("0 */6 * * 1-5", "a pipeline that runs several times a day runs every day"),
        ("0 25 * * *", "hour '25': expected hours from 0 to 23"),
        ("0 */x * * *", "hour step 'x' is not a whole number above 0"),
    ],
)
def test_a_cron_this_tool_cannot_read_is_named(cron: str, expected: str) -> None:
    with pytest.raises(
        CadenceError, match=expected.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")
    ):
        cron_hours(cron)


def test_a_slot_deadline_past_the_next_slot_is_refused(slotted_catalog: Path) -> None:
    edit_pipeline(
        slotted_catalog, "demo", lambda d: d.setdefault("thresholds", {}).update(summary_deadline_hours=8)
    )
    with pytest.raises(
        CatalogError,
        match=re.escape(
            "summary_deadline_hours: 8 h is past the next run slot of cron '0 */6 * * *' (6 h apart); "
            "expected at most 6"
        ),
    ):
        load_catalog(slotted_catalog)


def test_a_cell_names_its_target_and_hour() -> None:
    assert split_cell("cpu@06") == ("cpu", 6) and split_cell("cpu") == ("cpu", None)
    with pytest.raises(CadenceError, match="'cpu@6': expected <target>@<HH>"):
        split_cell("cpu@6")


def test_the_schedule_queues_one_run_per_slot_and_a_backfill_takes_one_slot(
    slotted_catalog, scheduler_instance
):
    with create_test_daemon_workspace_context(code_location(), scheduler_instance) as context:
        tick(context, dt.datetime(2026, 11, 3, 23, 59, tzinfo=dt.UTC))  # the daemon starts
        for hour in (0, 6, 12, 18):  # the day's four ticks
            tick(context, dt.datetime(2026, 11, 4, hour, 0, 30, tzinfo=dt.UTC))

        demo = [
            r for r in scheduler_instance.get_runs() if r.tags.get("dagster/schedule_name") == "demo_schedule"
        ]
        assert sorted(r.tags["dagster/partition"] for r in demo) == [f"2026-11-04|{cell}" for cell in SLOTS]
        assert {r.job_name for r in demo} == {"demo_nightly"}

        # The 06:00 slot is backfilled alone (as the UI's "Materialize" of one partition does).
        before = {r.run_id for r in scheduler_instance.get_runs()}
        asset_graph = context.create_request_context().asset_graph
        selection = sorted(asset_graph.asset_keys_for_job("demo_nightly"))
        backfill = PartitionBackfill.from_asset_partitions(
            backfill_id="slot0600",
            asset_graph=asset_graph,
            partition_names=["2026-11-04|cpu@06"],
            asset_selection=selection,
            backfill_timestamp=time.time(),
            tags={},
            dynamic_partitions_store=scheduler_instance,
            all_partitions=False,
            title=None,
            description=None,
            run_config=None,
        )
        scheduler_instance.add_backfill(backfill)
        list(execute_backfill_iteration(context, logging.getLogger("nightly-test-backfill")))
        added = [r for r in scheduler_instance.get_runs() if r.run_id not in before]
        assert added, "the backfill launched no run"
        assert {r.tags["dagster/partition"] for r in added} == {"2026-11-04|cpu@06"}
        assert {r.tags["dagster/backfill"] for r in added} == {"slot0600"}


@pytest.mark.slow
def test_a_slot_runs_pinned_at_its_hour_and_keeps_its_own_record(slotted_catalog, nightly_home, tmp_path):
    catalog = load_catalog(slotted_catalog)
    resources = resources_for("local", nightly_home)
    (tmp_path / "dagster_home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster_home")) as instance:
        defs = build_definitions(slotted_catalog)
        six, noon = NightKey("demo", DAY, "cpu@06"), NightKey("demo", DAY, "cpu@12")
        assert run_night(defs, instance, catalog, six, resources).succeeded
        assert run_night(defs, instance, catalog, noon, resources).succeeded

        summary = dg.AssetKey(["demo", "night_summary"])
        assert instance.get_materialized_partitions(summary) == {"2026-11-04|cpu@06", "2026-11-04|cpu@12"}
        with dg.build_resources(
            {"warehouse": resources["warehouse"], "artefacts": resources["artefacts"]}
        ) as r:
            store = r.warehouse.store()
            assert store.night(six) is not None and store.night(noon) is not None
            assert store.night(NightKey("demo", DAY, "cpu@00")) is None  # a slot not run has no row
            manifest = r.artefacts.read_manifest(six, "sources")
        assert manifest["pinned_at"] == "2026-11-04T06:00:00+00:00"


def test_a_slot_that_missed_its_deadline_alerts_alone(slotted_catalog, nightly_home, tmp_path):
    with dg.instance_for_test() as instance:
        night = Night(instance, tmp_path / "alerts.jsonl")
        night.definitions = build_definitions(slotted_catalog)
        night.sensor = night.definitions.resolve_sensor_def("missing_night_alerts")
        night.evaluate(dt.datetime(2026, 11, 3, 23, 0, tzinfo=dt.UTC))  # watching before the day's slots
        for cell in ("cpu@00", "cpu@12", "cpu@18"):  # every slot ran but the 06:00 one
            partition = str(dg.MultiPartitionKey({"night": "2026-11-04", "target": cell}))
            instance.report_runless_asset_event(
                dg.AssetMaterialization(night_summary_key(), partition=partition)
            )

        night.evaluate(dt.datetime(2026, 11, 5, 0, 30, tzinfo=dt.UTC))  # the day's four slots are due

        [alert] = night.alerts()
        assert alert["title"] == "demo slot 2026-11-04 06:00 is missing"
        assert alert["partition"] == "2026-11-04@06"
        assert alert["lines"][0] == (
            "no summary of cpu@06 by its deadline 2026-11-04 12:00 UTC "
            "(6 h after the 06:00 UTC tick of demo_schedule)"
        )


def night_summary_key() -> dg.AssetKey:
    return dg.AssetKey(["demo", "night_summary"])
