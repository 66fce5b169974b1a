"""JUnit shapes the plain tests do not reach: repeated testcases, retries where the suite's `tests`
says so (Xcode through trainer) and distinct tests sharing a name otherwise (Jest, Mocha, Surefire),
and attribute values long enough that expat would rescan them (cut by junit_values.LongValueCutter)."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from nightly_assets.testing import junit, junit_stream, junit_values
from nightly_assets.testing.junit import iter_junit, parse_junit
from nightly_assets.testing.junit_values import MAX_MESSAGE_CHARS, MAX_NAME_CHARS, TRUNCATED

DATA = Path(__file__).parent / "data" / "junit"


def _write(tmp_path: Path, body: str, name: str = "report.xml") -> Path:
    path = tmp_path / name
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?>\n<testsuites>{body}</testsuites>', "utf-8")
    return path


def test_repeated_testcases_are_attempts_of_one_test_where_the_suite_counts_tests(tmp_path: Path) -> None:
    # Xcode's -retry-tests-on-failure through trainer: each try is the same <testcase> again, the
    # last one last, and the suite's `tests` counts the tests (3), not the tries (6).
    tries = [
        ("testFlaky", "1.0", '<failure message="try 1"/>'),
        ("testFlaky", "2.0", '<failure message="try 2"/>'),
        ("testFlaky", "0.5", ""),
        ("testBroken", "0", '<failure message="first"/>'),
        ("testBroken", "0", '<failure message="last"/>'),
        ("testOnce", "0", ""),
    ]
    path = _write(
        tmp_path,
        '<testsuite name="AppTests" tests="3">'
        + "".join(
            f'<testcase classname="AppTests.Login" name="{name}" time="{time}">{detail}</testcase>'
            for name, time, detail in tries
        )
        + "</testsuite>",
    )
    report = parse_junit(path, "ios")
    by_name = {case.name: case for case in report.cases}
    assert report.total == 3
    flaky = by_name["testFlaky"]
    assert (flaky.outcome, flaky.attempts, flaky.duration_s, flaky.message) == ("passed", 3, 3.5, "try 2")
    assert report.flaky == (flaky,)
    broken = by_name["testBroken"]
    assert (broken.outcome, broken.attempts, broken.message) == ("failed", 2, "last")
    assert by_name["testOnce"].attempts == 1
    assert report.counts()["failed"] == 1


def test_distinct_tests_with_one_name_stay_apart(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '<testsuite name="a">'
        '<testcase classname="m" name="test_x[1]"/><testcase classname="m" name="test_x[2]"/>'
        '<testcase classname="m" name="test_y"/><testcase classname="other" name="test_y"/>'
        '<testcase classname="m" name="test_z"/></testsuite>'
        # The same classname and name in the next suite is another suite's test, not a retry.
        '<testsuite name="b"><testcase classname="m" name="test_z"/></testsuite>',
    )
    cases = list(iter_junit(path))
    assert [(c.classname, c.name, c.attempts) for c in cases] == [
        ("m", "test_x[1]", 1),
        ("m", "test_x[2]", 1),
        ("m", "test_y", 1),
        ("other", "test_y", 1),
        ("m", "test_z", 1),
        ("m", "test_z", 1),
    ]


def test_a_retry_before_a_fault_is_kept_merged(tmp_path: Path) -> None:
    # The third testcase passes `tests="2"`: the suite holds re-runs, known before the fault.
    path = tmp_path / "cut.xml"
    path.write_text(
        '<testsuite name="s" tests="2"><testcase classname="c" name="t"><failure message="m"/></testcase>'
        '<testcase classname="c" name="t"/><testcase classname="c" name="u"/><testcase',
        "utf-8",
    )
    report = junit.parse_junit_files([path], "s")
    assert [(c.name, c.outcome, c.attempts) for c in report.cases] == [
        ("t", "passed", 2),
        ("u", "passed", 1),
        (junit.UNREADABLE_REPORT, "error", 1),
    ]


def test_repeats_before_a_fault_in_a_suite_not_yet_outnumbered_stay_distinct(tmp_path: Path) -> None:
    # The count never passed `tests` before the file broke off: no re-run is known.
    path = tmp_path / "cut.xml"
    path.write_text(
        '<testsuite name="s" tests="5"><testcase classname="c" name="t"><failure message="m"/></testcase>'
        '<testcase classname="c" name="t"/><testcase classname="c" name="u"/><testcase',
        "utf-8",
    )
    report = junit.parse_junit_files([path], "s")
    assert [(c.name, c.outcome, c.attempts) for c in report.cases] == [
        ("t", "failed", 1),
        ("t (2)", "passed", 1),
        ("u", "passed", 1),
        (junit.UNREADABLE_REPORT, "error", 1),
    ]


def _counted(report: junit.TestReport) -> tuple[int, int, int]:
    return report.total, report.count("failed"), len(report.flaky)


def test_jest_tests_sharing_a_name_are_kept_apart() -> None:
    # jest-junit: two `it("removes an item")` in one describe; `tests="4"` counts both.
    report = parse_junit(DATA / "jest_same_name.xml", "web")
    assert [(c.node_id, c.outcome, c.attempts) for c in report.cases] == [
        ("Cart::Cart adds an item", "passed", 1),
        ("Cart::Cart removes an item", "failed", 1),
        ("Cart::Cart removes an item (2)", "passed", 1),
        ("Cart::Cart totals the prices", "passed", 1),
    ]
    assert _counted(report) == (4, 1, 0)


def test_mocha_tests_sharing_a_name_are_kept_apart() -> None:
    # mocha-junit-reporter: name is the full title, classname the test's own title.
    report = parse_junit(DATA / "mocha_same_name.xml", "web")
    assert [(c.node_id, c.outcome) for c in report.cases] == [
        ("parses a number::parser parses a number", "failed"),
        ("parses a number::parser parses a number (2)", "passed"),
        ("rejects garbage::parser rejects garbage", "passed"),
    ]
    assert _counted(report) == (3, 1, 0)


def test_surefire_repeated_names_without_rerun_markers_are_distinct_tests() -> None:
    # Parameterized JUnit 5 tests as older Surefire names them: the method name only, once each.
    report = parse_junit(DATA / "surefire_same_name.xml", "java")
    assert [(c.name, c.outcome, c.attempts) for c in report.cases] == [
        ("slugifies", "passed", 1),
        ("slugifies (2)", "failed", 1),
        ("slugifies (3)", "passed", 1),
        ("trimsDashes", "passed", 1),
    ]
    assert len({c.node_id for c in report.cases}) == 4
    assert _counted(report) == (4, 1, 0)


def test_surefire_reruns_inside_a_testcase_are_still_attempts() -> None:
    # <flakyFailure>/<rerunFailure> children mark the reruns, whatever the suite counts.
    report = parse_junit(DATA / "surefire_reruns.xml", "java")
    assert report.total == 6
    assert [(c.name, c.attempts) for c in report.flaky] == [("evictsOldest", 3), ("loadsConfig", 2)]


def test_xcode_retries_counted_as_tests_are_attempts_of_one_test() -> None:
    # trainer: `tests="3"` for five testcases, each retry written right after the try before it.
    report = parse_junit(DATA / "xcode_retries.xml", "ios")
    assert [(c.name, c.outcome, c.attempts) for c in report.cases] == [
        ("testSignsIn()", "passed", 2),
        ("testSignsOut()", "failed", 2),
        ("testShowsBanner()", "passed", 1),
    ]
    flaky = report.flaky
    assert [(c.node_id, c.duration_s) for c in flaky] == [("AppTests.LoginTests::testSignsIn()", 2.1)]
    last_try = 'XCTAssertEqual failed: ("2") is not equal to ("0") (LoginTests.swift:48)'
    assert report.cases[1].message == last_try
    # the pass after a failed try keeps that try's message: its signature is the flake's
    assert report.cases[0].message == "XCTAssertTrue failed (LoginTests.swift:31)"
    assert _counted(report) == (3, 1, 1)


def test_repeats_in_a_suite_without_a_tests_count_are_distinct_tests(tmp_path: Path) -> None:
    # No `tests` attribute: the file claims no re-run, and a test dropped or a pass made "flaky"
    # would be worse than a retry read as a second test.
    path = _write(
        tmp_path,
        '<testsuite name="s"><testcase classname="c" name="t"><failure message="m"/></testcase>'
        '<testcase classname="c" name="t"/><testcase classname="c" name="u"/></testsuite>',
    )
    report = parse_junit(path, "s")
    assert [(c.name, c.outcome, c.attempts) for c in report.cases] == [
        ("t", "failed", 1),
        ("t (2)", "passed", 1),
        ("u", "passed", 1),
    ]
    assert report.flaky == ()


_EACH_KEPT = [
    ("t", "failed", 1),
    ("t (2)", "passed", 1),
    ("u", "passed", 1),
    ("v", "failed", 1),
    ("v (2)", "failed", 1),
]


@pytest.mark.parametrize(
    ("tests", "expected"),
    [
        # Counted tests, not tries: the inner suite's five testcases pass its 3 at the fourth.
        ("3", [("t", "passed", 2), ("u", "passed", 1), ("v", "failed", 2)]),
        # Counted tries: as many tests as testcases, each kept.
        ("5", _EACH_KEPT),
        ("not a count", _EACH_KEPT),
    ],
)
def test_held_repeats_come_out_in_document_order(
    tmp_path: Path, tests: str, expected: list[tuple[str, str, int]]
) -> None:
    fail = '<failure message="m"/>'
    path = _write(
        tmp_path,
        '<testsuite name="outer" tests="9"><testcase classname="o" name="before"/>'
        f'<testsuite name="inner" tests="{tests}">'
        f'<testcase classname="c" name="t">{fail}</testcase><testcase classname="c" name="t"/>'
        f'<testcase classname="c" name="u"/><testcase classname="c" name="v">{fail}</testcase>'
        f'<testcase classname="c" name="v">{fail}</testcase></testsuite>'
        '<testcase classname="o" name="after"/></testsuite>',
    )
    cases = [(c.name, c.outcome, c.attempts) for c in iter_junit(path)]
    assert cases == [("before", "passed", 1), *expected, ("after", "passed", 1)]


def test_a_suite_closing_ends_a_run_of_repeats(tmp_path: Path) -> None:
    # The same name in the enclosing suite after a nested one is another test, not a retry.
    path = _write(
        tmp_path,
        '<testsuite name="a" tests="1"><testsuite name="b" tests="1"><testcase classname="c" name="t"/>'
        '</testsuite><testcase classname="c" name="t"/></testsuite>',
    )
    assert [(c.name, c.attempts) for c in iter_junit(path)] == [("t", 1), ("t", 1)]


def test_past_the_hold_limit_undecided_repeats_wait_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(junit_stream, "MAX_HELD_CASES", 3)
    others = "".join(f'<testcase classname="c" name="o{i}"/>' for i in range(6))
    path = _write(
        tmp_path,
        '<testsuite name="s" tests="7"><testcase classname="c" name="t"><failure message="m"/></testcase>'
        f'<testcase classname="c" name="t"/>{others}</testsuite>',
    )
    cases = [(c.name, c.attempts) for c in iter_junit(path)]
    # Past 3 held, the cases behind the undecided run go on; the run follows once the eighth
    # testcase passes `tests="7"` (re-runs: one test, two attempts). No case is lost.
    assert cases == [("o0", 1), ("o1", 1), ("o2", 1), ("o3", 1), ("t", 2), ("o4", 1), ("o5", 1)]
    assert "held back" in caplog.text


def test_a_repeat_of_a_capped_name_keeps_its_number(tmp_path: Path) -> None:
    long = "n" * (MAX_NAME_CHARS + 50)
    case = f'<testcase classname="c" name="{long}"/>'
    path = _write(tmp_path, f'<testsuite name="s">{case}{case}</testsuite>')
    first, second = iter_junit(path)
    assert len(second.name) <= MAX_NAME_CHARS and second.name.endswith(TRUNCATED + " (2)")
    assert first.name != second.name


def test_a_long_message_is_kept_as_the_cap_shows_it(tmp_path: Path) -> None:
    # 3 MiB of multi-byte characters and references, cut near a character or reference boundary.
    unit = "é€😀&amp;&#233;&lt;x>y'"
    value = unit * (3 * 1024 * 1024 // len(unit.encode()))
    expected = value.replace("&amp;", "&").replace("&#233;", "é").replace("&lt;", "<")
    path = _write(
        tmp_path,
        '<testsuite name="s">'
        f'<testcase classname="c" name="t1"><failure message="{value}" type="AssertionError"/></testcase>'
        f"<testcase classname='c' name='t2' time='1.5'><error message='{value.replace(chr(39), '')}'/>"
        "</testcase><testcase classname='c' name='t3'/></testsuite>",
    )
    report = parse_junit(path, "s")
    outcomes = [(c.name, c.outcome) for c in report.cases]
    assert outcomes == [("t1", "failed"), ("t2", "error"), ("t3", "passed")]
    first = report.cases[0].message
    assert first == expected[: MAX_MESSAGE_CHARS - len(TRUNCATED)] + TRUNCATED
    assert report.cases[1].duration_s == 1.5


def test_the_cutter_bounds_what_expat_sees(tmp_path: Path) -> None:
    big = 8 * 1024 * 1024
    data = (
        b'<testsuite><testcase name="t" a="1"><failure message="'
        + b"x" * big
        + b'" type="E">'
        + b"z" * big  # text is not cut: expat reads it without rescanning
        + b"</failure></testcase></testsuite>"
    )
    cutter = junit_values.LongValueCutter(io.BytesIO(data), TRUNCATED.encode())
    seen = b"".join(iter(cutter.read, b""))
    assert len(seen) < len(data) - big + 2 * junit_values.MAX_ATTRIBUTE_BYTES
    assert seen.count(b"z") == big
    assert TRUNCATED.encode() + b'" type="E">' in seen


@pytest.mark.parametrize("seed", range(40))
def test_cutting_at_any_chunk_boundary_keeps_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # Tiny chunks and limit: every cut, skip and resume lands on every kind of boundary.
    rng = random.Random(seed)
    monkeypatch.setattr(junit_values, "CHUNK_BYTES", rng.randint(1, 23))
    # Above the few bytes of the names and times, which must come through whole.
    monkeypatch.setattr(junit_values, "MAX_ATTRIBUTE_BYTES", rng.randint(8, 60))
    pieces = ["a", "é", "€", "😀", "&amp;", "&#233;", "&#x1F600;", "&gt;", ">", " "]
    cases, expected = [], []
    for i in range(rng.randint(1, 12)):
        quote = rng.choice(['"', "'"])
        other = "'" if quote == '"' else '"'
        raw = "".join(rng.choice([*pieces, other]) for _ in range(rng.randint(0, 80)))
        text = raw.replace("&amp;", "&").replace("&#233;", "é").replace("&#x1F600;", "😀")
        text = text.replace("&gt;", ">")
        junk = "".join(rng.choice(pieces[:4]) for _ in range(rng.randint(0, 40)))
        detail = rng.choice(["failure", "skipped"])
        cases.append(
            f"<testcase classname={quote}c{quote} note={quote}{junk}{quote} name={quote}t{i}{quote} "
            f"time={quote}0.5{quote}><{detail} message={quote}{raw}{quote}/><system-out>{junk} &lt; "
            f"</system-out></testcase><!-- {junk} -->"
        )
        expected.append((f"t{i}", "failed" if detail == "failure" else "skipped", text))
    path = _write(tmp_path, f'<testsuite name="s">{"".join(cases)}</testsuite>')
    read = list(iter_junit(path))
    assert [(c.name, c.outcome, c.duration_s) for c in read] == [(n, o, 0.5) for n, o, _ in expected]
    for case, (_, _, text) in zip(read, expected, strict=True):
        message = case.message or ""
        if message.endswith(TRUNCATED):
            assert text.startswith(message.removesuffix(TRUNCATED))
        else:
            assert message == text
