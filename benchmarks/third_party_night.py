"""A real project's night against what a developer runs by hand, in one run: the vendored
itsdangerous (flit_core backend, test requirements file) as a catalog pipeline run by `nightly run`
(sources, wheels, environment, tests, summary), and by hand: `git clone` of the same commit,
`python -m venv`, `pip install` of the clone (pip builds its wheel with flit_core in an isolated
environment, as the wheels stage does with uv) with the test requirements, `pytest`. The same work
on both sides: a clone, a wheel built from it, the same test dependencies, the same tests. Both
offline from the repository's wheelhouse, taking turns, median of REPEATS; target: the night within
1.15x of the direct run, in wall time, and also shown in CPU time (every process of a side), which
a machine shared with other work distorts less. Also the environment stage's installer alone: uv
against pip, filling the same environment from the same wheelhouse. The pipeline is the tests'
(nightly_assets_tests/third_party_pipeline.py).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.suite_dependencies import SuiteDependencies
from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR, DEFS_FILE
from nightly_assets.resources import REPO_WHEELHOUSE
from nightly_assets_tests.catalog_files import as_defs_yaml
from nightly_assets_tests.third_party_pipeline import pipeline_text, third_party_pipeline

PROJECT = Path(__file__).resolve().parents[1] / "nightly_assets_tests/data/projects/itsdangerous"
REPEATS = 3
COMMIT_DATE = "2026-11-02T10:00:00Z"  # before the nights run (from 2026-11-03): the one they pin


def _upstream(root: Path) -> Path:
    """The fixture project as a one-commit git repository (what the night pins)."""
    repo = root / "upstream"
    shutil.copytree(PROJECT, repo)
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    dated = {**os.environ, "GIT_AUTHOR_DATE": COMMIT_DATE, "GIT_COMMITTER_DATE": COMMIT_DATE}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "as released"]):
        subprocess.run([*git, *args], check=True, env=dated)
    return repo


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's ended children and their own children: what
    a side cost the machine, which other work on a shared machine stretches less than wall time."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _night(root: Path, env: dict[str, str], night: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "nightly_assets.cli", "run", "itsdangerous", "--night", night],
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"`nightly run itsdangerous --night {night}` failed:\n{done.stdout[-3000:]}")
    return elapsed


def _direct(root: Path, upstream: Path, turn: int) -> float:
    """A developer's run: a clone, a venv, the project and its test requirements by pip, then pytest."""
    start = time.perf_counter()
    checkout = root / f"direct-{turn}-checkout"
    subprocess.run(["git", "clone", "--quiet", "--", upstream, checkout], check=True)
    venv = root / f"direct-{turn}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    pip: list[str | Path] = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        venv / "bin/python",
        "install",
        "-q",
        "--no-index",
    ]
    subprocess.run(
        [*pip, "--find-links", REPO_WHEELHOUSE, "-r", checkout / "requirements/tests.txt", checkout],
        check=True,
        env={"PATH": os.environ["PATH"], "HOME": str(root), "PIP_CONFIG_FILE": os.devnull},
    )
    subprocess.run(
        [venv / "bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=checkout,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def _environments(root: Path) -> tuple[float, float]:
    """Median seconds to make and fill the suite's environment with uv, then with pip."""
    tests = SuiteDependencies(requirements=[PROJECT / "requirements/tests.txt"])
    times: dict[str, list[float]] = {"uv": [], "pip": []}
    for turn in range(REPEATS + 1):  # the first turn fills uv's cache, as a night before did
        for installer in times:
            builder = PythonBuildResource(
                toolchain_dir=str(root / "toolchain"),
                wheelhouse=str(REPO_WHEELHOUSE),
                installer=installer,
                uv_cache_dir=str(root / "uv-cache"),
            )
            start = time.perf_counter()
            builder.create_environment(
                root / f"{installer}-{turn}", [], root / f"{installer}-{turn}.log", tests
            )
            if turn:
                times[installer].append(time.perf_counter() - start)
    return statistics.median(times["uv"]), statistics.median(times["pip"])


def main() -> dict[str, float]:
    if not any(REPO_WHEELHOUSE.glob("flit_core-3*.whl")):
        raise RuntimeError(f"{REPO_WHEELHOUSE} lacks the fixture project's packages: run `make setup`")
    with tempfile.TemporaryDirectory(prefix="bench-third-party-") as tmp:
        root = Path(tmp)
        upstream = _upstream(root)
        catalog = root / "catalog"
        shutil.copytree(BUILTIN_CATALOG_DIR, catalog, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        (catalog / "itsdangerous").mkdir()
        # The tests' pipeline (test_third_party_project.py) with its whole suite, as the README writes it.
        document = third_party_pipeline(
            "itsdangerous", upstream, {"requirements": ["requirements/tests.txt"]}
        )
        (catalog / "itsdangerous" / DEFS_FILE).write_text(as_defs_yaml(pipeline_text(document)))
        (root / "dagster").mkdir()
        env = {
            **os.environ,
            "NIGHTLY_HOME": str(root / "home"),
            "DAGSTER_HOME": str(root / "dagster"),
            "NIGHTLY_CATALOG_DIR": str(catalog),
            "NIGHTLY_WHEELHOUSE": str(REPO_WHEELHOUSE),  # offline, as the direct run
        }
        for name in ("NIGHTLY_ENV", "NIGHTLY_PACKAGE_INDEX_URL", "NIGHTLY_WAREHOUSE_URL"):
            env.pop(name, None)
        nights, directs, night_cpus, direct_cpus = [], [], [], []
        for turn in range(REPEATS):
            # Taking turns, so a machine that slows down mid-run weighs on both alike.
            cpu = _children_cpu_s()
            nights.append(_night(root, env, f"2026-11-{turn + 3:02d}"))
            night_cpus.append(_children_cpu_s() - cpu)
            cpu = _children_cpu_s()
            directs.append(_direct(root, upstream, turn))
            direct_cpus.append(_children_cpu_s() - cpu)
        uv_s, pip_s = _environments(root)
    night_s, direct_s = statistics.median(nights), statistics.median(directs)
    print(
        f"third_party_night: itsdangerous night {night_s:.2f} s (`nightly run`), direct clone + venv + pip + "
        f"pytest {direct_s:.2f} s: {night_s / direct_s:.2f}x (target <= 1.15x; median of {REPEATS})"
    )
    print(
        f"third_party_night: environment alone, uv {uv_s:.2f} s, pip {pip_s:.2f} s: "
        f"pip / uv {pip_s / uv_s:.1f}x (median of {REPEATS}, uv's cache warm)"
    )
    night_cpu, direct_cpu = statistics.median(night_cpus), statistics.median(direct_cpus)
    print(
        f"third_party_night: CPU time (user + system, every process of a side), night {night_cpu:.2f} s, "
        f"direct {direct_cpu:.2f} s: {night_cpu / direct_cpu:.2f}x (median of {REPEATS}; on a machine "
        "shared with other work the wall times stretch unevenly, this less)"
    )
    return {
        "third-party night / direct": night_s / direct_s,
        "third-party night / direct, CPU time": night_cpu / direct_cpu,
        "environment pip / uv": pip_s / uv_s,
    }
