"""The wheels stage: wheels (and sdists) from the pinned sources, with pip, in a container or with
Bazel, built by the backend of the stage's runner kind."""

import hashlib
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.builds import checks
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.wheel_params import WheelsParams
from nightly_assets.runners import backend, stage_backends
from nightly_assets.runners.protocol import StageWork
from nightly_assets.stage_kinds.spec import StageKind
from nightly_assets.stages import StageSpec, recorded_stage, stage_events
from nightly_assets.warehouse.resources import WarehouseResource


def build_wheels_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.params(WheelsParams)
    backends = stage_backends(spec)

    @dg.asset(
        required_resource_keys={"artefacts", "warehouse", *(["builder"] if params.sdist else [])}.union(
            *(b.resource_keys(spec, "wheels") for b in backends)
        ),
        **spec.asset_args(check_specs=checks.wheel_check_specs(spec.key)),
    )
    def _wheels(context: dg.AssetExecutionContext) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """Wheels (and sdists) built from the night's pinned checkout."""
        artefacts: ArtefactStoreResource = context.resources.artefacts
        warehouse: WarehouseResource = context.resources.warehouse
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            work = StageWork(context, spec, run, environment=None)
            built = backend(run.runner_kind).build_wheels(work, params)
            wheels, extra = built.wheels, built.builder
            sdists: list[Path] = []
            if params.sdist:
                builder: PythonBuildResource = context.resources.builder
                pinned = spec.pinned_repo(artefacts, run.key)
                sdists = builder.build_sdist(
                    Path(pinned.path),
                    run.workdir / "dist",
                    run.workdir / "sdist.log",
                    pinned.build_env,
                )
            files = [*wheels, *sdists]
            run.manifest["wheels"] = [str(w) for w in wheels]
            run.manifest["sdists"] = [str(s) for s in sdists]
            run.manifest["builder"] = {"kind": params.builder, **extra}
            run.detail = ", ".join(f.name for f in files)
            run.published.extend(files)
            run.checks.append(checks.wheel_metadata_valid(spec.key, wheels))
            context.log.info(f"built {run.detail}")
        yield from stage_events(
            run,
            {
                "files": dg.MetadataValue.md(
                    "\n".join(f"- `{f.name}` {f.stat().st_size} B sha256 `{_sha256(f)[:16]}`" for f in files)
                ),
                "wheel_count": len(wheels),
                **{f"builder_{k}": v for k, v in extra.items()},
            },
        )

    return _wheels


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


KIND = StageKind(
    "wheels",
    WheelsParams,
    build_wheels_asset,
    frozenset({"python", "wheel"}),
    frozenset({"local", "docker", "rbe", "batch"}),
)
