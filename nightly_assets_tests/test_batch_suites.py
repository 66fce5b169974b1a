"""A suite on the batch runner without Slurm (the local batch scheduler runs plain jobs only): each
shard a job of its own, a shard past its walltime lost and re-run alone, then reported not run.
Slurm's job arrays, for real: test_slurm_shards.py."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from nightly_assets.batch.resources import BatchSchedulerResource
from nightly_assets.catalog.suite import Suite
from nightly_assets.runners.batch_suites import BatchPytest, run_array
from nightly_assets.shards.merge import NOT_RUN
from nightly_assets.testing.junit import parse_junit

FILES = {
    "tests/test_a.py": "def test_one():\n    pass\n\n\ndef test_fails():\n    assert 1 == 2\n",
    "tests/test_b.py": "import os, time\n\n\ndef test_slow():\n    if os.environ.get('SLOW'):\n"
    "        time.sleep(60)\n",
}
COLLECTED = ["tests/test_a.py::test_one", "tests/test_a.py::test_fails", "tests/test_b.py::test_slow"]


def _runner(tmp_path: Path, env: dict[str, str]) -> tuple[BatchPytest, list[str]]:
    root = tmp_path / "project"
    for path, text in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (tmp_path / "work").mkdir()
    batch = BatchSchedulerResource(kind="local", spool_dir=str(tmp_path / "spool"), kill_grace_s=1)
    lines: list[str] = []
    walltime = dt.timedelta(seconds=20)
    return BatchPytest(
        batch, Path(sys.executable), root, "p-tests-20261103-cpu", walltime, env, None, lines.append
    ), lines


def test_without_arrays_each_shard_is_a_job_and_the_report_equals_one_job(tmp_path: Path) -> None:
    runner, lines = _runner(tmp_path, {})
    junit = runner.run_one_job(tmp_path / "whole", ["tests"], tmp_path / "whole.xml", runner.walltime)
    whole = {c.node_id: c.outcome for c in parse_junit(junit, "tests").cases}
    assert whole == {
        "tests.test_a::test_one": "passed",
        "tests.test_a::test_fails": "failed",
        "tests.test_b::test_slow": "passed",
    }
    suite = Suite(paths=["tests"], timeout_minutes=1, runner="theta", shards=2)
    sharded = run_array(
        runner,
        suite,
        "tests",
        "theta",
        COLLECTED,
        ({}, 0),
        lambda ids: ids,
        workdir=tmp_path / "work",
        at_once=None,
    )
    assert {c.node_id: c.outcome for c in sharded.report.cases} == whole
    jobs = [a["job"] for r in sharded.records for a in r.attempts]
    assert len(set(jobs)) == 2 and not any("_" in job for job in jobs)  # plain jobs, one a shard
    assert not any("job array" in line for line in lines)


def test_a_shard_past_its_walltime_is_re_run_alone_then_reported_not_run(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, {"SLOW": "1"})
    runner = BatchPytest(**{**runner.__dict__, "walltime": dt.timedelta(seconds=4)})
    suite = Suite(paths=["tests"], timeout_minutes=1, runner="theta", shards=2, shard_retries=1)
    sharded = run_array(
        runner,
        suite,
        "tests",
        "theta",
        COLLECTED,
        ({}, 0),
        lambda ids: ids,
        workdir=tmp_path / "work",
        at_once=None,
    )
    [(index, why)] = sharded.findings.lost.items()
    assert "walltime exceeded" in why
    [record] = [r for r in sharded.records if r.shard.index == index]
    assert len(record.attempts) == 2 and all("walltime exceeded" in a["lost"] for a in record.attempts)
    cases = {c.node_id: c for c in sharded.report.cases}
    assert cases["tests.test_b::test_slow"].message == f"{NOT_RUN}shard {index} of 2 was lost ({why})"
    kept = {n: c.outcome for n, c in cases.items() if n not in sharded.findings.not_run}
    assert kept and "skipped" not in kept.values()  # the other shard's results kept
