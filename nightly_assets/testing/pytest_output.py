"""What pytest writes besides a JUnit report: the output of `pytest --collect-only -q`, read into
`collected` test cases, and the cause of a module's collection failure, read from the traceback
its JUnit <error> holds."""

from __future__ import annotations

import re

from nightly_assets.results import TestCase, TestReport

_NODE_ID = re.compile(r"[^\s:][^\s]*?::\S.*")
_COLLECTED_SUMMARY = re.compile(r"\b(?:(\d+)/\d+|(\d+)) tests? collected\b")
_NONE_COLLECTED = re.compile(r"\bno tests collected\b")


def parse_collect_only(output: str, suite: str, runner: str = "local") -> TestReport:
    """Parse the stdout of `pytest --collect-only -q` into `collected` test cases."""
    cases: list[TestCase] = []
    expected: int | None = None
    for line in output.splitlines():
        if _NODE_ID.fullmatch(line):
            # Split before the parameter id: "[a::b]" must not be taken for a class separator.
            base, bracket, params = line.partition("[")
            classname, _, name = base.rpartition("::")
            cases.append(TestCase(classname, name + bracket + params, "collected"))
        elif summary := _COLLECTED_SUMMARY.search(line):
            expected = int(summary.group(1) or summary.group(2))
        elif _NONE_COLLECTED.search(line):
            expected = 0
    if expected is not None and expected != len(cases):
        raise ValueError(
            f"suite {suite!r}: pytest reported {expected} tests collected "
            f"but {len(cases)} node ids were parsed"
        )
    return TestReport(suite=suite, cases=tuple(cases), runner=runner, collect_only=True)


# pytest's fixed `message` of a module that failed to collect; the cause is in the element's text.
PYTEST_COLLECTION_FAILURE = "collection failure"
# A line of pytest's error block ("E   ModuleNotFoundError: No module named 'x'") naming an exception.
# Python's naming convention for exception classes (and pytest's outcomes) is what is matched.
_EXCEPTION_NAME = r"[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failed|Skipped)"
_EXCEPTION_LINE = re.compile(rf"^E\s+({_EXCEPTION_NAME}\b.*)$")


def collection_cause(traceback: str) -> str:
    """The cause of a collection error, from the traceback pytest writes for it: its last exception
    line ("ModuleNotFoundError: No module named 'hypothesis'"), else its last `E` line, else its
    last line ("unknown cause" when it is empty)."""
    lines = [line.rstrip() for line in traceback.splitlines() if line.strip()]
    causes = [m.group(1).strip() for line in lines if (m := _EXCEPTION_LINE.match(line))]
    if causes:
        return causes[-1]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors or lines or ["unknown cause"])[-1].strip()
