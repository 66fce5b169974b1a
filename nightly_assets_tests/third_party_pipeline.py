"""The catalog pipeline of a third-party project's night, as docs/pipelines.md's worked example writes it:
its checkout, its wheel by its own build backend, an environment with its test dependencies, the
suites, a summary. One builder for the tests of such nights and the benchmark that times one
(benchmarks/third_party_night.py), so they run the same pipeline; and the environment a developer
makes by hand for the same project, which both compare the night with."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

WHOLE_SUITE = "The whole suite as the project configures it."
LOCAL_SUITE: dict[str, Any] = {"paths": [], "timeout_minutes": 10, "runner": "local"}


def third_party_pipeline(
    name: str,
    upstream: Path | str,
    environment: Mapping[str, Any] | None = None,
    suites: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None,
    description: str = "A real project's night from its repository alone.",
) -> dict[str, Any]:
    """The pipeline `name` of the one repository at `upstream` (its `main` branch): `environment`
    is the environment stage's params, `suites` each test_suite stage's description and `suite`
    block by stage name (default: `tests`, the whole suite, on this host)."""
    suites = suites or {"tests": (WHOLE_SUITE, LOCAL_SUITE)}
    stages: list[dict[str, Any]] = [
        {"name": "sources", "kind": "sources", "description": "The pinned checkout."},
        {"name": "wheels", "kind": "wheels", "deps": ["sources"], "description": "The wheel by its backend."},
        {
            "name": "environment",
            "kind": "environment",
            "deps": ["wheels"],
            "description": "The wheel and the test dependencies.",
            "params": dict(environment or {}),
        },
        *(
            {
                "name": stage,
                "kind": "test_suite",
                "deps": ["environment"],
                "description": about,
                "suite": dict(suite),
            }
            for stage, (about, suite) in suites.items()
        ),
        {"name": "night_summary", "kind": "night_summary", "deps": list(suites), "description": "Summary."},
    ]
    return {
        "name": name,
        "title": f"{name} nightly",
        "seed": "000",
        "description": description,
        "cron": "0 2 * * *",
        "start_date": "2026-11-01",
        "repositories": [{"name": name, "url": str(upstream), "branch": "main"}],
        "targets": [{"name": "cpu", "arch": "amd64"}],
        "stages": stages,
    }


def pipeline_text(document: Mapping[str, Any]) -> str:
    """The pipeline's document as YAML (what a catalog author writes under `attributes:`)."""
    return yaml.safe_dump(dict(document), sort_keys=False)


def developer_venv(venv: Path, source: Path, wheelhouse: Path) -> Path:
    """What a developer makes by hand: `python -m venv`, then pip installs the project at `source`
    (pip builds its wheel in an isolated environment) with its `requirements/tests.txt`, offline from
    `wheelhouse`, with no pip config of this machine. Returns the venv's python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin/python"
    pip: list[str | Path] = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index"]
    subprocess.run(
        [*pip, "--find-links", wheelhouse, "-r", source / "requirements/tests.txt", source],
        check=True,
        env={"PATH": os.environ["PATH"], "HOME": str(venv.parent), "PIP_CONFIG_FILE": os.devnull},
    )
    return python
