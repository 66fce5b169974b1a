"""Single containers on the real engine: the suite runner's two time limits, and wheels built in a
clean builder container (both the wheel and the failure that names its log)."""

import time
import zipfile
from pathlib import Path

import dagster as dg
import pytest

from nightly_assets.containers.runner import ContainerRunError, DeviceSpec, RunnerPipesClient, program_command
from nightly_assets.containers.wheels import WheelBuildError, build_wheels_in_container
from nightly_assets_tests.waiting import stretch

pytestmark = [pytest.mark.docker]

# Sleeps far past any stretched deadline below, so an early end can only be the limit at work.
SLEEPER = ["python3", "-c", "import time; time.sleep(600)"]


def _run_in_container(engine, image: str, command: list[str], hard_limit_s: float, out: Path) -> dict:
    """Materialize an asset that runs `command` through RunnerPipesClient; what it saw comes back."""
    seen: dict = {}

    @dg.asset
    def sleeper(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        client = RunnerPipesClient(engine.client(), timeout_s=hard_limit_s)
        started = time.monotonic()
        try:
            result = client.run_suite(
                context=context, image=image, command=command, out_dir=out, devices=DeviceSpec(), env={}
            )
            seen.update(timed_out=result.timed_out, returncode=result.returncode)
        except ContainerRunError as exc:
            seen["error"] = str(exc)
        seen["elapsed_s"] = time.monotonic() - started
        return dg.MaterializeResult()

    assert dg.materialize([sleeper]).success
    return seen


def _containers(engine) -> set[str]:
    return {c.id for c in engine.client().containers.list(all=True)}


def test_the_suite_timeout_stops_the_program_and_says_so(docker_engine, base_image, tmp_path):
    before = _containers(docker_engine)
    command = program_command("python3", "/", SLEEPER, timeout_s=2)
    seen = _run_in_container(docker_engine, base_image, command, hard_limit_s=60, out=tmp_path / "out")
    assert seen.get("timed_out") is True and seen["returncode"] == -1, seen
    assert (
        seen["elapsed_s"] < 30 * stretch()
    )  # a container starts in seconds when quiet, not on vfs under load
    assert (tmp_path / "out" / "output.log").is_file()  # what the program printed comes back
    assert not _containers(docker_engine) - before  # none left behind (other runs share the engine)


def test_a_container_past_the_hard_limit_is_killed_and_removed(docker_engine, base_image, tmp_path):
    before = _containers(docker_engine)
    seen = _run_in_container(docker_engine, base_image, SLEEPER, hard_limit_s=3, out=tmp_path / "out")
    assert "ran past the hard limit of 3 s and was killed" in seen.get("error", ""), seen
    assert (
        seen["elapsed_s"] < 30 * stretch()
    )  # a container starts in seconds when quiet, not on vfs under load
    assert not _containers(docker_engine) - before  # none left behind (other runs share the engine)


def _sample_project(root: Path, setup_body: str = "") -> Path:
    (root / "pkg_demo").mkdir(parents=True)
    (root / "pkg_demo" / "__init__.py").write_text("VALUE = 42\n")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "pkg-demo"\nversion = "1.2.3"\n'
    )
    if setup_body:
        (root / "setup.py").write_text(setup_body)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # never copied into the builder
    return root


def test_wheels_are_built_inside_the_builder_image(docker_engine, base_image, tmp_path):
    src = _sample_project(tmp_path / "src")
    client = docker_engine.client()
    before = _containers(docker_engine)
    built = build_wheels_in_container(
        client,
        image=base_image,
        python="python3",
        src=src,
        out=tmp_path / "dist",
        log=tmp_path / "build.log",
        platform="linux/amd64",
        timeout_s=300,
    )
    assert [w.name for w in built.wheels] == ["pkg_demo-1.2.3-py3-none-any.whl"]
    assert built.image_id == client.images.get(base_image).id
    with zipfile.ZipFile(built.wheels[0]) as wheel:
        assert "pkg_demo/__init__.py" in wheel.namelist()
        assert not any(name.startswith(".git") for name in wheel.namelist())
    assert "Successfully built pkg-demo" in (tmp_path / "build.log").read_text()
    assert not _containers(docker_engine) - before  # none left behind (other runs share the engine)


def test_a_failing_wheel_build_names_the_image_and_the_error(docker_engine, base_image, tmp_path):
    src = _sample_project(tmp_path / "src", "raise SystemExit('setup.py: the toolchain is missing')\n")
    before = _containers(docker_engine)
    with pytest.raises(WheelBuildError) as error:
        build_wheels_in_container(
            docker_engine.client(),
            image=base_image,
            python="python3",
            src=src,
            out=tmp_path / "dist",
            log=tmp_path / "build.log",
            platform=None,
            timeout_s=300,
        )
    assert base_image in str(error.value) and "exited with" in str(error.value)
    assert "the toolchain is missing" in (tmp_path / "build.log").read_text()
    assert not (tmp_path / "dist").exists()
    assert not _containers(docker_engine) - before  # none left behind (other runs share the engine)


def test_a_missing_builder_image_is_named(docker_engine, tmp_path):
    with pytest.raises(WheelBuildError, match="nightly-base/no-such-builder:1"):
        build_wheels_in_container(
            docker_engine.client(),
            image="nightly-base/no-such-builder:1",
            python="python3",
            src=_sample_project(tmp_path / "src"),
            out=tmp_path / "dist",
            log=tmp_path / "build.log",
            platform=None,
            timeout_s=60,
        )
