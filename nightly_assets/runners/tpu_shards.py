"""A sharded suite on TPU VMs: one fresh VM per shard, at most the target's `max_vms` at once.

No VM collects the suite first (a VM costs money and minutes): the plan comes from the tests the
warehouse recorded on the suite's recent nights, named as pytest names them in tonight's checkout
(a test whose file is gone is dropped). Each VM runs the suite's own selection, and a plugin there
(tpu/remote_shard.py) keeps its shard's part: a test new tonight goes to exactly one shard by a
stable hash, a test removed since is never collected and is not reported as "not run". A VM that
went early (preempted, SSH lost, timed out), that could not be had, or whose pytest could not run
is a lost shard, run again alone on a new VM. Every VM has its own cost row; each VM confirms its
own failures before it is deleted."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from nightly_assets.results import TestCase, TestReport
from nightly_assets.runners.protocol import StageWork, SuiteOutcome
from nightly_assets.shards.execute import ShardJob, ShardLost, ShardRecord
from nightly_assets.shards.suite import PLAN_FILE, run_sharded
from nightly_assets.testing.confirm import Rerunner, pytest_node_id
from nightly_assets.testing.junit import parse_junit_files
from nightly_assets.testing.resources import TestRunError
from nightly_assets.tpu import checks as tpu_checks
from nightly_assets.tpu import remote_suite
from nightly_assets.tpu.models import TpuRunOutcome, TpuTarget
from nightly_assets.tpu.nodes import TpuQuotaError
from nightly_assets.tpu.stage import TpuRunEnded, TpuSuiteResult, VmShard, confirmation_file
from nightly_assets.warehouse.rows import MachineCost

# Runs the suite (or a shard of it) on one fresh VM: tpu.stage.run_suite_on_vm with the stage's
# VM settings bound; the caller names the VM's cost row, its folder, labels, shard and cost sink.
OnVm = Callable[..., TpuSuiteResult]


def recorded_tests(durations: Mapping[str, float], checkout: Path) -> list[str]:
    """The pytest node ids of the recorded tests (`classname::name`, as JUnit names them) whose
    file is still in `checkout`; a test of a removed file is dropped."""
    found: dict[str, None] = {}
    for test in durations:
        classname, _, name = test.partition("::")
        node_id = pytest_node_id(TestCase(classname, name, "passed"), checkout) if name else None
        if node_id is not None:
            found[node_id] = None
    return sorted(found)


@dataclass
class _Vms:
    """What the shards' VMs did, gathered from their threads."""

    costs: list[MachineCost] = field(default_factory=list)
    outcomes: list[TpuRunOutcome] = field(default_factory=list)
    reported: dict[int, TpuRunOutcome] = field(default_factory=dict)  # shard -> the VM that reported
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: TpuRunOutcome, shard: int | None = None) -> None:
        with self.lock:
            self.outcomes.append(outcome)
            if shard is not None:
                self.reported[shard] = outcome


def shards_on_vms(
    work: StageWork,
    on_vm: OnVm,
    history: tuple[Mapping[str, float], int],
    collected: list[str],
    tarball: Path,
) -> SuiteOutcome:
    """The suite's shards on VMs, planned over `collected` (the recorded tests still in the
    checkout) from `history`; one merged report. Adds the VM checks to the stage's run."""
    spec, run = work.spec, work.run
    suite, name = spec.stage.suite, spec.stage.name
    assert suite is not None
    store = work.resources.warehouse.store()
    target = TpuTarget.from_params(run.target.params, run.target.name)
    vms = _Vms()

    def run_one(job: ShardJob) -> Path:
        def record(cost: MachineCost) -> None:
            store.record_cost(run.key, cost)
            with vms.lock:
                vms.costs.append(cost)
            job.notes.update(
                node=cost.machine.rsplit("/", 1)[-1],
                vm_lifetime_s=cost.lifetime_s,
                cost_usd=cost.cost_usd,
                vm_ended=cost.ended,
            )

        labels = {"pipeline": spec.pipeline.name, "target": run.target.name}
        stop = threading.Event()
        job.on_stop(stop.set)  # an interrupted night: the suite stops at the VM's next poll, the VM goes
        try:
            result = on_vm(
                name=f"{name}/{job.name}",  # the VM's cost row: one per VM
                workdir=run.workdir / job.name,
                labels={**labels, "shard": f"{job.shard.index}-of-{job.of}"},
                shard=VmShard(job.shard.index, run.workdir / PLAN_FILE),
                tarball=tarball,
                on_cost=record,
                stop=stop,
            )
        except TpuRunEnded as exc:
            vms.add(exc.outcome)
            _publish_log(run.published, exc.outcome)
            raise ShardLost(f"its TPU VM ended early ({exc.outcome.reason}): {exc.outcome.detail}") from None
        except TpuQuotaError as exc:  # no VM for this shard now: the others' results stand
            raise ShardLost(f"no TPU VM: {exc}") from None
        except TestRunError as exc:  # pytest could not run there (setup failed, a usage error)
            raise ShardLost(str(exc).splitlines()[0]) from None
        vms.add(result.outcome, job.shard.index)
        _publish_log(run.published, result.outcome)
        assert result.outcome.junit_path is not None  # run_suite_on_vm raised otherwise
        return result.outcome.junit_path

    def selected(record: ShardRecord) -> list[str] | None:
        outcome = vms.reported.get(record.shard.index)
        path = outcome.fetched.get(remote_suite.SHARD_SELECTED) if outcome is not None else None
        return json.loads(path.read_text()) if path is not None and path.is_file() else None

    sharded = run_sharded(
        suite,
        name,
        run.runner_name,
        collected,
        (dict(history[0]), history[1]),
        run_one,
        gpus=None,
        workdir=run.workdir,
        log=work.context.log.info,
        parallel=target.max_vms,  # None: every shard's VM at once
        selected=selected,
    )
    metadata = _record_vms(work, target, vms, every_shard=not sharded.findings.lost)
    rerunner = _rerun_on_the_vms(vms.reported, name, run.runner_name, run.published)
    return SuiteOutcome(sharded.report, metadata, rerunner, shards=sharded)


def _publish_log(published: list[Path], outcome: TpuRunOutcome) -> None:
    if outcome.log_path is not None and outcome.log_path.is_file():
        published.append(outcome.log_path)


def _record_vms(work: StageWork, target: TpuTarget, vms: _Vms, every_shard: bool) -> dict[str, object]:
    """The checks of every VM (deleted, the budget on their summed cost), the manifest's costs and
    the suite's timing; the asset's metadata of them."""
    spec, run = work.spec, work.run
    total = MachineCost(
        stage=spec.stage.name,
        machine=f"{len(vms.costs)} VMs",
        machine_type=target.accelerator_type,
        lifetime_s=round(sum(c.lifetime_s for c in vms.costs), 3),
        hourly_usd=target.hourly_usd,
        cost_usd=sum(c.cost_usd for c in vms.costs),
        ended="completed",
    )
    run.manifest.update(tpu_vms=len(vms.costs), vm_lifetime_s=total.lifetime_s, cost_usd=total.cost_usd)
    run.checks.append(tpu_checks.vms_deleted(spec.key, vms.outcomes))
    budget = spec.pipeline.thresholds.cost_budget_usd
    if budget is not None:
        run.checks.append(tpu_checks.cost_within_budget(spec.key, total, budget))
    timing = _summed_timing(work, vms) if every_shard else None  # a part would read as a speed-up
    if timing is not None:
        run.manifest["timing_file"] = str(timing)  # the benchmarks stage reads it
    return {
        "tpu/vms": dg.MetadataValue.int(len(vms.costs)),
        "tpu/vm_lifetime_s": dg.MetadataValue.float(total.lifetime_s),
        "tpu/cost_usd": dg.MetadataValue.float(total.cost_usd),
    }


def _summed_timing(work: StageWork, vms: _Vms) -> Path | None:
    """Seed 003's timing JSON (`elapsed_seconds`) of the whole suite: the shards' summed, the
    suite's own time as an unsharded night measures it. None where a shard's file is another kind
    (a benchmarks list) or missing."""
    documents = []
    for outcome in vms.reported.values():
        path = outcome.timing_path
        try:
            document = json.loads(path.read_text()) if path is not None else None
        except (OSError, ValueError):
            document = None
        if not isinstance(document, dict) or not isinstance(document.get("elapsed_seconds"), int | float):
            work.context.log.warning(f"{work.spec.stage.name}: no elapsed_seconds timing from every shard")
            return None
        documents.append(document)
    if not documents:
        return None
    summed = {
        **documents[0],
        "timestamp": min(d.get("timestamp", 0) for d in documents),
        "elapsed_seconds": sum(d["elapsed_seconds"] for d in documents),
        "shards": len(documents),
    }
    path = work.run.workdir / "test_timing.json"
    path.write_text(json.dumps(summed))
    return path


def _rerun_on_the_vms(
    reported: Mapping[int, TpuRunOutcome], name: str, runner: str, published: list[Path]
) -> Rerunner:
    """Each VM re-ran its own shard's failing tests before it was deleted (remote_suite.py): a
    round's report is every shard's file of that round, read back as confirmation asks for it."""

    def run_round(node_ids: list[str], number: int, runs: int, timeout_s: float) -> TestReport:
        wanted = confirmation_file(number)
        paths = [o.fetched[wanted] for _, o in sorted(reported.items()) if wanted in o.fetched]
        if not paths:
            raise TestRunError(f"no shard's TPU VM brought back {wanted} (see their logs)")
        published.extend(paths)
        return parse_junit_files(paths, name, runner)

    return Rerunner(
        lambda case: case.node_id if case.classname else None,
        run_round,
        why_not="not a test the VM could re-run alone (a collection error)",
    )
