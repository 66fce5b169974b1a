"""The tpu_vm runner kind: a suite on a fresh TPU VM over SSH, its cost in the warehouse, checks
that the VM was deleted and the run kept within the pipeline's budget (seed 003)."""

import functools
from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from nightly_assets.results import TestReport
from nightly_assets.runners.protocol import Capability, RunnerBackend, StageWork, SuiteOutcome, shard_history
from nightly_assets.runners.tpu_shards import recorded_tests, shards_on_vms
from nightly_assets.stages import StageRun, StageSpec
from nightly_assets.testing.confirm import Rerunner
from nightly_assets.testing.junit import parse_junit
from nightly_assets.testing.resources import TestRunError
from nightly_assets.tpu import checks as tpu_checks
from nightly_assets.tpu.nodes import TpuApiError
from nightly_assets.tpu.resources import TpuVmResource, recently_ended_run_ids
from nightly_assets.tpu.stage import TpuSuiteParams, confirmation_file, pack_checkout, run_suite_on_vm
from nightly_assets.warehouse.rows import MachineCost


class TpuVmBackend(RunnerBackend):
    kind = "tpu_vm"
    supports = frozenset({"suite"})

    def resource_keys(self, spec: StageSpec, capability: Capability) -> set[str]:
        return {"tpu_vms"}

    def check_specs(self, spec: StageSpec, capability: Capability) -> list[dg.AssetCheckSpec]:
        budget = spec.pipeline.thresholds.cost_budget_usd
        return [*tpu_checks.cost_check_specs(spec.key, budget), *tpu_checks.vm_check_specs(spec.key)]

    def run_suite(self, work: StageWork) -> SuiteOutcome:
        return run_suite_on_tpu_vm(work)


def run_suite_on_tpu_vm(work: StageWork) -> SuiteOutcome:
    """Run the stage's suite on a TPU VM (a sharded suite: a VM per shard, once the warehouse has
    recorded its tests); the cost is recorded even when the run fails."""
    context, spec, run = work.context, work.spec, work.run
    suite = spec.stage.suite
    assert suite is not None
    params = spec.params(TpuSuiteParams)
    pinned = spec.pinned_repo(work.artefacts, run.key)
    store = work.resources.warehouse.store()
    tpu_vms: TpuVmResource = work.resources.tpu_vms

    def record(cost: MachineCost) -> None:
        store.record_cost(run.key, cost)
        run.manifest.update(
            tpu_node=cost.machine, vm_lifetime_s=cost.lifetime_s, cost_usd=cost.cost_usd, vm_ended=cost.ended
        )

    store.forget_costs(run.key, spec.stage.name)  # a stage run again: its own VMs' rows alone
    _sweep_leftovers(context, tpu_vms, str(run.target.params.get("zone", "")))  # once, before any VM
    on_vm = functools.partial(
        run_suite_on_vm,
        tpu_vms,
        suite=suite,
        params=params,
        target=run.target,
        checkout=Path(pinned.path),
        commit=pinned.sha,
        run_id=context.run.run_id,
        night=run.key.night.isoformat(),
        log=context.log,
    )
    if suite.sharded:
        history = shard_history(work)
        collected = recorded_tests(history[0], Path(pinned.path)) if history[1] else []
        if collected:
            tarball = pack_checkout(Path(pinned.path), run.workdir / "source.tar.gz")
            return shards_on_vms(work, on_vm, history, collected, tarball)
        why = "no recorded tests yet" if not history[1] else "no recorded test is in tonight's checkout"
        context.log.info(f"{spec.stage.name}: {why}: one VM this night; sharded from the next")
    result = on_vm(
        name=spec.stage.name,
        workdir=run.workdir,
        labels={"pipeline": spec.pipeline.name, "target": run.target.name},
        on_cost=record,
    )
    if result.outcome.timing_path is not None:
        run.manifest["timing_file"] = str(result.outcome.timing_path)  # the benchmarks stage reads it
    cost = result.cost
    run.checks.append(tpu_checks.vm_deleted(spec.key, result.outcome.node_name, result.outcome.delete_error))
    budget = spec.pipeline.thresholds.cost_budget_usd
    if budget is not None:
        run.checks.append(tpu_checks.cost_within_budget(spec.key, cost, budget))
    metadata: dict[str, object] = {
        "tpu/node": result.outcome.node_name,
        "tpu/vm_lifetime_s": dg.MetadataValue.float(cost.lifetime_s),
        "tpu/cost_usd": dg.MetadataValue.float(cost.cost_usd),
        "tpu/log": dg.MetadataValue.path(str(result.outcome.log_path)),
    }
    rerunner = _rerun_on_the_vm(result.outcome.fetched, spec.stage.name, run)
    return SuiteOutcome(result.report, metadata, rerunner)


def _rerun_on_the_vm(fetched: Mapping[str, Path], name: str, run: StageRun) -> Rerunner:
    """The VM re-ran the failing tests before it was deleted (remote_suite.py, as the suite's
    confirm: block says): each round's report is read back here as confirmation asks for it."""

    def run_round(node_ids: list[str], number: int, runs: int, timeout_s: float) -> TestReport:
        path = fetched.get(confirmation_file(number))
        if path is None:
            raise TestRunError(f"the TPU VM brought back no {confirmation_file(number)} (see its log)")
        run.published.append(path)
        return parse_junit(path, name, run.runner_name)

    return Rerunner(
        lambda case: case.node_id if case.classname else None,
        run_round,
        why_not="not a test the VM could re-run alone (a collection error)",
    )


def _sweep_leftovers(context: dg.AssetExecutionContext, tpu_vms: TpuVmResource, zone: str) -> None:
    """Delete the VMs in the zone of runs this instance knows have ended, before making a new one:
    a crashed or twice-interrupted run may have left one, and the sweeper sensor only runs every
    15 minutes (and not at all without the daemon). Runs this instance does not know are left
    alone (another deployment, a developer's CLI, may share the project). Never fails the stage."""
    if not zone:
        return
    try:
        swept = tpu_vms.sweep(
            [zone], [], ended_run_ids=recently_ended_run_ids(context.instance), log=context.log
        )
    except TpuApiError as exc:
        context.log.warning(f"sweeping leftover TPU VMs in {zone} failed: {exc}")
        return
    if swept:
        context.log.warning(f"deleted {len(swept)} leftover TPU VM(s) in {zone}: {', '.join(swept)}")


BACKEND = TpuVmBackend()
