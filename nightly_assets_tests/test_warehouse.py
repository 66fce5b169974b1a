"""The results warehouse against a real SQLite file and a real MariaDB (tests marked ``mysql``)."""

from __future__ import annotations

import datetime as dt
import multiprocessing
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import dagster as dg
import pytest
from sqlalchemy import text

from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.results import (
    OUTCOMES,
    BenchmarkResult,
    CheckOutcome,
    NightKey,
    Outcome,
    TestCase,
    TestReport,
)
from nightly_assets.warehouse import (
    MachineCost,
    Warehouse,
    WarehouseError,
    WarehouseResource,
    default_warehouse_url,
)
from nightly_assets.warehouse.rows import BenchmarkNight, Regression
from nightly_assets.warehouse.tables import Base, node_key
from nightly_assets_tests.device_configs import H100, H100_DRIVER_UPGRADE, H200

NIGHT = dt.date(2024, 5, 10)
KEY = NightKey("tpu-nightly", NIGHT, "linux-x86_64")
OTHER_TARGET = NightKey("tpu-nightly", NIGHT, "linux-aarch64")


def _report(suite: str = "unit", *, fail: bool = False, collect_only: bool = False) -> TestReport:
    cases = (
        TestCase("tests.test_a", "test_one", "passed", 0.5),
        TestCase("tests.test_a", "test_two", "failed" if fail else "passed", 1.25, "boom"),
        TestCase("tests.test_b", "test_three", "skipped"),
    )
    return TestReport(suite, cases, runner="ci-1", duration_s=2.0, collect_only=collect_only)


def _at(key: NightKey, night: dt.date) -> NightKey:
    return NightKey(key.pipeline, night, key.target)


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def warehouse_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/warehouse.sqlite"
    url: str = request.getfixturevalue("mysql_url")
    return url


@pytest.fixture
def warehouse(warehouse_url: str) -> Iterator[Warehouse]:
    store = Warehouse(warehouse_url)
    yield store
    store.dispose()


def test_report_recorded_twice_replaces_rows(warehouse: Warehouse) -> None:
    warehouse.record_test_report(KEY, _report())
    warehouse.record_test_report(OTHER_TARGET, _report())
    first = warehouse.row_counts(KEY)
    warehouse.record_test_report(KEY, _report())
    assert first == {
        "nights": 0,
        "stages": 0,
        "stage_runs": 0,
        "suites": 1,
        "test_cases": 3,
        "test_tallies": 1,
        "test_evidence": 0,
        "test_verdicts": 0,
        "benchmarks": 0,
        "regressions": 0,
        "culprits": 0,
        "costs": 0,
        "checks": 0,
        "alerts": 0,
        "leases": 0,
        "device_facts": 0,
    }
    assert warehouse.row_counts(KEY) == first

    warehouse.record_test_report(KEY, _report(fail=True))
    # the same rows, and the re-run's disagreement kept as flaky evidence (test_two passed before)
    assert warehouse.row_counts(KEY) == {**first, "test_evidence": 1}
    assert warehouse.suite_counts(KEY)["unit"] == {
        "total": 3,
        "passed": 1,
        "failed": 1,
        "error": 0,
        "skipped": 1,
        "collected": 0,
    }
    assert warehouse.failed_cases(KEY, "unit") == [
        TestCase("tests.test_a", "test_two", "failed", 1.25, "boom")
    ]
    assert warehouse.failed_cases(OTHER_TARGET, "unit") == []  # other keys untouched
    assert warehouse.row_counts(OTHER_TARGET)["test_cases"] == 3


def test_failed_write_keeps_previous_rows(warehouse: Warehouse) -> None:
    warehouse.record_test_report(KEY, _report(fail=True))
    broken = TestReport("unit", (TestCase("c", None, "passed"),))  # type: ignore[arg-type]
    with pytest.raises(WarehouseError):
        warehouse.record_test_report(KEY, broken)
    assert warehouse.row_counts(KEY)["test_cases"] == 3
    assert warehouse.suite_counts(KEY)["unit"]["failed"] == 1


def test_stages_replaced_per_stage(warehouse: Warehouse) -> None:
    warehouse.record_stage(KEY, "build", status="running", runner="r1", duration_s=0, run_id="a")
    warehouse.record_stage(KEY, "test", status="skipped", runner="r1", duration_s=0, run_id="a")
    warehouse.record_stage(
        KEY, "build", status="success", runner="r2", duration_s=12.5, run_id="b", artefact="gs://x"
    )
    stages = {s.stage: s for s in warehouse.stages(KEY)}
    assert warehouse.row_counts(KEY)["stages"] == 2
    assert (stages["build"].status, stages["build"].runner) == ("success", "r2")
    assert (stages["build"].duration_s, stages["build"].artefact) == (12.5, "gs://x")
    assert stages["test"].detail is None


def test_benchmarks_replaced_not_duplicated(warehouse: Warehouse) -> None:
    warehouse.record_benchmarks(KEY, [BenchmarkResult("a", 1.0), BenchmarkResult("b", 2.0)])
    warehouse.record_benchmarks(KEY, [BenchmarkResult("a", 3.0, unit="ms")])
    assert warehouse.row_counts(KEY)["benchmarks"] == 1
    later = dt.date(2024, 5, 11)
    assert warehouse.benchmark_series(KEY.pipeline, KEY.target, "a", before=later, limit=5) == [
        (NIGHT, 3.0, {})
    ]
    assert warehouse.benchmark_series(KEY.pipeline, KEY.target, "b", before=later, limit=5) == []


def test_a_stage_cost_is_replaced_per_stage_and_keeps_its_precision(warehouse: Warehouse) -> None:
    node = "projects/p/locations/us-central1-b/nodes/nightly-1"
    first = MachineCost("tests_tpu", node, "v6e-1", 301.25, 0.64, 0.05355555555555556, "preempted")
    warehouse.record_cost(KEY, first)
    again = MachineCost("tests_tpu", node, "v6e-1", 312.5, 0.64, 0.05555555555555555, "completed")
    warehouse.record_cost(KEY, again)
    warehouse.record_cost(KEY, MachineCost("tests_tpu_pr", node, "v6e-1", 10.0, 0.64, 0.0018, "timeout"))
    assert warehouse.row_counts(KEY)["costs"] == 2
    assert warehouse.row_counts(OTHER_TARGET)["costs"] == 0
    assert warehouse.costs(KEY)[0] == again  # a DOUBLE column, not MySQL's single-precision FLOAT


def test_previous_suite_total_skips_collect_only(warehouse: Warehouse) -> None:
    warehouse.record_test_report(_at(KEY, dt.date(2024, 5, 7)), _report())
    warehouse.record_test_report(_at(KEY, dt.date(2024, 5, 8)), _report(suite="other"))
    small = TestReport("unit", _report().cases[:2])
    warehouse.record_test_report(_at(KEY, dt.date(2024, 5, 8)), small)
    warehouse.record_test_report(_at(KEY, dt.date(2024, 5, 9)), _report(collect_only=True))
    warehouse.record_test_report(KEY, _report())
    warehouse.record_test_report(_at(KEY, dt.date(2024, 5, 11)), _report())
    warehouse.record_test_report(_at(OTHER_TARGET, dt.date(2024, 5, 9)), _report())

    assert warehouse.previous_suite_total(KEY, "unit") == (dt.date(2024, 5, 8), 2)
    assert warehouse.previous_suite_total(_at(KEY, dt.date(2024, 5, 7)), "unit") is None
    assert warehouse.previous_suite_total(KEY, "missing") is None


def test_benchmark_series_oldest_first_with_each_nights_pins_before_is_exclusive(
    warehouse: Warehouse,
) -> None:
    for day in range(1, 8):
        key = _at(KEY, dt.date(2024, 5, day))
        warehouse.record_benchmarks(key, [BenchmarkResult("step", float(day))])
        if day != 3:  # a night the sources stage never recorded: no pins
            warehouse.record_night(key, run_id="r", status="success", pins={"app": f"a{day}", "lib": "l0"})
    warehouse.record_benchmarks(_at(OTHER_TARGET, dt.date(2024, 5, 4)), [BenchmarkResult("step", 99)])

    series = warehouse.benchmark_series(KEY.pipeline, KEY.target, "step", before=dt.date(2024, 5, 5), limit=3)
    assert series == [
        (dt.date(2024, 5, 2), 2.0, {"app": "a2", "lib": "l0"}),
        (dt.date(2024, 5, 3), 3.0, {}),
        (dt.date(2024, 5, 4), 4.0, {"app": "a4", "lib": "l0"}),
    ]
    assert (
        warehouse.benchmark_series(KEY.pipeline, KEY.target, "step", before=dt.date(2024, 5, 1), limit=3)
        == []
    )


def test_device_facts_are_replaced_per_stage_and_read_back_as_recorded(warehouse: Warehouse) -> None:
    mig = DeviceFacts(
        vendor="nvidia",
        model="NVIDIA H200 MIG 1g.18gb",
        count=2,
        memory_mib=16384,
        driver="580.159.03",
        runtime="CUDA 13.0",
        devices=["MIG-0c1d", "MIG-7e2a"],
        mig=True,
        frameworks={"torch": "2.11.0+cu130", "jax": "0.8.1"},
    )
    warehouse.record_device_facts(KEY, "benchmarks", "gpu-node-1", H100)
    warehouse.record_device_facts(KEY, "tests_gpu", "gpu-node-2", H100)
    warehouse.record_device_facts(KEY, "benchmarks", "gpu-node-3", H200)  # a re-run on another card
    warehouse.record_device_facts(OTHER_TARGET, "tests_gpu", "gpu-node-4", mig)
    warehouse.record_device_facts(OTHER_TARGET, "lint", "cpu-1", DeviceFacts(frameworks={"ruff": "0.9"}))

    assert warehouse.device_facts(KEY) == {"benchmarks": H200, "tests_gpu": H100}
    assert warehouse.row_counts(KEY)["device_facts"] == 2
    assert warehouse.device_facts(OTHER_TARGET)["tests_gpu"] == mig  # the MIG flag and ids round-trip
    assert warehouse.device_facts(_at(KEY, NIGHT - dt.timedelta(days=1))) == {}
    assert warehouse.device_configuration(H200.key()) == H200
    assert warehouse.device_configuration(mig.key()) == mig
    assert warehouse.device_configuration(H100_DRIVER_UPGRADE.key()) is None
    # Plain columns: SQL can ask which nights ran on which GPU and driver.
    with warehouse._engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT stage, runner, vendor, model, count, memory_mib, driver, runtime, config_key "
                "FROM device_facts WHERE target = :target ORDER BY stage"
            ),
            {"target": KEY.target},
        ).all()
    assert [tuple(r) for r in rows] == [
        (
            "benchmarks",
            "gpu-node-3",
            "nvidia",
            "NVIDIA H200",
            1,
            143771,
            "580.159.03",
            "CUDA 13.0",
            H200.key(),
        ),
        (
            "tests_gpu",
            "gpu-node-2",
            "nvidia",
            "NVIDIA H100 80GB HBM3",
            1,
            81559,
            "580.159.04",
            "CUDA 13.0",
            H100.key(),
        ),
    ]


def test_benchmarks_keep_the_configuration_they_ran_on(warehouse: Warehouse) -> None:
    configs = {1: None, 2: None, 3: H100, 4: H200, 5: H100, 6: H100_DRIVER_UPGRADE, 7: H100}
    for day, devices in configs.items():
        key = _at(KEY, dt.date(2024, 5, day))
        warehouse.record_night(key, run_id="r", status="success", pins={"app": f"a{day}"})
        warehouse.record_benchmarks(key, [BenchmarkResult("step", float(day))], devices=devices)
    warehouse.record_benchmarks(KEY, [BenchmarkResult("step", 10.0)], devices=H200)
    warehouse.record_benchmarks(KEY, [BenchmarkResult("step", 10.0)])  # a re-run without devices
    before = dt.date(2024, 5, 8)

    nights = warehouse.benchmark_nights(KEY.pipeline, KEY.target, "step", before=before, limit=3)
    assert nights == [
        BenchmarkNight(dt.date(2024, 5, 5), 5.0, {"app": "a5"}, H100.key()),
        BenchmarkNight(dt.date(2024, 5, 6), 6.0, {"app": "a6"}, H100_DRIVER_UPGRADE.key()),
        BenchmarkNight(dt.date(2024, 5, 7), 7.0, {"app": "a7"}, H100.key()),
    ]
    # One configuration's nights, however many nights of others came between (the limit is its own).
    h100 = warehouse.benchmark_series(
        KEY.pipeline, KEY.target, "step", before=before, limit=3, config_key=H100.key()
    )
    assert [(n.day, v) for n, v, _ in h100] == [(3, 3.0), (5, 5.0), (7, 7.0)]
    unrecorded = warehouse.benchmark_series(
        KEY.pipeline, KEY.target, "step", before=dt.date(2024, 5, 11), limit=5, config_key=""
    )
    assert [(n.day, v) for n, v, _ in unrecorded] == [(1, 1.0), (2, 2.0), (10, 10.0)]
    assert warehouse.benchmark_series(
        KEY.pipeline, KEY.target, "step", before=before, limit=5, config_key=H200.key()
    ) == [(dt.date(2024, 5, 4), 4.0, {"app": "a4"})]


def test_regressions_of_a_night_are_replaced_and_read_back_newest_first(warehouse: Warehouse) -> None:
    found = Regression(
        pipeline=KEY.pipeline,
        night=NIGHT,
        target=KEY.target,
        name="matmul",
        first_bad=NIGHT - dt.timedelta(days=1),
        last_good=NIGHT - dt.timedelta(days=2),
        before=1.0,
        after=1.25,
        unit="s",
        worse=True,
        commits={
            "app": {
                "good": "a" * 40,
                "bad": "b" * 40,
                "commits": [{"sha": "b" * 40, "author": "Ann", "subject": "x"}],
            }
        },
    )
    later = replace(found, night=NIGHT + dt.timedelta(days=9), name="sum", worse=False)
    warehouse.record_regressions(KEY, [found])
    warehouse.record_regressions(KEY, [found])  # a re-run of the night
    warehouse.record_regressions(_at(KEY, later.night), [later])
    assert warehouse.regressions(KEY.pipeline) == [later, found]
    assert warehouse.regressions(KEY.pipeline, target="other") == []
    warehouse.record_regressions(KEY, [])
    assert warehouse.regressions(KEY.pipeline) == [later]


def test_large_report_round_trips(warehouse: Warehouse) -> None:
    cases = tuple(
        TestCase(f"tests.pkg{i % 50}.test_mod", f"test_{i}[" + "p" * 200 + "]", OUTCOMES[i % 5], 0.01)
        for i in range(20_000)
    )
    warehouse.record_test_report(KEY, TestReport("big", cases))
    assert warehouse.row_counts(KEY)["test_cases"] == 20_000
    expected: dict[str, int] = {"total": 20_000, **dict.fromkeys(OUTCOMES, 4_000)}
    assert warehouse.suite_counts(KEY)["big"] == expected
    failed = warehouse.failed_cases(KEY, "big")
    assert len(failed) == 8_000
    assert failed[:2] == [cases[1], cases[2]]


def test_long_unicode_message_round_trips(warehouse: Warehouse) -> None:
    message = ("断言失败 ✗ ÄÖÜ 🐍 " * 500)[:5_000]
    case = TestCase("tests.тест", "test_ünïcode[🐍]", "failed", 0.1, message, attempts=3)
    warehouse.record_test_report(KEY, TestReport("unit", (case,)))
    assert warehouse.failed_cases(KEY, "unit") == [case]


def test_nights_returns_pins_as_dict(warehouse: Warehouse) -> None:
    pins = {"jax": "a" * 40, "xla": "b" * 40}
    warehouse.record_night(KEY, run_id="run-1", status="running", pins={})
    warehouse.record_night(KEY, run_id="run-2", status="success", pins=pins)
    warehouse.record_night(NightKey("other", NIGHT, "t"), run_id="run-3", status="failure", pins={})

    (row,) = warehouse.nights("tpu-nightly")
    assert (row.night, row.target, row.run_id, row.status) == (NIGHT, KEY.target, "run-2", "success")
    assert row.pins == pins
    assert [n.pipeline for n in warehouse.nights()] == ["other", "tpu-nightly"]


def test_unreachable_mysql_hides_password() -> None:
    with pytest.raises(WarehouseError) as info:
        Warehouse("mysql+pymysql://root:s3cret@127.0.0.1:1/x", retry_s=1)
    assert "127.0.0.1:1" in str(info.value)
    assert "s3cret" not in str(info.value)
    assert "s3cret" not in repr(info.value)


def test_resource_caches_one_store(warehouse_url: str) -> None:
    resource = WarehouseResource(url=warehouse_url)
    store = resource.store()
    assert resource.store() is store
    store.record_night(KEY, run_id="r", status="success", pins={"jax": "abc"})

    @dg.asset
    def probe(warehouse: WarehouseResource) -> None:
        assert warehouse.store() is warehouse.store()
        assert [n.pins for n in warehouse.store().nights()] == [{"jax": "abc"}]

    assert dg.materialize([probe], resources={"warehouse": resource}).success
    store.dispose()


def test_default_warehouse_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NIGHTLY_WAREHOUSE_URL", raising=False)
    assert default_warehouse_url(tmp_path) == f"sqlite:///{tmp_path}/warehouse.sqlite"
    monkeypatch.setenv("NIGHTLY_WAREHOUSE_URL", "mysql+pymysql://u@h/db")
    assert default_warehouse_url(tmp_path) == "mysql+pymysql://u@h/db"
    assert "s3cret" not in repr(WarehouseResource(url="mysql+pymysql://u:s3cret@h/db"))


def test_night_returns_the_one_key_or_none(warehouse_url):
    store = Warehouse(warehouse_url)
    key = NightKey("demo", NIGHT, "cpu")
    assert store.night(key) is None
    store.record_night(key, run_id="r1", status="running", pins={"repo": "abc"})
    store.record_night(NightKey("demo", NIGHT, "gpu"), run_id="r2", status="success", pins={})
    night = store.night(key)
    assert night is not None and (night.run_id, night.status, night.pins) == (
        "r1",
        "running",
        {"repo": "abc"},
    )


# -- the query API: one test's history, newly failing tests, pass rates ------------------------


def _recorder(store: Warehouse) -> Callable[..., NightKey]:
    def record(key: NightKey, day: int, outcomes: dict[str, str], *, suite: str = "unit") -> NightKey:
        """Record `suite` on 2024-05-`day`, one case per node id ('cls::name' or 'name')."""
        at = _at(key, dt.date(2024, 5, day))
        cases = []
        for node, outcome in outcomes.items():
            classname, _, name = node.rpartition("::")
            cases.append(TestCase(classname, name, cast(Outcome, outcome), 0.5, f"{node} {outcome}"))
        store.record_test_report(at, TestReport(suite, tuple(cases)))
        return at

    return record


@pytest.fixture
def nights(warehouse: Warehouse) -> Warehouse:
    return warehouse


def test_test_history_is_one_test_newest_first_across_targets(nights: Warehouse) -> None:
    _night = _recorder(nights)
    for day in range(1, 6):
        _night(KEY, day, {"t.a::one": "passed" if day % 2 else "failed", "t.a::two": "passed"})
    _night(OTHER_TARGET, 3, {"t.a::one": "error"})
    _night(KEY, 4, {"t.a::one": "skipped"}, suite="other")  # another suite: another test
    _night(NightKey("other-pipeline", NIGHT, KEY.target), 4, {"t.a::one": "failed"})

    history = nights.test_history(KEY.pipeline, "unit", "t.a::one", limit=4)
    assert [(r.night.day, r.target, r.case.outcome) for r in history] == [
        (5, KEY.target, "passed"),
        (4, KEY.target, "failed"),
        (3, OTHER_TARGET.target, "error"),
        (3, KEY.target, "passed"),
    ]
    assert history[1].case == TestCase("t.a", "one", "failed", 0.5, "t.a::one failed")
    assert history[0].test_id == "t.a::one" and history[0].suite == "unit"
    assert nights.test_history(KEY.pipeline, "unit", "t.a::missing") == []
    assert len(nights.test_history(KEY.pipeline, "unit", "t.a::two")) == 5


def test_newly_failing_failed_tonight_and_passed_the_previous_night(nights: Warehouse) -> None:
    _night = _recorder(nights)
    _night(KEY, 1, {"a": "passed", "b": "passed", "c": "passed"})
    _night(KEY, 2, {"a": "passed", "b": "failed", "c": "passed", "d": "passed", "e": "skipped"})
    _night(OTHER_TARGET, 3, {"a": "passed"})  # another target's nights do not count
    tonight = _night(
        KEY, 4, {"a": "failed", "b": "failed", "c": "passed", "d": "error", "e": "failed", "new": "failed"}
    )
    _night(KEY, 4, {"a": "failed"}, suite="other")  # no previous night of the key: not new there

    newly = nights.newly_failing(tonight)
    assert [(r.suite, r.test_id, r.case.outcome) for r in newly] == [
        ("unit", "a", "failed"),
        ("unit", "d", "error"),
    ]
    assert newly[0].night == tonight.night and newly[0].target == KEY.target
    assert newly[0].case.message == "a failed"
    assert nights.newly_failing(_at(KEY, dt.date(2024, 5, 1))) == []  # no earlier night


def test_pass_rates_per_test_over_the_last_nights(nights: Warehouse) -> None:
    _night = _recorder(nights)
    for day in range(1, 6):
        outcomes = {
            "always": "passed",
            "flaky": "failed" if day in (2, 5) else "passed",
            "broken": "error",
            "skipped": "skipped",
            "old": "failed" if day == 1 else "passed",
            **({"gone": "failed" if day == 3 else "passed"} if day < 5 else {}),  # not run on the newest
        }
        _night(KEY, day, outcomes)
    _night(OTHER_TARGET, 5, {"always": "failed"})

    rates = nights.pass_rates(KEY.pipeline, KEY.target, nights=4)  # nights 2..5
    assert [(r.suite, r.test_id, r.passed, r.runs) for r in rates] == [
        ("unit", "broken", 0, 4),
        ("unit", "flaky", 2, 4),
        ("unit", "gone", 2, 3),
    ]
    assert rates[1].rate == 0.5
    everything = nights.pass_rates(KEY.pipeline, KEY.target, nights=4, below=None)
    assert {r.test_id: r.rate for r in everything} == {
        "broken": 0.0,
        "flaky": 0.5,
        "gone": 2 / 3,
        "always": 1.0,
        "old": 1.0,
    }
    until = nights.pass_rates(KEY.pipeline, KEY.target, nights=2, until=dt.date(2024, 5, 2))
    assert {r.test_id: (r.passed, r.runs) for r in until} == {
        "broken": (0, 2),
        "flaky": (1, 2),
        "old": (1, 2),
    }  # "gone" passed both nights
    assert [r.test_id for r in nights.pass_rates(KEY.pipeline, KEY.target, nights=5, below=0.5)] == ["broken"]
    assert nights.pass_rates("missing", KEY.target, nights=3) == []


def test_night_overviews_are_five_queries_however_many_nights(warehouse: Warehouse) -> None:
    from sqlalchemy import event

    for day in range(1, 11):
        key = _at(KEY, dt.date(2024, 5, day))
        warehouse.record_night(key, run_id=f"r{day}", status="success", pins={"jax": str(day)})
        warehouse.record_stage(key, "build", status="success", runner="r", duration_s=1, run_id="r")
        warehouse.record_test_report(key, _report(fail=day == 10))
        warehouse.record_device_facts(key, "build", "r", H200 if day == 10 else H100)
    warehouse.record_night(OTHER_TARGET, run_id="o", status="running", pins={})
    statements: list[str] = []
    engine = warehouse._engine
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    overviews = warehouse.night_overviews([KEY.pipeline, "nothing-yet"])
    assert len(statements) == 5
    assert [(o.night.night.day, o.night.target) for o in overviews][:3] == [
        (10, OTHER_TARGET.target),
        (10, KEY.target),
        (9, KEY.target),
    ]
    newest = overviews[1]
    assert newest.stages == {"build": "success"} and newest.night.pins == {"jax": "10"}
    assert newest.suites == {"unit": warehouse.suite_counts(_at(KEY, dt.date(2024, 5, 10)))["unit"]}
    assert newest.suites["unit"]["failed"] == 1 and overviews[0].suites == {}
    assert newest.devices == {"build": H200} and overviews[2].devices == {"build": H100}
    assert overviews[0].devices == {}


def test_an_existing_warehouse_gets_the_test_key_and_its_indexes(warehouse_url: str) -> None:
    """A warehouse made before the test identity indexes: the store adds the column, fills it in
    for the rows already there (as node_key() computes it, unicode included) and creates the
    indexes; a second start changes nothing."""
    from sqlalchemy import create_engine, inspect

    engine = create_engine(warehouse_url)
    store = Warehouse(warehouse_url)
    cases = (TestCase("tests.тест", "test_ü[🐍]", "failed", 0.1, "x"), TestCase("", "bare", "passed"))
    store.record_test_report(
        _at(KEY, dt.date(2024, 5, 9)), TestReport("unit", (TestCase("tests.тест", "test_ü[🐍]", "passed"),))
    )
    store.record_test_report(KEY, TestReport("unit", cases))
    store.dispose()
    with engine.begin() as connection:  # back to the old schema
        for name in ("ix_test_cases_test", "ix_test_cases_outcome"):
            on = "" if engine.dialect.name == "sqlite" else " ON test_cases"
            connection.execute(text(f"DROP INDEX {name}{on}"))
        connection.execute(text("ALTER TABLE test_cases DROP COLUMN test_key"))

    for _ in range(2):
        store = Warehouse(warehouse_url)
        with engine.connect() as connection:
            indexes = {i["name"] for i in inspect(connection).get_indexes("test_cases")}
            keys: dict[str, str] = dict(
                connection.execute(text("SELECT name, test_key FROM test_cases")).all()
            )
        assert {"ix_test_cases_key", "ix_test_cases_test", "ix_test_cases_outcome"} <= indexes
        assert keys == {"test_ü[🐍]": node_key("tests.тест::test_ü[🐍]"), "bare": node_key("bare")}
        assert [r.test_id for r in store.newly_failing(KEY)] == ["tests.тест::test_ü[🐍]"]
        store.dispose()
    engine.dispose()


def test_an_existing_warehouse_gets_the_device_configuration_columns_and_table(warehouse_url: str) -> None:
    """A warehouse made before device facts: the store adds `benchmarks.config_key` ("" for the
    rows already there: the empty configuration), its index and the `device_facts` table; the
    old rows stay one series; a second start changes nothing."""
    from sqlalchemy import create_engine, inspect

    engine = create_engine(warehouse_url)
    store = Warehouse(warehouse_url)
    for day in (8, 9):
        store.record_benchmarks(_at(KEY, dt.date(2024, 5, day)), [BenchmarkResult("step", float(day))])
    store.dispose()
    with engine.begin() as connection:  # back to the old schema
        on = "" if engine.dialect.name == "sqlite" else " ON benchmarks"
        connection.execute(text(f"DROP INDEX ix_benchmarks_series{on}"))
        connection.execute(text("ALTER TABLE benchmarks DROP COLUMN config_key"))
        connection.execute(text("DROP TABLE device_facts"))
    with engine.connect() as connection:
        assert "config_key" not in {c["name"] for c in inspect(connection).get_columns("benchmarks")}

    for start in range(2):
        store = Warehouse(warehouse_url)
        with engine.connect() as connection:
            inspector = inspect(connection)
            assert "ix_benchmarks_series" in {i["name"] for i in inspector.get_indexes("benchmarks")}
            assert "device_facts" in inspector.get_table_names()
            old = connection.execute(text("SELECT night, config_key FROM benchmarks ORDER BY night")).all()
        assert [c for _, c in old] == (["", ""] if start == 0 else ["", "", H200.key()])
        if start == 0:  # tonight on a recorded configuration, beside the old rows
            store.record_benchmarks(KEY, [BenchmarkResult("step", 10.0)], devices=H200)
            store.record_device_facts(KEY, "benchmarks", "gpu-node-1", H200)
        nights = store.benchmark_nights(
            KEY.pipeline, KEY.target, "step", before=dt.date(2024, 5, 11), limit=5
        )
        assert [(n.night.day, n.config_key) for n in nights] == [(8, ""), (9, ""), (10, H200.key())]
        assert store.device_facts(KEY) == {"benchmarks": H200}
        store.dispose()
    engine.dispose()


def test_a_large_report_is_written_in_batches_of_core_inserts(warehouse: Warehouse) -> None:
    """30,000 cases whose message is NULL every other row: a handful of statements (the ORM's bulk
    insert made one per change of the NULL columns), and the same rows back."""
    from sqlalchemy import event

    cases = tuple(
        TestCase(
            f"tests.m{i % 7}", f"test_{i}", "failed" if i % 2 else "passed", 0.25, "m" if i % 2 else None
        )
        for i in range(30_000)
    )
    inserts: list[str] = []
    record = lambda *args: inserts.append(args[2]) if args[2].lstrip().upper().startswith("INSERT") else None  # noqa: E731
    event.listen(warehouse._engine, "before_cursor_execute", record)
    warehouse.record_test_report(KEY, TestReport("big", cases))
    assert 1 < len(inserts) <= 1 + 30_000 // 1_000  # the suite row, then the cases' batches
    assert warehouse.failed_cases(KEY, "big") == [c for c in cases if c.outcome == "failed"]


def _ten_tests(failing: set[int]) -> TestReport:
    """Ten tests, enough that two failing are not an infra failure (evidence.INFRA_SHARE)."""
    cases = tuple(TestCase("t", f"test_{i}", "failed" if i in failing else "passed") for i in range(10))
    return TestReport("unit", cases)


def test_a_re_run_replaces_a_night_stage_by_stage_and_every_run_stays_on_record(
    warehouse: Warehouse,
) -> None:
    warehouse.record_night(KEY, run_id="r1", status="success", pins={"repo": "abc"})
    for stage in ("sources", "tests", "night_summary"):
        warehouse.record_stage(KEY, stage, status="running", runner="local", duration_s=0.0, run_id="r1")
        warehouse.record_stage(
            KEY, stage, status="success", runner="local", duration_s=1.0, run_id="r1", artefact=f"{stage}/"
        )
    warehouse.record_checks(KEY, "tests", [CheckOutcome("tests", "all_pass", "ERROR", True)], run_id="r1")
    warehouse.record_test_report(KEY, _ten_tests({1}), run_id="r1")
    warehouse.record_benchmarks(KEY, [BenchmarkResult("a", 1.0)], devices=H100)
    warehouse.record_device_facts(KEY, "tests", "local", H100)
    before = warehouse.row_counts(KEY)

    # The re-run's sources stage starts, then fails: the night's results stay r1's.
    warehouse.record_stage(KEY, "sources", status="running", runner="local", duration_s=0.0, run_id="r2")
    warehouse.record_stage(
        KEY, "sources", status="failure", runner="local", duration_s=2.0, run_id="r2", detail="no such repo"
    )
    stages = {s.stage: (s.status, s.run_id) for s in warehouse.stages(KEY)}
    assert stages == {
        "sources": ("failure", "r2"),
        "tests": ("success", "r1"),
        "night_summary": ("success", "r1"),
    }
    after = warehouse.row_counts(KEY)
    for table in ("suites", "test_cases", "test_tallies", "checks", "benchmarks", "device_facts"):
        assert after[table] == before[table] > 0, table
    assert warehouse.suite_counts(KEY)["unit"]["passed"] == 9
    assert warehouse.suite_runs(KEY) == {"unit": "r1"}

    # Every run is on record, newest first, with what each found ("running" is not an outcome).
    runs = warehouse.night_runs(KEY)
    assert [(r.run_id, r.current, r.status) for r in runs] == [
        ("r2", True, "failure"),
        ("r1", False, "success"),
    ]
    assert [(o.stage, o.detail) for o in runs[0].outcomes] == [("sources", "no such repo")]
    assert [o.stage for o in runs[1].outcomes] == ["sources", "tests", "night_summary"]
    warehouse.move_stage_artefact(KEY, "sources", "r1", ".runs/r1/sources/")
    [moved] = [o for o in warehouse.night_runs(KEY)[1].outcomes if o.stage == "sources"]
    assert moved.artefact == ".runs/r1/sources/"

    # A run that reports replaces the suite; the earlier run's outcomes reach the flaky classifier:
    # test_1 failed in r1 and passes in r3.
    warehouse.record_test_report(KEY, _ten_tests(set()), run_id="r3")
    assert warehouse.suite_runs(KEY) == {"unit": "r3"}
    histories = warehouse.test_histories(KEY.pipeline, KEY.target, until=NIGHT, nights=5)
    [observation] = histories.tests[("unit", "t::test_1")]
    assert (observation.outcome, observation.earlier) == ("passed", ("failed",))


def test_a_run_that_ended_without_its_stages_ends_them_on_record(warehouse: Warehouse) -> None:
    warehouse.record_night(KEY, run_id="r1", status="running", pins={})
    warehouse.record_stage(KEY, "tests", status="running", runner="local", duration_s=0.0, run_id="r1")
    assert warehouse.end_stages(KEY, run_id="r2", status="failure") == []  # another run's: untouched
    assert warehouse.end_stages(KEY, run_id="r1", status="failure", why="the process died") == ["tests"]
    [row] = warehouse.stages(KEY)
    assert (row.status, row.detail) == ("failure", "the process died")
    [run] = warehouse.night_runs(KEY)
    assert [(o.stage, o.status, o.detail) for o in run.outcomes] == [("tests", "failure", "the process died")]
    assert warehouse.set_night_status(KEY, "failure", only_if="running", why="the warehouse was down")
    night = warehouse.night(KEY)
    assert night is not None and (night.status, night.detail) == ("failure", "the warehouse was down")
    warehouse.record_night(KEY, run_id="r3", status="success", pins={})  # a new status clears the reason
    night = warehouse.night(KEY)
    assert night is not None and night.detail is None


def _open_and_record(url: str, ready: Any, night: int, errors: Any) -> None:
    """One first run: open the warehouse (creating its tables) the moment the others do."""
    try:
        ready.wait(timeout=60)
        store = Warehouse(url, retry_s=30)
        store.record_night(_at(KEY, dt.date(2024, 5, night)), run_id=f"r{night}", status="running", pins={})
        store.dispose()
    except BaseException as exc:  # the parent asserts on what every child met
        errors.put(f"{type(exc).__name__}: {exc}")


def test_first_runs_started_together_on_a_new_warehouse_all_open_it(warehouse_url: str) -> None:
    """Two first nights at once on a new home: each creates the tables it finds missing; the one
    that comes second is told they exist, and goes on."""
    context = multiprocessing.get_context("fork")
    runners = 4
    for round_ in range(3):
        if round_:  # a new warehouse again: the tables gone
            store = Warehouse(warehouse_url)
            Base.metadata.drop_all(store._engine)
            store.dispose()
        ready, errors = context.Barrier(runners), context.Queue()
        processes = [
            context.Process(target=_open_and_record, args=(warehouse_url, ready, 10 + i, errors))
            for i in range(runners)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
        met = [errors.get() for _ in range(errors.qsize())] if not errors.empty() else []
        assert met == [], f"round {round_}: {met}"
        assert [p.exitcode for p in processes] == [0] * runners
        store = Warehouse(warehouse_url)
        assert len(store.nights()) == runners
        store.dispose()
