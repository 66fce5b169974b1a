"""A snapshot of every definition the code location ships, against data/asset_snapshot.yaml.

Every asset (key, group, description, kinds, tags, owners, pools, deps, partitions, plain-string
metadata, checks), job, schedule and sensor, rendered as sorted YAML: a refactor that changes any
of them fails here with a diff. When the change is meant, regenerate the file with

    NIGHTLY_UPDATE_SNAPSHOT=1 pytest nightly_assets_tests/test_asset_snapshot.py

(that run rewrites the file and still fails once, so a stale file never passes silently) and
review and commit it with the change. The invariants every definition keeps, whatever the
catalog holds, stay in test_definitions.py.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

import nightly_assets
from nightly_assets.definitions import build_definitions

SNAPSHOT = Path(__file__).parent / "data" / "asset_snapshot.yaml"
UPDATE_VAR = "NIGHTLY_UPDATE_SNAPSHOT"
REGENERATE = f"{UPDATE_VAR}=1 pytest nightly_assets_tests/test_asset_snapshot.py"
HEADER = (
    f"# Every definition of the code location, rendered by {Path(__file__).name}.\n"
    f"# Regenerate: {REGENERATE}\n"
)
KIND_PREFIX = "dagster/kind/"
# Read before any fixture clears the NIGHTLY_* variables.
UPDATE_REQUESTED = os.environ.get(UPDATE_VAR, "") not in ("", "0")


@contextmanager
def clean_nightly_env(home: Path, **settings: str) -> Iterator[pytest.MonkeyPatch]:
    """No NIGHTLY_* setting (or secret) of the shell: NIGHTLY_HOME is `home`, plus `settings`."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in list(os.environ):
            if name.startswith("NIGHTLY_"):
                monkeypatch.delenv(name)
        for name in ("SLACK_BOT_TOKEN", "GITHUB_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("NIGHTLY_HOME", str(home))
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        yield monkeypatch


# -- rendering -------------------------------------------------------------------------------------


def _key(key: dg.AssetKey) -> str:
    return key.to_user_string()


def _status(status: Any) -> str:
    return str(status.value).lower()


def _partitions(partitions_def: dg.PartitionsDefinition | None) -> Any:
    if partitions_def is None:
        return None
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return {"dimensions": {d.name: _partitions(d.partitions_def) for d in partitions_def.partitions_defs}}
    if isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        fmt = partitions_def.fmt
        return {
            "type": type(partitions_def).__name__,
            "start": partitions_def.start.strftime(fmt),
            "end": partitions_def.end.strftime(fmt) if partitions_def.end else None,
            "timezone": partitions_def.timezone,
            "cron_schedule": partitions_def.cron_schedule,
            "fmt": fmt,
            "end_offset": partitions_def.end_offset,
        }
    if isinstance(partitions_def, dg.StaticPartitionsDefinition):
        return {"type": "static", "keys": partitions_def.get_partition_keys()}  # in order: runs go so
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        return {"type": "dynamic", "name": partitions_def.name}
    return {"type": type(partitions_def).__name__}


def _metadata(metadata: Mapping[str, Any]) -> dict[str, str]:
    """Plain-string values as they are; any other value by its type (its content may be a path)."""
    return {k: v if isinstance(v, str) else f"<{type(v).__name__}>" for k, v in metadata.items()}


def _asset(graph: Any, key: dg.AssetKey) -> dict[str, Any]:
    node = graph.get(key)
    checks = {}
    for check_key in sorted(node.check_keys, key=lambda k: k.name):
        spec = graph.get_check_spec(check_key)
        check: dict[str, Any] = {
            "blocking": spec.blocking,
            "description": spec.description,
            "partitioned_like_asset": spec.partitions_def == node.partitions_def,
        }
        if spec.partitions_def != node.partitions_def:
            check["partitions"] = _partitions(spec.partitions_def)
        if spec.additional_deps:
            check["additional_deps"] = sorted(_key(d.asset_key) for d in spec.additional_deps)
        if spec.metadata:
            check["metadata"] = _metadata(spec.metadata)
        checks[check_key.name] = check
    rendered: dict[str, Any] = {
        "group": node.group_name,
        "description": node.description,
        "kinds": sorted(t.removeprefix(KIND_PREFIX) for t in node.tags if t.startswith(KIND_PREFIX)),
        "tags": {k: v for k, v in node.tags.items() if not k.startswith(KIND_PREFIX)},
        "owners": sorted(node.owners),
        "pools": sorted(node.pools or ()),
        "deps": sorted(_key(k) for k in node.parent_keys),
        "partitions": _partitions(node.partitions_def),
        "metadata": _metadata(node.metadata),
        "checks": checks,
    }
    # Set on no asset today; shown when one gets them.
    if node.partition_mappings:
        rendered["partition_mappings"] = {
            _key(k): type(m).__name__ for k, m in node.partition_mappings.items()
        }
    for name in ("code_version", "automation_condition", "backfill_policy"):
        if getattr(node, name) is not None:
            rendered[name] = str(getattr(node, name))
    policy = node.freshness_policy
    if policy is not None:  # the night summaries' CronFreshnessPolicy
        rendered["freshness_policy"] = {
            "deadline_cron": policy.deadline_cron,
            "lower_bound": str(policy.lower_bound_delta),
            "timezone": policy.timezone,
        }
    return rendered


def _job(job: dg.JobDefinition) -> dict[str, Any]:
    rendered: dict[str, Any] = {
        "description": job.description,
        "tags": dict(job.tags),
        "partitioned": job.partitions_def is not None,
        "executor": job.executor_def.name,
    }
    if job.is_asset_job:
        rendered["assets"] = sorted(_key(k) for k in job.asset_layer.selected_asset_keys)
        rendered["checks"] = sorted(
            f"{_key(k.asset_key)}:{k.name}" for k in job.asset_layer.asset_graph.asset_check_keys
        )
    else:
        rendered["ops"] = [node.name for node in job.nodes]
    return rendered


def _schedule(schedule: dg.ScheduleDefinition) -> dict[str, Any]:
    return {
        "cron_schedule": schedule.cron_schedule,
        "timezone": schedule.execution_timezone,
        "default_status": _status(schedule.default_status),
        "job": schedule.job_name,
        "description": schedule.description,
    }


def _sensor(sensor: dg.SensorDefinition) -> dict[str, Any]:
    """`jobs`: what the sensor starts (a run-status sensor's monitored jobs are not public)."""
    return {
        "type": _status(sensor.sensor_type),
        "jobs": sorted(t.job_name for t in sensor.targets),
        "default_status": _status(sensor.default_status),
        "minimum_interval_seconds": sensor.minimum_interval_seconds,
        "description": sensor.description,
    }


class _Dumper(yaml.SafeDumper):
    """Writes a list that several assets share (a pipeline's targets) out in full each time."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(defs: dg.Definitions) -> str:
    """The snapshot's text: sorted YAML of every asset, check, job, schedule and sensor."""
    graph = defs.resolve_asset_graph()
    snapshot = {
        "assets": {_key(k): _asset(graph, k) for k in graph.get_all_asset_keys()},
        "jobs": {j.name: _job(defs.resolve_job_def(j.name)) for j in defs.jobs or ()},
        "schedules": {s.name: _schedule(defs.resolve_schedule_def(s.name)) for s in defs.schedules or ()},
        "sensors": {s.name: _sensor(defs.resolve_sensor_def(s.name)) for s in defs.sensors or ()},
    }
    text = yaml.dump(
        snapshot, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=10_000, allow_unicode=True
    )
    return HEADER + _without_local_paths(text)


def _without_local_paths(text: str) -> str:
    """This machine's paths (the package, the checkout, NIGHTLY_HOME, HOME) as placeholders."""
    places = {
        "$PACKAGE": Path(nightly_assets.__file__).parent,
        "$CHECKOUT": Path(__file__).parent.parent,
        "$NIGHTLY_HOME": Path(os.environ.get("NIGHTLY_HOME", "/nonexistent")),
        "$HOME": Path.home(),
    }
    for placeholder, path in places.items():
        text = text.replace(str(path), placeholder)
    return text


def _name_hunks(diff: Iterator[str], lines: list[str]) -> Iterator[str]:
    """Each hunk's header names the asset, job, schedule or sensor it is in, as git names functions."""
    for line in diff:
        hunk = re.match(r"@@ -\S+ \+(\d+)", line)
        if hunk:
            above = lines[: int(hunk[1]) + 2]  # down to the hunk's first change (3 lines of context)
            name = next((n for n in reversed(above) if re.match(r"  \S.*:$", n)), None)
            if name:
                line = f"{line.rstrip()} {name.strip().removesuffix(':')}\n"
        yield line


def compare_to_snapshot(rendered: str, path: Path, update: bool) -> None:
    """Fail with a unified diff when `rendered` is not `path`'s text; with `update`, rewrite it and fail."""
    committed = path.read_text() if path.exists() else ""
    if update:
        path.write_text(rendered)
        if rendered != committed:
            pytest.fail(f"snapshot rewritten, review and commit it: {path}", pytrace=False)
    if rendered == committed:
        return
    lines = rendered.splitlines(keepends=True)
    diff = "".join(
        _name_hunks(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                lines,
                fromfile=f"{path.name} (committed)",
                tofile=f"{path.name} (these definitions)",
            ),
            lines,
        )
    )
    pytest.fail(
        f"the definitions differ from {path.name}:\n{diff}\n"
        f"If the change is meant, regenerate the snapshot and review it: {REGENERATE}",
        pytrace=False,
    )


# -- tests -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("snapshot") / "nightly"
    with clean_nightly_env(home):
        yield home


@pytest.fixture(scope="module")
def defs(home) -> dg.Definitions:
    return build_definitions()


@pytest.fixture(scope="module")
def rendered(defs) -> str:
    return render(defs)


def test_definitions_match_the_snapshot(rendered):
    compare_to_snapshot(rendered, SNAPSHOT, UPDATE_REQUESTED)


def test_snapshot_holds_no_path_of_this_machine(rendered, home):
    for path in (home, Path(__file__).parent.parent, Path(nightly_assets.__file__).parent, Path.home()):
        assert str(path) not in rendered
    assert "/tmp/" not in rendered


def test_prod_definitions_differ_only_in_what_starts_by_default(home, tmp_path):
    """NIGHTLY_ENV=prod, no secret set: the same graph, jobs and triggers; every schedule and sensor
    starts running (locally only the embedded pipeline's schedule and the alert sensors do)."""
    with clean_nightly_env(tmp_path / "home", NIGHTLY_ENV="prod"):
        prod = yaml.safe_load(render(build_definitions()))
    local = yaml.safe_load(render(build_definitions()))
    for trigger in (*local["schedules"].values(), *local["sensors"].values()):
        trigger["default_status"] = "running"
    assert prod == local


def test_a_changed_definition_fails_with_a_readable_diff(defs, tmp_path):
    key = dg.AssetKey(["demo", "wheels"])
    before = defs.resolve_asset_graph().get(key).description
    changed = defs.map_resolved_asset_specs(
        func=lambda spec: spec.replace_attributes(description="Changed by the snapshot test."),
        selection=[key],
    )
    committed = tmp_path / "asset_snapshot.yaml"
    committed.write_text(render(defs))

    with pytest.raises(pytest.fail.Exception) as failure:
        compare_to_snapshot(render(changed), committed, update=False)

    message = str(failure.value)
    removed = [line for line in message.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in message.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert removed == [f"-    description: {before}"]
    assert added == ["+    description: Changed by the snapshot test."]
    assert re.search(r"^@@ .* @@ demo/wheels$", message, re.MULTILINE)  # the hunk names the asset
    assert REGENERATE in message


def test_update_rewrites_the_snapshot_and_still_fails_once(rendered, tmp_path):
    stale = tmp_path / "asset_snapshot.yaml"
    stale.write_text(HEADER + "assets: {}\n")

    with pytest.raises(pytest.fail.Exception, match="snapshot rewritten, review and commit it"):
        compare_to_snapshot(rendered, stale, update=True)

    assert stale.read_text() == rendered
    compare_to_snapshot(rendered, stale, update=True)  # now up to date: passes
