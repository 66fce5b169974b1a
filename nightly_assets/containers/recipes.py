"""Build contexts for the two image roles of seed 001: `framework` (dependencies, tomorrow's cache)
and `runtime` (the night's wheels and tests on top), or a Dockerfile from the pinned repository.

Layer order matters for the cache: what changes every night (wheels, tests, labels) comes last.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from nightly_assets.builds.suite_dependencies import SuiteDependencies

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
    tests: SuiteDependencies | None = None,
    fetch: Callable[[list[str], Path], None] | None = None,
) -> BuildContext:
    """`from_image` plus the night's wheels installed from files and the test tree under WORKDIR.
    Test dependencies are fetched on this host (`fetch`: pip download from the package sources)
    into the context, so the image installs them without reaching any index."""
    dest.mkdir(parents=True, exist_ok=True)
    lines = ["ARG FROM_IMAGE", "FROM ${FROM_IMAGE}"]
    if needs_venv:
        lines.append(_VENV)
    if wheels:
        (dest / "wheels").mkdir()
        for wheel in wheels:
            shutil.copy2(wheel, dest / "wheels" / wheel.name)
        lines.append("COPY wheels/ /opt/nightly/wheels/")
        install = ["python3", "-m", "pip", "install", "--no-index", "--no-cache-dir"]
        install += ["--find-links", "/opt/nightly/wheels"]
        inside = [f"/opt/nightly/wheels/{w.name}" for w in wheels]
        if tests and repo_root is not None and fetch is not None:
            fetch(tests.pip_arguments([str(w) for w in wheels]), dest / "testdeps")
            for file in tests.requirements:  # with their folder: a file may include its neighbours
                folder = file.parent.relative_to(repo_root)
                shutil.copytree(file.parent, dest / "testdeps" / "checkout" / folder, dirs_exist_ok=True)
            lines.append("COPY testdeps/ /opt/nightly/testdeps/")
            install += ["--find-links", "/opt/nightly/testdeps"]
            in_image = [
                Path("/opt/nightly/testdeps/checkout") / f.relative_to(repo_root) for f in tests.requirements
            ]
            inside = replace(tests, requirements=in_image).pip_arguments(inside)
        lines.append(f"RUN {json.dumps([*install, *inside])}")  # exec form: no shell parses the names
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
