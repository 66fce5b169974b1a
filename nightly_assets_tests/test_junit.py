"""Tests for nightly_assets.testing.junit, fed with files written by real pytest runs and with
hand-written files in each tool's own shape (data/junit/)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import cast

import dagster as dg
import pytest

from nightly_assets.results import TestCase, TestReport
from nightly_assets.testing import checks
from nightly_assets.testing.junit import (
    UNREADABLE_REPORT,
    iter_junit,
    parse_bazel_testlogs,
    parse_junit,
    parse_junit_files,
)
from nightly_assets.testing.junit_errors import JUnitError
from nightly_assets.testing.junit_stream import JUnitStream
from nightly_assets.testing.junit_values import MAX_MESSAGE_CHARS, MAX_NAME_CHARS, TRUNCATED
from nightly_assets.testing.pytest_output import parse_collect_only
from nightly_assets.testing.report_metadata import report_metadata

# 3 passed, 2 failed, 1 error (fixture raises), 1 skipped; TestHelper is not collectable.
SAMPLE_TESTS = '''
import pytest


@pytest.fixture
def database():
    raise RuntimeError("database unreachable")


def test_adds():
    assert 1 + 1 == 2


@pytest.mark.parametrize("value", [1, "a|b"])
def test_truthy(value):
    assert value


def test_compare():
    assert "apple" == "pear", "fruit mismatch"


def test_lookup():
    {}["missing"]


def test_query(database):
    pass


@pytest.mark.skip(reason="needs a GPU")
def test_gpu():
    pass


class TestHelper:
    """Has __init__, so pytest warns and collects nothing from it."""

    def __init__(self):
        pass

    def test_never(self):
        pass
'''
SAMPLE_TEST_COUNT = 7
DATA = Path(__file__).parent / "data" / "junit"


def _run_pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # A clean environment, so the outer pytest's options and plugins do not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(cwd), *args],
        check=False,  # callers assert the exit code they expect
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("sample")
    (directory / "test_sample.py").write_text(SAMPLE_TESTS)
    return directory


@pytest.fixture(scope="module")
def junit_file(sample_dir: Path) -> Path:
    xml_path = sample_dir / "reports" / "unit.xml"
    result = _run_pytest(sample_dir, f"--junitxml={xml_path}", "test_sample.py")
    assert result.returncode == 1, result.stdout + result.stderr  # 1 = some tests failed
    return xml_path


def _by_name(report: TestReport) -> dict[str, TestCase]:
    return {case.name: case for case in report.cases}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


# report_metadata types its values as object; these two are the Markdown and the table it builds.
def _markdown(metadata: dict[str, object]) -> dg.MarkdownMetadataValue:
    return cast(dg.MarkdownMetadataValue, metadata["failures"])


def _table(metadata: dict[str, object]) -> dg.TableMetadataValue:
    return cast(dg.TableMetadataValue, metadata["failed_tests"])


# --- real pytest JUnit output ---------------------------------------------------------------


def test_parse_junit_counts_outcomes_of_a_real_pytest_run(junit_file: Path) -> None:
    report = parse_junit(junit_file, suite="unit", runner="tpu-v5")

    assert report.counts() == {
        "total": SAMPLE_TEST_COUNT,
        "passed": 3,
        "failed": 2,
        "error": 1,
        "skipped": 1,
        "collected": 0,
    }
    assert (report.suite, report.runner, report.collect_only) == ("unit", "tpu-v5", False)
    assert report.source_files == (str(junit_file),)
    assert report.duration_s > 0


def test_parse_junit_carries_messages_and_names(junit_file: Path) -> None:
    cases = _by_name(parse_junit(junit_file, suite="unit"))

    assert cases["test_compare"].outcome == "failed"
    assert "fruit mismatch" in (cases["test_compare"].message or "")
    assert "KeyError" in (cases["test_lookup"].message or "")
    assert cases["test_query"].outcome == "error"
    assert "database unreachable" in (cases["test_query"].message or "")
    assert cases["test_gpu"].outcome == "skipped"
    assert cases["test_gpu"].message == "needs a GPU"
    assert cases["test_adds"].message is None
    assert cases["test_truthy[a|b]"].classname == "test_sample"
    assert cases["test_truthy[a|b]"].node_id == "test_sample::test_truthy[a|b]"


def test_collection_errors_carry_their_cause_and_count_as_errors(tmp_path: Path) -> None:
    """A real pytest run whose modules fail to import: each error case says why, and the check
    counts errors as errors, as the stage's table does."""
    (tmp_path / "test_needs_module.py").write_text("import hypothesis_not_installed\n")
    (tmp_path / "test_syntax.py").write_text("def broken(:\n    pass\n")
    (tmp_path / "test_raises.py").write_text("raise RuntimeError('no config at import')\n")
    xml_path = tmp_path / "collect.xml"
    result = _run_pytest(tmp_path, f"--junitxml={xml_path}", ".")
    assert result.returncode == 2, result.stdout + result.stderr  # 2 = interrupted by collection errors

    report = parse_junit(xml_path, suite="unit")
    messages = {case.name: case.message for case in report.cases}
    assert messages == {
        "test_needs_module": (
            "collection failure: ModuleNotFoundError: No module named 'hypothesis_not_installed'"
        ),
        "test_syntax": messages["test_syntax"],
        "test_raises": "collection failure: RuntimeError: no config at import",
    }
    assert (messages["test_syntax"] or "").startswith("collection failure: SyntaxError: ")
    assert {case.outcome for case in report.cases} == {"error"}

    check = checks.tests_passed(dg.AssetKey(["p", "tests_unit"]), report)
    assert not check.passed
    assert (check.description or "").startswith("0 passed, 3 errors of 3:")
    assert "No module named 'hypothesis_not_installed'" in (check.description or "")
    table = report_metadata(report)["failed_tests"].value.records  # type: ignore[attr-defined]
    assert any("No module named 'hypothesis_not_installed'" in r.data["message"] for r in table)


def test_failed_and_errors_are_counted_apart() -> None:
    def report(*outcomes: str) -> TestReport:
        cases = [TestCase("m", f"t{i}", o, 0.0) for i, o in enumerate(outcomes)]  # type: ignore[arg-type]
        return TestReport(suite="unit", runner="local", cases=tuple(cases))

    assert checks.failed_and_errors(report("passed", "failed")) == "1 failed"
    assert checks.failed_and_errors(report("error", "error")) == "2 errors"
    assert checks.failed_and_errors(report("failed", "error")) == "1 failed, 1 error"
    assert checks.failed_and_errors(report("passed")) == "0 failed"


def test_parse_junit_files_merges_reports(junit_file: Path, tmp_path: Path) -> None:
    second = _write(
        tmp_path / "integration.xml",
        """
        <testsuite name="integration" time="2.5">
          <testcase classname="it" name="test_upload" time="2.5"/>
        </testsuite>
        """,
    )
    single = parse_junit(junit_file, suite="unit")

    merged = parse_junit_files([junit_file, second], suite="all")

    assert merged.total == SAMPLE_TEST_COUNT + 1
    assert merged.count("passed") == 4
    assert merged.cases[-1].node_id == "it::test_upload"
    assert merged.duration_s == pytest.approx(single.duration_s + 2.5)
    assert merged.source_files == (str(junit_file), str(second))


def test_report_metadata_of_a_real_run(junit_file: Path) -> None:
    report = parse_junit(junit_file, suite="unit", runner="local")

    metadata = report_metadata(report)

    assert {k: metadata[k] for k in ("total", "passed", "failed", "error", "skipped")} == {
        "total": 7,
        "passed": 3,
        "failed": 2,
        "error": 1,
        "skipped": 1,
    }
    assert metadata["collected"] == 0
    assert metadata["pass_rate"] == pytest.approx(3 / 6)
    assert metadata["flaky"] == 0
    assert metadata["runner"] == "local"
    assert metadata["collect_only"] is False
    assert metadata["duration_s"] == report.duration_s
    # The failing tests render in the UI: Markdown and a table, not raw pipe text.
    assert isinstance(metadata["failures"], dg.MarkdownMetadataValue)
    table = metadata["failures"].value.splitlines()
    assert table[0] == "| test | outcome | message |"
    assert len(table) == 2 + 3  # header, separator, 2 failed + 1 error
    assert any("test_sample::test_query | error |" in row for row in table)
    records = _table(metadata).value.records
    assert [r.data["outcome"] for r in records].count("error") == 1 and len(records) == 3
    assert all(isinstance(v, (int, float, str, dg.MetadataValue)) for v in metadata.values())


# --- hand-written JUnit shapes ----------------------------------------------------------------


def test_nested_suites_duration_counts_outermost_suites_only(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "nested.xml",
        """
        <testsuites>
          <testsuite name="outer" time="3.0">
            <testsuite name="inner" time="1.0">
              <testcase classname="a" name="t1" time="1.0"/>
            </testsuite>
            <testcase name="t2" time="0.5"><failure>boom
              at line 3</failure></testcase>
          </testsuite>
          <testsuite name="other" time="0.25">
            <testcase classname="b" name="t3" time=""/>
          </testsuite>
        </testsuites>
        """,
    )

    report = parse_junit(path, suite="nested")

    # t2 has no classname: the enclosing suite qualifies it.
    assert [c.node_id for c in report.cases] == ["a::t1", "outer::t2", "b::t3"]
    assert report.cases[1].classname == "outer"
    assert report.cases[1].message == "boom\n      at line 3"  # text used when no message attr
    assert report.cases[2].duration_s == 0.0
    assert report.duration_s == pytest.approx(3.25)


def test_duration_falls_back_to_case_sum_without_suite_time(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "single.xml",
        """
        <testsuite name="s">
          <testcase name="t1" time="1.5"/>
          <testcase name="t2" time="0.25"/>
          <testcase name="t3"/>
        </testsuite>
        """,
    )

    assert parse_junit(path, suite="s").duration_s == pytest.approx(1.75)


def test_long_names_and_messages_are_cut_and_marked(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "long.xml",
        f"""
        <testsuite name="s">
          <testcase classname="{"c" * 3000}" name="{"n" * 3000}"><error>
          {"x" * 20000}
          </error></testcase>
          <testcase classname="c" name="t"><failure message="{"m" * 9000}">short text</failure></testcase>
        </testsuite>
        """,
    )

    long_names, long_attribute = parse_junit(path, suite="s").cases

    assert long_names.message == "x" * (MAX_MESSAGE_CHARS - len(TRUNCATED)) + TRUNCATED
    assert long_names.name == "n" * (MAX_NAME_CHARS - len(TRUNCATED)) + TRUNCATED
    assert long_names.classname == "c" * (MAX_NAME_CHARS - len(TRUNCATED)) + TRUNCATED
    assert long_attribute.message is not None and len(long_attribute.message) == MAX_MESSAGE_CHARS
    assert long_attribute.message.endswith(TRUNCATED)


def test_failures_md_escapes_cuts_and_caps_rows() -> None:
    long_message = "line one | pipe\nline two " + "y" * 500
    cases = tuple(TestCase("mod", f"test_{i}", "failed", message=long_message) for i in range(60))
    report = TestReport(suite="s", cases=(*cases, TestCase("mod", "ok", "passed")))

    metadata = report_metadata(report)

    rows = _markdown(metadata).value.splitlines()
    assert rows[2].startswith("| mod::test_0 | failed | line one \\| pipe line two yyy")
    message_cell = rows[2].split(" | ", 2)[2].removesuffix(" |")
    assert len(message_cell.replace("\\|", "|")) == 200
    assert sum(row.startswith("| mod::") for row in rows) == 50
    assert rows[-1] == "… and 10 more"
    assert metadata["pass_rate"] == pytest.approx(1 / 61)


def test_report_metadata_when_nothing_ran() -> None:
    report = TestReport(suite="s", cases=(TestCase("m", "t", "skipped"),))

    metadata = report_metadata(report)

    assert metadata["pass_rate"] == 1.0
    assert _markdown(metadata).value == "none"
    assert _table(metadata).value.records == []


# --- pytest --collect-only ------------------------------------------------------------------


def test_parse_collect_only_of_a_real_run(sample_dir: Path) -> None:
    result = _run_pytest(sample_dir, "--collect-only", "-q", "test_sample.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "warnings summary" in result.stdout  # the ignored-lines path is really exercised

    report = parse_collect_only(result.stdout, suite="unit", runner="ci")

    assert report.total == SAMPLE_TEST_COUNT
    assert report.count("collected") == SAMPLE_TEST_COUNT
    assert report.collect_only is True
    assert report.runner == "ci"
    assert report.cases[0] == TestCase("test_sample.py", "test_adds", "collected")
    assert "test_sample.py::test_truthy[a|b]" in [c.node_id for c in report.cases]
    metadata = report_metadata(report)
    assert (metadata["collected"], metadata["pass_rate"], metadata["collect_only"]) == (
        7,
        1.0,
        True,
    )


def test_parse_collect_only_with_deselection(sample_dir: Path) -> None:
    result = _run_pytest(sample_dir, "--collect-only", "-q", "-k", "truthy", "test_sample.py")
    assert "2/7 tests collected" in result.stdout

    report = parse_collect_only(result.stdout, suite="unit")

    assert [c.name for c in report.cases] == ["test_truthy[1]", "test_truthy[a|b]"]


def test_parse_collect_only_splits_class_and_params() -> None:
    output = "\n".join(
        [
            "tests/test_x.py::TestA::test_b[param-1]",
            "tests/t.py::test_c[a::b]",
            "",
            "2 tests collected in 0.01s",
        ]
    )

    cases = parse_collect_only(output, suite="s").cases

    assert [(c.classname, c.name) for c in cases] == [
        ("tests/test_x.py::TestA", "test_b[param-1]"),
        ("tests/t.py", "test_c[a::b]"),
    ]


def test_parse_collect_only_no_tests() -> None:
    report = parse_collect_only("\nno tests collected in 0.00s\n", suite="s")

    assert report.total == 0


def test_parse_collect_only_count_mismatch_names_both_numbers() -> None:
    output = "tests/test_x.py::test_a\ntests/test_x.py::test_b\n\n5 tests collected in 0.01s\n"

    with pytest.raises(ValueError, match=r"5 tests collected.* 2 node ids"):
        parse_collect_only(output, suite="s")


# --- Bazel testlogs -------------------------------------------------------------------------

# The exact shape tools/test/generate-xml.sh writes for a test without its own XML output.
BAZEL_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
<testsuite name="{name}" tests="1" failures="0" errors="{errors}">
  <testcase name="{name}" status="run" duration="{secs}" time="{secs}">{error}</testcase>
  <system-out><![CDATA[exec ${{PAGER:-/usr/bin/less}} "$0" || exit 1
Executing tests from //{name}
]]></system-out>
</testsuite>
</testsuites>
"""


def _bazel_target(testlogs: Path, package: str, target: str, exit_code: int, secs: int) -> Path:
    target_dir = testlogs / package / target
    target_dir.mkdir(parents=True)
    error = f'<error message="exited with error code {exit_code}"></error>' if exit_code else ""
    (target_dir / "test.xml").write_text(
        BAZEL_XML.format(name=f"{package}/{target}", errors=int(bool(exit_code)), secs=secs, error=error)
    )
    (target_dir / "test.log").write_text("test output\n")
    return target_dir


def test_parse_bazel_testlogs(tmp_path: Path) -> None:
    testlogs = tmp_path / "bazel-testlogs"
    _bazel_target(testlogs, "pkg", "pass_test", exit_code=0, secs=3)
    _bazel_target(testlogs, "pkg", "fail_test", exit_code=1, secs=2)
    flaky = _bazel_target(testlogs, "pkg/sub", "flaky_test", exit_code=0, secs=4)
    attempts = flaky / "test_attempts"
    attempts.mkdir()
    (attempts / "attempt_1.xml").write_text(
        BAZEL_XML.format(
            name="pkg/sub/flaky_test",
            errors=1,
            secs=4,
            error='<error message="exited with error code 1"></error>',
        )
    )
    (attempts / "attempt_1.log").write_text("first attempt failed\n")

    report = parse_bazel_testlogs(testlogs, suite="bazel", runner="rbe")

    by_class = {c.classname: c for c in report.cases}
    assert sorted(by_class) == ["//pkg/sub:flaky_test", "//pkg:fail_test", "//pkg:pass_test"]
    assert report.total == 3  # attempt_1.xml is counted, not parsed as a test
    assert (by_class["//pkg:pass_test"].outcome, by_class["//pkg:pass_test"].attempts) == (
        "passed",
        1,
    )
    assert by_class["//pkg:fail_test"].outcome == "error"
    assert by_class["//pkg:fail_test"].message == "exited with error code 1"
    assert (
        by_class["//pkg/sub:flaky_test"].outcome,
        by_class["//pkg/sub:flaky_test"].attempts,
    ) == (
        "passed",
        2,
    )
    assert [c.name for c in report.flaky] == ["pkg/sub/flaky_test"]
    assert report.duration_s == pytest.approx(9.0)
    assert len(report.source_files) == 3
    assert report_metadata(report)["flaky"] == 1


def test_parse_bazel_testlogs_empty_dir(tmp_path: Path) -> None:
    testlogs = tmp_path / "bazel-testlogs"
    (testlogs / "pkg" / "t").mkdir(parents=True)

    with pytest.raises(JUnitError, match=r"bazel-testlogs: no test\.xml found"):
        parse_bazel_testlogs(testlogs, suite="bazel")


def test_parse_bazel_testlogs_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(JUnitError, match=r"nowhere: directory not found"):
        parse_bazel_testlogs(tmp_path / "nowhere", suite="bazel")


# --- bad input ------------------------------------------------------------------------------

BILLION_LAUGHS = """\
<?xml version="1.0"?>
<!DOCTYPE lolz [
  <!ENTITY lol "lol">
  <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
  <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
  <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
  <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
  <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
  <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
  <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
  <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<testsuite name="s"><testcase name="&lol9;"/></testsuite>
"""

# nginx's stock 502 page: HTML, not XML (<hr> is never closed).
NGINX_502 = (
    "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n"
    "<center><h1>502 Bad Gateway</h1></center>\n<hr><center>nginx</center>\n</body>\n</html>\n"
)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("", "unit.xml: file is empty", id="empty"),
        pytest.param("  \n\n", "unit.xml: file is empty", id="whitespace"),
        pytest.param(
            NGINX_502,
            "unit.xml: not a JUnit report: root element is <html>, expected <testsuites> or <testsuite>",
            id="html",
        ),
        pytest.param(
            '<?xml version="1.0"?>\n<!DOCTYPE html>\n<html><body><p>Sign in</p></body></html>',
            "unit.xml: not a JUnit report: root element is <html>, expected <testsuites> or <testsuite>",
            id="well-formed-html",
        ),
        pytest.param(
            "<test-run><test-case/></test-run>",
            "unit.xml: not a JUnit report: root element is <test-run>",
            id="nunit-xml",
        ),
        pytest.param(
            '<?xml version="1.0"?>\n<testsuites>\n<testsuite name="s">\n    <testcase name="a"',
            "unit.xml: malformed XML at line 4, column ",
            id="truncated",
        ),
        pytest.param(
            BILLION_LAUGHS,
            "unit.xml: forbidden XML construct (entity declaration); JUnit files must be plain XML",
            id="billion-laughs",
        ),
    ],
)
def test_bad_junit_files(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "reports" / "unit.xml"
    path.parent.mkdir()
    path.write_text(content)

    with pytest.raises(JUnitError) as excinfo:
        parse_junit(path, suite="unit")

    assert expected in str(excinfo.value)
    assert str(excinfo.value).startswith(str(path))


def test_truncated_xml_reports_the_parser_reason(tmp_path: Path) -> None:
    path = _write(tmp_path / "cut.xml", '<testsuite name="s">\n  <testcase name="a">\n')

    with pytest.raises(JUnitError, match=r"cut\.xml: malformed XML at line 3, column 0: no element found$"):
        parse_junit(path, suite="unit")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(JUnitError, match=r"absent\.xml: file not found$"):
        parse_junit(tmp_path / "absent.xml", suite="unit")


def test_missing_file_in_a_list_is_an_error_case(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.xml", '<testsuite><testcase name="t"/></testsuite>')

    report = parse_junit_files([good, tmp_path / "absent.xml"], suite="unit")

    assert [(c.node_id, c.outcome) for c in report.cases] == [
        ("t", "passed"),
        (f"absent.xml::{UNREADABLE_REPORT}", "error"),
    ]
    assert report.cases[1].message == f"{tmp_path / 'absent.xml'}: file not found"


def test_empty_file_list() -> None:
    with pytest.raises(JUnitError, match=r"suite 'unit': no report files were found"):
        parse_junit_files([], suite="unit")


def test_junit_error_is_a_value_error() -> None:
    assert issubclass(JUnitError, ValueError)


def test_suites_nested_past_the_recursion_limit_parse(tmp_path: Path) -> None:
    depth = 5000  # Python's recursion limit is 1000
    path = tmp_path / "deep.xml"
    path.write_text(
        "<testsuites>"
        + "<testsuite name='s' time='1.5'>" * depth
        + "<testcase classname='c' name='deep'><failure message='boom'/></testcase>"
        + "</testsuite>" * depth
        + "<testsuite name='t'><testcase classname='c' name='shallow'/></testsuite></testsuites>"
    )
    report = parse_junit(path, suite="s")
    assert [(c.name, c.outcome) for c in report.cases] == [("deep", "failed"), ("shallow", "passed")]


def test_nested_suites_without_classname_are_capped_not_recursed(tmp_path: Path) -> None:
    depth = 5000
    path = tmp_path / "deep.xml"
    path.write_text(
        "<testsuites>"
        + "".join(f"<testsuite name='level{i}'>" for i in range(depth))
        + "<testcase name='deep'><skipped/></testcase>"
        + "</testsuite>" * depth
        + "</testsuites>"
    )

    [case] = parse_junit(path, suite="s").cases

    assert case.outcome == "skipped"
    assert case.classname.startswith("level0::level1::level2::")
    assert len(case.classname) == MAX_NAME_CHARS and case.classname.endswith(TRUNCATED)


# --- the dialects, each in its tool's own shape (data/junit/) -----------------------------------

ALL_FIXTURES = sorted(DATA.glob("*.xml"))


def _outcomes(report: TestReport) -> dict[str, tuple[str, int]]:
    return {c.node_id: (c.outcome, c.attempts) for c in report.cases}


@pytest.mark.parametrize("fixture", ALL_FIXTURES, ids=lambda p: p.stem)
def test_no_two_cases_of_a_fixture_share_an_id(fixture: Path) -> None:
    report = parse_junit(fixture, suite="s")

    ids = [c.node_id for c in report.cases]
    assert report.total > 0
    assert len(set(ids)) == len(ids), ids


def test_pytest_xunit2_ids_stay_classname_and_name() -> None:
    report = parse_junit(DATA / "pytest_xunit2.xml", suite="unit")

    assert _outcomes(report) == {
        "tests.test_math::test_add": ("passed", 1),
        "tests.test_math::test_div[0]": ("failed", 1),
        "tests.test_io::test_read": ("error", 1),
        "tests.test_gpu::test_cuda": ("skipped", 1),
        "tests.test_math.TestMul::test_mul": ("passed", 1),
    }
    cases = _by_name(report)
    assert cases["test_div[0]"].message == "ZeroDivisionError: division by zero"
    assert cases["test_read"].message == 'failed on setup with "RuntimeError: disk unreachable"'
    assert cases["test_cuda"].message == "needs a GPU"
    assert report.duration_s == pytest.approx(1.234)


def test_surefire_reruns_count_as_flaky_with_their_attempts() -> None:
    report = parse_junit(DATA / "surefire_reruns.xml", suite="java")

    prefix = "com.example.cache.CacheTest::"
    assert {k.removeprefix(prefix): v for k, v in _outcomes(report).items()} == {
        "hitsAfterPut": ("passed", 1),
        "evictsOldest": ("passed", 3),  # two <flakyFailure>s, then a pass
        "loadsConfig": ("passed", 2),  # one <flakyError>, then a pass
        "expiresEntries": ("failed", 3),  # <failure> and two <rerunFailure>s
        "persistsToDisk": ("error", 2),  # <error> and one <rerunError>
        "concurrentWrites": ("skipped", 1),
    }
    assert [c.name for c in report.flaky] == ["evictsOldest", "loadsConfig"]
    cases = _by_name(report)
    # it passed, and keeps what its last failed rerun said (a flake's signature, not an outage's)
    assert cases["evictsOldest"].message == "expected: <3> but was: <5>"
    assert cases["hitsAfterPut"].message is None
    assert cases["expiresEntries"].message == "expired 0 entries, expected 10"
    assert cases["expiresEntries"].duration_s == pytest.approx(1234.5)  # time="1,234.5"
    assert cases["concurrentWrites"].message == "JDK-8301234: flaky on ARM"
    assert report.duration_s == pytest.approx(4.512)


def test_gradle_report() -> None:
    report = parse_junit(DATA / "gradle.xml", suite="java")

    assert _outcomes(report) == {
        "org.example.parser.ParserTest::parsesEmptyInput()": ("passed", 1),
        "org.example.parser.ParserTest::parsesNestedLists()": ("failed", 1),
        "org.example.parser.ParserTest::parsesHugeInput()": ("skipped", 1),
    }
    assert (report.cases[1].message or "").endswith("expected: <2> but was: <1>")
    assert report.cases[2].message is None
    assert report.duration_s == pytest.approx(0.412)


def test_jest_junit_cases_are_qualified_by_their_suite() -> None:
    report = parse_junit(DATA / "jest_junit.xml", suite="web")

    # jest-junit writes classname == name, and the same test in several files.
    assert _outcomes(report) == {
        "Button::Button renders with a label": ("passed", 1),
        "Button::accessibility has no violations": ("passed", 1),
        "Button::Button supports a tooltip": ("skipped", 1),
        "Link::Link follows href": ("passed", 1),
        "Link::accessibility has no violations": ("failed", 1),
        "Link::Link opens in a new tab": ("passed", 1),
    }
    failed = report.failures[0]
    assert (failed.classname, failed.name) == ("Link", "accessibility has no violations")
    assert (failed.message or "").startswith("Error: expect(received).toHaveNoViolations(expected)\n")
    assert report.duration_s == pytest.approx(1.104 + 2.113)


def test_go_junit_report_keeps_packages_apart() -> None:
    report = parse_junit(DATA / "go_junit_report.xml", suite="go")

    assert _outcomes(report) == {
        "example.com/app/internal/util::TestParse": ("passed", 1),
        "example.com/app/internal/util::TestParse/empty_input": ("failed", 1),
        "example.com/app/internal/util::TestFormat": ("passed", 1),
        "example.com/app/cmd/util::TestParse": ("passed", 1),
        "example.com/app/cmd/util::TestNetwork": ("skipped", 1),
    }
    assert report.failures[0].message == "Failed"
    assert report.duration_s == pytest.approx(0.016)


def test_ctest_notrun_and_disabled_are_skipped() -> None:
    report = parse_junit(DATA / "ctest.xml", suite="cpp")

    assert _outcomes(report) == {
        "Linux-c++::unit_math": ("passed", 1),
        "Linux-c++::unit_io": ("failed", 1),
        "Linux-c++::gpu_kernels": ("skipped", 1),  # status="notrun"
        "Linux-c++::legacy_io": ("skipped", 1),  # status="disabled", no <skipped/>
    }
    assert _by_name(report)["gpu_kernels"].message == "Unable to find required file: /ci/build/gpu_kernels"
    assert report.duration_s == pytest.approx(2.0)


def test_gtest_suppressed_and_skipped_are_skipped() -> None:
    report = parse_junit(DATA / "gtest.xml", suite="cpp")

    assert _outcomes(report) == {
        "MatrixTest::Multiplies": ("passed", 1),
        "MatrixTest::Inverts": ("failed", 1),
        "MatrixTest::DISABLED_Huge": ("skipped", 1),  # status="notrun" result="suppressed"
        "DeviceTest::RunsOnGpu": ("skipped", 1),  # result="skipped" with <skipped>
        "DeviceTest::Multiplies": ("passed", 1),
        "Sizes/ShapeTest::Broadcasts/0": ("passed", 1),
    }
    cases = {c.node_id: c for c in report.cases}
    assert (cases["MatrixTest::Inverts"].message or "").startswith("matrix_test.cc:24\nExpected equality")
    assert cases["DeviceTest::RunsOnGpu"].message == "device_test.cc:9\nno GPU visible\n"
    assert report.duration_s == pytest.approx(0.035)


def test_nested_suites_qualify_cases_without_classname() -> None:
    report = parse_junit(DATA / "nested.xml", suite="api")

    assert _outcomes(report) == {
        "api/users.spec.js::GET /users::returns 200": ("passed", 1),
        "api/users.spec.js::GET /users::pages results": ("failed", 1),
        "api/users.spec.js::POST /users::returns 200": ("passed", 1),
        "api/teams.spec.js::GET /users::returns 200": ("passed", 1),
    }
    assert report.duration_s == pytest.approx(0.75)  # the two outermost suites


def test_bazel_generated_test_xml_keeps_its_label_id(tmp_path: Path) -> None:
    testlogs = tmp_path / "bazel-testlogs"
    target = testlogs / "tensorflow" / "core" / "kernels" / "matmul_op_test"
    target.mkdir(parents=True)
    shutil.copy(DATA / "bazel_test.xml", target / "test.xml")

    [case] = parse_bazel_testlogs(testlogs, suite="bazel").cases

    # The suite named like the case adds nothing: the id is the label's, as before.
    assert case.classname == "//tensorflow/core/kernels:matmul_op_test"
    assert case.name == "tensorflow/core/kernels/matmul_op_test"
    assert (case.outcome, case.message, case.duration_s) == ("error", "exited with error code 1", 41.0)


def test_bazel_testlogs_keep_other_targets_when_one_test_xml_is_bad(tmp_path: Path) -> None:
    testlogs = tmp_path / "bazel-testlogs"
    _bazel_target(testlogs, "pkg", "pass_test", exit_code=0, secs=3)
    bad = _bazel_target(testlogs, "pkg", "cut_test", exit_code=0, secs=1)
    (bad / "test.xml").write_text('<?xml version="1.0"?>\n<testsuites>\n<testsuite name="pkg/cut_test">\n')

    report = parse_bazel_testlogs(testlogs, suite="bazel")

    assert _outcomes(report) == {
        f"//pkg:cut_test::{UNREADABLE_REPORT}": ("error", 1),
        "//pkg:pass_test::pkg/pass_test": ("passed", 1),
    }
    message = report.cases[0].message or ""
    assert message.startswith(f"{bad / 'test.xml'}: malformed XML at line 4, column 0")
    assert report.duration_s == pytest.approx(3.0)


def test_bad_files_in_a_list_keep_everything_else(tmp_path: Path) -> None:
    cut = _write(
        tmp_path / "cut.xml",
        """
        <testsuite name="s">
          <testcase classname="m" name="before" time="2"/>
          <testcase classname="m" name="also_before"><failure message="boom"/></testcase>
          <testcase classname="m" name="half
        """,
    )
    html = tmp_path / "page.xml"
    html.write_text(NGINX_502)
    good = _write(tmp_path / "good.xml", '<testsuite><testcase classname="g" name="t"/></testsuite>')

    report = parse_junit_files([cut, html, good], suite="all")

    assert [(c.node_id, c.outcome) for c in report.cases] == [
        ("m::before", "passed"),
        ("m::also_before", "failed"),
        (f"cut.xml::{UNREADABLE_REPORT}", "error"),
        (f"page.xml::{UNREADABLE_REPORT}", "error"),
        ("g::t", "passed"),
    ]
    assert (report.cases[2].message or "").startswith(f"{cut}: malformed XML at line ")
    assert report.cases[3].message == (
        f"{html}: not a JUnit report: root element is <html>, expected <testsuites> or <testsuite>"
    )
    assert report.duration_s == pytest.approx(2.0)
    assert report.source_files == (str(cut), str(html), str(good))


# --- lenient reading: one odd case does not discard the file --------------------------------------


def test_nameless_case_gets_a_placeholder_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(
        tmp_path / "unit.xml",
        '<testsuite name="s"><testcase classname="c" name="a"/><testcase classname="c"><failure/></testcase>'
        '<testcase classname="c" name="b"/></testsuite>',
    )

    with caplog.at_level(logging.WARNING, logger="nightly_assets.testing.junit_stream"):
        report = parse_junit(path, suite="unit")

    assert [(c.node_id, c.outcome) for c in report.cases] == [
        ("c::a", "passed"),
        ("c::<unnamed testcase #2>", "failed"),
        ("c::b", "passed"),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: <testcase> #2 has no 'name' attribute; recorded as '<unnamed testcase #2>'"
    ]


@pytest.mark.parametrize(
    ("raw", "seconds", "warned"),
    [
        ("1,234.5", 1234.5, False),
        ("12,345,678", 12345678.0, False),
        ("0,25", 0.25, False),
        ("1.5s", 1.5, False),
        (" 2 ", 2.0, False),
        ("", 0.0, False),
        ("soon", 0.0, True),
        ("nan", 0.0, True),
        ("-3", 0.0, True),
    ],
)
def test_times_are_read_leniently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, raw: str, seconds: float, warned: bool
) -> None:
    path = _write(
        tmp_path / "unit.xml", f'<testsuite><testcase classname="c" name="t" time="{raw}"/></testsuite>'
    )

    with caplog.at_level(logging.WARNING, logger="nightly_assets.testing.junit_stream"):
        [case] = parse_junit(path, suite="unit").cases

    assert case.duration_s == pytest.approx(seconds)
    expected = [f"{path}: <testcase> 'c::t' has time={raw!r}, expected a number of seconds; counted as 0"]
    assert [r.getMessage() for r in caplog.records] == (expected if warned else [])


def test_bad_suite_time_warns_and_counts_zero(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(
        tmp_path / "unit.xml", '<testsuite name="s" time="soon"><testcase name="t" time="1"/></testsuite>'
    )

    with caplog.at_level(logging.WARNING, logger="nightly_assets.testing.junit_stream"):
        report = parse_junit(path, suite="unit")

    assert report.total == 1 and report.duration_s == 0.0
    assert "<testsuite> 's' has time='soon', expected a number of seconds" in caplog.text


def test_warnings_are_capped_per_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path / "unit.xml", "<testsuite>" + "<testcase/>" * 100 + "</testsuite>")

    with caplog.at_level(logging.WARNING, logger="nightly_assets.testing.junit_stream"):
        report = parse_junit(path, suite="unit")

    assert report.total == 100 and len({c.name for c in report.cases}) == 100
    assert len(caplog.records) == 21
    assert caplog.records[-1].getMessage() == f"{path}: 80 more warnings not shown"


# --- streaming ------------------------------------------------------------------------------------


def test_streaming_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "big.xml"
    out = "<system-out>" + "log line of a chatty test\n" * 40 + "</system-out>"
    with path.open("w") as f:
        f.write("<testsuites><testsuite name='big' time='1'>")
        for i in range(5000):
            f.write(f"<testcase classname='m{i % 7}' name='t{i}' time='0.001'>{out}</testcase>")
        f.write("</testsuite></testsuites>")
    assert path.stat().st_size > 5_000_000

    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_junit(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert count == 5000
    assert peak < 1_000_000, peak  # a whole tree would take tens of MB


def test_stream_reports_duration_after_the_last_case(tmp_path: Path) -> None:
    stream = JUnitStream(DATA / "nested.xml")

    names = [c.name for c in stream.cases()]

    assert len(names) == 4 and stream.duration_s == pytest.approx(0.75) and stream.warnings == 0
