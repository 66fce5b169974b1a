"""Reports too large to hold (past junit.STREAM_ABOVE_BYTES) are streamed: read again from their
files on each pass, with the same cases, counts, confirmation and warehouse rows as held ones."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from nightly_assets.catalog.models import Confirm
from nightly_assets.results import NightKey, TestCase, TestReport
from nightly_assets.testing import junit
from nightly_assets.testing.confirm import Rerunner, confirm_failures
from nightly_assets.testing.junit import parse_bazel_testlogs, parse_junit, parse_junit_files
from nightly_assets.testing.junit_errors import JUnitError
from nightly_assets.testing.streamed_cases import StreamedCases
from nightly_assets.warehouse.store import Warehouse
from nightly_assets.warehouse.tables import TestCaseTable, TestEvidenceTable

KEY = NightKey("nightly", dt.date(2024, 5, 10), "linux-x86_64")

# tests="6" for seven testcases: the repeated test_retried is a retry (junit_stream._Scope).
JUNIT = """<?xml version="1.0"?>
<testsuites><testsuite name="pytest" tests="6" time="4.5">
  <testcase classname="tests.test_a" name="test_one" time="0.5"/>
  <testcase classname="tests.test_a" name="test_two" time="1,5">
    <failure message="boom">trace</failure>
  </testcase>
  <testcase classname="tests.test_b" name="test_three" time="0.25"><skipped message="no GPU"/></testcase>
  <testcase classname="tests.test_b" name="test_four" time="1"><error message="fixture">x</error></testcase>
  <testcase classname="tests.test_c" name="test_retried" time="0.1"><failure message="try 1"/></testcase>
  <testcase classname="tests.test_c" name="test_retried" time="0.2"/>
  <testcase classname="tests.test_c" name="test_five"/>
</testsuite></testsuites>
"""


def _both(parse: object, *args: object, monkeypatch: pytest.MonkeyPatch) -> tuple[TestReport, TestReport]:
    """The same input parsed held (the default for a small file) and streamed."""
    assert callable(parse)
    held = parse(*args)
    monkeypatch.setattr(junit, "STREAM_ABOVE_BYTES", 0)
    streamed = parse(*args)
    monkeypatch.undo()
    assert isinstance(held.cases, tuple)
    assert isinstance(streamed.cases, StreamedCases)
    return held, streamed


def _same(held: TestReport, streamed: TestReport) -> None:
    assert tuple(streamed.cases) == held.cases
    assert tuple(streamed.cases) == held.cases  # a second pass reads the same
    assert streamed.counts() == held.counts()
    assert streamed.failures == held.failures
    assert streamed.flaky == held.flaky
    assert streamed.duration_s == held.duration_s
    assert streamed.source_files == held.source_files


def test_a_streamed_report_has_the_cases_counts_and_duration_of_a_held_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    held, streamed = _both(parse_junit, path, "unit", "ci-1", monkeypatch=monkeypatch)
    _same(held, streamed)
    assert held.counts() == {"total": 6, "passed": 3, "failed": 1, "error": 1, "skipped": 1, "collected": 0}
    assert [c.node_id for c in held.flaky] == ["tests.test_c::test_retried"]
    assert len(streamed.cases) == 6
    assert streamed.cases[1] == held.cases[1]
    assert streamed.cases[-1] == held.cases[-1]
    assert streamed.cases[1:5:2] == held.cases[1:5:2]
    assert streamed.cases[::-1] == held.cases[::-1]
    # As a Sequence (it is StreamedCases): mypy narrowed the tuple field to 6 items by the len assert.
    cases: Sequence[TestCase] = streamed.cases
    with pytest.raises(IndexError):
        cases[6]


def test_streamed_files_keep_a_bad_files_error_case_and_the_bazel_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good, bad = tmp_path / "good.xml", tmp_path / "bad.xml"
    good.write_text(JUNIT)
    bad.write_text('<testsuite name="s"><testcase classname="c" name="t" time="2"/><testcase')
    _same(*_both(parse_junit_files, [good, bad], "unit", monkeypatch=monkeypatch))
    target = tmp_path / "testlogs" / "pkg" / "test_target"
    (target / "test_attempts").mkdir(parents=True)
    (target / "test_attempts" / "attempt_1.xml").write_text("")
    (target / "test.xml").write_text(
        '<testsuite name="pkg/test_target"><testcase name="t1" time="3"/></testsuite>'
    )
    held, streamed = _both(parse_bazel_testlogs, tmp_path / "testlogs", "unit", monkeypatch=monkeypatch)
    _same(held, streamed)
    assert held.cases == (TestCase("//pkg:test_target::pkg/test_target", "t1", "passed", 3.0, attempts=2),)


def test_a_streamed_report_whose_file_changed_since_it_was_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    monkeypatch.setattr(junit, "STREAM_ABOVE_BYTES", 0)
    report = parse_junit(path, "unit")
    path.write_text(JUNIT.replace("test_five", "test_six"))
    os.utime(path, ns=(0, 0))
    with pytest.raises(JUnitError, match=r"junit\.xml: the file changed while its report was in use"):
        list(report.cases)


def test_confirming_a_streamed_report_merges_the_reruns_and_keeps_it_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    rerun = TestReport("unit", (TestCase("tests.test_a", "test_two", "passed"),))
    rerunner = Rerunner(lambda case: case.node_id, lambda ids, number, runs, left: rerun)
    done = [
        confirm_failures(report, Confirm(attempts=1), rerunner, budget_s=60, where="ci-1")
        for report in _both(parse_junit, path, "unit", monkeypatch=monkeypatch)
    ]
    assert isinstance(done[1].report.cases, StreamedCases)
    _same(done[0].report, done[1].report)
    assert done[1].passed_on_rerun == {"tests.test_a::test_two": 2}
    assert done[1].report.count("failed") == 0


def test_the_warehouse_writes_a_streamed_report_as_it_writes_a_held_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    held, streamed = _both(parse_junit, path, "unit", monkeypatch=monkeypatch)
    written = []
    for name, report in (("held", held), ("streamed", streamed)):
        url = f"sqlite:///{tmp_path}/{name}.sqlite"
        store = Warehouse(url)
        store.record_test_report(KEY, report)
        flipped = TestCase("tests.test_a", "test_one", "failed", message="now")
        store.record_test_report(KEY, report)  # replaced by the same run: no disagreement
        store.record_test_report(
            KEY, TestReport("unit", tuple(flipped if c.name == "test_one" else c for c in held.cases))
        )
        store.record_test_report(KEY, report)  # disagrees with the run before on test_one
        engine = create_engine(url)
        with engine.connect() as connection:
            cases = connection.execute(
                select(*(c for c in TestCaseTable.__table__.columns if c.name != "id")).order_by(
                    TestCaseTable.id
                )
            ).all()
            evidence = connection.execute(
                select(
                    TestEvidenceTable.test_key, TestEvidenceTable.kind, TestEvidenceTable.outcome
                ).order_by(TestEvidenceTable.id)
            ).all()
        engine.dispose()
        written.append((cases, evidence))
    assert written[0] == written[1]
    cases, evidence = written[1]
    assert [(row.name, row.outcome) for row in cases][:2] == [("test_one", "passed"), ("test_two", "failed")]
    assert {(kind, outcome) for _, kind, outcome in evidence} == {
        ("retry", "failed"),
        ("rerun", "passed"),  # the flipped run: test_one passed the run before
        ("rerun", "failed"),  # the last: test_one failed the run before
    }
