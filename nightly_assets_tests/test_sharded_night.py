"""A sharded suite's real nights on the local runner (issue 39): the tests collected, planned from
the warehouse's durations, run as shards at once, a shard whose pytest is killed re-run alone, and
one report that equals an unsharded night's test by test; a shard lost on every attempt leaves its
tests reported as not run, and the night failed."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from nightly_assets.devices.leases import GpuLeases
from nightly_assets.devices.probe import probe_gpus
from nightly_assets.results import NightKey
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.fake_gpus import fake_gpu_host
from nightly_assets_tests.git_repo import commit_files, commit_folder
from nightly_assets_tests.peers.docker import DockerEngine
from nightly_assets_tests.suite_projects import (
    IMAGE_RUNNER,
    IMAGE_STAGE,
    flit_project,
    night_store,
    project_pipeline,
    suite_stage,
)
from nightly_assets_tests.third_party_pipeline import (
    LOCAL_SUITE,
    WHOLE_SUITE,
    pipeline_text,
    third_party_pipeline,
)

PROJECTS = Path(__file__).parent / "data" / "projects"

# test_c's first test kills its own pytest (as an OOM killer or a lost node would) while the file
# KILLS holds a number above the runs so far; RUNS counts its runs.
KILLER = """import os, pathlib, signal

RUNS = pathlib.Path({runs!r})
KILLS = pathlib.Path({kills!r})


def test_killer():
    runs = int(RUNS.read_text()) + 1 if RUNS.exists() else 1
    RUNS.write_text(str(runs))
    if KILLS.exists() and runs <= int(KILLS.read_text()):
        os.kill(os.getpid(), signal.SIGKILL)


def test_after_the_killer():
    pass
"""
PROJECT = flit_project(
    "shardpkg",
    "A value, and tests of it in three files.",
    {
        "shardpkg/__init__.py": '"""The value."""\nVALUE = 3\n',
        "tests/test_a.py": "import shardpkg\n\n\ndef test_value():\n    assert shardpkg.VALUE == 3\n\n\n"
        "def test_fails():\n    assert shardpkg.VALUE == 4, 'a real failure'\n",
        "tests/test_b.py": "import pytest\n\n\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_n(n):\n"
        "    assert n > 0\n\n\nclass TestK:\n    def test_k(self):\n        pass\n",
    },
)


TESTS_IN = {"tests/test_a.py": 2, "tests/test_b.py": 4, "tests/test_c.py": 2}  # a unit that is a file


def pipeline(repo: Path, **suite: Any) -> str:
    return project_pipeline(
        "shardpkg", repo, "Tests in shards.", [suite_stage(confirm={"attempts": 0}, **suite)]
    )


def outcomes(catalog_nights: CatalogNights, key: NightKey) -> dict[str, str]:
    with night_store(catalog_nights.home) as store:
        return {c.node_id: c.outcome for c in store.test_cases(key, "tests")}


@pytest.mark.slow
def test_shards_run_at_once_a_killed_one_re_runs_alone_and_the_report_equals_an_unsharded_one(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    runs, kills = tmp_path / "killer-runs", tmp_path / "kills"
    repo = tmp_path / "upstream" / "shardpkg"
    commit_files(repo, {**PROJECT, "tests/test_c.py": KILLER.format(runs=str(runs), kills=str(kills))})

    unsharded, stages, outcome = catalog_nights.run(pipeline(repo), "2026-11-03")
    assert not outcome.succeeded and stages["tests"].detail == "7/8 passed (1 failed)"

    kills.write_text("2")  # the killer's first run tonight (its second in all) kills its shard's pytest
    key, stages, outcome = catalog_nights.run(pipeline(repo, shards=3), "2026-11-04")
    assert not outcome.succeeded  # test_fails still fails, in whichever shard it ran
    assert stages["tests"].detail == "7/8 passed (1 failed); 3 shards (1 re-run)"
    assert outcomes(catalog_nights, key) == outcomes(catalog_nights, unsharded)
    assert runs.read_text() == "3"  # unsharded once, then the killed shard's two attempts

    folder = catalog_nights.home / "artefacts/shardpkg/2026-11-04/cpu/tests"
    shards = json.loads((folder / "manifest.json").read_text())["shards"]
    assert shards["count"] == 3 and shards["history_nights"] == 1  # planned from the unsharded night
    attempts = {s["index"]: [a["lost"] for a in s["attempts"]] for s in shards["shards"]}
    [killed] = [i for i, lost in attempts.items() if len(lost) == 2]
    assert attempts[killed][0].startswith("pytest exited with -9") and attempts[killed][1] is None
    assert all(lost == [None] for i, lost in attempts.items() if i != killed)  # the others ran once
    assert shards["merge"] == {
        "planned": 8,
        "not_run": 0,
        "not_run_named": [],
        "duplicates": 0,
        "duplicates_named": {},
        "unplanned": 0,
        "unplanned_named": [],
    }
    plan = json.loads((folder / "shard-plan.json").read_text())
    # Every file once, whole or split by test (the planner splits a file longer than a shard's
    # share, and these last milliseconds): 8 tests in all.
    units = [u for s in plan["shards"] for u in s["units"]]
    assert sum(TESTS_IN.get(u, 1) for u in units) == 8 and len(set(units)) == len(units)
    assert {u.partition("::")[0] for u in units} == set(TESTS_IN)
    assert (folder / f"junit-shard-{killed}-try-2.xml").is_file()

    # Killed on every attempt: its tests are reported as not run (never as passed), and the
    # tests_passed check fails on them even though nothing failed.
    runs.unlink()
    kills.write_text("99")
    fixed = {**PROJECT, "tests/test_a.py": "def test_value():\n    pass\n\n\ndef test_fails():\n    pass\n"}
    commit_files(repo, {**fixed, "tests/test_c.py": KILLER.format(runs=str(runs), kills=str(kills))})
    key, stages, outcome = catalog_nights.run(pipeline(repo, shards=3, shard_retries=1), "2026-11-05")
    assert not outcome.succeeded
    assert runs.read_text() == "2"
    # The killer's shard may hold another file too: the plan follows the measured milliseconds.
    plan = json.loads(
        (catalog_nights.home / "artefacts/shardpkg/2026-11-05/cpu/tests/shard-plan.json").read_text()
    )
    [lost_units] = [
        s["units"] for s in plan["shards"] if any(u.startswith("tests/test_c.py") for u in s["units"])
    ]
    lost = sum(TESTS_IN.get(unit, 1) for unit in lost_units)
    assert str(stages["tests"].detail).startswith(
        f"{8 - lost}/8 passed; 3 shards (1 re-run); {lost} of 8 planned tests did not run"
    )
    got = outcomes(catalog_nights, key)
    assert got["tests.test_c::test_killer"] == got["tests.test_c::test_after_the_killer"] == "skipped"
    assert sum(outcome == "skipped" for outcome in got.values()) == lost
    with night_store(catalog_nights.home) as store:
        [check] = [c for c in store.checks(key) if c.name == "tests_passed"]
        assert not check.passed and f"{lost} of 8 planned tests did not run" in check.description
        [case] = [c for c in store.test_cases(key, "tests", outcomes=["skipped"]) if c.name == "test_killer"]
        assert case.message is not None and case.message.startswith("not run: shard")


@pytest.mark.slow
def test_a_third_party_suite_in_shards_reports_what_it_reports_unsharded(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    """itsdangerous's whole suite (the project's own selection), once as one pytest and once in
    three shards in the same night: the same tests with the same outcomes, test by test."""
    upstream = tmp_path / "upstream" / "itsdangerous"
    shutil.copytree(PROJECTS / "itsdangerous", upstream)
    commit_folder(upstream, "itsdangerous as released")
    suites = {
        "tests": (WHOLE_SUITE, LOCAL_SUITE),
        "tests_sharded": ("The whole suite in three shards.", {**LOCAL_SUITE, "shards": 3}),
    }
    environment = {"requirements": ["requirements/tests.txt"]}
    text = pipeline_text(third_party_pipeline("itsdangerous", upstream, environment, suites))
    key, stages, outcome = catalog_nights.run(text, "2026-11-03")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
    with night_store(catalog_nights.home) as store:
        whole = {c.node_id: c.outcome for c in store.test_cases(key, "tests")}
        sharded = {c.node_id: c.outcome for c in store.test_cases(key, "tests_sharded")}
    assert len(whole) > 250 and sharded == whole
    assert stages["tests_sharded"].detail == f"{len(whole)}/{len(whole)} passed; 3 shards"
    manifest = catalog_nights.home / "artefacts/itsdangerous/2026-11-03/cpu/tests_sharded/manifest.json"
    shards = json.loads(manifest.read_text())["shards"]
    assert shards["merge"]["planned"] == len(whole) and shards["merge"]["not_run"] == 0
    assert [len(s["attempts"]) for s in shards["shards"]] == [1, 1, 1]


# Each test writes when it ran and which card it saw: two shards on one card must take turns.
CARD_USER = """import json, os, pathlib, time

def test_{name}():
    began = time.time()
    time.sleep(1.5)
    pathlib.Path({spans!r}, "{name}.json").write_text(
        json.dumps([began, time.time(), os.environ.get("CUDA_VISIBLE_DEVICES")])
    )
"""


@pytest.mark.slow
def test_gpu_shards_on_a_one_card_host_take_turns_on_it(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on the H200 host (issue 39's GPU night): a 1-GPU suite in 2 shards on a host with one card
    runs its shards one after the other on card 0, never both on it; while another stage holds the
    card the first shard waits, and that wait is recorded apart from its run."""
    fake_gpu_host(monkeypatch, tmp_path, "h200x1")
    spans = tmp_path / "spans"
    spans.mkdir()
    files = {f"tests/test_{n}.py": CARD_USER.format(name=n, spans=str(spans)) for n in ("a", "b")}
    repo = tmp_path / "upstream" / "cardpkg"
    project = flit_project(
        "cardpkg", "Tests that each need the one card.", {"cardpkg/__init__.py": "", **files}
    )
    commit_files(repo, project)
    text = project_pipeline(
        "cardpkg", repo, "A 1-GPU suite in 2 shards.", [suite_stage(shards=2, min_gpus=1)]
    )
    folder = catalog_nights.home / "artefacts/cardpkg/2026-11-03/cpu/tests"
    holding, collected = threading.Event(), folder / "collect.log"

    def another_stage_holds_the_card() -> None:  # as the night's benchmark held it on the H200
        with GpuLeases(catalog_nights.home / "gpu-leases").hold(
            probe_gpus(), 1, owner="benchmarks", timeout_s=5
        ):
            holding.set()
            deadline = time.monotonic() + 120
            while not collected.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.5)  # the shards are planned and the first asks for the card meanwhile

    holder = threading.Thread(target=another_stage_holds_the_card)
    holder.start()
    assert holding.wait(10)
    _, stages, outcome = catalog_nights.run(text, "2026-11-03")
    holder.join()

    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
    assert stages["tests"].detail == "2/2 passed; 2 shards"
    ran = sorted(json.loads(f.read_text()) for f in spans.glob("*.json"))
    assert [card for _, _, card in ran] == ["0", "0"]
    (_, first_end, _), (second_start, _, _) = ran
    assert second_start >= first_end  # never both on the card
    attempts = [
        s["attempts"][0] for s in json.loads((folder / "manifest.json").read_text())["shards"]["shards"]
    ]
    assert [a["devices"] for a in attempts] == [["0"], ["0"]]
    waited = sorted(a["waited_s"] for a in attempts)
    assert waited[0] < 1.0 <= waited[1]  # the first shard waited for the benchmark, the second did not
    assert all(a["seconds"] >= a["waited_s"] + 1.5 for a in attempts)  # its run is the rest


SLOW_C = "import time\n\n\ndef test_slow():\n    time.sleep(4)\n\n\ndef test_after():\n    pass\n"


@pytest.mark.docker
@pytest.mark.slow
def test_in_the_image_each_shard_is_a_container_and_a_killed_one_runs_again_alone(
    catalog_nights: CatalogNights,
    tmp_path: Path,
    wheelhouse: Path,
    docker_engine: DockerEngine,
    base_image: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two shards of the suite as containers of the night's image on the runner's engine; the
    container of the shard holding test_c.py is killed (`docker kill`, as a lost node) while it
    runs: that shard alone runs again, in a fresh container, and the report has every test once."""
    monkeypatch.setenv("DOCKER_HOST", docker_engine.host)
    # The label's two hosts: this machine's one engine under a second address (one engine is what
    # this machine has); shards take them in turn, and a re-run goes to the other.
    second = docker_engine.host.replace("/docker.sock", "/./docker.sock")
    assert second != docker_engine.host
    pool = {"hosts": {IMAGE_RUNNER: {"docker_host": docker_engine.host, "more_engines": [second]}}}
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
    monkeypatch.setenv("NIGHTLY_RUNNER_POOL", str(tmp_path / "pool.yaml"))
    repo = tmp_path / "upstream" / "shardpkg"
    commit_files(repo, {**PROJECT, "tests/test_c.py": SLOW_C})
    stages = [suite_stage(IMAGE_RUNNER, confirm={"attempts": 0}, shards=2)]
    text = project_pipeline(
        "shardpkg", repo, "Tests in shards, in the image.", stages, environment=IMAGE_STAGE
    )
    killed: list[str] = []
    stop = threading.Event()

    def kill_the_slow_shard_once() -> None:
        client = docker_engine.client()
        while not stop.is_set() and not killed:
            for container in client.containers.list():
                command = container.attrs["Config"]["Cmd"] or []
                if "tests/test_c.py" in command and "--collect-only" not in command:
                    time.sleep(1)  # it has started its tests
                    container.kill()
                    killed.append(container.id)
                    break
            time.sleep(0.1)

    killer = threading.Thread(target=kill_the_slow_shard_once)
    killer.start()
    try:
        key, stages_run, outcome = catalog_nights.run(text, "2026-11-03")
    finally:
        stop.set()
        killer.join()
    assert killed, "the slow shard's container was never seen"
    assert not outcome.succeeded  # test_a.py's real failure
    assert stages_run["tests"].detail == "7/8 passed (1 failed); 2 shards (1 re-run)"
    shards = json.loads(
        (catalog_nights.home / "artefacts/shardpkg/2026-11-03/cpu/tests/manifest.json").read_text()
    )["shards"]
    attempts = {s["index"]: [a["lost"] for a in s["attempts"]] for s in shards["shards"]}
    assert sorted(len(lost) for lost in attempts.values()) == [1, 2]
    engines = {s["index"]: [a["engine"] for a in s["attempts"]] for s in shards["shards"]}
    assert engines[1][0] == docker_engine.host and engines[2][0] == second  # in turn
    [moved] = [e for e in engines.values() if len(e) == 2]
    assert moved[1] != moved[0]  # the killed shard's re-run went to the other host
    [lost_first] = [lost[0] for lost in attempts.values() if len(lost) == 2]
    assert "137" in lost_first  # killed
    assert shards["merge"]["planned"] == 8 and shards["merge"]["not_run"] == 0
    got = outcomes(catalog_nights, key)
    assert len(got) == 8 and got["tests.test_c::test_slow"] == "passed"
