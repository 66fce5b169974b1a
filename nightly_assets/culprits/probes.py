"""One probe of a culprit search: the pipeline's repositories at a set of commits, its wheel built,
installed with the suite's test dependencies into a fresh environment, then only the failing tests
run (or only the regressed benchmark), through the same resources a night uses. A commit that
does not build, or where the test does not exist, is skipped (as `git bisect skip`)."""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.wheel_metadata import top_level_names
from nightly_assets.catalog.models import Pipeline, Stage
from nightly_assets.culprits.bisect import Verdict
from nightly_assets.perf.timing import TimingFileError, read_timing_file
from nightly_assets.process import CommandError, run_command
from nightly_assets.sources.resources import GitSourcesResource, SourceError
from nightly_assets.testing.junit import parse_junit
from nightly_assets.testing.junit_errors import JUnitError
from nightly_assets.testing.resources import LocalTestRunnerResource, without_installed_packages

FAILED = ("failed", "error")


class NotSearchable(ValueError):
    """A stage chain the search cannot rebuild on this machine; names the stage and why."""


@dataclass(frozen=True)
class Chain:
    """The stages a probe rebuilds: the wheel, its environment, and the suite or benchmark."""

    pipeline: Pipeline
    wheels: Stage
    environment: Stage
    consumer: Stage  # the test_suite or benchmarks stage

    @staticmethod
    def of(pipeline: Pipeline, stage: str) -> Chain:
        consumer = pipeline.stage(stage)
        upstream = [pipeline.stage(n) for n in pipeline.upstream(stage)]
        wheels = next((s for s in upstream if s.kind == "wheels"), None)
        environment = next((s for s in upstream if s.kind == "environment"), None)
        if wheels is None or environment is None:
            raise NotSearchable(
                f"stage '{stage}': a culprit search rebuilds wheels and an environment stage; "
                "it has no such stages upstream (its image or Bazel build is not rebuilt per commit)"
            )
        if getattr(wheels.typed_params, "builder", "pip") != "pip":
            raise NotSearchable(f"stage '{wheels.name}': a culprit search builds with pip, not this builder")
        runner = consumer.runner_ref if isinstance(consumer.runner_ref, str) else None
        if consumer.kind == "test_suite" and (consumer.suite is None or consumer.suite.bazel is not None):
            raise NotSearchable(f"stage '{stage}': only pytest suites are re-run by a culprit search")
        if runner is not None and runner != "local":
            raise NotSearchable(f"stage '{stage}': runs on '{runner}'; a culprit search runs on this machine")
        return Chain(pipeline, wheels, environment, consumer)


@dataclass(frozen=True)
class Prober:
    """Builds a probe's tree: checkouts at `pins`, the wheel, the environment."""

    chain: Chain
    workdir: Path
    git: GitSourcesResource
    builder: PythonBuildResource
    catalog_urls: Mapping[str, str]

    def environment(self, pins: Mapping[str, str]) -> tuple[Path, dict[str, Path], list[str]] | str:
        """(python, checkouts, installed packages), or why this commit set cannot be judged."""
        tree = self.workdir / "-".join(sha[:10] for _, sha in sorted(pins.items()))
        checkouts: dict[str, Path] = {}
        try:
            for repo, sha in pins.items():
                if not (tree / repo).exists():
                    self.git.ensure_mirror(repo, self.catalog_urls[repo], sha)
                    self.git.checkout(repo, sha, tree / repo)
                checkouts[repo] = tree / repo
            wheels = self.builder.build_wheels(
                checkouts[self.chain.pipeline.repo_of(self.chain.wheels)], tree / "dist", tree / "build.log"
            )
            env_params = self.chain.environment.typed_params
            source = checkouts[self.chain.pipeline.repo_of(self.chain.environment)]
            tests = env_params.test_dependencies(source, self.chain.environment.name)  # type: ignore[attr-defined]
            python = tree / "venv" / "bin" / "python"
            installed = tree / "venv.installed"  # a venv whose install failed half-way is made again
            if not installed.exists():
                shutil.rmtree(tree / "venv", ignore_errors=True)
                python = self.builder.create_environment(tree / "venv", wheels, tree / "install.log", tests)
                installed.touch()
        except (CommandError, SourceError, ValueError, OSError) as exc:
            return f"does not build: {' '.join(str(exc).split())[:300]}"
        return python, checkouts, top_level_names(wheels)


def probe_tests(
    prober: Prober,
    pins: Mapping[str, str],
    node_ids: list[str],
    timeout_s: float,
    runner: LocalTestRunnerResource,
) -> tuple[Verdict, str]:
    """Bad when one of `node_ids` fails at `pins`, good when every one passes."""
    built = prober.environment(pins)
    if isinstance(built, str):
        return "skip", built
    python, checkouts, packages = built
    checkout = checkouts[prober.chain.pipeline.repo_of(prober.chain.consumer)]
    tree = checkout.parent
    rootdir = without_installed_packages(checkout, packages, tree / "rootdir")
    if any(node.startswith("-") for node in node_ids):  # warehouse data: never an option to pytest
        return "skip", "a test id that starts with '-' is not run"
    args = [pytest_node_id(rootdir, node) for node in node_ids]
    junit = tree / "probe.xml"
    junit.unlink(missing_ok=True)
    try:
        runner.run_pytest(python, rootdir, args, junit, timeout_s, tree / "pytest.log")
        cases = {c.node_id: c.outcome for c in parse_junit(junit, "probe").cases}
    except (CommandError, JUnitError, OSError) as exc:
        return "skip", f"the tests did not run: {' '.join(str(exc).split())[:300]}"
    missing = [n for n in node_ids if n not in cases]
    if missing:
        return "skip", f"not collected here: {', '.join(missing[:3])}"
    failing = [n for n in node_ids if cases[n] in FAILED]
    if failing:
        return "bad", f"{len(failing)} of {len(node_ids)} failed"
    return "good", f"{len(node_ids)} passed"


def probe_benchmark(
    prober: Prober, pins: Mapping[str, str], name: str, before: float, after: float, timeout_s: float
) -> tuple[Verdict, str]:
    """Bad when the benchmark, run at `pins`, is nearer the regressed level than the old one."""
    built = prober.environment(pins)
    if isinstance(built, str):
        return "skip", built
    python, checkouts, _ = built
    command = getattr(prober.chain.consumer.typed_params, "command", None) or []
    tree = next(iter(checkouts.values())).parent
    output = tree / "timing.json"
    values = []
    for _ in range(3):  # the median of three: one slow run on a shared machine is no verdict
        output.unlink(missing_ok=True)
        try:
            run_command(
                [str(python) if a == "python" else a.replace("{output}", str(output)) for a in command],
                cwd=tree,
                timeout_s=timeout_s,
                log_path=tree / "benchmark.log",
                scratch_home=True,
            )
            values.append(next(r.value for r in read_timing_file(output) if r.name == name))
        except (CommandError, TimingFileError, StopIteration, OSError) as exc:
            return (
                "skip",
                f"the benchmark did not run: {' '.join(str(exc).split())[:300] or name + ' missing'}",
            )
    value = statistics.median(values)
    verdict: Verdict = "bad" if abs(value - after) < abs(value - before) else "good"
    return verdict, f"{name} {value:.4g} (good level {before:.4g}, bad {after:.4g})"


def pytest_node_id(rootdir: Path, node_id: str) -> str:
    """A JUnit `classname::name` as pytest's own node id: the longest dotted prefix of the classname
    that is a module file under `rootdir`, then the classes, then the name."""
    classname, _, name = node_id.rpartition("::")
    parts = classname.split(".") if classname else []
    for cut in range(len(parts), 0, -1):
        module = Path(*parts[:cut]).with_suffix(".py")
        if module.is_absolute() or ".." in module.parts:
            break  # only modules inside the checkout
        if (rootdir / module).is_file():
            return "::".join([module.as_posix(), *parts[cut:], name])
    return node_id
