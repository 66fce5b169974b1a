"""The benchmark sweep: a grid of (trial, nodes, ranks per node) points, one batch job and one row each."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import math
import re
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nightly_assets.batch.resources import BatchSchedulerResource, JobResult, ProgressLog, describe_failure
from nightly_assets.batch.schedulers import SchedulerError
from nightly_assets.process import CommandError

GRID_KEYS = ("trials", "nodes", "ranks_per_node")
PLACEHOLDERS = ("trial", "nodes", "ranks_per_node", "ranks")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")

RowStatus = Literal["ok", "failed"]


class SweepConfigError(ValueError):
    """The sweep's grid or command is not what the catalog may say; names the key and the value."""


@dataclass(frozen=True, order=True)
class SweepPoint:
    nodes: int
    ranks_per_node: int
    trial: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    def env(self) -> dict[str, str]:
        return {
            "NODES": str(self.nodes),
            "RANKS_PER_NODE": str(self.ranks_per_node),
            "TRIAL": str(self.trial),
        }

    def __str__(self) -> str:
        return f"nodes={self.nodes} ranks_per_node={self.ranks_per_node} trial={self.trial}"


@dataclass(frozen=True)
class SweepRow:
    point: SweepPoint
    job_id: str | None
    status: RowStatus
    value: float | None
    duration_s: float | None
    message: str = ""


def expand_grid(grid: Any) -> list[SweepPoint]:
    """Validate the catalog's `grid` ({trials, nodes, ranks_per_node}: lists of positive ints) and
    expand it into points, ordered by nodes, ranks per node, trial."""
    if not isinstance(grid, Mapping):
        raise SweepConfigError(f"benchmark_sweep grid: expected a mapping of {GRID_KEYS}, got {grid!r}")
    unknown = sorted(str(k) for k in grid if k not in GRID_KEYS)
    if unknown:
        raise SweepConfigError(f"benchmark_sweep grid: unknown key(s) {unknown}; known: {list(GRID_KEYS)}")
    missing = [k for k in GRID_KEYS if k not in grid]
    if missing:
        raise SweepConfigError(f"benchmark_sweep grid: missing key(s) {missing}")
    axes = {key: _axis(key, grid[key]) for key in GRID_KEYS}
    return sorted(
        SweepPoint(nodes, ranks, trial)
        for trial, nodes, ranks in itertools.product(axes["trials"], axes["nodes"], axes["ranks_per_node"])
    )


def _axis(key: str, values: Any) -> list[int]:
    if not isinstance(values, list) or not values:
        raise SweepConfigError(f"benchmark_sweep grid.{key}: expected a non-empty list, got {values!r}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SweepConfigError(f"benchmark_sweep grid.{key}: {value!r} is not a positive integer")
    if len(set(values)) != len(values):
        raise SweepConfigError(f"benchmark_sweep grid.{key}: duplicate values in {values!r}")
    return list(values)


def command_for(command: Sequence[str], point: SweepPoint) -> list[str]:
    """The benchmark's argv for a point: {nodes}, {ranks_per_node}, {ranks}, {trial} are replaced
    inside each argument (which stays one argument), for launchers such as `srun -N {nodes}`."""
    if not command:
        raise SweepConfigError("benchmark_sweep command: expected a non-empty argument list")
    values = {"trial": point.trial, "nodes": point.nodes, "ranks_per_node": point.ranks_per_node}
    values["ranks"] = point.ranks

    def substitute(match: re.Match[str]) -> str:
        if match.group(1) not in values:
            raise SweepConfigError(
                f"benchmark_sweep command: unknown placeholder {match.group(0)}; known: {list(PLACEHOLDERS)}"
            )
        return str(values[match.group(1)])

    return [_PLACEHOLDER.sub(substitute, str(arg)) for arg in command]


def parse_metric(stdout: str, metric: str) -> float | None:
    """The value of `metric` in the last JSON-object line of the output that has it."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        value = record.get(metric) if isinstance(record, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def run_sweep(
    batch: BatchSchedulerResource,
    points: Sequence[SweepPoint],
    command: Sequence[str],
    *,
    walltime: dt.timedelta,
    max_concurrent_jobs: int = 4,
    metric: str = "images_per_sec",
    env: Mapping[str, str] | None = None,
    name: str = "benchmark_sweep",
    queue: str | None = None,
    log: ProgressLog | None = None,
) -> list[SweepRow]:
    """One job per point, at most `max_concurrent_jobs` queued or running at once; one row per point,
    in the points' order. A point that fails is a failed row; an interruption cancels the jobs in flight."""
    if max_concurrent_jobs < 1:
        raise SweepConfigError(f"max_concurrent_jobs must be at least 1, got {max_concurrent_jobs}")
    argvs = {point: command_for(command, point) for point in points}  # bad placeholders fail before any job
    pending = deque(points)
    in_flight: dict[str, SweepPoint] = {}
    rows: dict[SweepPoint, SweepRow] = {}
    watch = batch.watch(log)
    try:
        while pending or in_flight:
            while pending and len(in_flight) < max_concurrent_jobs:
                point = pending.popleft()
                try:
                    job_id = batch.submit(
                        f"{name}-n{point.nodes}-r{point.ranks_per_node}-t{point.trial}",
                        argvs[point],
                        walltime=walltime,
                        nodes=point.nodes,
                        tasks_per_node=point.ranks_per_node,
                        env={**(env or {}), **point.env()},
                        queue=queue,
                        # A point still running from a run that died with its orchestrator is
                        # waited for, not measured twice.
                        earlier="adopt",
                        log=log,
                    )
                except (SchedulerError, CommandError, OSError) as exc:
                    rows[point] = SweepRow(point, None, "failed", None, None, f"not submitted: {exc}")
                    continue
                in_flight[job_id] = point
            for job_id, point in list(in_flight.items()):
                status = watch.status(job_id)
                if status is not None and status.finished:
                    del in_flight[job_id]
                    rows[point] = _row(point, JobResult(status, batch.output(job_id)), metric)
                    if log:
                        log(f"sweep point {point}: {rows[point].status} {rows[point].message}".rstrip())
            if in_flight:
                time.sleep(batch.poll_s())
    finally:
        for job_id in in_flight:
            batch.cancel_quietly(job_id, log)
    return [rows[point] for point in points]


def _row(point: SweepPoint, result: JobResult, metric: str) -> SweepRow:
    status = result.status
    if not result.ok:
        message = f"{describe_failure(status)}: " + _last_line(result)
        return SweepRow(point, result.job_id, "failed", None, status.duration_s, message)
    value = parse_metric(result.stdout_text(), metric)
    if value is None:
        message = f"no JSON line with a numeric {metric!r} in the output: " + _last_line(result)
        return SweepRow(point, result.job_id, "failed", None, status.duration_s, message)
    return SweepRow(point, result.job_id, "ok", value, status.duration_s)


def _last_line(result: JobResult) -> str:
    for path in (result.output.stderr, result.output.stdout):
        lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
        if lines:
            return lines[-1][:300]
    return "(no output)"


def row_to_json(row: SweepRow) -> dict[str, Any]:
    """A row as the sweep stage's manifest keeps it (the report stage reads it back)."""
    return {**dataclasses.asdict(row), "point": dataclasses.asdict(row.point)}


def row_from_json(data: dict[str, Any]) -> SweepRow:
    return SweepRow(**{**data, "point": SweepPoint(**data["point"])})
