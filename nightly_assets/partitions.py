"""Night x target partitions: a run of one pipeline for one night on one cell of its matrix."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from nightly_assets.catalog.models import Pipeline
from nightly_assets.results import NightKey

NIGHT = "night"
TARGET = "target"


def pipeline_partitions(pipeline: Pipeline) -> dg.MultiPartitionsDefinition:
    return dg.MultiPartitionsDefinition(
        {
            NIGHT: dg.DailyPartitionsDefinition(
                start_date=pipeline.start_date.isoformat(), timezone="UTC", end_offset=0
            ),
            TARGET: dg.StaticPartitionsDefinition([t.name for t in pipeline.targets]),
        }
    )


def partition_key(night: dt.date, target: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({NIGHT: night.isoformat(), TARGET: target})


def night_key(pipeline: str, key: str | dg.MultiPartitionKey) -> NightKey:
    """The NightKey of a partition key as Dagster hands it to an asset, a check or a sensor."""
    if not isinstance(key, dg.MultiPartitionKey):
        # Dagster serialises multi-partition keys as "<dim values joined by |>" in sorted dim order.
        night, target = key.split("|")
        key = dg.MultiPartitionKey({NIGHT: night, TARGET: target})
    dims = key.keys_by_dimension
    return NightKey(pipeline, dt.date.fromisoformat(dims[NIGHT]), dims[TARGET])


def night_of_tick(tick: dt.datetime) -> dt.date:
    """The night a schedule tick runs: the UTC day that ended before the tick."""
    return tick.astimezone(dt.UTC).date() - dt.timedelta(days=1)


def night_end(night: dt.date) -> dt.datetime:
    """The instant a night's sources are pinned at: midnight UTC after the night."""
    return dt.datetime.combine(night + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
