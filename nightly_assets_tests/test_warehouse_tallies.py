"""Every test's pass rates from the tally rows (tallies.py) are the ones the case rows give, and
the tally rows go with the case rows they sum up (a suite replaced, a night's new run)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import delete

from nightly_assets.results import NightKey, Outcome, TestCase, TestReport
from nightly_assets.warehouse import Warehouse
from nightly_assets.warehouse.tables import TestTallyTable

KEY = NightKey("tpu-nightly", dt.date(2024, 5, 1), "linux-x86_64")


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Warehouse]:
    url = (
        f"sqlite:///{tmp_path}/warehouse.sqlite"
        if request.param == "sqlite"
        else request.getfixturevalue("mysql_url")
    )
    warehouse = Warehouse(url)
    yield warehouse
    warehouse.dispose()


def _record(store: Warehouse, day: int, suite: str, outcomes: dict[str, str]) -> None:
    cases = []
    for node, outcome in outcomes.items():
        classname, _, name = node.rpartition("::")
        cases.append(TestCase(classname, name, cast(Outcome, outcome), 0.1, None))
    store.record_test_report(
        NightKey(KEY.pipeline, dt.date(2024, 5, day), KEY.target), TestReport(suite, tuple(cases))
    )


def _rates(store: Warehouse, nights: int) -> list[tuple[str, str, int, int]]:
    return [
        (r.suite, r.test_id, r.passed, r.runs)
        for r in store.pass_rates(KEY.pipeline, KEY.target, nights, below=None)
    ]


def _forget_tallies(store: Warehouse, day: int | None = None) -> None:
    """What a warehouse written before the tally rows holds (all nights, or `day` alone)."""
    t = TestTallyTable
    where = [] if day is None else [t.night == dt.date(2024, 5, day)]
    with store._sessions.begin() as session:
        session.execute(delete(t).where(*where))


def test_every_tests_rates_from_tallies_are_the_case_rows_rates(store: Warehouse) -> None:
    for day in range(1, 6):
        _record(
            store,
            day,
            "unit",
            {
                "t.a::always": "passed",
                "t.a::flaky": "failed" if day % 2 else "passed",
                "broken": "error",
                "t.a::skipped": "skipped",
                "t.a::sometimes_skipped": "skipped" if day == 4 else "passed",
                "t.a::collected": "collected",
                **({"t.a::gone": "failed"} if day < 3 else {}),
            },
        )
        # The same node id in another suite: another test.
        _record(store, day, "other", {"t.a::always": "failed" if day == 5 else "passed"})
    # The newest night's unit suite recorded again: its earlier rows and tally are replaced.
    _record(store, 5, "unit", {"t.a::always": "failed", "t.a::flaky": "passed", "t.a::new": "passed"})

    expected = [
        ("unit", "broken", 0, 3),
        ("unit", "t.a::gone", 0, 1),
        ("other", "t.a::always", 3, 4),
        ("unit", "t.a::always", 3, 4),
        ("unit", "t.a::flaky", 3, 4),
        ("unit", "t.a::new", 1, 1),
        ("unit", "t.a::sometimes_skipped", 2, 2),
    ]
    assert _rates(store, 4) == expected
    _forget_tallies(store, 3)  # one night without them: the case rows are counted instead
    assert _rates(store, 4) == expected
    _forget_tallies(store)
    assert _rates(store, 4) == expected


def test_a_new_run_of_the_night_replaces_its_tallies_with_its_own_report(store: Warehouse) -> None:
    for day in (1, 2):
        _record(store, day, "unit", {"t.a::flaky": "failed" if day == 2 else "passed"})
    assert _rates(store, 2) == [("unit", "t.a::flaky", 1, 2)]
    _record(store, 2, "unit", {"t.a::flaky": "passed"})  # the re-run of night 2 passes
    assert _rates(store, 2) == [("unit", "t.a::flaky", 2, 2)]
    assert store.row_counts(NightKey(KEY.pipeline, dt.date(2024, 5, 2), KEY.target))["test_tallies"] == 1


def test_a_test_twice_in_a_report_counts_twice_as_in_the_case_rows(store: Warehouse) -> None:
    for day in (1, 2, 3):
        cases = (
            TestCase("t.a", "twice", "passed"),
            TestCase("t.a", "twice", "failed" if day == 3 else "passed"),
        )
        store.record_test_report(
            NightKey(KEY.pipeline, dt.date(2024, 5, day), KEY.target), TestReport("unit", cases)
        )
    assert _rates(store, 3) == [("unit", "t.a::twice", 5, 6)]
    _forget_tallies(store)
    assert _rates(store, 3) == [("unit", "t.a::twice", 5, 6)]
