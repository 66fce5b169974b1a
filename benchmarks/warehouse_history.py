"""Warehouse queries at real scale: MariaDB holding NIGHTS nights x CASES test cases of one
pipeline and target (default 180 x 120,000 = 21.6 M rows: 4 suites x 30,000 cases a night), then
each question release engineers ask, answered by the store's query API: one test's history,
tonight's newly failing tests, the pass rates over the last 7 and 30 nights (the tests below
1.0, then every test: `nightly tests rates --all`). Each is timed
(first run and best of three) against a baseline measured in the same run: one full scan of the
table (`COUNT(*)` of one test's rows with the indexes ignored), which is what each query cost
before the test identity indexes. The history is bulk-loaded with multi-row INSERTs through
SQLAlchemy (not through the store), the secondary indexes built after the load, and each suite and
night's tally row (``tallies.SuiteTally``, what the store writes with a suite's cases) as well.

Database `nightly_wh_bench_history`, dropped at the end (BENCH_HISTORY_KEEP=1 keeps it and a
later run of the same size reuses it). Sizes: BENCH_HISTORY_NIGHTS, BENCH_HISTORY_CASES.
Skipped when no MariaDB answers on 127.0.0.1:3306."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

from sqlalchemy import Table, create_engine, delete, func, insert, select, text

from nightly_assets.results import NightKey
from nightly_assets.warehouse.store import Warehouse
from nightly_assets.warehouse.tables import TestCaseTable, TestTallyTable, node_key
from nightly_assets.warehouse.tallies import SuiteTally

DATABASE = "nightly_wh_bench_history"
PIPELINE, TARGET, SUITES = "bench", "linux-x86_64", 4
FIRST_NIGHT = dt.date(2026, 1, 1)
INDEXES = ("ix_test_cases_key", "ix_test_cases_test", "ix_test_cases_outcome")
COLUMNS = "pipeline, night, target, suite, classname, name, outcome, duration_s, message, attempts, test_key"
BATCH = 10_000  # rows per multi-row INSERT (about 1.3 MB, under max_allowed_packet's 16 MB)


def _tests(cases: int) -> list[tuple[str, str, str, int]]:
    """(suite, classname, name, test_key) of every test."""
    per_suite = cases // SUITES
    tests = []
    for s in range(SUITES):
        for i in range(per_suite):
            classname = f"tests.pkg{i % 40}.test_module_{i % 700}"
            name = f"test_case_{i}[float32-shape{i % 13}]"
            tests.append((f"suite_{s}", classname, name, node_key(f"{classname}::{name}")))
    return tests


def _outcome(n: int, t: int) -> str:
    """Night n, test t: 0.2% broken for good, 1% flaky (fail 1 night in 5), 2% skipped, 0.1% errors
    at random; the rest pass."""
    if t % 500 == 0:
        return "failed"
    if t % 100 == 1 and (n + t) % 5 == 0:
        return "failed"
    if t % 50 == 2:
        return "skipped"
    if (t * 2654435761 + n * 40503) % 1000 == 0:
        return "error"
    return "passed"


def _values(night: int, tests: list[tuple[str, str, str, int]]) -> Iterator[str]:
    """One night's rows as SQL value tuples: every string is ours (ASCII, no quotes), so they are
    written as literals and the server parses multi-row INSERTs without a driver escaping each."""
    day = (FIRST_NIGHT + dt.timedelta(days=night)).isoformat()
    head = f"('{PIPELINE}', '{day}', '{TARGET}', '"
    for t, (suite, classname, name, key) in enumerate(tests):
        outcome = _outcome(night, t)
        message = "NULL" if outcome in ("passed", "skipped") else f"'AssertionError: night {night}'"
        duration = f"{0.01 * (t % 300):.2f}"
        yield f"{head}{suite}', '{classname}', '{name}', '{outcome}', {duration}, {message}, 1, {key})"


def _tallies(url: str, nights: int, cases: int) -> None:
    """The tally rows of every suite and night, unless a kept database has them all already."""
    engine = create_engine(url)
    t = cast(Table, TestTallyTable.__table__)
    with engine.connect() as connection:
        if connection.scalar(select(func.count()).select_from(t)) == nights * SUITES:
            engine.dispose()
            return
    tests = _tests(cases)
    start = time.perf_counter()
    with engine.begin() as connection:
        connection.execute(delete(t))
    for night in range(nights):
        key = NightKey(PIPELINE, FIRST_NIGHT + dt.timedelta(days=night), TARGET)
        by_suite: dict[str, list[dict[str, Any]]] = {}
        for i, (suite, classname, name, test_key) in enumerate(tests):
            row = {"classname": classname, "name": name, "outcome": _outcome(night, i), "test_key": test_key}
            by_suite.setdefault(suite, []).append(row)
        tallies = [SuiteTally(key, suite) for suite in by_suite]
        for tally, rows in zip(tallies, by_suite.values(), strict=True):
            tally.add(rows)
        with engine.begin() as connection:
            connection.execute(insert(t), [tally.row() for tally in tallies])
    print(f"    tallies {time.perf_counter() - start:6.0f} s")
    engine.dispose()


def _build(url: str, nights: int, cases: int) -> None:
    Warehouse(url).dispose()  # the schema as the store makes it
    engine = create_engine(url)
    tests = _tests(cases)
    insert = f"INSERT INTO test_cases ({COLUMNS}) VALUES "  # noqa: S608 - constants
    start = time.perf_counter()
    with engine.begin() as connection:
        connection.execute(text(f"ALTER TABLE test_cases {', '.join(f'DROP INDEX {i}' for i in INDEXES)}"))
    for night in range(nights):
        day = FIRST_NIGHT + dt.timedelta(days=night)
        rows = _values(night, tests)
        with engine.begin() as connection:
            while batch := [row for _, row in zip(range(BATCH), rows, strict=False)]:
                connection.exec_driver_sql(insert + ", ".join(batch))
            suites = [
                {"p": PIPELINE, "n": day, "t": TARGET, "s": f"suite_{s}", "c": cases // SUITES}
                for s in range(SUITES)
            ]
            connection.execute(
                text(
                    "INSERT INTO suites (pipeline, night, target, suite, runner, total, passed, failed,"
                    " error, skipped, collected, duration_s, collect_only)"
                    " VALUES (:p, :n, :t, :s, 'bench', :c, :c, 0, 0, 0, 0, 1.0, 0)"
                ),
                suites,
            )
        if night % 20 == 19 or night == nights - 1:
            elapsed = time.perf_counter() - start
            done = (night + 1) * len(tests)
            print(
                f"    loaded {night + 1:4d} nights, {done:11,} rows, {done / elapsed:8,.0f} rows/s",
                flush=True,
            )
    loaded = time.perf_counter() - start
    start = time.perf_counter()
    with engine.begin() as connection:  # the store's indexes, built once over the loaded rows
        adds = ", ".join(
            f"ADD INDEX {index.name} ({', '.join(c.name for c in index.columns)})"
            for index in cast(Table, TestCaseTable.__table__).indexes
        )
        connection.execute(text(f"ALTER TABLE test_cases {adds}"))
        connection.execute(text("ANALYZE TABLE test_cases"))
    print(f"    load {loaded:6.0f} s, indexes {time.perf_counter() - start:6.0f} s")
    engine.dispose()


def sized_database(database: str, size: str, build: Callable[[str], None]) -> str:
    """The URL of `database` on the MariaDB peer, built by `build(url)` unless a kept run of the
    same `size` left it complete (its schema comment says the size once the build has ended)."""
    from nightly_assets_tests.peers import mysql as peer

    url = f"mysql+pymysql://{peer.USER}@{peer.HOST}:{peer.PORT}/{database}?charset=utf8mb4"
    engine = create_engine(f"mysql+pymysql://{peer.USER}@{peer.HOST}:{peer.PORT}/?charset=utf8mb4")
    with engine.connect() as connection:
        comment = connection.scalar(
            text("SELECT schema_comment FROM information_schema.schemata WHERE schema_name = :d"),
            {"d": database},
        )
    engine.dispose()
    if comment != size:
        peer._admin(f"DROP DATABASE IF EXISTS `{database}`")
        peer._admin(f"CREATE DATABASE `{database}`")
        build(url)
        peer._admin(f"ALTER DATABASE `{database}` COMMENT '{size}'")  # complete: a kept one is reused
    else:
        print("  reusing the history a kept run built")
    return url


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(first run, best of three, result) in seconds."""
    times, result = [], None
    for _ in range(3):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times[0], min(times), result


def main() -> dict[str, float]:
    nights = int(os.environ.get("BENCH_HISTORY_NIGHTS", "180"))
    cases = int(os.environ.get("BENCH_HISTORY_CASES", "120000"))
    keep = os.environ.get("BENCH_HISTORY_KEEP") == "1"
    print(f"warehouse history: {nights} nights x {cases:,} cases in MariaDB, the store's queries")
    from nightly_assets_tests.peers import mysql as peer

    if not peer._answers():
        print("  skipped: no MariaDB answers on 127.0.0.1:3306")
        return {}
    url = sized_database(DATABASE, f"{nights}x{cases}", lambda url: _build(url, nights, cases))
    Warehouse(url).dispose()  # a kept database built by an older version gets the newer tables
    _tallies(url, nights, cases)
    try:
        return _queries(url, nights, cases)
    finally:
        if not keep:
            peer._admin(f"DROP DATABASE IF EXISTS `{DATABASE}`")


def _queries(url: str, nights: int, cases: int) -> dict[str, float]:
    store = Warehouse(url)
    engine = create_engine(url)
    tonight = NightKey(PIPELINE, FIRST_NIGHT + dt.timedelta(days=nights - 1), TARGET)
    suite, classname, name, key = _tests(cases)[101]  # a flaky test
    test_id = f"{classname}::{name}"
    ignore = ", ".join(INDEXES)
    full_scan = text(
        f"SELECT COUNT(*) FROM test_cases IGNORE INDEX ({ignore})"  # noqa: S608 - constants
        " WHERE pipeline = :p AND suite = :s AND test_key = :k"
    )

    def scan() -> int:
        with engine.connect() as connection:
            return int(connection.scalar(full_scan, {"p": PIPELINE, "s": suite, "k": key}) or 0)

    start = time.perf_counter()
    count = scan()  # once: at full size it takes a while
    base_best = time.perf_counter() - start
    print(f"  baseline: one full scan of {nights * cases:,} rows (COUNT(*) of one test): {base_best:7.2f} s")
    questions: list[tuple[str, Callable[[], Any]]] = [
        ("test_history (30 nights)", lambda: store.test_history(PIPELINE, suite, test_id, limit=30)),
        ("newly_failing (tonight)", lambda: store.newly_failing(tonight)),
        ("pass_rates (7 nights)", lambda: store.pass_rates(PIPELINE, TARGET, 7)),
        ("pass_rates (30 nights)", lambda: store.pass_rates(PIPELINE, TARGET, 30)),
        ("pass_rates (7 nights, all)", lambda: store.pass_rates(PIPELINE, TARGET, 7, below=None)),
        ("pass_rates (30 nights, all)", lambda: store.pass_rates(PIPELINE, TARGET, 30, below=None)),
    ]
    ratios: dict[str, float] = {}
    print(f"  {'query':<28} {'first':>8} {'best':>8}  rows   best/baseline")
    for label, fn in questions:
        first, best, result = _timed(fn)
        print(f"  {label:<28} {first:7.3f}s {best:7.3f}s  {len(result):6d}  {best / base_best:8.4f}")
        ratios[f"warehouse_history {label} / full scan"] = best / base_best
    assert count == nights, (count, nights)  # the baseline did count the test's rows
    store.dispose()
    engine.dispose()
    return ratios


if __name__ == "__main__":
    main()
