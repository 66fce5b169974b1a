"""The publish_wheels stage: the night's packages published once every blocking check upstream passed."""

from pathlib import Path

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.manifests import WheelsManifest
from nightly_assets.release.resources import LocalPackageIndexResource
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, StageKind, StageParams
from nightly_assets.stages import StageNotAvailable, StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource

RELEASE_TAG = "nightly/release"


class PublishWheelsParams(StageParams):
    index: str = "local"  # the package index; "local" is the one this deployment serves
    only_on_release: bool = False  # publish only in runs tagged nightly/release=true


def build_publish_wheels_asset(spec: StageSpec) -> dg.AssetsDefinition:
    wheels_stage = spec.upstream_stage("wheels")
    params = spec.params(PublishWheelsParams)

    @dg.asset(**spec.asset_args())
    def _publish(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        package_index: LocalPackageIndexResource,
    ) -> dg.MaterializeResult:
        """The night's wheels and sdists, published to the package index."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            if params.only_on_release and context.run.tags.get(RELEASE_TAG) != "true":
                run.detail = "not a release run; nothing published"
                return dg.MaterializeResult(metadata={"published": 0, "reason": run.detail})
            if params.index != "local":
                raise StageNotAvailable(
                    f"{spec.key.to_user_string()}: uploading to the '{params.index}' index needs the "
                    "package index resource (twine against pypiserver), not in this deployment yet"
                )
            built = artefacts.manifest(run.key, str(wheels_stage), WheelsManifest)
            files = [Path(f) for f in built.wheels + built.sdists]
            published = package_index.publish(spec.pipeline.name, files)
            run.manifest["published"] = [str(p) for p in published]
            run.artefact = str(published[0].parent) if published else None
            run.detail = f"{len(published)} file(s) published"
        return dg.MaterializeResult(
            metadata={"published": len(published), "index": dg.MetadataValue.path(str(run.artefact))}
        )

    return _publish


KIND = StageKind(
    "publish_wheels",
    PublishWheelsParams,
    build_publish_wheels_asset,
    frozenset({"pypi"}),
    frozenset({ORCHESTRATOR}),
)
