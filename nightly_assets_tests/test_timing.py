"""Timing files as benchmarks write them, and the ones they should not: each error names the file."""

from pathlib import Path

import pytest

from nightly_assets.perf.timing import TimingFileError, read_timing_file

TWICE = '{"name": "a", "value": 1}'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "timing.json"
    path.write_text(text)
    return path


def test_a_sample_timing_file(tmp_path):
    path = write(
        tmp_path, '{"benchmarks": [{"name": "a", "value": 1.5, "unit": "ms"}, {"name": "b", "value": 2}]}'
    )
    assert [(r.name, r.value, r.unit) for r in read_timing_file(path)] == [("a", 1.5, "ms"), ("b", 2.0, "s")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"benchmarks": [{"name": "a", "value": 1' + "0" * 400 + "}]}",
            "'value' must be a finite number >= 0",
        ),
        (
            '{"benchmarks": [{"name": "a", "value": 1}, {"name": "a", "value": 2}]}',
            "benchmark 'a' appears twice",
        ),
        ('{"elapsed_seconds": -1}', "'value' must be a finite number >= 0, got -1"),
        ('{"benchmarks": []}', "'benchmarks' must be a non-empty list"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"benchmarks": [{"value": 1}]}', "benchmarks[0] needs a string 'name'"),
        ('{"elapsed_seconds": ' + "9" * 5000 + "}", "not a timing file (Exceeds the limit"),
        ('{"elapsed_seconds": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ],
)
def test_a_bad_timing_file_is_named_with_what_was_expected(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(TimingFileError) as error:
        read_timing_file(path)
    assert str(error.value).startswith(f"{path}: ")
    assert expected in str(error.value)
    assert len(str(error.value)) < 300  # a 400-digit number is not pasted whole
