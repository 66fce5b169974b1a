"""Container resources from the environment: the runner pool file and the registry roles."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, cast

import yaml

from nightly_assets.containers.resources import (
    DEFAULT_BASE_IMAGE,
    ContainerRegistriesResource,
    DockerHost,
    DockerRunnerPoolResource,
    RegistryEndpoint,
)

REGISTRY_ROLES = ("ecr", "acr")
RUNNER_POOL_VAR = "NIGHTLY_RUNNER_POOL"
ARCHES = ("amd64", "arm64")


def runner_pool_from_env() -> DockerRunnerPoolResource:
    """DOCKER_HOST for every label, or the labels of the YAML file NIGHTLY_RUNNER_POOL names."""
    default = DockerHost(docker_host=os.environ.get("DOCKER_HOST") or None)
    hosts: dict[str, DockerHost] = {}
    path = os.environ.get(RUNNER_POOL_VAR)
    if path:
        document = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(document, dict):
            raise ValueError(f"{RUNNER_POOL_VAR}={path}: expected a mapping with 'default' and 'hosts'")
        try:
            default = DockerHost(**document.get("default", {"docker_host": default.docker_host}))
            hosts = {label: DockerHost(**spec) for label, spec in (document.get("hosts") or {}).items()}
        except Exception as exc:
            raise ValueError(f"{RUNNER_POOL_VAR}={path}: {exc}") from exc
    per_arch = {arch: os.environ.get(f"NIGHTLY_BASE_IMAGE_{arch.upper()}") for arch in ARCHES}
    return DockerRunnerPoolResource(
        default=default,
        hosts=hosts,
        base_image=os.environ.get("NIGHTLY_BASE_IMAGE") or DEFAULT_BASE_IMAGE,
        base_images={arch: image for arch, image in per_arch.items() if image},
    )


def registries_from_env() -> ContainerRegistriesResource:
    """A role is configured by NIGHTLY_REGISTRY_<ROLE>_URL; its password is read from the environment."""
    registries: dict[str, Any] = {}
    for role in REGISTRY_ROLES:
        prefix = f"NIGHTLY_REGISTRY_{role.upper()}_"
        url = os.environ.get(prefix + "URL")
        if not url:
            continue
        registries[role] = RegistryEndpoint(
            url=url,
            username=os.environ.get(prefix + "USERNAME"),
            password_env=prefix + "PASSWORD" if os.environ.get(prefix + "PASSWORD") else None,
            ca_cert=os.environ.get(prefix + "CA_CERT"),
            namespace=os.environ.get(prefix + "NAMESPACE", ""),
            auth=_auth_kind(prefix + "AUTH"),
            aws_region=os.environ.get(prefix + "AWS_REGION"),
            aws_endpoint_url=os.environ.get(prefix + "AWS_ENDPOINT_URL"),
        )
    # The first retry's delay (it doubles per retry); tests shorten it.
    backoff = float(os.environ.get("NIGHTLY_REGISTRY_BACKOFF_S") or "0.5")
    return ContainerRegistriesResource(registries=registries, backoff_s=backoff)


def _auth_kind(variable: str) -> Literal["basic", "ecr"]:
    value = os.environ.get(variable, "basic")
    if value not in ("basic", "ecr"):
        raise ValueError(f"{variable}={value!r}: expected 'basic' or 'ecr'")
    return cast(Literal["basic", "ecr"], value)
