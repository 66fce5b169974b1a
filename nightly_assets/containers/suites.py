"""Test and benchmark stages inside the night's image, on the runner label's Docker host."""

from __future__ import annotations

from typing import Any

import dagster as dg
import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]

from nightly_assets.containers.engine import pull_image
from nightly_assets.containers.resources import ContainerRegistriesResource, DockerRunnerPoolResource
from nightly_assets.containers.runner import RunnerPipesClient, SuiteRun, program_command, suite_command
from nightly_assets.stages import StageRun


class ImageNotAvailable(RuntimeError):
    """The stage's image is neither on the runner's engine nor pullable from its registry."""


def runs_in_image(environment: dict[str, Any]) -> bool:
    return environment.get("mode") == "image"


def run_in_image(
    context: dg.AssetExecutionContext,
    run: StageRun,
    environment: dict[str, Any],
    pool: DockerRunnerPoolResource,
    registries: ContainerRegistriesResource,
    *,
    paths: list[str] | None = None,
    markers: str = "",
    collect_only: bool = False,
    program: list[str] | None = None,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> SuiteRun:
    """Run a pytest suite (or `program`) in the upstream image; outputs land in run.workdir/out."""
    label = run.runner_name if run.runner is not None else "local"
    client = pool.client(label)
    image = _ensure_image(client, environment, registries)
    python, rootdir = environment["python"], environment["rootdir"]
    if program is not None:
        command = program_command(python, rootdir, program, timeout_s)
    else:
        command = suite_command(python, rootdir, paths or [], markers, timeout_s, collect_only)
    context.log.info(f"running in {image} on '{label}': {' '.join(command[2:])}")
    pipes = RunnerPipesClient(client, timeout_s=timeout_s + 60)
    result = pipes.run_suite(
        context=context,
        image=image,
        command=command,
        out_dir=run.workdir / "out",
        devices=pool.devices(label),
        env=env or {},
    )
    for message in result.invocation.get_custom_messages():
        context.log.debug(f"pipes: {message}")
    return result


def visible_gpus(pool: DockerRunnerPoolResource, run: StageRun) -> int:
    return pool.devices(run.runner_name if run.runner is not None else "local").count


def _ensure_image(
    client: docker.DockerClient, environment: dict[str, Any], registries: ContainerRegistriesResource
) -> str:
    """The image by local tag when this engine built it, else pulled from its primary registry."""
    for reference in (environment["local_tag"], environment["reference"]):
        try:
            client.images.get(reference)
            return str(reference)
        except docker.errors.ImageNotFound:
            continue
    reference = environment["reference"]
    role = environment.get("primary_registry")
    if role is None or not pull_image(client, reference, registries.engine_auth(role)):
        raise ImageNotAvailable(f"image {reference} is not on this engine and no registry serves it")
    return str(reference)
