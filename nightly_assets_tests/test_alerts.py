"""Alert text: long reasons keep their first line and their end, where the cause is."""

from nightly_assets.reporting.alerts import MAX_REASON_CHARS, MAX_REASON_LINES, brief


def test_a_short_reason_is_kept_whole():
    text = "tests_unit: 9 passed, 1 failed of 10:\n  tests.test_x::test_y: assert 1 == 2"
    assert brief(text) == text


def test_a_long_build_log_keeps_its_first_line_and_its_cause():
    lines = ["pip wheel exited 1; last output:"] + [f"  compiling module {i}" for i in range(200)]
    lines.append("error: invalid version 'not a version' in pyproject.toml")
    short = brief("\n".join(lines))
    kept = short.splitlines()
    assert kept[0] == "pip wheel exited 1; last output:"
    assert kept[-1] == "error: invalid version 'not a version' in pyproject.toml"
    assert len(kept) == MAX_REASON_LINES and "lines …" in kept[2]


def test_one_enormous_line_keeps_both_ends():
    text = "start " + "x" * 10_000 + " the cause"
    short = brief(text)
    assert short.startswith("start ") and short.endswith(" the cause")
    assert len(short) <= MAX_REASON_CHARS + 3
