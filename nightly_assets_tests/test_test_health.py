"""Flaky and broken tests from the warehouse: the evidence a suite's write keeps (retries, re-runs
that disagree), the histories the classifier reads on SQLite and MariaDB, and real nights of a
small project whose flaky test is quarantined and whose broken test alerts with its suspect commit."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.results import NightKey, Outcome, TestCase, TestReport
from nightly_assets.testing import health, health_checks
from nightly_assets.testing.flakiness import Verdict
from nightly_assets.warehouse import Warehouse
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_files, git
from nightly_assets_tests.suite_projects import (
    FLAKY_TESTS,
    flit_project,
    night_store,
    project_pipeline,
    suite_stage,
)

START = dt.date(2026, 11, 3)


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Warehouse]:
    url = (
        f"sqlite:///{tmp_path}/w.sqlite"
        if request.param == "sqlite"
        else request.getfixturevalue("mysql_url")
    )
    store = Warehouse(url)
    yield store
    store.dispose()


def night(i: int) -> NightKey:
    return NightKey("p", START + dt.timedelta(days=i), "cpu")


def report(outcomes: dict[str, Outcome], attempts: dict[str, int] | None = None) -> TestReport:
    cases = tuple(
        TestCase("tests.t", name, outcome, attempts=(attempts or {}).get(name, 1))
        for name, outcome in outcomes.items()
    )
    return TestReport("unit", cases)


# test_new passes until night 3; the others keep one failing test from looking like an infra failure.
STABLE: dict[str, Outcome] = {"test_new": "passed", **{f"test_ok_{i}": "passed" for i in range(8)}}


def test_the_write_keeps_retries_and_disagreeing_reruns_and_histories_hold_only_suspects(
    warehouse: Warehouse,
) -> None:
    for i in range(4):
        warehouse.record_night(night(i), run_id=f"r{i}", status="success", pins={"app": f"a{max(0, i - 1)}"})
    warehouse.record_test_report(night(0), report({**STABLE, "test_flip": "passed", "test_retry": "passed"}))
    # Night 1: test_flip fails, then a re-run of the night (same pins) passes it; test_retry
    # passes on its second attempt (Bazel's --flaky_test_attempts).
    warehouse.record_test_report(night(1), report({**STABLE, "test_flip": "failed", "test_retry": "passed"}))
    warehouse.record_test_report(
        night(1), report({**STABLE, "test_flip": "passed", "test_retry": "passed"}, {"test_retry": 2})
    )
    # Night 3 (a new commit): test_new fails every attempt (two confirmation re-runs), after
    # passing on 0 to 2.
    warehouse.record_test_report(night(2), report({**STABLE, "test_flip": "passed", "test_retry": "passed"}))
    warehouse.record_test_report(
        night(3),
        report(
            {**STABLE, "test_flip": "passed", "test_retry": "passed", "test_new": "failed"}, {"test_new": 3}
        ),
    )
    found = warehouse.test_histories("p", "cpu", until=night(3).night, nights=30)
    assert found.nights == [night(i).night for i in range(4)]
    assert set(found.tests) == {
        ("unit", "tests.t::test_flip"),
        ("unit", "tests.t::test_retry"),
        ("unit", "tests.t::test_new"),
    }
    flip = found.tests[("unit", "tests.t::test_flip")]
    assert [(o.outcome, o.earlier) for o in flip] == [
        ("passed", ()),
        ("passed", ("failed",)),
        ("passed", ()),
        ("passed", ()),
    ]
    assert [o.attempts for o in found.tests[("unit", "tests.t::test_retry")]] == [1, 2, 1, 1]
    assert [dict(o.pins) for o in flip] == [{"app": "a0"}, {"app": "a0"}, {"app": "a1"}, {"app": "a2"}]

    judged = {j.test_id: j for j in health.judge(found, night(3).night, clean_nights=3)}
    assert judged["tests.t::test_flip"].verdict.state == "flaky"
    assert judged["tests.t::test_flip"].quarantined  # 2 clean nights since, 3 needed
    assert judged["tests.t::test_retry"].verdict.state == "flaky"
    new = judged["tests.t::test_new"]
    assert new.verdict.state == "broken" and new.new_failure and not new.quarantined
    assert (new.verdict.first_bad, new.verdict.last_good) == (night(3).night, night(2).night)
    assert new.verdict.suspects == {"app": ("a1", "a2")}
    # Broken the night before too: no new failure (alerted and searched once).
    again = health.judge(found, night(3).night, clean_nights=3, broken_before={("unit", "tests.t::test_new")})
    assert not next(j for j in again if j.test_id == "tests.t::test_new").new_failure

    # A re-run that replaces an infra failure (every test failed) is no flaky evidence.
    warehouse.record_test_report(
        night(3), report({name: "error" for name in [*STABLE, "test_flip", "test_retry", "test_new"]})
    )
    warehouse.record_test_report(
        night(3), report({**STABLE, "test_flip": "passed", "test_retry": "passed", "test_new": "failed"})
    )
    histories = warehouse.test_histories("p", "cpu", until=night(3).night, nights=30)
    assert histories.tests[("unit", "tests.t::test_new")][-1].earlier == ()


def test_histories_remember_what_a_failing_test_failed_with_before_the_window(warehouse: Warehouse) -> None:
    """A flake too rare to show in the window is known by its message from before it: a test
    clean over the window fails tonight as it failed months ago, and is held as that flake."""

    def case(name: str, outcome: Outcome, message: str | None = None, attempts: int = 1) -> TestCase:
        return TestCase("tests.t", name, outcome, message=message, attempts=attempts)

    ok = [case(f"test_ok_{i}", "passed") for i in range(8)]
    for i in range(12):
        warehouse.record_night(night(i), run_id=f"r{i}", status="success", pins={"app": f"a{i}"})
        rare = case("test_rare", "passed")
        if i == 0:  # failed once, long ago; then passed on a retry after failing so again
            rare = case("test_rare", "failed", "TimeoutError: queue drained after 30 s")
        elif i == 1:
            rare = case("test_rare", "passed", "TimeoutError: queue drained after 41 s", attempts=2)
        elif i == 11:
            rare = case("test_rare", "failed", "TimeoutError: queue drained after 12 s", attempts=3)
        other = case(
            "test_other",
            "failed" if i in (0, 11) else "passed",
            "OSError: disk full" if i in (0, 11) else None,
        )
        passing = case("test_passing", "failed" if i == 0 else "passed", "KeyError: 'x'" if i == 0 else None)
        warehouse.record_test_report(night(i), TestReport("unit", (*ok, rare, other, passing)))
    found = warehouse.test_histories("p", "cpu", until=night(11).night, nights=5)
    assert found.nights[0] == night(7).night  # the window: nights 7 to 11
    assert found.flakes == {
        ("unit", "tests.t::test_rare"): frozenset({"TimeoutError: queue drained after <n> s"}),
        ("unit", "tests.t::test_other"): frozenset({"OSError: disk full"}),
    }  # test_passing does not fail tonight: nothing to look up
    judged = {j.test_id: j for j in health.judge(found, night(11).night, clean_nights=None)}
    rare_verdict = judged["tests.t::test_rare"].verdict
    assert rare_verdict.state == "insufficient", rare_verdict.reason
    assert rare_verdict.reason.startswith("failing with `TimeoutError: queue drained after <n> s` since")


def health_pipeline(upstream: Path) -> str:
    return project_pipeline(
        "healthpkg",
        upstream,
        "One flaky test, one broken by a commit.",
        [suite_stage(), FLAKY_TESTS],
        thresholds={"flaky_share_max": 0.5, "quarantine_clean_nights": 2},
    )


PROJECT = flit_project(
    "healthpkg",
    "A value, and tests of it.",
    {
        "healthpkg/__init__.py": '"""The value."""\nVALUE = 1\n',
        "tests/test_health.py": """import pathlib

import healthpkg

TOGGLE = pathlib.Path({toggle!r})


def test_stable():
    assert True


def test_flaky():
    assert TOGGLE.read_text() != "fail", "the toggle said fail"


def test_value():
    assert healthpkg.VALUE == 1
""",
    },
)


@pytest.mark.slow
def test_a_flaky_test_is_quarantined_and_a_broken_one_alerts_with_its_suspect_commit(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    toggle = tmp_path / "toggle"
    repo = tmp_path / "upstream" / "healthpkg"
    files = {n: t.format(toggle=str(toggle)) if n.startswith("tests/") else t for n, t in PROJECT.items()}
    good = commit_files(repo, files)
    pipeline = health_pipeline(repo)
    alerts = catalog_nights.home / "alerts.jsonl"

    toggle.write_text("pass")
    _, stages, outcome = catalog_nights.run(pipeline, "2026-11-03")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}

    # Same commit, and test_flaky fails: flaky (the same pins gave both outcomes), quarantined.
    toggle.write_text("fail")
    key, stages, outcome = catalog_nights.run(pipeline, "2026-11-04")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
    assert stages["tests"].detail == "2/3 passed (1 failed)"
    with night_store(catalog_nights.home) as store:
        [check] = [c for c in store.checks(key) if c.name == "tests_passed"]
        assert check.passed and "(1 of them quarantined as flaky: counted, not gating)" in check.description
        assert "[quarantined] tests.test_health::test_flaky" in check.description
        [verdict] = store.verdicts(key)
        assert (verdict.test_id, verdict.state, verdict.quarantined) == (
            "tests.test_health::test_flaky",
            "flaky",
            True,
        )
        assert store.suite_counts(key)["tests"]["failed"] == 1  # still counted
    assert (stages["flaky_tests"].detail or "").startswith("1 flaky (33.3% of 3), 0 broken")
    summary = (
        catalog_nights.home / "artefacts/healthpkg/2026-11-04/cpu/night_summary/summary.md"
    ).read_text()
    assert "| tests | tests.test_health::test_flaky | flaky (quarantined) | 50% |" in summary

    # A commit after that night breaks test_value; test_flaky passes again.
    (repo / "healthpkg/__init__.py").write_text('"""The value."""\nVALUE = 2\n')
    env = {**os.environ, "GIT_AUTHOR_NAME": "Dana Dev", "GIT_AUTHOR_EMAIL": "dana@example.com"}
    env |= {"GIT_AUTHOR_DATE": "2026-11-05T10:00:00Z", "GIT_COMMITTER_DATE": "2026-11-05T10:00:00Z"}
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "make the value two"], check=True, env=env)
    bad = git(repo, "rev-parse", "HEAD")
    toggle.write_text("pass")
    key, stages, outcome = catalog_nights.run(pipeline, "2026-11-06")
    assert not outcome.succeeded  # a broken test is never quarantined
    # The suite failed, so the test health was judged in the summary run, and alerted there.
    assert outcome.summary_run is not None and stages["flaky_tests"].run_id == outcome.summary_run.run_id
    warns = [json.loads(line) for line in alerts.read_text().splitlines() if '"warn"' in line]
    [line] = [w for alert in warns for w in alert["lines"] if "no_new_broken_test" in w]
    assert "tests.test_health::test_value fails since 2026-11-06 (last passed 2026-11-04)" in line
    assert f"suspects: healthpkg {good[:10]}..{bad[:10]} [{bad[:10]} Dana Dev: make the value two]" in line
    with night_store(catalog_nights.home) as store:
        broken = store.verdicts(key, state="broken")
        assert [(v.test_id, v.first_bad, v.last_good) for v in broken] == [
            ("tests.test_health::test_value", dt.date(2026, 11, 6), dt.date(2026, 11, 4))
        ]
        span = broken[0].suspects["healthpkg"]
        assert (span["good"], span["bad"]) == (good, bad)
        assert span["commits"] == [{"sha": bad, "author": "Dana Dev", "subject": "make the value two"}]
    summary = (
        catalog_nights.home / "artefacts/healthpkg/2026-11-06/cpu/night_summary/summary.md"
    ).read_text()
    assert "| flaky_tests | no_new_broken_test | WARN |" in summary


def test_torch_spyres_gates_name_their_figures_and_limits() -> None:
    key = dg.AssetKey(["torch_spyre", "flaky_tests"])
    flaky = [
        health.Judged("tests", f"t::test_{i}", i, Verdict("flaky", "passed on a retry"), False)
        for i in range(5)
    ]
    under = health_checks.flaky_share(key, flaky[:4], 100, 0.05)
    assert under.passed and (under.description or "").startswith(
        "4 flaky of 100 tests that ran (4.00%, limit 5%)"
    )
    at_limit = health_checks.flaky_share(key, flaky, 100, 0.05)  # the RFC: less than 5 %
    assert not at_limit.passed and at_limit.severity == dg.AssetCheckSeverity.ERROR
    counts = {"total": 200, "passed": 9, "failed": 1, "error": 0, "skipped": 190, "collected": 0}
    stage_1 = health_checks.in_scope_share(key, "tests_pytorch_in_scope", counts, 0.05)
    assert stage_1.passed and stage_1.description == (
        "10 of 200 in-scope tests of tests_pytorch_in_scope ran (5.0%, rollout stage needs 5%)"
    )
    assert not health_checks.in_scope_share(key, "tests_pytorch_in_scope", counts, 0.25).passed
    missing = health_checks.in_scope_share(key, "tests_pytorch_in_scope", None, 0.05)
    assert not missing.passed and "has no results tonight" in (missing.description or "")


def test_a_resource_down_for_part_of_a_suite_is_one_infra_event_not_broken_tests(
    warehouse: Warehouse,
) -> None:
    refused = "ConnectionRefusedError: [Errno 111] Connection refused to 127.0.0.1:{}"
    db = [f"test_db_{i}" for i in range(3)]
    for i in range(3):
        warehouse.record_night(night(i), run_id=f"r{i}", status="success", pins={"app": f"a{i}"})
        warehouse.record_test_report(night(i), report({**STABLE, **dict.fromkeys(db, "passed")}))
    cases = [TestCase("tests.t", name, "passed") for name in STABLE]
    cases += [TestCase("tests.t", n, "failed", message=refused.format(5432)) for n in db]
    cases.append(TestCase("tests.t", "test_new", "failed", message="KeyError: 'weight'"))  # its own
    warehouse.record_test_report(night(3), TestReport("unit", tuple(cases)))
    found = warehouse.test_histories("p", "cpu", until=night(3).night, nights=30)
    sig = "ConnectionRefusedError: [Errno <n>] Connection refused to <addr>"
    assert found.tests[("unit", "tests.t::test_db_0")][-1].signature == sig
    judged = {j.test_id: j for j in health.judge(found, night(3).night, clean_nights=None)}
    assert set(judged) == {"tests.t::test_new"}  # the cluster's tests are no broken tests
    [event] = health.infra_events(found, night(3).night)
    assert (event.suite, event.signature, event.resource) == ("unit", sig, "127.0.0.1:5432")
    assert event.tests == tuple(f"tests.t::{n}" for n in db)
    # a re-run of the night with the database back: the cluster's disagreement is no flaky evidence
    warehouse.record_test_report(
        night(3), report({**STABLE, **dict.fromkeys(db, "passed"), "test_new": "failed"})
    )
    again = warehouse.test_histories("p", "cpu", until=night(3).night, nights=30)
    assert ("unit", "tests.t::test_db_0") not in again.tests  # no evidence kept: never a candidate


def test_a_flaky_tests_burst_is_named_once_by_the_flakier_check_and_is_no_new_broken_test() -> None:
    from nightly_assets.testing.flakiness import Observation
    from nightly_assets.warehouse.evidence import Histories

    # one attempt in six failed for 24 nights, then a week at 90 % (three attempts a night)
    codes = "PPP2PPPPP2PPPPP2PPPPP2PP" + "F3FF2FF"
    seen = [
        Observation(
            START + dt.timedelta(days=n),
            {"app": f"a{n}"},
            "failed" if code == "F" else "passed",
            3 if code == "F" else 1 if code == "P" else int(code),
        )
        for n, code in enumerate(codes)
    ]
    key = dg.AssetKey(["p", "flaky_tests"])
    named, broken_before = [], set[tuple[str, str]]()
    for n in range(24, len(codes)):
        days = [o.night for o in seen[: n + 1]]
        found = Histories(days, tests={("unit", "t::test_x"): seen[: n + 1]}, keys={("unit", "t::test_x"): 1})
        judged = health.judge(found, days[-1], clean_nights=None, broken_before=broken_before)
        assert not any(j.new_failure for j in judged)
        check = health_checks.no_flakier(key, judged)
        if not check.passed:
            named.append((n, check.description))
        broken_before = {(j.suite, j.test_id) for j in judged if j.verdict.state == "broken"}
    since = START + dt.timedelta(days=24)
    assert named == [
        (
            26,
            f"unit::t::test_x flakier since {since}: fails 82% of its attempts, 17% before"
            " (a flaky test whose failures still pass on re-runs, not broken)",
        )
    ]


def test_a_failure_with_no_flaky_evidence_of_its_own_is_weighed_against_its_suites_flaky_tests():
    # A new suite of 40 tests, three nights old: 12 of its tests failed an attempt and passed on a
    # retry (flaky, failing half their attempts), and test_new passed twice, then failed all three
    # attempts. Twelve tests failing half their attempts fail three in a row one night in eight: of
    # a suite like this, it is a flake as likely as a breakage, so no verdict yet; in a suite with
    # no flaky test it is broken on its first failed night, as before.
    from nightly_assets.testing.flakiness import Observation
    from nightly_assets.warehouse.evidence import Histories

    days = [START + dt.timedelta(days=n) for n in range(3)]

    def seen(codes: str) -> list[Observation]:
        return [
            Observation(day, {"app": f"a{n}"}, "failed" if c == "F" else "passed", 3 if c == "F" else int(c))
            for n, (day, c) in enumerate(zip(days, codes, strict=True))
        ]

    flaky = {("unit", f"t::test_flaky_{i}"): seen("212") for i in range(12)}
    tests = {**flaky, ("unit", "t::test_new"): seen("11F")}
    keys = {test: i for i, test in enumerate(tests)}
    tallies = {"unit": {day: (40, 0) for day in days}}
    judged = health.judge(
        Histories(days, tests=tests, keys=keys, tallies=tallies), days[-1], clean_nights=None
    )
    new = next(j for j in judged if j.test_id == "t::test_new")
    assert (new.verdict.state, new.new_failure) == ("insufficient", False)
    assert "12 flaky tests of its suite's 40 fail so with a" in new.verdict.reason
    alone = {("unit", "t::test_new"): tests["unit", "t::test_new"]}
    judged = health.judge(
        Histories(days, tests=alone, keys=keys, tallies=tallies), days[-1], clean_nights=None
    )
    assert [(j.test_id, j.verdict.state, j.new_failure) for j in judged] == [("t::test_new", "broken", True)]


def test_the_confirmation_order_reads_which_flaky_tests_failed_on_the_previous_night(
    warehouse: Warehouse,
) -> None:
    from nightly_assets.stage_kinds.suite import _judged_on
    from nightly_assets.testing.confirm import FAILING_FLAKY
    from nightly_assets.warehouse.rows import TestVerdict

    warehouse.record_night(night(0), run_id="r0", status="failure", pins={"app": "a0"})
    tonight = {**STABLE, "test_streak": "failed", "test_flaky": "passed"}
    warehouse.record_test_report(night(0), report(tonight))
    verdicts = [
        TestVerdict("unit", i, f"tests.t::test_{name}", state, "why", 0.5, False, False, None, None, {})
        for i, (name, state) in enumerate((("streak", "flaky"), ("flaky", "flaky"), ("gone", "broken")))
    ]
    warehouse.record_verdicts(night(0), verdicts)
    judged = _judged_on(warehouse, night(1), "unit", (night(0).night, 10))
    assert judged == {
        "tests.t::test_streak": FAILING_FLAKY,
        "tests.t::test_flaky": "flaky",
        "tests.t::test_gone": "broken",
    }
    assert _judged_on(warehouse, night(1), "unit", None) == {}
