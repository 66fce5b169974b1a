"""Artefact store: one folder per pipeline/night/target/stage, with a manifest the next stage reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import dagster as dg

from nightly_assets.results import NightKey

MANIFEST = "manifest.json"


class MissingArtefactError(RuntimeError):
    """A stage asked for an upstream stage's output that this night does not have."""


class ArtefactStoreResource(dg.ConfigurableResource):
    """Local artefact folder (the embedded default); GCS takes its place in production."""

    root: str

    def stage_dir(self, key: NightKey, stage: str, *, fresh: bool = False) -> Path:
        path = Path(self.root) / key.pipeline / key.night.isoformat() / key.target / stage
        if fresh and path.exists():
            shutil.rmtree(path)  # a re-run replaces the night's artefacts, never mixes them
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_manifest(self, key: NightKey, stage: str, manifest: dict[str, Any]) -> Path:
        path = self.stage_dir(key, stage) / MANIFEST
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        tmp.replace(path)  # atomic: a reader sees the old or the new manifest, never half of one
        return path

    def read_manifest(self, key: NightKey, stage: str) -> dict[str, Any]:
        path = Path(self.root) / key.pipeline / key.night.isoformat() / key.target / stage / MANIFEST
        if not path.is_file():
            raise MissingArtefactError(
                f"{key}: stage '{stage}' has no artefacts ({path} is missing); "
                f"materialize {key.pipeline}/{stage} for this partition first"
            )
        result: dict[str, Any] = json.loads(path.read_text())
        return result

    def has_manifest(self, key: NightKey, stage: str) -> bool:
        root = Path(self.root)
        return (root / key.pipeline / key.night.isoformat() / key.target / stage / MANIFEST).is_file()
