"""A folder that exposes pytest (and what it needs) to a fresh environment without a network."""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import sys
from collections.abc import Collection, Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

TEST_TOOLS = ("pytest",)


def test_toolchain(dest: Path, roots: tuple[str, ...] = TEST_TOOLS) -> Path:
    """Link the installed distributions `roots` and their dependencies into `dest` (idempotent).

    A fresh virtual environment gets `dest` through a .pth file, after its own site-packages,
    so the wheels under test always win over the orchestrator's copies.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for dist in installed_closure(roots)[0]:
        for top in _top_level_entries(dist):
            link = dest / top
            if not link.exists() and not link.is_symlink():
                # another stage of the night may have linked it a moment before: the same link
                with contextlib.suppress(FileExistsError):
                    link.symlink_to(Path(str(dist.locate_file(top))))
    return dest


class MissingToolError(RuntimeError):
    """A distribution the toolchain or the wheelhouse needs is not installed here, or too old; names it."""


def installed_closure(
    roots: Iterable[str], optional: Collection[str] = ()
) -> tuple[list[md.Distribution], list[str]]:
    """The installed distributions of `roots` and of everything they require on this Python (markers
    evaluated, no extras), by name; and the `optional` roots that are not installed."""
    found: dict[str, md.Distribution] = {}
    missing: list[str] = []
    pending: list[tuple[str, Requirement | None, str | None]] = [(name, None, None) for name in roots]
    while pending:
        name, requirement, needed_by = pending.pop()
        key = canonicalize_name(name)
        if key in found:
            dist = found[key]
        else:
            try:
                dist = md.distribution(name)
            except md.PackageNotFoundError:
                if needed_by is None and key in {canonicalize_name(o) for o in optional}:
                    missing.append(name)
                    continue
                why = f"required by {needed_by} ({requirement})" if needed_by else "a build or test tool"
                raise MissingToolError(
                    f"{name} ({why}) is not installed in this environment ({sys.prefix}): expected it "
                    "installed beside nightly_assets"
                ) from None
            found[key] = dist
            pending.extend(_requirements(dist))
        if requirement is not None and not requirement.specifier.contains(dist.version, prereleases=True):
            raise MissingToolError(
                f"{needed_by} requires {requirement}, but this environment has {dist.metadata['Name']} "
                f"{dist.version}: expected an installed version that satisfies it"
            )
    return sorted(found.values(), key=lambda d: canonicalize_name(d.metadata["Name"])), missing


def _requirements(dist: md.Distribution) -> list[tuple[str, Requirement, str]]:
    owner = f"{dist.metadata['Name']} {dist.version}"
    wanted = []
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            wanted.append((requirement.name, requirement, owner))
    return wanted


def _top_level_entries(dist: md.Distribution) -> set[str]:
    entries = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first != ".." and first != "__pycache__":
            entries.add(first)
    return entries
