"""Bazel cold against cached run time: the same tests in a fresh output base, first with an empty
remote cache, then with the cache the first run filled (wall time, remote cache hits).

Both runs go through `BazelRbeResource.run_tests` with `remote.cache` on the test peers' BuildGrid
(a fresh, empty CAS per benchmark run), each in its own workspace copy, so each has a fresh output
base and Bazel server and only the remote cache carries over. The workspace holds
BENCH_BAZEL_TESTS (default 4) sh_tests that sleep BENCH_BAZEL_TEST_S seconds (default 2); a
random salt in their script keeps any earlier cache entry out. An untimed local run first warms
Bazel's install base and the page cache. Needs `bazel` on PATH (Debian's bazel-bootstrap) and
BuildGrid's `bgd` (`pip install buildgrid`); Bazel works offline through the Bazel peer's
stand-in repositories.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nightly_assets.catalog.models import BazelTests
from nightly_assets.rbe import BazelRbeResource, BazelTestRun, RemoteSettings
from nightly_assets_tests.peers import bazel as bazel_peer
from nightly_assets_tests.peers import buildgrid as bg
from nightly_assets_tests.peers.process import stop_process

TESTS = BazelTests(targets=["//bench/..."])


class _Skip(Exception):
    """No Bazel or no BuildGrid: the benchmark prints why and measures nothing."""


@contextmanager
def _buildgrid(root: Path) -> Iterator[bg.BuildGrid]:
    """A BuildGrid remote cache on a free port, as the `buildgrid` fixture starts it."""
    try:
        grid, process = bg.start_buildgrid(root)
    except pytest.fail.Exception as exc:  # no `bgd`
        raise _Skip(str(exc)) from None
    try:
        yield grid
    finally:
        stop_process(process, bg.STOP_TIMEOUT_S)


def _workspace(path: Path, peer: bazel_peer.BazelPeer, tests: int, sleep_s: float, salt: str) -> Path:
    """A workspace of `tests` sh_tests that each sleep `sleep_s`; `salt` makes their actions new."""
    (path / "bench").mkdir(parents=True)
    (path / "WORKSPACE").write_text('workspace(name = "bench")\n')
    (path / ".bazelrc").write_text(peer.bazelrc())
    script = path / "bench" / "sleep.sh"
    script.write_text(f'#!/bin/sh\n# salt {salt}\nsleep "$1"\n')
    script.chmod(0o755)
    (path / "bench" / "BUILD").write_text(
        "".join(
            f'sh_test(name = "sleep_{i}", size = "small", srcs = ["sleep.sh"], args = ["{sleep_s:g}"])\n'
            for i in range(tests)
        )
    )
    return path


def _run(resource: BazelRbeResource, workspace: Path, out_dir: Path) -> BazelTestRun:
    """`bazel test //bench/...`, then the workspace's server and output base are removed (untimed)."""
    try:
        run = resource.run_tests(workspace, TESTS, suite="bench", out_dir=out_dir)
    finally:
        resource.shutdown(workspace, expunge=True)
    if run.exit_code != 0 or run.report.count("passed") != run.report.total:
        raise RuntimeError(f"bazel test exited {run.exit_code} ({run.mode}): see {run.log_path}")
    return run


def main() -> dict[str, float]:
    tests = int(os.environ.get("BENCH_BAZEL_TESTS", "4"))
    sleep_s = float(os.environ.get("BENCH_BAZEL_TEST_S", "2"))
    print(f"bazel test: {tests} tests of {sleep_s:g} s, fresh output base, cold then cached remote cache")
    binary = shutil.which("bazel")
    try:
        if binary is None:
            raise _Skip("bazel is not on PATH (apt-get install -y bazel-bootstrap)")
        root = bazel_peer.peers_bazel_dir()
        peer = bazel_peer.BazelPeer(
            binary, root / "output_user_root", bazel_peer.write_standins(root / "standins")
        )
        with tempfile.TemporaryDirectory() as tmp, _buildgrid(Path(tmp)) as grid:
            work, salt = Path(tmp), secrets.token_hex(4)
            _run(peer.resource(), _workspace(work / "warmup", peer, tests, 0, salt + "-warmup"), work / "o0")
            remote = RemoteSettings(cache=grid.url, instance_name=grid.instance_name, fallback_to_local=False)
            resource = peer.resource(remote=remote)
            cold = _run(resource, _workspace(work / "cold", peer, tests, sleep_s, salt), work / "o1")
            cached = _run(resource, _workspace(work / "cached", peer, tests, sleep_s, salt), work / "o2")
    except _Skip as exc:
        print(f"  skipped: {exc}")
        return {}
    print("  run       wall   processes  remote cache hits")
    for label, run in (("cold", cold), ("cached", cached)):
        total = run.process_counts.get("total", 0)
        print(f"  {label:<6} {run.wall_time_s:6.2f} s  {total:9d}  {run.remote_cache_hits:17d}")
    print(f"  cold/cached wall time: {cold.wall_time_s / cached.wall_time_s:5.2f}x")
    if cold.remote_cache_hits:
        print(f"  note: the cold run had {cold.remote_cache_hits} remote cache hits (not cold)")
    if cached.remote_cache_hits < tests:
        print(f"  note: the cached run had {cached.remote_cache_hits} remote cache hits for {tests} tests")
    return {"bazel cold/cached": cold.wall_time_s / cached.wall_time_s}


if __name__ == "__main__":
    main()
