"""A sharded suite's night: its plan from the collected tests and the warehouse's durations, the
shards' outcome as one report, and what the stage records of it (the plan file, the manifest, a
table of shards in the metadata)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from nightly_assets.catalog.suite import Suite
from nightly_assets.results import TestReport, node_id_of
from nightly_assets.shards.execute import RunShard, ShardRecord, run_shards
from nightly_assets.shards.merge import MergeFindings, junit_name_of, merge_shard_reports
from nightly_assets.shards.plan import ShardPlan, file_of, plan_shards
from nightly_assets.words import plural

# The nights a test's duration is averaged over: a week holds each weekday once (suites that run
# more on some days) and is recent enough to follow a test that got slower.
HISTORY_NIGHTS = 7
PLAN_FILE = "shard-plan.json"  # in the stage's workdir; a TPU VM reads it too (tpu/remote_shard.py)
# What a shard's run selected of the plan, where the backend knows (a TPU VM's plugin says): None
# where it does not.
Selected = Callable[[ShardRecord], Collection[str] | None]


@dataclass(frozen=True)
class ShardedRun:
    """A sharded suite's night: what was planned, what each shard did, and the merged report."""

    plan: ShardPlan
    records: tuple[ShardRecord, ...]
    report: TestReport
    findings: MergeFindings
    history_nights: int  # nights of durations the plan was made from (0: none recorded yet)
    plan_file: Path

    def manifest(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "count": len(plan.shards),
            "expected_makespan_s": round(plan.makespan_s, 3),
            "ideal_s": round(plan.ideal_s, 3),
            "ratio": round(plan.ratio, 4),
            "history_nights": self.history_nights,
            "estimated_tests": len(plan.estimated),
            "split_files": list(plan.split_files),
            "plan_file": str(self.plan_file),
            "shards": [r.to_json() for r in self.records],
            "merge": self.findings.to_json(),
        }

    def metadata(self) -> dict[str, object]:
        rows = [
            "| shard | tests | expected s | took s | waited s | attempts | outcome |",
            "|---|---|---|---|---|---|---|",
        ]
        for record in self.records:
            took = sum(a["seconds"] for a in record.attempts)
            waited = sum(a.get("waited_s", 0.0) for a in record.attempts)  # for devices held elsewhere
            outcome = "reported" if record.junit is not None else f"lost: {record.lost}"
            rows.append(
                f"| {record.shard.index} | {len(record.shard.units)} units | {record.shard.seconds:.0f} "
                f"| {took:.0f} | {waited:.0f} | {len(record.attempts)} | {outcome.replace('|', '/')} |"
            )
        return {
            "shards": dg.MetadataValue.int(len(self.records)),
            "shard_plan": dg.MetadataValue.md("\n".join(rows)),
            "shards_lost": dg.MetadataValue.int(len(self.findings.lost)),
            "tests_not_run": dg.MetadataValue.int(len(self.findings.not_run)),
        }

    def words(self) -> str:
        """For the stage's detail: "; 4 shards (1 re-run)", or with lost tests what did not run."""
        reruns = sum(len(r.attempts) > 1 for r in self.records)
        text = f"; {plural(len(self.records), 'shard')}" + (f" ({reruns} re-run)" if reruns else "")
        return text + (f"; {self.findings.sentence()}" if not self.findings.complete else "")


def plan_suite(suite: Suite, collected: Sequence[str], durations: Mapping[str, float]) -> ShardPlan:
    """The plan of the collected pytest node ids, from `durations` by JUnit node id (the warehouse's
    `classname::name`): `shards` of them, or as many as keep each near `shard_minutes`."""
    by_test = {
        test: durations[key] for test in collected if (key := node_id_of(*junit_name_of(test))) in durations
    }
    if suite.shards is not None:
        return plan_shards(by_test, suite.shards, tests=collected)
    assert suite.shard_minutes is not None
    whole = plan_shards(by_test, 1, tests=collected)  # the total, unknown tests estimated
    return plan_shards(
        by_test, max(1, math.ceil(whole.total_s / (suite.shard_minutes * 60))), tests=collected
    )


def planned_tests(plan: ShardPlan, collected: Sequence[str]) -> dict[int, list[tuple[str, str]]]:
    """Each shard's tests as JUnit names them: a whole file stands for its collected tests."""
    by_file: dict[str, list[str]] = defaultdict(list)
    for test in collected:
        by_file[file_of(test)].append(test)
    return {
        shard.index: [junit_name_of(t) for unit in shard.units for t in (by_file.get(unit, [unit]))]
        for shard in plan.shards
    }


def run_sharded(
    suite: Suite,
    name: str,
    runner: str,
    collected: Sequence[str],
    history: tuple[Mapping[str, float], int],
    run_one: RunShard,
    *,
    gpus: int | None,
    workdir: Path,
    log: Callable[[str], None],
    parallel: int | None = None,
    selected: Selected | None = None,
    on_plan: Callable[[ShardPlan], None] | None = None,
) -> ShardedRun:
    """Plan the collected tests from `history` (durations, nights they span), run every shard with
    `run_one`, all at once (a GPU suite: as many as the runner's `gpus` give each its `min_gpus`;
    `parallel`: at most that many, a pool of machines), and merge their reports into the suite's
    one report. `selected`: the node ids a reporting shard's run selected, where the plan came from
    earlier nights rather than tonight's collection: a planned test its shard did not select no
    longer exists, and is dropped from the plan rather than reported as not run. `on_plan` is shown
    the plan before any shard runs (a backend that starts every shard in one go: a Slurm job array)."""
    durations, nights = history
    if parallel is None and suite.min_gpus and gpus is not None:
        parallel = max(1, gpus // suite.min_gpus)  # None: all at once
    plan = plan_suite(suite, collected, durations)
    plan_file = workdir / PLAN_FILE
    plan_file.write_text(json.dumps({"history_nights": nights, **plan.to_json()}, indent=1))
    log(
        f"{name}: {plural(len(collected), 'test')} in {plural(len(plan.shards), 'shard')}, planned from "
        + (f"{plural(nights, 'night')} of durations" if nights else "no recorded durations (equal weights)")
        + f": expected {plan.makespan_s:.0f} s each at most (ideal {plan.ideal_s:.0f} s, {plan.ratio:.2f}x)"
        + (
            f"; {plural(len(plan.estimated), 'test')} never timed estimated"
            if plan.estimated and nights
            else ""
        )
    )
    if on_plan is not None:
        on_plan(plan)
    records = run_shards(plan, run_one, parallel=parallel, retries=suite.shard_retries, log=log)
    planned = planned_tests(plan, collected)
    if selected is not None:
        planned = _without_removed(planned, records, selected, lambda text: log(f"{name}: {text}"))
    report, findings = merge_shard_reports(records, planned, name, runner)
    if findings.duplicates:
        log(
            f"{name}: {plural(len(findings.duplicates), 'test')} reported by more than one shard, kept once "
            f"(the worst outcome): {', '.join(list(findings.duplicates)[:5])}"
        )
    if findings.not_run:
        log(f"{name}: {findings.sentence()}: {', '.join(findings.not_run[:5])}")
    if findings.unplanned:
        log(
            f"{name}: {plural(len(findings.unplanned), 'test')} ran that were not planned (kept): "
            f"{', '.join(findings.unplanned[:5])}"
        )
    return ShardedRun(plan, tuple(records), report, findings, nights, plan_file)


def _without_removed(
    planned: dict[int, list[tuple[str, str]]],
    records: Sequence[ShardRecord],
    selected: Selected,
    log: Callable[[str], None],
) -> dict[int, list[tuple[str, str]]]:
    """`planned` less the tests a reporting shard's run did not select: removed since the nights
    the plan was made from (a lost shard's tests stay: nobody knows whether they still exist)."""
    removed: list[str] = []
    for record in records:
        chosen = selected(record) if record.junit is not None else None
        if chosen is None:
            continue
        kept = {node_id_of(*junit_name_of(test)) for test in chosen}
        tests = planned.get(record.shard.index, [])
        planned[record.shard.index] = [t for t in tests if node_id_of(*t) in kept]
        removed += [node_id_of(*t) for t in tests if node_id_of(*t) not in kept]
    if removed:
        log(
            f"{plural(len(removed), 'planned test')} no longer selected (removed or deselected since "
            f"the recorded nights): {', '.join(removed[:5])}"
        )
    return planned
