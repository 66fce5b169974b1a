"""Read a timing JSON file: the sample's `{"benchmarks": [...]}` or seed 003's `{"elapsed_seconds": x}`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from nightly_assets.results import BenchmarkResult


class TimingFileError(ValueError):
    """A timing file that is not what a benchmark writes; names the file and the expectation."""


def read_timing_file(path: Path) -> list[BenchmarkResult]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise TimingFileError(f"{path}: the benchmark wrote no timing file") from None
    except json.JSONDecodeError as exc:
        raise TimingFileError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict):
        raise TimingFileError(f"{path}: expected a JSON object, got {type(document).__name__}")
    if "benchmarks" in document:
        entries = document["benchmarks"]
        if not isinstance(entries, list) or not entries:
            raise TimingFileError(f"{path}: 'benchmarks' must be a non-empty list")
        return [_entry(path, i, e) for i, e in enumerate(entries)]
    if "elapsed_seconds" in document:
        return [_entry(path, 0, {"name": "elapsed_seconds", "value": document["elapsed_seconds"]})]
    raise TimingFileError(f"{path}: expected a 'benchmarks' list or an 'elapsed_seconds' value")


def _entry(path: Path, index: int, entry: Any) -> BenchmarkResult:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise TimingFileError(f"{path}: benchmarks[{index}] needs a string 'name'")
    value = entry.get("value")
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise TimingFileError(
            f"{path}: benchmarks[{index}] ({entry['name']}): 'value' must be a finite number >= 0, "
            f"got {value!r}"
        )
    return BenchmarkResult(
        name=entry["name"],
        value=float(value),
        unit=str(entry.get("unit", "s")),
        lower_is_better=bool(entry.get("lower_is_better", True)),
    )
