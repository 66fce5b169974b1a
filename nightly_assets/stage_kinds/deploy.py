"""The deploy stage: the night's build copied to the batch machine's release root, old ones pruned."""

from pathlib import Path

import dagster as dg
from pydantic import Field

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.batch.deploy import deploy
from nightly_assets.batch.resources import BatchSchedulerResource
from nightly_assets.manifests import BuildRootManifest
from nightly_assets.stage_kinds.spec import StageKind, StageParams
from nightly_assets.stages import StageSpec, recorded_stage, refuse_release_after_failure
from nightly_assets.warehouse.resources import WarehouseResource


class DeployParams(StageParams):
    keep: int | None = Field(default=None, ge=1)  # releases kept (default the pipeline's retention_days)


def build_deploy_asset(spec: StageSpec) -> dg.AssetsDefinition:
    build_stage = spec.upstream_stage("batch_job")

    @dg.asset(**spec.asset_args())
    def _deploy(
        context: dg.AssetExecutionContext,
        batch: BatchSchedulerResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """The night's build copied from the ephemeral build root to the release root."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            refuse_release_after_failure(spec, warehouse, run.key)
            built = artefacts.manifest(run.key, str(build_stage), BuildRootManifest)
            if batch.release_root is None:
                raise ValueError("the batch resource has no release_root: set NIGHTLY_RELEASE_ROOT")
            release = deploy(
                Path(built.build_root),
                Path(batch.release_root) / spec.pipeline.name / run.target.name,
                run.key.night.isoformat(),
                keep=spec.params(DeployParams).keep or spec.pipeline.retention_days,
            )
            python = release.path / Path(built.python).relative_to(built.build_root)
            run.manifest.update(
                release=str(release.path), python=str(python), current=str(release.current_target)
            )
            run.manifest["removed"] = [str(p) for p in release.removed]
            run.artefact = str(release.path)
            run.detail = f"released to {release.path}" + (
                f", removed {len(release.removed)}" if release.removed else ""
            )
            context.log.info(run.detail)
        return dg.MaterializeResult(
            metadata={
                "release": dg.MetadataValue.path(str(release.path)),
                "current": str(release.current_target),
                "removed": ", ".join(p.name for p in release.removed) or "none",
            }
        )

    return _deploy


KIND = StageKind("deploy", DeployParams, build_deploy_asset, frozenset({"file"}), frozenset({"batch"}))
