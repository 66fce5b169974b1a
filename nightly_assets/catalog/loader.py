"""Load the catalog folder (runners.yaml + pipelines/*.yaml) into typed models, or say what is wrong."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from nightly_assets.catalog.models import Catalog, Pipeline, Runner, error_parts

BUILTIN_CATALOG_DIR = Path(__file__).parent


class CatalogError(ValueError):
    """A catalog file that cannot be used: the message names the file, the field and the expectation."""


def catalog_dir() -> Path:
    """The catalog in use: NIGHTLY_CATALOG_DIR when set, else the one shipped with the package."""
    return Path(os.environ.get("NIGHTLY_CATALOG_DIR", BUILTIN_CATALOG_DIR))


def load_catalog(directory: Path | None = None) -> Catalog:
    directory = directory or catalog_dir()
    runners_file = directory / "runners.yaml"
    runners_doc = _read_yaml(runners_file)
    runners = {}
    for name, body in _mapping(runners_file, runners_doc, "runners").items():
        runners[name] = _validate(runners_file, Runner, body, prefix=f"runners.{name}")

    pipeline_files = sorted((directory / "pipelines").glob("*.yaml"))
    if not pipeline_files:
        raise CatalogError(f"{directory / 'pipelines'}: no pipeline documents (*.yaml) found")
    pipelines: dict[str, Pipeline] = {}
    for path in pipeline_files:
        pipeline = _validate(path, Pipeline, _read_yaml(path))
        if pipeline.name != path.stem:
            raise CatalogError(f"{path}: name: '{pipeline.name}' must match the file name '{path.stem}'")
        for repo in pipeline.repositories:
            for patch in repo.patches:
                if not (directory / patch).is_file():
                    raise CatalogError(
                        f"{path}: repositories.{repo.name}.patches: file '{patch}' not found "
                        f"under {directory}"
                    )
        pipelines[pipeline.name] = pipeline
    pools = _mapping(runners_file, runners_doc, "pools")
    try:
        return Catalog(pools=pools, runners=runners, pipelines=pipelines)
    except ValidationError as exc:
        # A cross-file error (a stage and its runner) is told against the pipeline's file.
        message = _describe(exc).removeprefix("(document): ")
        named = re.match(r"pipeline '(\w+)'", message)
        where = directory / "pipelines" / f"{named.group(1)}.yaml" if named else directory
        raise CatalogError(f"{where}: {message}") from None


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(f"{path}: file not found") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise CatalogError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(document, dict):
        raise CatalogError(f"{path}: expected a mapping at the top level, got {type(document).__name__}")
    return document


def _mapping(path: Path, document: dict[str, Any], key: str) -> dict[str, Any]:
    value = document.get(key)
    if not isinstance(value, dict) or not value:
        raise CatalogError(f"{path}: {key}: expected a non-empty mapping")
    return value


def _validate(path: Path, model: type[Any], document: Any, prefix: str = "") -> Any:
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise CatalogError(f"{path}: {_describe(exc, prefix, document)}") from None


def _describe(exc: ValidationError, prefix: str = "", document: Any = None) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        where = _location(error["loc"], document)
        field = ".".join(p for p in (prefix, where) if p) or "(document)"
        message, shown = error_parts(error)
        lines.append(f"{field}: {message}{shown}")
    return "; ".join(lines)


def _location(loc: tuple[int | str, ...], document: Any) -> str:
    """Render a pydantic location; list items carry the entry's name: `stages[3:tests_unit]`."""
    parts: list[str] = []
    node = document
    for part in loc:
        if isinstance(part, int):
            label = f"[{part}]"
            if isinstance(node, list) and part < len(node):
                node = node[part]
                if isinstance(node, dict) and isinstance(node.get("name"), str):
                    label = f"[{part}:{node['name']}]"
            parts.append(label)
            continue
        if part in ("function-after", "function-before") or "[" in str(part):
            continue  # validator wrappers and union tags are noise to a catalog author
        node = node.get(part) if isinstance(node, dict) else None
        parts.append(("." if parts else "") + str(part))
    return "".join(parts)
