"""Image stages: the framework image (cached from last night) and the runtime image with the night's
wheels and tests, pushed with seed 001's tags to the registry roles, or a virtualenv instead where
the stage allows it and no engine answers (the demo on a machine without Docker)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.containers import checks
from nightly_assets.containers.engine import pull_pinned_image, reference_registry
from nightly_assets.containers.images import ImageStage
from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
from nightly_assets.remote.pending import StageNotAvailable
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.warehouse.resources import WarehouseResource


def build_docker_image_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.stage.params
    push_to: list[str] = list(params.get("push_to", []))
    wheels_stage = spec.upstream_stage("wheels") if params.get("install_wheels") else None
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
            unavailable = (
                docker_pool.unavailable_reason(label, run.target.arch)
                if params.get("fallback") == "venv"
                else None
            )
            if unavailable:
                context.log.warning(f"{unavailable}: installing into a virtualenv instead")
                python = builder.create_environment(run.workdir / "venv", wheels, run.workdir / "install.log")
                run.manifest.update(mode="venv", python=str(python), installed=[w.name for w in wheels])
                run.detail = f"virtualenv (no image: {unavailable}), {len(wheels)} wheel(s)"
                metadata: dict[str, Any] = {
                    "mode": "venv",
                    "python": str(python),
                    "why_no_image": unavailable,
                }
                run.checks.extend(checks.skipped_registry_checks(spec.key, push_to))
            else:
                stage = ImageStage(
                    spec=spec,
                    run=run,
                    label=label,
                    pool=docker_pool,
                    registries=registries,
                    log=context.log,
                    run_id=context.run.run_id,
                )
                sources = spec.pinned_repo(artefacts, run.key)
                base = artefacts.read_manifest(run.key, base_stage) if base_stage else None
                outcome = stage.build_and_publish(Path(sources["path"]), sources["sha"], wheels, base)
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


def build_image_pull_asset(spec: StageSpec) -> dg.AssetsDefinition:
    reference = str(spec.stage.params.get("image", ""))

    @dg.asset(**spec.asset_args())
    def _pulled(
        context: dg.AssetExecutionContext,
        docker_pool: DockerRunnerPoolResource,
        registries: ContainerRegistriesResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """A pre-built image pulled onto the stage runner's Docker host, pinned by its digest."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            if run.runner is None or run.runner.kind != "docker":
                raise StageNotAvailable(
                    f"{spec.key.to_user_string()}: an image is pulled onto a docker runner, "
                    f"not '{run.runner_name}'"
                )
            host = reference_registry(reference)
            role = next((r for r in registries.roles() if registries.host(r) == host), None)
            platform = docker_pool.platform_for(run.runner_name, run.target.arch)
            context.log.info(f"pulling {reference} ({platform}) on '{run.runner_name}'")
            client = docker_pool.client(run.runner_name)
            try:
                pulled = pull_pinned_image(
                    client,
                    reference,
                    registries.engine_auth(role) if role else None,
                    platform=platform,
                    retries=docker_pool.push_retries,
                )
            finally:
                client.close()
            run.manifest.update(
                reference=reference,
                image_id=pulled.image_id,
                repo_digest=pulled.repo_digest,
                platform=platform,
                registry_role=role,
            )
            run.artefact = pulled.repo_digest or reference
            run.detail = f"{pulled.repo_digest or reference} ({pulled.size_bytes // 2**20} MiB)"
        return dg.MaterializeResult(
            metadata={
                "reference": reference,
                "repo_digest": pulled.repo_digest,
                "image_id": pulled.image_id,
                "architecture": pulled.architecture,
                "size_bytes": pulled.size_bytes,
                "attempts": pulled.attempts,
            }
        )

    return _pulled


def _wheels(artefacts: ArtefactStoreResource, key: Any, wheels_stage: str | None) -> list[Path]:
    if wheels_stage is None:
        return []
    return [Path(w) for w in artefacts.read_manifest(key, wheels_stage)["wheels"]]
