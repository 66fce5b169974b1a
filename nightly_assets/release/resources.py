"""Package index for released wheels: a local find-links folder in the embedded default."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg


class LocalPackageIndexResource(dg.ConfigurableResource):
    """A flat folder usable with `pip install --find-links`; one sub-folder per pipeline."""

    root: str

    def publish(self, pipeline: str, files: list[Path]) -> list[Path]:
        dest = Path(self.root) / pipeline
        dest.mkdir(parents=True, exist_ok=True)
        published = []
        for file in files:
            target = dest / file.name
            tmp = target.with_suffix(target.suffix + ".part")
            shutil.copyfile(file, tmp)
            tmp.replace(target)  # never a half-copied wheel in the index
            published.append(target)
        return published
