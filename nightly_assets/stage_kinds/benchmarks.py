"""The benchmarks stage: tonight's timings, from a benchmark command its runner's backend runs (in the
image or on this host) or the timing file a test suite stage wrote."""

from pathlib import Path
from typing import Self

import dagster as dg
from pydantic import Field, model_validator

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.benchmarks.timing import read_timing_file
from nightly_assets.manifests import EnvironmentManifest, TimingManifest
from nightly_assets.runners import backend, stage_backends
from nightly_assets.runners.protocol import StageWork
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, StageKind, StageParams
from nightly_assets.stages import StageNotAvailable, StageSpec, recorded_devices, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource

BENCHMARK_TIMEOUT_S = 3600


class BenchmarksParams(StageParams):
    # argv; "python" is the night's Python, {output} the timing JSON it writes
    command: list[str] | None = Field(default=None, min_length=1)
    from_stage: str | None = None  # or: the stage (a TPU test suite) whose timing file to read
    # GPUs the benchmark command needs, handed to it alone; a runner with fewer skips the stage
    # (with the reason), as a suite with too few GPUs only collects: never a failed night.
    min_gpus: int = Field(default=0, ge=0)

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
                    reason = f"needs {params.min_gpus} GPU(s), runner '{run.runner_name}' has {available}"
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
            if devices is not None:
                store.record_device_facts(run.key, spec.stage.name, run.runner_name, devices)
            store.record_benchmarks(run.key, results, devices=devices)
            run.manifest["benchmarks"] = {
                r.name: {"value": r.value, "unit": r.unit, "lower_is_better": r.lower_is_better}
                for r in results
            }
            run.detail = ", ".join(f"{r.name}={r.value:.4g}{r.unit}" for r in results)
        return dg.MaterializeResult(
            metadata={f"benchmark/{r.name}": dg.MetadataValue.float(r.value) for r in results}
            | ({"devices": devices.describe(), "device_config": devices.key()} if devices else {})
        )

    return _benchmarks


KIND = StageKind(
    "benchmarks",
    BenchmarksParams,
    build_benchmarks_asset,
    frozenset({"json"}),
    frozenset({ORCHESTRATOR, "local", "docker", "kubernetes"}),
)
