"""What a runner kind is: the execution backend that does a stage's work where the catalog put it.

A stage asset decides *what* to run (a suite by markers, wheels from the checkout, a benchmark
command) and asks the backend of its runner's kind to run it; the backend decides *how* (pytest on
this host, the night's image through Pipes, Bazel remote execution, a TPU VM, a batch machine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import dagster as dg

from nightly_assets.manifests import EnvironmentManifest
from nightly_assets.stages import StageNotAvailable

if TYPE_CHECKING:
    from nightly_assets.artefacts.resources import ArtefactStoreResource
    from nightly_assets.builds.wheel_params import WheelsParams
    from nightly_assets.results import TestReport
    from nightly_assets.shards.suite import ShardedRun
    from nightly_assets.stages import StageRun, StageSpec
    from nightly_assets.testing.confirm import Rerunner

# What a backend can be asked to do.
Capability = Literal["suite", "wheels", "command"]


@dataclass(frozen=True)
class StageWork:
    """One stage's work handed to a backend: the asset's context, its catalog spec, the running
    partition and the environment the upstream stage made (a venv or the night's image)."""

    context: dg.AssetExecutionContext
    spec: StageSpec
    run: StageRun
    environment: EnvironmentManifest | None  # None: no environment stage upstream
    gpus: int = 0  # GPUs the work needs (a suite's or a benchmark's min_gpus), handed to it alone

    @property
    def resources(self) -> Any:
        return self.context.resources

    @property
    def artefacts(self) -> ArtefactStoreResource:
        artefacts: ArtefactStoreResource = self.context.resources.artefacts
        return artefacts

    @property
    def in_image(self) -> bool:
        """The upstream environment is the night's image (else a virtualenv on this host)."""
        return self.environment is not None and self.environment.mode == "image"

    @property
    def env(self) -> EnvironmentManifest:
        """The upstream environment; a stage with none upstream cannot run a suite or command."""
        if self.environment is None:
            raise StageNotAvailable(
                f"{self.spec.key.to_user_string()}: no environment or docker_image stage upstream "
                "holds the night's Python; add one to its deps"
            )
        return self.environment

    @property
    def label(self) -> str:
        """The runner label the work runs on ("local" for a stage that names none)."""
        return self.run.runner_name if self.run.runner is not None else "local"


@dataclass
class SuiteOutcome:
    """A suite's report, what the backend adds to the asset's metadata, and how it re-runs."""

    report: TestReport
    metadata: dict[str, object] = field(default_factory=dict)
    # How the backend re-runs the report's failing tests alone, in the environment and on the pins
    # the suite ran with (testing/confirm.py); None: it cannot, and they stay unconfirmed.
    rerunner: Rerunner | None = None
    shards: ShardedRun | None = None  # a sharded suite's plan and shards (report: their merged one)


@dataclass
class BuiltWheels:
    """The wheels a backend built, and what built them (for the manifest and the metadata)."""

    wheels: list[Path]
    builder: dict[str, Any] = field(default_factory=dict)


class RunnerBackend:
    """One runner kind's way of running work. A backend says what it `supports` and which
    resources each capability uses (so a stage asset requires only those); what it does not
    support raises StageNotAvailable naming the stage, the runner and what to do instead."""

    kind: ClassVar[str]
    supports: ClassVar[frozenset[Capability]]

    def resource_keys(self, spec: StageSpec, capability: Capability) -> set[str]:
        """The resources `capability` uses for this stage (besides artefacts and warehouse)."""
        return set()

    def check_specs(self, spec: StageSpec, capability: Capability) -> list[dg.AssetCheckSpec]:
        """Checks the backend evaluates for the stage (a TPU VM's deletion and cost)."""
        return []

    def run_suite(self, work: StageWork) -> SuiteOutcome:
        raise self.unsupported(work, "a test suite")

    def build_wheels(self, work: StageWork, params: WheelsParams) -> BuiltWheels:
        raise self.unsupported(work, "a wheel build")

    def gpu_count(self, work: StageWork) -> int:
        """The GPUs the stage's runner gives its work (what a stage's min_gpus is checked against)."""
        declared = work.run.runner.gpus if work.run.runner else 0
        return declared if isinstance(declared, int) else 0

    def run_command(self, work: StageWork, argv: list[str], output: str, timeout_s: float) -> Path:
        """Run `argv` ("python": the environment's Python; "{output}": where it writes its one
        output file) and return that file's path on this host."""
        raise self.unsupported(work, "a command")

    def unsupported(self, work: StageWork, what: str, instead: str = "") -> StageNotAvailable:
        return StageNotAvailable(
            f"{work.spec.key.to_user_string()}: {what} cannot run on '{work.run.runner_name}' "
            f"({self.kind})" + (f"; {instead}" if instead else "")
        )


def suite_selection(work: StageWork, gpus: int) -> tuple[list[str], bool]:
    """The suite's pytest arguments for this target (paths, `-m` markers, the suite's own
    `pytest_args`), and whether it only collects (seed 001's dry run: an arch in `collect_only_on`,
    or fewer GPUs than the suite needs). Without markers the project's own selection stands."""
    suite = work.spec.stage.suite
    assert suite is not None and suite.bazel is None  # Bazel suites go to the rbe backend
    target = work.run.target
    markers = suite.markers.format(arch=target.arch, **target.params) if suite.markers else None
    args = [*suite.paths, *(["-m", markers] if markers is not None else []), *suite.pytest_args]
    return args, target.arch in suite.collect_only_on or gpus < suite.min_gpus


def rerun_selection(work: StageWork, node_ids: list[str]) -> list[str]:
    """The pytest arguments that re-run `node_ids` alone: the node ids in place of the suite's
    paths, its markers and own arguments kept (a node id they deselect stays deselected)."""
    suite = work.spec.stage.suite
    assert suite is not None
    args, _ = suite_selection(work, suite.min_gpus)
    return [*node_ids, *args[len(suite.paths) :]]


def shard_history(work: StageWork) -> tuple[dict[str, float], int]:
    """What a sharded suite is planned from: each test's mean seconds over the suite's last
    HISTORY_NIGHTS nights in the warehouse, and how many nights those were."""
    from nightly_assets.shards.suite import HISTORY_NIGHTS

    run = work.run
    store = work.resources.warehouse.store()
    durations, nights = store.suite_durations(
        run.key.pipeline, run.key.target, work.spec.stage.name, nights=HISTORY_NIGHTS
    )
    return durations, len(nights)
