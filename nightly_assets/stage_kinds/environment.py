"""The environment stage: a fresh virtual environment with only the night's wheels installed."""

from pathlib import Path

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.manifests import WheelsManifest
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, NoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource


def build_environment_asset(spec: StageSpec) -> dg.AssetsDefinition:
    wheels_stage = spec.upstream_stage("wheels")

    @dg.asset(**spec.asset_args())
    def _environment(
        context: dg.AssetExecutionContext,
        builder: PythonBuildResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """A fresh virtual environment with only the night's wheels installed."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            wheels = [Path(w) for w in artefacts.manifest(run.key, str(wheels_stage), WheelsManifest).wheels]
            python = builder.create_environment(run.workdir / "venv", wheels, run.workdir / "install.log")
            run.manifest["python"] = str(python)
            run.manifest["installed"] = [w.name for w in wheels]
            run.detail = f"{len(wheels)} wheel(s) installed"
            context.log.info(f"environment ready: {python}")
        return dg.MaterializeResult(
            metadata={"python": str(python), "installed": ", ".join(w.name for w in wheels)}
        )

    return _environment


KIND = StageKind(
    "environment",
    NoParams,
    build_environment_asset,
    frozenset({"python", "venv"}),
    frozenset({ORCHESTRATOR, "local"}),
)
