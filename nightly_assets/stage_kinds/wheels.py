"""The wheels stage: wheels (and sdists) from the pinned sources, with pip, in a container or with Bazel."""

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Self

import dagster as dg
from pydantic import model_validator

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.builds import checks
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.catalog.models import BazelBuild
from nightly_assets.containers.resources import DockerRunnerPoolResource
from nightly_assets.containers.wheels import build_wheels_in_container
from nightly_assets.rbe.resources import BazelRbeResource
from nightly_assets.stage_kinds.spec import RepoParams, StageKind
from nightly_assets.stages import StageRun, StageSpec, recorded_stage, stage_events
from nightly_assets.warehouse.resources import WarehouseResource

# Where each builder can run: pip on this host, a container on a docker runner, Bazel through
# remote execution (rbe) or on this host (local, or a batch machine's build host as Theta's was).
BUILDER_RUNNERS: dict[str, frozenset[str]] = {
    "pip": frozenset({"local"}),
    "container": frozenset({"docker"}),
    "bazel": frozenset({"rbe", "local", "batch"}),
}


class WheelsParams(RepoParams):
    builder: Literal["pip", "container", "bazel"] = "pip"
    sdist: bool = False  # an sdist beside the wheels
    builder_image: str | None = None  # container builder: the image (default the runner pool's base)
    builder_python: str = "python3"  # container builder: the image's Python
    bazel: BazelBuild | None = None  # Bazel builder: what to build

    @model_validator(mode="after")
    def _bazel_with_bazel(self) -> Self:
        if (self.builder == "bazel") != (self.bazel is not None):
            raise ValueError("bazel: a 'bazel' block goes with builder: bazel, and only with it")
        return self

    def repositories(self) -> list[str]:
        bootstrap = self.bazel.bootstrap if self.bazel else None
        return super().repositories() + ([bootstrap.repo] if bootstrap else [])

    def runner_kinds(self, accepted: frozenset[str]) -> frozenset[str]:
        return accepted & BUILDER_RUNNERS[self.builder]


def build_wheels_asset(spec: StageSpec) -> dg.AssetsDefinition:
    params = spec.params(WheelsParams)
    builder_kind = params.builder

    @dg.asset(**spec.asset_args(check_specs=checks.wheel_check_specs(spec.key)))
    def _wheels(
        context: dg.AssetExecutionContext,
        builder: PythonBuildResource,
        docker_pool: DockerRunnerPoolResource,
        bazel_rbe: BazelRbeResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        """Wheels (and sdists) built from the night's pinned checkout."""
        extra: dict[str, Any] = {}
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            src = spec.checkout(artefacts, run.key)
            out = run.workdir / "dist"
            if builder_kind == "container":
                wheels, extra = _build_in_container(context, run, docker_pool, src, out, params)
            elif builder_kind == "bazel":
                wheels, extra = _build_with_bazel(context, run, spec, artefacts, bazel_rbe, src, out)
            else:
                wheels = builder.build_wheels(src, out, run.workdir / "build.log")
            sdists = builder.build_sdist(src, out, run.workdir / "sdist.log") if params.sdist else []
            files = [*wheels, *sdists]
            run.manifest["wheels"] = [str(w) for w in wheels]
            run.manifest["sdists"] = [str(s) for s in sdists]
            run.manifest["builder"] = {"kind": builder_kind, **extra}
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


def _build_in_container(
    context: dg.AssetExecutionContext,
    run: StageRun,
    pool: DockerRunnerPoolResource,
    src: Path,
    out: Path,
    params: WheelsParams,
) -> tuple[list[Path], dict[str, Any]]:
    """Wheels from a fresh container of the builder image on the stage runner's Docker host, and
    what built them (image, id, platform, duration) for the manifest and metadata."""
    image = params.builder_image or pool.base_image_for(run.target.arch)
    platform = pool.platform_for(run.runner_name, run.target.arch)
    client = pool.client(run.runner_name)
    context.log.info(f"building wheels of {src.name} in {image} ({platform}) on '{run.runner_name}'")
    try:
        built = build_wheels_in_container(
            client,
            image=image,
            python=params.builder_python,
            src=src,
            out=out,
            log=run.workdir / "build.log",
            platform=platform,
            timeout_s=pool.build_timeout_s,
        )
    finally:
        client.close()
    return built.wheels, {
        "image": image,
        "image_id": built.image_id,
        "platform": platform,
        "duration_s": round(built.duration_s, 2),
    }


def _build_with_bazel(
    context: dg.AssetExecutionContext,
    run: StageRun,
    spec: StageSpec,
    artefacts: ArtefactStoreResource,
    bazel_rbe: BazelRbeResource,
    src: Path,
    out: Path,
) -> tuple[list[Path], dict[str, Any]]:
    """Wheels from `bazel build` of the catalog's targets: through remote execution on an `rbe`
    runner (a local build when it does not answer), on the orchestrator's host for a local or
    batch runner (for Theta, a host beside the batch machine, as its Jenkins agent was)."""
    kind = run.runner.kind if run.runner is not None else "local"
    build = spec.params(WheelsParams).bazel
    assert build is not None  # the params model requires it with builder: bazel
    bazel: str | None = None
    if build.bootstrap is not None:
        pinned = spec.pinned_repo(artefacts, run.key, build.bootstrap.repo)
        context.log.info(f"bootstrapping Bazel from {build.bootstrap.repo} at {pinned['sha'][:12]}")
        bootstrapped = bazel_rbe.bootstrap(
            Path(pinned["path"]), pinned["sha"], build.bootstrap, log_path=run.workdir / "bootstrap.log"
        )
        bazel = str(bootstrapped)
    context.log.info(f"bazel build {' '.join(build.targets)} ({'remote' if kind == 'rbe' else 'local'})")
    result = bazel_rbe.build(
        src / build.workspace,
        build.targets,
        out_dir=run.workdir / "bazel",
        dest=out,
        outputs=build.outputs,
        options=build.args,
        use_remote=kind == "rbe",
        bazel=bazel,
        timeout_s=build.timeout_minutes * 60,
        output_key=spec.output_key(run.key),
    )
    if result.fallback_reason:
        context.log.warning(f"remote build unavailable, built locally: {result.fallback_reason}")
    extra = {
        **result.metadata(),
        "targets": {label: list(names) for label, names in result.by_target.items()},
    }
    return [f for f in result.outputs if f.suffix == ".whl"], extra


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


KIND = StageKind(
    "wheels",
    WheelsParams,
    build_wheels_asset,
    frozenset({"python", "wheel"}),
    frozenset({"local", "docker", "rbe", "batch"}),
)
