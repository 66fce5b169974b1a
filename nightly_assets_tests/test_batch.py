"""Batch scheduler (local for real; Slurm's argv and parsing here, Slurm for real in test_slurm.py),
deploy, sweep and report."""

import csv
import datetime as dt
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.batch.deploy import DeployError, current_release, deploy, releases
from nightly_assets.batch.report import summarise, write_report
from nightly_assets.batch.resources import (
    BatchJobError,
    BatchSchedulerResource,
    require_output,
    require_success,
)
from nightly_assets.batch.schedulers import JobRequest, JobStatus, LiveJob, SchedulerError, check_submission
from nightly_assets.batch.slurm import (
    SlurmScheduler,
    parse_live_jobs,
    parse_sacct,
    parse_sbatch,
    parse_scontrol,
    sacct_argv,
    sbatch_argv,
    slurm_time,
)
from nightly_assets.batch.sweep import (
    RowStatus,
    SweepConfigError,
    SweepPoint,
    SweepRow,
    command_for,
    expand_grid,
    parse_metric,
    run_sweep,
)
from nightly_assets.batch.toy_benchmark import toy_benchmark_argv
from nightly_assets.batch.watch import never_starts
from nightly_assets_tests.waiting import wait_for

WALLTIME = dt.timedelta(seconds=30)
TOY = toy_benchmark_argv(0.4)  # long enough for jobs to overlap


@pytest.fixture
def batch(tmp_path: Path) -> Iterator[BatchSchedulerResource]:
    resource = BatchSchedulerResource(
        spool_dir=str(tmp_path / "spool"), poll_interval_s="0.05", kill_grace_s=0.5
    )
    yield resource
    # No job of a test outlives it, whatever the test did.
    for job_dir in (tmp_path / "spool" / "jobs").glob("*"):
        if not resource.status(job_dir.name).finished:
            resource.cancel(job_dir.name)


def _final(batch: BatchSchedulerResource, job_id: str, timeout_s: float = 15) -> JobStatus:
    def ended() -> JobStatus | None:
        status = batch.status(job_id)
        return status if status.finished else None

    return wait_for(f"job {job_id} to end", ended, timeout_s, 0.05)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's reaper may be slow)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone(pid: int, timeout_s: float = 5) -> bool:
    deadline = time.monotonic() + timeout_s
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid)


def _wait_for_file(path: Path, timeout_s: float = 10) -> str:
    def written() -> str | None:
        return path.read_text().strip() if path.is_file() else None

    return wait_for(f"{path} to be written", written, timeout_s, 0.05)


# --- local scheduler -------------------------------------------------------------------------


def test_passing_job_runs_with_arguments_untouched_by_a_shell(batch: BatchSchedulerResource) -> None:
    lines: list[str] = []
    hostile = "a; echo pwned $(id) `id` 'q' \"d\" \n b"
    result = batch.run_job(
        "hello", ["printf", "[%s]\n", hostile, "session ok"], walltime=WALLTIME, log=lines.append
    )
    assert result.status.state == "done" and result.status.exit_code == 0
    assert result.stdout_text() == f"[{hostile}]\n[session ok]\n"
    assert result.output.stdout.name == "stdout" and result.output.stderr.read_text() == ""
    assert any(line.endswith(": done") for line in lines), lines
    require_output(result, "session ok")


def test_failing_job_reports_its_exit_code(batch: BatchSchedulerResource) -> None:
    result = batch.run_job("boom", ["sh", "-c", "echo going down >&2; exit 7"], walltime=WALLTIME)
    assert (result.status.state, result.status.exit_code, result.status.reason) == (
        "failed",
        7,
        "exit code 7",
    )
    with pytest.raises(BatchJobError, match=rf"batch job {result.job_id} failed: exit code 7\n"):
        require_success(result)
    with pytest.raises(BatchJobError, match="going down"):
        require_output(result, "session ok")


def test_walltime_exceeded_kills_the_whole_process_group(
    batch: BatchSchedulerResource, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    script = 'sleep 60 & echo $! > "$PID_FILE"; wait'
    result = batch.run_job(
        "long", ["sh", "-c", script], walltime=dt.timedelta(seconds=1), env={"PID_FILE": str(pid_file)}
    )
    assert result.status.state == "failed"
    assert result.status.reason.startswith("walltime exceeded")
    assert _gone(int(pid_file.read_text())), "the job's background child survived its walltime"


def test_another_resource_instance_polls_a_job_submitted_earlier(tmp_path: Path) -> None:
    spool = str(tmp_path / "spool")
    first = BatchSchedulerResource(spool_dir=spool, poll_interval_s="0.05")
    job_id = first.submit("later", ["sh", "-c", "sleep 0.3; echo from the past"], walltime=WALLTIME)
    del first  # the orchestrator restarts
    second = BatchSchedulerResource(spool_dir=spool, poll_interval_s="0.05")
    status = second.wait(job_id)
    assert status.state == "done"
    assert second.output(job_id).stdout.read_text() == "from the past\n"
    with pytest.raises(SchedulerError, match=re.escape("no local batch job '../jobs'")):
        second.status("../jobs")
    with pytest.raises(SchedulerError, match="no local batch job '20990101T000000-00000000'"):
        second.status("20990101T000000-00000000")


def test_interrupted_run_job_cancels_its_job(batch: BatchSchedulerResource, tmp_path: Path) -> None:
    pid_file = tmp_path / "job.pid"
    submitted: list[str] = []

    def interrupt_once_running(line: str) -> None:
        if line.endswith("submitted: sleeper on 1 node(s), walltime 0:00:30"):
            submitted.append(line.split()[2])
        if line.endswith(": running"):
            _wait_for_file(pid_file)  # the job has started for real
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        batch.run_job(
            "sleeper",
            ["sh", "-c", 'echo $$ > "$PID_FILE"; exec sleep 60'],
            walltime=WALLTIME,
            env={"PID_FILE": str(pid_file)},
            log=interrupt_once_running,
        )
    status = _final(batch, submitted[0])
    assert (status.state, status.reason) == ("failed", "cancelled")
    assert _gone(int(pid_file.read_text()))


def test_lost_supervisor_is_reported_and_cancel_still_kills_the_job(
    batch: BatchSchedulerResource, tmp_path: Path
) -> None:
    pid_file = tmp_path / "job.pid"
    job_id = batch.submit(
        "orphan",
        ["sh", "-c", 'echo $$ > "$PID_FILE"; exec sleep 60'],
        walltime=WALLTIME,
        env={"PID_FILE": str(pid_file)},
    )
    job_pid = int(_wait_for_file(pid_file))
    job_dir = Path(batch.spool_dir) / "jobs" / job_id
    os.kill(int((job_dir / "supervisor.pid").read_text()), signal.SIGKILL)  # e.g. the node rebooted
    status = _final(batch, job_id)
    assert status.reason == "lost: its supervisor process is gone"
    batch.cancel(job_id)
    assert _gone(job_pid)


def test_bad_submissions_are_refused_with_the_reason(batch: BatchSchedulerResource) -> None:
    with pytest.raises(SchedulerError, match="'BAD-NAME' is not a valid name"):
        batch.submit("x", ["true"], walltime=WALLTIME, env={"BAD-NAME": "1"})
    with pytest.raises(BatchJobError, match=r"NIGHTLY_JOB_ARGC.*reserved"):
        batch.submit("x", ["true"], walltime=WALLTIME, env={"NIGHTLY_JOB_ARGC": "1"})
    with pytest.raises(
        BatchJobError, match=r"\['SBATCH_PARTITION', 'SLURM_CONF'\] would steer the scheduler"
    ):
        batch.submit("x", ["true"], walltime=WALLTIME, env={"SLURM_CONF": "/x", "SBATCH_PARTITION": "p"})
    with pytest.raises(SchedulerError, match="job name 'a b': expected letters, digits"):
        batch.submit("a b", ["true"], walltime=WALLTIME)
    with pytest.raises(BatchJobError, match="argument list is empty"):
        batch.submit("x", [], walltime=WALLTIME)
    with pytest.raises(SchedulerError, match="nodes must be a positive integer, got 0"):
        batch.submit("x", ["true"], walltime=WALLTIME, nodes=0)
    with pytest.raises(SchedulerError, match="walltime must be positive"):
        batch.submit("x", ["true"], walltime=dt.timedelta(0))


def test_sanity_check_names_the_job_and_quotes_the_output(batch: BatchSchedulerResource) -> None:
    result = batch.run_job("sanity", ["echo", "session broken"], walltime=WALLTIME)
    with pytest.raises(BatchJobError) as raised:
        require_output(result, "session ok")
    message = str(raised.value)
    assert f"batch job {result.job_id} succeeded but its output does not contain 'session ok'" in message
    assert "session broken" in message


def test_resource_runs_a_job_inside_a_dagster_asset(tmp_path: Path) -> None:
    @dg.asset
    def sanity_job(context: dg.AssetExecutionContext, batch: BatchSchedulerResource) -> str:
        result = batch.run_job("sanity", ["echo", "session ok"], walltime=WALLTIME, log=context.log.info)
        require_output(result, "session ok")
        return result.job_id

    resource = BatchSchedulerResource(spool_dir=str(tmp_path / "spool"), poll_interval_s="0.05")
    outcome = dg.materialize([sanity_job], resources={"batch": resource})
    job_id = outcome.output_for_node("sanity_job")
    assert resource.status(job_id).state == "done"


# --- deploy ----------------------------------------------------------------------------------


def _build(root: Path, text: str) -> Path:
    (root / "lib").mkdir(parents=True, exist_ok=True)
    (root / "lib" / "tf.py").write_text(text)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin" / "python").is_symlink():
        (root / "bin" / "python").symlink_to("/usr/bin/python3")
    return root


def test_deploy_copies_the_build_and_points_current_at_it(tmp_path: Path) -> None:
    build, release_root = _build(tmp_path / "build", "v1"), tmp_path / "releases"
    release = deploy(build, release_root, dt.date(2026, 11, 3))
    assert release.path == release_root / "2026-11-03" and release.is_current
    assert (release.path / "lib" / "tf.py").read_text() == "v1"
    assert os.readlink(release.path / "bin" / "python") == "/usr/bin/python3"
    assert current_release(release_root) == "2026-11-03"
    assert (release_root / "current" / "lib" / "tf.py").read_text() == "v1"

    _build(build, "v2")  # a re-run of the same night replaces its release
    deploy(build, release_root, "2026-11-03")
    assert (release_root / "current" / "lib" / "tf.py").read_text() == "v2"
    assert sorted(p.name for p in release_root.iterdir()) == ["2026-11-03", "current"]


def test_a_failed_copy_leaves_the_releases_as_they_were(tmp_path: Path) -> None:
    build, release_root = _build(tmp_path / "build", "good"), tmp_path / "releases"
    deploy(build, release_root, "2026-11-03")
    _build(build, "half")

    def disk_full(src: str, dst: str) -> object:
        raise OSError(28, "No space left on device")

    for night in ("2026-11-04", "2026-11-03"):
        with pytest.raises(OSError, match="No space left"):
            deploy(build, release_root, night, copy_function=disk_full)
        assert sorted(p.name for p in release_root.iterdir()) == ["2026-11-03", "current"]
        assert (release_root / "current" / "lib" / "tf.py").read_text() == "good"


def test_retention_keeps_the_newest_current_and_the_backfilled(tmp_path: Path) -> None:
    build, release_root = _build(tmp_path / "build", "x"), tmp_path / "releases"
    for day in range(1, 6):
        release = deploy(build, release_root, dt.date(2026, 11, day), keep=2)
        assert (release_root / "current").resolve() == release.path.resolve()
    assert releases(release_root) == ["2026-11-04", "2026-11-05"]
    assert [p.name for p in release.removed] == ["2026-11-03"]

    backfill = deploy(build, release_root, dt.date(2026, 10, 1), keep=2)
    assert not backfill.is_current and current_release(release_root) == "2026-11-05"
    assert releases(release_root) == ["2026-10-01", "2026-11-04", "2026-11-05"]


@pytest.mark.parametrize(
    ("night", "keep", "message"),
    [
        ("../escape", 3, "release name '../escape'"),
        ("current", 3, "release name 'current'"),
        ("n1", 0, "keep must"),
    ],
)
def test_deploy_refuses_bad_input(tmp_path: Path, night: str, keep: int, message: str) -> None:
    with pytest.raises(DeployError, match=re.escape(message)):
        deploy(_build(tmp_path / "build", "x"), tmp_path / "releases", night, keep=keep)
    with pytest.raises(DeployError, match=r"build dir .*missing does not exist"):
        deploy(tmp_path / "missing", tmp_path / "releases", "n1")


# --- sweep -----------------------------------------------------------------------------------

GRID = {"trials": [1, 2], "nodes": [1, 2], "ranks_per_node": [1, 2]}


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ([1, 2], "expected a mapping"),
        ({**GRID, "gpus": [1]}, "unknown key(s) ['gpus']"),
        ({"trials": [1], "nodes": [1]}, "missing key(s) ['ranks_per_node']"),
        ({**GRID, "nodes": []}, "grid.nodes: expected a non-empty list, got []"),
        ({**GRID, "nodes": 4}, "grid.nodes: expected a non-empty list, got 4"),
        ({**GRID, "ranks_per_node": [1, 0]}, "grid.ranks_per_node: 0 is not a positive integer"),
        ({**GRID, "trials": ["2"]}, "grid.trials: '2' is not a positive integer"),
        ({**GRID, "trials": [True]}, "grid.trials: True is not a positive integer"),
        ({**GRID, "nodes": [2, 2]}, "grid.nodes: duplicate values in [2, 2]"),
    ],
)
def test_grid_validation_names_the_bad_key_and_value(grid: object, message: str) -> None:
    with pytest.raises(SweepConfigError, match=re.escape(message)):
        expand_grid(grid)


def test_grid_expands_to_every_point_and_placeholders_stay_one_argument() -> None:
    points = expand_grid(GRID)
    assert len(points) == 8 and len(set(points)) == 8
    assert points[0] == SweepPoint(nodes=1, ranks_per_node=1, trial=1)
    argv = command_for(["srun", "-N", "{nodes}", "--ntasks={ranks}", "x; rm -rf {trial} $(id)"], points[-1])
    assert argv == ["srun", "-N", "2", "--ntasks=4", "x; rm -rf 2 $(id)"]
    with pytest.raises(SweepConfigError, match=re.escape("unknown placeholder {gpus}")):
        command_for(["bench", "--gpus={gpus}"], points[0])


def test_parse_metric_takes_the_last_json_line_with_the_metric() -> None:
    out = 'warmup\n{"images_per_sec": 1.5}\nnot json {\n{"images_per_sec": 2}\n{"other": 3}\n'
    assert parse_metric(out, "images_per_sec") == 2.0
    assert parse_metric('{"images_per_sec": "fast"}\n{"images_per_sec": NaN}', "images_per_sec") is None
    assert parse_metric("", "images_per_sec") is None


def test_sweep_gives_one_row_per_point_and_a_failed_point_is_a_row(
    batch: BatchSchedulerResource, tmp_path: Path
) -> None:
    points = expand_grid(GRID)
    rows = run_sweep(batch, points, [*TOY, "--fail-on", "2:2:1"], walltime=WALLTIME, max_concurrent_jobs=3)
    assert [row.point for row in rows] == points
    failed = [row for row in rows if row.status == "failed"]
    assert [row.point for row in failed] == [SweepPoint(2, 2, 1)]
    assert failed[0].job_id and "exit code 3" in failed[0].message and "as asked" in failed[0].message
    assert all(
        row.value and row.value > 0 and row.duration_s is not None for row in rows if row.status == "ok"
    )
    assert len({row.job_id for row in rows}) == 8

    # The concurrency limit, from the jobs' own records: never more than 3 submitted and unfinished.
    jobs = [json.loads(p.read_text()) for p in (tmp_path / "spool" / "jobs").glob("*/job.json")]
    for job in jobs:
        overlapping = [o for o in jobs if o["submitted_at"] <= job["submitted_at"] < o["ended_at"]]
        assert len(overlapping) <= 3

    files = write_report(rows, tmp_path / "report", title="tf_theta 2026-11-03")
    assert files.pdf.read_bytes().startswith(b"%PDF")
    assert len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", files.pdf.read_bytes())) == files.pages == 3
    with files.csv.open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 8
    assert [
        r["status"] for r in table if (r["nodes"], r["ranks_per_node"], r["trial"]) == ("2", "2", "1")
    ] == ["failed"]
    markdown = files.markdown.read_text()
    assert "7 of 8 points measured (1 failed)." in markdown and "## Failed points" in markdown
    assert "| 1 | 1 | 2 | 0 |" in markdown and "| 2 | 2 | 1 | 1 |" in markdown


def test_interrupted_sweep_cancels_the_jobs_in_flight(batch: BatchSchedulerResource) -> None:
    points = expand_grid({"trials": [1], "nodes": [1, 9], "ranks_per_node": [1]})
    command = ["sh", "-c", 'if [ "$NODES" = 9 ]; then exec sleep 60; fi; echo \'{"images_per_sec": 1}\'']

    def interrupt(line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(batch, points, command, walltime=WALLTIME, max_concurrent_jobs=2, log=interrupt)
    jobs = sorted((Path(batch.spool_dir) / "jobs").iterdir())
    assert len(jobs) == 2
    reasons = sorted(_final(batch, job.name).reason for job in jobs)
    # The 9-node job was cancelled, whether the local scheduler had started it yet or not (a busy
    # machine may not have): "cancelled" or "cancelled before it started".
    assert reasons[0] == "" and reasons[1].startswith("cancelled"), reasons


# --- report ----------------------------------------------------------------------------------


def _row(nodes: int, ranks: int, trial: int, value: float | None) -> SweepRow:
    status: RowStatus = "ok" if value is not None else "failed"
    return SweepRow(
        SweepPoint(nodes, ranks, trial), f"j{nodes}{ranks}{trial}", status, value, 1.0, "" if value else "x"
    )


def test_summary_statistics_and_scaling_efficiency() -> None:
    rows = [
        _row(1, 2, 1, 100),
        _row(1, 2, 2, 120),
        _row(2, 2, 1, 198),
        _row(4, 1, 1, 50),
        _row(4, 1, 2, None),
    ]
    stats = {(s.nodes, s.ranks_per_node): s for s in summarise(rows)}
    assert (stats[1, 2].mean, stats[1, 2].min, stats[1, 2].max) == (110, 100, 120)
    assert stats[1, 2].stddev == pytest.approx(14.142, abs=1e-3)
    assert stats[2, 2].efficiency == pytest.approx(0.9) and stats[2, 2].stddev == 0.0
    assert stats[4, 1].efficiency is None  # no 1-node point at 1 rank per node
    assert (stats[4, 1].trials_ok, stats[4, 1].trials_failed) == (1, 1)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [_row(1, 1, 1, None), _row(2, 1, 1, None)],
            "All 2 points of the sweep failed: nothing was measured.",
        ),
        ([], "The sweep produced no points: nothing was measured."),
    ],
)
def test_report_without_measurements_says_so(tmp_path: Path, rows: list[SweepRow], message: str) -> None:
    files = write_report(rows, tmp_path, title="tf_theta")
    assert files.message == message and message in files.markdown.read_text()
    assert files.pdf.read_bytes().startswith(b"%PDF") and files.pages == 1
    assert len(files.csv.read_text().splitlines()) == 1 + len(rows)


# --- Slurm: argv and parsing (the real cluster: test_slurm.py) ------------------------------


def test_sbatch_argv_keeps_hostile_values_as_single_arguments(tmp_path: Path) -> None:
    queue, name = "debug; rm -rf / $(id)", "tf 'sanity' \"job\""
    script = tmp_path / "run.sh"
    request = JobRequest(script, name, 2, dt.timedelta(minutes=10), queue, {"A": "1"}, 4, "proj`x`")
    argv = sbatch_argv(request, tmp_path, ["A", "PATH"])
    assert argv[0] == "sbatch" and argv[-1] == str(script.resolve())
    assert f"--partition={queue}" in argv and f"--job-name={name}" in argv and "--account=proj`x`" in argv
    assert "--nodes=2" in argv and "--ntasks-per-node=4" in argv and "--time=00:10:00" in argv
    assert "--export=A,PATH" in argv and f"--comment=nightly:{request.fingerprint}" in argv
    assert f"--output={tmp_path}/slurm-%j.out" in argv
    assert "--jobs=42" in sacct_argv("42")
    assert [slurm_time(dt.timedelta(seconds=s)) for s in (90.2, 26 * 3600)] == ["00:01:31", "1-02:00:00"]
    # The fingerprint is what the job does: another command is another fingerprint.
    other = JobRequest(script, name, 2, dt.timedelta(minutes=10), queue, {"A": "2"}, 4, "proj`x`")
    assert other.fingerprint != request.fingerprint


def test_a_job_array_is_one_sbatch_with_its_tasks_throttle_and_files(
    tmp_path: Path, batch: BatchSchedulerResource
) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    request = JobRequest(script, "s", 1, dt.timedelta(minutes=5), "q", {}, array=(4, 1, 2), at_once=2)
    argv = sbatch_argv(request, tmp_path, ["PATH"])
    assert "--array=1,2,4%2" in argv and f"--output={tmp_path}/slurm-%A_%a.out" in argv
    assert SlurmScheduler(tmp_path).output("12_4").stdout == tmp_path / "slurm-12_4.out"  # as %A_%a names it
    plain = JobRequest(script, "s", 1, dt.timedelta(minutes=5), "q", {})
    assert not any(a.startswith("--array") for a in sbatch_argv(plain, tmp_path, []))
    assert request.fingerprint != plain.fingerprint
    for bad, message in (
        ((1, 1), "distinct task ids"),
        ((-1,), "distinct task ids"),
        ((), "only for a job array"),
    ):
        with pytest.raises(SchedulerError, match=message):
            check_submission(
                JobRequest(script, "s", 1, dt.timedelta(minutes=5), "q", {}, array=bad, at_once=1)
            )
    # The local scheduler runs plain jobs: an array is refused saying what to do instead.
    with pytest.raises(SchedulerError, match=r"job arrays need a Slurm scheduler .* submit one job per task"):
        batch.submit("s", ["true"], walltime=WALLTIME, array=(1, 2))
    assert not batch.arrays()


def test_slurm_outputs_are_parsed() -> None:
    assert parse_sbatch("4242\n") == "4242" and parse_sbatch("4243;theta\n") == "4243"
    with pytest.raises(SchedulerError, match=r"(?s)sbatch printed no job id.*Batch job submission failed"):
        parse_sbatch("sbatch: error: Batch job submission failed: Invalid account\n")
    # scontrol --oneliner show job, as slurm-wlm 22.05 prints it (fields trimmed).
    shown = {
        "JobState=PENDING Reason=Resources ExitCode=0:0 RunTime=00:00:00": (
            "queued",
            None,
            "pending: Resources",
        ),
        "JobState=RUNNING Reason=None ExitCode=0:0 RunTime=00:00:07": ("running", None, ""),
        "JobState=COMPLETED Reason=None ExitCode=0:0 RunTime=00:00:02": ("done", 0, ""),
        "JobState=FAILED Reason=NonZeroExitCode ExitCode=7:0 RunTime=00:00:01": ("failed", 7, "exit code 7"),
        "JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 RunTime=00:01:19": (
            "failed",
            -15,
            "walltime exceeded",
        ),
        "JobState=CANCELLED Reason=None ExitCode=0:15 RunTime=1-00:00:01": ("failed", -15, "cancelled"),
    }
    for line, (state, code, reason) in shown.items():
        status = parse_scontrol("123", f"JobId=123 JobName=x UserId=root(0) {line} Partition=debug\n")
        assert (status.state, status.exit_code, status.reason) == (state, code, reason), line
    assert parse_scontrol("1", "JobState=CANCELLED ExitCode=0:15 RunTime=1-00:00:01").duration_s == 86401
    assert parse_scontrol("5", "JobId=5 JobState=STOPPED ExitCode=0:0").state == "running"  # resumable
    # An array's parent prints a record per task: the one asked about is read.
    array = "JobId=7 ArrayJobId=7 JobState=FAILED ExitCode=1:0\nJobId=8 ArrayJobId=7 JobState=RUNNING\n"
    assert parse_scontrol("8", array).state == "running" and parse_scontrol("7", array).exit_code == 1
    # An array task has a JobId of its own: `<array>_<task>` is found by ArrayJobId and ArrayTaskId.
    tasks = (
        "JobId=12 ArrayJobId=10 ArrayTaskId=3 JobState=COMPLETED ExitCode=0:0\n"
        "JobId=11 ArrayJobId=10 ArrayTaskId=2 JobState=NODE_FAIL ExitCode=0:0\n"
    )
    assert (
        parse_scontrol("10_2", tasks).reason == "node failure"
        and parse_scontrol("10_3", tasks).state == "done"
    )
    # Reason words with spaces come with underscores in scontrol's one-line form.
    pending = parse_scontrol("9", "JobId=9 JobState=PENDING Reason=ReqNodeNotAvail,_UnavailableNodes:n[1-4]")
    assert never_starts(pending) is None  # a drained node comes back: waited for
    stuck = parse_scontrol("9", "JobId=9 JobState=PENDING Reason=PartitionConfig Dependency=(null)")
    assert never_starts(stuck) == "more than the partition's nodes can give"
    with pytest.raises(SchedulerError, match="printed no JobState"):
        parse_scontrol("123", "slurm_load_jobs error: something else")
    recorded = {
        "COMPLETED|0:0|42": ("done", 0, ""),
        "FAILED|2:0|5": ("failed", 2, "exit code 2"),
        "TIMEOUT|0:0|600": ("failed", 0, "walltime exceeded"),
        "CANCELLED by 1000|0:15|3": ("failed", -15, "cancelled"),
        "OUT_OF_MEMORY|0:125|9": ("failed", -125, "out of memory"),
        "RUNNING|0:0|12": ("running", None, ""),
    }
    for line, (state, code, reason) in recorded.items():
        status = parse_sacct("123", f"123|{line}\n123.batch|{line}\n")
        assert (status.state, status.exit_code, status.reason) == (state, code, reason), line
    assert parse_sacct("123", "").state == "queued"
    assert parse_live_jobs("17|nightly:abc\n18|(null)\n") == [LiveJob("17", "abc"), LiveJob("18", "")]
    # squeue lists an array's tasks one a line (%F: the array's own id on each): the array once.
    assert parse_live_jobs("20|nightly:f\n20|nightly:f\n21|(null)\n") == [
        LiveJob("20", "f"),
        LiveJob("21", ""),
    ]
    with pytest.raises(SchedulerError, match="not a Slurm job id"):
        SlurmScheduler(Path("/tmp/spool")).output("1; scancel -u root")
    with pytest.raises(SchedulerError, match="'%'"):
        SlurmScheduler(Path("/tmp/50%"))


def test_a_live_job_of_an_earlier_attempt_is_adopted_or_replaced(batch: BatchSchedulerResource) -> None:
    """The local scheduler finds live jobs by name as Slurm's squeue does (test_slurm.py)."""
    command = ["sh", "-c", "sleep 1; echo once"]
    first = batch.submit("point-n1", command, walltime=WALLTIME, earlier="adopt")
    lines: list[str] = []
    adopted = batch.run_job("point-n1", command, walltime=WALLTIME, earlier="adopt", log=lines.append)
    assert adopted.job_id == first and adopted.stdout_text() == "once\n"
    assert f"batch job {first} (point-n1) from an earlier attempt is still live: adopted" in lines
    stale = batch.submit("point-n1", command, walltime=WALLTIME)
    fresh = batch.run_job("point-n1", ["echo", "fresh"], walltime=WALLTIME, earlier="adopt")
    assert fresh.job_id != stale and fresh.stdout_text() == "fresh\n"
    assert _final(batch, stale).reason == "cancelled"
