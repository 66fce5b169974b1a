"""The Bazel peer: Debian's ``bazel-bootstrap`` (4.2.3) working offline, and copies of the test
workspace (``nightly_assets_tests/data/bazel_workspace``) to run it in.

Offline, Bazel 4.2.3 cannot fetch the repositories its built-in tools load, so a workspace names
local stand-ins with ``common --override_repository=NAME=PATH``: ``remote_coverage_tools`` (no-op
coverage binaries) and ``rules_cc`` / ``rules_java`` / ``rules_proto`` / ``bazel_skylib``, whose
``defs.bzl`` forward to Bazel's native rules. They and the output user root live under
``$NIGHTLY_PEERS_DIR/bazel`` (default ``/tmp/nightly-peers/bazel``). Every workspace copy gets its
own output base (Bazel keys it by path), which is expunged, server included, when the test ends.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nightly_assets.rbe import BazelError, BazelRbeResource

WORKSPACE_SOURCE = Path(__file__).resolve().parent.parent / "data" / "bazel_workspace"
# This machine is small and the tests' builds are short: 1 GB is plenty for these workspaces, and a
# server that lives a minute spends more CPU compiling itself with C2 than it gains (client JIT
# only, one GC thread: test_rbe.py took 63 CPU-s instead of 101, on a 2-core machine where the
# suite is CPU-bound). A nightly build of JAX or TF lives for hours: not the product's default.
JVM_ARGS = ["-Xmx1g", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
MAX_IDLE_SECS = 300  # a server a crashed session leaves behind goes away by itself

_NOOP_SCRIPT = "#!/bin/sh\nexit 0\n"
# The symbols Bazel 4.2.3's own BUILD files load from these repositories (and a few more).
_NATIVE_RULES = {
    "rules_cc": ("cc", "cc_binary cc_import cc_library cc_proto_library cc_test cc_toolchain "
                       "cc_toolchain_suite objc_import objc_library"),
    "rules_java": ("java", "java_binary java_import java_library java_lite_proto_library java_plugin "
                           "java_proto_library java_runtime java_test java_toolchain"),
    "rules_proto": ("proto", "proto_lang_toolchain proto_library"),
}  # fmt: skip


def peers_bazel_dir() -> Path:
    return Path(os.environ.get("NIGHTLY_PEERS_DIR") or "/tmp/nightly-peers") / "bazel"


def _write_if_changed(path: Path, text: str, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    if executable:
        path.chmod(0o755)


def write_standins(root: Path) -> dict[str, Path]:
    """The stand-in repositories under ``root``, by repository name."""
    repos: dict[str, Path] = {}
    coverage = root / "remote_coverage_tools"
    _write_if_changed(coverage / "WORKSPACE", 'workspace(name = "remote_coverage_tools")\n')
    _write_if_changed(coverage / "noop.sh", _NOOP_SCRIPT, executable=True)
    _write_if_changed(
        coverage / "BUILD",
        'package(default_visibility = ["//visibility:public"])\n\n'
        'sh_binary(name = "coverage_report_generator", srcs = ["noop.sh"])\n\n'
        'sh_binary(name = "lcov_merger", srcs = ["noop.sh"])\n',
    )
    repos["remote_coverage_tools"] = coverage
    for name, (package, rules) in _NATIVE_RULES.items():
        repo = root / name
        _write_if_changed(repo / "WORKSPACE", f'workspace(name = "{name}")\n')
        _write_if_changed(repo / "BUILD", "")
        _write_if_changed(repo / package / "BUILD", "")
        forwards = [f"def {rule}(**kwargs):\n    native.{rule}(**kwargs)\n" for rule in rules.split()]
        if name == "rules_proto":
            forwards.append("ProtoInfo = ProtoInfo\n")
        _write_if_changed(repo / package / "defs.bzl", "\n".join(forwards))
        repos[name] = repo
    skylib = root / "bazel_skylib"
    _write_if_changed(skylib / "WORKSPACE", 'workspace(name = "bazel_skylib")\n')
    _write_if_changed(skylib / "BUILD", "")
    repos["bazel_skylib"] = skylib
    return repos


@dataclass(frozen=True)
class BazelPeer:
    binary: str
    output_user_root: Path
    standins: dict[str, Path]

    def bazelrc(self) -> str:
        return "".join(
            f"common --override_repository={name}={path}\n" for name, path in self.standins.items()
        )

    def forget_bootstraps(self, commit: str) -> None:
        """Delete the Bazel binaries bootstrapped at `commit` (a test's fixed SHA, kept by an
        earlier session), so the next bootstrap really runs."""
        for kept in (self.output_user_root / "bootstrapped").glob(f"{commit}-*"):
            shutil.rmtree(kept)

    def resource(self, **config: Any) -> BazelRbeResource:
        """A resource with this peer's startup options (the workspace teardown uses the same)."""
        return BazelRbeResource(
            bazel=self.binary,
            output_user_root=str(self.output_user_root),
            host_jvm_args=JVM_ARGS,
            max_idle_secs=MAX_IDLE_SECS,
            **config,
        )


@pytest.fixture(scope="session", name="bazel_peer")
def bazel_peer_fixture() -> BazelPeer:
    """Bazel on PATH, the stand-in repositories and the output user root under the peers' cache."""
    binary = shutil.which("bazel")
    if binary is None:
        pytest.fail("bazel is not installed: run `apt-get install -y bazel-bootstrap` (or deselect -m bazel)")
    root = peers_bazel_dir()
    return BazelPeer(binary, root / "output_user_root", write_standins(root / "standins"))


@pytest.fixture(name="make_bazel_workspace")
def make_bazel_workspace_fixture(bazel_peer: BazelPeer, tmp_path: Path) -> Iterator[Callable[[], Path]]:
    """Each call: a fresh copy of the test workspace (so a fresh output base); all expunged at the end."""
    made: list[Path] = []

    def make() -> Path:
        workspace = tmp_path / f"workspace{len(made)}"
        shutil.copytree(WORKSPACE_SOURCE, workspace)
        for script in (workspace / "tests").glob("*.sh"):
            script.chmod(0o755)
        (workspace / ".bazelrc").write_text(bazel_peer.bazelrc())
        made.append(workspace)
        return workspace

    yield make
    errors = []
    for workspace in made:
        try:
            bazel_peer.resource().shutdown(workspace, expunge=True)
        except BazelError as exc:
            errors.append(str(exc))
    if errors:
        pytest.fail("bazel workspace teardown: " + "\n".join(errors))
