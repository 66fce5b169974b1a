"""Runner kinds, one execution backend each: the module named after a kind holds its `BACKEND`
(see protocol.py). Adding a runner kind is adding a module here and
the name to `RunnerKind` (catalog/kinds.py)."""

from __future__ import annotations

import functools
import importlib
import typing
from typing import TYPE_CHECKING

from nightly_assets.catalog.kinds import RunnerKind
from nightly_assets.runners.protocol import RunnerBackend

if TYPE_CHECKING:
    from nightly_assets.stages import StageSpec


@functools.cache
def backends() -> dict[str, RunnerBackend]:
    """Every runner kind's backend by kind (imported on first use: they import the resources)."""
    found: dict[str, RunnerBackend] = {}
    for kind in typing.get_args(RunnerKind):
        backend = importlib.import_module(f"{__name__}.{kind}").BACKEND
        if backend.kind != kind:
            raise RuntimeError(f"{__name__}.{kind} defines the {backend.kind!r} backend; name them alike")
        found[kind] = backend
    return found


def backend(kind: str | None) -> RunnerBackend:
    """The backend of a runner kind; a stage that names no runner runs on this host (local)."""
    return backends()[kind or "local"]


def runner_kinds(spec: StageSpec) -> list[str | None]:
    """The runner kinds a stage's runners name (one per target arch at most); None: it names none."""
    return list(spec.runner_kinds)


def stage_backends(spec: StageSpec) -> list[RunnerBackend]:
    """The backends a stage's work may go to, one per runner kind it names."""
    return [backend(kind) for kind in runner_kinds(spec)]
