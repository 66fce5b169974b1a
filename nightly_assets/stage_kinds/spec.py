"""What a stage kind is: its typed `params`, its asset builder, its kinds tags and the runners it takes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Generic, Literal, TypeVar

import dagster as dg
from pydantic import BaseModel, ConfigDict, StringConstraints

if TYPE_CHECKING:
    from nightly_assets.stages import StageSpec

RunnerKind = Literal["local", "docker", "rbe", "tpu_vm", "batch", "kubernetes"]
# A stage with no runner runs in the orchestrator's own process (summaries, baselines, release).
ORCHESTRATOR = "orchestrator"
# A catalog name (pipeline, stage, repository): it lands in asset keys, job names and paths.
Identifier = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$", max_length=48)]


class StageParams(BaseModel):
    """A stage's `params` block: every key typed, an unknown one refused when the catalog loads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def repositories(self) -> list[str]:
        """Catalog repositories the params name (checked against the pipeline's `repositories`)."""
        return []

    def stage_refs(self) -> list[str]:
        """Stages of the pipeline the params name (each must be upstream of this one)."""
        return []

    def runner_kinds(self, accepted: frozenset[str]) -> frozenset[str]:
        """The runner kinds these params can run on; by default every one the kind accepts."""
        return accepted


class NoParams(StageParams):
    """A stage kind that takes no `params`."""


class RepoParams(StageParams):
    """Params of a stage that works on one repository's checkout."""

    repo: Identifier | None = None  # which of the pipeline's repositories; default the first

    def repositories(self) -> list[str]:
        return [self.repo] if self.repo else []


P = TypeVar("P", bound=StageParams)


@dataclass(frozen=True)
class StageKind(Generic[P]):
    """One kind of stage: what its YAML `params` may say and how its asset is built."""

    name: str
    params: type[P]
    build: Callable[[StageSpec], dg.AssetsDefinition]
    kinds: frozenset[str]  # kinds tags in the UI (Dagster shows at most three)
    # Runner kinds the stage can run on; ORCHESTRATOR when it may name no runner at all.
    runners: frozenset[str]

    def accepted_runners(self, params: StageParams) -> frozenset[str]:
        return params.runner_kinds(self.runners)
