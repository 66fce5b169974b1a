"""Parse JUnit XML and `pytest --collect-only -q` output into TestReports.

JUnit is read as the tools write it: pytest (xunit1/xunit2), Bazel's test.xml, Maven Surefire and
Gradle (with `<flakyFailure>`/`<rerunFailure>` reruns), jest-junit, go-junit-report, CTest and
GoogleTest, with `<testsuite>`s nested to any depth. Files are streamed through defusedxml's parser
with a target that keeps only the open <testcase>, so memory holds the cases read so far, not the
tree (and past STREAM_ABOVE_BYTES not those either: see streamed_cases.py); attribute values past
MAX_ATTRIBUTE_BYTES are cut before the parser sees them (linear time whatever the shape, see
junit_values.py). A test retried as the same <testcase> written again right after (Xcode,
Gradle's test-retry) is one case: its attempts the tries, its outcome the last one's.

Identity (`TestCase.node_id` = classname::name): the `classname` attribute when it is set and
differs from the case's name (pytest, Surefire, Gradle, gtest, go-junit-report: unchanged from
earlier nights). Otherwise (no classname, or classname == name as jest-junit and CTest write it)
the classname is the path of the enclosing `<testsuite>` names, outermost first, joined by "::",
leaving out empty ones and any named exactly like the case; under Bazel the target label comes
first. Names are capped at MAX_NAME_CHARS and messages at MAX_MESSAGE_CHARS, the cut marked.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

# defusedxml 0.7 ships no type hints (pyproject sets ignore_missing_imports), so these are Any.
# Its iterparse keeps the protection of its parser: no DTD entities, no external references.
import defusedxml.ElementTree as SafeET
from defusedxml.common import (
    DefusedXmlException,
    DTDForbidden,
    EntitiesForbidden,
    ExternalReferenceForbidden,
)

from nightly_assets.results import Outcome, TestCase, TestReport, node_id_of
from nightly_assets.testing.junit_values import LongValueCutter
from nightly_assets.testing.streamed_cases import StreamedCases

MAX_NAME_CHARS = 1000  # classname and name, each
MAX_MESSAGE_CHARS = 8000
MAX_FAILURE_ROWS = 50
MAX_ROW_MESSAGE_CHARS = 200
MAX_WARNINGS_PER_FILE = 20
# Reports whose files are larger than this in all are streamed (streamed_cases.py), not held:
# about 120,000 pytest-shaped cases, some 25 MB as TestCase objects.
STREAM_ABOVE_BYTES = 64 << 20
TRUNCATED = "…[truncated]"
UNREADABLE_REPORT = "<unreadable JUnit report>"

_log = logging.getLogger(__name__)

_SUITES_TAG = "testsuites"
_SUITE_TAG = "testsuite"
_CASE_TAG = "testcase"
_ROOT_TAGS = (_SUITES_TAG, _SUITE_TAG)
_FLAKY_TAGS = frozenset({"flakyFailure", "flakyError"})  # Surefire: failed, then passed on a rerun
_DETAIL_TAGS = frozenset({"failure", "error", "skipped"})  # their message or text is read
_RERUN_TAGS = frozenset({"rerunFailure", "rerunError"})  # Surefire: failed on every rerun too
_RERUN_ALL_TAGS = _FLAKY_TAGS | _RERUN_TAGS
# gtest: status="notrun" result="suppressed" (DISABLED_), result="skipped" (GTEST_SKIP);
# CTest: status="notrun" / "disabled".
_SKIPPED_STATUS = frozenset({"notrun", "disabled", "skipped"})
_SKIPPED_RESULT = frozenset({"suppressed", "skipped"})
_ATTEMPT_FILE = re.compile(r"attempt_\d+\.xml")
# Bazel puts sharded and --runs_per_test results one directory below the target.
_BAZEL_SUBRUN_DIR = re.compile(r"(shard|run)_\d+_of_\d+")
_NODE_ID = re.compile(r"[^\s:][^\s]*?::\S.*")
_COLLECTED_SUMMARY = re.compile(r"\b(?:(\d+)/\d+|(\d+)) tests? collected\b")
_NONE_COLLECTED = re.compile(r"\bno tests collected\b")
_ERROR_POSITION = re.compile(r": line \d+, column \d+$")
# A letter right after "<" skips the <?xml ...?> declaration and <!DOCTYPE ...>.
_FIRST_TAG = re.compile(rb"<([A-Za-z_][\w.:-]*)")
_SNIFF_BYTES = 4096
_GROUPED_SECONDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d*)?")  # "1,234.5" (thousands grouped)
_DECIMAL_COMMA = re.compile(r"\d+,\d+")  # "0,25" (a comma for the decimal point)
_SECONDS_CACHE_SIZE = 65536  # times repeat ("0.001"): one float object per distinct text


class JUnitError(ValueError):
    """A report file is missing or is not a usable JUnit report; the message names the file."""


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


class JUnitStream:
    """One pass over one JUnit file. After `cases()` is exhausted, `duration_s` holds the file's
    duration: the outermost suites' `time` when each has one, else the sum of the cases' times."""

    def __init__(self, path: Path, label: str = "", attempts: int = 1, *, warn: bool = True) -> None:
        self.path = path
        self.warn = warn  # off: count warnings, log none (a later pass over a file already read)
        self.label = label
        self.attempts = attempts
        self.duration_s = 0.0
        self.warnings = 0
        self._suite_seconds: float | None = 0.0  # None once an outermost suite has no time
        self._case_seconds = 0.0
        self._seconds_cache: dict[str, float] = {}
        self._classnames: dict[str, str] = {}  # one str object per distinct classname

    def cases(self) -> Iterator[TestCase]:
        try:
            source = self.path.open("rb")
        except FileNotFoundError:
            raise JUnitError(f"{self.path}: file not found") from None
        except OSError as exc:
            raise JUnitError(f"{self.path}: cannot read file: {exc.strerror}") from exc
        with source:
            yield from self._walk(LongValueCutter(source, TRUNCATED.encode()))
        if self.warn and self.warnings > MAX_WARNINGS_PER_FILE:
            _log.warning(f"{self.path}: {self.warnings - MAX_WARNINGS_PER_FILE} more warnings not shown")
        self.duration_s = self._suite_seconds if self._suite_seconds is not None else self._case_seconds

    def _walk(self, source: LongValueCutter) -> Iterator[TestCase]:
        # A parser target, not iterparse: no Element per tag, no event queue (the same defusedxml
        # parser and protections). Each chunk's finished cases are yielded before the next read.
        target = _Target(self)
        parser = SafeET.DefusedXMLParser(target=target)
        # Straight from expat (ordered attributes: [name, value, ...]), past XMLParser's per-tag
        # Python wrappers, a third of the time; defusedxml's own handlers stay as they are.
        parser.parser.StartElementHandler = target.start
        parser.parser.EndElementHandler = target.end
        target.expat = parser.parser
        target.expat.CharacterDataHandler = len  # a C no-op: text is read only inside a detail
        while True:
            chunk = source.read()
            fault: Exception | None = None
            try:
                parser.feed(chunk) if chunk else parser.close()
            except (SafeET.ParseError, DefusedXmlException) as exc:
                fault = exc
            if fault or not chunk:
                target.flush()
            yield from target.done  # the cases before a fault are kept
            target.done.clear()
            if isinstance(fault, SafeET.ParseError):
                seen_root = bool(target.containers) or target.index > 0
                raise self._parse_error(fault, seen_root) from fault
            if isinstance(fault, DefusedXmlException):
                raise JUnitError(
                    f"{self.path}: forbidden XML construct ({_forbidden_construct(fault)}); "
                    "JUnit files must be plain XML"
                ) from fault
            if not chunk:
                return

    def _outermost_suite(self, element: Mapping[str, str], name: str) -> None:
        raw = element.get("time")
        if self._suite_seconds is None:
            return
        if raw is None or not raw.strip():
            self._suite_seconds = None
        else:
            self._suite_seconds += self._seconds(raw, f"<testsuite> {name!r}")

    def _case(
        self,
        element: _Node,
        index: int,
        suite_names: list[str],
        names_open: Counter[str],
        qualifiers: list[str],
    ) -> TestCase:
        attrib = element.attrib
        raw_name = attrib.get("name") or ""
        if raw_name:
            name = raw_name if len(raw_name) <= MAX_NAME_CHARS else _cap(raw_name, MAX_NAME_CHARS)
        else:
            name = f"<unnamed testcase #{index}>"
            self._warn(f"<testcase> #{index} has no 'name' attribute; recorded as {name!r}")
        classname = attrib.get("classname") or ""
        if not classname or classname == raw_name:
            if not names_open.get(raw_name):
                classname = qualifiers[-1]
            else:  # leave out the suites named like the case (Bazel's generated test.xml)
                parts = [self.label, *(s for s in suite_names if s and s != raw_name)]
                classname = "::".join(p for p in parts if p)
        kept = self._classnames.get(classname)
        if kept is None:
            kept = self._classnames[classname] = _cap(classname, MAX_NAME_CHARS)
        classname = kept

        failure = error = skipped = None
        for child in element.details:
            tag = child.tag
            if tag == "failure":
                failure = child if failure is None else failure
            elif tag == "error":
                error = child if error is None else error
            elif skipped is None:
                skipped = child
        outcome: Outcome
        detail = failure if failure is not None else error if error is not None else skipped
        if failure is not None:
            outcome = "failed"
        elif error is not None:
            outcome = "error"
        elif (
            skipped is not None
            or attrib.get("status") in _SKIPPED_STATUS
            or attrib.get("result") in _SKIPPED_RESULT
        ):
            outcome = "skipped"
        else:
            outcome = "passed"
        message = None
        if detail is not None:
            text = detail.attrib.get("message") or (detail.text or "").strip()
            if text == PYTEST_COLLECTION_FAILURE:
                text = f"{text}: {collection_cause(detail.text or '')}"
            message = _cap(text, MAX_MESSAGE_CHARS) if text else None
        raw_time = attrib.get("time")
        seconds = 0.0
        if raw_time is not None:
            cached = self._seconds_cache.get(raw_time)
            # The owner's name is built only for a time not seen before (it may be warned about).
            seconds = (
                cached
                if cached is not None
                else self._seconds(raw_time, f"<testcase> {node_id_of(classname, name)!r}")
            )
        self._case_seconds += seconds
        return TestCase(
            classname=classname,
            name=name,
            outcome=outcome,
            duration_s=seconds,
            message=message,
            attempts=self.attempts if self.attempts > element.reruns else 1 + element.reruns,
        )

    def _seconds(self, raw: str, owner: str) -> float:
        """A time attribute, read leniently: "1,234.5", "0,25" and "1.5s" are understood; what is
        still not a finite number of seconds counts as 0 with a warning."""
        cached = self._seconds_cache.get(raw)
        if cached is not None:
            return cached
        text = raw.strip().removesuffix("s").strip()
        if _GROUPED_SECONDS.fullmatch(text):
            text = text.replace(",", "")
        elif _DECIMAL_COMMA.fullmatch(text):
            text = text.replace(",", ".")
        try:
            value = float(text) if text else 0.0
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            self._warn(f"{owner} has time={raw!r}, expected a number of seconds; counted as 0")
            value = 0.0
        if len(self._seconds_cache) < _SECONDS_CACHE_SIZE:
            self._seconds_cache[raw] = value
        return value

    def _warn(self, message: str) -> None:
        self.warnings += 1
        if self.warn and self.warnings <= MAX_WARNINGS_PER_FILE:
            _log.warning(f"{self.path}: {message}")

    def _parse_error(self, exc: SafeET.ParseError, seen_root: bool) -> JUnitError:
        if not seen_root:
            head = _head(self.path)
            if not head.strip() and _blank(self.path):
                return JUnitError(f"{self.path}: file is empty")
            # HTML error pages saved in place of a report are rarely well-formed XML; name them.
            first_tag = _FIRST_TAG.search(head)
            if first_tag and first_tag.group(1).decode("ascii") not in _ROOT_TAGS:
                return _not_junit(self.path, first_tag.group(1).decode("ascii"))
        line, column = exc.position
        reason = _ERROR_POSITION.sub("", str(exc))
        return JUnitError(f"{self.path}: malformed XML at line {line}, column {column}: {reason}")


class _Node:
    """A <testcase> (its <failure>/<error>/<skipped> children in `details`, its Surefire reruns
    counted), or one of those details (with its leading text): what `_case` reads."""

    __slots__ = ("attrib", "details", "reruns", "tag", "text")

    def __init__(self, tag: str, attrib: dict[str, str]) -> None:
        self.tag = tag
        self.attrib = attrib
        self.text: str | None = None
        self.details: list[_Node] = []
        self.reruns = 0


class _Target:
    """The parser's target: follows the suites, keeps the open <testcase> and its direct children
    (and the leading text of its <failure>/<error>/<skipped>), and turns each finished case into a
    TestCase in `done`. Nothing else of the document is kept."""

    def __init__(self, stream: JUnitStream) -> None:
        self.stream = stream
        self.done: list[TestCase] = []
        self.index = 0  # cases finished
        # Per open element: whether it is a <testsuites>/<testsuite> whose <testcase>s count.
        self.containers: list[bool] = []
        # Enclosing counted <testsuite>s: each one's qualifier ("label::outer::inner", capped),
        # and how many of them carry each name (a suite named like its case is left out).
        self.qualifiers: list[str] = [stream.label]
        self.suite_names: list[str] = []
        self.names_open: Counter[str] = Counter()
        self.case: _Node | None = None
        self.inner = 0  # elements open inside the current <testcase>
        self.text_of: _Node | None = None  # the case's child whose leading text is being read
        self.parts: list[str] = []
        self.expat: Any = None  # pyexpat's parser: text is handed to `data` only while it counts
        # The last case, held back until the next one shows it was not retried (see `end`), and
        # the count of suites opened when it was read (a retry is in the same suite).
        self.held: TestCase | None = None
        self.held_suite = 0
        self.suites_opened = 0

    def flush(self) -> None:
        """The held case is final: the document ended or broke off."""
        if self.held is not None:
            self.done.append(self.held)
            self.held = None

    def start(self, tag: str, attributes: list[str]) -> None:
        # The hottest code here (several calls per case): names inlined, no helper calls.
        containers = self.containers
        case = self.case
        if case is not None:
            inner = self.inner
            self.inner = inner + 1
            if not inner:
                if "}" in tag:
                    tag = "{" + tag
                if tag in _DETAIL_TAGS:
                    self.text_of = child = _Node(
                        tag, dict(zip(attributes[::2], attributes[1::2], strict=True))
                    )
                    case.details.append(child)
                    self.expat.CharacterDataHandler = self.data
                elif tag in _RERUN_ALL_TAGS:
                    case.reruns += 1
            elif inner == 1 and self.text_of is not None:
                self._end_text()  # .text is what comes before the detail's first child
            return
        if "}" in tag:
            tag = "{" + tag
        if not containers and tag not in _ROOT_TAGS:
            raise _not_junit(self.stream.path, tag)
        in_container = bool(containers) and containers[-1]
        counted = (not containers or in_container) and tag in _ROOT_TAGS
        containers.append(counted)
        if counted and tag == _SUITE_TAG:
            self.suites_opened += 1
            attrib = dict(zip(attributes[::2], attributes[1::2], strict=True))
            name = attrib.get("name") or ""
            if not self.suite_names:
                self.stream._outermost_suite(attrib, name)
            self.suite_names.append(name)
            self.names_open[name] += 1
            qualifier = self.qualifiers[-1]
            self.qualifiers.append(_cap(node_id_of(qualifier, name), MAX_NAME_CHARS) if name else qualifier)
        elif in_container and tag == _CASE_TAG:
            self.case = _Node(tag, dict(zip(attributes[::2], attributes[1::2], strict=True)))

    def end(self, tag: str) -> None:
        if self.case is not None:
            inner = self.inner
            if inner:
                self.inner = inner - 1
                if inner == 1 and self.text_of is not None:
                    self._end_text()
                return
            self.containers.pop()
            self.index += 1
            case = self.stream._case(
                self.case, self.index, self.suite_names, self.names_open, self.qualifiers
            )
            self.case = None
            held = self.held
            if (
                held is not None
                and self.held_suite == self.suites_opened
                and held.name == case.name
                and held.classname == case.classname
            ):
                # Xcode writes a retried test as the same <testcase> again, right after the last
                # try: one test whose attempts are the tries and whose outcome is the last one's.
                case = dataclasses.replace(
                    case, attempts=held.attempts + case.attempts, duration_s=held.duration_s + case.duration_s
                )
            elif held is not None:
                self.done.append(held)
            self.held, self.held_suite = case, self.suites_opened
        elif self.containers.pop() and tag == _SUITE_TAG:  # (a counted one has no namespace)
            self.names_open[self.suite_names.pop()] -= 1
            self.qualifiers.pop()

    def data(self, text: str) -> None:
        if self.text_of is not None:
            self.parts.append(text)

    def _end_text(self) -> None:
        if self.text_of is not None:
            self.text_of.text = "".join(self.parts) if self.parts else None
            self.text_of = None
            self.parts.clear()
            self.expat.CharacterDataHandler = len


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


def report_metadata(report: TestReport) -> dict[str, object]:
    """The report as Dagster asset metadata: counts, and the failing tests as Markdown and a table
    that the UI renders."""
    counts = report.counts()
    ran = report.total - counts["skipped"] - counts["collected"]
    return {
        **counts,
        "duration_s": report.duration_s,
        "runner": report.runner,
        "collect_only": report.collect_only,
        "pass_rate": counts["passed"] / ran if ran else 1.0,
        "flaky": len(report.flaky),
        "failures": dg.MetadataValue.md(failures_markdown(report.failures)),
        "failed_tests": dg.MetadataValue.table(
            records=[
                dg.TableRecord({"test": c.node_id, "outcome": c.outcome, "message": _one_line(c.message)})
                for c in report.failures[:MAX_FAILURE_ROWS]
            ],
            schema=_FAILED_TESTS_SCHEMA,
        ),
    }


_FAILED_TESTS_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("test", "string", description="node id (classname::name)"),
        dg.TableColumn("outcome", "string", description="failed or error"),
        dg.TableColumn("message", "string", description="the failure message, first characters"),
    ]
)


def _one_line(message: str | None) -> str:
    return " ".join((message or "").split())[:MAX_ROW_MESSAGE_CHARS]


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
                classname=_cap(self.unreadable_classname, MAX_NAME_CHARS),
                name=UNREADABLE_REPORT,
                outcome="error",
                message=_cap(str(exc), MAX_MESSAGE_CHARS),
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


def _cap(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, the cut marked (a warehouse row stays small)."""
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as source:
            return source.read(_SNIFF_BYTES)
    except OSError:
        return b""


def _blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace (read in chunks: it may be large)."""
    try:
        with path.open("rb") as source:
            while chunk := source.read(1 << 20):
                if chunk.strip():
                    return False
    except OSError:
        return False
    return True


def _not_junit(path: Path, root_tag: str) -> JUnitError:
    return JUnitError(
        f"{path}: not a JUnit report: root element is <{root_tag}>, expected <testsuites> or <testsuite>"
    )


def _forbidden_construct(exc: DefusedXmlException) -> str:
    if isinstance(exc, EntitiesForbidden):
        return "entity declaration"
    if isinstance(exc, ExternalReferenceForbidden):
        return "external reference"
    if isinstance(exc, DTDForbidden):
        return "document type declaration"
    return type(exc).__name__


def _bazel_label(target_dir: Path) -> str:
    parts = list(target_dir.parts)
    while parts and _BAZEL_SUBRUN_DIR.fullmatch(parts[-1]):
        parts.pop()
    if not parts:
        return ""
    return f"//{'/'.join(parts[:-1])}:{parts[-1]}"


def failures_markdown(failures: Sequence[TestCase]) -> str:
    """The first failing tests as a Markdown table (test, outcome, message)."""
    if not failures:
        return "none"
    rows = ["| test | outcome | message |", "| --- | --- | --- |"]
    for case in failures[:MAX_FAILURE_ROWS]:
        message = _one_line(case.message)
        rows.append(f"| {_md_cell(case.node_id)} | {case.outcome} | {_md_cell(message)} |")
    if len(failures) > MAX_FAILURE_ROWS:
        rows.append(f"\n… and {len(failures) - MAX_FAILURE_ROWS} more")
    return "\n".join(rows)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")
