"""Catalog folders that tests write, in the catalog's layout: runners.yaml, patches/, and one
`<name>/defs.yaml` per pipeline whose `attributes:` are the pipeline's document."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from nightly_assets.catalog.loader import BUILTIN_CATALOG_DIR, COMPONENT_TYPE, DEFS_FILE


def copy_catalog(dest: Path) -> Path:
    """A copy of the shipped catalog at `dest` (its data only)."""
    shutil.copytree(BUILTIN_CATALOG_DIR, dest, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return dest


def pipeline_path(catalog: Path, name: str) -> Path:
    return catalog / name / DEFS_FILE


def read_pipeline(catalog: Path, name: str) -> dict[str, Any]:
    """The pipeline's document: its defs.yaml's attributes."""
    return yaml.safe_load(pipeline_path(catalog, name).read_text())["attributes"]


def as_defs_yaml(document: str | Mapping[str, Any]) -> str:
    """A pipeline's document (YAML text, comments kept, or a mapping) as its defs.yaml's text."""
    text = document if isinstance(document, str) else yaml.safe_dump(dict(document), sort_keys=False)
    body = "\n".join(f"  {line}" if line.strip() else "" for line in text.strip("\n").splitlines())
    return f"type: {COMPONENT_TYPE}\nattributes:\n{body}\n"


def write_pipeline(catalog: Path, document: str | Mapping[str, Any]) -> Path:
    """The pipeline's document as <catalog>/<its name>/defs.yaml (replacing one of that name)."""
    name = (yaml.safe_load(document) if isinstance(document, str) else document)["name"]
    path = pipeline_path(catalog, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(as_defs_yaml(document))
    return path


def edit_pipeline(catalog: Path, name: str, change: Callable[[dict[str, Any]], object]) -> Path:
    """Change the pipeline's document in place (as a mapping; its comments are lost)."""
    document = read_pipeline(catalog, name)
    change(document)
    path = pipeline_path(catalog, name)  # where it was, whatever name the change gave it
    path.write_text(as_defs_yaml(document))
    return path
