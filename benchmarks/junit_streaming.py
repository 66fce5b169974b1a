"""JUnit parsing: throughput against the previous parser and junitparser, time against the size of
one long value, and peak memory of a large file against a file a tenth its size.

Throughput (`BENCH_JUNIT_CASES`, 200,000 pytest-shaped cases): `parse_junit`, the whole-tree parser
this one replaced (read from git history, as it was at PREVIOUS_PARSER_COMMIT) and junitparser (when
installed) parse the same file in this process, in turns, best of THROUGHPUT_ROUNDS each, in CPU seconds.
Long values: one case whose failure `message` attribute, or whose failure text, is 1, 4, 16 and
64 MiB; seconds per MiB against the 1 MiB file's (linear: about 1 or less; quadratic: 64).
Peak memory:

The file is pytest-shaped (captured output on every case, a failure or a skip now and then):
`BENCH_JUNIT_MB` (1024) MB holding about 2 M cases at the default size. Each file is read three times,
each time in a fresh interpreter whose peak RSS is the child's own `ru_maxrss` (os.wait4 in a
small launcher process: Linux carries the RSS of the process that forks a child into the child's
ru_maxrss across exec, so forking it from this large process would raise every figure):
- `stream`: `iter_junit`, counting outcomes as it goes: the parser's own memory. It must not grow
  with the file (full/tenth ratio near 1) and must stay under TARGET_PEAK_MB at full size.
- `held`: `parse_junit` keeping every case in the TestReport, as a stage did before reports past
  junit.STREAM_ABOVE_BYTES were streamed; its memory grows with the number of cases (about 190
  bytes of RSS each), not with the bytes read. The baseline the stage is held against.
- `stage`: what the test_suite stage does with the report once its suite ran: `parse_junit`
  (streamed: the cases tallied, not kept), confirmation (no re-runner here: the failures are listed
  as not re-run), the warehouse write (SQLite, every case row, batched in one transaction), the
  checks and the asset metadata. It must stay under TARGET_PEAK_MB at full size; the child counts
  the rows written.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

TARGET_PEAK_MB = 300.0
# The last commit whose junit.py parsed the whole tree (defusedxml fromstring): "the previous parser".
PREVIOUS_PARSER_COMMIT = "ad8e597"
THROUGHPUT_ROUNDS = 3  # best of three: other processes on a shared CI machine only ever slow a round
LONG_VALUE_MIB = (1, 4, 16, 64)
BYTES_PER_CASE = 537  # 1 GiB holds 2 M cases

_CHILD = """
import collections, datetime as dt, json, sqlite3, sys, tempfile, time
from pathlib import Path
path, mode = Path(sys.argv[1]), sys.argv[2]
if mode == "stage":  # imported before the clock and the parse, as the code location has them
    import dagster as dg
    from nightly_assets.catalog.models import Confirm
    from nightly_assets.results import NightKey
    from nightly_assets.testing import checks
    from nightly_assets.testing.confirm import confirm_failures
    from nightly_assets.testing.report_metadata import report_metadata
    from nightly_assets.warehouse.store import Warehouse
from nightly_assets.testing import junit
start = time.perf_counter()
if not path.stat().st_size:
    cases = 0
elif mode == "stream":
    cases = sum(collections.Counter(case.outcome for case in junit.iter_junit(path)).values())
elif mode == "held":
    junit.STREAM_ABOVE_BYTES = sys.maxsize  # every case kept, as a stage did before streaming
    cases = junit.parse_junit(path, "bench").total
else:  # test_suite.py's path once the suite ran: confirm, record, check, describe
    report = junit.parse_junit(path, "bench")
    confirmation = confirm_failures(report, Confirm(), None, budget_s=60, where="bench")
    report = confirmation.report
    with tempfile.TemporaryDirectory() as tmp:
        Warehouse(f"sqlite:///{tmp}/warehouse.sqlite").record_test_report(
            NightKey("bench", dt.date(2026, 1, 1), "linux-x86_64"), report
        )
        with sqlite3.connect(f"{tmp}/warehouse.sqlite") as db:
            cases = db.execute("select count(*) from test_cases").fetchone()[0]
    asset = dg.AssetKey("bench")
    assert checks.tests_passed(asset, report).passed == (report.count("failed") == 0)
    checks.test_count_stable(asset, report, None, 10.0)
    metadata = {**report_metadata(report), **confirmation.metadata()}
    assert metadata["total"] == cases, (metadata["total"], cases)
print(json.dumps({"cases": cases, "seconds": time.perf_counter() - start}))
"""

_LAUNCHER = """
import json, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
output = child.stdout.read()
_, status, usage = os.wait4(child.pid, 0)
if os.waitstatus_to_exitcode(status):
    sys.exit(f"the parse exited {os.waitstatus_to_exitcode(status)}")
print(json.dumps({**json.loads(output), "maxrss_kib": usage.ru_maxrss}))
"""

_OUTPUT = (
    "<system-out>collected fixtures: tmp_path, monkeypatch, device\n"
    "INFO  nightly.bench: step {i} started\nINFO  nightly.bench: step {i} finished in 3 ms\n"
    "DEBUG nightly.bench: cache hit ratio 0.97, 12 entries evicted\n"
    "WARNING nightly.bench: retrying request {i} after a 503 from the fake server\n"
    "INFO  nightly.bench: wrote /tmp/pytest-of-ci/pytest-0/test_case_{i}/out.npy (4 KiB)\n"
    "</system-out>"
)
_FAILURE = (
    '<failure message="AssertionError: assert 0.31 == 0.3 ± 1.0e-02">def test_case(param):\n'
    "&gt;       assert measured == pytest.approx(expected, rel=1e-2)\n"
    "E       AssertionError: assert 0.31 == 0.3 ± 1.0e-02\n"
    "E        +  where 0.31 = measure(device=&apos;cpu&apos;)\n\n"
    "tests/bench/test_numerics.py:88: AssertionError</failure>"
)
_SKIPPED = (
    '<skipped type="pytest.skip" message="needs a GPU">tests/bench/conftest.py:12: needs a GPU</skipped>'
)


def write_junit(path: Path, size_bytes: int) -> int:
    """A pytest-shaped JUnit file of about `size_bytes`; returns the number of cases."""
    cases = max(1, size_bytes // BYTES_PER_CASE)
    with path.open("w", encoding="utf-8") as out:
        out.write('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" ')
        counts = f'errors="0" failures="{cases // 50}" skipped="{cases // 33}" tests="{cases}"'
        out.write(f'{counts} time="{cases / 500:.3f}">')
        chunk = []
        for i in range(cases):
            detail = _FAILURE if i % 50 == 7 else _SKIPPED if i % 33 == 5 else ""
            chunk.append(
                f'<testcase classname="tests.bench.pkg_{i % 97:02d}.test_module_{i % 389:03d}" '
                f'name="test_case_{i:07d}[float32-batch{i % 8}]" time="0.{i % 1000:03d}">'
                f"{detail}{_OUTPUT.format(i=i)}</testcase>\n"
            )
            if len(chunk) == 10_000:
                out.write("".join(chunk))
                chunk.clear()
        out.write("".join(chunk))
        out.write("</testsuite></testsuites>\n")
    return cases


def measure(path: Path, mode: str) -> dict[str, float]:
    """Parse `path` in a fresh interpreter ("stream" or "report"): its peak RSS (MB), cases and
    parse seconds."""
    launched = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, _CHILD, str(path), mode],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(launched.stdout)
    # ru_maxrss is in KiB on Linux.
    return {"peak_mb": result["maxrss_kib"] / 1024, "cases": result["cases"], "seconds": result["seconds"]}


def _previous_parser() -> ModuleType | None:
    source = subprocess.run(
        ["git", "show", f"{PREVIOUS_PARSER_COMMIT}:nightly_assets/testing/junit.py"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
    )
    if source.returncode:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as out:
        out.write(source.stdout)
    spec = importlib.util.spec_from_file_location("previous_junit", out.name)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(out.name)
    return module


def _junitparser_count(path: Path) -> int:
    from junitparser import JUnitXml  # type: ignore[import-not-found, unused-ignore]

    # What a report needs of each case: identity, time and result.
    return sum(
        1 for suite in JUnitXml.fromfile(str(path)) for case in suite if (case.name, case.time, case.result)
    )


def throughput() -> dict[str, float]:
    from nightly_assets.testing.junit import parse_junit

    cases = int(os.environ.get("BENCH_JUNIT_CASES", "200000"))
    parsers: dict[str, Callable[[Path], int]] = {"parse_junit": lambda p: parse_junit(p, "bench").total}
    previous = _previous_parser()
    if previous is None:
        print(f"  previous parser: not in this checkout's history ({PREVIOUS_PARSER_COMMIT}), left out")
    else:
        parsers["previous"] = lambda p: previous.parse_junit(p, "bench").total
    if importlib.util.find_spec("junitparser") is None:
        print("  junitparser: not installed (pip install junitparser), left out")
    else:
        parsers["junitparser"] = _junitparser_count
    best = dict.fromkeys(parsers, float("inf"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cases.xml"
        written = write_junit(path, cases * BYTES_PER_CASE)
        file_mb = path.stat().st_size / 1024 / 1024
        for _ in range(THROUGHPUT_ROUNDS):
            for name, parse in parsers.items():
                # CPU time of this process: the parse is single-threaded, and a busy machine's
                # other processes then stretch no parser's figure.
                start = time.process_time()
                parsed = parse(path)
                best[name] = min(best[name], time.process_time() - start)
                assert parsed == written, (name, parsed, written)
    print(f"junit throughput ({written:,} cases, {file_mb:,.0f} MB; CPU s, best of {THROUGHPUT_ROUNDS})")
    for name, seconds in best.items():
        print(f"  {name:<12} {seconds:6.2f} s {written / seconds:9,.0f} cases/s")
    return {
        f"junit_throughput_vs_{name}": best[name] / best["parse_junit"]
        for name in parsers
        if name != "parse_junit"
    }


def long_values() -> dict[str, float]:
    from nightly_assets.testing.junit import parse_junit

    print("junit long values (one case; seconds, and seconds per MiB against the 1 MiB file's)")
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        for where in ("attribute", "text"):
            seconds = {}
            for mib in LONG_VALUE_MIB:
                path = Path(tmp) / f"{where}.xml"
                value = "x" * (mib << 20)
                detail = (
                    f'<failure message="{value}"/>' if where == "attribute" else f"<failure>{value}</failure>"
                )
                path.write_text(
                    f'<testsuite name="s"><testcase classname="c" name="t">{detail}</testcase></testsuite>'
                )
                del value
                start = time.perf_counter()
                assert parse_junit(path, "bench").count("failed") == 1
                seconds[mib] = time.perf_counter() - start
            base = seconds[LONG_VALUE_MIB[0]] / LONG_VALUE_MIB[0]
            row = "  ".join(f"{mib} MiB {s:6.3f} s ({s / mib / base:4.2f}x)" for mib, s in seconds.items())
            print(f"  {where:<9} {row}")
            top = LONG_VALUE_MIB[-1]
            ratios[f"junit_long_{where}_{top}mib_s_per_mib_vs_1mib"] = seconds[top] / top / base
            print(f"  target: {top} MiB {where} in < 3 s: {seconds[top]:.2f} s")
    return ratios


def main() -> dict[str, float]:
    return {**throughput(), **long_values(), **memory()}


MODES = ("stream", "held", "stage")


def memory() -> dict[str, float]:
    size_mb = float(os.environ.get("BENCH_JUNIT_MB", "1024"))
    rows: dict[tuple[str, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.xml"
        empty.touch()
        # the interpreter and the imports, nothing parsed
        bare = {mode: measure(empty, mode) for mode in ("stream", "stage")}
        for size in ("tenth", "full"):
            path = Path(tmp) / f"{size}.xml"
            start = time.perf_counter()
            cases = write_junit(path, int((size_mb / 10 if size == "tenth" else size_mb) * 1024 * 1024))
            written = time.perf_counter() - start
            file_mb = path.stat().st_size / 1024 / 1024
            print(f"  wrote the {size} file: {file_mb:,.0f} MB, {cases:,} cases, in {written:.0f} s")
            for mode in MODES:
                rows[size, mode] = {**measure(path, mode), "file_mb": file_mb}
                assert rows[size, mode]["cases"] == cases, (rows[size, mode], cases)
            path.unlink()
    print("junit streaming (a fresh interpreter per run; peak RSS = the child's ru_maxrss)")
    for mode, row in bare.items():
        print(f"  imports only ({mode:<6})                {row['peak_mb']:7.0f} MB peak")
    for (size, mode), row in rows.items():
        print(
            f"  {mode:<6} {size:<5} {row['file_mb']:7,.0f} MB file {row['cases']:>10,.0f} cases "
            f"{row['peak_mb']:7.0f} MB peak {row['cases'] / row['seconds']:9,.0f} cases/s "
            f"{row['file_mb'] / row['seconds']:6.1f} MB/s"
        )
    full = {mode: rows["full", mode] for mode in MODES}
    tenth = {mode: rows["tenth", mode] for mode in MODES}
    size_ratio = full["stream"]["file_mb"] / tenth["stream"]["file_mb"]
    peak_ratio = {mode: full[mode]["peak_mb"] / tenth[mode]["peak_mb"] for mode in MODES}
    per_case = (full["held"]["peak_mb"] - full["stream"]["peak_mb"]) * 1024 * 1024 / full["held"]["cases"]
    print(
        f"  full/tenth: {size_ratio:.1f}x the bytes; peak RSS: stream {peak_ratio['stream']:.2f}x, "
        f"held {peak_ratio['held']:.2f}x (the kept cases: {per_case:.0f} bytes each), "
        f"stage {peak_ratio['stage']:.2f}x"
    )
    stage_vs_held = full["stage"]["peak_mb"] / full["held"]["peak_mb"]
    print(
        f"  stage (parse, confirm, warehouse write, checks, metadata) / held parse at full size: "
        f"{stage_vs_held:.2f}x the peak RSS"
    )
    for mode in ("stream", "stage"):
        verdict = "ok" if full[mode]["peak_mb"] < TARGET_PEAK_MB else "OVER TARGET"
        print(
            f"  target: {mode} {full[mode]['file_mb']:,.0f} MB in < {TARGET_PEAK_MB:.0f} MB peak: "
            f"{full[mode]['peak_mb']:.0f} MB, {verdict}"
        )
    for mode in ("stream", "stage"):
        assert full[mode]["peak_mb"] < TARGET_PEAK_MB, (
            f"{mode}: peak RSS {full[mode]['peak_mb']:.0f} MB >= {TARGET_PEAK_MB:.0f} MB"
        )
    return {
        "junit_stream_peak_full_vs_tenth": peak_ratio["stream"],
        "junit_held_peak_full_vs_tenth": peak_ratio["held"],
        "junit_stage_peak_full_vs_tenth": peak_ratio["stage"],
        "junit_stage_peak_vs_held": stage_vs_held,
        "junit_stream_cases_per_s_full_vs_tenth": (full["stream"]["cases"] / full["stream"]["seconds"])
        / (tenth["stream"]["cases"] / tenth["stream"]["seconds"]),
    }


if __name__ == "__main__":
    main()
