"""What the catalog knows of stage kinds: the base of every kind's typed `params`, and the kinds
themselves, looked up by name when a catalog validates.

The kinds (nightly_assets/stage_kinds) sit above the catalog: their builders import it. So they
register themselves here when imported (the catalog loader imports them), and the catalog never
imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, StringConstraints

RunnerKind = Literal["local", "docker", "rbe", "tpu_vm", "batch", "kubernetes"]
# The runner kinds a suite's `shards` run on (shards/): what each of them holds at once.
SHARDED_RUNNER_KINDS = frozenset({"local", "docker", "kubernetes", "batch", "tpu_vm"})
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


class KindRules(Protocol):
    """What the catalog asks of a stage kind (nightly_assets.stage_kinds.spec.StageKind is one)."""

    @property
    def params(self) -> type[StageParams]: ...

    @property
    def kinds(self) -> frozenset[str]: ...  # kinds tags in the UI

    def accepted_runners(self, params: StageParams) -> frozenset[str]: ...


_registered: list[Callable[[], Mapping[str, KindRules]]] = []


def register_stage_kinds(kinds: Callable[[], Mapping[str, KindRules]]) -> None:
    """Hand the catalog a function giving the stage kinds by name, called at each lookup (a
    function, not the kinds: they import the catalog, so they load only once it is needed)."""
    _registered[:] = [kinds]


def registered_kinds() -> Mapping[str, KindRules]:
    """Every registered stage kind by name; an error says who registers them when none are."""
    if not _registered:
        raise RuntimeError(
            "no stage kinds are registered: importing nightly_assets.stage_kinds registers them "
            "(load the catalog with nightly_assets.catalog.loader, which does)"
        )
    return _registered[0]()


def kind_rules(name: str) -> KindRules:
    """The stage kind called `name`; a KeyError names the known ones."""
    kinds = registered_kinds()
    if name not in kinds:
        raise KeyError(f"unknown stage kind {name!r}; expected one of: {', '.join(kinds)}")
    return kinds[name]
