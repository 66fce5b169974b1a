"""One pass over one JUnit file (``JUnitStream``): streamed through defusedxml's parser with a target
that keeps only the open <testcase>, so memory holds the cases read so far, not the tree; attribute
values past MAX_ATTRIBUTE_BYTES are cut before the parser sees them (junit_values.py). A test
retried as the same <testcase> written again right after (Xcode, Gradle's test-retry) is one case:
its attempts the tries, its outcome the last one's. How a case is named is in junit.py's docstring.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections import Counter
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
        if not containers and tag not in ROOT_TAGS:
            raise not_junit(self.stream.path, tag)
        in_container = bool(containers) and containers[-1]
        counted = (not containers or in_container) and tag in ROOT_TAGS
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
            self.qualifiers.append(cap(node_id_of(qualifier, name), MAX_NAME_CHARS) if name else qualifier)
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
