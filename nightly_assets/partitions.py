"""Night x target partitions: a run of one pipeline for one night on one cell of its matrix (a
pipeline that runs every few hours: one slot of one day, the target dimension's `<target>@<HH>`
cells, catalog/cadence.py)."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from nightly_assets.catalog.cadence import slot_start
from nightly_assets.catalog.models import Pipeline
from nightly_assets.results import NightKey

NIGHT = "night"
TARGET = "target"


def pipeline_partitions(pipeline: Pipeline) -> dg.MultiPartitionsDefinition:
    return dg.MultiPartitionsDefinition(
        {
            NIGHT: dg.DailyPartitionsDefinition(
                # A night is a partition once it has ended; a day of slots once its first slot is due.
                start_date=pipeline.start_date.isoformat(),
                timezone="UTC",
                end_offset=1 if pipeline.slotted else 0,
            ),
            TARGET: dg.StaticPartitionsDefinition(pipeline.cells()),
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


def runs_of_tick(pipeline: Pipeline, tick: dt.datetime) -> tuple[dt.date, list[str]]:
    """The partition a schedule tick runs: the night that ended before it and every target, or (a
    pipeline of run slots) the tick's day and each target's cell at the tick's hour."""
    if not pipeline.slotted:
        return night_of_tick(tick), pipeline.cells()
    at = tick.astimezone(dt.UTC)
    return at.date(), pipeline.cells(at.hour)


def night_end(key: NightKey) -> dt.datetime:
    """The instant a run's sources are pinned at: midnight UTC after the night, or its slot's hour."""
    return slot_start(key.night, key.target) or dt.datetime.combine(
        key.night + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC
    )
