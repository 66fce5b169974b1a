"""A suite's shard plan from recorded durations, as PyTorch's CI shards its suite by its test-times
file: whole test files where they fit, a file longer than a shard's fair share split by test,
longest first onto the least-loaded shard. Deterministic: the same durations give the same plan
on every machine, so shards planned apart agree.

A unit is a test id (``path/test_file.py::test_name``, or ``file::Class::test``) or a bare file
(``path/test_file.py``: known only as a whole, never split)."""

from __future__ import annotations

import heapq
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class ShardPlanError(ValueError):
    """Durations or a shard count that cannot make a plan; names which and what was expected."""


@dataclass(frozen=True)
class Shard:
    index: int  # from 1, as people count shards
    units: tuple[str, ...]  # test ids and whole files, longest first
    seconds: float  # expected

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "seconds": round(self.seconds, 3), "units": list(self.units)}


@dataclass(frozen=True)
class ShardPlan:
    shards: tuple[Shard, ...]
    total_s: float
    longest_unit_s: float  # the longest test or unsplit file: no shard can be shorter
    split_files: tuple[str, ...]  # files spread across shards by test
    estimated: tuple[str, ...] = ()  # tests never seen, given their file's mean or the suite's median

    @property
    def makespan_s(self) -> float:
        return max((s.seconds for s in self.shards), default=0.0)

    @property
    def ideal_s(self) -> float:
        """No plan of this many shards can finish sooner: max(total / N, the longest unit)."""
        return max(self.total_s / len(self.shards), self.longest_unit_s) if self.shards else 0.0

    @property
    def ratio(self) -> float:
        return self.makespan_s / self.ideal_s if self.ideal_s else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "shards": [s.to_json() for s in self.shards],
            "total_s": round(self.total_s, 3),
            "makespan_s": round(self.makespan_s, 3),
            "ideal_s": round(self.ideal_s, 3),
            "ratio": round(self.ratio, 4),
            "split_files": list(self.split_files),
            "estimated": list(self.estimated),
        }


def file_of(unit: str) -> str:
    return unit.split("::", 1)[0]


def checked_durations(durations: Mapping[str, Any], source: str) -> dict[str, float]:
    """`durations` as seconds; ShardPlanError naming `source` and the first bad entry."""
    checked: dict[str, float] = {}
    for unit, seconds in durations.items():
        if not isinstance(unit, str) or not unit.strip():
            raise ShardPlanError(f"{source}: a key {unit!r} is not a test id or file")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
            raise ShardPlanError(f"{source}: {unit!r} has {seconds!r}, expected seconds (a number)")
        if seconds < 0:
            raise ShardPlanError(f"{source}: {unit!r} has {seconds!r} s, expected 0 or more")
        checked[unit] = float(seconds)
    return checked


def shard_count(durations: Mapping[str, float], shard_minutes: float) -> int:
    """How many shards keep each near `shard_minutes`: the total over the target, rounded up."""
    if shard_minutes <= 0:
        raise ShardPlanError(f"shard_minutes {shard_minutes!r}: expected more than 0")
    return max(1, math.ceil(sum(durations.values()) / (shard_minutes * 60)))


def plan_shards(durations: Mapping[str, float], count: int, tests: Sequence[str] | None = None) -> ShardPlan:
    """`count` shards of the units in `durations` (or of `tests`, the collected ids, where given:
    a test never recorded gets its file's mean, else the suite's median)."""
    if count < 1:
        raise ShardPlanError(f"shards {count!r}: expected 1 or more")
    known = dict(durations)
    estimated: list[str] = []
    if tests is not None:
        known = {t: known[t] for t in tests if t in known}
        by_file: dict[str, list[float]] = defaultdict(list)
        for unit, seconds in known.items():
            by_file[file_of(unit)].append(seconds)
        median = statistics.median(known.values()) if known else 1.0  # nothing recorded: equal weights
        for test in tests:
            if test not in known:
                seen = by_file.get(file_of(test))
                known[test] = math.fsum(seen) / len(seen) if seen else median
                estimated.append(test)
    files: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for unit, seconds in sorted(known.items()):
        files[file_of(unit)].append((unit, seconds))
    total = math.fsum(known.values())  # exact: the same total whatever the order it is read in
    longest_test = max(known.values(), default=0.0)
    fair = max(total / count, longest_test)
    units: list[tuple[str, float]] = []
    split: list[str] = []
    for name, entries in sorted(files.items()):
        file_total = math.fsum(seconds for _, seconds in entries)
        whole_only = any(unit == name for unit, _ in entries)  # known only as a file
        if file_total > fair and not whole_only and len(entries) > 1:
            units.extend(entries)
            split.append(name)
        else:
            units.append((name, file_total))
    units.sort(key=lambda u: (-u[1], u[0]))
    # A heap: the least-loaded shard, then the one with fewest units (tests that take no measurable
    # time still spread out), then the lowest index.
    loads = [(0.0, 0, index) for index in range(count)]
    assigned: list[list[str]] = [[] for _ in range(count)]
    seconds_of = [0.0] * count
    for unit, seconds in units:
        load, held, index = heapq.heappop(loads)
        assigned[index].append(unit)
        seconds_of[index] = load + seconds
        heapq.heappush(loads, (load + seconds, held + 1, index))
    shards = tuple(Shard(i + 1, tuple(assigned[i]), seconds_of[i]) for i in range(count))
    longest_unit = max((seconds for _, seconds in units), default=0.0)
    return ShardPlan(shards, total, longest_unit, tuple(split), tuple(estimated))
