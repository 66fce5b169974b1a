"""What `nightly status` and `nightly tests` need of the catalog: each pipeline's name, title,
targets and stages in order, read from its defs.yaml without validating it.

The validated load (loader.py) imports every stage kind, and with them dagster and most of the code
location: seconds, for a question a person waits on. Whatever the outline cannot read plainly, it
leaves to the validated load, so a broken catalog is still told as loader.py tells it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BUILTIN_CATALOG_DIR = Path(__file__).parents[1] / "defs"  # the project's dg defs folder
DEFS_FILE = "defs.yaml"


def catalog_dir() -> Path:
    """The catalog in use: NIGHTLY_CATALOG_DIR when set, else the one shipped with the package."""
    return Path(os.environ.get("NIGHTLY_CATALOG_DIR", BUILTIN_CATALOG_DIR))


@dataclass(frozen=True)
class Named:
    name: str


@dataclass(frozen=True)
class PipelineOutline:
    name: str
    title: str
    targets: list[Named]
    stages: list[Named]


@dataclass(frozen=True)
class CatalogOutline:
    pipelines: dict[str, PipelineOutline]


def load_outline(directory: Path | None = None) -> CatalogOutline | None:
    """The pipelines of the catalog in `directory` (default `catalog_dir()`), or None where a file
    is not the plain shape this reads (the caller then loads the validated catalog)."""
    directory = directory or catalog_dir()
    pipelines = {}
    for path in sorted(directory.glob(f"*/{DEFS_FILE}")):
        try:
            pipeline = _pipeline(yaml.safe_load(path.read_text(encoding="utf-8"))["attributes"])
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
            return None
        if pipeline is None or pipeline.name != path.parent.name:
            return None
        pipelines[pipeline.name] = pipeline
    return CatalogOutline(pipelines) if pipelines else None


def _pipeline(attributes: Any) -> PipelineOutline | None:
    name, title = attributes["name"], attributes["title"]
    targets, stages = _names(attributes["targets"]), _names(attributes["stages"])
    if not (isinstance(name, str) and isinstance(title, str) and targets and stages):
        return None
    return PipelineOutline(name, title, targets, stages)


def _names(items: Any) -> list[Named]:
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return []
    if not all(isinstance(i.get("name"), str) for i in items):
        return []
    return [Named(i["name"]) for i in items]
