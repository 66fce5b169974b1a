"""Secrets never reach the code under test: a repository's build backend, its tests, its benchmark
and a batch job it runs each dump their environment, and no canary secret of the orchestrator's
environment is in any of the dumps."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_folder

# Every secret the orchestrator may hold, by the variable a deployment sets it in.
SECRET_VARIABLES = (
    "SLACK_BOT_TOKEN",
    "NIGHTLY_GITHUB_TOKEN",
    "NIGHTLY_RBE_TOKEN",
    "NIGHTLY_REGISTRY_ECR_PASSWORD",
    "NIGHTLY_REGISTRY_ACR_PASSWORD",
    "DAGSTER_POSTGRES_PASSWORD",
    "AWS_SECRET_ACCESS_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
)

DUMP = """\
import json, os, sys
def dump(name):
    netrc = os.path.expanduser("~/.netrc")  # a credential file in the orchestrator's home
    seen = {{"~/.netrc": open(netrc).read() if os.path.exists(netrc) else None}}
    with open(os.path.join({dumps!r}, name + ".json"), "w") as out:
        json.dump({{**os.environ, **seen}}, out)
"""

PIPELINE = """
name: canary
title: A repository that reads its environment everywhere it runs
seed: embedded
description: Canary secrets must never reach the code under test.
cron: "0 3 * * *"
start_date: 2026-11-01
repositories:
  - {{name: canaryrepo, url: "{repo}", branch: main}}
targets:
  - {{name: cpu, arch: amd64}}
stages:
  - {{name: sources, kind: sources, description: Pinned.}}
  - {{name: wheels, kind: wheels, deps: [sources], runner: local, description: Built by its own setup.py.}}
  - name: image
    kind: docker_image
    deps: [wheels]
    runner: local
    description: Installed into a fresh environment.
    params: {{role: runtime, install_wheels: true, tests: [tests], fallback: venv}}
  - name: tests_unit
    kind: test_suite
    deps: [image]
    description: Its tests.
    suite: {{markers: unit, timeout_minutes: 5, runner: local}}
  - name: benchmarks
    kind: benchmarks
    deps: [image]
    runner: local
    description: Its benchmark.
    params: {{command: [python, -m, canary.bench, "{{output}}"]}}
  - name: sanity_job
    kind: batch_job
    deps: [wheels]
    runner: theta-cobalt
    description: A job on the batch machine.
    params:
      nodes: 1
      walltime_minutes: 2
      expect_output: "job ok"
      command: ["{{python}}", "-c", "import canary.job"]
  - {{name: night_summary, kind: night_summary, deps: [tests_unit, benchmarks, sanity_job], description: S.}}
"""


def _repository(root: Path, dumps: Path) -> Path:
    repo = root / "canaryrepo"
    (repo / "canary").mkdir(parents=True)
    (repo / "tests").mkdir()
    dump = DUMP.format(dumps=str(dumps))
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "canary"\nversion = "1.0"\n\n'
        '[tool.setuptools]\npackages = ["canary"]\n\n'
        '[tool.pytest.ini_options]\nmarkers = ["unit"]\n'
    )
    (repo / "setup.py").write_text(dump + 'dump("build")\nfrom setuptools import setup\nsetup()\n')
    (repo / "canary" / "__init__.py").write_text("")
    (repo / "canary" / "bench.py").write_text(
        dump + 'dump("benchmark")\njson.dump({"benchmarks": [{"name": "noop", "value": 1.0}]}, '
        'open(sys.argv[1], "w"))\n'
    )
    (repo / "canary" / "job.py").write_text(dump + 'dump("batch_job")\nprint("job ok")\n')
    (repo / "tests" / "test_env.py").write_text(
        dump + "import pytest\n\n\n@pytest.mark.unit\ndef test_reads_its_environment():\n    dump('tests')\n"
    )
    commit_folder(repo)
    return repo


def test_no_secret_of_the_orchestrator_reaches_the_code_under_test(
    catalog_nights: CatalogNights, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    canaries = {name: f"canary-{name.lower()}-{secrets.token_hex(6)}" for name in SECRET_VARIABLES}
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    # The warehouse URL carries its password in production: here a canary in its path.
    warehouse_canary = f"canary-warehouse-{secrets.token_hex(6)}"
    (tmp_path / warehouse_canary).mkdir()
    monkeypatch.setenv("NIGHTLY_WAREHOUSE_URL", f"sqlite:///{tmp_path / warehouse_canary}/warehouse.sqlite")
    canaries["NIGHTLY_WAREHOUSE_URL"] = warehouse_canary
    # Files too: the code under test gets a HOME of its own, not the one holding ~/.netrc.
    home = tmp_path / "orchestrator-home"
    home.mkdir()
    canaries["~/.netrc"] = f"canary-netrc-{secrets.token_hex(6)}"
    (home / ".netrc").write_text(f"machine example.com login bot password {canaries['~/.netrc']}\n")
    monkeypatch.setenv("HOME", str(home))

    repo = _repository(tmp_path, dumps)
    _, stages, _ = catalog_nights.run(PIPELINE.format(repo=repo), "2026-11-03")

    assert {s.status for s in stages.values()} == {"success"}, {n: s.detail for n, s in stages.items()}
    found = {p.stem: p.read_text() for p in dumps.glob("*.json")}
    assert set(found) == {"build", "tests", "benchmark", "batch_job"}, sorted(found)
    for process, text in found.items():
        environment = json.loads(text)
        assert environment.get("PATH"), f"{process}: ran without PATH"
        for name, value in canaries.items():
            assert value not in text, f"{process} received {name}"
