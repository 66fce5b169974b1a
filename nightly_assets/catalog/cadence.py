"""How often a pipeline runs, read from its cron: once a day (a night), or every few hours (seed
002's PyTorch tests 3-4 times a day: run slots).

A pipeline whose cron names several hours runs a slot at each: its partitions are the day x each
target at each hour, the target dimension holding "cells" named `<target>@<HH>` (`cpu@06`: the cpu
target's run pinned at 06:00 UTC). Dagster partitions have at most two dimensions, and a cell keeps
every per-night feature keyed as it is (the warehouse's pipeline, night, target): pins, baselines,
flaky windows, summaries, missing-run alerts, retention and backfills are each slot's own. A slot's
history is then the same slot on earlier days, which is also what makes it comparable: the load on
shared hardware, and the commits that land, follow the hour of the day."""

from __future__ import annotations

import datetime as dt

SLOT_MARK = "@"


class CadenceError(ValueError):
    """A cron whose hours this tool cannot read as a night or as run slots; says what was expected."""


def cron_hours(cron: str) -> tuple[int, ...]:
    """The UTC hours a cron with a fixed minute runs at, sorted: `0 2 * * *` -> (2,),
    `0 */6 * * *` -> (0, 6, 12, 18), `30 1,9,17 * * *` -> (1, 9, 17)."""
    minute, hour, *days = cron.split()
    if not minute.isdigit() or not 0 <= int(minute) < 60:
        raise CadenceError(f"cron {cron!r}: expected a fixed minute (0-59), got {minute!r}")
    hours: set[int] = set()
    for part in hour.split(","):
        hours.update(_hour_part(part, cron))
    if len(hours) > 1 and days != ["*", "*", "*"]:
        raise CadenceError(
            f"cron {cron!r}: a pipeline that runs several times a day runs every day (day fields '* * *')"
        )
    return tuple(sorted(hours))


def _hour_part(part: str, cron: str) -> range | list[int]:
    span, _, step_text = part.partition("/")
    step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
    if step_text and step is None:
        raise CadenceError(f"cron {cron!r}: hour step {step_text!r} is not a whole number above 0")
    if span == "*":
        first, last = 0, 23
    elif "-" in span:
        low, _, high = span.partition("-")
        if not (low.isdigit() and high.isdigit()):
            raise CadenceError(f"cron {cron!r}: hour range {span!r}: expected <hour>-<hour>")
        first, last = int(low), int(high)
    elif span.isdigit():
        first = last = int(span)
        if step is not None:
            last = 23
    else:
        raise CadenceError(f"cron {cron!r}: hour {part!r}: expected hours (2, 0,6,12,18, */6 or 0-23/6)")
    if not 0 <= first <= last <= 23:
        raise CadenceError(f"cron {cron!r}: hour {part!r}: expected hours from 0 to 23")
    if span == "*" and step is None:
        raise CadenceError(f"cron {cron!r}: every hour ('*'): expected the hours of the runs (e.g. */6)")
    return range(first, last + 1, step or 1)


def cell_name(target: str, hour: int | None) -> str:
    """A partition's target value: the target itself (a nightly pipeline), or `<target>@<HH>`."""
    return target if hour is None else f"{target}{SLOT_MARK}{hour:02d}"


def split_cell(cell: str) -> tuple[str, int | None]:
    """(target, slot hour or None) of a partition's target value."""
    target, mark, hour = cell.partition(SLOT_MARK)
    if not mark:
        return cell, None
    if not (hour.isdigit() and len(hour) == 2 and int(hour) < 24):
        raise CadenceError(f"{cell!r}: expected <target>@<HH>, an hour from 00 to 23")
    return target, int(hour)


def slot_start(night: dt.date, cell: str) -> dt.datetime | None:
    """When a slot's sources are pinned (its hour on its day, UTC); None for a night's cell."""
    _, hour = split_cell(cell)
    return None if hour is None else dt.datetime.combine(night, dt.time(hour), tzinfo=dt.UTC)
