"""The docker-compose deployment's images, built once per test session as an air-gapped operator
builds them (the `deploy_images` fixture, for the image and compose-up tests).

`deploy/build-images.sh` (`make deploy-images`) runs against the test engine, whose containers have
no network: the base image is local (the Debian peer image with git added from the host's apt
mirror, as deploy/README.md's *Air-gapped builds* says), apt is not used in the build, and pip in
the images installs from the wheelhouse alone. The images then start with ``--network none``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import docker  # type: ignore[import-untyped]
import pytest

from nightly_assets_tests.peers.docker import DockerEngine
from nightly_assets_tests.peers.shared import peers_dir

ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT / "deploy" / "build-images.sh"
USER_CODE_IMAGE = "nightly_assets_user_code"
DAGSTER_IMAGE = "nightly_assets_dagster"
# The peer's Debian image plus git: what an operator's local base image for the code image holds.
DEPLOY_BASE_IMAGE = "nightly-base/python:bookworm-git"
DEPLOY_BASE_PACKAGES = ("git",)
BUILD_TIMEOUT_S = 3600


def _missing_debian_packages(client: docker.DockerClient, base: str) -> list[str]:
    """What apt on this host would install into `base` for DEPLOY_BASE_PACKAGES (its dpkg status)."""
    status = client.containers.run(base, ["cat", "/var/lib/dpkg/status"], network_mode="none", remove=True)
    with tempfile.NamedTemporaryFile("wb", suffix=".status") as handle:
        handle.write(status)
        handle.flush()
        simulated = subprocess.run(
            [
                "apt-get",
                "-s",
                "-o",
                f"Dir::State::status={handle.name}",
                "install",
                "--no-install-recommends",
                *DEPLOY_BASE_PACKAGES,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if simulated.returncode != 0:
        pytest.fail(f"apt-get cannot plan {DEPLOY_BASE_PACKAGES} for {base}:\n{simulated.stderr}")
    return [line.split()[1] for line in simulated.stdout.splitlines() if line.startswith("Inst ")]


def ensure_deploy_base_image(engine: DockerEngine, base: str) -> str:
    """DEPLOY_BASE_IMAGE: `base` with git, its .deb files fetched on this host (`apt-get download`)
    and installed with dpkg in a build that has no network. Kept in the engine between sessions."""
    client = engine.client()
    try:
        try:
            client.images.get(DEPLOY_BASE_IMAGE)
            return DEPLOY_BASE_IMAGE
        except docker.errors.ImageNotFound:
            pass
        packages = _missing_debian_packages(client, base)
        with tempfile.TemporaryDirectory(dir=peers_dir()) as context:
            download = subprocess.run(
                ["apt-get", "download", *packages], cwd=context, capture_output=True, text=True, check=False
            )
            if download.returncode != 0:
                pytest.fail(f"apt-get download {packages} failed:\n{download.stderr}")
            Path(context, "Dockerfile").write_text(
                f"FROM {base}\nCOPY *.deb /tmp/debs/\n"
                "RUN dpkg -i /tmp/debs/*.deb && rm -rf /tmp/debs && git --version\n"
            )
            client.images.build(path=context, tag=DEPLOY_BASE_IMAGE, rm=True, forcerm=True)
        return DEPLOY_BASE_IMAGE
    finally:
        client.close()


def build_deploy_images(engine: DockerEngine, base: str, log: Path) -> dict[str, str]:
    """`make deploy-images` with a local base image and no apt: the wheelhouse is filled through this
    host's pip configuration (its index or mirror), checked offline, and the images built offline."""
    if shutil.which("docker") is None:
        pytest.fail("the `docker` CLI is not installed (deploy/build-images.sh builds with it)")
    deploy_base = ensure_deploy_base_image(engine, base)
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("DOCKER_")},
        **engine.env(),
        # The 28.x CLI here has no buildx; its legacy builder is what compose 1.29 uses too.
        "DOCKER_BUILDKIT": "0",
        "PYTHON": sys.executable,
        "NIGHTLY_DEPLOY_BASE_IMAGE": deploy_base,
        "NIGHTLY_DEPLOY_APT_PACKAGES": "",
        # Outside the checkout and kept between sessions: only new wheels are downloaded again.
        "NIGHTLY_DEPLOY_WHEELHOUSE": str(peers_dir() / "cache" / "deploy-wheelhouse"),
    }
    with log.open("w") as out:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    assert result.returncode == 0, f"deploy/build-images.sh failed ({result.returncode}):\n{tail}"
    return {"user_code": USER_CODE_IMAGE, "dagster": DAGSTER_IMAGE, "log": tail}


@pytest.fixture(scope="session")
def deploy_images(
    docker_engine: DockerEngine, base_image: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Both deploy images, built offline on the test engine: their names and the build log's tail."""
    return build_deploy_images(docker_engine, base_image, tmp_path_factory.mktemp("deploy") / "build.log")
