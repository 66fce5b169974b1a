"""Load the catalog folder into typed models, or say what is wrong.

The catalog is a Dagster defs folder: `runners.yaml` (runners and pools, shared by every pipeline)
and one folder per pipeline, `<name>/defs.yaml`, whose `attributes:` are the pipeline's document
(`type:` is the NightlyPipeline component, nightly_assets/catalog/component.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

import nightly_assets.stage_kinds  # noqa: F401  (registers the stage kinds the catalog validates against)
from nightly_assets.catalog.errors import error_parts
from nightly_assets.catalog.models import Catalog, Pipeline

# Their home is outline.py (read without the stage kinds); named here too, where the loader's users look.
from nightly_assets.catalog.outline import BUILTIN_CATALOG_DIR as BUILTIN_CATALOG_DIR
from nightly_assets.catalog.outline import DEFS_FILE, catalog_dir
from nightly_assets.catalog.runner import Runner

RUNNERS_FILE = "runners.yaml"
COMPONENT_TYPE = "nightly_assets.catalog.component.NightlyPipeline"
DEFS_KEYS = ("type", "attributes")
# libyaml's parser where PyYAML has it (same documents, same errors): the pure-Python parser was
# half the time of building the definitions.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CatalogError(ValueError):
    """A catalog file that cannot be used: the message names the file, the field and the expectation."""


def load_catalog(directory: Path | None = None, only: str | None = None) -> Catalog:
    """The catalog; with `only`, the runners and that one pipeline: what a run of it needs (the
    stage kinds of the others stay unimported, a second of every `nightly run`). Where `only` names
    no pipeline folder, the whole catalog, so the caller's lookup can name every pipeline."""
    directory = directory or catalog_dir()
    pools, runners = load_runners(directory)
    files = pipeline_files(directory)
    pipelines: dict[str, Pipeline] = {}
    for path in [f for f in files if f.parent.name == only] or files:
        pipeline = read_pipeline(path, directory)
        pipelines[pipeline.name] = pipeline
    return build_catalog(directory, pools, runners, pipelines)


def load_runners(directory: Path) -> tuple[dict[str, Any], dict[str, Runner]]:
    """runners.yaml: the pools' limits and the runners, each validated."""
    runners_file = directory / RUNNERS_FILE
    if not runners_file.is_file() and directory.is_dir():
        shipped = BUILTIN_CATALOG_DIR / RUNNERS_FILE
        raise CatalogError(
            f"{runners_file}: file not found; a catalog's runners and pools live there: start from the "
            f"shipped one, {shipped} (copy it and keep the runners your pipelines name)"
        )
    runners_doc = _read_yaml(runners_file)
    runners = {}
    for name, body in _mapping(runners_file, runners_doc, "runners").items():
        runners[name] = _validate(runners_file, Runner, body, prefix=f"runners.{name}")
    return _mapping(runners_file, runners_doc, "pools"), runners


def pipeline_files(directory: Path) -> list[Path]:
    """Every pipeline's defs.yaml, one folder deep: `<directory>/<name>/defs.yaml`."""
    if any(p.name != DEFS_FILE for p in (directory / "pipelines").glob("*.yaml")):
        raise CatalogError(
            f"{directory / 'pipelines'}: the catalog's old layout; each pipelines/<name>.yaml is now "
            f"<name>/{DEFS_FILE} with 'type: {COMPONENT_TYPE}' and the document under 'attributes:'"
        )
    files = sorted(directory.glob(f"*/{DEFS_FILE}"))
    for stray in sorted({*directory.rglob("defs.yaml"), *directory.rglob("defs.yml")} - set(files)):
        raise CatalogError(f"{stray}: a pipeline is <catalog>/<name>/{DEFS_FILE}, one folder deep")
    if not files:
        raise CatalogError(f"{directory}: no pipeline folders (<name>/{DEFS_FILE}) found")
    return files


def read_pipeline(path: Path, directory: Path) -> Pipeline:
    """One pipeline's defs.yaml: its `type`, then its `attributes` as a Pipeline."""
    document = _read_yaml(path)
    unknown = [key for key in document if key not in DEFS_KEYS]
    if unknown:
        raise CatalogError(f"{path}: {unknown[0]}: not taken here; a pipeline's file has only {DEFS_KEYS}")
    if document.get("type") != COMPONENT_TYPE:
        raise CatalogError(f"{path}: type: expected '{COMPONENT_TYPE}' (got {document.get('type')!r})")
    return pipeline_from_attributes(path, document.get("attributes"), directory)


def pipeline_from_attributes(path: Path, attributes: Any, directory: Path) -> Pipeline:
    """A defs.yaml's `attributes` as a Pipeline: named like its folder, its patches present."""
    if not isinstance(attributes, Mapping):
        got = type(attributes).__name__ if attributes is not None else "nothing"
        raise CatalogError(f"{path}: attributes: expected the pipeline's document (a mapping), got {got}")
    pipeline: Pipeline = _validate(path, Pipeline, dict(attributes), prefix="attributes")
    if pipeline.name != path.parent.name:
        raise CatalogError(
            f"{path}: attributes.name: '{pipeline.name}' must match the folder name '{path.parent.name}'"
        )
    for repo in pipeline.repositories:
        for patch in repo.patches:
            if not (directory / patch).is_file():
                raise CatalogError(
                    f"{path}: attributes.repositories.{repo.name}.patches: file '{patch}' not found "
                    f"under {directory}"
                )
    return pipeline


def build_catalog(
    directory: Path, pools: dict[str, Any], runners: dict[str, Runner], pipelines: dict[str, Pipeline]
) -> Catalog:
    """The catalog with its cross-file checks (a stage and its runner, a runner and its pool)."""
    try:
        return Catalog(pools=pools, runners=runners, pipelines=pipelines)
    except ValidationError as exc:
        # A cross-file error (a stage and its runner) is told against the pipeline's file.
        message = _describe(exc).removeprefix("(document): ")
        named = re.match(r"pipeline '(\w+)'", message)
        where = directory / named.group(1) / DEFS_FILE if named else directory / RUNNERS_FILE
        raise CatalogError(f"{where}: {message}") from None


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(f"{path}: file not found") from None
    try:
        document = yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 -- a safe loader
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
