"""The shards' JUnit files as one report of the suite: every planned test exactly once. A test two
shards reported is kept once (its worst outcome: a failure is never hidden by a pass) and named; a
planned test no shard reported (its shard was lost, or it was not collected there) is reported as
`skipped` with why it did not run, never as passed, and named; the stage fails on it. Read
streaming: a report too large to hold stays streamed (testing/streamed_cases.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightly_assets.results import TestCase, TestReport, node_id_of
from nightly_assets.shards.execute import ShardRecord
from nightly_assets.testing.junit import parse_junit_files
from nightly_assets.testing.streamed_cases import StreamedCases

NOT_RUN = "not run: "  # the message of a planned test no shard reported
NAMED = 20  # tests named in the manifest for each finding; the counts are whole

# Which of a test's duplicate reports stands: the worst, so a failure is never hidden by a pass.
_RANK = {"error": 4, "failed": 3, "passed": 2, "skipped": 1, "collected": 0}


def junit_name_of(pytest_id: str) -> tuple[str, str]:
    """(classname, name) as pytest's JUnit writes the node id `pytest_id`: the path with "/" as "."
    and no ".py", classes appended with "."; a parameter id is kept whole ("[a::b]" is no class)."""
    base, bracket, params = pytest_id.partition("[")
    path, *inner = base.split("::")
    if not inner:
        return "", pytest_id
    module = path.removesuffix(".py").replace("/", ".")
    return ".".join([module, *inner[:-1]]), inner[-1] + bracket + params


@dataclass(frozen=True)
class MergeFindings:
    """What the merge found beside the cases: the stage's check and manifest read it."""

    planned: int
    duplicates: dict[str, int]  # node id -> times reported, where more than once
    not_run: tuple[str, ...]  # planned node ids no shard reported
    unplanned: tuple[str, ...]  # reported node ids the plan did not hold (kept: they ran)
    lost: dict[int, str]  # shard index -> why it gave no report

    @property
    def complete(self) -> bool:
        return not self.not_run

    def sentence(self) -> str:
        """For the check and the detail: "1,200 of 4,800 planned tests did not run (shard 3 of 4 lost:
        ...)", or ""."""
        if not self.not_run:
            return ""
        lost = "; ".join(f"shard {i} lost: {why}" for i, why in sorted(self.lost.items()))
        return f"{len(self.not_run):,} of {self.planned:,} planned tests did not run" + (
            f" ({lost})" if lost else ""
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            "not_run": len(self.not_run),
            "not_run_named": list(self.not_run[:NAMED]),
            "duplicates": len(self.duplicates),
            "duplicates_named": dict(list(self.duplicates.items())[:NAMED]),
            "unplanned": len(self.unplanned),
            "unplanned_named": list(self.unplanned[:NAMED]),
        }


def merge_shard_reports(
    records: Sequence[ShardRecord], planned: Mapping[int, Sequence[tuple[str, str]]], suite: str, runner: str
) -> tuple[TestReport, MergeFindings]:
    """One report of the shards' files; `planned` holds each shard's tests as JUnit names them
    ((classname, name): `junit_name_of`)."""
    files = [r.junit for r in records if r.junit is not None]
    lost = {r.shard.index: r.lost for r in records if r.lost is not None}
    base = parse_junit_files(files, suite, runner) if files else TestReport(suite, (), runner)
    chosen: dict[str, tuple[int, int]] = {}  # node id -> (rank, ordinal of the report that stands)
    counts: dict[str, int] = {}
    for case in base.cases:
        seen = counts.get(case.node_id, 0)
        counts[case.node_id] = seen + 1
        rank = _RANK[case.outcome]
        if seen == 0 or rank > chosen[case.node_id][0]:
            chosen[case.node_id] = (rank, seen)
    names = {node_id_of(*test): test for tests in planned.values() for test in tests}
    shard_of = {node_id_of(*test): index for index, tests in planned.items() for test in tests}
    not_run = [test for test in shard_of if test not in counts]
    missing = tuple(_not_run_case(names[test], shard_of[test], len(records), lost) for test in not_run)
    findings = MergeFindings(
        planned=len(shard_of),
        duplicates={test: n for test, n in counts.items() if n > 1},
        not_run=tuple(not_run),
        unplanned=tuple(test for test in counts if test not in shard_of),
        lost=lost,
    )
    keep = {test: ordinal for test, (_, ordinal) in chosen.items()}

    def cases() -> Iterator[TestCase]:
        ordinals: dict[str, int] = {}
        for case in base.cases:
            ordinal = ordinals.get(case.node_id, 0)
            ordinals[case.node_id] = ordinal + 1
            if keep[case.node_id] == ordinal:
                yield case
        yield from missing

    merged: Any = StreamedCases(cases) if isinstance(base.cases, StreamedCases) else tuple(cases())
    report = TestReport(
        suite=suite, cases=merged, runner=runner, duration_s=base.duration_s, source_files=base.source_files
    )
    return report, findings


def _not_run_case(test: tuple[str, str], shard: int, of: int, lost: Mapping[int, str]) -> TestCase:
    classname, name = test
    why = (
        f"shard {shard} of {of} was lost ({lost[shard]})"
        if shard in lost
        else f"shard {shard} of {of} did not report it"
    )
    return TestCase(classname, name, "skipped", message=NOT_RUN + why)
