"""The framework and every package the night's wheels provided: installed, at that version, importable."""

import importlib
import importlib.metadata as metadata
import re

import pytest
from packaging.specifiers import Specifier  # packaging: a dependency of pytest
from packaging.version import Version

pytestmark = pytest.mark.integration


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_level_modules(dist: str) -> list[str]:
    modules = sorted(
        module
        for module, dists in metadata.packages_distributions().items()
        if any(_normalized(d) == _normalized(dist) for d in dists) and not module.startswith("_")
    )
    own = _normalized(dist).replace("-", "_")
    return [own] if own in modules else modules


def test_expected_package(expected_package: tuple[str, str | None]) -> None:
    name, expected = expected_package
    try:
        found = metadata.version(name)
    except metadata.PackageNotFoundError:
        found = None
    if found is None:
        pytest.fail(f"{name} is not installed (expected {expected or 'any version'})")
    # PEP 440 `==`: 2.13.0 matches 2.13.0+cpu, as pip would; a dev or rc version must be exact.
    if expected is not None and not Specifier(f"=={expected}").contains(found, prereleases=True):
        pytest.fail(f"{name}: expected version {expected}, found {found}")
    modules = _top_level_modules(name)
    assert modules, f"{name} {found} is installed but provides no top-level module"
    for module in modules:
        importlib.import_module(module)


def test_framework_version_matches_its_metadata(backend, settings) -> None:
    """The imported module is the installed distribution, not a stale copy on sys.path."""
    installed = metadata.version(settings.framework)
    assert Version(backend.version()) == Version(installed), (
        f"{settings.framework}.__version__ is {backend.version()}, its installed metadata says {installed}"
    )
