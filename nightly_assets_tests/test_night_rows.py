"""One run per night's rows: a re-run of a night that fails at its sources stage leaves only its
own stages in the warehouse, not the earlier run's suites, cases and benchmarks beside them."""

import shutil

import pytest

from nightly_assets_tests.test_demo_night import key, nights  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def test_a_rerun_that_fails_at_sources_keeps_none_of_the_earlier_runs_rows(nights):  # noqa: F811
    first = nights.run("2026-11-03")
    assert first.succeeded
    night = key("2026-11-03")
    assert nights.store.suite_counts(night) and nights.store.row_counts(night)["benchmarks"]

    upstream = nights.home / "git" / "sample" / "nightlysample"
    shutil.move(upstream, upstream.with_name("moved"))
    (upstream / ".git").mkdir(parents=True)  # not a repository: the re-run's fetch fails
    again = nights.run("2026-11-03")
    assert not again.succeeded

    stages = {s.stage: s for s in nights.store.stages(night)}
    # The follow-up run judged the night (flaky_tests) and wrote its summary.
    assert sorted(stages) == ["flaky_tests", "night_summary", "sources"]
    assert stages["sources"].status == "failure" and stages["sources"].run_id == again.run.run_id
    counts = nights.store.row_counts(night)
    for table in ("suites", "test_cases", "benchmarks", "device_facts", "test_verdicts"):
        assert counts[table] == 0, table
    assert {c.stage for c in nights.store.checks(night)} == {"flaky_tests"}  # the re-run's own
    row = nights.store.night(night)
    assert row is not None and row.status == "failure"
    summary = (nights.home / "artefacts/demo/2026-11-03/cpu/night_summary/summary.md").read_text()
    assert "| tests_unit | skipped |" in summary and "| Suite |" not in summary

    shutil.rmtree(upstream)
    shutil.move(upstream.with_name("moved"), upstream)
    third = nights.run("2026-11-03")  # a run that gets through: its own rows, whole
    assert third.succeeded
    assert {s.run_id for s in nights.store.stages(night) if s.stage != "night_summary"} == {third.run.run_id}
    assert nights.store.suite_counts(night)["tests_unit"]["passed"] == 7
