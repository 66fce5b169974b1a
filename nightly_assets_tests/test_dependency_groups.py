"""PEP 735 dependency groups as a suite's test dependencies: the resolver (includes, normalised
names, cycles, missing groups), the pip arguments with a pinnable pytest, the versions an
environment records, and nights of a project whose pyproject.toml holds the groups."""

import json
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pydantic import ValidationError

from nightly_assets.builds.dependency_groups import DependencyGroupError, pyproject_groups, resolve_groups
from nightly_assets.builds.distributions import installed_distributions
from nightly_assets.builds.suite_dependencies import SuiteDependencies, SuiteDependencyParams
from nightly_assets.containers.recipes import runtime_context
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_files
from nightly_assets_tests.third_party_pipeline import pipeline_text, third_party_pipeline

GROUPS = {
    "time": ["freezegun>=1.4"],
    "Test_Suite": ["pytest>=8", {"include-group": "TIME"}],  # PEP 503: test-suite includes time
    "all": [{"include-group": "test.suite"}, "six"],
}


def test_a_group_splices_in_the_groups_it_includes_by_normalised_name() -> None:
    assert resolve_groups(GROUPS, ["test-suite", "all"], "here") == {
        "test-suite": ["pytest>=8", "freezegun>=1.4"],
        "all": ["pytest>=8", "freezegun>=1.4", "six"],
    }


def test_a_cycle_of_includes_is_an_error_naming_it() -> None:
    table = {"a": ["x", {"include-group": "b"}], "b": [{"include-group": "a"}]}
    with pytest.raises(
        DependencyGroupError, match=r"^here: Cyclic dependency group include while resolving a"
    ):
        resolve_groups(table, ["a"], "here")


def test_an_unknown_included_group_is_an_error_naming_it() -> None:
    table: dict[str, object] = {"test": ["pytest", {"include-group": "typo"}]}
    with pytest.raises(DependencyGroupError, match=r"^here: Dependency group 'typo' not found$"):
        resolve_groups(table, ["test"], "here")


def test_a_group_the_pyproject_lacks_names_the_group_the_file_and_the_commit(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[dependency-groups]\ntest = ["pytest"]\ndocs = []\n')
    with pytest.raises(DependencyGroupError) as raised:
        pyproject_groups(tmp_path, ["test", "lint"], commit="0123456789abcdef")
    assert str(raised.value) == (
        f"dependency group(s) 'lint' not in [dependency-groups] of {tmp_path / 'pyproject.toml'} "
        "at commit 0123456789ab (its groups: docs, test)"
    )


def test_a_checkout_without_pyproject_is_an_error_naming_the_file(tmp_path: Path) -> None:
    params = SuiteDependencyParams(dependency_groups=["test"])
    with pytest.raises(
        DependencyGroupError, match=r"^environment: dependency group\(s\) 'test' asked for, but "
    ):
        params.test_dependencies(tmp_path, "environment", "abc")


def test_pytest_is_added_once_pinned_when_asked() -> None:
    groups = {"test": ["pytest>=8", "freezegun"]}
    assert SuiteDependencies(packages=["six"]).pip_arguments(["w.whl"]) == ["w.whl", "six", "pytest"]
    assert SuiteDependencies(groups=groups).pip_arguments(["w.whl"]) == ["w.whl", "pytest>=8", "freezegun"]
    assert SuiteDependencies(packages=["PyTest==8.1.1"]).pip_arguments([]) == ["PyTest==8.1.1"]
    assert SuiteDependencies(pytest=">=8,<9").pip_arguments([]) == ["pytest>=8,<9"]
    pinned = SuiteDependencies(groups=groups, pytest="<9").pip_arguments([])  # pip intersects the two
    assert pinned == ["pytest>=8", "freezegun", "pytest<9"]
    assert SuiteDependencies().pip_arguments(["w.whl"]) == ["w.whl"]  # the orchestrator's pytest


def test_the_runtime_image_installs_the_groups_and_the_pinned_pytest(tmp_path: Path) -> None:
    """Fetched here with the same arguments, installed in the image from the fetched files."""
    wheel = tmp_path / "dist" / "grouped-1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    (tmp_path / "repo" / "requirements").mkdir(parents=True)
    (tmp_path / "repo" / "requirements" / "extra.txt").write_text("six\n")
    tests = SuiteDependencies(
        [tmp_path / "repo" / "requirements" / "extra.txt"], groups={"test": ["freezegun>=1.4"]}, pytest="<9"
    )
    fetched: list[list[str]] = []
    context = runtime_context(
        tmp_path / "context",
        from_image="base",
        needs_venv=False,
        wheels=[wheel],
        repo_root=tmp_path / "repo",
        test_paths=[],
        suites=[],
        labels={},
        tests=tests,
        fetch=lambda args, dest: fetched.append(args),
    )
    assert fetched == [
        [str(wheel), "--requirement", str(tests.requirements[0]), "freezegun>=1.4", "pytest<9"]
    ]
    run = next(
        line for line in (context.path / "Dockerfile").read_text().splitlines() if line.startswith("RUN [")
    )
    assert json.loads(run[4:])[-5:] == [
        "/opt/nightly/wheels/grouped-1.0-py3-none-any.whl",
        "--requirement",
        "/opt/nightly/testdeps/checkout/requirements/extra.txt",
        "freezegun>=1.4",
        "pytest<9",
    ]


def test_pytest_takes_a_version_specifier_named_once() -> None:
    with pytest.raises(ValidationError, match=r"'8\.1': expected a version specifier like '>=8,<9'"):
        SuiteDependencyParams(pytest="8.1")
    with pytest.raises(ValidationError, match=r"pytest is pinned twice"):
        SuiteDependencyParams(pytest="<9", packages=["pytest==8.1.1"])


def test_installed_distributions_are_what_the_python_imports() -> None:
    found = installed_distributions(sys.executable)
    assert found["pytest"] == pytest.__version__
    assert found["pydantic"] and len(found) > 20


GROUPED_PROJECT = {
    "pyproject.toml": """[build-system]
requires = ["flit_core>=3.2,<4"]
build-backend = "flit_core.buildapi"

[project]
name = "grouped"
version = "1.0"
description = "Test dependencies in PEP 735 groups only."

[dependency-groups]
time = ["freezegun>=1.4"]
Test = ["pytest>=8", {include-group = "time"}]
""",
    "src/grouped/__init__.py": '"""The installed package."""\n',
    "tests/test_frozen.py": """import datetime

import freezegun


def test_freezegun_from_the_group():
    with freezegun.freeze_time("2026-11-03"):
        assert datetime.date.today() == datetime.date(2026, 11, 3)
""",
}

TESTS_DIR = {"paths": ["tests"], "timeout_minutes": 10, "runner": "local"}


def _pipeline(upstream: Path, environment: dict[str, Any]) -> str:
    document = third_party_pipeline(
        "grouped",
        upstream,
        environment,
        suites={"tests": ("The suite.", TESTS_DIR)},
        description="Test dependencies from the project's dependency groups.",
    )
    return pipeline_text(document)


@pytest.mark.slow
def test_the_environment_installs_a_group_offline_and_records_the_versions(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    repo = tmp_path / "upstream" / "grouped"
    commit_files(repo, GROUPED_PROJECT)
    environment = {"dependency_groups": ["test"], "pytest": "<9"}
    _, stages, outcome = catalog_nights.run(_pipeline(repo, environment), "2026-11-03")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
    assert stages["tests"].detail == "1/1 passed"
    night = catalog_nights.home / "artefacts/grouped/2026-11-03/cpu"
    distributions = json.loads((night / "environment/manifest.json").read_text())["distributions"]
    assert distributions["freezegun"] == "1.4.0" and distributions["pytest"] == "8.1.1"  # the wheelhouse's
    assert distributions["grouped"] == "1.0"
    event = catalog_nights.instance.get_latest_materialization_event(dg.AssetKey(["grouped", "environment"]))
    assert event is not None and event.asset_materialization is not None
    metadata = event.asset_materialization.metadata
    assert metadata["pytest"].value == "8.1.1" and metadata["distributions"].value == len(distributions)
    summary = (night / "night_summary/summary.md").read_text()
    assert "- tests (environment): pytest 8.1.1" in summary.splitlines()


@pytest.mark.slow
def test_a_group_the_pinned_pyproject_lacks_fails_the_environment(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    repo = tmp_path / "upstream" / "grouped"
    sha = commit_files(repo, GROUPED_PROJECT)
    _, stages, outcome = catalog_nights.run(
        _pipeline(repo, {"dependency_groups": ["test", "lint"]}), "2026-11-03"
    )
    assert not outcome.succeeded
    detail = stages["environment"].detail
    assert stages["environment"].status == "failure"
    assert detail is not None
    assert "grouped/environment: dependency group(s) 'lint' not in [dependency-groups] of " in detail
    assert f"pyproject.toml at commit {sha[:12]} (its groups: Test, time)" in detail
