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
    except ValueError as exc:  # an integer longer than Python converts (4300 digits)
        raise TimingFileError(f"{path}: not a timing file ({str(exc)[:120]})") from None
    except RecursionError:
        raise TimingFileError(f"{path}: nested too deeply to be a timing file") from None
    if not isinstance(document, dict):
        raise TimingFileError(f"{path}: expected a JSON object, got {type(document).__name__}")
    if "benchmarks" in document:
        entries = document["benchmarks"]
        if not isinstance(entries, list) or not entries:
            raise TimingFileError(f"{path}: 'benchmarks' must be a non-empty list")
        results = [_entry(path, i, e) for i, e in enumerate(entries)]
        seen: set[str] = set()
        for result in results:
            if result.name in seen:
                raise TimingFileError(
                    f"{path}: benchmark {result.name!r} appears twice; each name must be unique"
                )
            seen.add(result.name)
        return results
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
        or not math.isfinite(_as_float(value))
        or value < 0
    ):
        raise TimingFileError(
            f"{path}: benchmarks[{index}] ({entry['name']}): 'value' must be a finite number >= 0, "
            f"got {_shortened(repr(value))}"
        )
    return BenchmarkResult(
        name=entry["name"],
        value=float(value),
        unit=str(entry.get("unit", "s")),
        lower_is_better=bool(entry.get("lower_is_better", True)),
    )


def _as_float(value: float) -> float:
    """The value as a float; infinity for an integer too large for one (a 400-digit timing)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _shortened(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"
