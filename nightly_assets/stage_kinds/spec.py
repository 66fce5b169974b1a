"""What a stage kind is: its typed `params`, its asset builder, its kinds tags and the runners it takes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import dagster as dg

# The params bases live with the catalog (it validates them); the kinds name them from here.
from nightly_assets.catalog.kinds import (
    ORCHESTRATOR,
    Identifier,
    NoParams,
    RepoParams,
    RunnerKind,
    StageParams,
)

if TYPE_CHECKING:
    from nightly_assets.stages import StageSpec

__all__ = [
    "ORCHESTRATOR",
    "Identifier",
    "NoParams",
    "RepoParams",
    "RunnerKind",
    "StageKind",
    "StageParams",
]

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
