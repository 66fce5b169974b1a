"""Culprit search: the bisection on its own, and a real night whose new failure is bisected to the
commit that broke it by the pipeline's culprit_search stage, started from the sensor's request."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import cast

import dagster as dg
import pytest
from dagster._core.test_utils import freeze_time

from nightly_assets.catalog.loader import load_catalog
from nightly_assets.cli import main
from nightly_assets.culprits.bisect import Verdict, first_bad_commit
from nightly_assets.culprits.probes import pytest_node_id
from nightly_assets.culprits.search import Searcher, Subject
from nightly_assets.definitions import build_definitions
from nightly_assets.resources import resources_for
from nightly_assets.results import NightKey
from nightly_assets.stage_kinds.culprit_search import CulpritSearchParams
from nightly_assets_tests.catalog_files import write_pipeline
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_files, git
from nightly_assets_tests.suite_projects import (
    FLAKY_TESTS,
    Stage,
    flit_project,
    project_pipeline,
    suite_stage,
)

COMMITS = [f"c{i}" for i in range(10)]


def bisect(bad_from: int, skips: frozenset[int] = frozenset(), reproduces: bool = True):
    probed: list[str] = []

    def probe(commit: str) -> tuple[Verdict, str]:
        probed.append(commit)
        index = COMMITS.index(commit)
        if index in skips:
            return "skip", "does not build"
        if index == len(COMMITS) - 1 and not reproduces:
            return "good", "passed"
        return ("bad" if index >= bad_from else "good"), "probe"

    return first_bad_commit(COMMITS, probe), probed


@pytest.mark.parametrize("bad_from", range(10))
def test_bisection_names_the_first_bad_commit_in_log2_probes(bad_from: int) -> None:
    found, probed = bisect(bad_from)
    assert (found.outcome, found.first_bad) == ("found", COMMITS[bad_from])
    assert len(probed) == len(set(probed)) <= 5  # the bad end, then about log2(10)


def test_skipped_commits_are_stepped_around_or_leave_the_candidates() -> None:
    found, _ = bisect(6, skips=frozenset({2, 4}))
    assert (found.outcome, found.first_bad) == ("found", "c6")
    found, _ = bisect(6, skips=frozenset({4, 5}))  # as git bisect: c4 and c5 may be the first bad
    assert found.outcome == "inconclusive" and found.candidates == ["c4", "c5", "c6"]
    found, _ = bisect(5, skips=frozenset({5}))  # the first bad one cannot be built: c5 or c6
    assert found.outcome == "inconclusive" and found.candidates == ["c5", "c6"]
    assert found.describe().startswith("one of 2 commits (c5, c6)")


def test_a_failure_that_does_not_reproduce_at_the_bad_commit_names_none() -> None:
    found, probed = bisect(3, reproduces=False)
    assert (found.outcome, found.first_bad, probed) == ("not reproduced", None, ["c9"])
    found, probed = bisect(3, skips=frozenset({9}))  # the bad night's commit no longer builds
    assert (found.outcome, probed) == ("inconclusive", ["c9"])
    assert found.describe() == "the bad commit itself could not be probed (does not build)"


def test_a_failure_at_the_good_nights_commit_too_names_no_commit() -> None:
    """Something outside the range broke it (a dependency released since): nobody in it is blamed."""
    found = first_bad_commit(COMMITS, lambda commit: ("bad", f"{commit} fails"), good="g")
    assert (found.outcome, found.first_bad) == ("not reproduced", None)
    assert [c for c, _, _ in found.probes][-1] == "g"
    assert found.describe() == "at the good night's commit too (g fails): not this range"


def test_junit_ids_become_pytest_node_ids(tmp_path: Path) -> None:
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_ops.py").write_text("")
    assert pytest_node_id(tmp_path, "tests.unit.test_ops::test_add") == "tests/unit/test_ops.py::test_add"
    assert (
        pytest_node_id(tmp_path, "tests.unit.test_ops.TestOps::test_add[int]")
        == "tests/unit/test_ops.py::TestOps::test_add[int]"
    )
    assert pytest_node_id(tmp_path, "elsewhere.test_x::test_y") == "elsewhere.test_x::test_y"


CULPRITS: Stage = {
    "name": "culprits",
    "kind": "culprit_search",
    "deps": ["flaky_tests"],
    "description": "The first bad commit.",
}


def bisected_pipeline(upstream: Path) -> str:
    return project_pipeline(
        "bisected",
        upstream,
        "A failure bisected to its commit.",
        [suite_stage(), FLAKY_TESTS],
        after_summary=[CULPRITS],
    )


PROJECT = flit_project(
    "bisected",
    "A value, and a test of it.",
    {
        "bisected/__init__.py": '"""The value."""\nVALUE = 1\n',
        "tests/test_value.py": "import bisected\n\n\ndef test_value():\n    assert bisected.VALUE == 1\n",
    },
)


@pytest.mark.slow
def test_a_new_failure_is_bisected_to_the_commit_that_broke_it(
    catalog_nights: CatalogNights,
    tmp_path: Path,
    wheelhouse: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = tmp_path / "upstream" / "bisected"
    commit_files(repo, PROJECT)
    pipeline = bisected_pipeline(repo)
    _, stages, outcome = catalog_nights.run(pipeline, "2026-11-03")
    assert outcome.succeeded and "culprits" not in stages  # not part of the night's run

    # Three commits on 11-04: a README, the one that breaks the value, another README.
    when = "2026-11-04T10:00:00Z"
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    env |= {"GIT_COMMITTER_NAME": "ci", "GIT_COMMITTER_EMAIL": "ci@example.com"}
    for author, path, text, message in [
        ("Ann", "README", "docs\n", "add a README"),
        ("Dana Dev", "bisected/__init__.py", '"""The value."""\nVALUE = 2\n', "make the value two"),
        ("Ann", "README", "more docs\n", "more README"),
    ]:
        (repo / path).write_text(text)
        identity = {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": "a@example.com"}
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(repo), "commit", "-qm", message], check=True, env=env | identity)
    culprit = git(repo, "rev-parse", "HEAD~1")
    key, stages, outcome = catalog_nights.run(pipeline, "2026-11-04")
    assert not outcome.succeeded

    defs = build_definitions(catalog_nights.catalog)
    resources = resources_for("local", catalog_nights.home)
    sensor = defs.resolve_sensor_def("bisected_culprit_search")
    with dg.build_resources({"warehouse": resources["warehouse"], "notifier": resources["notifier"]}) as r:
        with (
            dg.build_sensor_context(
                instance=catalog_nights.instance, resources={"warehouse": r.warehouse}
            ) as ctx,
            freeze_time(dt.datetime(2026, 11, 5, 9, tzinfo=dt.UTC)),
        ):
            # This sensor returns a list of run requests; SensorDefinition's call is typed for any sensor.
            [request] = cast(list[dg.RunRequest], sensor(ctx))
        assert request.partition_key == "2026-11-04|cpu" and request.run_key == "culprits-2026-11-04|cpu"
        # What the sensor's run does, from the command line.
        monkeypatch.setenv("NIGHTLY_CATALOG_DIR", str(catalog_nights.catalog))
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "cli_home"))
        assert main(["culprits", "bisected", "--night", "2026-11-04"]) == 0
        out = capsys.readouterr().out
        assert f"first bad commit bisected {culprit[:10]} Dana Dev: make the value two" in out
        store = r.warehouse.store()
        [found] = store.culprits(key)
        # the night's own rows stay as the night wrote them: no new summary, the night still failed
        assert store.night(key).status == "failure"
        summary = next(s for s in store.stages(key) if s.stage == "night_summary")
        assert summary.run_id == stages["night_summary"].run_id
    assert (found.outcome, found.repo, found.commit, found.author, found.title) == (
        "found",
        "bisected",
        culprit,
        "Dana Dev",
        "make the value two",
    )
    assert found.subject == "tests: tests.test_value::test_value"
    assert [p["verdict"] for p in found.probes] == ["bad", "good", "bad"]  # HEAD, HEAD~2, HEAD~1
    alerts = [json.loads(line) for line in (catalog_nights.home / "alerts.jsonl").read_text().splitlines()]
    lines = [line for a in alerts for line in a["lines"] if "first_bad_commit" in line]
    assert lines == [
        f"culprits:first_bad_commit failed: tests: tests.test_value::test_value: first bad commit "
        f"bisected {culprit[:10]} Dana Dev: make the value two"
    ]


BENCH_STAGES: list[Stage] = [
    {
        "name": "benchmarks",
        "kind": "benchmarks",
        "deps": ["environment"],
        "runner": "local",
        "description": "The cost, as timing JSON.",
        "params": {"command": ["python", "-m", "benched", "{output}"]},
    },
    {"name": "perf_baseline", "kind": "perf_baseline", "deps": ["benchmarks"], "description": "The level."},
]


def benched_pipeline(upstream: Path) -> str:
    description = "A benchmark regression bisected to its commit."
    return project_pipeline("benched", upstream, description, BENCH_STAGES, seed="003")


BENCH_PROJECT = flit_project(
    "benched",
    "A value, and a test of it.",
    {
        "benched/__init__.py": '"""The cost."""\nCOST = 1.0\n',
        # A deterministic "timing": the probe's verdict is the commit's, not the machine's noise.
        "benched/__main__.py": (
            "import json, sys\nfrom benched import COST\n"
            'json.dump({"benchmarks": [{"name": "cost", "value": COST}]}, open(sys.argv[1], "w"))\n'
        ),
    },
)


@pytest.mark.slow
def test_a_benchmark_regression_is_bisected_by_running_the_benchmark_per_probe(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    repo = tmp_path / "upstream" / "benched"
    good = commit_files(repo, BENCH_PROJECT)
    for cost, message in [("1.0", "refactor"), ("1.5", "slow path"), ("1.5", "docs")]:
        (repo / "benched/__init__.py").write_text(f'"""The cost."""\nCOST = {cost}\n# {message}\n')
        git(repo, "commit", "-qam", message)
    bad, culprit = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD~1")
    write_pipeline(catalog_nights.catalog, benched_pipeline(repo))
    pipeline = load_catalog(catalog_nights.catalog).pipelines["benched"]
    resources = resources_for("local", catalog_nights.home)
    with dg.build_resources({k: resources[k] for k in ("warehouse", "git", "builder", "test_runner")}) as r:
        store = r.warehouse.store()
        key = NightKey("benched", dt.date(2026, 11, 6), "cpu")
        for day, sha in [(5, good), (6, bad)]:
            night = NightKey("benched", dt.date(2026, 11, day), "cpu")
            store.record_night(night, run_id="r", status="success", pins={"benched": sha})
        searcher = Searcher(
            pipeline,
            store,
            key,
            tmp_path / "work",
            r.git,
            r.builder,
            r.test_runner,
            CulpritSearchParams(),
            print,
        )
        subject = Subject(None, dt.date(2026, 11, 5), dt.date(2026, 11, 6), benchmark=("cost", 1.0, 1.5))
        found = searcher.search(subject)
    assert (found.outcome, found.commit, found.title) == ("found", culprit, "slow path"), found.detail
    assert [p["why"].split(" (")[0] for p in found.probes] == ["cost 1.5", "cost 1", "cost 1.5"]
