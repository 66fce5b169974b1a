"""A night's pin: the commit a branch pointed at when the night ended, or the one a ref names."""

import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest

from nightly_assets.sources.resources import GitSourcesResource, SourceError
from nightly_assets_tests.git_repo import commit_files, git


def _upstream(tmp_path: Path) -> tuple[Path, str, str]:
    """`main` with a commit on 2026-11-02 and another on 2026-11-05; their SHAs."""
    repo = tmp_path / "upstream"
    first = commit_files(repo, {"a.txt": "1"}, "the first: before the night")
    (repo / "a.txt").write_text("2")
    later_date = "2026-11-05T10:00:00Z"
    env = {**os.environ, "GIT_AUTHOR_DATE": later_date, "GIT_COMMITTER_DATE": later_date}
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-a", "-m", "the second"], check=True, env=env)
    return repo, first, git(repo, "rev-parse", "HEAD")


def test_a_branch_pins_its_last_commit_before_the_night_ended(tmp_path: Path) -> None:
    repo, first, later = _upstream(tmp_path)
    sources = GitSourcesResource(cache_dir=str(tmp_path / "cache"))
    pin = sources.pin("up", str(repo), "main", dt.datetime(2026, 11, 3, tzinfo=dt.UTC))
    assert (pin.repo, pin.sha, pin.subject) == ("up", first, "the first: before the night")
    assert pin.committed_at.startswith("2026-11-02T10:00:00")
    assert sources.describe("up", str(repo), pin.sha) == pin
    after = sources.pin("up", str(repo), "main", dt.datetime(2026, 11, 6, tzinfo=dt.UTC))
    assert (after.sha, after.subject) == (later, "the second")
    assert after.committed_at.startswith("2026-11-05T10:00:00")


def test_a_ref_pins_the_commit_it_names_with_its_date_and_subject(tmp_path: Path) -> None:
    repo, first, _ = _upstream(tmp_path)
    sources = GitSourcesResource(cache_dir=str(tmp_path / "cache"))
    pin = sources.pin("up", str(repo), "main", dt.datetime(2026, 11, 3, tzinfo=dt.UTC), ref=first)
    assert (pin.repo, pin.sha, pin.subject) == ("up", first, "the first: before the night")
    assert pin.committed_at.startswith("2026-11-02T10:00:00")


def test_a_branch_with_no_commit_before_the_night_says_so(tmp_path: Path) -> None:
    repo, _, _ = _upstream(tmp_path)
    sources = GitSourcesResource(cache_dir=str(tmp_path / "cache"))
    with pytest.raises(SourceError, match="branch 'main' has no commit before 2026-11-01"):
        sources.pin("up", str(repo), "main", dt.datetime(2026, 11, 1, tzinfo=dt.UTC))
