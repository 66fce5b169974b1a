"""Confirming a suite's failures before the night is judged (issue #26): the failing tests alone
re-run; a test that passes on a re-run is flaky with same-commit evidence, one that fails every
attempt is broken. A real night of a small project on the local runner, and the bounds (attempts,
max_tests, time, a wholesale failure, a re-run that breaks) with a scripted re-runner."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from nightly_assets.catalog.models import BazelTests, Confirm, Suite
from nightly_assets.night import NightOutcome
from nightly_assets.results import Outcome, TestCase, TestReport
from nightly_assets.runners.rbe import bazel_rerunner, case_targets
from nightly_assets.testing.confirm import FAILING_FLAKY, Rerunner, confirm_failures, pytest_node_id, select
from nightly_assets.testing.flakiness import MIN_WHOLESALE_FAILURES, is_wholesale
from nightly_assets.testing.resources import TestRunError
from nightly_assets.tpu import remote_suite
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_files, commit_folder
from nightly_assets_tests.peers.bazel import BazelPeer
from nightly_assets_tests.peers.docker import DockerEngine
from nightly_assets_tests.suite_projects import (
    ENVIRONMENT,
    IMAGE_RUNNER,
    IMAGE_STAGE,
    Stage,
    flit_project,
    night_store,
    project_pipeline,
    suite_stage,
)
from nightly_assets_tests.tpu_harness import KEY, make_sglang_repo

PROJECT = flit_project(
    "confirmpkg",
    "A value, and tests of it.",
    {
        "confirmpkg/__init__.py": '"""The value."""\nVALUE = 1\n',
        # test_flaky fails on its first run of a night and passes after: a counter file outside the
        # checkout counts its runs. test_broken fails every time while its file is there.
        "tests/test_things.py": """import pathlib

import confirmpkg

RUNS = pathlib.Path({runs!r})
BROKEN = pathlib.Path({broken!r})


def test_stable():
    assert confirmpkg.VALUE == 1


class TestFlaky:
    def test_flaky(self):
        runs = int(RUNS.read_text()) + 1 if RUNS.exists() else 1
        RUNS.write_text(str(runs))
        assert runs > 1, "first run of the night fails"


def test_broken():
    assert not BROKEN.exists(), "broken tonight"
""",
    },
)


def confirm_pipeline(
    upstream: Path, environment: Stage = ENVIRONMENT, runner: str = "local", **suite: Any
) -> str:
    description = "A flaky test and a broken one, confirmed by re-runs."
    stages = [suite_stage(runner, **suite)]
    return project_pipeline("confirmpkg", upstream, description, stages, environment=environment)


@pytest.mark.slow
def test_a_flaky_test_passes_on_its_re_run_and_only_the_broken_one_fails_the_night(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    runs, broken_file = tmp_path / "flaky-runs", tmp_path / "broken"
    broken_file.touch()
    repo = tmp_path / "upstream" / "confirmpkg"
    tests = {"runs": str(runs), "broken": str(broken_file)}
    commit_files(repo, {n: t.format(**tests) if n.startswith("tests/") else t for n, t in PROJECT.items()})
    key, stages, outcome = catalog_nights.run(confirm_pipeline(repo), "2026-11-03")

    assert not outcome.succeeded  # test_broken fails every attempt
    assert runs.read_text() == "2"  # test_flaky ran twice: the suite's run and one re-run
    assert stages["tests"].detail == "2/3 passed (1 failed); 1 passed on a confirmation re-run"
    with night_store(catalog_nights.home) as store:
        [check] = [c for c in store.checks(key) if c.name == "tests_passed"]
        assert not check.passed
        assert "tests.test_things::test_broken" in check.description
        assert "test_flaky" not in check.description
        history = store.test_histories("confirmpkg", "cpu", until=key.night, nights=30)
        flaky = history.tests[("tests", "tests.test_things.TestFlaky::test_flaky")]
        broken = history.tests[("tests", "tests.test_things::test_broken")]
        assert [(o.outcome, o.attempts) for o in flaky] == [("passed", 2)]  # same-commit flaky evidence
        assert [(o.outcome, o.attempts) for o in broken] == [("failed", 3)]  # 1 + the 2 default re-runs

    folder = catalog_nights.home / "artefacts/confirmpkg/2026-11-03/cpu/tests"
    confirm = json.loads((folder / "manifest.json").read_text())["confirm"]
    assert confirm["passed_on_rerun"] == {"tests.test_things.TestFlaky::test_flaky": 2}
    assert confirm["confirmed_failing"] == {"tests.test_things::test_broken": 3}
    assert (confirm["attempts"], confirm["runs"], confirm["not_rerun"]) == (2, 3, {})
    assert confirm["seconds"] > 0
    # Each re-run's JUnit is kept: round 1 re-ran both, round 2 only what still failed.
    assert [Path(p).name for p in confirm["junit"]] == ["confirm-1.xml", "confirm-2.xml"]
    assert (folder / "confirm-1.xml").read_text().count("<testcase ") == 2
    assert (folder / "confirm-2.xml").read_text().count("<testcase ") == 1

    # The next night nothing is broken: the flaky test's first failure does not fail the night,
    # and the report's metadata says what the confirmation did and cost.
    runs.unlink()
    broken_file.unlink()
    key, stages, outcome = catalog_nights.run(confirm_pipeline(repo), "2026-11-04")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
    assert stages["tests"].detail == "3/3 passed; 1 passed on a confirmation re-run"
    shown = _latest_materialization(catalog_nights, key).metadata
    assert (shown["confirm/tests_rerun"].value, shown["confirm/runs"].value) == (1, 1)
    assert shown["confirm/passed_on_rerun"].value == 1 and shown["flaky"].value == 1
    assert "| tests.test_things.TestFlaky::test_flaky | passed on confirmation re-run | 2 |" in str(
        shown["confirmation"].value
    )

    # attempts: 0 turns it off: the flaky test's first run (a fresh counter) fails the night.
    runs.unlink()
    off = confirm_pipeline(repo, confirm={"attempts": 0})
    key, stages, outcome = catalog_nights.run(off, "2026-11-05")
    assert not outcome.succeeded and runs.read_text() == "1"
    assert stages["tests"].detail == "2/3 passed (1 failed)"
    assert "confirm" not in json.loads(
        (catalog_nights.home / "artefacts/confirmpkg/2026-11-05/cpu/tests/manifest.json").read_text()
    )


# In the image no file of this machine is seen, and each run is a fresh container: this flaky test
# fails in the whole suite's run and passes when run by its node id (a confirmation re-run).
IMAGE_TESTS = """import confirmpkg


def test_stable():
    assert confirmpkg.VALUE == 1


class TestFlaky:
    def test_flaky(self, pytestconfig):
        assert any("::" in arg for arg in pytestconfig.args), "fails in the whole suite's run"


def test_broken():
    assert confirmpkg.VALUE == 2, "the value is not two"
"""


@pytest.mark.docker
@pytest.mark.slow
def test_in_the_image_the_failing_tests_re_run_by_node_id_in_fresh_containers(
    catalog_nights: CatalogNights,
    tmp_path: Path,
    wheelhouse: Path,
    docker_engine: DockerEngine,
    base_image: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_engine.host)
    repo = tmp_path / "upstream" / "confirmpkg"
    sources = {n: t for n, t in PROJECT.items() if not n.startswith("tests/")}
    commit_files(repo, {**sources, "tests/test_things.py": IMAGE_TESTS})
    pipeline = confirm_pipeline(repo, IMAGE_STAGE, IMAGE_RUNNER)
    _, stages, outcome = catalog_nights.run(pipeline, "2026-11-03")

    assert not outcome.succeeded and stages["environment"].status == "success"
    assert stages["tests"].detail == "2/3 passed (1 failed); 1 passed on a confirmation re-run"
    folder = catalog_nights.home / "artefacts/confirmpkg/2026-11-03/cpu/tests"
    confirm = json.loads((folder / "manifest.json").read_text())["confirm"]
    assert confirm["passed_on_rerun"] == {"tests.test_things.TestFlaky::test_flaky": 2}
    assert confirm["confirmed_failing"] == {"tests.test_things::test_broken": 3}
    # Each re-run's outputs in their own folder; the suite's own JUnit is left as it ran.
    assert [Path(p).relative_to(folder).as_posix() for p in confirm["junit"]] == [
        "confirm-1/junit.xml",
        "confirm-2/junit.xml",
    ]
    assert (folder / "out/junit.xml").read_text().count("<testcase ") == 3
    assert "FAILED tests/test_things.py::test_broken" in (folder / "confirm-2/output.log").read_text()


# Three tests that fail in the whole suite's run (as on a machine that fails what runs on it) and
# pass when re-run by node id, and one that fails everywhere.
HOST_TESTS = """import confirmpkg
import pytest


@pytest.mark.parametrize("n", [1, 2, 3])
def test_on_a_bad_host(n, pytestconfig):
    assert any("::" in arg for arg in pytestconfig.args), "fails in the whole suite's run"


def test_broken():
    assert confirmpkg.VALUE == 2, "the value is not two"
"""


@pytest.mark.docker
@pytest.mark.slow
def test_on_a_pool_of_hosts_the_re_run_goes_to_another_host_which_names_the_suspect(
    catalog_nights: CatalogNights,
    tmp_path: Path,
    wheelhouse: Path,
    docker_engine: DockerEngine,
    base_image: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runner's label has two Docker hosts (this machine's one engine under a second address):
    the suite runs on the first, its failing tests are re-run on the second; three that pass there
    name the first host as the suspect, in the detail and the manifest."""
    monkeypatch.setenv("DOCKER_HOST", docker_engine.host)
    second = docker_engine.host.replace("/docker.sock", "/./docker.sock")
    pool = {"hosts": {IMAGE_RUNNER: {"docker_host": docker_engine.host, "more_engines": [second]}}}
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
    monkeypatch.setenv("NIGHTLY_RUNNER_POOL", str(tmp_path / "pool.yaml"))
    repo = tmp_path / "upstream" / "confirmpkg"
    sources = {n: t for n, t in PROJECT.items() if not n.startswith("tests/")}
    commit_files(repo, {**sources, "tests/test_things.py": HOST_TESTS})
    _, stages, outcome = catalog_nights.run(confirm_pipeline(repo, IMAGE_STAGE, IMAGE_RUNNER), "2026-11-03")

    assert not outcome.succeeded  # test_broken fails on both hosts
    assert stages["tests"].detail == (
        f"3/4 passed (1 failed); 3 passed on a confirmation re-run; suspect host {docker_engine.host} "
        "(3 of 4 failing tests, failing with `AssertionError: fails in the whole suite's run`, "
        f"passed when re-run on {second})"
    )
    folder = catalog_nights.home / "artefacts/confirmpkg/2026-11-03/cpu/tests"
    confirm = json.loads((folder / "manifest.json").read_text())["confirm"]
    assert confirm["suite_host"] == docker_engine.host
    assert confirm["round_hosts"] == {"1": second, "2": docker_engine.host}  # then back: each in turn
    assert set(confirm["passed_on"].values()) == {second}
    assert confirm["suspect_host"] == docker_engine.host
    assert confirm["confirmed_failing"] == {"tests.test_things::test_broken": 3}


def _latest_materialization(nights: CatalogNights, key) -> dg.AssetMaterialization:
    partition = dg.MultiPartitionKey({"night": key.night.isoformat(), "target": key.target})
    event = nights.instance.get_latest_materialization_event(dg.AssetKey(["confirmpkg", "tests"]))
    assert event is not None and event.asset_materialization is not None
    assert event.asset_materialization.partition == partition
    return event.asset_materialization


# -- the bounds, with a scripted re-runner --


def _report(outcomes: dict[str, Outcome]) -> TestReport:
    return TestReport("unit", tuple(TestCase("tests.t", name, outcome) for name, outcome in outcomes.items()))


class Script:
    """A re-runner whose rounds give scripted outcomes: `script[name]` lists a test's outcome per
    run, in order."""

    def __init__(self, script: dict[str, list[Outcome]], *, at_once: bool = False) -> None:
        self.script = script
        self.at_once = at_once
        self.asked: list[list[str]] = []

    def rerunner(self) -> Rerunner:
        return Rerunner(lambda c: c.name if c.name != "test_uncollectable" else None, self.run, self.at_once)

    def run(self, names: list[str], number: int, runs: int, timeout_s: float) -> TestReport:
        self.asked.append(names)
        cases = []
        for name in names:
            for _ in range(runs):
                cases.append(TestCase("tests.t", name, self.script[name].pop(0)))
        return TestReport("unit", tuple(cases), source_files=(f"confirm-{number}.xml",))


STABLE: dict[str, Outcome] = {f"test_ok_{i}": "passed" for i in range(8)}


def test_re_runs_only_what_still_fails_and_count_every_attempt() -> None:
    report = _report({**STABLE, "test_flaky": "failed", "test_late": "error", "test_broken": "failed"})
    script = Script(
        {
            "test_flaky": ["passed"],
            "test_late": ["failed", "passed"],
            "test_broken": ["failed", "failed"],
        }
    )
    done = confirm_failures(report, Confirm(), script.rerunner(), budget_s=60, where="here")
    assert script.asked == [["test_flaky", "test_late", "test_broken"], ["test_late", "test_broken"]]
    assert done.passed_on_rerun == {"tests.t::test_flaky": 2, "tests.t::test_late": 3}
    assert done.confirmed_failing == {"tests.t::test_broken": 3}
    assert done.runs == 1 + 2 + 2
    merged = {c.name: (c.outcome, c.attempts) for c in done.report.cases}
    assert merged["test_flaky"] == ("passed", 2) and merged["test_late"] == ("passed", 3)
    assert merged["test_broken"] == ("failed", 3) and merged["test_ok_0"] == ("passed", 1)
    assert [c.name for c in done.report.cases] == [c.name for c in report.cases]  # order kept
    assert done.report.source_files == ("confirm-1.xml", "confirm-2.xml")
    assert done.summary() == "; 2 passed on a confirmation re-run"


ILLEGAL_ACCESS = "RuntimeError: CUDA error: an illegal memory access was encountered at gpu 3"


def test_a_host_that_fails_tests_alike_is_the_suspect_flaky_tests_passing_elsewhere_are_not() -> None:
    hosts = {1: "ssh://gpu-b", 2: "ssh://gpu-a"}
    gpu = {
        f"test_gpu_{i}": TestCase("tests.t", f"test_gpu_{i}", "failed", message=ILLEGAL_ACCESS)
        for i in range(3)
    }
    broken = TestCase("tests.t", "test_broken", "failed", message="AssertionError: the value is not two")
    report = TestReport("unit", (*_report(STABLE).cases, *gpu.values(), broken))
    script = Script({**{name: ["passed"] for name in gpu}, "test_broken": ["failed", "failed"]})
    rerunner = dataclasses.replace(script.rerunner(), host_of=hosts.__getitem__, suite_host="ssh://gpu-a")
    done = confirm_failures(report, Confirm(), rerunner, budget_s=60, where="here")
    assert done.round_hosts == hosts
    assert done.passed_on == {f"tests.t::test_gpu_{i}": "ssh://gpu-b" for i in range(3)}
    assert done.suspect_host == "ssh://gpu-a"
    assert done.summary() == (
        "; 3 passed on a confirmation re-run; suspect host ssh://gpu-a (3 of 4 failing tests, failing "
        "with `RuntimeError: CUDA error: an illegal memory access was encountered at gpu <n>`, passed "
        "when re-run on ssh://gpu-b)"
    )
    assert "**Suspect host: ssh://gpu-a**" in done.markdown()
    assert "passed on confirmation re-run on ssh://gpu-b" in done.markdown()
    # Their failures were the host's: plain passes in the report, not flaky evidence.
    attempts = {c.name: (c.outcome, c.attempts) for c in done.report.cases}
    assert attempts["test_gpu_0"] == ("passed", 1) and attempts["test_gpu_2"] == ("passed", 1)
    assert attempts["test_broken"] == ("failed", 3)

    # Flaky tests pass on a re-run wherever they run: three with their own failures, passing on the
    # other host, name no suspect and stay flaky evidence.
    flaky = tuple(
        TestCase("tests.t", f"test_flaky_{i}", "failed", message=f"AssertionError: {word} drifted")
        for i, word in enumerate(("loss", "grad", "cache"))
    )
    report = TestReport("unit", (*_report(STABLE).cases, *flaky))
    script = Script({c.name: ["passed"] for c in flaky})
    rerunner = dataclasses.replace(script.rerunner(), host_of=hosts.__getitem__, suite_host="ssh://gpu-a")
    done = confirm_failures(report, Confirm(), rerunner, budget_s=60, where="here")
    assert len(done.passed_on) == 3 and done.suspect_host is None
    assert done.summary() == "; 3 passed on a confirmation re-run"
    assert {c.name: c.attempts for c in done.report.cases if c.name.startswith("test_flaky")} == {
        "test_flaky_0": 2,
        "test_flaky_1": 2,
        "test_flaky_2": 2,
    }


def test_bazel_like_rerunners_run_every_attempt_in_one_round() -> None:
    report = _report({**STABLE, "test_flaky": "failed", "test_broken": "failed"})
    script = Script(
        {"test_flaky": ["failed", "passed", "failed"], "test_broken": ["failed"] * 3}, at_once=True
    )
    done = confirm_failures(report, Confirm(attempts=3), script.rerunner(), budget_s=60, where="here")
    assert len(script.asked) == 1
    assert done.passed_on_rerun == {"tests.t::test_flaky": 3}  # its first pass was its third run
    assert done.confirmed_failing == {"tests.t::test_broken": 4}


def test_the_bounds_leave_tests_unconfirmed_and_say_why() -> None:
    report = _report({**STABLE, "test_uncollectable": "error", "test_a": "failed", "test_b": "failed"})
    script = Script({"test_a": ["passed"]})
    done = confirm_failures(report, Confirm(max_tests=2), script.rerunner(), budget_s=60, where="here")
    assert script.asked == [["test_a"]]
    assert done.not_rerun == {
        "tests.t::test_b": "more failing tests than confirm.max_tests (2)",
        "tests.t::test_uncollectable": Rerunner.why_not,
    }
    assert {c.name: c.outcome for c in done.report.failures} == {
        "test_uncollectable": "error",
        "test_b": "failed",
    }
    assert (
        "| tests.t::test_b | not re-run: more failing tests than confirm.max_tests (2) | |" in done.markdown()
    )

    # A wholesale failure (an infra failure) is not re-run at all.
    wholesale = _report({"test_ok": "passed", **{f"test_{i}": "error" for i in range(6)}})
    done = confirm_failures(wholesale, Confirm(), Script({}).rerunner(), budget_s=60, where="here")
    assert not done.rerun and len(done.not_rerun) == 6
    assert "failed wholesale (6 of 7 that ran)" in done.not_rerun["tests.t::test_0"]
    # Thousands left out are counted, and listed as far as the failures table goes.
    huge = _report({"test_ok": "passed", **{f"test_{i}": "error" for i in range(2000)}})
    done = confirm_failures(huge, Confirm(), Script({}).rerunner(), budget_s=60, where="here")
    assert done.manifest()["not_rerun_count"] == 2000 and len(done.manifest()["not_rerun"]) == 50
    assert done.markdown().endswith("… and 1950 more not re-run")

    # A runner that cannot re-run says so; attempts 0 and collect-only do nothing.
    two = _report({**STABLE, "test_a": "failed"})
    done = confirm_failures(two, Confirm(), None, budget_s=60, where="'v5e' (tpu_vm)")
    assert done.not_rerun == {"tests.t::test_a": "not confirmed on this runner ('v5e' (tpu_vm))"}
    assert (
        confirm_failures(two, Confirm(attempts=0), Script({}).rerunner(), budget_s=60, where="").metadata()
        == {}
    )


def test_a_re_run_that_breaks_or_runs_out_of_time_leaves_the_failures_standing() -> None:
    report = _report({**STABLE, "test_a": "failed", "test_b": "failed"})
    script = Script({"test_a": ["failed"], "test_b": ["failed"]})
    rounds = 0

    def run(names: list[str], number: int, runs: int, timeout_s: float) -> TestReport:
        nonlocal rounds
        rounds += 1
        if rounds == 2:
            raise TestRunError("pytest exited with 3 (INTERNALERROR)\nmore")
        return script.run(names, number, runs, timeout_s)

    rerunner = Rerunner(lambda c: c.name, run)
    done = confirm_failures(report, Confirm(attempts=3), rerunner, budget_s=60, where="here")
    assert done.not_rerun["tests.t::test_a"] == (
        "re-run 2 failed: pytest exited with 3 (INTERNALERROR) after 1 failed re-run(s)"
    )
    assert {c.name: c.attempts for c in done.report.failures} == {"test_a": 2, "test_b": 2}
    assert not done.confirmed_failing

    done = confirm_failures(report, Confirm(), Script({}).rerunner(), budget_s=0, where="here")
    assert done.not_rerun["tests.t::test_a"] == "the re-runs' 0 s were spent"
    assert done.runs == 0


def test_a_junit_case_maps_to_its_pytest_node_id(tmp_path: Path) -> None:
    (tmp_path / "tests/sub").mkdir(parents=True)
    (tmp_path / "tests/sub/test_a.py").write_text("")
    case = TestCase("tests.sub.test_a.TestK", "test_p[a.b]", "failed")
    assert pytest_node_id(case, tmp_path) == "tests/sub/test_a.py::TestK::test_p[a.b]"
    assert pytest_node_id(TestCase("tests.sub.test_a", "test_f", "failed"), tmp_path) == (
        "tests/sub/test_a.py::test_f"
    )
    # pytest's collection error: no classname, the module as the name.
    assert pytest_node_id(TestCase("", "tests.sub.test_a", "error"), tmp_path) is None
    assert pytest_node_id(TestCase("tests.gone", "test_x", "failed"), tmp_path) is None


def test_the_catalog_bounds_confirmation_per_suite() -> None:
    suite = Suite(timeout_minutes=10, runner="local")
    assert (suite.confirm.attempts, suite.confirm.max_tests, suite.confirm.timeout_s) == (2, 50, None)
    custom = Suite.model_validate(
        {"timeout_minutes": 10, "runner": "local", "confirm": {"attempts": 0, "timeout_s": 120}}
    )
    assert (custom.confirm.attempts, custom.confirm.timeout_s) == (0, 120)
    with pytest.raises(ValueError, match="attempts"):
        Suite.model_validate({"timeout_minutes": 10, "runner": "local", "confirm": {"attempts": -1}})
    with pytest.raises(ValueError, match="extra"):
        Suite.model_validate({"timeout_minutes": 10, "runner": "local", "confirm": {"retries": 2}})


# -- Bazel: --runs_per_test of the failing targets --


def test_a_bazel_case_is_re_run_as_the_target_whose_testlogs_hold_it(tmp_path: Path) -> None:
    testlogs = tmp_path / "testlogs"
    for folder, name in [("tests/py_test", "test_a"), ("tests/py_test/shard_1_of_2", "test_b")]:
        (testlogs / folder).mkdir(parents=True, exist_ok=True)
        (testlogs / folder / "test.xml").write_text(
            f'<testsuites><testsuite name="s"><testcase classname="tests.m" name="{name}">'
            '<failure message="no"/></testcase></testsuite></testsuites>'
        )
    (testlogs / "tests/sh").mkdir(parents=True)
    (testlogs / "tests/sh/test.xml").write_text("<html>not junit</html>")
    found = case_targets(testlogs, ["//tests:py_test", "//tests:sh", "//tests:gone"])
    assert found == {"tests.m::test_a": "//tests:py_test", "tests.m::test_b": "//tests:py_test"}


@pytest.mark.bazel
def test_bazel_re_runs_the_failing_targets_with_runs_per_test(
    bazel_peer: BazelPeer, make_bazel_workspace: Callable[[], Path], tmp_path: Path
) -> None:
    workspace = make_bazel_workspace()
    markers = tmp_path / "flaky-markers"
    markers.mkdir()
    resource = bazel_peer.resource(
        test_env={"FLAKY_MARKER_DIR": str(markers)}, extra_args=[f"--sandbox_writable_path={markers}"]
    )
    tests = BazelTests(targets=["//tests:pass_test", "//tests:fail_test", "//tests:flaky_test"])
    first = resource.run_tests(workspace, tests, suite="s", out_dir=tmp_path / "out")
    fail, flaky = "//tests:fail_test::tests/fail_test", "//tests:flaky_test::tests/flaky_test"
    assert {c.node_id: c.outcome for c in first.report.failures} == {fail: "error", flaky: "error"}
    rerunner = bazel_rerunner(resource, workspace, first, suite="s", out_dir=tmp_path / "confirm", runner="r")
    done = confirm_failures(first.report, Confirm(attempts=2), rerunner, budget_s=600, where="rbe")
    assert done.passed_on_rerun == {flaky: 2}  # its marker is there now: it passes
    assert done.confirmed_failing == {fail: 3}
    # One Bazel run of both targets, twice each: --runs_per_test's run_<k>_of_2 reports.
    assert {(Path(p).parent.parent.name, Path(p).parent.name) for p in done.junit} == {
        (target, f"run_{k}_of_2") for target in ("fail_test", "flaky_test") for k in (1, 2)
    }
    # The next night's run reads its own reports, not the re-runs' left in bazel-testlogs.
    again = resource.run_tests(workspace, tests, suite="s", out_dir=tmp_path / "again")
    assert sorted(c.node_id for c in again.report.cases) == sorted(c.node_id for c in first.report.cases)


# -- a TPU VM: confirmed on the VM, before it is deleted --

ON_THE_VM = """

COUNTER = os.path.join(os.path.dirname(os.environ["NIGHTLY_TIMING_FILE"]), "flaky-runs")


@pytest.mark.tpu
def test_flaky():
    runs = int(open(COUNTER).read()) + 1 if os.path.exists(COUNTER) else 1
    with open(COUNTER, "w") as handle:
        handle.write(str(runs))
    assert runs > 1, "first run on this VM fails"


@pytest.mark.tpu
def test_broken():
    assert scoreapi.score(3) == 7, "three scores six"
"""


@pytest.mark.tpu
@pytest.mark.ssh
def test_on_a_tpu_vm_the_failures_are_re_run_before_the_vm_is_deleted(
    tpu_night: Callable[..., tuple[NightOutcome, dict[str, bool]]], nightly_home: Path, tmp_path: Path
) -> None:
    repo, _ = make_sglang_repo(tmp_path / "sglang")
    suite = repo / "test/srt/test_score_api.py"
    suite.write_text(suite.read_text() + ON_THE_VM)
    commit_folder(repo, "a flaky test and a broken one")
    outcome, checks = tpu_night()

    assert not outcome.succeeded and checks["tests_passed"] is False
    folder = nightly_home / "artefacts/tpu/2026-11-03/v6e-1/tests_tpu"
    confirm = json.loads((folder / "manifest.json").read_text())["confirm"]
    assert confirm["passed_on_rerun"] == {"test.srt.test_score_api::test_flaky": 2}
    assert confirm["confirmed_failing"] == {"test.srt.test_score_api::test_broken": 3}
    assert [Path(p).name for p in confirm["junit"]] == ["confirm-1.xml", "confirm-2.xml"]
    with night_store(nightly_home) as store:
        [check] = [c for c in store.checks(KEY) if c.name == "tests_passed"]
        assert "test_broken" in check.description and "test_flaky" not in check.description


def test_the_vms_wholesale_rule_is_the_classifiers() -> None:
    """remote_suite.py is stdlib-only and cannot import testing/flakiness.py: its defaults must agree."""
    args = remote_suite._parse(["--source", "s", "--junit", "j", "--timing", "t"])
    assert args.confirm_wholesale_min == MIN_WHOLESALE_FAILURES
    assert args.confirm_wholesale_share == inspect.signature(is_wholesale).parameters["share"].default
    assert args.confirm_attempts == 0  # off unless the suite's confirm: block asks


def test_past_max_tests_failures_without_a_verdict_go_first_then_known_flaky_then_broken() -> None:
    """Long-broken tests listed first must not crowd out the failures whose alert the re-run
    decides: those with no verdict last night (new, or too new to tell), then known-flaky ones in
    a failed streak (their re-runs tell a breakage from their flakes), then the other flaky ones."""
    names = ("old_1", "flaky", "old_2", "streak", "new", "young")
    passing = tuple(TestCase("tests.t", f"test_ok_{n}", "passed") for n in range(20))  # not wholesale
    report = TestReport("unit", (*(TestCase("tests.t", f"test_{n}", "failed") for n in names), *passing))
    before = {
        "tests.t::test_old_1": "broken",
        "tests.t::test_old_2": "broken",
        "tests.t::test_flaky": "flaky",
        "tests.t::test_young": "insufficient",
        "tests.t::test_streak": FAILING_FLAKY,
    }
    chosen, not_rerun = select(report, Confirm(max_tests=3), before)
    assert [c.node_id for c in chosen] == ["tests.t::test_new", "tests.t::test_young", "tests.t::test_streak"]
    assert sorted(not_rerun) == ["tests.t::test_flaky", "tests.t::test_old_1", "tests.t::test_old_2"]
    chosen, _ = select(report, Confirm(max_tests=4), before)
    assert chosen[-1].node_id == "tests.t::test_flaky"
    chosen, _ = select(report, Confirm(max_tests=1))
    assert [c.node_id for c in chosen] == ["tests.t::test_old_1"]  # report order without history
