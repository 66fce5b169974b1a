"""The package indexes the night's wheels and sdists are published to, as a Dagster resource: which
names are configured (``indexes.py``), `local` (a flat folder usable with `pip install
--find-links`, the embedded default), and any other name published with twine (``upload.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
from pydantic import Field

from nightly_assets.release.errors import IndexNotConfigured
from nightly_assets.release.indexes import INDEX_VARIABLES, LOCAL, PackageIndex
from nightly_assets.release.upload import Publication, Upload
from nightly_assets.settings import PositiveSeconds, Seconds


class PackageIndexesResource(dg.ConfigurableResource):
    """The package indexes by name: `local` (a find-links folder, one sub-folder per pipeline) and
    the real ones twine uploads to (`indexes`). A name in `local_names` is published to the folder:
    the embedded default puts `test` there when NIGHTLY_TEST_INDEX_URL is unset, so a laptop night
    runs end to end; `production` needs its variables (INDEX_VARIABLES) everywhere."""

    local_root: str = Field(description="the find-links folder of the `local` index")
    indexes: dict[str, PackageIndex] = Field(default_factory=dict, description="twine's indexes by name")
    local_names: list[str] = Field(
        default_factory=lambda: [LOCAL], description="index names published to the local folder"
    )
    timeout_s: int = Field(default=900, gt=0, description="per twine or pip command")
    http_timeout_s: PositiveSeconds = Field(default="30", description="per request to the simple index")
    listing_wait_s: Seconds = Field(
        default="120",
        description="how long to wait for the simple index to list an upload (PyPI's CDN lags)",
    )

    # -- which index ---------------------------------------------------------------------------

    def is_local(self, name: str) -> bool:
        return name in self.local_names and name not in self.indexes  # a configured index wins

    def is_configured(self, name: str) -> bool:
        return name in self.local_names or name in self.indexes

    def not_configured(self, name: str) -> str:
        """Why `name` cannot be published to, and which variables would configure it."""
        known = ", ".join(sorted({*self.local_names, *self.indexes}))
        variables = INDEX_VARIABLES.get(name)
        how = (
            f"set {variables.describe()}"
            if variables
            else f"name one of {', '.join([LOCAL, *INDEX_VARIABLES])} or add it to the resource's `indexes`"
        )
        return f"the package index '{name}' is not configured in this deployment (configured: {known}); {how}"

    def index(self, name: str) -> PackageIndex:
        if name not in self.indexes:
            raise IndexNotConfigured(self.not_configured(name))
        return self.indexes[name]

    # -- the local folder ----------------------------------------------------------------------

    def local_folder(self, pipeline: str) -> Path:
        return Path(self.local_root) / pipeline

    def publish_local(self, pipeline: str, files: list[Path]) -> list[Path]:
        """Copy `files` into the pipeline's folder of the local index."""
        dest = self.local_folder(pipeline)
        dest.mkdir(parents=True, exist_ok=True)
        published = []
        for file in files:
            target = dest / file.name
            tmp = target.with_suffix(target.suffix + ".part")
            shutil.copyfile(file, tmp)
            tmp.replace(target)  # never a half-copied wheel in the index
            published.append(target)
        return published

    # -- a real index, with twine --------------------------------------------------------------

    def publish(self, name: str, files: list[Path], workdir: Path) -> Publication:
        """Check, upload and install back `files` on the index `name`; logs go to `workdir`.
        A file the index already has with the same content (a re-run of the night) is not uploaded
        again; one it has with other content fails: a published file never changes."""
        upload = Upload(name, self.index(name), self, workdir)
        return upload.run(files)
