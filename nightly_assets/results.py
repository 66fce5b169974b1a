"""Plain result types shared by the stages, the checks and the warehouse."""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["passed", "failed", "error", "skipped", "collected"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "error", "skipped", "collected")


@dataclass(frozen=True)
class NightKey:
    """One partition of one pipeline: the unit a run, a summary and a warehouse row belong to."""

    pipeline: str
    night: dt.date
    target: str

    def __str__(self) -> str:
        return f"{self.pipeline}/{self.night.isoformat()}/{self.target}"


def node_id_of(classname: str, name: str) -> str:
    """A test's id as reports and the warehouse name it: `classname::name`, or the name alone."""
    return f"{classname}::{name}" if classname else name


@dataclass(frozen=True, slots=True)  # slots: a report may hold millions of them
class TestCase:
    """One test case as a JUnit report records it."""

    __test__ = False  # not a pytest test class

    classname: str
    name: str
    outcome: Outcome
    duration_s: float = 0.0
    message: str | None = None
    attempts: int = 1  # >1 when a flaky test was retried (Bazel --flaky_test_attempts)

    @property
    def node_id(self) -> str:
        return node_id_of(self.classname, self.name)


@dataclass(frozen=True)
class ReportTally:
    """What a report's checks, metadata and warehouse rows read of its cases, from one pass."""

    counts: dict[str, int]  # "total" and each outcome
    failures: tuple[TestCase, ...]  # failed or error, in report order
    flaky: tuple[TestCase, ...]  # passed after more than one attempt

    @classmethod
    def of(cls, cases: Iterable[TestCase]) -> ReportTally:
        outcomes: Counter[str] = Counter()
        failures, flaky = [], []
        for case in cases:
            outcomes[case.outcome] += 1
            if case.outcome in ("failed", "error"):
                failures.append(case)
            elif case.attempts > 1 and case.outcome == "passed":
                flaky.append(case)
        counts: dict[str, int] = {"total": outcomes.total(), **{o: outcomes[o] for o in OUTCOMES}}
        return cls(counts, tuple(failures), tuple(flaky))


@dataclass(frozen=True)
class TestReport:
    """The parsed result of one test suite of one night. `cases` is a tuple, or for a report too
    large to hold (testing/streamed_cases.py) a sequence read again from its files on each pass."""

    __test__ = False

    suite: str
    cases: tuple[TestCase, ...]
    runner: str = "local"
    duration_s: float = 0.0
    collect_only: bool = False
    source_files: tuple[str, ...] = field(default_factory=tuple)

    @functools.cached_property
    def tally(self) -> ReportTally:
        """The counts, failures and flaky cases, from one pass over the cases, kept (cases are
        immutable); streamed cases bring the tally of the pass that first read them."""
        kept = getattr(self.cases, "tally", None)
        return kept if isinstance(kept, ReportTally) else ReportTally.of(self.cases)

    def count(self, outcome: Outcome) -> int:
        return self.tally.counts[outcome]

    @property
    def total(self) -> int:
        return self.tally.counts["total"]

    @property
    def failures(self) -> tuple[TestCase, ...]:
        return self.tally.failures

    @property
    def flaky(self) -> tuple[TestCase, ...]:
        return self.tally.flaky

    @property
    def passed_all(self) -> bool:
        return not self.failures

    def counts(self) -> dict[str, int]:
        return dict(self.tally.counts)


@dataclass(frozen=True)
class BenchmarkResult:
    """One measured value of one benchmark of one night."""

    name: str
    value: float
    unit: str = "s"
    lower_is_better: bool = True


@dataclass(frozen=True)
class CheckOutcome:
    """The result of one asset check of one stage, as the warehouse keeps it."""

    stage: str
    name: str
    severity: Literal["ERROR", "WARN"]
    passed: bool
    description: str = ""
