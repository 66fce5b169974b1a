"""The artefact store of production: stages still work in local folders; their reports are uploaded
to a GCS bucket through dagster-gcp, and the links point there.

A module of its own so that dagster-gcp (which imports BigQuery, pandas and pyarrow) is imported only
where a bucket is configured: the resource needs GCSResource when its class is defined.

Without credentials the store is local-only: it says so once per process (each step of a run is a
process) with what to configure, and each publish then fails at once, without asking google-auth
(which would wait ~12 s on a metadata server that is not there).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import dagster as dg
from dagster_gcp import GCSResource
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY
from pydantic import Field

from nightly_assets.artefacts.credentials import gcp_credentials
from nightly_assets.artefacts.resources import ArtefactError, ArtefactStoreResource
from nightly_assets.settings import Seconds


class GcsArtefactStoreResource(ArtefactStoreResource):
    """Production: stages still work in `root`; their reports are uploaded to `gs://bucket/prefix/`
    through dagster-gcp's GCSResource, and the links point there."""

    gcs: GCSResource
    bucket: str = Field(description="Bucket of the published reports.")
    prefix: str = Field(default="nightly", description="Object prefix inside the bucket.")
    base_url: str = Field(
        default="https://storage.cloud.google.com",
        description="Where objects open in a browser: `{base_url}/{bucket}/{object}`.",
    )
    browse_url: str = Field(
        default="https://console.cloud.google.com/storage/browser",
        description="Where a stage's folder is listed: `{browse_url}/{bucket}/{prefix}/...`.",
    )
    upload_deadline_s: Seconds = Field(
        default="120", description="Retries of one upload (or one request of a prune) stop after this."
    )

    def _publish_in(self, folder: Path, files: Iterable[Path]) -> dict[str, str]:
        bucket = self._bucket()
        folder = folder.resolve()
        links = {}
        for path in files:
            name = self._object(path)
            try:
                bucket.blob(name).upload_from_filename(
                    str(path),
                    content_type=_content_type(path),
                    timeout=min(60.0, float(self.upload_deadline_s)),
                    retry=DEFAULT_RETRY.with_deadline(float(self.upload_deadline_s)),
                )
            except Exception as exc:  # google-cloud-storage raises many kinds; say which file failed
                raise ArtefactError(f"cannot upload {path} to gs://{self.bucket}/{name}: {exc}") from exc
            links[path.resolve().relative_to(folder).as_posix()] = self.file_url(path)
        return links

    def file_url(self, path: Path) -> str:
        return f"{self.base_url.rstrip('/')}/{self.bucket}/{quote(self._object(path))}"

    def prune(
        self, pipeline: str, written_before: dt.datetime, *, keep: Collection[tuple[dt.date, str]] = ()
    ) -> list[Path]:
        """The local folders as the local store prunes them, then the uploaded reports of every
        night x target the bucket holds that was last uploaded before `written_before`: found by
        listing the bucket, not the local folders, so what another host uploaded, or what a
        failed prune left, goes too. A night x target whose local folder stays keeps its reports."""
        removed = set(super().prune(pipeline, written_before, keep=keep))
        root = Path(self.root)
        deadline = float(self.upload_deadline_s)  # a bucket that is down must not hold up the summary
        calls = {"timeout": min(60.0, deadline), "retry": DEFAULT_RETRY.with_deadline(deadline)}
        bucket = self._bucket()
        try:
            for night_name, night_prefix in _subfolders(bucket, f"{self._object(root / pipeline)}/", calls):
                try:
                    night = dt.date.fromisoformat(night_name)
                except ValueError:  # not a night's folder: never ours to delete
                    continue
                for target, target_prefix in _subfolders(bucket, night_prefix, calls):
                    if (night, target) in keep or (root / pipeline / night_name / target).is_dir():
                        continue
                    blobs = list(bucket.list_blobs(prefix=target_prefix, **calls))
                    if any(b.updated is not None and b.updated >= written_before for b in blobs):
                        continue
                    for blob in blobs:
                        blob.delete(**calls)
                    removed.add(root / pipeline / night_name / target)
        except Exception as exc:  # google-cloud-storage raises many kinds; the next night tries again
            raise ArtefactError(f"cannot prune gs://{self.bucket}/: {type(exc).__name__}: {exc}") from exc
        return sorted(removed)

    def _bucket(self) -> Any:
        """The bucket, through a client made with this process's credentials (looked up once);
        an ArtefactError naming the bucket when there are none (local-only) or it cannot be opened."""
        found = gcp_credentials(self.gcs.project)
        if found.missing:
            if self.bucket not in _LOCAL_ONLY_SAID:
                _LOCAL_ONLY_SAID.add(self.bucket)
                dg.get_dagster_logger().warning(
                    f"artefact store local-only: {found.missing}. Reports are not uploaded to "
                    f"gs://{self.bucket}: they stay in the stage folders under {self.root} and the "
                    "UI links no report. Configure credentials to publish them."
                )
            raise ArtefactError(f"local-only, no credentials for gs://{self.bucket}")
        try:
            # Objects need no project; None would make the client look credentials up again.
            client = storage.Client(project=found.project or "<none>", credentials=found.credentials)
            return client.bucket(self.bucket)
        except Exception as exc:  # a bad project or key: say so, never lose the night
            raise ArtefactError(f"cannot open gs://{self.bucket}: {type(exc).__name__}: {exc}") from exc

    def _folder_link(self, folder: Path) -> str:
        return f"{self.browse_url.rstrip('/')}/{self.bucket}/{quote(self._object(folder))}/"

    def _object(self, path: Path) -> str:
        relative = path.resolve().relative_to(Path(self.root).resolve()).as_posix()
        return f"{self.prefix.strip('/')}/{relative}" if self.prefix.strip("/") else relative


_LOCAL_ONLY_SAID: set[str] = set()  # the buckets this process said it does not use


def _subfolders(bucket: Any, prefix: str, calls: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, prefix) of the "folders" right under `prefix` (object name prefixes up to the
    next '/')."""
    listing = bucket.list_blobs(prefix=prefix, delimiter="/", **calls)
    for _ in listing:  # the prefixes fill in as the pages are read
        pass
    return [(folder[len(prefix) :].rstrip("/"), folder) for folder in sorted(listing.prefixes)]


def _content_type(path: Path) -> str:
    # Logs and reports open in the browser instead of downloading.
    return {
        ".xml": "text/xml",
        ".md": "text/markdown; charset=utf-8",
        ".json": "application/json",
        ".html": "text/html; charset=utf-8",
        ".css": "text/css; charset=utf-8",  # the results site's stylesheet
        ".pdf": "application/pdf",
        ".png": "image/png",
        ".csv": "text/csv; charset=utf-8",
    }.get(
        path.suffix,
        "text/plain; charset=utf-8" if path.suffix in (".log", ".txt") else "application/octet-stream",
    )
