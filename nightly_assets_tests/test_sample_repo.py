"""Tests for nightly_assets.demo.sample_repo: the dated `nightlysample` git repository."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from defusedxml import ElementTree

from nightly_assets.demo.sample_repo import (
    HISTORY_FILE,
    PATCHES_DIR,
    SampleCommit,
    ensure_sample_repo,
    load_history,
)

PATCH = PATCHES_DIR / "0001-nightly-marker-test.patch"
MARKERS = {
    "unit": "unit",
    "integration": "integration",
    "e2e_gpu_1": "e2e and gpu_1",
    "e2e_gpu_2": "e2e and gpu_2",
}


def _run(*cmd: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _git(repo: Path, *args: str) -> str:
    return _run("git", "-C", repo, *args).strip()


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[SampleCommit]]:
    dest = tmp_path_factory.mktemp("sample") / "nightlysample"
    return dest, ensure_sample_repo(dest)


def test_history_file_describes_four_nights() -> None:
    commits = load_history()
    assert HISTORY_FILE.name == "history.yaml"
    assert [c.version for c in commits] == ["0.1.0", "0.2.0", "0.2.1", "0.3.0"]
    assert [c.date.date().isoformat() for c in commits] == [
        "2026-11-01",
        "2026-11-06",
        "2026-11-12",
        "2026-11-18",
    ]
    assert all(c.date.utcoffset() == timedelta(0) for c in commits)
    assert [c.expect["failed"] for c in commits] == [0, 1, 0, 0]
    for c in commits:
        assert c.sha is None
        assert sum(c.expect[key] for key in MARKERS) == c.expect["total"]


def test_builds_dated_commits_idempotently(sample: tuple[Path, list[SampleCommit]]) -> None:
    dest, commits = sample
    assert [c.message for c in commits] == [c.message for c in load_history()]
    log = _git(dest, "log", "--reverse", "--format=%cI|%aI|%an <%ae>", "main").splitlines()
    assert log == [
        f"{c.date.isoformat()}|{c.date.isoformat()}|nightly-demo <demo@nightly.invalid>" for c in commits
    ]
    assert _git(dest, "rev-list", "--reverse", "main").splitlines() == [c.sha for c in commits]
    assert all(c.sha and len(c.sha) == 40 for c in commits)
    assert _git(dest, "branch", "--show-current") == "main"
    assert _git(dest, "status", "--porcelain") == ""
    assert ensure_sample_repo(dest) == commits
    assert _git(dest, "rev-list", "--count", "main") == "4"
    # the overlay of commit 2 deletes TODO.md
    first, second = (_git(dest, "ls-tree", "-r", "--name-only", c.sha) for c in commits[:2] if c.sha)
    assert "TODO.md" in first.splitlines() and "TODO.md" not in second.splitlines()


def test_shas_do_not_depend_on_machine_or_env(
    sample: tuple[Path, list[SampleCommit]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_AUTHOR_NAME", "someone else")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2001-01-01T00:00:00Z")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    other = tmp_path / "other"
    other.mkdir()  # an empty folder is fine
    assert [c.sha for c in ensure_sample_repo(other)] == [c.sha for c in sample[1]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]  # no build leftovers


def test_rev_list_before_pins_a_night(sample: tuple[Path, list[SampleCommit]]) -> None:
    dest, commits = sample
    pinned = _git(dest, "rev-list", "-1", "--before=2026-11-07T00:00:00Z", "main")
    assert pinned == commits[1].sha
    assert _git(dest, "rev-list", "-1", "--before=2026-11-01T00:00:00Z", "main") == ""


def test_refuses_foreign_folders(tmp_path: Path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me\n")
    with pytest.raises(ValueError, match=r"mine.*not a git repository"):
        ensure_sample_repo(foreign)
    assert (foreign / "notes.txt").read_text() == "keep me\n"

    other_repo = tmp_path / "other_repo"
    _run("git", "init", "-q", "-b", "main", other_repo)
    identity = ["-c", "user.name=x", "-c", "user.email=x@y"]
    _run("git", "-C", other_repo, *identity, "commit", "-q", "--allow-empty", "-m", "x")
    with pytest.raises(ValueError, match=r"other_repo.*1 commits.*expected"):
        ensure_sample_repo(other_repo)

    broken = tmp_path / "broken"
    (broken / ".git").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"broken: cannot read.*not a git repository"):
        ensure_sample_repo(broken)  # git's own stderr is in the message


def _venv_with_wheel(worktree: Path, work: Path, env: dict[str, str]) -> Path:
    wheels = work / "wheels"
    pip_wheel = ["-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    _run(sys.executable, *pip_wheel, "-w", wheels, worktree, env=env)
    (wheel,) = wheels.glob("nightlysample-*.whl")
    venv = work / "venv"
    _run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv)
    # --system-site-packages reaches the base interpreter, not this venv: make pytest
    # (and pip) importable by pointing the new venv at our own site-packages too.
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (venv / "lib" / py / "site-packages" / "_outer.pth").write_text(
        "".join(f"{p}\n" for p in site.getsitepackages())
    )
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--no-index", "--no-deps", "-q", wheel, env=env)
    return python


def _pytest_counts(python: Path, worktree: Path, marker: str, env: dict[str, str]) -> tuple[int, int]:
    """(tests run, failed + errors) of ``pytest -m marker`` on the installed package."""
    out = worktree.parent / f"junit-{marker.replace(' ', '_')}.xml"
    args = ["-p", "no:cacheprovider", "--rootdir", str(worktree), "-m", marker, f"--junitxml={out}"]
    cmd = [str(python), "-m", "pytest", str(worktree / "tests"), *args]
    proc = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True, check=False)
    assert out.exists(), f"pytest -m {marker!r} wrote no report:\n{proc.stdout}\n{proc.stderr}"
    root = ElementTree.parse(out).getroot()
    assert root is not None  # a file pytest wrote parses to a root element
    suite = root if root.tag == "testsuite" else root[0]
    return int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))


def _night(worktree: Path, env: dict[str, str]) -> tuple[Path, dict[str, tuple[int, int]]]:
    python = _venv_with_wheel(worktree, worktree.parent, env)
    markers = {**MARKERS, "nightly": "nightly"}
    return python, {key: _pytest_counts(python, worktree, m, env) for key, m in markers.items()}


def test_every_commit_builds_installs_and_tests_as_expected(
    sample: tuple[Path, list[SampleCommit]], tmp_path: Path
) -> None:
    dest, commits = sample
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NIGHTLYSAMPLE_DEVICES")}
    # the sample tests need no plugins; autoloading this venv's many costs ~2 s per run
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    worktrees = []
    for index, commit in enumerate(commits, 1):
        worktree = tmp_path / f"c{index}" / f"nightlysample-{index}"
        _git(dest, "worktree", "add", "--detach", str(worktree), f"{commit.sha}")
        _git(worktree, "apply", str(PATCH))
        worktrees.append(worktree)
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        nights = list(pool.map(lambda wt: _night(wt, env), worktrees))

    for index, (commit, (python, counts)) in enumerate(zip(commits, nights, strict=True), 1):
        got = {key: n for key, (n, _) in counts.items()}
        got["failed"] = sum(failed for key, (_, failed) in counts.items() if key != "nightly")
        want = {key: commit.expect[key] for key in (*MARKERS, "failed")}
        want["unit"] += 1  # the patch adds one `unit and nightly` test, which passes
        assert got == {**want, "nightly": 1}, f"commit {index} ({commit.message})"
        assert counts["nightly"] == (1, 0)
        show_version = "import nightlysample; print(nightlysample.__version__)"
        assert _run(python, "-c", show_version, cwd=tmp_path, env=env).strip() == commit.version

    # the 0.3.0 matmul rewrite is a real performance regression (benchmarks run one at a time)
    medians = []
    for python, _ in nights[2:]:
        out = python.parents[2] / "bench.json"
        _run(python, "-m", "nightlysample.bench", "--json", out, cwd=out.parent, env=env)
        result = json.loads(out.read_text())
        assert {b["name"] for b in result["benchmarks"]} == {"matmul_64", "prefix_sum_100k"}
        assert datetime.fromisoformat(result["timestamp"]).tzinfo is not None
        medians.append(next(b["value"] for b in result["benchmarks"] if b["name"] == "matmul_64"))
    print(f"matmul_64 median: 0.2.1 {medians[0]:.4f}s, 0.3.0 {medians[1]:.4f}s")
    assert medians[1] >= 1.3 * medians[0]
