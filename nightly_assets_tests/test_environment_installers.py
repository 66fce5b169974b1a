"""The night's environments made and filled with uv, and with pip where uv cannot serve: the same
installed set either way, from the same sources; which installer ran is in the install log; a
resolution failure names the package and the sources; index credentials are never written."""

import shutil
from pathlib import Path
from typing import TypedDict, Unpack

import pytest

from nightly_assets.builds import installers
from nightly_assets.builds.resources import PythonBuildResource
from nightly_assets.builds.suite_dependencies import SuiteDependencies
from nightly_assets.process import CommandError, run_command
from nightly_assets.resources import REPO_WHEELHOUSE

TESTS_TXT = Path(__file__).parent / "data/projects/itsdangerous/requirements/tests.txt"
FREEZEGUN = "freezegun-1.4.0-py3-none-any.whl"


@pytest.fixture
def wheelhouse() -> Path:
    if not (REPO_WHEELHOUSE / FREEZEGUN).is_file():
        pytest.fail(f"{REPO_WHEELHOUSE} lacks {FREEZEGUN}: run `make setup`")
    return REPO_WHEELHOUSE


class _Settings(TypedDict, total=False):
    """The PythonBuildResource settings these tests set."""

    wheelhouse: str
    index_url: str
    fallback_index_url: str
    installer: str


def _builder(tmp_path: Path, **settings: Unpack[_Settings]) -> PythonBuildResource:
    return PythonBuildResource(
        toolchain_dir=str(tmp_path / "toolchain"), uv_cache_dir=str(tmp_path / "uv-cache"), **settings
    )


def _installed(python: Path) -> list[str]:
    """name==version of every distribution in the environment's own site-packages."""
    listing = run_command(
        [
            python,
            "-c",
            "import importlib.metadata as m, sys, sysconfig; site = sysconfig.get_paths()['purelib'];"
            "print('\\n'.join(sorted(f\"{d.metadata['Name'].lower()}=={d.version}\" for d in "
            "m.distributions(path=[site]))))",
        ]
    )
    return listing.output.split()


def test_uv_and_the_pip_fallback_install_the_same_set(tmp_path: Path, wheelhouse: Path) -> None:
    tests = SuiteDependencies(requirements=[TESTS_TXT], packages=["iniconfig"])
    wheels = [wheelhouse / FREEZEGUN]
    uv_python = _builder(tmp_path, wheelhouse=str(wheelhouse)).create_environment(
        tmp_path / "uv", wheels, tmp_path / "uv.log", tests
    )
    pip_python = _builder(tmp_path, wheelhouse=str(wheelhouse), installer="pip").create_environment(
        tmp_path / "pip", wheels, tmp_path / "pip.log", tests
    )
    assert _installed(uv_python) == _installed(pip_python)
    assert {"freezegun==1.4.0", "pytest==8.1.1", "six==1.16.0"} <= set(_installed(uv_python))
    uv_log, pip_log = (tmp_path / "uv.log").read_text(), (tmp_path / "pip.log").read_text()
    assert uv_log.startswith("installer: uv ") and "uv pip install" in uv_log and "--no-index" in uv_log
    assert pip_log.startswith("installer: pip (the builder's installer setting)")
    assert f"packages from: the wheelhouse {wheelhouse} only" in uv_log
    assert any((tmp_path / "uv-cache").iterdir())  # the night's cache, not the user's
    # Neither sees the orchestrator's packages.
    assert run_command([uv_python, "-c", "import dagster"], check=False).returncode != 0


def test_without_the_uv_binary_pip_fills_the_environment(
    tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(installers, "find_uv", lambda: None)
    builder = _builder(tmp_path, wheelhouse=str(wheelhouse))
    assert builder.installer_for().name == "pip"
    python = builder.create_environment(tmp_path / "venv", [wheelhouse / FREEZEGUN], tmp_path / "install.log")
    assert "freezegun==1.4.0" in _installed(python)
    assert (tmp_path / "install.log").read_text().startswith("installer: pip (no uv binary")


def test_a_framework_stack_is_filled_by_pip_and_a_bad_setting_is_named() -> None:
    # uv counts only the venv's own site-packages: it would install again what the stack holds.
    assert installers.choose_installer("uv", stack_in_use=True).name == "pip"
    assert installers.choose_installer("uv", stack_in_use=False).name in ("uv", "pip")
    with pytest.raises(ValueError, match="installer 'conda': expected one of 'uv', 'pip'"):
        installers.choose_installer("conda", stack_in_use=False)


def test_a_uv_resolution_failure_names_the_package_and_the_sources(tmp_path: Path, wheelhouse: Path) -> None:
    builder = _builder(tmp_path, wheelhouse=str(wheelhouse))
    if builder.installer_for().name != "uv":
        pytest.fail("the uv package is a dependency of nightly_assets: reinstall it (make setup)")
    tests = SuiteDependencies(packages=["no-such-package-for-nightly"])
    with pytest.raises(CommandError) as failed:
        builder.create_environment(tmp_path / "venv", [], tmp_path / "install.log", tests)
    first_line = str(failed.value).splitlines()[0]
    assert first_line.startswith(
        f"installing into venv failed, packages from the wheelhouse {wheelhouse} only"
    )
    assert "uv exited with 1: No solution found when resolving dependencies" in first_line
    assert "no-such-package-for-nightly was not found" in first_line


def _file_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 simple index in a folder, as a file:// URL."""
    for wheel in wheels:
        project = root / wheel.name.split("-")[0].replace("_", "-").lower()
        project.mkdir(parents=True)
        shutil.copy(wheel, project)
        (project / "index.html").write_text(
            f'<html><body><a href="{wheel.name}">{wheel.name}</a></body></html>'
        )
    return root.as_uri()


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_what_local_modes_wheelhouse_lacks_comes_from_the_fallback_index(
    tmp_path: Path, wheelhouse: Path, installer: str
) -> None:
    """The wheelhouse holds freezegun, the index the rest (its python-dateutil and six, pytest)."""
    partial = tmp_path / "wheelhouse"
    partial.mkdir()
    shutil.copy(wheelhouse / FREEZEGUN, partial)
    index = _file_index(tmp_path / "simple", [w for w in wheelhouse.glob("*.whl") if w.name != FREEZEGUN])
    offline = _builder(tmp_path, wheelhouse=str(partial), installer=installer)
    with pytest.raises(CommandError, match=f"the wheelhouse {partial} only"):
        offline.create_environment(
            tmp_path / "offline", [], tmp_path / "offline.log", SuiteDependencies(packages=["freezegun"])
        )
    builder = _builder(tmp_path, wheelhouse=str(partial), installer=installer, fallback_index_url=index)
    assert (
        builder.package_sources() == f"the wheelhouse {partial} first, then index {index} for what it lacks"
    )
    python = builder.create_environment(
        tmp_path / "venv", [], tmp_path / "install.log", SuiteDependencies(packages=["freezegun"])
    )
    assert {"freezegun==1.4.0", "python-dateutil==2.9.0.post0", "six==1.16.0"} <= set(_installed(python))
    log = (tmp_path / "install.log").read_text()
    assert f"packages from: the wheelhouse {partial} only" in log  # the first try, offline
    assert f"packages from: index {index} and wheelhouse {partial}" in log  # then with the index


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_index_credentials_are_never_written(tmp_path: Path, installer: str) -> None:
    # Port 9 (discard) on loopback refuses at once: the install fails naming the index, without its password.
    builder = _builder(tmp_path, index_url="http://nightly:s3cret-pw@127.0.0.1:9/simple", installer=installer)
    with pytest.raises(CommandError) as failed:
        builder.create_environment(
            tmp_path / "venv", [], tmp_path / "install.log", SuiteDependencies(packages=["six"])
        )
    assert "index http://127.0.0.1:9/simple" in str(failed.value)
    assert "s3cret-pw" not in str(failed.value)
    assert "s3cret-pw" not in (tmp_path / "install.log").read_text()


ITSDANGEROUS = Path(__file__).parent / "data/projects/itsdangerous"


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_uv_and_pip_build_the_same_wheel_and_log_the_backend(
    tmp_path: Path, wheelhouse: Path, installer: str
) -> None:
    """The same PEP 517 build either way: the project's backend (flit_core) from the wheelhouse in
    an isolated environment, the commit's time in the archive, so the bytes match."""
    epoch = {"SOURCE_DATE_EPOCH": "1762077600"}
    builder = _builder(tmp_path, wheelhouse=str(wheelhouse), installer=installer)
    [wheel] = builder.build_wheels(ITSDANGEROUS, tmp_path / "dist", tmp_path / "build.log", epoch)
    [reference] = _builder(tmp_path, wheelhouse=str(wheelhouse), installer="pip").build_wheels(
        ITSDANGEROUS, tmp_path / "reference", tmp_path / "reference.log", epoch
    )
    assert wheel.name == "itsdangerous-2.2.0-py3-none-any.whl"
    assert wheel.read_bytes() == reference.read_bytes()
    log = (tmp_path / "build.log").read_text()
    if installer == "uv":
        assert log.startswith("build: uv ") and " build --wheel " in log and "--no-index" in log
        assert "Installing build requirement: flit-core==3.12.0" in log
    else:
        assert log.startswith("build: pip in an isolated environment (the builder's installer setting)")
        assert "flit-core==3.12.0" in log


@pytest.mark.parametrize(
    ("installer", "reason"),
    [
        ("uv", "uv exited with 2: Failed to build"),
        ("pip", "build exited with 1: ERROR: No matching distribution found for hatchling"),
    ],
)
def test_a_build_backend_the_sources_lack_is_named(
    tmp_path: Path, wheelhouse: Path, installer: str, reason: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "needs-hatchling"\nversion = "1"\n'
    )
    builder = _builder(tmp_path, wheelhouse=str(wheelhouse), installer=installer)
    with pytest.raises(CommandError) as failed:
        builder.build_wheels(project, tmp_path / "dist", tmp_path / "build.log")
    first_line = str(failed.value).splitlines()[0]
    assert first_line.startswith(
        f"building project (wheel) failed, packages from the wheelhouse {wheelhouse} only"
    )
    assert reason in first_line and "hatchling" in first_line


def test_the_test_toolchain_stands_when_another_stage_links_it_at_the_same_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stages of a night link the toolchain into one folder at once: a link made by the other
    between this one's check and its own link is the same link, not an error."""
    from nightly_assets.builds.toolchain import test_toolchain

    link_to = Path.symlink_to

    def other_stage_first(self: Path, target: Path, target_is_directory: bool = False) -> None:
        if not self.is_symlink():
            link_to(self, target, target_is_directory)  # the other stage's link
        link_to(self, target, target_is_directory)  # this one's: the name is taken now

    monkeypatch.setattr(Path, "symlink_to", other_stage_first)
    dest = test_toolchain(tmp_path / "toolchain")
    monkeypatch.undo()
    assert (dest / "pytest").is_symlink() and (dest / "_pytest").resolve().is_dir()
