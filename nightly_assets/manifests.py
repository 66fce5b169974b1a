"""What one stage leaves for the next: the typed fields of the manifests later stages read.

A stage writes its manifest (`manifest.json` in its folder) as a mapping; a stage that reads an
upstream one names the model of what it needs, and a manifest that lacks it (an older layout, a
stage that ran differently) is refused naming the stage, the night and the field, not with a
KeyError deep inside a build. Fields a stage writes only for people (durations, logs) stay untyped.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nightly_assets.devices.facts import DeviceFacts


class Manifest(BaseModel):
    """The part of a stage's manifest other stages read; anything else in it is kept as it is."""

    model_config = ConfigDict(extra="allow", frozen=True)


class PinnedRepo(Manifest):
    """One repository as the sources stage pinned and checked it out for the night."""

    url: str
    branch: str
    sha: str
    path: str  # the night's checkout
    committed_at: str = ""  # ISO 8601; empty in manifests from before it was recorded

    @property
    def build_env(self) -> dict[str, str]:
        """`SOURCE_DATE_EPOCH` at the commit's time for the builds of this checkout, so the same
        commit builds the same wheel bytes (and an image that installs it reuses its cached layers)."""
        if not self.committed_at:
            return {}
        return {"SOURCE_DATE_EPOCH": str(int(dt.datetime.fromisoformat(self.committed_at).timestamp()))}


class SourcesManifest(Manifest):
    repos: dict[str, PinnedRepo]


class WheelsManifest(Manifest):
    wheels: list[str]
    sdists: list[str] = Field(default_factory=list)


class EnvironmentManifest(Manifest):
    """Where the night's wheels are installed: a virtualenv on this host, or the night's image."""

    mode: Literal["venv", "image"] = "venv"
    python: str  # the environment's Python (a path on this host, or in the image)
    rootdir: str | None = None  # the image's working folder
    local_tag: str | None = None  # the image as the engine that built it names it
    reference: str | None = None  # the image in its primary registry
    primary_registry: str | None = None
    packages: list[str] = Field(default_factory=list)  # import names the night's wheels install
    frameworks: dict[str, str] = Field(default_factory=dict)  # framework distributions and versions

    @model_validator(mode="after")
    def _an_image_is_named(self) -> Self:
        if self.mode == "image" and not (self.rootdir and self.local_tag and self.reference):
            raise ValueError("an image environment names its rootdir, local_tag and reference")
        return self


class TimingManifest(Manifest):
    timing_file: str | None = None  # a suite's timing JSON (the TPU suites write one)


class BenchmarkValue(Manifest):
    value: float
    unit: str
    lower_is_better: bool


class BenchmarksManifest(Manifest):
    benchmarks: dict[str, BenchmarkValue]
    # What the benchmarks ran on: their baseline's configuration. None in manifests from before
    # it was recorded (and where the stage records none): the empty configuration.
    devices: DeviceFacts | None = None


class PerfBaselineManifest(Manifest):
    """What the night summary reads of perf_baseline's: the benchmarks whose device configuration
    changed tonight, by what changed (they start a new baseline)."""

    new_baseline: dict[str, list[str]] = Field(default_factory=dict)


class BuildRootManifest(Manifest):
    """The batch sanity job's ephemeral build root, which the deploy stage releases."""

    build_root: str
    python: str


class ReleaseManifest(Manifest):
    release: str
    python: str  # the released environment's Python


class SweepManifest(Manifest):
    metric: str
    rows: list[dict[str, Any]]
