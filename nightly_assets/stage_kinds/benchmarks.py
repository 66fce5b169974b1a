"""The benchmarks stage: tonight's timings, from a benchmark command (in the image or on this host) or
the timing file a test suite stage wrote."""

from pathlib import Path
from typing import Self

import dagster as dg
from pydantic import Field, model_validator

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.benchmarks.timing import read_timing_file
from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
from nightly_assets.containers.runner import OUT_DIR
from nightly_assets.containers.suites import run_in_image, runs_in_image
from nightly_assets.process import CommandError, run_command
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, StageKind, StageParams
from nightly_assets.stages import StageNotAvailable, StageSpec, recorded_stage, require_local_runner
from nightly_assets.warehouse.resources import WarehouseResource

BENCHMARK_TIMEOUT_S = 3600


class BenchmarksParams(StageParams):
    # argv; "python" is the night's Python, {output} the timing JSON it writes
    command: list[str] | None = Field(default=None, min_length=1)
    from_stage: str | None = None  # or: the stage (a TPU test suite) whose timing file to read

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

    @dg.asset(**spec.asset_args())
    def _benchmarks(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        docker_pool: DockerRunnerPoolResource,
        registries: ContainerRegistriesResource,
    ) -> dg.MaterializeResult:
        """Tonight's benchmark values, read from the timing JSON the benchmark writes."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            environment = artefacts.read_manifest(run.key, env_stage) if env_stage else {}
            output = run.workdir / "timing.json"
            if params.command is not None and runs_in_image(environment):
                inside = f"{OUT_DIR}/timing.json"
                argv = [
                    environment["python"] if a == "python" else str(a).replace("{output}", inside)
                    for a in params.command
                ]
                result = run_in_image(
                    context,
                    run,
                    environment,
                    docker_pool,
                    registries,
                    program=argv,
                    timeout_s=BENCHMARK_TIMEOUT_S,
                )
                if result.returncode != 0:
                    log = (result.out_dir / "output.log").read_text(errors="replace")[-3000:]
                    raise CommandError(f"benchmark exited {result.returncode} in the image:\n{log}")
                output = result.out_dir / "timing.json"
            elif params.command is not None:
                require_local_runner(spec, run, "a benchmark outside an image")
                python = artefacts.read_manifest(run.key, str(env_stage))["python"]
                argv = [
                    python if a == "python" else str(a).replace("{output}", str(output))
                    for a in params.command
                ]
                run_command(
                    argv,
                    cwd=run.workdir,
                    timeout_s=BENCHMARK_TIMEOUT_S,
                    log_path=run.workdir / "benchmark.log",
                    scratch_home=True,
                )
            else:
                assert params.from_stage is not None  # the params model requires one of the two
                upstream = artefacts.read_manifest(run.key, params.from_stage)
                if "timing_file" not in upstream:
                    raise StageNotAvailable(
                        f"{spec.key.to_user_string()}: stage '{params.from_stage}' wrote no timing file"
                    )
                output = Path(upstream["timing_file"])
            results = read_timing_file(output)
            warehouse.store().record_benchmarks(run.key, results)
            run.manifest["benchmarks"] = {
                r.name: {"value": r.value, "unit": r.unit, "lower_is_better": r.lower_is_better}
                for r in results
            }
            run.detail = ", ".join(f"{r.name}={r.value:.4g}{r.unit}" for r in results)
        return dg.MaterializeResult(
            metadata={f"benchmark/{r.name}": dg.MetadataValue.float(r.value) for r in results}
        )

    return _benchmarks


KIND = StageKind(
    "benchmarks",
    BenchmarksParams,
    build_benchmarks_asset,
    frozenset({"json"}),
    frozenset({ORCHESTRATOR, "local", "docker"}),
)
