"""PEP 735 dependency groups: a checkout's `[dependency-groups]` table (pyproject.toml) resolved to
the requirements a suite installs, `{include-group = "..."}` entries followed."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.dependency_groups import DependencyGroupResolver
from packaging.utils import canonicalize_name


class DependencyGroupError(ValueError):
    """A group the pyproject.toml lacks, a cycle of includes, or a malformed table."""


def resolve_groups(table: dict[str, object], groups: list[str], where: str) -> dict[str, list[str]]:
    """Each of `groups` (names compared as PEP 503 normalises them) with its requirements, the
    included groups' spliced in where they are included. `where` names the table in errors."""
    known = {canonicalize_name(name) for name in table}
    missing = [group for group in groups if canonicalize_name(group) not in known]
    if missing:
        have = ", ".join(sorted(table)) or "none"
        raise DependencyGroupError(
            f"dependency group(s) {', '.join(map(repr, missing))} not in {where} (its groups: {have})"
        )
    try:
        resolver = DependencyGroupResolver(table)  # type: ignore[arg-type]  # validated by it
        return {group: [str(r) for r in resolver.resolve(group)] for group in groups}
    except (ValueError, TypeError, LookupError, ExceptionGroup) as exc:
        raise DependencyGroupError(f"{where}: {_reasons(exc)}") from None


def pyproject_groups(checkout: Path, groups: list[str], commit: str | None = None) -> dict[str, list[str]]:
    """`groups` resolved from the checkout's pyproject.toml (`commit`: the pinned sha, for errors)."""
    pyproject = checkout / "pyproject.toml"
    where = f"{pyproject}" + (f" at commit {commit[:12]}" if commit else "")
    if not pyproject.is_file():
        raise DependencyGroupError(
            f"dependency group(s) {', '.join(map(repr, groups))} asked for, but {where} does not exist"
        )
    try:
        document = tomllib.loads(pyproject.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise DependencyGroupError(f"{where}: not valid TOML ({exc})") from None
    table = document.get("dependency-groups", {})
    if not isinstance(table, dict):
        raise DependencyGroupError(
            f"{where}: [dependency-groups] is a {type(table).__name__}, expected a table"
        )
    return resolve_groups(table, groups, f"[dependency-groups] of {where}")


def _reasons(exc: BaseException) -> str:
    """packaging collects every problem into an ExceptionGroup: its leaves, one after another."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reasons(inner) for inner in exc.exceptions)
    return str(exc)
