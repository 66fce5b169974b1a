"""Nothing lost: a good night re-run with its repository unreachable keeps its rows, status line,
summary and artefacts; the failed re-run is said beside them, in the night's record of its runs;
a later re-run that gets through replaces the night with its own results."""

import shutil

import dagster as dg
import pytest

from nightly_assets.cli.queries import status_rows
from nightly_assets_tests.test_demo_night import key, nights  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow
TESTED = ("suites", "test_cases", "benchmarks", "device_facts", "checks")


def test_a_re_run_that_fails_at_sources_keeps_the_good_nights_evidence(nights):  # noqa: F811
    first = nights.run("2026-11-03")
    assert first.succeeded
    night = key("2026-11-03")
    store = nights.store
    before = store.row_counts(night)
    assert all(before[t] > 0 for t in TESTED)
    target_dir = nights.home / "artefacts/demo/2026-11-03/cpu"
    checkout = target_dir / "sources/nightlysample"
    summary_file = target_dir / "night_summary/summary.md"
    junit = target_dir / "tests_unit/junit.xml"
    assert checkout.is_dir() and junit.is_file()
    pipeline = nights.catalog.pipelines["demo"]
    [status_before] = status_rows(store, [pipeline])

    upstream = nights.home / "git" / "sample" / "nightlysample"
    shutil.move(upstream, upstream.with_name("moved"))
    (upstream / ".git").mkdir(parents=True)  # not a repository: the re-run's fetch fails
    again = nights.run("2026-11-03")
    assert not again.succeeded

    # Dagster: sources Failed (the latest attempt), the rest materialized by the first run.
    assert nights.materialized("tests_unit", "2026-11-03") and nights.materialized("release", "2026-11-03")
    # The warehouse: the tests' rows are the first run's, whole; the sources row is the re-run's.
    after = store.row_counts(night)
    for table in TESTED:
        assert after[table] >= before[table], table
    assert store.suite_runs(night)["tests_unit"] == first.run.run_id
    stages = {s.stage: s for s in store.stages(night)}
    assert stages["sources"].status == "failure" and stages["sources"].run_id == again.run.run_id
    assert stages["tests_unit"].status == "success" and stages["tests_unit"].run_id == first.run.run_id
    # `nightly status` says the night failed and still shows what its tests found.
    [status_after] = status_rows(store, [pipeline])
    assert status_after["status"] == "failure" and status_after["tests"] == status_before["tests"]
    # The night's record: both runs, the re-run current, with why it failed.
    runs = store.night_runs(night)
    assert [r.run_id for r in runs] == [again.run.run_id, first.run.run_id]
    assert runs[0].current and runs[0].status == "failure" and runs[1].status == "success"
    [sources_attempt] = [o for o in runs[0].outcomes if o.stage == "sources"]
    assert sources_attempt.status == "failure" and sources_attempt.artefact
    assert f".runs/{again.run.run_id}/sources" in sources_attempt.artefact

    # The artefacts: the first run's checkout is back where the other stages point; the failed
    # attempt's folder (its log) is kept under .runs/; the JUnit stays.
    assert (checkout / ".git").exists() and junit.is_file()
    assert (target_dir / ".runs" / again.run.run_id / "sources").is_dir()
    # The summary is written again: the failure beside the first run's results.
    summary = summary_file.read_text()
    assert "| sources | failure |" in summary and "| tests_unit | success |" in summary
    assert "### Runs of this night" in summary and f"`{again.run.run_id[:8]}` (current)" in summary
    assert f"`{first.run.run_id[:8]}` (earlier)" in summary  # whose results the suites table shows
    # The first run's summary is kept beside it.
    kept = list((target_dir / ".runs").glob("*/night_summary/summary.md"))
    assert kept and "success" in kept[0].read_text().splitlines()[0]

    shutil.rmtree(upstream)
    shutil.move(upstream.with_name("moved"), upstream)
    third = nights.run("2026-11-03")  # a run that gets through replaces the night with its own
    assert third.succeeded
    current = {s.stage: s.run_id for s in store.stages(night) if s.stage != "night_summary"}
    assert set(current.values()) == {third.run.run_id}
    assert store.suite_runs(night)["tests_unit"] == third.run.run_id
    assert [r.run_id for r in store.night_runs(night)] == [
        third.run.run_id,
        again.run.run_id,
        first.run.run_id,
    ]
    # The superseded attempts keep their reports, not what the next attempt made again.
    first_unit = target_dir / ".runs" / first.run.run_id / "tests_unit"
    assert (first_unit / "junit.xml").is_file()
    first_sources = target_dir / ".runs" / first.run.run_id / "sources"
    assert first_sources.is_dir() and not (first_sources / "nightlysample").exists()
    assert nights.instance.get_run_by_id(again.run.run_id).status == dg.DagsterRunStatus.FAILURE
