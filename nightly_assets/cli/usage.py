"""What a `nightly` command was given, checked: the pipeline, the night and the targets named on
its command line, and the errors that are the user's to fix (one line, exit 2, no traceback)."""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING, overload

from nightly_assets.catalog.cadence import split_cell

if TYPE_CHECKING:
    from nightly_assets.catalog.models import Catalog, Pipeline
    from nightly_assets.catalog.outline import CatalogOutline, PipelineOutline

INTERRUPTED = 130  # 128 + SIGINT, for Ctrl-C and SIGTERM alike


class UsageError(ValueError):
    pass


class SettingsError(ValueError):
    """A setting the resources need is missing or malformed (e.g. an unset variable in prod)."""


def unset_message(names: list[str]) -> str:
    return f"environment variable(s) not set: {', '.join(names)} (see docs/configuration.md)"


@overload
def pipeline_named(catalog: Catalog, name: str) -> Pipeline: ...
@overload
def pipeline_named(catalog: CatalogOutline, name: str) -> PipelineOutline: ...
def pipeline_named(catalog: Catalog | CatalogOutline, name: str) -> Pipeline | PipelineOutline:
    """The pipeline `name` of a catalog or its outline."""
    if name not in catalog.pipelines:
        raise UsageError(
            f"unknown pipeline {name!r}; the catalog has: {', '.join(sorted(catalog.pipelines))}"
        )
    return catalog.pipelines[name]


def any_night(pipeline: Pipeline | PipelineOutline, text: str) -> dt.date:
    """A --night as a date, any date: one to look up may still be running."""
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError(text)
        return dt.date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--night {text!r}: expected a date as YYYY-MM-DD") from None


def night_to_run(pipeline: Pipeline, text: str) -> dt.date:
    """A --night to run: one of the pipeline's nights that has ended (a pipeline of run slots: a
    day whose first slot has begun)."""
    night = any_night(pipeline, text)
    now = dt.datetime.now(dt.UTC)
    last = now.date() if pipeline.slotted else now.date() - dt.timedelta(days=1)
    if not pipeline.start_date <= night <= last:
        when = "its slot's hour has come" if pipeline.slotted else "it has ended"
        raise UsageError(
            f"--night {text}: pipeline '{pipeline.name}' has nights from {pipeline.start_date} "
            f"to {last} (a night can run once {when}, UTC)"
        )
    return night


def targets_to_run(pipeline: Pipeline, target: str | None) -> list[str]:
    """The --target given (one of the pipeline's; of a pipeline of run slots, a target's cell
    `cpu@06`, or a target for its every slot), or every target (every cell) of the pipeline."""
    cells = pipeline.cells()
    if target is None:
        return cells
    if target in cells:
        return [target]
    of_target = [cell for cell in cells if split_cell(cell)[0] == target]
    if not of_target:
        raise UsageError(f"--target {target!r}: pipeline '{pipeline.name}' has targets {', '.join(cells)}")
    return of_target
