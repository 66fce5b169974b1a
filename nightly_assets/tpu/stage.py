"""A test suite on a fresh TPU VM (seed 003): what the nightly stage and the PR tier both run.

The pinned checkout travels as one tarball with `remote_suite.py` beside it; the VM unpacks it,
installs it, runs pytest and writes the timing JSON. Whatever happens, the VM's lifetime and
cost come back (the caller records them) and the VM is deleted by `TpuVmResource.run_suite`.
"""

from __future__ import annotations

import logging
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from nightly_assets.catalog.kinds import StageParams
from nightly_assets.catalog.models import Suite, Target
from nightly_assets.interrupts import deferred_interrupts
from nightly_assets.results import TestReport
from nightly_assets.testing.junit import parse_junit
from nightly_assets.testing.resources import PYTEST_USABLE_EXIT_CODES, TestRunError
from nightly_assets.tpu import remote_suite
from nightly_assets.tpu.models import TpuRunOutcome, TpuSuite, TpuTarget
from nightly_assets.tpu.resources import TpuVmResource
from nightly_assets.warehouse.rows import MachineCost

REMOTE_SCRIPT = Path(__file__).with_name("remote_suite.py")
SHARD_PLUGIN = Path(__file__).with_name("remote_shard.py")  # uploaded as remote_suite.SHARD_PLUGIN
_SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", "bazel-out"}


class TpuSuiteParams(StageParams):
    """A test_suite stage's `params` that only a TPU VM takes (defs/tpu/defs.yaml)."""

    python: str = Field(default="python3", min_length=1, description="the VM's Python")
    venv: bool = Field(default=True, description="run in a fresh venv (with the image's site packages)")
    install: bool = Field(default=True, description="pip install -e the checkout first")
    pip_args: list[str] = Field(default_factory=list, description="extra `pip install` arguments")
    timing_file: str = Field(default="test_timing.json", description="the timing JSON the suite writes")


class TpuRunEnded(RuntimeError):
    """The VM went before the suite finished (preempted, SSH lost, timeout...): says why."""

    def __init__(self, message: str, outcome: TpuRunOutcome) -> None:
        super().__init__(message)
        self.outcome = outcome


@dataclass(frozen=True)
class VmShard:
    """One shard of a planned suite on this VM: its index (from 1) and the plan file all share."""

    index: int
    plan: Path


@dataclass(frozen=True)
class TpuSuiteResult:
    report: TestReport
    outcome: TpuRunOutcome
    cost: MachineCost


def _machine_cost(stage: str, outcome: TpuRunOutcome, hourly_usd: float) -> MachineCost:
    return MachineCost(
        stage=stage,
        machine=outcome.node_name,
        machine_type=outcome.accelerator_type,
        lifetime_s=round(outcome.lifetime_s, 3),
        hourly_usd=hourly_usd,
        cost_usd=outcome.cost_usd,
        ended="leaked" if outcome.delete_error else outcome.reason or "completed",
    )


def pack_checkout(checkout: Path, tarball: Path) -> Path:
    """The checkout as it was tested (patches included), without VCS and build leftovers."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if _SKIP_DIRS.intersection(Path(info.name).parts) else info

    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(checkout, arcname=".", filter=keep)
    return tarball


def suite_for(
    suite: Suite,
    params: TpuSuiteParams,
    target: Target,
    tarball: Path,
    commit: str,
    shard: VmShard | None = None,
) -> TpuSuite:
    """The argv the VM runs: our runner script, every value its own argument; with `shard`, the
    suite's selection (paths, markers) stands and the VM keeps that shard's part of it."""
    assert suite.bazel is None  # Bazel suites do not run on TPU VMs (the catalog says so)
    markers = suite.markers.format(arch=target.arch, **target.params) if suite.markers else ""
    argv = [params.python, "remote_suite.py", "--source", "source.tar.gz", "--junit", "junit.xml"]
    argv += ["--timing", params.timing_file, "--markers", markers, "--commit", commit]
    argv += [flag for flag, on in (("--venv", params.venv), ("--install", params.install)) if on]
    argv += [f"--pip-arg={arg}" for arg in params.pip_args]
    argv += [f"--pytest-arg={arg}" for arg in suite.pytest_args]
    # Failures are confirmed on the VM, which is gone by the time the stage judges the night.
    confirm, timeout_s = suite.confirm, suite.timeout_minutes * 60
    budget_s = (confirm.timeout_s or timeout_s) if confirm.attempts else 0
    if confirm.attempts:
        argv += [f"--confirm-attempts={confirm.attempts}", f"--confirm-max-tests={confirm.max_tests}"]
        argv += [f"--confirm-timeout={budget_s}"]
    uploads = {"remote_suite.py": REMOTE_SCRIPT, "source.tar.gz": tarball}
    fetch = [confirmation_file(n) for n in range(1, confirm.attempts + 1)]  # those it wrote
    if shard is not None:
        argv += ["--shard-plan", "shard-plan.json", "--shard-index", str(shard.index)]
        uploads |= {f"{remote_suite.SHARD_PLUGIN}.py": SHARD_PLUGIN, "shard-plan.json": shard.plan}
        fetch.append(remote_suite.SHARD_SELECTED)
    return TpuSuite(
        argv=[*argv, "--", *suite.paths],
        junit_file="junit.xml",
        timing_file=params.timing_file,
        uploads=uploads,
        timeout_s=timeout_s + budget_s,
        fetch=fetch,
    )


def confirmation_file(number: int) -> str:
    """The JUnit of the VM's confirmation re-run `number` (remote_suite.py writes it)."""
    return f"confirm-{number}.xml"


def run_suite_on_vm(
    tpu_vms: TpuVmResource,
    *,
    name: str,
    suite: Suite,
    params: TpuSuiteParams,
    target: Target,
    checkout: Path,
    commit: str,
    run_id: str,
    night: str,
    workdir: Path,
    labels: dict[str, str],
    log: logging.Logger,
    on_cost: Callable[[MachineCost], None],
    shard: VmShard | None = None,
    tarball: Path | None = None,
    stop: threading.Event | None = None,
) -> TpuSuiteResult:
    """One suite (or one `shard` of it) on one fresh VM. `on_cost` gets the VM's lifetime and
    cost as soon as it is deleted, whatever happened (an interrupt included). Raises TpuRunEnded
    when the VM went early, TestRunError when pytest could not run. `tarball`: the checkout
    already packed (shards share one); None: packed into `workdir`. `stop`: set from another thread,
    it ends the suite early and deletes the VM (an interrupted night's shard)."""
    tpu_target = TpuTarget.from_params(target.params, target.name)
    tarball = tarball or pack_checkout(checkout, workdir / "source.tar.gz")
    tpu_suite = suite_for(suite, params, target, tarball, commit, shard)
    log.info(
        f"{name}: {tpu_target.accelerator_type} in {tpu_target.zone} "
        f"({'spot' if tpu_target.spot else 'preemptible' if tpu_target.preemptible else 'on-demand'}), "
        f"pytest -m {tpu_suite.argv[tpu_suite.argv.index('--markers') + 1]!r}"
    )
    out_dir = workdir / "vm"
    try:
        outcome = tpu_vms.run_suite(
            tpu_target,
            tpu_suite,
            run_id=run_id,
            night=night,
            out_dir=out_dir,
            labels=labels,
            log=log,
            stop=stop,
        )
    except BaseException as exc:
        interrupted = getattr(exc, "tpu_outcome", None)  # run_suite puts it on what it re-raises
        if isinstance(interrupted, TpuRunOutcome):
            with deferred_interrupts(log, "recording the TPU VM's cost"):  # a second Ctrl-C waits
                on_cost(_machine_cost(name, interrupted, tpu_target.hourly_usd))
        raise
    cost = _machine_cost(name, outcome, tpu_target.hourly_usd)
    on_cost(cost)
    log.info(
        f"{name}: VM {outcome.node_name.rsplit('/', 1)[-1]} lived {outcome.lifetime_s:.0f} s, "
        f"${outcome.cost_usd:.4f}; " + (f"ended early: {outcome.reason}" if outcome.reason else "completed")
    )
    if outcome.reason is not None:
        raise TpuRunEnded(f"{name}: the TPU VM run ended early ({outcome.reason}): {outcome.detail}", outcome)
    if outcome.exit_code not in PYTEST_USABLE_EXIT_CODES or outcome.junit_path is None:
        tail = _tail(outcome.log_path)
        raise TestRunError(f"{name}: pytest on the TPU VM exited {outcome.exit_code}; last output:\n{tail}")
    return TpuSuiteResult(
        parse_junit(outcome.junit_path, name, outcome.node_name.rsplit("/", 1)[-1]), outcome, cost
    )


def _tail(path: Path | None, lines: int = 30) -> str:
    if path is None or not path.is_file():
        return "(no output)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
