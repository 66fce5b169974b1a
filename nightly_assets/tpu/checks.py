"""The checks of a suite on a rented TPU VM: its cost against the catalog's budget, and whether
the VM is really gone (a leaked VM keeps costing until the sweeper deletes it)."""

from __future__ import annotations

import dagster as dg

from nightly_assets.tpu.models import TpuRunOutcome
from nightly_assets.warehouse.rows import MachineCost

COST_WITHIN_BUDGET = "cost_within_budget"
VM_DELETED = "tpu_vm_deleted"


def cost_check_specs(key: dg.AssetKey, budget_usd: float | None) -> list[dg.AssetCheckSpec]:
    if budget_usd is None:
        return []
    return [
        dg.AssetCheckSpec(
            COST_WITHIN_BUDGET,
            asset=key,
            description=f"The run's TPU VM cost (lifetime x hourly price) stayed within ${budget_usd:g}.",
        )
    ]


def cost_within_budget(key: dg.AssetKey, cost: MachineCost, budget_usd: float) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=COST_WITHIN_BUDGET,
        asset_key=key,
        passed=cost.cost_usd <= budget_usd,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"${cost.cost_usd:.4f} for {cost.lifetime_s:.0f} s of {cost.machine_type} "
            f"at ${cost.hourly_usd:g}/h (budget ${budget_usd:g})"
        ),
        metadata={
            "cost_usd": dg.MetadataValue.float(cost.cost_usd),
            "budget_usd": dg.MetadataValue.float(budget_usd),
            "lifetime_s": dg.MetadataValue.float(cost.lifetime_s),
        },
    )


def vm_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            VM_DELETED,
            asset=key,
            description="The run's TPU VM was deleted when the suite ended (a leaked one keeps costing).",
        )
    ]


def vm_deleted(key: dg.AssetKey, node: str, delete_error: str | None) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=VM_DELETED,
        asset_key=key,
        passed=delete_error is None,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"{node} deleted"
            if delete_error is None
            else f"{node} could not be deleted and may still run (the sweeper retries): {delete_error}"
        ),
    )


def vms_deleted(key: dg.AssetKey, outcomes: list[TpuRunOutcome]) -> dg.AssetCheckResult:
    """One result for a sharded suite's VMs (the check is one per stage): passed when every one
    of them was deleted; the description names each VM, or those that may still run."""
    leaked = [o for o in outcomes if o.delete_error is not None]
    names = [o.node_name.rsplit("/", 1)[-1] for o in outcomes]
    if not leaked:
        return dg.AssetCheckResult(
            check_name=VM_DELETED,
            asset_key=key,
            passed=True,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"{len(outcomes)} VM(s) deleted: {', '.join(names)}",
            metadata={"vms": dg.MetadataValue.int(len(outcomes))},
        )
    return dg.AssetCheckResult(
        check_name=VM_DELETED,
        asset_key=key,
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{len(leaked)} of {len(outcomes)} VM(s) could not be deleted and may still run "
        "(the sweeper retries): " + "; ".join(f"{o.node_name}: {o.delete_error}" for o in leaked),
        metadata={"vms": dg.MetadataValue.int(len(outcomes))},
    )
