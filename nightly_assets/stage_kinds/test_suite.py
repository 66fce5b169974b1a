"""The test_suite stage: a suite by markers (or Bazel targets) where the catalog says, JUnit parsed,
recorded and checked."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
from pydantic import Field

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.catalog.models import Suite
from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
from nightly_assets.containers.suites import run_in_image, runs_in_image, visible_gpus
from nightly_assets.rbe.resources import BazelRbeResource
from nightly_assets.results import TestReport
from nightly_assets.stage_kinds.spec import RepoParams, StageKind
from nightly_assets.stages import StageRun, StageSpec, recorded_stage, require_local_runner, stage_events
from nightly_assets.testing import checks
from nightly_assets.testing.junit import parse_collect_only, parse_junit, report_metadata
from nightly_assets.testing.resources import PYTEST_USABLE_EXIT_CODES, LocalTestRunnerResource, TestRunError
from nightly_assets.tpu import checks as tpu_checks
from nightly_assets.tpu.assets import run_tpu_suite_stage
from nightly_assets.tpu.stage import TpuSuiteParams
from nightly_assets.warehouse.resources import WarehouseResource


class TestSuiteParams(RepoParams, TpuSuiteParams):
    __test__ = False  # not a pytest class

    env: dict[str, str] = Field(default_factory=dict)  # in the image; {arch}, {target}, target params
    workspace: str = ""  # a Bazel suite's workspace folder inside the checkout

    def runner_kinds(self, accepted: frozenset[str]) -> frozenset[str]:
        # Settings that only one runner kind reads pin the stage to it.
        if self.model_fields_set & set(TpuSuiteParams.model_fields):
            return accepted & {"tpu_vm"}
        if self.env:
            return accepted & {"docker"}
        return accepted


def build_test_suite_asset(spec: StageSpec) -> dg.AssetsDefinition:
    suite = spec.stage.suite
    assert suite is not None  # the catalog guarantees it for test_suite stages
    thresholds = spec.pipeline.thresholds
    env_stage = spec.upstream_stage("environment", "docker_image")
    on_tpu_vm = "tpu_vm" in spec.catalog.runner_kinds(spec.stage)
    budget = thresholds.cost_budget_usd if on_tpu_vm else None

    @dg.asset(
        required_resource_keys=_resources_used(spec, env_stage),
        **spec.asset_args(
            check_specs=[
                *checks.test_report_check_specs(spec.key, thresholds.test_count_drop_pct),
                *tpu_checks.cost_check_specs(spec.key, budget),
                *(tpu_checks.vm_check_specs(spec.key) if on_tpu_vm else []),
            ]
        ),
    )
    def _test_report(
        context: dg.AssetExecutionContext,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """JUnit report of one test suite for one night and target."""
        artefacts: ArtefactStoreResource = context.resources.artefacts
        warehouse: WarehouseResource = context.resources.warehouse
        extra: dict[str, object] = {}
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            environment = artefacts.read_manifest(run.key, env_stage) if env_stage else {}
            if run.runner is not None and run.runner.kind == "tpu_vm":
                report, extra, cost = run_tpu_suite_stage(
                    context, run, spec, artefacts, warehouse.store(), context.resources.tpu_vms
                )
                if budget is not None:
                    run.checks.append(tpu_checks.cost_within_budget(spec.key, cost, budget))
            elif suite.bazel is not None:
                report, extra = _run_bazel_suite(
                    context, run, suite, spec, artefacts, context.resources.bazel_rbe
                )
            elif runs_in_image(environment):
                resources = context.resources
                report = _run_suite_in_image(
                    context, run, suite, spec, environment, resources.docker_pool, resources.registries
                )
            else:
                require_local_runner(spec, run, "a suite outside an image")
                rootdir = spec.checkout(artefacts, run.key)
                test_runner = context.resources.test_runner
                report = _run_suite(context, run, suite, spec.stage.name, test_runner, environment, rootdir)
            store = warehouse.store()
            previous = store.previous_suite_total(run.key, spec.stage.name)
            store.record_test_report(run.key, report)
            run.manifest.update(
                report=report.counts(), collect_only=report.collect_only, junit=list(report.source_files)
            )
            run.published.extend(Path(f) for f in report.source_files)
            passed = checks.tests_passed(spec.key, report)
            run.checks[:0] = [
                passed,
                checks.test_count_stable(spec.key, report, previous, thresholds.test_count_drop_pct),
            ]
            run.status = "success" if report.passed_all else "failure"
            run.detail = f"{report.count('passed')}/{report.total} passed" + (
                " (collect-only)" if report.collect_only else ""
            )
            if not passed.passed:
                run.failure = passed.description
        yield from stage_events(run, {**report_metadata(report), **extra})

    return _test_report


def _resources_used(spec: StageSpec, env_stage: str | None) -> set[str]:
    """The resources the stage's runners use: a demo suite never asks for TPU or Bazel settings."""
    suite = spec.stage.suite
    assert suite is not None
    kinds = spec.catalog.runner_kinds(spec.stage)
    used = {"artefacts", "warehouse"}
    if "tpu_vm" in kinds:
        used.add("tpu_vms")
    if kinds - {"tpu_vm"}:
        if suite.bazel is not None:
            used.add("bazel_rbe")
        else:
            used.add("test_runner")  # on this host, or in the image stage's virtualenv stand-in
            if env_stage is not None and spec.pipeline.stage(env_stage).kind == "docker_image":
                used |= {"docker_pool", "registries"}
    return used


def _run_bazel_suite(
    context: dg.AssetExecutionContext,
    run: StageRun,
    suite: Suite,
    spec: StageSpec,
    artefacts: ArtefactStoreResource,
    bazel_rbe: BazelRbeResource,
) -> tuple[TestReport, dict[str, object]]:
    """`bazel test` of the checkout through the RBE resource (a local build when RBE is down)."""
    assert suite.bazel is not None
    workspace = spec.checkout(artefacts, run.key) / spec.params(TestSuiteParams).workspace
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
    return result.report, result.metadata()


def _selection(suite: Suite, run: StageRun, gpus: int) -> tuple[str, bool]:
    """The suite's marker expression for this target, and whether it only collects (seed 001's
    dry run: an arch in `collect_only_on`, or fewer GPUs than the suite needs)."""
    assert suite.markers is not None  # Bazel suites run through the RBE resource (issue #4)
    markers = suite.markers.format(arch=run.target.arch, **run.target.params)
    return markers, run.target.arch in suite.collect_only_on or gpus < suite.min_gpus


def _run_suite(
    context: dg.AssetExecutionContext,
    run: StageRun,
    suite: Suite,
    name: str,
    test_runner: LocalTestRunnerResource,
    environment: dict,
    rootdir: Path,
) -> TestReport:
    runner_gpus = run.runner.gpus if run.runner else 0
    gpus = test_runner.visible_gpus() if runner_gpus == "auto" else runner_gpus
    markers, collect_only = _selection(suite, run, gpus)
    python = Path(environment["python"])
    log = run.workdir / "pytest.log"
    timeout_s = suite.timeout_minutes * 60
    if collect_only:
        context.log.info(
            f"{name}: collect-only ({run.target.arch}, {gpus} GPU(s), suite needs {suite.min_gpus})"
        )
        result = test_runner.collect_pytest(python, rootdir, suite.paths, markers, timeout_s, log)
        report = parse_collect_only(result.output, name, run.runner_name)
    else:
        context.log.info(f"{name}: pytest -m {markers!r} on {run.runner_name}")
        junit = run.workdir / "junit.xml"
        test_runner.run_pytest(python, rootdir, suite.paths, markers, junit, timeout_s, log)
        report = parse_junit(junit, name, run.runner_name)
    context.log.info(f"{name}: {report.counts()}")
    return report


def _run_suite_in_image(
    context: dg.AssetExecutionContext,
    run: StageRun,
    suite: Suite,
    spec: StageSpec,
    environment: dict,
    pool: DockerRunnerPoolResource,
    registries: ContainerRegistriesResource,
) -> TestReport:
    """The suite in the night's image through Dagster Pipes, on the runner label's Docker host."""
    name = spec.stage.name
    gpus = visible_gpus(pool, run)
    markers, collect_only = _selection(suite, run, gpus)
    variables = {"arch": run.target.arch, "target": run.target.name, **run.target.params}
    env = {k: str(v).format(**variables) for k, v in spec.params(TestSuiteParams).env.items()}
    env["NIGHTLY_EXPECTED_DEVICES"] = str(run.target.devices)
    context.log.info(
        f"{name}: {'collect-only' if collect_only else 'pytest'} -m {markers!r} in the image "
        f"({run.target.arch}, {gpus} GPU(s) on '{run.runner_name}', suite needs {suite.min_gpus})"
    )
    result = run_in_image(
        context,
        run,
        environment,
        pool,
        registries,
        paths=suite.paths,
        markers=markers,
        collect_only=collect_only,
        timeout_s=suite.timeout_minutes * 60,
        env=env,
    )
    log = result.out_dir / "output.log"
    run.published.append(log)
    output = log.read_text(errors="replace") if log.is_file() else ""
    if result.timed_out or result.returncode not in PYTEST_USABLE_EXIT_CODES:
        tail = "\n".join(output.splitlines()[-30:])
        why = (
            f"timed out after {suite.timeout_minutes} min"
            if result.timed_out
            else f"exited {result.returncode}"
        )
        raise TestRunError(f"{name}: pytest in the image {why}; last output:\n{tail}")
    if collect_only:
        report = parse_collect_only(output, name, run.runner_name)
    else:
        report = parse_junit(result.out_dir / "junit.xml", name, run.runner_name)
    context.log.info(f"{name}: {report.counts()}")
    return report


KIND = StageKind(
    "test_suite",
    TestSuiteParams,
    build_test_suite_asset,
    frozenset({"pytest", "junit"}),
    frozenset({"local", "docker", "rbe", "tpu_vm"}),
)
