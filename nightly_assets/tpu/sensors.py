"""The TPU VM sweeper: deletes this tool's VMs whose run is no longer alive (a crash left them)."""

import dagster as dg

from nightly_assets.catalog.models import Catalog
from nightly_assets.tpu.resources import TpuVmResource, alive_run_ids


def tpu_zones(catalog: Catalog) -> list[str]:
    """Every zone a catalog target creates TPU VMs in."""
    zones = {
        str(target.params["zone"])
        for pipeline in catalog.pipelines.values()
        if any("tpu_vm" in catalog.runner_kinds(stage) for stage in pipeline.stages)
        for target in pipeline.targets
        if "zone" in target.params
    }
    return sorted(zones)


def build_tpu_sweeper_sensor(catalog: Catalog, running: bool) -> dg.SensorDefinition:
    zones = tpu_zones(catalog)

    @dg.sensor(
        name="tpu_vm_sweeper",
        minimum_interval_seconds=900,
        default_status=dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED,
        description=f"Deletes TPU VMs labelled by this tool whose run is not alive ({', '.join(zones)}).",
    )
    def tpu_vm_sweeper(context: dg.SensorEvaluationContext, tpu_vms: TpuVmResource) -> dg.SkipReason:
        if not tpu_vms.project:
            return dg.SkipReason("no GCP project configured (NIGHTLY_TPU_PROJECT): nothing to sweep")
        alive = alive_run_ids(context.instance)
        deleted = tpu_vms.sweep(zones, alive, log=context.log)
        names = ", ".join(name.rsplit("/", 1)[-1] for name in deleted)
        return dg.SkipReason(
            f"deleted {len(deleted)} orphaned TPU VM(s){': ' + names if names else ''}; "
            f"{len(alive)} run(s) alive"
        )

    return tpu_vm_sweeper
