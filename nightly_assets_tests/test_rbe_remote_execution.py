"""The Bazel RBE resource against real remote execution: Debian's bazel-bootstrap 4.2.3 sending its
actions to a BuildGrid executor (SQL scheduler in PostgreSQL) whose worker runs them. The worker's
own record is checked too, so an action that Bazel ran locally would not pass for a remote one."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from nightly_assets.catalog.models import BazelTests
from nightly_assets.rbe import BazelRbeResource, RemoteSettings
from nightly_assets.rbe import bazel as bz
from nightly_assets_tests.peers.bazel import BazelPeer
from nightly_assets_tests.peers.buildgrid import BuildGridExecution, ExecutedAction

pytestmark = pytest.mark.bazel

MakeWorkspace = Callable[[], Path]


def _resource(bazel_peer: BazelPeer, grid: BuildGridExecution) -> BazelRbeResource:
    """Bazel's own action and test environment is enough for the worker: no --action_env,
    --test_env or --remote_default_exec_properties (Bazel 4.2.3 sends an empty platform, which
    BuildGrid's default property set matches with any bot). No fallback: a remote error raises
    rather than passing as a local run."""
    remote = RemoteSettings(executor=grid.url, instance_name=grid.instance_name, fallback_to_local=False)
    return bazel_peer.resource(remote=remote)


def _ran_since(grid: BuildGridExecution, before: int) -> list[ExecutedAction]:
    return grid.executed()[before:]


def test_tests_run_on_the_remote_worker(
    bazel_peer: BazelPeer,
    buildgrid_execution: BuildGridExecution,
    make_bazel_workspace: MakeWorkspace,
    tmp_path: Path,
) -> None:
    grid = buildgrid_execution
    before = len(grid.executed())
    tests = BazelTests(targets=["//tests:pass_test", "//tests:fail_test"])

    run = _resource(bazel_peer, grid).run_tests(
        make_bazel_workspace(), tests, suite="s", out_dir=tmp_path / "o"
    )

    ran = _ran_since(grid, before)
    assert (run.mode, run.fallback_reason, run.exit_code) == ("remote", None, bz.EXIT_TESTS_FAILED)
    assert f"--remote_executor={grid.url}" in run.command
    assert run.process_counts.get("remote", 0) > 0, run.process_counts
    outcomes = {case.classname: case.outcome for case in run.report.cases}
    assert outcomes["//tests:pass_test"] == "passed"
    assert outcomes["//tests:fail_test"] in {"failed", "error"}
    assert grid.worker_errors() == []
    # The worker ran both tests (test-setup.sh with the test's path), with the exit codes Bazel saw.
    exits = {a.argv[-1]: a.exit_code for a in ran if a.argv and a.argv[0].endswith("test-setup.sh")}
    assert exits == {"tests/pass_test": 0, "tests/fail_test": 1}, ran
    assert len(ran) >= run.process_counts["remote"]
    # Bazel's test.log is the worker's stdout, fetched back from the CAS.
    assert "failing on purpose" in (run.testlogs_dir / "tests" / "fail_test" / "test.log").read_text()


def test_wheels_are_built_on_the_remote_worker(
    bazel_peer: BazelPeer,
    buildgrid_execution: BuildGridExecution,
    make_bazel_workspace: MakeWorkspace,
    tmp_path: Path,
) -> None:
    """A genrule's declared file and a rule's declared folder (a Tree) come back from the worker."""
    grid = buildgrid_execution
    before = len(grid.executed())
    dest = tmp_path / "dist"
    targets = ["//wheels:nightlybazel_wheel", "//wheels:house"]

    run = _resource(bazel_peer, grid).build(
        make_bazel_workspace(), targets, out_dir=tmp_path / "o", dest=dest
    )

    ran = _ran_since(grid, before)
    assert (run.mode, run.fallback_reason, run.exit_code) == ("remote", None, bz.EXIT_PASSED)
    assert f"--remote_executor={grid.url}" in run.command
    assert run.process_counts.get("remote", 0) >= 2, run.process_counts
    assert dict(run.by_target) == {
        "//wheels:nightlybazel_wheel": ("nightlybazel-0.1.0-py3-none-any.whl",),
        "//wheels:house": ("nightlybazel_extra-0.2.0-py3-none-any.whl",),
    }
    for wheel in run.outputs:
        assert wheel.parent == dest
        with zipfile.ZipFile(wheel) as archive:
            assert "def answer()" in archive.read(f"{wheel.name.split('-')[0]}/__init__.py").decode()
    assert grid.worker_errors() == []
    # Both actions ran on the worker (python3 there) and gave back a file and a folder.
    [genrule] = [
        a for a in ran if any(p.endswith("/nightlybazel-0.1.0-py3-none-any.whl") for p in a.output_files)
    ]
    [house] = [a for a in ran if any(p.endswith("/wheels/house") for p in a.output_directories)]
    for action in (genrule, house):
        assert (action.exit_code, action.status) == (0, "OK")
        assert any("make_wheel.py" in arg for arg in action.argv), action.argv
