"""JUnit shapes the plain tests do not reach: retries written as repeated testcases (Xcode) and
attribute values long enough that expat would rescan them (cut by junit_values.LongValueCutter)."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from nightly_assets.testing import junit, junit_values
from nightly_assets.testing.junit import iter_junit, parse_junit
from nightly_assets.testing.junit_values import MAX_MESSAGE_CHARS, TRUNCATED


def _write(tmp_path: Path, body: str, name: str = "report.xml") -> Path:
    path = tmp_path / name
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?>\n<testsuites>{body}</testsuites>', "utf-8")
    return path


def test_repeated_testcases_are_attempts_of_one_test(tmp_path: Path) -> None:
    # Xcode's -retry-tests-on-failure: each try is the same <testcase> again, the last one last.
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
        '<testsuite name="AppTests">'
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
    assert (flaky.outcome, flaky.attempts, flaky.duration_s, flaky.message) == ("passed", 3, 3.5, None)
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
    path = tmp_path / "cut.xml"
    path.write_text(
        '<testsuite name="s"><testcase classname="c" name="t"><failure message="m"/></testcase>'
        '<testcase classname="c" name="t"/><testcase classname="c" name="u"/><testcase',
        "utf-8",
    )
    report = junit.parse_junit_files([path], "s")
    assert [(c.name, c.outcome, c.attempts) for c in report.cases] == [
        ("t", "passed", 2),
        ("u", "passed", 1),
        (junit.UNREADABLE_REPORT, "error", 1),
    ]


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
