"""The rbe runner kind: `bazel test` and `bazel build` through Bazel remote execution (a local
build when the executor does not answer), seed 000's ROCm JAX build."""

from __future__ import annotations

import functools
from pathlib import Path

from nightly_assets.builds.wheel_params import WheelsParams
from nightly_assets.catalog.models import BazelTests
from nightly_assets.rbe import bazel as bz
from nightly_assets.rbe.resources import BazelRbeResource
from nightly_assets.rbe.runs import BazelTestRun
from nightly_assets.results import TestReport
from nightly_assets.runners.protocol import BuiltWheels, Capability, RunnerBackend, StageWork, SuiteOutcome
from nightly_assets.stages import StageSpec
from nightly_assets.testing.confirm import Rerunner
from nightly_assets.testing.junit import iter_junit
from nightly_assets.testing.junit_errors import JUnitError
from nightly_assets.testing.suite_params import TestSuiteParams


class RbeBackend(RunnerBackend):
    kind = "rbe"
    supports = frozenset({"suite", "wheels"})

    def resource_keys(self, spec: StageSpec, capability: Capability) -> set[str]:
        return {"bazel_rbe"}

    def run_suite(self, work: StageWork) -> SuiteOutcome:
        return bazel_test(work)

    def build_wheels(self, work: StageWork, params: WheelsParams) -> BuiltWheels:
        return bazel_wheels(work, params, remote=True)


def bazel_test(work: StageWork) -> SuiteOutcome:
    """`bazel test` of the checkout through the RBE resource (a local build when RBE is down)."""
    context, spec, run = work.context, work.spec, work.run
    suite = spec.stage.suite
    assert suite is not None and suite.bazel is not None
    bazel_rbe: BazelRbeResource = work.resources.bazel_rbe
    workspace = spec.checkout(work.artefacts, run.key) / spec.params(TestSuiteParams).workspace
    result = bazel_rbe.run_tests(
        workspace,
        suite.bazel,
        suite=spec.stage.name,
        out_dir=run.workdir / "bazel",
        timeout_s=suite.timeout_minutes * 60,
        runner=run.runner_name,
        output_key=spec.output_key(run.key),
    )
    if result.fallback_reason:
        context.log.warning(
            f"{spec.stage.name}: remote build unavailable, ran locally: {result.fallback_reason}"
        )
    run.manifest.update(bazel_mode=result.mode, bazel_fallback=result.fallback_reason)
    context.log.info(f"{spec.stage.name}: {result.report.counts()} ({result.mode})")
    rerunner = bazel_rerunner(
        bazel_rbe,
        workspace,
        result,
        suite=spec.stage.name,
        out_dir=run.workdir / "bazel-confirm",
        runner=run.runner_name,
        output_key=spec.output_key(run.key),
    )
    return SuiteOutcome(result.report, result.metadata(), rerunner)


def bazel_rerunner(
    bazel_rbe: BazelRbeResource,
    workspace: Path,
    result: BazelTestRun,
    *,
    suite: str,
    out_dir: Path,
    runner: str,
    output_key: str | None = None,
) -> Rerunner:
    """Failing tests re-run as their targets: `bazel test --runs_per_test=N` of the targets whose
    cases failed in `result`, every attempt in one Bazel run, its outputs under `out_dir`."""

    @functools.cache  # read only when a test failed
    def targets() -> dict[str, str]:
        failed = [label for label, summary in result.targets.items() if summary.status != "PASSED"]
        return case_targets(result.testlogs_dir, failed)

    def run_round(labels: list[str], number: int, runs: int, timeout_s: float) -> TestReport:
        again = bazel_rbe.run_tests(
            workspace,
            BazelTests(targets=labels, flaky_test_attempts=1),  # named targets: no tag filter
            suite=suite,
            out_dir=out_dir,
            timeout_s=timeout_s,
            runner=runner,
            output_key=output_key,
            runs_per_test=runs,
        )
        return again.report

    return Rerunner(
        lambda case: targets().get(case.node_id),
        run_round,
        runs_at_once=True,
        why_not="its Bazel target is not among the targets that failed",
    )


def case_targets(testlogs: Path, labels: list[str]) -> dict[str, str]:
    """The test cases of `labels` in a collected bazel-testlogs tree, node id -> target label."""
    found: dict[str, str] = {}
    for label in labels:
        for xml in sorted((testlogs / bz.label_dir(label)).rglob("test.xml")):
            try:
                found.update((case.node_id, label) for case in iter_junit(xml, label))
            except JUnitError:
                continue  # the report already holds the fault as an error case of the target
    return found


def bazel_wheels(work: StageWork, params: WheelsParams, *, remote: bool) -> BuiltWheels:
    """Wheels from `bazel build` of the catalog's targets: through remote execution, or on the
    orchestrator's host (a local runner, or a batch machine's build host as Theta's Jenkins agent
    was), after bootstrapping Bazel from a pinned repository when the catalog says so."""
    context, spec, run = work.context, work.spec, work.run
    build = params.bazel
    assert build is not None  # the params model requires it with builder: bazel
    bazel_rbe: BazelRbeResource = work.resources.bazel_rbe
    bazel: str | None = None
    if build.bootstrap is not None:
        pinned = spec.pinned_repo(work.artefacts, run.key, build.bootstrap.repo)
        context.log.info(f"bootstrapping Bazel from {build.bootstrap.repo} at {pinned.sha[:12]}")
        bootstrapped = bazel_rbe.bootstrap(
            Path(pinned.path), pinned.sha, build.bootstrap, log_path=run.workdir / "bootstrap.log"
        )
        bazel = str(bootstrapped)
    context.log.info(f"bazel build {' '.join(build.targets)} ({'remote' if remote else 'local'})")
    result = bazel_rbe.build(
        spec.checkout(work.artefacts, run.key) / build.workspace,
        build.targets,
        out_dir=run.workdir / "bazel",
        dest=run.workdir / "dist",
        outputs=build.outputs,
        options=build.args,
        use_remote=remote,
        bazel=bazel,
        timeout_s=build.timeout_minutes * 60,
        output_key=spec.output_key(run.key),
    )
    if result.fallback_reason:
        context.log.warning(f"remote build unavailable, built locally: {result.fallback_reason}")
    extra = {
        **result.metadata(),
        "targets": {label: list(names) for label, names in result.by_target.items()},
    }
    return BuiltWheels([f for f in result.outputs if f.suffix == ".whl"], extra)


BACKEND = RbeBackend()
