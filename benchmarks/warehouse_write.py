"""Warehouse write path: a night of 4 suites x 30,000 test cases through `Warehouse.record_test_report`
against a raw SQLAlchemy Core executemany of the same rows into the same table, side by side in
one run, on SQLite (a temporary file) and on MariaDB (database `nightly_wh_bench`, dropped after;
skipped when no server answers on 127.0.0.1:3306). Prints each side's rows per second, the ratio
(store / raw, the issue asks >= 0.7) and the process' peak RSS. Sizes: BENCH_WAREHOUSE_SUITES,
BENCH_WAREHOUSE_CASES (per suite)."""

from __future__ import annotations

import datetime as dt
import os
import resource
import tempfile
import time
from typing import cast

from sqlalchemy import Table, create_engine, insert

from nightly_assets.results import NightKey, Outcome, TestCase, TestReport
from nightly_assets.warehouse.store import Warehouse
from nightly_assets.warehouse.tables import TestCaseTable
from nightly_assets.warehouse.writes import case_rows

DATABASE = "nightly_wh_bench"
ROUNDS = 2  # each side twice, alternating; the faster of each side's rounds counts
store_rss: dict[str, float] = {}  # peak RSS (MB) after the store's first write, per backend


def night_reports(suites: int, cases: int) -> list[TestReport]:
    """What a real night looks like: mostly passes (no message), failures with a message,
    skips with a reason, long parametrized names."""
    reports = []
    for s in range(suites):
        rows = []
        for i in range(cases):
            roll = (i * 7919 + s * 104729) % 100
            outcome: Outcome = (
                "failed" if roll == 0 else "error" if roll == 1 else "skipped" if roll < 5 else "passed"
            )
            message = None if outcome == "passed" else f"{outcome}: AssertionError: expected {i} got {i + 1}"
            rows.append(
                TestCase(
                    f"tests.pkg{i % 40}.test_module_{i % 700}",
                    f"test_case_{i}[float32-shape{i % 13}-device{i % 8}]",
                    outcome,
                    0.001 * (i % 500),
                    message,
                    1 + (i % 97 == 0),
                )
            )
        reports.append(TestReport(f"suite_{s}", tuple(rows), runner="bench"))
    return reports


def _compare(label: str, url: str, reports: list[TestReport]) -> float:
    store = Warehouse(url)  # creates the schema, indexes included: both sides write the same table
    engine = create_engine(url)
    table = cast(Table, TestCaseTable.__table__)
    rows = sum(len(r.cases) for r in reports)
    day = iter(range(1, 100))

    def through_store() -> None:
        key = NightKey("bench", dt.date(2026, 1, next(day)), "cpu")
        for report in reports:
            store.record_test_report(key, report)

    def raw_core() -> None:
        key = NightKey("bench", dt.date(2026, 1, next(day)), "cpu")
        prepared = [list(case_rows(key, r.suite, r.cases)) for r in reports]  # built before the clock starts
        start = time.perf_counter()
        for batch in prepared:
            with engine.begin() as connection:
                connection.execute(insert(table), batch)
        timings["raw"].append(time.perf_counter() - start)

    def timed_store() -> None:
        start = time.perf_counter()
        through_store()
        timings["store"].append(time.perf_counter() - start)

    timings: dict[str, list[float]] = {"store": [], "raw": []}
    # Alternating; the store first, before the raw side's prepared rows exist: its own peak RSS.
    timed_store()
    store_rss[label] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for side in [raw_core, timed_store, raw_core][: 2 * ROUNDS - 1]:
        side()
    store.dispose()
    engine.dispose()
    best = {side: min(times) for side, times in timings.items()}
    ratio = best["raw"] / best["store"]  # store rate / raw rate
    print(
        f"  {label:<8} store {rows / best['store']:9,.0f} rows/s ({best['store']:6.2f} s)   "
        f"raw Core {rows / best['raw']:9,.0f} rows/s ({best['raw']:6.2f} s)   store/raw {ratio:4.2f}x"
    )
    return ratio


def _mariadb_url() -> str | None:
    from nightly_assets_tests.peers import mysql as peer

    if not peer._answers():
        return None
    peer._admin(f"DROP DATABASE IF EXISTS `{DATABASE}`")
    peer._admin(f"CREATE DATABASE `{DATABASE}`")
    return f"mysql+pymysql://{peer.USER}@{peer.HOST}:{peer.PORT}/{DATABASE}?charset=utf8mb4"


def _drop_mariadb() -> None:
    from nightly_assets_tests.peers import mysql as peer

    peer._admin(f"DROP DATABASE IF EXISTS `{DATABASE}`")


def main() -> dict[str, float]:
    suites = int(os.environ.get("BENCH_WAREHOUSE_SUITES", "4"))
    cases = int(os.environ.get("BENCH_WAREHOUSE_CASES", "30000"))
    print(f"warehouse write: a night of {suites} suites x {cases:,} cases, the store vs raw Core executemany")
    reports = night_reports(suites, cases)
    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ratios["warehouse_write store/raw (sqlite)"] = _compare(
            "sqlite", f"sqlite:///{tmp}/bench.sqlite", reports
        )
    url = _mariadb_url()
    if url is None:
        print("  mariadb  skipped: no server answers on 127.0.0.1:3306")
    else:
        try:
            ratios["warehouse_write store/raw (mariadb)"] = _compare("mariadb", url, reports)
        finally:
            _drop_mariadb()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    through = ", ".join(f"{label} {mb:.0f} MB" for label, mb in store_rss.items())
    print(f"  peak RSS: {through} after the store's first write; {peak_mb:.0f} MB in all (asked: < 300 MB)")
    ratios["warehouse_write peak RSS (MB)"] = peak_mb
    return ratios


if __name__ == "__main__":
    main()
