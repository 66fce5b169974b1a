"""The docker_image stage: the framework image (cached from last night) or the runtime image with the
night's wheels and tests, pushed with seed 001's tags to the registry roles, or a virtualenv instead
where the stage allows it and no engine answers (the demo on a machine without Docker)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.builds.distributions import distribution_metadata, installed_distributions
from nightly_assets.builds.framework_stack import (
    reused_stack,
    stack_metadata,
    stack_record,
)
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.wheel_metadata import top_level_names
from nightly_assets.containers import checks
from nightly_assets.containers.image_params import DockerImageParams
from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
from nightly_assets.manifests import EnvironmentManifest, WheelsManifest
from nightly_assets.stage_kinds.spec import StageKind
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.words import plural


def build_docker_image_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.params(DockerImageParams)
    push_to = list(params.push_to)
    wheels_stage = spec.upstream_stage("wheels") if params.install_wheels else None
    base_stage = spec.upstream_stage("docker_image")

    @dg.asset(**spec.asset_args(check_specs=checks.image_check_specs(spec.key, push_to)))
    def _image(
        context: dg.AssetExecutionContext,
        docker_pool: DockerRunnerPoolResource,
        registries: ContainerRegistriesResource,
        builder: PythonBuildResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """A container image of the night (or its virtualenv stand-in), with digest and build metrics."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            label = run.runner_name if run.runner is not None else "local"
            wheels = _wheels(artefacts, run.key, wheels_stage)
            pinned = spec.pinned_repo(artefacts, run.key) if params.needs_checkout() else None
            tests = params.test_dependencies(
                Path(pinned.path) if pinned else None,
                spec.key.to_user_string(),
                pinned.sha if pinned else None,
            )
            unavailable = (
                docker_pool.unavailable_reason(label, run.target.arch) if params.fallback == "venv" else None
            )
            if unavailable:
                context.log.warning(f"{unavailable}: installing into a virtualenv instead")
                where = f"{spec.key.to_user_string()} (runner '{run.runner_name}')"
                stack = reused_stack(
                    params.base_python, run.runner.base_python if run.runner else None, where, wheels
                )
                python = builder.create_environment(
                    run.workdir / "venv", wheels, run.workdir / "install.log", tests, stack
                )
                run.manifest.update(stack_record(python, stack, wheels))
                run.manifest.update(
                    mode="venv",
                    python=str(python),
                    installed=[w.name for w in wheels],
                    packages=top_level_names(wheels),
                    distributions=installed_distributions(python),
                )
                run.detail = f"virtualenv (no image: {unavailable}), {plural(len(wheels), 'wheel')}"
                metadata: dict[str, Any] = {
                    "mode": "venv",
                    "python": str(python),
                    "why_no_image": unavailable,
                    **stack_metadata(run.manifest),
                    **distribution_metadata(run.manifest["distributions"]),
                }
                run.checks.extend(checks.skipped_registry_checks(spec.key, push_to))
            else:
                from nightly_assets.containers.images import ImageStage  # the Docker SDK: for a run only

                stage = ImageStage(
                    spec=spec,
                    params=params,
                    run=run,
                    label=label,
                    pool=docker_pool,
                    registries=registries,
                    log=context.log,
                    run_id=context.run.run_id,
                    builder=builder,
                    tests=tests,
                )
                sources = spec.pinned_repo(artefacts, run.key)
                base = artefacts.manifest(run.key, base_stage, EnvironmentManifest) if base_stage else None
                outcome = stage.build_and_publish(Path(sources.path), sources.sha, wheels, base)
                run.manifest.update(outcome.manifest)
                run.artefact = outcome.manifest["reference"]
                run.detail = outcome.detail
                metadata = outcome.metadata
                if push_to:
                    run.checks.append(
                        checks.image_in_registries(spec.key, registries, outcome.published, outcome.digest)
                    )
        yield from stage_events(run, metadata)

    return _image


def _wheels(artefacts: ArtefactStoreResource, key: Any, wheels_stage: str | None) -> list[Path]:
    if wheels_stage is None:
        return []
    return [Path(w) for w in artefacts.manifest(key, wheels_stage, WheelsManifest).wheels]


KIND = StageKind(
    "docker_image",
    DockerImageParams,
    build_docker_image_asset,
    frozenset({"docker"}),
    frozenset({"local", "docker"}),
)
