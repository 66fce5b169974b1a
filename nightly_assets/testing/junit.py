"""Parse JUnit XML files into TestReports (`pytest --collect-only -q` output: pytest_output.py).

JUnit is read as the tools write it: pytest (xunit1/xunit2), Bazel's test.xml, Maven Surefire and
Gradle (with `<flakyFailure>`/`<rerunFailure>` reruns), jest-junit, go-junit-report, CTest and
GoogleTest, with `<testsuite>`s nested to any depth. Each file is streamed (junit_stream.py), so
memory holds the cases read so far, not the tree (and past STREAM_ABOVE_BYTES not those either: see
streamed_cases.py); attribute values past MAX_ATTRIBUTE_BYTES are cut before the parser sees them
(linear time whatever the shape, see junit_values.py). What is wrong with a bad file is told by
junit_errors.py.

Repeats (a <testcase> with the classname and name of the one right before it, in the same suite):
tries of one test only where the file marks them as re-runs, i.e. the suite's `tests` attribute is
below its number of testcases (the Xcode retries fastlane's trainer writes): one case, its attempts
the tries, its outcome and message the last one's. Reruns written inside one testcase (Surefire's and
Gradle's mergeReruns `<flakyFailure>`/`<rerunFailure>`/`<flakyError>`/`<rerunError>`) are attempts
too. Otherwise (no `tests`, or as many as the testcases: Jest, Mocha and Surefire tests that share a
name, Gradle's test-retry without mergeReruns, xcbeautify) each repeat is a test of its own, the
second named "name (2)", the third "name (3)", in order within the run, so that no two share a node
id (the warehouse, merge_shard_reports and the flakiness history key tests by it). Which writer does
what: junit_stream._Scope.

Identity (`TestCase.node_id` = classname::name): the `classname` attribute when it is set and
differs from the case's name (pytest, Surefire, Gradle, gtest, go-junit-report: unchanged from
earlier nights). Otherwise (no classname, or classname == name as jest-junit and CTest write it)
the classname is the path of the enclosing `<testsuite>` names, outermost first, joined by "::",
leaving out empty ones and any named exactly like the case; under Bazel the target label comes
first. Names are capped at MAX_NAME_CHARS and messages at MAX_MESSAGE_CHARS, the cut marked.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from nightly_assets.results import TestCase, TestReport
from nightly_assets.testing.junit_errors import JUnitError
from nightly_assets.testing.junit_stream import JUnitStream
from nightly_assets.testing.junit_values import MAX_MESSAGE_CHARS, MAX_NAME_CHARS, cap
from nightly_assets.testing.streamed_cases import StreamedCases

# Reports whose files are larger than this in all are streamed (streamed_cases.py), not held:
# about 120,000 pytest-shaped cases, some 25 MB as TestCase objects.
STREAM_ABOVE_BYTES = 64 << 20
UNREADABLE_REPORT = "<unreadable JUnit report>"

_log = logging.getLogger(__name__)

_ATTEMPT_FILE = re.compile(r"attempt_\d+\.xml")
# Bazel puts sharded and --runs_per_test results one directory below the target.
_BAZEL_SUBRUN_DIR = re.compile(r"(shard|run)_\d+_of_\d+")


def parse_junit(path: Path, suite: str, runner: str = "local") -> TestReport:
    """Parse one JUnit XML file (root <testsuites> or <testsuite>); a bad file raises JUnitError."""
    return _report([_FileCases(path, "", 1, None)], suite, runner)


def parse_junit_files(paths: Sequence[Path], suite: str, runner: str = "local") -> TestReport:
    """Parse several JUnit files into one report. A bad file (missing, not XML, not JUnit) becomes
    one `error` case whose message names the file and what was expected; the cases it held before
    the fault and every other file's cases are kept."""
    if not paths:
        raise JUnitError(f"suite {suite!r}: no report files were found, expected at least one")
    return _report([_FileCases(p, "", 1, p.name) for p in paths], suite, runner)


def parse_bazel_testlogs(testlogs_dir: Path, suite: str, runner: str = "local") -> TestReport:
    """Parse every `test.xml` under a `bazel-testlogs/` tree, counting flaky retries. A bad
    test.xml becomes one `error` case of its target, as in `parse_junit_files`."""
    if not testlogs_dir.is_dir():
        raise JUnitError(f"{testlogs_dir}: directory not found, expected a bazel-testlogs tree")
    xml_files = sorted(testlogs_dir.rglob("test.xml"))
    if not xml_files:
        raise JUnitError(
            f"{testlogs_dir}: no test.xml found, expected <package>/<target>/test.xml "
            "as written by `bazel test`"
        )
    files = []
    for xml_file in xml_files:
        attempts_dir = xml_file.parent / "test_attempts"
        earlier = (
            [f for f in attempts_dir.iterdir() if _ATTEMPT_FILE.fullmatch(f.name)]
            if attempts_dir.is_dir()
            else []
        )
        label = _bazel_label(xml_file.parent.relative_to(testlogs_dir))
        unreadable_classname = label or str(xml_file.parent.relative_to(testlogs_dir))
        files.append(_FileCases(xml_file, label, 1 + len(earlier), unreadable_classname))
    return _report(files, suite, runner)


def iter_junit(path: Path, label: str = "", attempts: int = 1) -> Iterator[TestCase]:
    """The test cases of one JUnit file as they are read, in document order; JUnitError on a bad
    file (after the cases before the fault). `label` qualifies cases without a classname (Bazel's
    target label); `attempts` is the least attempt count of every case (Bazel's test_attempts)."""
    return JUnitStream(path, label, attempts).cases()


class _FileCases:
    """One file's cases, as many passes as asked for (see `__call__`); `duration_s` is the file's
    duration once a pass has ended. With `unreadable_classname`, a bad file gives the cases read
    before the fault and one `error` case of that classname naming the fault; without it,
    JUnitError."""

    def __init__(self, path: Path, label: str, attempts: int, unreadable_classname: str | None) -> None:
        self.path = path
        self.label = label
        self.attempts = attempts
        self.unreadable_classname = unreadable_classname
        self.duration_s = 0.0
        self._read_as: tuple[int, int] | None = None  # (size, mtime) at the first pass

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0  # read as the parse reports it: missing, unreadable

    def __call__(self) -> Iterator[TestCase]:
        """One pass. Later passes are quiet (the first one warned) and refuse a file that changed
        since the first, whose cases would not be the ones tallied."""
        first = self._read_as is None
        stat = self.path.stat() if self.path.exists() else None
        now = (stat.st_size, stat.st_mtime_ns) if stat else (-1, -1)
        if first:
            self._read_as = now
        elif now != self._read_as:
            raise JUnitError(
                f"{self.path}: the file changed while its report was in use, expected it unchanged"
            )
        stream = JUnitStream(self.path, self.label, self.attempts, warn=first)
        case_seconds = 0.0
        faulted = False
        try:
            for case in stream.cases():
                case_seconds += case.duration_s
                yield case
        except JUnitError as exc:
            if self.unreadable_classname is None:
                raise
            if first:
                _log.warning(str(exc))
            faulted = True
            yield TestCase(
                classname=cap(self.unreadable_classname, MAX_NAME_CHARS),
                name=UNREADABLE_REPORT,
                outcome="error",
                message=cap(str(exc), MAX_MESSAGE_CHARS),
            )
        self.duration_s = case_seconds if faulted else stream.duration_s


def _report(files: Sequence[_FileCases], suite: str, runner: str) -> TestReport:
    """The files' cases as one report: held in a tuple, or past STREAM_ABOVE_BYTES in all, read
    again from the files on each pass (streamed_cases.py) so that memory does not grow with them."""

    def cases() -> Iterator[TestCase]:
        for file in files:
            yield from file()

    streamed = sum(f.size() for f in files) > STREAM_ABOVE_BYTES
    # Straight into the tuple: no list of every case beside it.
    all_cases: Sequence[TestCase] = StreamedCases(cases) if streamed else tuple(cases())
    return TestReport(
        suite=suite,
        cases=all_cases,  # type: ignore[arg-type]  # a tuple, or streamed (results.TestReport)
        runner=runner,
        duration_s=sum(f.duration_s for f in files),
        source_files=tuple(str(f.path) for f in files),
    )


def _bazel_label(target_dir: Path) -> str:
    parts = list(target_dir.parts)
    while parts and _BAZEL_SUBRUN_DIR.fullmatch(parts[-1]):
        parts.pop()
    if not parts:
        return ""
    return f"//{'/'.join(parts[:-1])}:{parts[-1]}"
