"""The `nightlysample` demo repository: a real git repo with dated commits.

``sample_project/history.yaml`` lists the commits, oldest first; each one copies an
overlay folder (beside the YAML file) over the tree, optionally deletes paths, and is
committed at its date by a fixed author, so the SHAs are the same on every machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

import yaml

SAMPLE_PROJECT_DIR = Path(__file__).parent / "sample_project"
HISTORY_FILE = SAMPLE_PROJECT_DIR / "history.yaml"
# The demo_gpu pipeline's project (`sample:nightlygpu`): GPU kernels through the host's torch or CuPy.
GPU_HISTORY_FILE = Path(__file__).parent / "gpu_project" / "history.yaml"
# Which history a `sample:<name>` URL builds; any other name is the nightlysample project.
SAMPLE_HISTORIES = {"nightlygpu": GPU_HISTORY_FILE}
# The demo pipeline applies this patch after checkout; it lives with the catalog that names it.
PATCHES_DIR = Path(__file__).parents[1] / "defs" / "patches" / "demo"
BRANCH = "main"
AUTHOR_NAME = "nightly-demo"
AUTHOR_EMAIL = "demo@nightly.invalid"

_SKIPPED_NAMES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
_LOCAL_CONFIG = (
    ("user.name", AUTHOR_NAME),
    ("user.email", AUTHOR_EMAIL),
    ("commit.gpgsign", "false"),
    ("core.autocrlf", "false"),
    ("core.filemode", "true"),
)


class GitError(RuntimeError):
    """A git command failed; the message carries the command and git's stderr."""


@dataclass(frozen=True)
class SampleCommit:
    date: datetime  # tz-aware UTC
    message: str
    version: str
    expect: Mapping[str, int]  # pytest counts per marker and `failed`, as in history.yaml
    sha: str | None = None


@dataclass(frozen=True)
class _Step:
    commit: SampleCommit
    overlay: Path
    delete: tuple[str, ...]


def sample_history(name: str) -> Path:
    """The history file a `sample:<name>` repository is built from."""
    return SAMPLE_HISTORIES.get(name, HISTORY_FILE)


def load_history(history_file: Path = HISTORY_FILE) -> list[SampleCommit]:
    """The commits of ``history.yaml``, oldest first, without SHAs."""
    return [step.commit for step in _load_steps(history_file)]


def ensure_sample_repo(dest: Path, history_file: Path = HISTORY_FILE) -> list[SampleCommit]:
    """Create (or reuse) the demo repository at ``dest``; return its commits with SHAs.

    ``dest`` may be missing or an empty folder (the repo is built), or a repo whose
    ``main`` history matches ``history.yaml`` (it is reused as is). Anything else
    raises ValueError; nothing the caller owns is ever deleted.
    """
    dest = Path(dest)
    steps = _load_steps(history_file)
    if dest.exists() and not (dest.is_dir() and not any(dest.iterdir())):
        return _reuse(dest, steps)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Build beside dest and rename into place: a failed build leaves no half repo.
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".building", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the repo is an ordinary folder
    try:
        commits = _build(tmp, steps)
        try:
            if dest.is_dir():
                dest.rmdir()
            tmp.rename(dest)
        except OSError:  # another process created dest meanwhile: reuse it if it fits
            return _reuse(dest, steps)
        return commits
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _load_steps(history_file: Path) -> list[_Step]:
    data = yaml.safe_load(history_file.read_text(encoding="utf-8"))
    entries = data.get("commits") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{history_file}: expected a non-empty list under 'commits'")
    steps = [_parse_step(history_file, i, entry) for i, entry in enumerate(entries, 1)]
    dates = [step.commit.date for step in steps]
    if dates != sorted(set(dates)):
        raise ValueError(f"{history_file}: commit dates must be strictly increasing")
    return steps


def _parse_step(history_file: Path, index: int, entry: Any) -> _Step:
    where = f"{history_file}: commit {index}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a mapping, got {entry!r}")
    missing = {"date", "message", "version", "overlay", "expect"} - entry.keys()
    if missing:
        raise ValueError(f"{where}: missing {sorted(missing)}")
    raw_date = entry["date"]
    date = raw_date if isinstance(raw_date, datetime) else datetime.fromisoformat(str(raw_date))
    if date.tzinfo is None:
        raise ValueError(f"{where}: date {raw_date!r} has no time zone (use ...Z)")
    expect = entry["expect"]
    if not isinstance(expect, dict) or not all(isinstance(v, int) for v in expect.values()):
        raise ValueError(f"{where}: 'expect' must map names to integers")
    overlay = history_file.parent / str(entry["overlay"])
    if not overlay.is_dir():
        raise ValueError(f"{where}: overlay folder {overlay} does not exist")
    delete = tuple(str(p) for p in entry.get("delete") or ())
    for path in delete:
        if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
            raise ValueError(f"{where}: delete path {path!r} must be relative to the repo")
    commit = SampleCommit(
        date=date.astimezone(UTC),
        message=str(entry["message"]).strip(),
        version=str(entry["version"]),
        expect=MappingProxyType({str(k): int(v) for k, v in expect.items()}),
    )
    return _Step(commit=commit, overlay=overlay, delete=delete)


def _build(repo: Path, steps: Sequence[_Step]) -> list[SampleCommit]:
    _git(repo, "init", "--quiet", f"--initial-branch={BRANCH}")
    for key, value in _LOCAL_CONFIG:
        _git(repo, "config", key, value)
    commits = []
    for step in steps:
        if step.delete:
            _git(repo, "rm", "-r", "--quiet", "--", *step.delete)
        _copy_overlay(step.overlay, repo)
        _git(repo, "add", "--all")
        stamp = f"{int(step.commit.date.timestamp())} +0000"
        dates = {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        _git(repo, "commit", "--quiet", "--no-verify", "-m", step.commit.message, extra_env=dates)
        sha = _git(repo, "rev-parse", "HEAD").strip()
        commits.append(_with_sha(step.commit, sha))
    return commits


def _copy_overlay(overlay: Path, repo: Path) -> None:
    for root, dirs, files in os.walk(overlay):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_NAMES)
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            source = Path(root) / name
            if source.is_symlink():
                raise ValueError(f"{source}: symlinks are not supported in overlays")
            target = repo / source.relative_to(overlay)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            target.chmod(0o644)  # the same mode (and git file mode) on every machine


def _reuse(dest: Path, steps: Sequence[_Step]) -> list[SampleCommit]:
    first, last = steps[0].commit, steps[-1].commit
    expected = (
        f"expected a missing or empty folder, or a git repository whose {BRANCH!r} history "
        f"is the {len(steps)} demo commits ({first.message!r} .. {last.message!r})"
    )
    if not (dest / ".git").exists():
        kind = "a non-empty folder" if dest.is_dir() else "a file"
        raise ValueError(f"{dest} is {kind} that is not a git repository; {expected}")
    fmt = "--format=%H%x1f%aI%x1f%cI%x1f%B%x1e"
    try:
        log = _git(dest, "log", "--reverse", fmt, f"refs/heads/{BRANCH}", "--")
    except GitError as exc:
        raise ValueError(f"{dest}: cannot read the {BRANCH!r} history ({exc}); {expected}") from exc
    found = [record.strip("\n").split("\x1f") for record in log.split("\x1e") if record.strip()]
    if len(found) != len(steps):
        raise ValueError(f"{dest} holds a repository with {len(found)} commits; {expected}")
    commits = []
    for index, (step, (sha, author_date, commit_date, message)) in enumerate(
        zip(steps, found, strict=True), 1
    ):
        want = step.commit
        dates = {datetime.fromisoformat(author_date), datetime.fromisoformat(commit_date)}
        if message.strip() != want.message or dates != {want.date}:
            raise ValueError(
                f"{dest}: commit {index} is {message.strip()!r} at {commit_date}, not "
                f"{want.message!r} at {want.date.isoformat()}; {expected}"
            )
        commits.append(_with_sha(want, sha))
    return commits


def _with_sha(commit: SampleCommit, sha: str) -> SampleCommit:
    return SampleCommit(commit.date, commit.message, commit.version, commit.expect, sha)


def _git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without GIT_* variables or user/system git config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=AUTHOR_NAME,
        GIT_AUTHOR_EMAIL=AUTHOR_EMAIL,
        GIT_COMMITTER_NAME=AUTHOR_NAME,
        GIT_COMMITTER_EMAIL=AUTHOR_EMAIL,
    )
    env.update(extra or {})
    return env


def _git(repo: Path, *args: str, extra_env: Mapping[str, str] | None = None) -> str:
    cmd = ["git", "-C", str(repo), *args]
    env = _git_env(extra_env)
    # never fall back to a repository above `repo` (e.g. when repo/.git is broken)
    env["GIT_CEILING_DIRECTORIES"] = str(Path(repo).absolute().parent)
    try:
        proc = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    except FileNotFoundError as exc:
        raise GitError("git is not installed or not on PATH") from exc
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or exc.stdout or "").strip()
        raise GitError(f"{' '.join(cmd)} failed with exit code {exc.returncode}: {detail}") from exc
    return proc.stdout
