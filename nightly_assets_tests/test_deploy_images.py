"""The docker-compose deployment's images, built as an air-gapped operator builds them.

`deploy/build-images.sh` (`make deploy-images`) runs against the test engine, whose containers have
no network (see deploy_builds.py); the images then start with ``--network none``.
"""

from __future__ import annotations

import pytest

from nightly_assets_tests.peers.docker import DockerEngine

# Not in `make test`: the two image builds take minutes (10-25 on a vfs engine), most of the
# suite's 12-minute budget by themselves. `make test-deploy` runs it.
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.deploy_images]


def _run_offline(engine: DockerEngine, image: str, command: list[str]) -> str:
    client = engine.client()
    try:
        output = client.containers.run(image, command, network_mode="none", remove=True, stderr=True)
        return output.decode(errors="replace")
    finally:
        client.close()


def test_the_deploy_images_build_offline_and_run_without_a_network(
    docker_engine: DockerEngine, deploy_images: dict[str, str]
) -> None:
    code = _run_offline(
        docker_engine,
        deploy_images["user_code"],
        [
            "python",
            "-c",
            "import dagster, dagster_docker, dagster_k8s, dagster_postgres, nightly_assets.definitions, "
            "os, subprocess; print(dagster.__version__, os.environ['DAGSTER_HOME'], "
            "sorted(os.listdir('/opt/dagster/wheelhouse'))[:1], "
            "subprocess.run(['git', '--version'], capture_output=True, text=True).stdout.strip())",
        ],
    )
    assert "1.13.27 /opt/dagster/dagster_home" in code, code
    assert "git version" in code, code
    # The nights' own wheelhouse is in the code image (NIGHTLY_WHEELHOUSE=/opt/dagster/wheelhouse).
    wheels = _run_offline(docker_engine, deploy_images["user_code"], ["ls", "/opt/dagster/wheelhouse"])
    assert "setuptools-" in wheels and "pytest-8.1.1-" in wheels and "flit_core-" in wheels, wheels
    dagster = _run_offline(
        docker_engine,
        deploy_images["dagster"],
        ["sh", "-c", "dagster-webserver --version && dagster-daemon --version && ls $DAGSTER_HOME"],
    )
    assert "dagster.yaml" in dagster and "workspace.yaml" in dagster, dagster
    assert "1.13.27" in dagster, dagster
