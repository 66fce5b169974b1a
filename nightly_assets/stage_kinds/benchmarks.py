"""The benchmarks stage: tonight's timings, from a benchmark command its runner's backend runs (in the
image or on this host) or the timing file a test suite stage wrote.

Before a benchmark's regression alerts it is measured again: when tonight's value would confirm a
change for the worse (what perf_baseline would alert), the command runs again on the same backend
and environment, up to `remeasure_attempts` times within `remeasure_timeout_s` in all. The change
stands only when the re-measurements' median lies nearer the new level than the old; otherwise
tonight's first value was an outlier: it is kept in the manifest and metadata, and the night's
value (what perf_baseline and the warehouse see) is the re-measurement, so nothing alerts. A
re-measurement that fails leaves the first value and its alert as they were, saying why."""

import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import dagster as dg
from pydantic import Field, model_validator

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.manifests import EnvironmentManifest, TimingManifest
from nightly_assets.perf import changepoint
from nightly_assets.perf.timing import TimingFileError, read_timing_file
from nightly_assets.process import CommandError
from nightly_assets.results import BenchmarkResult
from nightly_assets.runners import backend, stage_backends
from nightly_assets.runners.protocol import RunnerBackend, StageWork
from nightly_assets.stage_kinds.perf_baseline import assess_tonight, detector_settings
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, StageKind, StageParams
from nightly_assets.stages import StageNotAvailable, StageRun, StageSpec, recorded_devices, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.words import plural

if TYPE_CHECKING:
    from nightly_assets.warehouse.store import Warehouse

BENCHMARK_TIMEOUT_S = 3600


class BenchmarksParams(StageParams):
    # argv; "python" is the night's Python, {output} the timing JSON it writes
    command: list[str] | None = Field(default=None, min_length=1)
    from_stage: str | None = None  # or: the stage (a TPU test suite) whose timing file to read
    # GPUs the benchmark command needs, handed to it alone; a runner with fewer skips the stage
    # (with the reason), as a suite with too few GPUs only collects: never a failed night.
    min_gpus: int = Field(default=0, ge=0)
    # Re-measurements of a benchmark whose change for the worse tonight would alert (only with a
    # `command`): one fresh measurement refutes a one-night outlier, and it costs a second run of
    # the command only on such nights; 0 alerts on the first measurement.
    remeasure_attempts: int = Field(default=1, ge=0)
    # All re-measurements of a night together; the benchmark's own limit by default.
    remeasure_timeout_s: int = Field(default=BENCHMARK_TIMEOUT_S, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.command is None) == (self.from_stage is None):
            raise ValueError("a benchmarks stage takes exactly one of 'command' or 'from_stage'")
        return self

    def stage_refs(self) -> list[str]:
        return [self.from_stage] if self.from_stage else []

    def runner_kinds(self, accepted: frozenset[str]) -> frozenset[str]:
        # Reading another stage's file happens here, whatever runner wrote it.
        return accepted & {ORCHESTRATOR, "local"} if self.from_stage else accepted


def build_benchmarks_asset(spec: StageSpec) -> dg.AssetsDefinition:
    env_stage = spec.upstream_stage("environment", "docker_image")
    params = spec.params(BenchmarksParams)
    used = [b.resource_keys(spec, "command") for b in stage_backends(spec)] if params.command else []

    @dg.asset(required_resource_keys={"artefacts", "warehouse"}.union(*used), **spec.asset_args())
    def _benchmarks(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """Tonight's benchmark values, read from the timing JSON the benchmark writes."""
        artefacts: ArtefactStoreResource = context.resources.artefacts
        warehouse: WarehouseResource = context.resources.warehouse
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            if params.command is not None:
                environment = (
                    artefacts.manifest(run.key, env_stage, EnvironmentManifest) if env_stage else None
                )
                work = StageWork(context, spec, run, environment, gpus=params.min_gpus)
                runner = backend(run.runner_kind)
                available = runner.gpu_count(work) if params.min_gpus else 0
                if available < params.min_gpus:
                    reason = (
                        f"needs {plural(params.min_gpus, 'GPU')}, runner '{run.runner_name}' has {available}"
                    )
                    context.log.info(f"{spec.key.to_user_string()}: skipped: {reason}")
                    run.manifest.update(benchmarks={}, skipped=reason)
                    # Planned, as a GPU suite's collect-only on a CPU host: the stage succeeds saying so.
                    run.detail = f"skipped: {reason}"
                    return dg.MaterializeResult(metadata={"skipped": reason})
                output = runner.run_command(work, params.command, "timing.json", BENCHMARK_TIMEOUT_S)
            else:
                assert params.from_stage is not None  # the params model requires one of the two
                upstream = artefacts.manifest(run.key, params.from_stage, TimingManifest)
                if upstream.timing_file is None:
                    raise StageNotAvailable(
                        f"{spec.key.to_user_string()}: stage '{params.from_stage}' wrote no timing file"
                    )
                output = Path(upstream.timing_file)
            results = read_timing_file(output)
            devices = recorded_devices(run)
            store = warehouse.store()
            remeasured: dict[str, dict[str, Any]] = {}
            if params.command is not None and params.remeasure_attempts:
                results, remeasured = _remeasure(
                    Remeasure(work, runner, params, spec, store), results, devices.key() if devices else ""
                )
            if devices is not None:
                store.record_device_facts(run.key, spec.stage.name, run.runner_name, devices)
            store.record_benchmarks(run.key, results, devices=devices)
            run.manifest["benchmarks"] = {
                r.name: {"value": r.value, "unit": r.unit, "lower_is_better": r.lower_is_better}
                for r in results
            }
            if remeasured:
                run.manifest["remeasured"] = remeasured
            run.detail = ", ".join(
                f"{r.name}={r.value:.4g}{r.unit}"
                + (f" ({remeasured[r.name]['text']})" if r.name in remeasured else "")
                for r in results
            )
        return dg.MaterializeResult(
            metadata={f"benchmark/{r.name}": dg.MetadataValue.float(r.value) for r in results}
            | ({"devices": devices.describe(), "device_config": devices.key()} if devices else {})
            | ({"remeasured": dg.MetadataValue.json(remeasured)} if remeasured else {})
        )

    return _benchmarks


class Remeasure:
    """What re-measuring needs: the command's backend and work, its bounds, the detector."""

    def __init__(
        self,
        work: StageWork,
        runner: RunnerBackend,
        params: BenchmarksParams,
        spec: StageSpec,
        store: "Warehouse",
    ) -> None:
        self.work, self.runner, self.params, self.store = work, runner, params, store
        self.settings = detector_settings(spec.pipeline)

    @property
    def run(self) -> StageRun:
        return self.work.run


def _remeasure(
    how: Remeasure, results: list[BenchmarkResult], config_key: str
) -> tuple[list[BenchmarkResult], dict[str, dict[str, Any]]]:
    """Tonight's results after re-measuring each benchmark whose change for the worse would alert
    tonight, and what each re-measurement found (by benchmark)."""
    changes: dict[str, changepoint.ChangePoint] = {}
    for result in results:
        verdict = assess_tonight(
            how.store,
            how.run.key,
            result.name,
            result.value,
            result.lower_is_better,
            config_key,
            how.settings,
        )
        if verdict is not None and verdict.new is not None and verdict.new.worse:
            changes[result.name] = verdict.new
    if not changes:
        return results, {}
    log = how.work.context.log
    log.info(f"re-measuring {', '.join(changes)} before a regression alerts")
    values: dict[str, list[float]] = {name: [] for name in changes}
    started, failure = time.monotonic(), None
    for attempt in range(1, how.params.remeasure_attempts + 1):
        left = how.params.remeasure_timeout_s - (time.monotonic() - started)
        if left <= 0:
            failure = f"time's up after {attempt - 1} of {how.params.remeasure_attempts}"
            break
        try:
            path = how.runner.run_command(
                how.work, list(how.params.command or []), f"timing-remeasure-{attempt}.json", left
            )
            again = {r.name: r.value for r in read_timing_file(path)}
        except (CommandError, TimingFileError) as exc:
            failure = f"attempt {attempt} failed: {str(exc).splitlines()[0]}"
            log.warning(f"re-measuring {', '.join(changes)}: {failure}")
            break
        for name in changes:
            if name in again:
                values[name].append(again[name])
    seconds = round(time.monotonic() - started, 1)
    found: dict[str, dict[str, Any]] = {}
    kept = {r.name: r for r in results}
    for name, change in changes.items():
        first, measured = kept[name].value, values[name]
        record: dict[str, Any] = {
            "first": first,
            "remeasured": measured,
            "before": change.before,
            "after": change.after,
            "seconds": seconds,
        }
        if not measured:
            record |= {"confirmed": True, "text": f"re-measuring failed ({failure or 'no value'})"}
        elif changepoint.confirms(change, statistics.median(measured)):
            record |= {"confirmed": True, "text": f"confirmed by {_values(measured)} in {seconds:g} s"}
        else:
            kept[name] = replace(kept[name], value=statistics.median(measured))
            record |= {
                "confirmed": False,
                "text": f"{first:.4g} was an outlier: re-measured {_values(measured)} in {seconds:g} s",
            }
        found[name] = record
    return [kept[r.name] for r in results], found


def _values(values: list[float]) -> str:
    return ", ".join(format(v, ".4g") for v in values)


KIND = StageKind(
    "benchmarks",
    BenchmarksParams,
    build_benchmarks_asset,
    frozenset({"json"}),
    frozenset({ORCHESTRATOR, "local", "docker", "kubernetes"}),
)
