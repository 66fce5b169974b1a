"""A folder that exposes pytest (and what it needs) to a fresh environment without a network."""

from __future__ import annotations

import importlib.metadata as md
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
    for dist in _closure(roots):
        for top in _top_level_entries(dist):
            link = dest / top
            if not link.exists() and not link.is_symlink():
                link.symlink_to(Path(str(dist.locate_file(top))))
    return dest


def _closure(roots: tuple[str, ...]) -> list[md.Distribution]:
    seen: dict[str, md.Distribution] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        dist = md.distribution(name)
        seen[name] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _top_level_entries(dist: md.Distribution) -> set[str]:
    entries = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first != ".." and first != "__pycache__":
            entries.add(first)
    return entries
