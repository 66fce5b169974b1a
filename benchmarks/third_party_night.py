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

itsdangerous's suite takes a second by hand, less than Python and Dagster take to start a night, so
the same comparison runs again with the suite copied 20 times: the ratio a project of a more common
size sees. Each side's CPU is split into the `nightly run` process's own and its commands', beside a
process that only imports dagster, so what the night adds is shown, not inferred.
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
from dataclasses import dataclass
from pathlib import Path

from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.suite_dependencies import SuiteDependencies
from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR, DEFS_FILE
from nightly_assets.resources import REPO_WHEELHOUSE
from nightly_assets_tests.catalog_files import as_defs_yaml
from nightly_assets_tests.third_party_pipeline import developer_venv, pipeline_text, third_party_pipeline

PROJECT = Path(__file__).resolve().parents[1] / "nightly_assets_tests/data/projects/itsdangerous"
REPEATS = 3
RELEASED_TESTS = 297  # itsdangerous 2.2.0's suite
# The suite made 20 times larger (5,940 tests, some 15 s by hand): a project of the size nights are
# run for, where what the night adds to its tests shows against them (see main()).
SUITE_COPIES = 20
COMMIT_DATE = "2026-11-02T10:00:00Z"  # before the nights run (from 2026-11-03): the one they pin


def _upstream(root: Path, project: Path) -> Path:
    """`project` as a one-commit git repository (what the night pins)."""
    repo = root / "upstream"
    shutil.copytree(project, repo)
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


# `nightly run` as its console script runs it, writing at exit the CPU seconds its own process used
# (not its commands'): what starting up, Dagster's run and the stages' bookkeeping cost.
OWN_CPU_WRAPPER = """
import atexit, os, resource, runpy, sys
def _own_cpu():
    used = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["BENCH_OWN_CPU_FILE"], "w") as f:
        f.write(str(used.ru_utime + used.ru_stime))
atexit.register(_own_cpu)
sys.argv = ["nightly", *sys.argv[1:]]
runpy.run_module("nightly_assets.cli", run_name="__main__", alter_sys=True)
"""


def _night(root: Path, env: dict[str, str], night: str) -> tuple[float, float]:
    """Wall seconds of `nightly run` for `night`, and the CPU seconds of its own process."""
    own_cpu_file = root / "own-cpu"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", OWN_CPU_WRAPPER, "run", "itsdangerous", "--night", night],
        env={**env, "BENCH_OWN_CPU_FILE": str(own_cpu_file)},
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"`nightly run itsdangerous --night {night}` failed:\n{done.stdout[-3000:]}")
    return elapsed, float(own_cpu_file.read_text())


def _import_dagster_cpu_s() -> float:
    """CPU seconds of a Python process that only imports dagster: the floor of any Dagster run's."""
    cpu = _children_cpu_s()
    subprocess.run([sys.executable, "-c", "import dagster"], check=True)
    return _children_cpu_s() - cpu


def _direct(root: Path, upstream: Path, turn: int) -> float:
    """A developer's run: a clone, a venv, the project and its test requirements by pip, then pytest."""
    start = time.perf_counter()
    checkout = root / f"direct-{turn}-checkout"
    subprocess.run(["git", "clone", "--quiet", "--", upstream, checkout], check=True)
    python = developer_venv(root / f"direct-{turn}", checkout, REPO_WHEELHOUSE)
    subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
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


@dataclass(frozen=True)
class Sides:
    """Medians of one project's nights and direct runs, taken in turns."""

    night_s: float
    direct_s: float
    night_cpu_s: float
    direct_cpu_s: float
    own_cpu_s: float  # the `nightly run` process's own, its commands not counted
    import_dagster_cpu_s: float


def _sides(root: Path, project: Path) -> Sides:
    """`nightly run` of the pipeline of `project` and the direct run of the same commit, in turns."""
    upstream = _upstream(root, project)
    catalog = root / "catalog"
    shutil.copytree(BUILTIN_CATALOG_DIR, catalog, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (catalog / "itsdangerous").mkdir()
    # The tests' pipeline (test_third_party_project.py) with its whole suite, as docs/pipelines.md writes it.
    document = third_party_pipeline("itsdangerous", upstream, {"requirements": ["requirements/tests.txt"]})
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
    nights, directs, night_cpus, direct_cpus, own_cpus, floors = [], [], [], [], [], []
    for turn in range(REPEATS):
        # Taking turns, so a machine that slows down mid-run weighs on both alike.
        cpu = _children_cpu_s()
        wall, own_cpu = _night(root, env, f"2026-11-{turn + 3:02d}")
        nights.append(wall)
        own_cpus.append(own_cpu)
        night_cpus.append(_children_cpu_s() - cpu)
        cpu = _children_cpu_s()
        directs.append(_direct(root, upstream, turn))
        direct_cpus.append(_children_cpu_s() - cpu)
        floors.append(_import_dagster_cpu_s())
    return Sides(
        *(statistics.median(v) for v in (nights, directs, night_cpus, direct_cpus, own_cpus, floors))
    )


def _with_suite_copies(root: Path, copies: int) -> Path:
    """The project with its test package copied so the suite runs `copies` times (each copy its own
    package, so every test keeps a name of its own)."""
    project = root / f"itsdangerous-suite-x{copies}"
    shutil.copytree(PROJECT, project)
    for number in range(2, copies + 1):
        shutil.copytree(project / "tests/test_itsdangerous", project / f"tests/test_itsdangerous_{number}")
    return project


def _report(label: str, sides: Sides) -> None:
    s = sides
    print(
        f"third_party_night: {label}: night {s.night_s:.2f} s (`nightly run`), direct clone + venv + pip + "
        f"pytest {s.direct_s:.2f} s: {s.night_s / s.direct_s:.2f}x (target <= 1.15x); CPU time (every "
        f"process of a side; a shared machine stretches it less than wall time) {s.night_cpu_s:.2f} s "
        f"against {s.direct_cpu_s:.2f} s: {s.night_cpu_s / s.direct_cpu_s:.2f}x"
    )
    print(
        f"third_party_night: {label}: of the night's CPU, {s.own_cpu_s:.2f} s is the `nightly run` "
        "process's own (Python and Dagster starting up, the run's events, the stages' bookkeeping: "
        f"a process that only imports dagster takes {s.import_dagster_cpu_s:.2f} s), "
        f"{s.night_cpu_s - s.own_cpu_s:.2f} s its commands' (git, uv, pytest)"
    )


def main() -> dict[str, float]:
    if not any(REPO_WHEELHOUSE.glob("flit_core-3*.whl")):
        raise RuntimeError(f"{REPO_WHEELHOUSE} lacks the fixture project's packages: run `make setup`")
    with tempfile.TemporaryDirectory(prefix="bench-third-party-") as tmp:
        root = Path(tmp)
        (root / "released").mkdir()
        released = _sides(root / "released", PROJECT)
        uv_s, pip_s = _environments(root)
        (root / "larger").mkdir()
        larger = _sides(root / "larger", _with_suite_copies(root, SUITE_COPIES))
    _report(f"itsdangerous as released ({RELEASED_TESTS} tests)", released)
    _report(f"its suite x{SUITE_COPIES} ({RELEASED_TESTS * SUITE_COPIES} tests)", larger)
    # What the night adds beyond the direct run: starting up and one run of five stages (fixed), the
    # results' bookkeeping (grows with the tests), less what uv saves on pip (grows with the packages).
    extra_released, extra_larger = released.night_s - released.direct_s, larger.night_s - larger.direct_s
    print(
        f"third_party_night: the night's cost beyond the direct run: {extra_released:.2f} s as released, "
        f"{extra_larger:.2f} s with the suite x{SUITE_COPIES} (median of {REPEATS} each)"
    )
    print(
        f"third_party_night: environment alone, uv {uv_s:.2f} s, pip {pip_s:.2f} s: "
        f"pip / uv {pip_s / uv_s:.1f}x (median of {REPEATS}, uv's cache warm)"
    )
    return {
        "third-party night / direct": released.night_s / released.direct_s,
        "third-party night / direct, CPU time": released.night_cpu_s / released.direct_cpu_s,
        f"night / direct, suite x{SUITE_COPIES}": larger.night_s / larger.direct_s,
        f"night / direct, suite x{SUITE_COPIES}, CPU": larger.night_cpu_s / larger.direct_cpu_s,
        "environment pip / uv": pip_s / uv_s,
    }
