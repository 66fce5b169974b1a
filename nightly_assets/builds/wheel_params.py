"""A wheels stage's `params`: which builder makes the wheels (pip, a container, Bazel) and on
which runner kinds each can run. Here, below the stage kind, for the runner backends to read."""

from typing import Literal, Self

from pydantic import model_validator

from nightly_assets.catalog.kinds import RepoParams
from nightly_assets.catalog.models import BazelBuild

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
