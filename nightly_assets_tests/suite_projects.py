"""A small Python project and the pipeline that builds, installs and tests it, for the tests that run
real nights of it (test_confirm.py, test_culprits.py, test_test_health.py): the project's files,
its pipeline's document (sources -> wheels -> environment -> its stages -> night_summary), and the
home's warehouse as the night's resources open it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from nightly_assets.resources import resources_for
from nightly_assets.warehouse import Warehouse

Stage = dict[str, Any]  # one entry of a pipeline's `stages:`

# The wheel installed into a fresh virtualenv: what a suite on the local runner runs in.
ENVIRONMENT: Stage = {
    "name": "environment",
    "kind": "environment",
    "deps": ["wheels"],
    "description": "The wheel installed.",
    "params": {},
}
# The wheel and the tests in the night's image, built on a docker runner: suites in it run in
# containers (test_confirm.py, test_sharded_night.py).
IMAGE_RUNNER = "cpu-amd-m5-4xlarge"
IMAGE_STAGE: Stage = {
    "name": "environment",
    "kind": "docker_image",
    "deps": ["wheels"],
    "runner": IMAGE_RUNNER,
    "description": "The runtime image with the wheel and the tests.",
    "params": {"install_wheels": True, "tests": ["tests"]},
}
FLAKY_TESTS: Stage = {
    "name": "flaky_tests",
    "kind": "test_health",
    "deps": ["tests"],
    "description": "Flaky and broken tests.",
}


def flit_project(name: str, description: str, files: Mapping[str, str]) -> dict[str, str]:
    """The files of a project `name` that flit_core builds (offline, from the wheelhouse): its
    pyproject.toml and `files` (its package and its tests)."""
    pyproject = f"""[build-system]
requires = ["flit_core>=3.2,<4"]
build-backend = "flit_core.buildapi"

[project]
name = "{name}"
version = "1.0"
description = "{description}"
"""
    return {"pyproject.toml": pyproject, **files}


def suite_stage(runner: str = "local", **suite: Any) -> Stage:
    """The `tests` stage: the project's tests/ on `runner`, in the environment; `suite` adds to
    (or overrides) its `suite:` block (e.g. `confirm={"attempts": 0}`)."""
    return {
        "name": "tests",
        "kind": "test_suite",
        "deps": ["environment"],
        "description": "The tests.",
        "suite": {"paths": ["tests"], "timeout_minutes": 10, "runner": runner, **suite},
    }


def project_pipeline(
    name: str,
    upstream: Path,
    description: str,
    stages: Sequence[Stage] = (),
    *,
    seed: str = "002",
    environment: Stage = ENVIRONMENT,
    thresholds: Mapping[str, Any] | None = None,
    summary_after: str | None = None,
    after_summary: Sequence[Stage] = (),
) -> str:
    """The YAML document of pipeline `name` over the repository at `upstream` (one `cpu` target):
    its sources pinned, its wheel built and installed by `environment`, then `stages` (default:
    the tests), the night_summary after `summary_after` (default: the last of them), then
    `after_summary`."""
    stages = list(stages) or [suite_stage()]
    document: dict[str, Any] = {
        "name": name,
        "title": f"{name} nightly",
        "seed": seed,
        "description": description,
        "cron": "0 2 * * *",
        "start_date": "2026-11-01",
        "repositories": [{"name": name, "url": str(upstream), "branch": "main"}],
        "targets": [{"name": "cpu", "arch": "amd64"}],
        **({"thresholds": dict(thresholds)} if thresholds else {}),
        "stages": [
            {"name": "sources", "kind": "sources", "description": "The pinned checkout."},
            {"name": "wheels", "kind": "wheels", "deps": ["sources"], "description": "The wheel."},
            environment,
            *stages,
            {
                "name": "night_summary",
                "kind": "night_summary",
                "deps": [summary_after or stages[-1]["name"]],
                "description": "Summary.",
            },
            *after_summary,
        ],
    }
    return yaml.safe_dump(document, sort_keys=False)


@contextlib.contextmanager
def night_store(home: Path) -> Iterator[Warehouse]:
    """The home's warehouse, as the night's resources open it."""
    with dg.build_resources({"warehouse": resources_for("local", home)["warehouse"]}) as resolved:
        yield resolved.warehouse.store()
