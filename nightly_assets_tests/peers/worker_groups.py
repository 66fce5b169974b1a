"""Which tests run together on one xdist worker, and the scheduler that keeps them together.

Tests that share a peer one process must own run on one worker: Bazel locks its output base per
command, Slurm's one node has one name, the browser tests share one UI daemon, and the container
tests assert that the engine holds no container of theirs after them (another worker's builds
would show) and clean images up. The first marker that names a group wins, so a test is in one
group only; an explicit `xdist_group` mark wins over all.

xdist's own `--dist loadgroup` passes groups by appending "@group" to the test ids, which pytest 9.2
no longer allows (pytest-dev/pytest-xdist#1386: the groups are silently dropped). So each worker
writes the groups it collected to a file named after the test run, and the controller's scheduler
reads them when it splits the tests into units of work.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

GROUP_OF_MARKER = {
    "browser": "browser",
    "docker": "docker",
    "registry": "docker",
    "bazel": "bazel",
    "slurm": "slurm",
}


def group_of(item: pytest.Item) -> str | None:
    explicit = item.get_closest_marker("xdist_group")
    if explicit is not None:
        return str(explicit.args[0] if explicit.args else explicit.kwargs.get("name", "default"))
    marker = next((m for m in GROUP_OF_MARKER if item.get_closest_marker(m)), None)
    return GROUP_OF_MARKER[marker] if marker is not None else None


def groups_file(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"nightly-xdist-groups-{run_id}.json"


def record(items: list[pytest.Item]) -> None:
    """In a worker: write the groups of the tests it collected (every worker collects all)."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        return
    groups = {item.nodeid: group for item in items if (group := group_of(item)) is not None}
    target = groups_file(run_id)
    partial = target.with_suffix(f".{os.getpid()}.part")
    partial.write_text(json.dumps(groups))
    partial.replace(target)  # atomic: the controller never reads half a file


class PeerGroupScheduling(LoadScopeScheduling):
    """`loadscope` where a scope is a peer's group, or else the test alone (so ungrouped tests are
    balanced one by one, as `load` does)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self._run_id = config.option.testrunuid
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # first called once every worker has collected
            path = groups_file(self._run_id)
            self._groups = json.loads(path.read_text()) if path.exists() else {}
        group = self._groups.get(nodeid)
        return f"group:{group}" if group is not None else nodeid


def forget(config: pytest.Config) -> None:
    run_id = getattr(config.option, "testrunuid", None)
    if run_id is not None and not hasattr(config, "workerinput"):
        groups_file(run_id).unlink(missing_ok=True)
