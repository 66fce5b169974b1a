"""One pass over one JUnit file (``JUnitStream``): streamed through defusedxml's parser with a target
that keeps only the open <testcase>, so memory holds the cases read so far, not the tree; attribute
values past MAX_ATTRIBUTE_BYTES are cut before the parser sees them (junit_values.py). Repeated
testcases (the same classname and name written again right after, in the same suite) are tries of one
test only where the suite says so (its `tests` below its testcases: see `_Scope`); otherwise each is a
test of its own, named apart. How a case is named is in junit.py's docstring.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import sys
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

# defusedxml 0.7 ships no type hints (pyproject sets ignore_missing_imports), so these are Any.
# Its parser target keeps the protection of its parser: no DTD entities, no external references.
import defusedxml.ElementTree as SafeET
from defusedxml.common import DefusedXmlException

from nightly_assets.results import Outcome, TestCase, node_id_of
from nightly_assets.testing.junit_errors import (
    ROOT_TAGS,
    JUnitError,
    forbidden_construct,
    not_junit,
    parse_error,
)
from nightly_assets.testing.junit_values import (
    MAX_MESSAGE_CHARS,
    MAX_NAME_CHARS,
    TRUNCATED,
    LongValueCutter,
    cap,
)
from nightly_assets.testing.pytest_output import PYTEST_COLLECTION_FAILURE, collection_cause

MAX_WARNINGS_PER_FILE = 20

_log = logging.getLogger(__name__)

_SUITE_TAG = "testsuite"
_CASE_TAG = "testcase"
_FLAKY_TAGS = frozenset({"flakyFailure", "flakyError"})  # Surefire: failed, then passed on a rerun
_DETAIL_TAGS = frozenset({"failure", "error", "skipped"})  # their message or text is read
_RERUN_TAGS = frozenset({"rerunFailure", "rerunError"})  # Surefire: failed on every rerun too
_RERUN_ALL_TAGS = _FLAKY_TAGS | _RERUN_TAGS
# gtest: status="notrun" result="suppressed" (DISABLED_), result="skipped" (GTEST_SKIP);
# CTest: status="notrun" / "disabled".
_SKIPPED_STATUS = frozenset({"notrun", "disabled", "skipped"})
_SKIPPED_RESULT = frozenset({"suppressed", "skipped"})
_GROUPED_SECONDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d*)?")  # "1,234.5" (thousands grouped)
_DECIMAL_COMMA = re.compile(r"\d+,\d+")  # "0,25" (a comma for the decimal point)
_SECONDS_CACHE_SIZE = 65536  # times repeat ("0.001"): one float object per distinct text
# Cases held back in document order while a suite's count is not known yet (see `_Scope`): past
# this (some 20 MB of cases), the undecided repeats wait apart and the rest goes on out of order.
MAX_HELD_CASES = 100_000


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
                raise parse_error(self.path, fault, seen_root) from fault
            if isinstance(fault, DefusedXmlException):
                raise JUnitError(
                    f"{self.path}: forbidden XML construct ({forbidden_construct(fault)}); "
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
            name = raw_name if len(raw_name) <= MAX_NAME_CHARS else cap(raw_name, MAX_NAME_CHARS)
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
            kept = self._classnames[classname] = cap(classname, MAX_NAME_CHARS)
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
            message = cap(text, MAX_MESSAGE_CHARS) if text else None
        elif element.rerun_message:
            message = cap(element.rerun_message, MAX_MESSAGE_CHARS)
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


class _Node:
    """A <testcase> (its <failure>/<error>/<skipped> children in `details`, its Surefire reruns
    counted), or one of those details (with its leading text): what `_case` reads."""

    __slots__ = ("attrib", "details", "rerun_message", "reruns", "tag", "text")

    def __init__(self, tag: str, attrib: dict[str, str]) -> None:
        self.tag = tag
        self.attrib = attrib
        self.text: str | None = None
        self.details: list[_Node] = []
        self.reruns = 0
        self.rerun_message: str | None = None  # the last flakyFailure's (Surefire)


class _Scope:
    """A counted <testsuites>/<testsuite> being read: whether its repeated testcases (the same
    classname and name again, right after) are tries of one test (`retries`), once that is known
    (`decided`).

    Only the file can say so, and writers differ (their sources, checked):
    - fastlane's trainer (xcresult to JUnit, behind `scan`/`run_tests`) writes each try of a test
      that Xcode's -retry-tests-on-failure re-ran as its own <testcase>, one after the other, and
      the suite's `tests` without them (xcresult.rb `test_cases_count`; the older junit.xml.erb
      `number_of_tests_excluding_retries`). A suite whose testcases outnumber its `tests` holds
      re-runs: its repeats are tries.
    - Maven Surefire (rerunFailingTestsCount) and Gradle with `reports.junitXml.mergeReruns` (6.8+)
      write one <testcase> with <flakyFailure>/<rerunFailure>/... children: reruns inside the case
      (`_Node.reruns`), whatever the count.
    - Gradle without mergeReruns (the test-retry plugin) and xcbeautify's `--report junit` write
      each try as a <testcase> and count it as a test (`tests` = testcases: Gradle's
      TestClassResult.getTestsCount, xcbeautify's JunitReporter), and nothing else in the file
      marks it. Their tries cannot be told from distinct tests that share a name (jest-junit,
      mocha-junit-reporter and Surefire write those, with the same count), so they are read as
      distinct tests: a test that vanishes or flaky evidence made up is worse than a retry shown
      as two tests.
    No `tests` attribute: decided at once, distinct (the file claims no re-run). Otherwise it is
    counted as it is read (`count`, a nested scope's added when it closes): decided for retries as
    soon as the count passes `tests`, else only when it closes. It cannot be decided at its start:
    `tests` is known there, the count is not, and a re-run can come before the count passes
    `tests`. So a run of repeats waits (`_Target.pending`), with the cases after it to keep the
    document's order, until its scope is decided; a file without repeats holds nothing back.
    """

    __slots__ = ("count", "decided", "declared", "retries")

    def __init__(self, declared: int | None) -> None:
        self.count = 0
        # Past any count when there is nothing to compare with, so the check never fires.
        self.declared = sys.maxsize if declared is None else declared
        self.decided = declared is None
        self.retries = False


class _Run:
    """Repeated testcases (two or more in a row: one scope, classname and name), as read."""

    __slots__ = ("scope", "tries")

    def __init__(self, scope: _Scope, tries: list[TestCase]) -> None:
        self.scope = scope
        self.tries = tries

    def cases(self) -> list[TestCase]:
        """Once the scope is decided: one test whose attempts are the tries and whose outcome and
        message are the last one's, or each a test of its own, the second on named "name (2)"."""
        tries = self.tries
        if self.scope.retries:
            last = tries[-1]
            message = last.message
            if last.outcome == "passed":  # keeps the last failed try's message: its signature
                # tells an outage's cluster from the test's own flake
                message = next((t.message for t in reversed(tries) if t.message is not None), None)
            return [
                dataclasses.replace(
                    last,
                    attempts=sum(t.attempts for t in tries),
                    duration_s=sum(t.duration_s for t in tries),
                    message=message,
                )
            ]
        cases = [tries[0]]
        for number, case in enumerate(tries[1:], start=2):
            suffix = f" ({number})"  # kept whole past a capped name: it is what tells them apart
            name = cap(case.name, MAX_NAME_CHARS - len(suffix)) + suffix
            cases.append(dataclasses.replace(case, name=name))
        return cases


def _declared(raw: str | None) -> int | None:
    """A suite's `tests` attribute as a count; None when absent or not a count."""
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


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
        self.scopes: list[_Scope] = []  # the open counted containers, innermost last
        # The last case, held back until the next one shows whether it is repeated (see `end`),
        # and its repeats so far; a suite opening or closing ends the run.
        self.held: TestCase | None = None
        self.tries: list[TestCase] = []
        # Cases and runs behind a run whose scope is not decided, in document order (see _Scope);
        # past MAX_HELD_CASES the undecided runs wait `apart` and the rest goes to `done`.
        self.pending: deque[TestCase | _Run] = deque()
        self.apart: list[_Run] = []

    def flush(self) -> None:
        """Every case is final: the document ended or broke off. A scope left open by a fault
        was not counted to its end: its repeats stay distinct tests."""
        self._end_run()
        for scope in self.scopes:
            scope.decided = True
        self._release()

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
                    if tag in _FLAKY_TAGS:
                        # a pass after failed reruns keeps what it last failed with (its
                        # signature tells an outage's cluster from the test's own flake)
                        kept = dict(zip(attributes[::2], attributes[1::2], strict=True))
                        case.rerun_message = kept.get("message") or kept.get("type") or case.rerun_message
            elif inner == 1 and self.text_of is not None:
                self._end_text()  # .text is what comes before the detail's first child
            return
        if "}" in tag:
            tag = "{" + tag
        if not containers and tag not in ROOT_TAGS:
            raise not_junit(self.stream.path, tag)
        in_container = bool(containers) and containers[-1]
        counted = (not containers or in_container) and tag in ROOT_TAGS
        containers.append(counted)
        if counted:
            attrib = dict(zip(attributes[::2], attributes[1::2], strict=True))
            self._end_run()  # a repeat is in the same suite, with no suite between
            self.scopes.append(_Scope(_declared(attrib.get("tests"))))
            if tag == _SUITE_TAG:
                name = attrib.get("name") or ""
                if not self.suite_names:
                    self.stream._outermost_suite(attrib, name)
                self.suite_names.append(name)
                self.names_open[name] += 1
                outer = self.qualifiers[-1]
                self.qualifiers.append(cap(node_id_of(outer, name), MAX_NAME_CHARS) if name else outer)
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
            scope = self.scopes[-1]  # a <testcase> is read only inside a counted container
            count = scope.count = scope.count + 1
            if count > scope.declared:
                self._outnumbered(scope)
            held = self.held
            if held is not None:
                if held.name == case.name and held.classname == case.classname:
                    self.tries.append(case)  # tries or distinct tests: see _Scope
                    return
                if self.tries:
                    self._end_run()
                elif self.pending:
                    self._hold(held)
                else:
                    self.done.append(held)
            self.held = case
        elif self.containers.pop():  # a counted one (it has no namespace)
            if tag == _SUITE_TAG:
                self.names_open[self.suite_names.pop()] -= 1
                self.qualifiers.pop()
            self._end_run()
            scope = self.scopes.pop()
            scope.decided = True  # if not already: its count did not pass its `tests`
            if self.scopes:
                parent = self.scopes[-1]
                parent.count += scope.count
                if parent.count > parent.declared:
                    self._outnumbered(parent)
            self._release()

    def _outnumbered(self, scope: _Scope) -> None:
        """The scope holds more testcases than its `tests`: re-runs (see _Scope)."""
        scope.decided = scope.retries = True
        scope.declared = sys.maxsize
        self._release()

    def _end_run(self) -> None:
        """The held case, with its repeats, goes on: it is in the innermost open scope."""
        held = self.held
        if held is None:
            return
        self.held = None
        item: TestCase | _Run = held
        if self.tries:
            item = _Run(self.scopes[-1], [held, *self.tries])
            self.tries = []
            if item.scope.decided and not self.pending:
                self.done.extend(item.cases())
                return
        elif not self.pending:
            self.done.append(held)
            return
        self._hold(item)

    def _hold(self, item: TestCase | _Run) -> None:
        pending = self.pending
        pending.append(item)
        if len(pending) <= MAX_HELD_CASES:
            return
        # Memory stays bounded: the undecided runs wait apart, the rest goes on out of order.
        self.stream._warn(
            f"more than {MAX_HELD_CASES} test cases held back until a suite's count is known; "
            "its repeated testcases are listed after the cases that follow them"
        )
        for held in pending:
            if not isinstance(held, _Run):
                self.done.append(held)
            elif held.scope.decided:
                self.done.extend(held.cases())
            else:
                self.apart.append(held)
        pending.clear()

    def _release(self) -> None:
        """The held-back cases whose scopes are decided go on, in order."""
        if self.apart:
            done = [run for run in self.apart if run.scope.decided]
            self.apart = [run for run in self.apart if not run.scope.decided]
            for run in done:
                self.done.extend(run.cases())
        pending = self.pending
        while pending:
            item = pending[0]
            if not isinstance(item, _Run):
                self.done.append(item)
            elif item.scope.decided:
                self.done.extend(item.cases())
            else:
                return
            pending.popleft()

    def data(self, text: str) -> None:
        if self.text_of is not None:
            self.parts.append(text)

    def _end_text(self) -> None:
        if self.text_of is not None:
            self.text_of.text = "".join(self.parts) if self.parts else None
            self.text_of = None
            self.parts.clear()
            self.expat.CharacterDataHandler = len
