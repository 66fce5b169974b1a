"""The image_pull stage: a pre-built image pulled onto a docker runner, pinned by its digest (seed 004)."""

import dagster as dg
from pydantic import Field

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
from nightly_assets.stage_kinds.spec import StageKind, StageParams
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource


class ImagePullParams(StageParams):
    image: str = Field(pattern=r"\S", description="the reference, e.g. rocm/tensorflow-build:latest")


def build_image_pull_asset(spec: StageSpec) -> dg.AssetsDefinition:
    reference = spec.params(ImagePullParams).image.strip()

    @dg.asset(**spec.asset_args())
    def _pulled(
        context: dg.AssetExecutionContext,
        docker_pool: DockerRunnerPoolResource,
        registries: ContainerRegistriesResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """A pre-built image pulled onto the stage runner's Docker host, pinned by its digest."""
        from nightly_assets.containers.engine import pull_pinned_image, reference_registry  # Docker SDK

        with recorded_stage(context, spec, artefacts, warehouse) as run:
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


KIND = StageKind(
    "image_pull", ImagePullParams, build_image_pull_asset, frozenset({"docker"}), frozenset({"docker"})
)
