"""The publish_wheels stage: the night's packages published once every blocking check upstream passed.

`index: local` copies them into the local find-links folder; `test` and `production` are real
indexes: twine checks and uploads them, and they are installed back from the index
(release/upload.py). In the embedded default, `test` is the local folder while
NIGHTLY_TEST_INDEX_URL is unset."""

from pathlib import Path
from typing import Any

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.manifests import WheelsManifest
from nightly_assets.release.indexes import INDEX_VARIABLES, LOCAL
from nightly_assets.release.resources import PackageIndexesResource
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, StageKind, StageParams
from nightly_assets.stages import (
    StageNotAvailable,
    StageRun,
    StageSpec,
    recorded_stage,
    refuse_release_after_failure,
)
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.words import plural

RELEASE_TAG = "nightly/release"


class PublishWheelsParams(StageParams):
    # "local": the folder this deployment serves; "test", "production": real indexes (twine).
    index: str = LOCAL
    only_on_release: bool = False  # publish only in runs tagged nightly/release=true


def build_publish_wheels_asset(spec: StageSpec) -> dg.AssetsDefinition:
    wheels_stage = spec.upstream_stage("wheels")
    params = spec.params(PublishWheelsParams)

    @dg.asset(**spec.asset_args())
    def _publish(
        context: dg.AssetExecutionContext,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
        package_index: PackageIndexesResource,
    ) -> dg.MaterializeResult:
        """The night's wheels and sdists, published to the package index."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            refuse_release_after_failure(spec, warehouse, run.key)
            if params.only_on_release and context.run.tags.get(RELEASE_TAG) != "true":
                run.detail = "not a release run; nothing published"
                return dg.MaterializeResult(metadata={"published": 0, "reason": run.detail})
            if not package_index.is_configured(params.index):
                raise StageNotAvailable(
                    f"{spec.key.to_user_string()}: {package_index.not_configured(params.index)}"
                )
            built = artefacts.manifest(run.key, str(wheels_stage), WheelsManifest)
            files = [Path(f) for f in built.wheels + built.sdists]
            if package_index.is_local(params.index):
                metadata = _to_folder(package_index, spec.pipeline.name, params.index, files, run)
            else:
                metadata = _to_index(package_index, params.index, files, run)
            context.log.info(run.detail)
        return dg.MaterializeResult(metadata=metadata)

    return _publish


def _to_folder(
    indexes: PackageIndexesResource, pipeline: str, index: str, files: list[Path], run: StageRun
) -> dict[str, Any]:
    published = indexes.publish_local(pipeline, files)
    folder = indexes.local_folder(pipeline)
    run.manifest.update(index=index, published=[str(p) for p in published])
    run.artefact = str(folder)
    run.detail = f"{plural(len(published), 'file')} published to the local folder {folder}"
    if index != LOCAL:  # a laptop's `test` index: say so, the night did not reach a real one
        variables = INDEX_VARIABLES.get(index)
        run.detail += f" (index '{index}' is this folder here" + (
            f": {variables.url} is unset)" if variables else ")"
        )
    return {"published": len(published), "index": dg.MetadataValue.path(str(folder)), "index_name": index}


def _to_index(
    indexes: PackageIndexesResource, index: str, files: list[Path], run: StageRun
) -> dict[str, Any]:
    publication = indexes.publish(index, files, run.workdir)
    run.published.extend(publication.logs)
    run.manifest.update(
        index=index,
        index_url=publication.url,
        simple_url=publication.simple_url,
        uploaded=publication.uploaded,
        already_on_index=publication.already_there,
        installed_back=publication.installed,
    )
    run.artefact = publication.project_url()
    installed = ", ".join(f"{n}=={v}" for n, v in sorted(publication.installed.items()))
    run.detail = f"{plural(len(publication.uploaded), 'file')} uploaded to {publication.url}"
    if publication.already_there:
        run.detail += f", {len(publication.already_there)} already there with the same content"
    run.detail += (
        f"; installed back: {installed}" if installed else "; no wheel of this platform to install back"
    )
    return {
        "published": len(publication.uploaded) + len(publication.already_there),
        "index_name": index,
        "index_url": dg.MetadataValue.url(publication.url),
        "project_url": dg.MetadataValue.url(publication.project_url()),
        "uploaded": dg.MetadataValue.json(publication.uploaded),
        "already_on_index": dg.MetadataValue.json(publication.already_there),
        "installed_back": installed or "none",
    }


KIND = StageKind(
    "publish_wheels",
    PublishWheelsParams,
    build_publish_wheels_asset,
    frozenset({"pypi"}),
    frozenset({ORCHESTRATOR}),
)
