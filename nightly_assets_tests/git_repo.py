"""Upstream repositories made in a test: a folder committed on `main` before the nights under test."""

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

COMMIT_DATE = "2026-11-02T10:00:00Z"  # before every night the tests run (from 2026-11-03)


def git(repo: Path, *argv: str) -> str:
    """`git -C repo ...` with a fixed author, committer and date; its stdout."""
    env = {**os.environ, "GIT_AUTHOR_DATE": COMMIT_DATE, "GIT_COMMITTER_DATE": COMMIT_DATE}
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    done = subprocess.run(
        ["git", "-C", str(repo), *argv], check=True, env=env, capture_output=True, text=True
    )
    return done.stdout.strip()


def commit_files(repo: Path, files: Mapping[str, str], message: str = "tree") -> str:
    """Write `files` (relative path: text) into `repo` and commit them as a new repository on
    `main`; the commit's SHA."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    return commit_folder(repo, message)


def commit_folder(repo: Path, message: str = "tree") -> str:
    """Make `repo` a git repository on `main` holding everything in it; the commit's SHA."""
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")
