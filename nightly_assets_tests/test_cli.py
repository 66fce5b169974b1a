"""`nightly run` and `nightly status` as a release engineer types them."""

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.cli import main
from nightly_assets.results import NightKey, TestCase, TestReport
from nightly_assets.warehouse.rows import Regression, TestVerdict
from nightly_assets.warehouse.store import Warehouse
from nightly_assets_tests.cli_nights import (
    processes_with,
    start_night_with_a_slow_benchmark,
    wait_for_the_benchmark,
)
from nightly_assets_tests.device_configs import H200
from nightly_assets_tests.peers.process import free_port


@pytest.mark.slow
def test_run_prints_progress_and_the_summary_then_status_shows_the_night(dagster_home, capsys):
    assert main(["run", "demo", "--night", "2026-11-03"]) == 0
    out = capsys.readouterr().out
    assert "started  demo__sources" in out and "done     demo__release" in out
    assert "check    demo/tests_unit:tests_passed passed" in out
    assert "| Stage | Status | Runner | Duration (min) | Artifacts | Detail |" in out
    assert (dagster_home / "dagster.yaml").is_file()  # the instance was set up with the repo's config

    assert main(["status", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["pipeline"], r["night"], r["target"], r["status"]) for r in rows] == [
        ("demo", "2026-11-03", "cpu", "success")
    ]
    assert rows[0]["tests"]["tests_unit"]["passed"] == 7
    assert set(rows[0]["stages"].values()) == {"success"}

    assert main(["status", "--pipeline", "demo"]) == 0
    text = capsys.readouterr().out
    assert "2026-11-03  cpu             success    9/9" in text


def test_status_before_any_night_says_how_to_run_one(dagster_home, capsys):
    assert main(["status"]) == 0
    assert "nightly run demo --night" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "nope", "--night", "2026-11-03"],
            "unknown pipeline 'nope'; the catalog has: demo, demo_gpu, dynamo",
        ),
        (["run", "demo", "--night", "03/11/2026"], "--night '03/11/2026': expected a date as YYYY-MM-DD"),
        (["run", "demo", "--night", "20261103"], "--night '20261103': expected a date as YYYY-MM-DD"),
        (["run", "demo", "--night", "2020-01-01"], "pipeline 'demo' has nights from 2026-11-01"),
        (
            ["run", "demo", "--night", "2026-11-03", "--target", "gpu"],
            "--target 'gpu': pipeline 'demo' has targets cpu",
        ),
        (["status", "--pipeline", "nope"], "unknown pipeline 'nope'"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(dagster_home, capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_night_ends_cancelled_with_no_error_alert_and_no_process_left(
    dagster_home, nightly_home, tmp_path, signum
):
    """SIGTERM (a scheduler stopping the job) or Ctrl-C during a stage: the run is cancelled, the
    stage and the night say `cancelled`, nobody is paged, and the stage's processes are gone."""
    marker = f"nightly-interrupt-{uuid.uuid4().hex}"
    cli = start_night_with_a_slow_benchmark(tmp_path, marker)
    try:
        lines = wait_for_the_benchmark(cli, marker)
        cli.send_signal(signum)
        rest, _ = cli.communicate(timeout=120)
    finally:
        cli.kill()
    output = "".join(lines) + rest
    assert cli.returncode == 130, output
    assert "CANCELLED demo__benchmarks (interrupted)" in output
    assert "demo/2026-11-03/cpu interrupted; the night is cancelled" in output
    assert processes_with(marker) == [], "a process of the interrupted stage is still running"

    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    key = NightKey("demo", dt.date(2026, 11, 3), "cpu")
    night = store.night(key)
    assert night is not None and night.status == "cancelled"
    stages = {s.stage: s.status for s in store.stages(key)}
    assert stages["benchmarks"] == "cancelled" and "running" not in stages.values()
    alerts = nightly_home / "alerts.jsonl"
    assert not alerts.exists() or '"severity": "error"' not in alerts.read_text()
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    statuses = [r.status for r in instance.get_runs() if r.job_name == "demo_nightly"]
    assert statuses == [dg.DagsterRunStatus.CANCELED]


def test_status_reads_a_bounded_number_of_queries_however_many_nights(dagster_home, capsys):
    """Five SELECTs (nights, stages, suites, checks, devices) for 40 nights x 2 targets, not some per
    night."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from nightly_assets.results import CheckOutcome, TestCase, TestReport

    store = Warehouse(f"sqlite:///{dagster_home.parent / 'nightly'}/warehouse.sqlite")
    for day in range(40):
        for target in ("cpu", "gpu"):
            key = NightKey("demo", dt.date(2026, 11, 3) + dt.timedelta(days=day), target)
            store.record_night(key, run_id=f"r{day}", status="success", pins={})
            store.record_stage(key, "tests_unit", status="success", runner="local", duration_s=1, run_id="r")
            cases = (TestCase("t", "a", "passed"), TestCase("t", "b", "failed" if day == 39 else "passed"))
            store.record_test_report(key, TestReport("tests_unit", cases))
            check = CheckOutcome("tests_unit", "tests_passed", "ERROR", day != 39, "1 failed: t::b")
            store.record_checks(key, "tests_unit", [check], run_id="r")
            if target == "gpu":
                store.record_device_facts(key, "tests_unit", "local", H200)
    store.dispose()
    selects: list[str] = []

    def count(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("SELECT") and " FROM sqlite_master" not in statement:
            selects.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        assert main(["status", "--json"]) == 0
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 80 and len(selects) == 5, selects
    assert (rows[0]["night"], rows[0]["target"], rows[1]["target"]) == ("2026-12-12", "cpu", "gpu")
    assert rows[0]["tests"]["tests_unit"]["failed"] == 1 and rows[0]["stages"]["tests_unit"] == "success"
    assert rows[0]["failed_checks"] == [
        {"stage": "tests_unit", "check": "tests_passed", "severity": "ERROR", "description": "1 failed: t::b"}
    ]
    assert rows[2]["failed_checks"] == [] and rows[2]["stages"]["sources"] == "skipped"
    assert rows[0]["devices"] == {} and rows[1]["devices"] == {
        "tests_unit": {**H200.model_dump(), "config_key": H200.key()}
    }
    assert rows[1]["devices"]["tests_unit"]["model"] == "NVIDIA H200"


@pytest.mark.mysql
@pytest.mark.slow
def test_every_command_works_on_the_mysql_warehouse(dagster_home, monkeypatch, capsys, mysql_url):
    """NIGHTLY_WAREHOUSE_URL reaches Dagster as an EnvVar: the CLI resolves it as a run does."""
    monkeypatch.setenv("NIGHTLY_WAREHOUSE_URL", mysql_url)
    assert main(["status"]) == 0
    assert "no nights recorded yet" in capsys.readouterr().out
    assert main(["run", "demo", "--night", "2026-11-07"]) == 1  # 0.2.0: test_mean fails
    out = capsys.readouterr().out
    assert "FAILED   demo__tests_unit: 9 passed, 1 failed of 10:" in out
    assert "tests.test_reduce::test_mean: assert" in out
    assert "!! alert (error): demo night 2026-11-07 cpu failed" in out
    assert main(["status", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["night"], row["status"], row["stages"]["tests_unit"]) == ("2026-11-07", "failure", "failure")
    assert row["failed_checks"][0]["check"] == "tests_passed"
    assert Warehouse(mysql_url).night(NightKey("demo", dt.date(2026, 11, 7), "cpu")) is not None
    assert main(["tests", "rates", "demo", "--json"]) == 0
    rates = {
        (r["suite"], r["test_id"]): (r["passed"], r["runs"]) for r in json.loads(capsys.readouterr().out)
    }
    assert rates == {("tests_unit", "tests.test_reduce::test_mean"): (0, 1)}


def test_tests_answers_the_history_questions_from_the_warehouse(dagster_home, nightly_home, capsys):
    """Three nights of demo's unit suite written as a night writes them: `tests rates` lists the
    tests that did not always pass, `tests new` tonight's new failures, `tests history` one test."""
    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    outcomes = {
        3: {"test_mean": "passed", "test_sum": "passed", "test_max": "failed"},
        4: {"test_mean": "passed", "test_sum": "failed", "test_max": "failed"},
        5: {"test_mean": "failed", "test_sum": "passed", "test_max": "failed"},
    }
    for day, tests in outcomes.items():
        key = NightKey("demo", dt.date(2026, 11, day), "cpu")
        cases = tuple(
            TestCase(
                "tests.test_reduce",
                name,
                outcome,
                0.1,
                None if outcome == "passed" else f"{name}: assert 1 == 2",
            )
            for name, outcome in tests.items()
        )
        store.record_test_report(key, TestReport("tests_unit", cases))
    store.dispose()

    assert main(["tests", "rates", "demo", "--nights", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "demo cpu: 3 tests below 100% over the last 3 nights with results"
    assert [line.split()[:2] + line.split()[-1:] for line in lines[2:]] == [
        ["0.0%", "0/3", "tests.test_reduce::test_max"],
        ["66.7%", "2/3", "tests.test_reduce::test_mean"],
        ["66.7%", "2/3", "tests.test_reduce::test_sum"],
    ]
    assert main(["tests", "rates", "demo", "--nights", "1", "--below", "0.5"]) == 0
    assert capsys.readouterr().out.startswith("demo cpu: 2 tests below 50% over the last night ")
    assert main(["tests", "rates", "demo", "--nights", "1", "--all", "--json"]) == 0
    assert {r["test_id"]: r["rate"] for r in json.loads(capsys.readouterr().out)} == {
        "tests.test_reduce::test_max": 0.0,
        "tests.test_reduce::test_mean": 0.0,
        "tests.test_reduce::test_sum": 1.0,
    }
    assert main(["tests", "new", "demo", "--night", "2026-11-05"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("demo/2026-11-05/cpu: newly failing (passed the previous night): 1\n")
    assert "tests.test_reduce::test_mean  test_mean: assert 1 == 2" in out
    assert main(["tests", "history", "demo", "tests_unit", "tests.test_reduce::test_sum", "--json"]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [(r["night"], r["outcome"]) for r in history] == [
        ("2026-11-05", "passed"),
        ("2026-11-04", "failed"),
        ("2026-11-03", "passed"),
    ]
    assert main(["tests", "rates", "demo", "--target", "gpu"]) == 2
    assert capsys.readouterr().err == "nightly: pipeline 'demo': gpu: expected one of cpu\n"


def test_tests_flaky_and_regressions_read_what_the_stages_recorded(dagster_home, nightly_home, capsys):
    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    key = NightKey("demo", dt.date(2026, 11, 6), "cpu")
    span = {
        "good": "a" * 40,
        "bad": "b" * 40,
        "commits": [{"sha": "b" * 40, "author": "Dana", "subject": "x"}],
    }
    store.record_verdicts(
        key,
        [
            TestVerdict(
                "tests_unit",
                1,
                "t::test_flaky",
                "flaky",
                "passed on a retry",
                0.5,
                True,
                False,
                None,
                None,
                {},
            ),
            TestVerdict(
                "tests_unit",
                2,
                "t::test_value",
                "broken",
                "fails",
                0.0,
                False,
                True,
                key.night,
                dt.date(2026, 11, 4),
                {"sample": span},
            ),
        ],
    )
    store.record_regressions(
        key,
        [
            Regression(
                "demo",
                key.night,
                "cpu",
                "matmul_64",
                dt.date(2026, 11, 5),
                dt.date(2026, 11, 4),
                1.0,
                1.5,
                "s",
                True,
                {"sample": span},
            )
        ],
    )
    store.dispose()
    assert main(["tests", "flaky", "demo", "--night", "2026-11-06"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "demo/2026-11-06/cpu: 2 tests flaky, broken or too new to tell"
    assert out[1].split() == [
        "flaky",
        "(quarantined)",
        "tests_unit",
        "t::test_flaky",
        "passed",
        "on",
        "a",
        "retry",
    ]
    assert out[3] == f"    suspects: sample {'a' * 10}..{'b' * 10} [{'b' * 10} Dana: x]"
    assert main(["tests", "regressions", "demo", "--json"]) == 0
    [found] = json.loads(capsys.readouterr().out)
    assert (found["name"], found["first_bad"], found["worse"]) == ("matmul_64", "2026-11-05", True)
    assert main(["tests", "regressions", "demo"]) == 0
    assert (
        "matmul_64                 regressed 50.0% from 2026-11-05 (last good 2026-11-04"
        in capsys.readouterr().out
    )


@pytest.mark.mysql
@pytest.mark.parametrize("command", [["status"], ["run", "demo", "--night", "2026-11-03"]])
def test_an_unreachable_warehouse_is_one_line_and_exit_2(dagster_home, monkeypatch, capsys, command):
    monkeypatch.setenv("NIGHTLY_WAREHOUSE_URL", "mysql+pymysql://root:hunter2@127.0.0.1:3306/nightly_nope")
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "nightly: cannot open warehouse mysql+pymysql://root:***@127.0.0.1:3306/nightly_nope:"
    )
    assert "Access denied" in err and len(err.strip().splitlines()) == 1
    assert "hunter2" not in err


def test_prod_without_its_settings_names_them(dagster_home, monkeypatch, capsys):
    monkeypatch.setenv("NIGHTLY_ENV", "prod")
    for name in ("NIGHTLY_WAREHOUSE_URL", "NIGHTLY_ARTEFACTS_BUCKET", "SLACK_BOT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert main(["run", "demo", "--night", "2026-11-03"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "nightly: resources (prod): environment variable(s) not set: NIGHTLY_ARTEFACTS_BUCKET, "
        "NIGHTLY_WAREHOUSE_URL, SLACK_BOT_TOKEN (see docs/configuration.md)"
    )
    # A query reads the warehouse alone: it names only the warehouse's setting.
    for command in (["status"], ["tests", "rates", "demo"]):
        assert main(command) == 2
        assert capsys.readouterr().err.strip() == (
            "nightly: warehouse (prod): environment variable(s) not set: NIGHTLY_WAREHOUSE_URL "
            "(see docs/configuration.md)"
        )


def test_a_bad_setting_is_one_line_naming_the_resource_and_field(dagster_home, monkeypatch, capsys):
    monkeypatch.setenv("NIGHTLY_BATCH_KIND", "pbs")
    assert main(["run", "demo", "--night", "2026-11-03"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "nightly: resources (local): BatchSchedulerResource: kind: 'pbs': expected 'local' or 'slurm'"
    )


@pytest.mark.slow
def test_a_killed_night_is_repaired_by_the_sensor_and_the_next_run_says_so(
    dagster_home, nightly_home, tmp_path, monkeypatch, capsys
):
    """`nightly run` killed outright (no cleanup possible) leaves its night `running` and its Dagster
    run STARTED. The repair sensor sees the process is gone, fails the run, ends the stage and asks
    for the summary; the next run of the night says what it replaces."""
    from nightly_assets.definitions import build_definitions
    from nightly_assets.resources import resources_for

    marker = f"nightly-killed-{uuid.uuid4().hex}"
    cli = start_night_with_a_slow_benchmark(tmp_path, marker)
    try:
        wait_for_the_benchmark(cli, marker)
        cli.kill()
        cli.wait(timeout=30)
    finally:
        for pid in processes_with(marker):  # a SIGKILLed parent cannot end its children
            os.kill(pid, signal.SIGKILL)
    key = NightKey("demo", dt.date(2026, 11, 3), "cpu")
    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    night = store.night(key)
    assert night is not None and night.status == "running"
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    [run] = instance.get_runs(dg.RunsFilter(job_name="demo_nightly"))
    assert run.status == dg.DagsterRunStatus.STARTED

    monkeypatch.setenv("NIGHTLY_CATALOG_DIR", str(tmp_path / "catalog"))
    defs = build_definitions(tmp_path / "catalog")
    sensor = defs.resolve_sensor_def("night_status_repair")
    resources = {
        name: resources_for("local", nightly_home)[name] for name in ("warehouse", "notifier", "artefacts")
    }
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        [request] = sensor(context)
    assert (request.job_name, request.partition_key) == ("demo_summary", "2026-11-03|cpu")
    run = instance.get_run_by_id(run.run_id)
    assert run is not None and run.status == dg.DagsterRunStatus.FAILURE
    assert {s.stage: s.status for s in store.stages(key)}["benchmarks"] == "failure"
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        assert sensor(context) == [request]  # the same request: Dagster's run key keeps it to one run

    monkeypatch.delenv("NIGHTLY_CATALOG_DIR")  # the shipped catalog: a benchmark that ends
    assert main(["run", "demo", "--night", "2026-11-03"]) == 0
    out = capsys.readouterr().out
    assert f"demo/2026-11-03/cpu was left running after its runs ended ({run.run_id[:8]} failure)" in out
    assert "this run replaces it" in out
    night = store.night(key)
    assert night is not None and night.status == "success"


def test_status_on_a_database_that_is_down_says_so_in_one_line_within_seconds(
    dagster_home, monkeypatch, capsys
):
    """Nothing listens: connection refused is retried (a restart may be under way), briefly."""
    port = free_port()
    monkeypatch.setenv("NIGHTLY_WAREHOUSE_URL", f"mysql+pymysql://root@127.0.0.1:{port}/nightly")
    assert main(["status"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Connection refused" in lines[0], lines


def test_status_into_a_reader_that_stops_early_ends_quietly(dagster_home, nightly_home):
    """`nightly status | head`: the reader leaves after a line; no BrokenPipeError traceback."""
    store = Warehouse(f"sqlite:///{nightly_home}/warehouse.sqlite")
    for offset in range(400):  # far more output than a pipe holds (64 KiB)
        night = NightKey("demo", dt.date(2026, 11, 1) + dt.timedelta(days=offset), "cpu")
        store.record_night(night, run_id=f"run{offset}", status="success", pins={"nightlysample": "a" * 40})
    store.dispose()
    nightly = Path(sys.executable).parent / "nightly"
    reader = subprocess.Popen(
        [nightly, "status", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None and reader.stdout.readline().startswith("[")
    reader.stdout.close()  # as `head -1` does
    _, errors = reader.communicate(timeout=120)
    assert reader.returncode == 0, errors
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors


def test_a_night_freezes_what_starting_up_made_and_collects_garbage_again(dagster_home, monkeypatch):
    """As its own process, `nightly run` collects no garbage while starting up, then freezes what
    starting up made and collects again for the night; called from Python it leaves gc alone."""
    import gc

    import nightly_assets.cli as cli
    from nightly_assets.cli.usage import INTERRUPTED

    seen: list[tuple[bool, int]] = []

    def at_the_night(_key: object, *_args: object, **_kwargs: object) -> object:
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        raise KeyboardInterrupt  # enough: the night itself is another test's

    monkeypatch.setattr("nightly_assets.night.run_night", at_the_night)
    try:
        assert cli.main(["run", "demo", "--night", "2026-11-03"]) == INTERRUPTED
        assert seen[-1] == (True, 0)
        monkeypatch.setattr(sys, "argv", ["nightly", "run", "demo", "--night", "2026-11-03"])
        assert cli.main() == INTERRUPTED
        enabled, frozen = seen[-1]
        assert enabled and frozen > 100_000
    finally:
        gc.unfreeze()
        gc.enable()


def test_the_instance_takes_the_catalogs_pool_limits_and_a_changed_one(dagster_home):
    from nightly_assets.catalog.loader import load_catalog
    from nightly_assets.cli.instance import instance as cli_instance

    catalog = load_catalog()
    instance = cli_instance(catalog)
    for pool, limit in catalog.pools.items():
        assert instance.event_log_storage.get_concurrency_info(pool).slot_count == limit, pool
    changed = catalog.model_copy(update={"pools": {**catalog.pools, "gpu": catalog.pools["gpu"] + 2}})
    instance = cli_instance(changed)
    assert instance.event_log_storage.get_concurrency_info("gpu").slot_count == catalog.pools["gpu"] + 2
