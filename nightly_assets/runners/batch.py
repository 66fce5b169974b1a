"""The batch runner kind: a batch machine (Theta's Cobalt, Slurm) whose wheels are built with Bazel
on the build host beside it, as Theta's Jenkins agent did (seed 004). Jobs on the machine itself
(the sanity job, the sweep, the deploy) go through the `batch` scheduler resource of their kinds."""

from __future__ import annotations

from nightly_assets.builds.wheel_params import WheelsParams
from nightly_assets.runners.protocol import BuiltWheels, Capability, RunnerBackend, StageWork
from nightly_assets.runners.rbe import bazel_wheels
from nightly_assets.stages import StageSpec


class BatchBackend(RunnerBackend):
    kind = "batch"
    supports = frozenset({"wheels"})

    def resource_keys(self, spec: StageSpec, capability: Capability) -> set[str]:
        return {"bazel_rbe"}

    def build_wheels(self, work: StageWork, params: WheelsParams) -> BuiltWheels:
        return bazel_wheels(work, params, remote=False)


BACKEND = BatchBackend()
