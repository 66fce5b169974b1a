"""Stage kinds, one module each: every module here holds one `KIND` (see spec.py).

Adding a stage kind is adding a module here; the catalog accepts the kind's name once the module
exists. Modules are named after their kind, except where that name would read as a test file:
`suite.py` holds `test_suite`, `suite_health.py` holds `test_health`.

A kind's module is imported when the kind is first looked up, not before: a pipeline's catalog
validation and its assets import only the kinds it uses (importing every kind cost a `nightly run`
over a second). The names come from the module names, so an unknown kind's error lists them all.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Iterator, Mapping

from nightly_assets.catalog.kinds import register_stage_kinds
from nightly_assets.stage_kinds.spec import StageKind, StageParams

NOT_KINDS = {"spec"}
# Kinds whose module is named otherwise (a module named like the kind would read as a test file).
MODULE_OF_KIND = {"test_suite": "suite", "test_health": "suite_health"}


class StageKinds(Mapping[str, StageKind[StageParams]]):
    """Every stage kind by name, in the order of their modules; a kind's module is imported on
    its first lookup. Iterating the names imports nothing; `values()` imports every kind."""

    def __init__(self, modules: list[str]) -> None:
        kind_of_module = {module: kind for kind, module in MODULE_OF_KIND.items()}
        self._modules = {kind_of_module.get(m, m): m for m in modules}

    def __getitem__(self, name: str) -> StageKind[StageParams]:
        return _imported_kind(name, self._modules[name])  # a KeyError for a name with no module

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __contains__(self, name: object) -> bool:
        return name in self._modules


@functools.cache
def _imported_kind(name: str, module: str) -> StageKind[StageParams]:
    kind: StageKind[StageParams] = importlib.import_module(f"{__name__}.{module}").KIND
    if kind.name != name:
        raise RuntimeError(
            f"{__name__}.{module} defines stage kind {kind.name!r}; its module makes it {name!r} "
            f"(name the module after its kind, or add it to MODULE_OF_KIND)"
        )
    return kind


@functools.cache
def stage_kinds() -> StageKinds:
    """Every stage kind by name (each imported on first use: the kinds' builders import the catalog)."""
    return StageKinds(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in NOT_KINDS))


register_stage_kinds(stage_kinds)  # the catalog validates stages against them


def stage_kind(name: str) -> StageKind[StageParams]:
    """The stage kind called `name`; a KeyError names the known ones."""
    kinds = stage_kinds()
    if name not in kinds:
        raise KeyError(f"unknown stage kind {name!r}; expected one of: {', '.join(kinds)}")
    return kinds[name]
