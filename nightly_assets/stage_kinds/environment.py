"""The environment stage: a fresh virtual environment with the night's wheels and the suite's test
dependencies (requirements files, extras, dependency groups, packages, pytest) from the package
index; the manifest records every distribution it holds, with its version."""

from pathlib import Path

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.builds.distributions import distribution_metadata, installed_distributions
from nightly_assets.builds.framework_stack import (
    FrameworkStackParams,
    reused_stack,
    stack_metadata,
    stack_record,
)
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.suite_dependencies import SuiteDependencyParams
from nightly_assets.builds.wheel_metadata import top_level_names
from nightly_assets.devices.facts import DeviceFacts
from nightly_assets.manifests import WheelsManifest
from nightly_assets.stage_kinds.spec import ORCHESTRATOR, RepoParams, StageKind
from nightly_assets.stages import StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource
from nightly_assets.words import plural


class EnvironmentParams(RepoParams, SuiteDependencyParams, FrameworkStackParams):
    """Which repository's checkout holds the requirements files, the suite's test dependencies, and
    the host framework stack the environment reuses."""


def build_environment_asset(spec: StageSpec) -> dg.AssetsDefinition:
    wheels_stage = spec.upstream_stage("wheels")
    params = spec.params(EnvironmentParams)

    @dg.asset(**spec.asset_args())
    def _environment(
        context: dg.AssetExecutionContext,
        builder: PythonBuildResource,
        artefacts: ArtefactStoreResource,
        warehouse: WarehouseResource,
    ) -> dg.MaterializeResult:
        """A fresh virtual environment with the night's wheels and the suite's test dependencies."""
        with recorded_stage(context, spec, artefacts, warehouse) as run:
            wheels = [Path(w) for w in artefacts.manifest(run.key, str(wheels_stage), WheelsManifest).wheels]
            pinned = spec.pinned_repo(artefacts, run.key) if params.needs_checkout() else None
            tests = params.test_dependencies(
                Path(pinned.path) if pinned else None,
                spec.key.to_user_string(),
                pinned.sha if pinned else None,
            )
            where = f"{spec.key.to_user_string()} (runner '{run.runner_name}')"
            runner_stack = run.runner.base_python if run.runner else None
            stack = reused_stack(params.base_python, runner_stack, where, wheels)
            python = builder.create_environment(
                run.workdir / "venv", wheels, run.workdir / "install.log", tests, stack
            )
            run.manifest.update(stack_record(python, stack, wheels))
            frameworks = DeviceFacts(frameworks=run.manifest["frameworks"])
            warehouse.store().record_device_facts(run.key, spec.stage.name, run.runner_name, frameworks)
            run.manifest["python"] = str(python)
            run.manifest["installer"] = builder.installer_for(stack).describe()
            run.manifest["installed"] = [w.name for w in wheels]
            run.manifest["packages"] = top_level_names(wheels)
            run.manifest["distributions"] = distributions = installed_distributions(python)
            run.detail = f"{plural(len(wheels), 'wheel')} installed" + (
                " with test dependencies" if tests else ""
            )
            if stack is not None:
                run.detail += f" on {stack.python} (Python {stack.full_version})"
            context.log.info(f"environment ready: {python} (packages from {builder.package_sources()})")
        return dg.MaterializeResult(
            metadata={
                "python": str(python),
                "installer": run.manifest["installer"],
                "installed": ", ".join(w.name for w in wheels),
                "test_dependencies": tests.describe()
                if tests or stack is None
                else "none (the framework stack's pytest, else the orchestrator's)",
                **stack_metadata(run.manifest),
                **distribution_metadata(distributions),
            }
        )

    return _environment


KIND = StageKind(
    "environment",
    EnvironmentParams,
    build_environment_asset,
    frozenset({"python", "venv"}),
    frozenset({ORCHESTRATOR, "local"}),
)
