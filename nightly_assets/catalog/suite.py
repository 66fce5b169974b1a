"""A test_suite stage's `suite:` block: what it runs (pytest markers or Bazel targets), where, for
how long, and how its failures are confirmed."""

from __future__ import annotations

from pydantic import Field, model_validator

from nightly_assets.catalog.bazel import BazelTests
from nightly_assets.catalog.fields import Arch, RunnerRef, StrictModel


class Confirm(StrictModel):
    """How a suite confirms its failures before the night is judged: the failing tests alone are
    re-run on the same pins in the same environment; one that passes is flaky (same-commit
    evidence), one that fails every attempt is broken."""

    # Re-runs of each failing test after the suite's own run; 0 turns confirmation off. Two give
    # three runs in all, what Bazel gives a test marked flaky (its default --flaky_test_attempts).
    attempts: int = Field(default=2, ge=0, le=10)
    # Failing tests re-run at most, the first in the report's order; the rest are listed as not
    # re-run. A night with more failures than a reader can go through in the stage's failures
    # table (report_metadata.MAX_FAILURE_ROWS) is a breakage, and re-running all of it only costs time.
    max_tests: int = Field(default=50, ge=1)
    # Seconds all re-runs of the night may take together; unset: the suite's own timeout_minutes
    # (a part of the suite gets no more time than the whole did).
    timeout_s: int | None = Field(default=None, gt=0)


class Suite(StrictModel):
    """A test suite: pytest markers (or Bazel targets), a timeout and the runner it needs."""

    markers: str | None = None  # a pytest -m expression; unset: the project's own selection
    pytest_args: list[str] = Field(default_factory=list)  # more pytest arguments, one per item
    paths: list[str] = Field(default_factory=lambda: ["tests"])
    bazel: BazelTests | None = None
    timeout_minutes: int = Field(gt=0)
    runner: RunnerRef
    collect_only_on: list[Arch] = Field(default_factory=list)
    min_gpus: int = Field(default=0, ge=0)
    confirm: Confirm = Field(default_factory=Confirm)
    # Split the suite across N processes or machines of its runner (shards/), planned from each
    # test's recorded durations; or as many shards as keep each near `shard_minutes`.
    shards: int | None = Field(default=None, ge=1)
    shard_minutes: float | None = Field(default=None, gt=0)
    # A lost shard (killed, preempted, past its time) is run again alone this many more times. One:
    # a single preemption or node failure is common and costs one shard's time; a shard lost twice
    # is more likely its tests' own fault, and its tests are reported as not run.
    shard_retries: int = Field(default=1, ge=0, le=5)

    @model_validator(mode="after")
    def _one_selector(self) -> Suite:
        if self.bazel is not None and (self.markers is not None or self.pytest_args):
            raise ValueError("a Bazel suite selects its tests by targets: no 'markers' or 'pytest_args'")
        if self.shards is not None and self.shard_minutes is not None:
            raise ValueError("say 'shards' (how many) or 'shard_minutes' (how long each), not both")
        if self.bazel is not None and self.sharded:
            raise ValueError(
                "a Bazel suite is sharded by Bazel: set shard_count on its test targets, "
                "not 'shards' or 'shard_minutes' here"
            )
        return self

    @property
    def sharded(self) -> bool:
        return self.shards is not None or self.shard_minutes is not None
