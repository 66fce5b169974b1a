"""Deploy a build from the ephemeral build root to the release root: one folder per night, a `current` link.

Readers never see half a release: the build is copied into a hidden sibling and renamed into place,
and `current` is replaced by renaming a new link over it. `current` follows the newest night, so a
backfill of an older night deploys that night without moving it. Retention keeps the newest `keep`
releases, and never removes the one `current` points to nor the one just deployed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CURRENT = "current"
_RELEASE_NAME = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,63}$")


class DeployError(RuntimeError):
    """The build or the release root is not usable; names the path and what was expected."""


@dataclass(frozen=True)
class Release:
    path: Path  # release_root/<night>
    current: Path  # release_root/current
    current_target: str  # the release `current` points to after this deploy
    removed: tuple[Path, ...]  # releases deleted by retention

    @property
    def is_current(self) -> bool:
        return self.current_target == self.path.name


def deploy(
    build_dir: Path,
    release_root: Path,
    night: dt.date | str,
    *,
    keep: int = 7,
    copy_function: Callable[[str, str], object] = shutil.copy2,
) -> Release:
    """Copy `build_dir` to `release_root/<night>` (replacing an earlier deploy of that night)."""
    name = night.isoformat() if isinstance(night, dt.date) else night
    if not _RELEASE_NAME.match(name) or name == CURRENT:
        raise DeployError(f"release name {name!r}: expected a night (YYYY-MM-DD) or [0-9A-Za-z._-]+")
    if keep < 1:
        raise DeployError(f"keep must be at least 1 release, got {keep}")
    if not build_dir.is_dir():
        raise DeployError(f"build dir {build_dir} does not exist or is not a folder")
    release_root.mkdir(parents=True, exist_ok=True)
    if release_root.resolve().is_relative_to(build_dir.resolve()):
        raise DeployError(f"release root {release_root} is inside the build dir {build_dir}")
    _remove_leftovers(release_root, name)

    staging = release_root / f".{name}.tmp-{secrets.token_hex(4)}"
    try:
        shutil.copytree(build_dir, staging, symlinks=True, copy_function=copy_function)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    target = release_root / name
    if target.exists() or target.is_symlink():
        # A re-run of the night: move the old one aside, the new one in, then drop the old one.
        old = release_root / f".{name}.old-{secrets.token_hex(4)}"
        os.rename(target, old)
        os.rename(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(staging, target)

    current_target = max(releases(release_root))
    _point_current(release_root, current_target)
    removed = _retain(release_root, keep, protect={current_target, name})
    return Release(target, release_root / CURRENT, current_target, tuple(removed))


def releases(release_root: Path) -> list[str]:
    """The names of the deployed releases, oldest first."""
    if not release_root.is_dir():
        return []
    return sorted(
        p.name
        for p in release_root.iterdir()
        if _RELEASE_NAME.match(p.name) and p.name != CURRENT and p.is_dir()
    )


def current_release(release_root: Path) -> str | None:
    link = release_root / CURRENT
    return os.readlink(link) if link.is_symlink() else None


def _point_current(release_root: Path, name: str) -> None:
    # Relative target: the release root can be moved or mounted elsewhere and stay valid.
    tmp = release_root / f".{CURRENT}.tmp-{secrets.token_hex(4)}"
    os.symlink(name, tmp)
    os.replace(tmp, release_root / CURRENT)


def _retain(release_root: Path, keep: int, protect: set[str]) -> list[Path]:
    names = releases(release_root)
    doomed = [n for n in names[: max(0, len(names) - keep)] if n not in protect]
    removed = []
    for name in doomed:
        path = release_root / name
        # Out of sight first (one rename), so no reader finds a half-deleted release.
        hidden = release_root / f".{name}.old-{secrets.token_hex(4)}"
        os.rename(path, hidden)
        shutil.rmtree(hidden, ignore_errors=True)
        removed.append(path)
    return removed


def _remove_leftovers(release_root: Path, name: str) -> None:
    """Staging/old copies of this night a crashed deploy left behind."""
    for path in release_root.glob(f".{name}.*-*"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
