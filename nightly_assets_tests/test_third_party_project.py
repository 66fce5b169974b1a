"""A real third-party project's night from YAML alone: itsdangerous (flit_core backend, test
dependencies in a requirements file) built in an isolated PEP 517 environment, its tests run
against the installed wheel with their dependencies from the package sources, offline; the night's
counts are those of a direct pytest run. And what a new user meets: collection errors shown as
errors, a flat layout whose sources would shadow the wheel, a failing build's cause."""

import hashlib
import json
import re
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from nightly_assets.process import cause
from nightly_assets_tests.catalog_nights import CatalogNights
from nightly_assets_tests.git_repo import commit_files, commit_folder
from nightly_assets_tests.peers.docker import DockerEngine
from nightly_assets_tests.peers.pypiserver import start_pypiserver
from nightly_assets_tests.third_party_pipeline import (
    LOCAL_SUITE,
    WHOLE_SUITE,
    developer_venv,
    pipeline_text,
    third_party_pipeline,
)

PROJECTS = Path(__file__).parent / "data" / "projects"

REQUIREMENTS = {"requirements": ["requirements/tests.txt"]}
SUITES = {
    "tests": (WHOLE_SUITE, LOCAL_SUITE),
    "tests_signer": (
        "Only the signer tests, by a pytest argument.",
        {"pytest_args": ["-k", "Signer"], "timeout_minutes": 10, "runner": "local"},
    ),
}


def _pipeline(upstream: Path, environment: dict[str, Any] | None = None, name: str = "itsdangerous") -> str:
    return pipeline_text(third_party_pipeline(name, upstream, environment, SUITES))


def _upstream(tmp_path: Path, project: str) -> Path:
    repo = tmp_path / "upstream" / project
    shutil.copytree(PROJECTS / project, repo)
    commit_folder(repo, f"{project} as released")
    return repo


def _report(home: Path, night: str, stage: str) -> dict[str, int]:
    manifest = home / "artefacts" / "itsdangerous" / night / "cpu" / stage / "manifest.json"
    return {k: v for k, v in json.loads(manifest.read_text())["report"].items() if v and k != "total"}


def _direct_pytest(tmp_path: Path, source: Path, wheelhouse: Path, *args: str) -> dict[str, int]:
    """What a developer runs: a venv with the project and its test requirements, then pytest."""
    venv = tmp_path / "direct-venv"
    if not venv.exists():
        developer_venv(venv, source, wheelhouse)
    done = subprocess.run(
        [venv / "bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=source,
        capture_output=True,
        text=True,
    )
    summary = done.stdout.strip().splitlines()[-1]
    return {outcome: int(n) for n, outcome in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary)}


@pytest.mark.slow
def test_itsdangerous_night_counts_match_a_direct_pytest_run(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    upstream = _upstream(tmp_path, "itsdangerous")
    _, stages, outcome = catalog_nights.run(_pipeline(upstream, REQUIREMENTS), "2026-11-03")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
    direct = _direct_pytest(tmp_path, PROJECTS / "itsdangerous", wheelhouse)
    assert direct["passed"] > 250  # the whole suite ran, not a handful
    assert _report(catalog_nights.home, "2026-11-03", "tests") == direct
    assert _report(catalog_nights.home, "2026-11-03", "tests_signer") == _direct_pytest(
        tmp_path, PROJECTS / "itsdangerous", wheelhouse, "-k", "Signer"
    )
    assert stages["tests"].detail == f"{direct['passed']}/{direct['passed']} passed"
    wheels = catalog_nights.home / "artefacts/itsdangerous/2026-11-03/cpu/wheels"
    build_log = (wheels / "build.log").read_text()
    assert build_log.startswith("build: uv ")  # uv builds, pip where uv cannot serve
    assert "flit-core==3.12.0" in build_log and "isolated environment" in build_log  # PEP 517, isolated
    env_manifest = json.loads(
        (catalog_nights.home / "artefacts/itsdangerous/2026-11-03/cpu/environment/manifest.json").read_text()
    )
    assert env_manifest["packages"] == ["itsdangerous"]
    install_log = (
        catalog_nights.home / "artefacts/itsdangerous/2026-11-03/cpu/environment/install.log"
    ).read_text()
    assert "freezegun==1.4.0" in install_log and "pytest==8.1.1" in install_log  # from the wheelhouse
    assert install_log.startswith("installer: uv ") and env_manifest["installer"].startswith("uv ")


@pytest.mark.slow
def test_missing_test_dependencies_show_as_collection_errors(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    """Without its requirements file the suite cannot import freezegun: the night says so, with
    the errors counted, never "0/0"."""
    upstream = _upstream(tmp_path, "itsdangerous")
    _, stages, outcome = catalog_nights.run(_pipeline(upstream), "2026-11-03")
    assert not outcome.succeeded
    report = _report(catalog_nights.home, "2026-11-03", "tests")
    assert report == {"error": 2}, report  # test_timed.py, and test_url_safe.py that imports it
    assert stages["tests"].status == "failure" and stages["tests"].detail == "0/2 passed (2 errors)"
    junit = (catalog_nights.home / "artefacts/itsdangerous/2026-11-03/cpu/tests/junit.xml").read_text()
    assert "No module named 'freezegun'" in junit


FLAT_PROJECT = {
    "pyproject.toml": """[build-system]
requires = ["flit_core>=3.2,<4"]
build-backend = "flit_core.buildapi"

[project]
name = "flatpkg"
version = "1.0"
description = "A flat layout: the package beside its tests."
""",
    "flatpkg/__init__.py": '"""Installed or not?"""\n',
    "conftest.py": "",  # a root conftest: pytest puts the checkout's root on sys.path
    "tests/test_where.py": """import flatpkg


def test_imports_the_installed_wheel():
    assert "site-packages" in flatpkg.__file__, flatpkg.__file__
""",
}


@pytest.mark.slow
def test_flat_layout_tests_import_the_installed_wheel(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    repo = tmp_path / "upstream" / "flatpkg"
    commit_files(repo, FLAT_PROJECT)
    _, stages, outcome = catalog_nights.run(_pipeline(repo, name="flatpkg"), "2026-11-03")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
    assert stages["tests"].detail == "1/1 passed"


@pytest.mark.slow
def test_a_failing_build_names_its_cause(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    """A build backend the package sources do not hold: the stage's error is the installer's own
    reason (uv's, which builds the wheel; pip's where uv cannot serve)."""
    repo = tmp_path / "upstream" / "itsdangerous"
    shutil.copytree(PROJECTS / "itsdangerous", repo)
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('requires = ["flit_core<4"]', 'requires = ["hatchling"]')
    )
    commit_folder(repo)
    _, stages, outcome = catalog_nights.run(_pipeline(repo), "2026-11-03")
    assert not outcome.succeeded
    detail = stages["wheels"].detail
    assert detail is not None
    first_line = detail.splitlines()[0]
    assert "building itsdangerous (wheel) failed" in first_line
    assert f"the wheelhouse {wheelhouse} only" in first_line
    assert "uv exited with 2: Failed to build" in first_line
    assert "hatchling was not found in the provided package locations" in first_line


def test_one_commit_builds_the_same_wheel_bytes_every_night(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path
) -> None:
    """Each night checks the commit out afresh (new file times); the wheel's archive times are the
    commit's (SOURCE_DATE_EPOCH), so the bytes match and an image installing it stays cached."""
    upstream = _upstream(tmp_path, "itsdangerous")
    document = third_party_pipeline("itsdangerous", upstream)
    sources, wheels_stage = document["stages"][:2]
    summary = {
        "name": "night_summary",
        "kind": "night_summary",
        "deps": ["wheels"],
        "description": "Summary.",
    }
    pipeline = pipeline_text({**document, "stages": [sources, wheels_stage, summary]})
    digests = []
    for night in ("2026-11-03", "2026-11-04"):
        _, stages, outcome = catalog_nights.run(pipeline, night)
        assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
        dist = catalog_nights.home / "artefacts/itsdangerous" / night / "cpu/wheels/dist"
        (wheel,) = dist.glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            times = {info.date_time for info in archive.infolist()}
        assert times == {(2026, 11, 2, 10, 0, 0)}, times  # the commit's time (git_repo.COMMIT_DATE)
        digests.append(hashlib.sha256(wheel.read_bytes()).hexdigest())
    assert digests[0] == digests[1]


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (  # `python -m build` quoting pip (with "< "), then saying pip failed: pip's reason
            "< ERROR: Could not find a version that satisfies the requirement hatchling\n"
            "< ERROR: No matching distribution found for hatchling\n"
            "ERROR Command '['python', '-m', 'pip', 'install']' returned non-zero exit status 1.\n",
            "ERROR: No matching distribution found for hatchling",
        ),
        (  # pytest's short summary
            "tests/test_a.py F\nFAILED tests/test_a.py::test_x - assert 1 == 2\n1 failed in 0.1s\n",
            "FAILED tests/test_a.py::test_x - assert 1 == 2",
        ),
        ("Traceback (most recent call last):\n  File 'x'\nModuleNotFoundError: No module named 'y'\n", None),
        ("", "no output"),
    ],
)
def test_a_failed_commands_cause_is_its_own_error_line(output: str, expected: str | None) -> None:
    assert cause(output) == (expected or "ModuleNotFoundError: No module named 'y'")


@pytest.mark.docker
def test_test_dependencies_go_into_the_runtime_image(
    catalog_nights: CatalogNights,
    tmp_path: Path,
    wheelhouse: Path,
    docker_engine: DockerEngine,
    base_image: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same night with its suite in the night's image: the test dependencies are fetched here
    from the package sources and installed into the image offline; the counts are the same."""
    monkeypatch.setenv("DOCKER_HOST", docker_engine.host)
    upstream = _upstream(tmp_path, "itsdangerous")
    in_image = {
        stage: (about, {**suite, "runner": "cpu-amd-m5-4xlarge"}) for stage, (about, suite) in SUITES.items()
    }
    document = third_party_pipeline("itsdangerous", upstream, suites=in_image)
    document["stages"][2] = {
        "name": "environment",
        "kind": "docker_image",
        "deps": ["wheels"],
        "runner": "cpu-amd-m5-4xlarge",
        "description": "The runtime image with the wheel and the test dependencies.",
        "params": {"install_wheels": True, "requirements": ["requirements/tests.txt"], "tests": ["tests"]},
    }
    pipeline = pipeline_text(document)
    _, stages, outcome = catalog_nights.run(pipeline, "2026-11-03")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
    direct = _direct_pytest(tmp_path, PROJECTS / "itsdangerous", wheelhouse)
    assert _report(catalog_nights.home, "2026-11-03", "tests") == direct
    dockerfile = catalog_nights.home / "artefacts/itsdangerous/2026-11-03/cpu/environment/context/Dockerfile"
    install = json.loads(
        next(line for line in dockerfile.read_text().splitlines() if line.startswith('RUN ["'))[4:]
    )
    assert "--no-index" in install and "/opt/nightly/testdeps/checkout/requirements/tests.txt" in install


@pytest.mark.pypi
@pytest.mark.slow
def test_the_night_takes_its_packages_from_a_real_index(
    catalog_nights: CatalogNights, tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NIGHTLY_PACKAGE_INDEX_URL alone: the build backend, pytest and the test dependencies come
    from a pypiserver serving the wheelhouse's files, and the counts are the direct run's."""
    served = tmp_path / "index"
    shutil.copytree(wheelhouse, served)
    upstream = _upstream(tmp_path, "itsdangerous")
    with start_pypiserver(served, auth=False) as index:
        monkeypatch.delenv("NIGHTLY_WHEELHOUSE")
        monkeypatch.setenv("NIGHTLY_PACKAGE_INDEX_URL", index.simple_url)
        _, stages, outcome = catalog_nights.run(_pipeline(upstream, REQUIREMENTS), "2026-11-03")
    assert outcome.succeeded, {s.stage: s.detail for s in stages.values()}
    assert _report(catalog_nights.home, "2026-11-03", "tests") == _direct_pytest(
        tmp_path, PROJECTS / "itsdangerous", wheelhouse
    )
    # The index was the only source: no wheelhouse, no uv or pip configuration (UV_NO_CONFIG).
    night = catalog_nights.home / "artefacts/itsdangerous/2026-11-03/cpu"
    install_log = (night / "environment/install.log").read_text()
    assert f"packages from: index {index.simple_url}\n" in install_log
    assert install_log.count("--find-links") == 1 and f"--find-links {night / 'wheels/dist'} " in install_log
