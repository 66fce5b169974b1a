"""Stage kinds, one module each: every module here holds one `KIND` (see spec.py).

Adding a stage kind is adding a module here; the catalog accepts the kind's name once the module
exists. Modules are named after their kind, except where that name would read as a test file:
`suite.py` holds `test_suite`, `suite_health.py` holds `test_health`.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from nightly_assets.catalog.kinds import register_stage_kinds
from nightly_assets.stage_kinds.spec import StageKind, StageParams

NOT_KINDS = {"spec"}


@functools.cache
def stage_kinds() -> dict[str, StageKind[StageParams]]:
    """Every stage kind by name (imported on first use: the kinds' builders import the catalog)."""
    kinds: dict[str, StageKind[StageParams]] = {}
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in NOT_KINDS):
        kind = importlib.import_module(f"{__name__}.{module}").KIND
        if kind.name in kinds:
            raise RuntimeError(f"{__name__}.{module} defines stage kind {kind.name!r} a second time")
        kinds[kind.name] = kind
    return kinds


register_stage_kinds(stage_kinds)  # the catalog validates stages against them


def stage_kind(name: str) -> StageKind[StageParams]:
    """The stage kind called `name`; a KeyError names the known ones."""
    kinds = stage_kinds()
    if name not in kinds:
        raise KeyError(f"unknown stage kind {name!r}; expected one of: {', '.join(kinds)}")
    return kinds[name]
