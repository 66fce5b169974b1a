"""Bazel bootstrapped from a pinned source tree (seed 004): built once per commit and recipe with the
catalog's command, and kept under the output user root for the next night at the same commit."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
from pathlib import Path

from nightly_assets.catalog.models import BazelBootstrap
from nightly_assets.process import CommandError, run_command
from nightly_assets.rbe.runs import BazelBuildError

BOOTSTRAPS_KEPT = 3  # bootstrapped Bazel binaries kept (one per commit and recipe)


def bootstrap_bazel(
    source: Path, commit: str, spec: BazelBootstrap, *, cache_root: Path, log_path: Path
) -> Path:
    """Bazel built from the pinned source tree `source` (at `commit`) with the catalog's command,
    kept under `cache_root` per commit: the next night at the same commit reuses it."""
    if not re.fullmatch(r"[0-9a-f]{7,64}", commit):
        raise BazelBuildError(f"bootstrap of {spec.repo}: commit {commit!r} is not a git SHA")
    recipe = hashlib.sha256(spec.model_dump_json(exclude={"timeout_minutes"}).encode()).hexdigest()[:12]
    kept = cache_root / "bootstrapped" / f"{commit}-{recipe}" / "bazel"
    if kept.is_file() and os.access(kept, os.X_OK):
        log_path.write_text(f"reused {kept}, bootstrapped earlier from {spec.repo} at {commit}\n")
        os.utime(kept.parent)  # recently used: kept by the pruning below
        return kept
    what = f"bootstrap of Bazel from {spec.repo} ({shlex.join(spec.command)})"
    try:
        result = run_command(
            spec.command,
            cwd=source,
            env=spec.env,
            timeout_s=spec.timeout_minutes * 60,
            log_path=log_path,
            check=False,
        )
    except CommandError as exc:  # not found, or past its timeout
        raise BazelBuildError(f"{what}: {exc}; log {log_path}") from None
    built = source / spec.binary
    if result.returncode != 0 or not built.is_file() or not os.access(built, os.X_OK):
        why = f"exited {result.returncode}" if result.returncode else f"left no executable {spec.binary}"
        raise BazelBuildError(f"{what} {why}; log {log_path}; last output:\n{result.tail()}")
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f".bazel.{os.getpid()}")
    shutil.copy2(built.resolve(), partial)
    partial.replace(kept)  # whole or absent, even if two runs bootstrap the same commit
    _prune(kept.parent.parent, keep=BOOTSTRAPS_KEPT)
    return kept


def _prune(folder: Path, keep: int) -> None:
    """Delete all but the `keep` most recently used entries of `folder`."""
    entries = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[keep:]:
        shutil.rmtree(old, ignore_errors=True)
