"""Bazel in the catalog: a Bazel suite's test targets, and a wheels stage's Bazel build (with Bazel
itself bootstrapped from a pinned repository first, seed 004)."""

from __future__ import annotations

from pydantic import Field

from nightly_assets.catalog.fields import InsidePath, StrictModel
from nightly_assets.catalog.kinds import Identifier


class BazelTests(StrictModel):
    targets: list[str] = Field(min_length=1)
    tag_filters: str = ""
    flaky_test_attempts: int = Field(default=1, ge=1)


class BazelBootstrap(StrictModel):
    """Bazel built first from a pinned repository with its own bootstrap (seed 004), once per commit."""

    repo: Identifier
    command: list[str] = Field(min_length=1)  # argv run in the checkout, e.g. [bash, ./compile.sh]
    binary: InsidePath = Field(min_length=1)  # where it leaves Bazel, e.g. output/bazel
    env: dict[str, str] = Field(default_factory=dict)  # e.g. EXTRA_BAZEL_ARGS
    timeout_minutes: int = Field(default=120, gt=0)


class BazelBuild(StrictModel):
    """A wheels stage's `bazel build`: the targets whose outputs matching `outputs` are the wheels."""

    targets: list[str] = Field(min_length=1)
    workspace: InsidePath = ""  # the Bazel workspace's folder inside the checkout
    args: list[str] = Field(default_factory=list)  # options, e.g. --config=rocm
    outputs: str = Field(default="*.whl", min_length=1)  # a glob over the output file names
    timeout_minutes: int = Field(default=240, gt=0)
    bootstrap: BazelBootstrap | None = None
