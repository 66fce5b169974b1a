"""Parse JUnit XML (pytest, Bazel) and `pytest --collect-only -q` output into TestReports."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

# defusedxml 0.7 ships no type hints (pyproject sets ignore_missing_imports), so these are Any.
import defusedxml.ElementTree as SafeET
from defusedxml.common import (
    DefusedXmlException,
    DTDForbidden,
    EntitiesForbidden,
    ExternalReferenceForbidden,
)

from nightly_assets.results import Outcome, TestCase, TestReport

if TYPE_CHECKING:
    # Only the type: parsing untrusted files always goes through defusedxml.
    from xml.etree.ElementTree import Element

MAX_MESSAGE_CHARS = 2000
MAX_FAILURE_ROWS = 50
MAX_ROW_MESSAGE_CHARS = 200

_ROOT_TAGS = ("testsuites", "testsuite")
# Checked in this order: a case with both <failure> and <error> counts as failed.
_OUTCOME_TAGS: tuple[tuple[str, Outcome], ...] = (
    ("failure", "failed"),
    ("error", "error"),
    ("skipped", "skipped"),
)
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


class JUnitError(ValueError):
    """A report file is missing or is not a usable JUnit report; the message names the file."""


def parse_junit(path: Path, suite: str, runner: str = "local") -> TestReport:
    """Parse one JUnit XML file (root <testsuites> or <testsuite>)."""
    return _parse_file(path, suite, runner, default_classname="")


def parse_junit_files(paths: Sequence[Path], suite: str, runner: str = "local") -> TestReport:
    """Parse several JUnit files into one report."""
    if not paths:
        raise JUnitError(f"suite {suite!r}: no report files were found, expected at least one")
    return _merge([parse_junit(p, suite, runner) for p in paths], suite, runner)


def parse_bazel_testlogs(testlogs_dir: Path, suite: str, runner: str = "local") -> TestReport:
    """Parse every `test.xml` under a `bazel-testlogs/` tree, counting flaky retries."""
    if not testlogs_dir.is_dir():
        raise JUnitError(f"{testlogs_dir}: directory not found, expected a bazel-testlogs tree")
    xml_files = sorted(testlogs_dir.rglob("test.xml"))
    if not xml_files:
        raise JUnitError(
            f"{testlogs_dir}: no test.xml found, expected <package>/<target>/test.xml "
            "as written by `bazel test`"
        )
    reports = []
    for xml_file in xml_files:
        attempts_dir = xml_file.parent / "test_attempts"
        earlier = (
            [f for f in attempts_dir.iterdir() if _ATTEMPT_FILE.fullmatch(f.name)]
            if attempts_dir.is_dir()
            else []
        )
        label = _bazel_label(xml_file.parent.relative_to(testlogs_dir))
        reports.append(
            _parse_file(xml_file, suite, runner, default_classname=label, attempts=1 + len(earlier))
        )
    return _merge(reports, suite, runner)


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


def _parse_file(path: Path, suite: str, runner: str, default_classname: str, attempts: int = 1) -> TestReport:
    root = _load_root(path)
    cases = []
    for index, element in enumerate(_iter_testcases(root), start=1):
        cases.append(_parse_testcase(path, index, element, default_classname, attempts))
    suites = list(_outermost_suites(root))
    if suites and all(s.get("time") for s in suites):
        duration = sum(_seconds(path, s.get("time"), f"<testsuite> {s.get('name', '')!r}") for s in suites)
    else:
        duration = sum(c.duration_s for c in cases)
    return TestReport(
        suite=suite,
        cases=tuple(cases),
        runner=runner,
        duration_s=duration,
        source_files=(str(path),),
    )


def _load_root(path: Path) -> Element:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise JUnitError(f"{path}: file not found") from None
    except OSError as exc:
        raise JUnitError(f"{path}: cannot read file: {exc.strerror}") from exc
    if not data.strip():
        raise JUnitError(f"{path}: file is empty")
    try:
        root: Element = SafeET.fromstring(data)
    except SafeET.ParseError as exc:
        # HTML error pages saved in place of a report are rarely well-formed XML; name them.
        first_tag = _FIRST_TAG.search(data[:_SNIFF_BYTES])
        if first_tag and first_tag.group(1).decode("ascii") not in _ROOT_TAGS:
            raise _not_junit(path, first_tag.group(1).decode("ascii")) from exc
        line, column = exc.position
        reason = _ERROR_POSITION.sub("", str(exc))
        raise JUnitError(f"{path}: malformed XML at line {line}, column {column}: {reason}") from exc
    except DefusedXmlException as exc:
        raise JUnitError(
            f"{path}: forbidden XML construct ({_forbidden_construct(exc)}); JUnit files must be plain XML"
        ) from exc
    if root.tag not in _ROOT_TAGS:
        raise _not_junit(path, root.tag)
    return root


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


def _iter_testcases(element: Element) -> Iterator[Element]:
    """Yield testcases in document order, descending through nested suites (with a stack, not
    recursion: a file may nest suites deeper than Python's recursion limit)."""
    stack = [iter(element)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
        elif child.tag == "testcase":
            yield child
        elif child.tag in _ROOT_TAGS:
            stack.append(iter(child))


def _outermost_suites(root: Element) -> Iterator[Element]:
    # Nested suites' times are included in their parent's, so only the outermost ones add up.
    stack = [root]
    while stack:
        element = stack.pop()
        if element.tag == "testsuite":
            yield element
        else:
            stack.extend(reversed([child for child in element if child.tag in _ROOT_TAGS]))


def _parse_testcase(
    path: Path, index: int, element: Element, default_classname: str, attempts: int
) -> TestCase:
    name = element.get("name")
    if not name:
        raise JUnitError(f"{path}: <testcase> #{index} has no 'name' attribute")
    classname = element.get("classname") or default_classname
    outcome: Outcome = "passed"
    message = None
    for tag, tag_outcome in _OUTCOME_TAGS:
        detail = element.find(tag)
        if detail is not None:
            outcome = tag_outcome
            text = (detail.text or "").strip()[:MAX_MESSAGE_CHARS].strip()
            message = detail.get("message") or text or None
            break
    node_id = f"{classname}::{name}" if classname else name
    return TestCase(
        classname=classname,
        name=name,
        outcome=outcome,
        duration_s=_seconds(path, element.get("time"), f"<testcase> {node_id!r}"),
        message=message,
        attempts=attempts,
    )


def _seconds(path: Path, raw: str | None, owner: str) -> float:
    if raw is None or not raw.strip():
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise JUnitError(f"{path}: {owner} has non-numeric time={raw!r}, expected a number of seconds")
    return value


def _bazel_label(target_dir: Path) -> str:
    parts = list(target_dir.parts)
    while parts and _BAZEL_SUBRUN_DIR.fullmatch(parts[-1]):
        parts.pop()
    if not parts:
        return ""
    return f"//{'/'.join(parts[:-1])}:{parts[-1]}"


def _merge(reports: Sequence[TestReport], suite: str, runner: str) -> TestReport:
    return TestReport(
        suite=suite,
        cases=tuple(c for r in reports for c in r.cases),
        runner=runner,
        duration_s=sum(r.duration_s for r in reports),
        source_files=tuple(f for r in reports for f in r.source_files),
    )


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
