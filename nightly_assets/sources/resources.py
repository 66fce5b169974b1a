"""Git sources: mirror a repository, pin a night to its commit, check it out, apply patches."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from nightly_assets.catalog.models import SAMPLE_URL
from nightly_assets.demo.sample_repo import ensure_sample_repo, sample_history
from nightly_assets.process import CommandError, CommandResult, run_command

SAMPLE_SCHEME = "sample:"
_SAFE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
SHA = re.compile(r"^[0-9a-f]{7,64}$")
_PIN_FORMAT = "%H%x00%cI%x00%s"  # a Pin's commit, committed-at and subject


class SourceError(RuntimeError):
    """A repository that cannot be fetched, pinned, checked out or patched; names which and why."""


@dataclass(frozen=True)
class Pin:
    repo: str
    sha: str
    committed_at: str
    subject: str


@dataclass(frozen=True)
class Commit:
    sha: str
    author: str
    subject: str


class GitSourcesResource(dg.ConfigurableResource):
    """Local git mirrors under `cache_dir`; `sample:` URLs are the demo project shipped in the repo."""

    cache_dir: str
    fetch_timeout_s: int = 900

    def resolve_url(self, url: str) -> str:
        if url.startswith(SAMPLE_SCHEME):
            if not SAMPLE_URL.fullmatch(url):  # the catalog refuses these too: never write elsewhere
                raise SourceError(f"repository URL {url!r}: expected sample:<name>, a plain name")
            name = url.removeprefix(SAMPLE_SCHEME)
            repo = Path(self.cache_dir) / "sample" / name
            if not (repo / ".git").exists():
                ensure_sample_repo(
                    repo, sample_history(name)
                )  # built once; afterwards it is an upstream like any other
            return str(repo)
        return url

    def mirror(self, name: str, url: str) -> Path:
        """A bare mirror of `url`, fetched now (so the pin sees the remote's current history)."""
        mirror = Path(self.cache_dir) / "mirrors" / f"{name}.git"
        remote = self.resolve_url(url)
        try:
            if not (mirror / "HEAD").exists():
                mirror.parent.mkdir(parents=True, exist_ok=True)
                _git(["clone", "--mirror", "--quiet", "--", remote, str(mirror)], self.fetch_timeout_s)
            else:
                _git(["-C", str(mirror), "remote", "set-url", "origin", "--", remote], 60)
                _git(["-C", str(mirror), "fetch", "--prune", "--quiet", "origin"], self.fetch_timeout_s)
        except CommandError as exc:
            raise SourceError(f"repository '{name}' ({url}): fetch failed: {exc}") from None
        return mirror

    def pin(self, name: str, url: str, branch: str, before: dt.datetime, ref: str | None = None) -> Pin:
        """The commit `branch` pointed at when `before` came (first parent: merges count when merged)."""
        mirror = self.mirror(name, url)
        if ref is not None:
            args = [f"{_checked_ref(name, ref)}^{{commit}}"]
        else:
            head = f"refs/heads/{_checked_ref(name, branch)}"
            args = ["--first-parent", f"--before={before.isoformat()}", head]
        try:  # the commit and what `describe` says of it, in one git command
            line = _git(["-C", str(mirror), "log", "-1", f"--format={_PIN_FORMAT}", *args, "--"], 60).output
        except CommandError as exc:
            raise SourceError(f"repository '{name}': cannot resolve {ref or branch}: {exc}") from None
        if not line.strip():
            raise SourceError(
                f"repository '{name}': branch '{branch}' has no commit before {before.isoformat()}"
            )
        sha, committed_at, subject = line.strip().split("\x00", 2)
        return Pin(repo=name, sha=sha, committed_at=committed_at, subject=subject)

    def ensure_mirror(self, name: str, url: str, *shas: str | None) -> Path:
        """The repository's mirror, fetched when this machine has none yet or lacks one of `shas`
        (a mirror last fetched before those nights, on another worker)."""
        if not self._has_mirror(name):
            return self.mirror(name, url)
        mirror = self._mirror_path(name)
        for sha in filter(None, shas):
            try:
                _git(["-C", str(mirror), "cat-file", "-e", f"{sha}^{{commit}}"], 60)
            except CommandError:
                return self.mirror(name, url)
        return mirror

    def rev_list(self, name: str, url: str, good: str | None, bad: str, limit: int = 1000) -> list[str]:
        """The first-parent commits after `good` up to `bad`, oldest first (`bad` alone without
        `good`): the range a culprit search bisects. At most `limit`, the newest ones."""
        out = self._between(name, url, good, bad, ["rev-list", "--first-parent", f"--max-count={limit}"])
        return list(reversed(out.split()))

    def describe(self, name: str, url: str, sha: str) -> Pin:
        mirror = self.mirror(name, url) if not self._has_mirror(name) else self._mirror_path(name)
        line = _git(["-C", str(mirror), "show", "-s", f"--format={_PIN_FORMAT}", sha, "--"], 60).output
        _, committed_at, subject = line.strip().split("\x00", 2)
        return Pin(repo=name, sha=sha, committed_at=committed_at, subject=subject)

    def commits_between(
        self, name: str, url: str, good: str | None, bad: str, limit: int = 20
    ) -> list[Commit]:
        """The commits after `good` up to `bad`, newest first (at most `limit`): the suspects of a
        change between two nights. `good` None: `bad` alone. Both are SHAs the warehouse recorded."""
        out = self._between(name, url, good, bad, ["log", f"--max-count={limit}", "--format=%H%x00%an%x00%s"])
        return [Commit(*line.split("\x00", 2)) for line in out.splitlines() if line.count("\x00") == 2]

    def _between(self, name: str, url: str, good: str | None, bad: str, command: list[str]) -> str:
        """The output of git `command` over the commits after `good` up to `bad` (`bad` alone
        without `good`), on a mirror that holds both; the SHAs are checked first."""
        for sha in (good, bad):
            if sha is not None and not SHA.match(sha):
                raise SourceError(f"repository '{name}': {sha!r} is not a commit SHA")
        mirror = self.ensure_mirror(name, url, good, bad)
        span = [f"{good}..{bad}"] if good else ["-1", bad]
        try:
            return _git(["-C", str(mirror), *command, *span, "--"], 60).output
        except CommandError as exc:
            raise SourceError(f"repository '{name}': cannot list commits {good}..{bad}: {exc}") from None

    def suspects(
        self, name: str, url: str | None, good: str | None, bad: str | None, limit: int = 10
    ) -> dict[str, Any]:
        """A repository's suspect range between a good and a bad night, as warehouse rows and alerts
        keep it: {"good", "bad", "commits": [{"sha", "author", "subject"}, ...]}, plus "error" when
        the mirror could not list them (the range still names the two commits)."""
        span: dict[str, Any] = {"good": good, "bad": bad, "commits": []}
        if url is None or bad is None:
            return span  # a repository the catalog no longer has, or one the bad night dropped
        try:
            span["commits"] = [vars(c) for c in self.commits_between(name, url, good, bad, limit)]
        except SourceError as exc:
            span["error"] = str(exc)
        return span

    def checkout(self, name: str, sha: str, dest: Path) -> Path:
        mirror = self._mirror_path(name)
        _git(["clone", "--quiet", "--shared", "--no-checkout", "--", str(mirror), str(dest)], 300)
        _git(["-C", str(dest), "checkout", "--quiet", "--detach", sha], 300)
        return dest

    def apply_patch(self, checkout: Path, patch: Path) -> None:
        try:
            _git(["-C", str(checkout), "apply", "--index", "--whitespace=nowarn", str(patch)], 120)
        except CommandError as exc:
            raise SourceError(f"patch {patch.name} does not apply to {checkout.name}: {exc}") from None

    def _mirror_path(self, name: str) -> Path:
        return Path(self.cache_dir) / "mirrors" / f"{name}.git"

    def _has_mirror(self, name: str) -> bool:
        return (self._mirror_path(name) / "HEAD").exists()


def _checked_ref(repo: str, ref: str) -> str:
    # Refs come from the catalog or from a PR; refuse anything git could read as an option.
    if not _SAFE_REF.match(ref) or ".." in ref:
        raise SourceError(f"repository '{repo}': ref {ref!r} is not a plain branch, tag or commit name")
    return ref


def _git(args: list[str], timeout_s: float) -> CommandResult:
    return run_command(["git", *args], timeout_s=timeout_s, env={"GIT_TERMINAL_PROMPT": "0"})
