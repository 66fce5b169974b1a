"""Time to verdict (issue 39), in one run:

1. The shard planner's makespan over the ideal, max(total / N, the longest unit), on a suite
   shaped like PyTorch's test-times file (generated: 300 files of log-normal tests, a 400-test file
   of hours, one 900 s test), at 4, 16, 64 and 256 shards, against round-robin by file (what a
   suite split by `pytest-split`-less hand lists gets). Target: <= 1.05.
2. A local sharded night of a sleep-based suite, 4 shards on this 2-core machine: the tests stage's
   wall time over the ideal (the suite's test seconds / 4). The plan comes from the warehouse's
   durations of an unsharded night before it. Target: <= 1.15.
3. `nightly run` (the console command, in a process of its own) of a pipeline with four independent
   10 s test stages: the night's wall time over its critical path (the longest chain of its steps'
   own durations); the `nightly run` process's own CPU beside it. Target: <= 1.2, CPU <= 2.5 s.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.third_party_night import OWN_CPU_WRAPPER
from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR
from nightly_assets.resources import REPO_WHEELHOUSE
from nightly_assets.shards.plan import file_of, plan_shards
from nightly_assets_tests.catalog_files import copy_catalog, write_pipeline
from nightly_assets_tests.git_repo import commit_files
from nightly_assets_tests.suite_projects import flit_project, project_pipeline, suite_stage

SHARD_COUNTS = (4, 16, 64, 256)
SLEEP_FILES, SLEEP_TESTS, SLEEP_S = 8, 3, 2.5  # 60 s of tests: 15 s a shard at 4
STAGE_SLEEP_S = 10.0


def pytorch_shaped(seed: int = 39) -> dict[str, float]:
    rng = random.Random(seed)
    durations: dict[str, float] = {}
    for f in range(300):
        for t in range(rng.randint(1, 40)):
            durations[f"test/test_file_{f:03d}.py::test_{t}"] = round(rng.lognormvariate(0.5, 1.2), 3)
    for t in range(400):
        durations[f"test/test_ops.py::test_op_{t}"] = round(rng.uniform(5, 40), 3)
    durations["test/test_slow_single.py::test_everything"] = 900.0
    return durations


def round_robin_makespan(durations: dict[str, float], count: int) -> float:
    by_file: dict[str, float] = {}
    for unit, seconds in durations.items():
        by_file[file_of(unit)] = by_file.get(file_of(unit), 0.0) + seconds
    loads = [0.0] * count
    for i, name in enumerate(sorted(by_file)):
        loads[i % count] += by_file[name]
    return max(loads)


def planner() -> dict[str, float]:
    durations = pytorch_shaped()
    ratios: dict[str, float] = {}
    print(f"sharding: planner on {len(durations)} tests, {sum(durations.values()):.0f} s in all")
    for count in SHARD_COUNTS:
        plan = plan_shards(durations, count)
        rr = round_robin_makespan(durations, count) / plan.ideal_s
        print(
            f"  {count:4d} shards: makespan {plan.makespan_s:8.1f} s, ideal {plan.ideal_s:8.1f} s, "
            f"{plan.ratio:.3f}x (round-robin by file {rr:.2f}x)"
        )
        ratios[f"shard_plan_over_ideal_{count}"] = plan.ratio
        ratios[f"round_robin_over_ideal_{count}"] = rr
    return ratios


def _environment(root: Path) -> dict[str, str]:
    catalog = copy_catalog(root / "catalog")
    (root / "dagster").mkdir()
    env = {
        **os.environ,
        "NIGHTLY_HOME": str(root / "home"),
        "DAGSTER_HOME": str(root / "dagster"),
        "NIGHTLY_CATALOG_DIR": str(catalog),
        "NIGHTLY_WHEELHOUSE": str(REPO_WHEELHOUSE),
    }
    for name in ("NIGHTLY_ENV", "NIGHTLY_PACKAGE_INDEX_URL", "NIGHTLY_WAREHOUSE_URL"):
        env.pop(name, None)
    assert BUILTIN_CATALOG_DIR.is_dir()
    return env


def _nightly_run(root: Path, env: dict[str, str], pipeline: str, night: str) -> tuple[float, float]:
    """Wall seconds of `nightly run` (succeeded or failed), and its own process's CPU seconds."""
    cpu_file = root / "own-cpu"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", OWN_CPU_WRAPPER, "run", pipeline, "--night", night],
        env={**env, "BENCH_OWN_CPU_FILE": str(cpu_file)},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(
            f"`nightly run {pipeline} --night {night}` broke:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
        )
    return wall, float(cpu_file.read_text())


def _sleep_project() -> dict[str, str]:
    files = {"sleeppkg/__init__.py": '"""Nothing."""\n'}
    for f in range(SLEEP_FILES):
        tests = "".join(f"\n\ndef test_{t}():\n    time.sleep({SLEEP_S})\n" for t in range(SLEEP_TESTS))
        files[f"tests/test_sleep_{f}.py"] = "import time\n" + tests
    return flit_project("sleeppkg", "Tests that sleep.", files)


def local_shards(root: Path) -> dict[str, float]:
    env = _environment(root)
    repo = root / "upstream" / "sleeppkg"
    commit_files(repo, _sleep_project())
    catalog = Path(env["NIGHTLY_CATALOG_DIR"])

    def night(date: str, **suite: Any) -> Path:
        stages = [suite_stage(confirm={"attempts": 0}, **suite)]
        write_pipeline(catalog, project_pipeline("sleeppkg", repo, "Sleeping tests.", stages))
        _nightly_run(root, env, "sleeppkg", date)
        return Path(env["NIGHTLY_HOME"]) / f"artefacts/sleeppkg/{date}/cpu/tests/manifest.json"

    night("2026-11-03")  # unsharded: the durations the plan reads
    manifest = json.loads(night("2026-11-04", shards=4).read_text())
    shards = manifest["shards"]
    took = max(sum(a["seconds"] for a in s["attempts"]) for s in shards["shards"])
    ideal = SLEEP_FILES * SLEEP_TESTS * SLEEP_S / 4
    stage_s = _step_seconds(env, "sleeppkg", "2026-11-04")["tests"]  # collection and records included
    print(
        f"sharding: local night of {SLEEP_FILES * SLEEP_TESTS} sleeping tests ({SLEEP_S} s each) in 4 "
        f"shards on {os.cpu_count()} cores: slowest shard {took:.1f} s, tests stage {stage_s:.1f} s, "
        f"ideal {ideal:.1f} s (planned from {shards['history_nights']} night, expected makespan "
        f"{shards['expected_makespan_s']:.1f} s)"
    )
    return {"local_sharded_stage_over_ideal": stage_s / ideal, "local_slowest_shard_over_ideal": took / ideal}


def _four_stage_pipeline(repo: Path) -> str:
    stages = []
    for n in range(4):
        stage = suite_stage(confirm={"attempts": 0}, paths=[f"tests/test_wait_{n}.py"])
        stage["name"] = f"tests_{n}"
        stages.append(stage)
    document = yaml.safe_load(project_pipeline("fourpkg", repo, "Four independent suites.", stages))
    document["stages"][-1]["deps"] = [s["name"] for s in stages]  # the summary waits for all four
    return yaml.safe_dump(document, sort_keys=False)


def critical_path(root: Path, env: dict[str, str]) -> dict[str, float]:
    repo = root / "upstream" / "fourpkg"
    files = {"fourpkg/__init__.py": '"""Nothing."""\n'}
    for n in range(4):
        files[f"tests/test_wait_{n}.py"] = (
            f"import time\n\n\ndef test_wait():\n    time.sleep({STAGE_SLEEP_S})\n"
        )
    commit_files(repo, flit_project("fourpkg", "Four suites.", files))
    catalog = Path(env["NIGHTLY_CATALOG_DIR"])
    write_pipeline(catalog, _four_stage_pipeline(repo))
    _nightly_run(root, env, "fourpkg", "2026-11-03")  # builds the toolchain and caches: not measured
    wall, cpu = _nightly_run(root, env, "fourpkg", "2026-11-04")
    steps = _step_seconds(env, "fourpkg", "2026-11-04")
    upstream = steps["sources"] + steps["wheels"] + steps["environment"]
    path = upstream + max(steps[f"tests_{n}"] for n in range(4)) + steps["night_summary"]
    serial = upstream + sum(steps[f"tests_{n}"] for n in range(4)) + steps["night_summary"]
    print(
        f"sharding: `nightly run` of four independent {STAGE_SLEEP_S:.0f} s suites: wall {wall:.1f} s, "
        f"critical path {path:.1f} s (one after another: {serial:.1f} s); the command's own CPU {cpu:.2f} s"
    )
    return {"nightly_run_over_critical_path": wall / path, "nightly_run_own_cpu_s": cpu}


def _step_seconds(env: dict[str, str], pipeline: str, night: str) -> dict[str, float]:
    """Each stage's own seconds on `night`, as the warehouse holds them."""
    script = (
        "import datetime as dt, json, sys\n"
        "import dagster as dg\n"
        "from nightly_assets.resources import resources_for\n"
        "from nightly_assets.results import NightKey\n"
        "from nightly_assets.settings import nightly_home\n"
        "key = NightKey(sys.argv[1], dt.date.fromisoformat(sys.argv[2]), 'cpu')\n"
        "with dg.build_resources({'warehouse': resources_for('local', nightly_home())['warehouse']}) as r:\n"
        "    print(json.dumps({s.stage: s.duration_s for s in r.warehouse.store().stages(key)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, pipeline, night], env=env, capture_output=True, text=True, check=True
    )
    return {k: float(v or 0.0) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def main() -> dict[str, float]:
    ratios = planner()
    with tempfile.TemporaryDirectory() as tmp:
        ratios |= local_shards(Path(tmp) / "shards")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ratios |= critical_path(root, _environment(root))
    return ratios
