"""Artefact store: one folder per pipeline/night/target/stage, with a manifest the next stage reads,
and links to the stage's reports (JUnit, logs, the summary) that open from the Dagster UI.

Stages always work in a local folder. The local store serves that folder over HTTP (`nightly
serve`, started by `make ui`); the GCS store (production, gcs.py) also uploads each stage's
reports to a bucket through dagster-gcp and links there.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import dagster as dg
from pydantic import Field, ValidationError

from nightly_assets.manifests import Manifest
from nightly_assets.results import NightKey

MANIFEST = "manifest.json"
# Under a night x target's folder: each stage's earlier attempts, `.runs/<run id>/<stage>/`.
RUNS_FOLDER = ".runs"
DEFAULT_BASE_URL = "http://127.0.0.1:3001"
# What a stage's folder holds that a person opens: reports and logs, not checkouts or venvs.
REPORT_SUFFIXES = (".xml", ".log", ".md", ".json", ".txt", ".csv", ".pdf", ".png", ".html", ".whl", ".gz")
MAX_REPORT_BYTES = 200 * 1024 * 1024
M = TypeVar("M", bound=Manifest)


class MissingArtefactError(RuntimeError):
    """A stage asked for an upstream stage's output that this night does not have."""


class ManifestError(MissingArtefactError):
    """An upstream stage's manifest lacks a field this stage reads (or holds a wrong value)."""


class ArtefactError(RuntimeError):
    """An artefact could not be published; names the file and the store."""


class ArtefactStoreResource(dg.ConfigurableResource):
    """Local artefact folders (the embedded default), served at `base_url` by `nightly serve`."""

    root: str = Field(description="Folder of every stage's work and reports.")
    base_url: str = Field(
        default=DEFAULT_BASE_URL, description="Where `root` is served over HTTP (`nightly serve`)."
    )
    results_site: bool = Field(
        default=True,
        description="Rebuild the pipeline's results site (`<pipeline>/site/`) after each night's summary.",
    )

    def stage_dir(self, key: NightKey, stage: str, *, fresh: bool = False) -> Path:
        path = self._path(key, stage)
        if fresh and path.exists():
            shutil.rmtree(path)  # callers that keep an earlier attempt move it aside first (set_aside)
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- earlier attempts ---------------------------------------------------------------------

    def set_aside(self, key: NightKey, stage: str, run_id: str) -> Path | None:
        """Move the stage's folder, an earlier run's attempt, to `.runs/<run_id>/<stage>/` (a
        rename: nothing is copied), so a new attempt starts in an empty folder at the same path
        while the earlier evidence stays. Its new path; None when the stage has no folder."""
        path = self._path(key, stage)
        if not path.exists():
            return None
        runs = path.parent / RUNS_FOLDER
        label, n = run_id or "earlier", 1
        while (runs / label / stage).exists():  # the same run's second attempt (a step retry)
            n += 1
            label = f"{run_id or 'earlier'}-{n}"
        aside = runs / label / stage
        aside.parent.mkdir(parents=True, exist_ok=True)
        path.rename(aside)
        return aside

    def put_back(self, key: NightKey, stage: str, aside: Path, run_id: str) -> Path:
        """An attempt that ended without results of its own: its folder goes to `.runs/<run_id>/`
        and the earlier attempt's (`aside`) is back where the night's other stages point to it.
        The failed attempt's new path."""
        failed = self.set_aside(key, stage, run_id)
        aside.rename(self._path(key, stage))
        if aside.parent.is_dir() and not any(aside.parent.iterdir()):
            aside.parent.rmdir()
        assert failed is not None  # the attempt made its folder before it started
        return failed

    def keep_evidence_only(self, aside: Path) -> None:
        """A set-aside attempt that a later one replaced keeps its reports and logs; what the later
        one made again from the same pins (virtualenvs, git checkouts) goes."""
        for root, folders, _ in os.walk(aside):  # top down, never into what it removes
            for name in list(folders):
                path = Path(root) / name
                if (path / "pyvenv.cfg").exists() or (path / ".git").exists():
                    shutil.rmtree(path, ignore_errors=True)
                    folders.remove(name)

    def publish_aside(self, aside: Path) -> str:
        """The link to a set-aside attempt's folder, its reports published where the store keeps
        them (a bucket uploads them under `.runs/`, since the next attempt's replace the stage's)."""
        self._publish_in(aside, self._report_files(aside))
        return self._folder_link(aside)

    def publish_files(self, folder: Path, files: Iterable[Path]) -> dict[str, str]:
        """Links to `files` inside `folder` (anywhere under the root), published where the store
        keeps them: a bucket uploads them (the results site's pages)."""
        return self._publish_in(folder, files)

    def write_manifest(self, key: NightKey, stage: str, manifest: dict[str, Any]) -> Path:
        path = self.stage_dir(key, stage) / MANIFEST
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        tmp.replace(path)  # atomic: a reader sees the old or the new manifest, never half of one
        return path

    def read_manifest(self, key: NightKey, stage: str) -> dict[str, Any]:
        path = self._path(key, stage) / MANIFEST
        if not path.is_file():
            raise MissingArtefactError(
                f"{key}: stage '{stage}' has no artefacts ({path} is missing); "
                f"materialize {key.pipeline}/{stage} for this partition first"
            )
        result: dict[str, Any] = json.loads(path.read_text())
        return result

    def manifest(self, key: NightKey, stage: str, model: type[M]) -> M:
        """What this stage reads of `stage`'s manifest, checked against `model`."""
        document = self.read_manifest(key, stage)
        try:
            return model.model_validate(document)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '(manifest)'}: {e['msg']}" for e in exc.errors()
            )
            raise ManifestError(
                f"{key}: stage '{stage}' left a manifest without what this stage reads ({problems}); "
                f"materialize {key.pipeline}/{stage} for this partition again"
            ) from None

    def folder_run_id(self, key: NightKey, stage: str) -> str | None:
        """The run whose attempt the stage's folder holds, as its manifest says; None when it has
        no manifest or one from before the run was recorded."""
        try:
            run_id = self.read_manifest(key, stage).get("run_id")
        except (MissingArtefactError, ValueError, OSError):
            return None
        return run_id if isinstance(run_id, str) and run_id else None

    def has_manifest(self, key: NightKey, stage: str) -> bool:
        return (self._path(key, stage) / MANIFEST).is_file()

    # -- retention ----------------------------------------------------------------------------

    def prune(
        self, pipeline: str, written_before: dt.datetime, *, keep: Collection[tuple[dt.date, str]] = ()
    ) -> list[Path]:
        """Delete the artefacts (every stage's folder: logs, JUnit, build metrics, work files) of
        the pipeline's night x target folders last written before `written_before` (aware UTC),
        except the (night, target) pairs in `keep`. Counting from the write, not from the night,
        keeps a backfilled old night's fresh artefacts as long as a new night's. Returns the
        removed night x target folders, oldest night first. The warehouse rows of those nights
        stay: this touches files only."""
        removed = []
        for night_dir, night, target_dir in self._night_folders(pipeline):
            if (night, target_dir.name) in keep or last_written(target_dir) >= written_before:
                continue
            shutil.rmtree(target_dir, ignore_errors=True)
            removed.append(target_dir)
            if not any(night_dir.iterdir()):
                night_dir.rmdir()
        return removed

    def _night_folders(self, pipeline: str) -> Iterable[tuple[Path, dt.date, Path]]:
        folder = Path(self.root) / pipeline
        for night_dir in sorted(folder.iterdir()) if folder.is_dir() else []:
            try:
                night = dt.date.fromisoformat(night_dir.name)
            except ValueError:  # not a night's folder: never ours to delete
                continue
            if night_dir.is_dir() and not night_dir.is_symlink():
                yield from ((night_dir, night, t) for t in sorted(night_dir.iterdir()) if t.is_dir())

    # -- links ------------------------------------------------------------------------------

    def reports(self, key: NightKey, stage: str, extra: Iterable[Path] = ()) -> list[Path]:
        """The stage folder's report files (top level, by suffix) and `extra` files under it."""
        return self._report_files(self._path(key, stage), extra)

    def _report_files(self, folder: Path, extra: Iterable[Path] = ()) -> list[Path]:
        found = [
            p
            for p in (sorted(folder.iterdir()) if folder.is_dir() else [])
            if p.is_file() and p.name.endswith(REPORT_SUFFIXES) and p.stat().st_size <= MAX_REPORT_BYTES
        ]
        for path in extra:
            if path.is_file() and path.resolve().is_relative_to(folder.resolve()) and path not in found:
                found.append(path)
        return found

    def publish(self, key: NightKey, stage: str, files: Iterable[Path]) -> dict[str, str]:
        """Links to `files` (inside the stage's folder) where a browser opens them, by their path
        in the folder."""
        return self._publish_in(self._path(key, stage), files)

    def _publish_in(self, folder: Path, files: Iterable[Path]) -> dict[str, str]:
        resolved = folder.resolve()
        return {f.resolve().relative_to(resolved).as_posix(): self.file_url(f) for f in files}

    def file_url(self, path: Path) -> str:
        return f"{self.base_url.rstrip('/')}/{self._relative(path)}"

    def folder_url(self, key: NightKey, stage: str) -> str:
        return self._folder_link(self._path(key, stage))

    def _folder_link(self, folder: Path) -> str:
        return f"{self.file_url(folder)}/"

    def _relative(self, path: Path) -> str:
        relative = path.resolve().relative_to(Path(self.root).resolve())
        return "/".join(quote(part) for part in relative.parts)

    def _path(self, key: NightKey, stage: str) -> Path:
        return Path(self.root) / key.pipeline / key.night.isoformat() / key.target / stage


def last_written(target_dir: Path) -> dt.datetime:
    """When a night x target folder was last written (aware UTC): the newest modification time of
    the folder, its stage folders and their manifests. Each stage recreates its folder and ends
    by writing its manifest, so this moves with every stage that ran, without walking the
    checkouts and virtual environments under the stage folders."""
    paths = [target_dir, *(p for p in target_dir.iterdir() if p.is_dir())]
    paths += [p / MANIFEST for p in paths[1:]]
    times = [p.stat().st_mtime for p in paths if p.exists()]
    return dt.datetime.fromtimestamp(max(times), dt.UTC)
