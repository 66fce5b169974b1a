"""Build contexts for the two image roles of seed 001: `framework` (dependencies, tomorrow's cache)
and `runtime` (the night's wheels and tests on top), or a Dockerfile from the pinned repository.

Layer order matters for the cache: what changes every night (wheels, tests, labels) comes last.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

# Files at a repository's root that configure pytest (markers, rootdir, plugins).
PYTEST_CONFIG_FILES = ("pyproject.toml", "setup.cfg", "pytest.ini", "tox.ini", "conftest.py")
SUITES_DIR = Path(__file__).resolve().parent.parent / "suites"
WORKDIR = "/opt/nightly/work"

_VENV = """\
RUN python3 -m venv --system-site-packages /opt/venv && /opt/venv/bin/python -m pip --version
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv
"""


@dataclass(frozen=True)
class BuildContext:
    path: Path
    dockerfile: str
    build_args: dict[str, str]


def framework_context(dest: Path, base_image: str, build_args: dict[str, str]) -> BuildContext:
    """Base image plus a virtual environment: the slow, nightly-stable part of the image."""
    dest.mkdir(parents=True, exist_ok=True)
    lines = ["ARG BASE_IMAGE", "FROM ${BASE_IMAGE}", *(f"ARG {name}" for name in sorted(build_args)), _VENV]
    (dest / "Dockerfile").write_text("\n".join(lines) + "\n")
    return BuildContext(dest, "Dockerfile", {"BASE_IMAGE": base_image, **build_args})


def runtime_context(
    dest: Path,
    *,
    from_image: str,
    needs_venv: bool,
    wheels: list[Path],
    repo_root: Path | None,
    test_paths: list[str],
    suites: list[str],
    labels: dict[str, str],
) -> BuildContext:
    """`from_image` plus the night's wheels installed from files and the test tree under WORKDIR."""
    dest.mkdir(parents=True, exist_ok=True)
    lines = ["ARG FROM_IMAGE", "FROM ${FROM_IMAGE}"]
    if needs_venv:
        lines.append(_VENV)
    if wheels:
        (dest / "wheels").mkdir()
        for wheel in wheels:
            shutil.copy2(wheel, dest / "wheels" / wheel.name)
        lines += [
            "COPY wheels/ /opt/nightly/wheels/",
            "RUN python3 -m pip install --no-index --no-cache-dir --find-links /opt/nightly/wheels "
            "/opt/nightly/wheels/*.whl",
        ]
    work = dest / "work"
    work.mkdir()
    if repo_root is not None:
        _copy_tests(repo_root, test_paths, work)
    for suite in suites:
        source = SUITES_DIR / suite
        if not source.is_dir():
            known = ", ".join(sorted(p.name for p in SUITES_DIR.iterdir() if p.is_dir()))
            raise FileNotFoundError(f"shipped suite '{suite}' does not exist (known: {known})")
        shutil.copytree(source, work / "suites" / suite, ignore=shutil.ignore_patterns("__pycache__"))
    lines += [f"COPY work/ {WORKDIR}/", f"WORKDIR {WORKDIR}"]
    if labels:  # one instruction: under vfs every uncached step copies the whole filesystem
        lines.append("LABEL " + " ".join(f"{name}={_quote(value)}" for name, value in sorted(labels.items())))
    (dest / "Dockerfile").write_text("\n".join(lines) + "\n")
    return BuildContext(dest, "Dockerfile", {"FROM_IMAGE": from_image})


def repository_context(repo_root: Path, dockerfile: str, build_args: dict[str, str]) -> BuildContext:
    """The repository's own Dockerfile (seed 001's container/Dockerfile.<framework>), context = the repo."""
    path = (repo_root / dockerfile).resolve()
    if not path.is_file() or repo_root.resolve() not in path.parents:
        raise FileNotFoundError(f"Dockerfile '{dockerfile}' is not a file inside the repository {repo_root}")
    return BuildContext(repo_root, str(path.relative_to(repo_root.resolve())), dict(build_args))


def _copy_tests(repo_root: Path, test_paths: list[str], work: Path) -> None:
    for name in PYTEST_CONFIG_FILES:
        if (repo_root / name).is_file():
            shutil.copy2(repo_root / name, work / name)
    for rel in test_paths:
        source = (repo_root / rel).resolve()
        if repo_root.resolve() not in source.parents:
            raise ValueError(f"test path '{rel}' leaves the repository")
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(source, work / rel, ignore=ignore, dirs_exist_ok=True)
        elif source.is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, work / rel)
        else:
            raise FileNotFoundError(f"test path '{rel}' is not in the repository {repo_root}")


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
