"""The culprit search's job and the sensor that starts it: a night with a new failure or a
confirmed regression gets one search run (the run key makes it once), after its test health and
perf baseline recorded them."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import dagster as dg
from dagster._time import get_current_datetime  # the sensors' clock, as missing_nights uses

from nightly_assets.catalog.models import Pipeline
from nightly_assets.partitions import partition_key
from nightly_assets.results import NightKey
from nightly_assets.warehouse.resources import WarehouseResource

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

    from nightly_assets.warehouse.store import Warehouse

LOOKBACK_NIGHTS = 3  # a night's search is due once its stages recorded; older ones stay as they are
SENSOR_INTERVAL_S = 300


def culprit_job_name(pipeline: str) -> str:
    return f"{pipeline}_culprits"


def build_culprit_sensor(pipeline: Pipeline, job: UnresolvedAssetJobDefinition) -> dg.SensorDefinition:
    @dg.sensor(
        name=f"{pipeline.name}_culprit_search",
        job=job,
        minimum_interval_seconds=SENSOR_INTERVAL_S,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Starts a culprit search for each night with a new failure or a regression.",
    )
    def _sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> list[dg.RunRequest]:
        store = warehouse.store()
        today = get_current_datetime().astimezone(dt.UTC).date()  # Dagster's clock: tests freeze it
        requests = []
        for cell in pipeline.cells():
            for back in range(1, LOOKBACK_NIGHTS + 1):
                key = NightKey(pipeline.name, today - dt.timedelta(days=back), cell)
                if due(store, key):
                    partition = str(partition_key(key.night, key.target))
                    requests.append(dg.RunRequest(run_key=f"culprits-{partition}", partition_key=partition))
        return requests

    return _sensor


def due(store: Warehouse, key: NightKey) -> bool:
    """Whether the night has something to search: a new failure, or a regression confirmed on it,
    once the night has its final status and no search recorded yet."""
    night = store.night(key)
    if night is None or night.status == "running" or store.culprits(key):
        return False  # not summarized yet (its verdicts may still come), or already searched
    broken = any(v.new_failure for v in store.verdicts(key, state="broken"))
    return broken or any(
        r.night == key.night and r.worse for r in store.regressions(key.pipeline, target=key.target)
    )
