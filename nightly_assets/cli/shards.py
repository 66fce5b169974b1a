"""`nightly shards plan`: the plan a suite's recorded durations (or a JSON file of them) give for
N shards, with its makespan against the ideal, so a release engineer can choose N."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from nightly_assets.shards.plan import (
    ShardPlan,
    ShardPlanError,
    checked_durations,
    file_of,
    plan_shards,
    shard_count,
)
from nightly_assets.words import plural


def add_parser(sub: Any) -> None:
    shards = sub.add_parser("shards", help="split a suite across machines by its recorded test times")
    actions = shards.add_subparsers(dest="action", required=True)
    plan = actions.add_parser(
        "plan", help="the shards a suite's recorded durations (or a JSON file of them) give"
    )
    plan.add_argument("pipeline", nargs="?", help="the pipeline whose suite to plan (or --durations)")
    plan.add_argument("suite", nargs="?", help="the suite (stage), e.g. tests_unit")
    plan.add_argument("--target", help="default: the pipeline's only target")
    plan.add_argument("--nights", type=int, default=7, help="recent nights to average (default 7)")
    plan.add_argument("--durations", type=Path, help='a JSON file {"file_or_test_id": seconds}')
    count = plan.add_mutually_exclusive_group(required=True)
    count.add_argument("--shards", type=int, help="how many shards")
    count.add_argument("--shard-minutes", type=float, help="as many shards as keep each near M minutes")
    plan.add_argument("--json", action="store_true", help="machine-readable output")


def durations_file(path: Path) -> dict[str, float]:
    """A JSON object of durations; ShardPlanError naming the file and what is wrong."""
    try:
        loaded = json.loads(path.read_text())
    except OSError as exc:
        raise ShardPlanError(f"--durations {path}: cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise ShardPlanError(f"--durations {path}: not JSON ({exc})") from None
    if not isinstance(loaded, dict):
        raise ShardPlanError(f'--durations {path}: expected an object {{"file_or_test_id": seconds}}')
    return checked_durations(loaded, f"--durations {path}")


def run(args: argparse.Namespace, durations: dict[str, float], source: str) -> int:
    """Print the plan of `durations` (read from `source`, said in the heading)."""
    if not durations:
        raise ShardPlanError(f"{source}: no test durations to plan with")
    count = args.shards if args.shards is not None else shard_count(durations, args.shard_minutes)
    plan = plan_shards(durations, count)
    if args.json:
        print(json.dumps({"source": source, **plan.to_json()}, indent=2))
    else:
        print(describe(plan, source, len(durations)))
    return 0


def describe(plan: ShardPlan, source: str, units: int) -> str:
    lines = [f"{plural(len(plan.shards), 'shard')} of {plural(units, 'test')} ({source}):"]
    for shard in plan.shards:
        files = len({file_of(unit) for unit in shard.units})
        lines.append(
            f"  shard {shard.index}: {shard.seconds:9.1f} s  {plural(len(shard.units), 'unit')}"
            f" from {plural(files, 'file')}"
        )
    lines.append(
        f"makespan {plan.makespan_s:.1f} s, ideal {plan.ideal_s:.1f} s"
        f" (max(total {plan.total_s:.1f} s / {len(plan.shards)}, longest unit {plan.longest_unit_s:.1f} s)):"
        f" {plan.ratio:.2f}x"
    )
    if plan.split_files:
        lines.append(f"split by test across shards: {', '.join(plan.split_files)}")
    return "\n".join(lines)
