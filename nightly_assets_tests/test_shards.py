"""Shard plans from recorded durations (issue 39): whole files where they fit, a long file split
by test, longest first onto the least-loaded shard; `nightly shards plan` from the warehouse and
from a JSON file."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from nightly_assets.cli import main
from nightly_assets.results import NightKey, TestCase, TestReport
from nightly_assets.shards.plan import ShardPlanError, checked_durations, plan_shards, shard_count
from nightly_assets.warehouse.store import Warehouse


def pytorch_like(seed: int = 7) -> dict[str, float]:
    """A suite shaped like PyTorch's test-times file: many files of short tests (log-normal
    seconds), a few files of thousands of seconds, one of them a single long test."""
    rng = random.Random(seed)
    durations: dict[str, float] = {}
    for f in range(300):
        for t in range(rng.randint(1, 40)):
            durations[f"test/test_file_{f:03d}.py::test_{t}"] = round(rng.lognormvariate(0.5, 1.2), 3)
    for t in range(400):  # test_ops.py: hours, in 400 tests
        durations[f"test/test_ops.py::test_op_{t}"] = round(rng.uniform(5, 40), 3)
    durations["test/test_slow_single.py::test_everything"] = 900.0
    return durations


def test_every_unit_is_planned_once_and_the_makespan_is_near_the_ideal() -> None:
    durations = pytorch_like()
    plan = plan_shards(durations, 8)
    planned = [unit for shard in plan.shards for unit in shard.units]
    assert len(planned) == len(set(planned))
    # Each test is in exactly one shard: as itself, or inside its whole file.
    covered = Counter(t for t in durations for unit in planned if unit == t or t.split("::")[0] == unit)
    assert set(covered.values()) == {1} and set(covered) == set(durations)
    assert plan.total_s == pytest.approx(sum(durations.values()))
    assert sum(s.seconds for s in plan.shards) == pytest.approx(plan.total_s)
    assert plan.makespan_s >= plan.ideal_s
    assert plan.ratio < 1.02, plan.to_json()  # thousands of small units: LPT lands within 2 %
    assert plan.split_files == ("test/test_ops.py",)  # longer than a shard's share: split by test
    ops_shards = {s.index for s in plan.shards for u in s.units if u.startswith("test/test_ops.py")}
    assert len(ops_shards) > 1


def test_the_longest_unit_bounds_the_plan_and_is_never_split_below_a_test() -> None:
    durations = {"a.py::t1": 900.0, "b.py::t1": 10.0, "b.py::t2": 10.0, "c.py": 30.0}
    plan = plan_shards(durations, 4)
    assert plan.ideal_s == 900.0 and plan.makespan_s == 900.0 and plan.ratio == 1.0
    assert [s.units for s in plan.shards] == [("a.py",), ("c.py",), ("b.py",), ()]


def test_the_plan_is_deterministic_whatever_the_order_of_the_durations() -> None:
    durations = pytorch_like(seed=11)
    shuffled = list(durations.items())
    random.Random(3).shuffle(shuffled)
    assert plan_shards(durations, 5) == plan_shards(dict(shuffled), 5)


def test_tests_too_fast_to_measure_still_spread_across_the_shards() -> None:
    plan = plan_shards({f"t{i}.py::test": 0.0 for i in range(6)}, 3)
    assert [len(s.units) for s in plan.shards] == [2, 2, 2]


def test_tests_never_seen_get_their_files_mean_else_the_suites_median() -> None:
    durations = {"a.py::t1": 10.0, "a.py::t2": 30.0, "b.py::t1": 2.0, "gone.py::t": 99.0}
    plan = plan_shards(durations, 2, tests=["a.py::t1", "a.py::t2", "a.py::new", "b.py::t1", "c.py::t1"])
    assert plan.estimated == ("a.py::new", "c.py::t1")
    # a.py: 10 + 30 + 20 (its mean); c.py: the median of 10, 30, 2 = 10; gone.py is not collected.
    assert plan.total_s == pytest.approx(10 + 30 + 20 + 2 + 10)


def test_shard_minutes_give_the_count() -> None:
    assert shard_count({"a": 3000.0, "b": 1000.0}, 30) == 3  # 4000 s over 1800 s, rounded up
    assert shard_count({"a": 1.0}, 30) == 1


@pytest.mark.parametrize(
    ("durations", "message"),
    [
        ({"a.py": -1}, "'a.py' has -1 s, expected 0 or more"),
        ({"a.py": "10"}, "'a.py' has '10', expected seconds (a number)"),
        ({"a.py": True}, "'a.py' has True, expected seconds (a number)"),
        ({"": 1.0}, "a key '' is not a test id or file"),
    ],
)
def test_bad_durations_name_the_entry(durations, message) -> None:
    with pytest.raises(ShardPlanError, match=re.escape(f"times.json: {message}")):
        checked_durations(durations, "times.json")


def test_no_shards_is_refused() -> None:
    with pytest.raises(ShardPlanError, match="shards 0: expected 1 or more"):
        plan_shards({"a.py": 1.0}, 0)


def test_the_cli_plans_a_json_file_of_durations(tmp_path: Path, capsys) -> None:
    times = tmp_path / "times.json"
    times.write_text(json.dumps(pytorch_like()))
    assert main(["shards", "plan", "--durations", str(times), "--shard-minutes", "60", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["source"] == f"--durations {times}"
    assert len(plan["shards"]) == shard_count(pytorch_like(), 60)
    assert plan["makespan_s"] >= plan["ideal_s"] and plan["ratio"] < 1.05
    assert main(["shards", "plan", "--durations", str(times), "--shards", "8"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("8 shards of 6547 tests")
    assert "makespan " in text and "split by test across shards: test/test_ops.py" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", 'expected an object {"file_or_test_id": seconds}'),
        ("{not json", "not JSON"),
        ('{"a.py": "slow"}', "'a.py' has 'slow', expected seconds (a number)"),
        ("{}", "no test durations to plan with"),
    ],
)
def test_a_bad_durations_file_is_one_line_and_exit_2(tmp_path: Path, capsys, content, message) -> None:
    times = tmp_path / "times.json"
    times.write_text(content)
    assert main(["shards", "plan", "--durations", str(times), "--shards", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nightly: --durations {times}") and message in err and err.count("\n") == 1


def test_the_cli_plans_a_suite_from_its_recorded_nights(dagster_home, nightly_home, capsys) -> None:
    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    try:
        for day, scale in ((1, 1.0), (2, 3.0)):  # the mean of the two nights is planned
            cases = (
                TestCase("tests.test_reduce", "test_mean", "passed", 10.0 * scale),
                TestCase("tests.test_reduce", "test_sum", "failed", 2.0 * scale),
                TestCase("tests.test_io", "test_read", "passed", 4.0 * scale),
                TestCase("tests.test_io", "test_skip", "skipped", 0.0),
            )
            key = NightKey("demo", dt.date(2026, 11, day), "cpu")
            store.record_test_report(key, TestReport("tests_unit", cases))
    finally:
        store.dispose()
    assert main(["shards", "plan", "demo", "tests_unit", "--shards", "2", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["source"] == "demo/tests_unit on cpu, mean of 2 nights 2026-11-01..2026-11-02"
    assert plan["total_s"] == pytest.approx(20 + 4 + 8)  # skipped tests are not planned
    # test_reduce (24 s) is longer than a shard's share (16 s): its tests go apart.
    assert [s["units"] for s in plan["shards"]] == [
        ["tests.test_reduce::test_mean"],
        ["tests.test_io", "tests.test_reduce::test_sum"],
    ]
    assert main(["shards", "plan", "demo", "tests_nope", "--shards", "2"]) == 2
    assert "pipeline 'demo' has no stage 'tests_nope'; its stages: sources" in capsys.readouterr().err
    assert main(["shards", "plan", "demo", "benchmarks", "--shards", "2"]) == 2
    assert "demo/benchmarks on cpu: no test durations recorded yet" in capsys.readouterr().err
