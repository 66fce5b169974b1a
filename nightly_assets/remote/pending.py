"""Stage kinds and runners whose real implementation lands with a later issue.

Their assets exist so each pipeline's lineage is complete; materializing one fails at once
with a message that says what is missing, instead of pretending to have done the work.
"""

import dagster as dg

from nightly_assets.artefacts.resources import ArtefactStoreResource
from nightly_assets.stages import StageRun, StageSpec, recorded_stage
from nightly_assets.warehouse.resources import WarehouseResource

# Where each kind of remote work is being built (see the issue tracker).
PENDING_KINDS = {
    "promote_images": "promotion between registry roles, which no catalog pipeline uses yet",
}
# What each kind of remote runner takes, for the refusal below: a stage that only runs locally names them.
RUNNER_TAKES = {
    "rbe": "Bazel builds (wheels with builder: bazel) and Bazel test suites",
    "batch": "batch jobs, deploys, benchmark sweeps and Bazel builds on its login node",
    "tpu_vm": "test suites",
    "docker": "test suites and benchmarks inside the night's image, and container wheel builds",
}


class StageNotAvailable(RuntimeError):
    """This stage cannot run in this deployment yet; the message says what it waits for."""


def require_local_runner(spec: StageSpec, run: StageRun) -> None:
    if run.runner is not None and run.runner.kind != "local":
        raise StageNotAvailable(
            f"{spec.key.to_user_string()} runs on '{run.runner_name}' ({run.runner.kind}), which takes "
            f"{RUNNER_TAKES.get(run.runner.kind, 'no stage of this kind')}; run this stage on a local runner"
        )


def build_pending_asset(spec: StageSpec) -> dg.AssetsDefinition:
    waits_for = PENDING_KINDS[spec.stage.kind]

    @dg.asset(**spec.asset_args())
    def _pending(
        context: dg.AssetExecutionContext, artefacts: ArtefactStoreResource, warehouse: WarehouseResource
    ) -> None:
        """A stage whose kind has no implementation in this deployment yet."""
        with recorded_stage(context, spec, artefacts, warehouse):
            raise StageNotAvailable(
                f"{spec.key.to_user_string()} is a '{spec.stage.kind}' stage; it needs {waits_for}, "
                "which this deployment does not provide yet"
            )

    return _pending
