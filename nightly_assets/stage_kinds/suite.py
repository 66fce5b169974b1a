"""The test_suite stage: a suite by markers (or Bazel targets), run by its runner's backend, its
failures confirmed by re-runs (testing/confirm.py), its JUnit recorded and checked."""

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.catalog.suite import Suite
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.manifests import EnvironmentManifest
from nightly_assets.results import NightKey, TestReport
from nightly_assets.runners import backend
from nightly_assets.runners.protocol import RunnerBackend, StageWork
from nightly_assets.stage_kinds.spec import StageKind
from nightly_assets.stages import StageSpec, recorded_devices, recorded_stage, stage_events
from nightly_assets.testing import checks, health
from nightly_assets.testing.confirm import FAILING_FLAKY, confirm_failures
from nightly_assets.testing.report_metadata import report_metadata
from nightly_assets.testing.suite_params import TestSuiteParams
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.words import plural

if TYPE_CHECKING:
    from nightly_assets.warehouse.store import Warehouse

QUARANTINE_WINDOW_NIGHTS = 30  # the nights a failing test's flakiness is judged over


def build_test_suite_asset(spec: StageSpec) -> dg.AssetsDefinition:
    # Everything read here and in the run below is resolved in the spec (stages.StageSpec).
    suite, environment, thresholds = spec.suite, spec.environment, spec.pipeline.thresholds
    assert suite is not None  # the catalog asks a `suite` block of every test_suite stage
    backends = [suite_backend(suite, kind) for kind in spec.runner_kinds]

    @dg.asset(
        required_resource_keys={"artefacts", "warehouse"}.union(
            *(b.resource_keys(spec, "suite") for b in backends)
        ),
        **spec.asset_args(
            check_specs=[
                *checks.test_report_check_specs(spec.key, thresholds.test_count_drop_pct),
                *(c for b in backends for c in b.check_specs(spec, "suite")),
            ]
        ),
    )
    def _test_report(
        context: dg.AssetExecutionContext,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """JUnit report of one test suite for one night and target."""
        artefacts: ArtefactStoreResource = context.resources.artefacts
        warehouse: WarehouseResource = context.resources.warehouse
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            made = artefacts.manifest(run.key, environment.name, EnvironmentManifest) if environment else None
            work = StageWork(context, spec, run, made, gpus=suite.min_gpus)
            outcome = suite_backend(suite, run.runner_kind).run_suite(work)
            store = warehouse.store()
            previous = store.previous_suite_total(run.key, spec.stage.name)
            confirmation = confirm_failures(
                outcome.report,
                suite.confirm,
                outcome.rerunner,
                budget_s=suite.confirm.timeout_s or suite.timeout_minutes * 60,
                where=f"'{run.runner_name}' ({run.runner_kind or 'local'})",
                log=context.log.info,
                judged_before=_judged_on(store, run.key, spec.stage.name, previous),
            )
            report = confirmation.report
            devices = recorded_devices(run)
            if devices is not None:
                store.record_device_facts(run.key, spec.stage.name, run.runner_name, devices)
            store.record_test_report(run.key, report, run_id=context.run.run_id)
            run.manifest.update(
                report=report.counts(), collect_only=report.collect_only, junit=list(report.source_files)
            )
            if confirmation.rerun or confirmation.not_rerun:
                run.manifest["confirm"] = confirmation.manifest()
            run.published.extend(Path(f) for f in report.source_files)
            quarantined: set[str] = set()
            if thresholds.quarantine_clean_nights is not None and not report.collect_only:
                quarantined = health.quarantined_failures(
                    store,
                    run.key,
                    report.suite,
                    report.failures,
                    clean_nights=thresholds.quarantine_clean_nights,
                    nights=QUARANTINE_WINDOW_NIGHTS,
                )
            sharded = outcome.shards
            not_run = sharded.findings.sentence() if sharded is not None else ""
            if sharded is not None:
                run.manifest["shards"] = sharded.manifest()
                run.published.append(sharded.plan_file)
            passed = checks.tests_passed(spec.key, report, quarantined, not_run)
            run.checks[:0] = [
                passed,
                checks.test_count_stable(spec.key, report, previous, thresholds.test_count_drop_pct),
            ]
            run.status = "success" if passed.passed else "failure"
            if quarantined:
                run.manifest["quarantined"] = sorted(quarantined)
            run.detail = _outcome_words(
                report, suite, run.target.arch, recorded_devices(run), run.manifest.get("gpu_problem", "")
            )
            run.detail += confirmation.summary() + (sharded.words() if sharded is not None else "")
            if not passed.passed:
                run.failure = passed.description
        devices = recorded_devices(run)
        device_metadata = {"devices": devices.describe()} if devices is not None else {}
        yield from stage_events(
            run,
            {
                **report_metadata(report),
                **confirmation.metadata(),
                **outcome.metadata,
                **device_metadata,
                **(sharded.metadata() if sharded is not None else {}),
            },
        )

    return _test_report


def _judged_on(
    store: "Warehouse", key: NightKey, suite: str, previous: tuple[dt.date, int] | None
) -> dict[str, str]:
    """Node id -> verdict state of the suite's tests that the test_health stage judged on the
    suite's previous night that ran (none: no such night, or no health stage); a flaky test that
    failed that night is `confirm.FAILING_FLAKY`."""
    if previous is None:
        return {}
    night = NightKey(key.pipeline, previous[0], key.target)
    judged = {v.test_id: v.state for v in store.verdicts(night) if v.suite == suite}
    if "flaky" in judged.values():
        for case in store.failed_cases(night, suite):
            if judged.get(case.node_id) == "flaky":
                judged[case.node_id] = FAILING_FLAKY
    return judged


def _outcome_words(
    report: TestReport, suite: Suite, arch: str, devices: DeviceFacts | None, gpu_problem: str = ""
) -> str:
    """The stage's one-line detail: "9/10 passed (1 failed)", or for a suite that only collected
    what happened and why: "2 collected, not run: needs 1 GPU, none here", with why none are
    here where the host's cards could not be counted or were all hidden."""
    if report.collect_only:
        if arch in suite.collect_only_on:
            why = f"collect-only on {arch}"
        else:
            have = devices.count if devices is not None else 0
            why = f"needs {plural(suite.min_gpus, 'GPU')}, " + (f"{have} here" if have else "none here")
            why += f"; {gpu_problem}" if gpu_problem else ""
        return f"{report.count('collected')} collected, not run: {why}"
    failed, errors = report.count("failed"), report.count("error")
    problems = [f"{failed} failed"] if failed else []
    if errors:
        problems.append(plural(errors, "error"))
    return f"{report.count('passed')}/{report.total} passed" + (
        f" ({', '.join(problems)})" if problems else ""
    )


def suite_backend(suite: Suite, runner_kind: str | None) -> RunnerBackend:
    """Who runs the suite: Bazel runs its own tests through remote execution (locally when the
    executor is down), whatever hardware the runner names; else the runner kind's backend."""
    return backend("rbe" if suite.bazel is not None else runner_kind)


KIND = StageKind(
    "test_suite",
    TestSuiteParams,
    build_test_suite_asset,
    frozenset({"pytest", "junit"}),
    frozenset({"local", "docker", "rbe", "tpu_vm", "kubernetes", "batch"}),
)
