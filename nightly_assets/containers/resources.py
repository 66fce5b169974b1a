"""Container resources: the Docker engines of the runner pool, and the registries by role (ECR, ACR)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import dagster as dg
import yaml
from pydantic import Field, PrivateAttr

from nightly_assets.containers.ecr import EcrTokenError, ecr_token
from nightly_assets.settings import FromEnv, Seconds, one_of

# The Docker SDK (and the paramiko it loads) and the registry client (requests) are for a run,
# not for loading the code location: each method imports what it uses.
if TYPE_CHECKING:
    import docker  # type: ignore[import-untyped]

    from nightly_assets.containers.registry import OciRegistry
    from nightly_assets.containers.runner import DeviceSpec

DEFAULT_BASE_IMAGE = "nightly-base/python:bookworm"


class EngineUnavailable(RuntimeError):
    """No Docker engine answers for a runner label."""


class DockerHost(dg.Config):
    """One Docker host of the runner pool."""

    docker_host: str | None = Field(default=None, description="engine URL; None: DOCKER_HOST or the socket")
    platforms: list[str] = Field(default_factory=lambda: ["linux/amd64"], description="what it builds/runs")
    gpu_vendor: Literal["none", "nvidia", "amd"] = "none"
    gpus: int = Field(default=0, ge=0, description="accelerators a container on this host gets")
    more_engines: list[str] = Field(
        default_factory=list,
        description="engine URLs of more hosts like this one (platforms, devices): a sharded suite "
        "spreads its containers over all of them",
    )

    def engines(self) -> list[str | None]:
        """Every engine of the label, this host's first (None: DOCKER_HOST or the socket)."""
        return [self.docker_host, *self.more_engines]


class DockerRunnerPoolResource(dg.ConfigurableResource):
    """Maps the catalog's runner labels to Docker hosts; labels not listed use `default`."""

    default: DockerHost = Field(default_factory=DockerHost)
    hosts: dict[str, DockerHost] = Field(default_factory=dict)
    pool_file: str | None = Field(
        default=None,
        description="YAML file with `hosts` (and `default`) that replace the fields', read when first used",
    )
    base_image: str = DEFAULT_BASE_IMAGE
    base_images: dict[str, str] = Field(default_factory=dict, description="per-arch base, e.g. arm64")
    build_timeout_s: int = 7200
    push_retries: int = 4

    _pool: tuple[DockerHost, dict[str, DockerHost]] | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.pool()  # a malformed pool file fails the run at its start, not a stage halfway

    def pool(self) -> tuple[DockerHost, dict[str, DockerHost]]:
        """The default host and the hosts by label: the fields, or what `pool_file` says."""
        if self.pool_file is None:
            return self.default, self.hosts
        if self._pool is None:
            self._pool = _read_pool_file(self.pool_file, self.default)
        return self._pool

    def host(self, label: str) -> DockerHost:
        default, hosts = self.pool()
        return hosts.get(label, default)

    def client(self, label: str, engine: int = 0) -> docker.DockerClient:
        """A client for the label's engine (`engine`: which of its hosts' engines, counted from 0,
        wrapping round); EngineUnavailable (naming label and URL) when it is down."""
        import docker
        import requests

        from nightly_assets.containers.engine import engine_unreachable

        engines = self.host(label).engines()
        url = engines[engine % len(engines)]
        try:
            client = docker.DockerClient(base_url=url) if url else docker.from_env()
            client.ping()
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise EngineUnavailable(engine_unreachable(label, url, exc)) from exc
        return client

    def base_image_for(self, arch: str) -> str:
        """The base of generated images for `arch`: its own entry, else the (multi-arch) default."""
        return self.base_images.get(arch, self.base_image)

    def unavailable_reason(self, label: str, arch: str) -> str | None:
        """Why images cannot be built for `label` here (engine down, base image absent), or None."""
        try:
            client = self.client(label)
        except EngineUnavailable as exc:
            return str(exc)
        import docker.errors

        base_image = self.base_image_for(arch)
        try:
            client.images.get(base_image)
        except docker.errors.ImageNotFound:
            return f"the base image {base_image} is not on the engine of runner '{label}'"
        finally:
            client.close()
        return None

    def devices(self, label: str) -> DeviceSpec:
        from nightly_assets.containers.runner import DeviceSpec

        host = self.host(label)
        return DeviceSpec(host.gpu_vendor, host.gpus if host.gpu_vendor != "none" else 0)

    def platform_for(self, label: str, arch: str) -> str:
        wanted = f"linux/{arch}"
        if wanted not in self.host(label).platforms:
            raise EngineUnavailable(
                f"runner '{label}' builds {', '.join(self.host(label).platforms)}, not {wanted}: "
                "map the label to a host of that architecture in the runner pool"
            )
        return wanted


def _read_pool_file(path: str, default: DockerHost) -> tuple[DockerHost, dict[str, DockerHost]]:
    where = f"runner pool file {path} (pool_file, NIGHTLY_RUNNER_POOL)"
    try:
        document = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("hosts") or {}, dict):
        raise ValueError(f"{where}: expected a mapping with 'hosts' (label: host) and 'default'")

    def host(key: str, spec: object) -> DockerHost:
        try:
            return DockerHost(**spec)  # type: ignore[arg-type]  # pydantic says what is wrong
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {key}: {exc}") from None

    hosts = {label: host(f"hosts.{label}", spec) for label, spec in (document.get("hosts") or {}).items()}
    return (host("default", document["default"]) if "default" in document else default), hosts


class RegistryEndpoint(dg.Config):
    """A registry role's endpoint. The password is named, never held: config and run records carry
    the environment variable's name, and its value is read only when a request is made."""

    url: str = Field(description="https://host[:port]")
    username: str | None = None
    password_env: str | None = Field(default=None, description="environment variable with the password")
    ca_cert: str | None = Field(default=None, description="CA bundle for a private certificate")
    namespace: str = Field(default="", description="repository prefix, e.g. ai-dynamo/")
    auth: Annotated[str, one_of("basic", "ecr"), FromEnv] = Field(
        default="basic", description="basic: username + password_env; ecr: GetAuthorizationToken"
    )
    aws_region: str | None = Field(default=None, description="the ECR registry's region (auth: ecr)")
    aws_endpoint_url: str | None = Field(default=None, description="ECR API endpoint (VPC endpoint, tests)")


class ContainerRegistriesResource(dg.ConfigurableResource):
    """The registries images are pushed to, by role (`ecr`: primary and cache, `acr`: distribution)."""

    registries: dict[str, RegistryEndpoint] = Field(default_factory=dict)
    retries: int = 5
    backoff_s: Seconds = Field(default="0.5", description="the first retry's delay; it doubles per retry")

    def roles(self) -> list[str]:
        return sorted(self.registries)

    def endpoint(self, role: str) -> RegistryEndpoint:
        from nightly_assets.containers.registry import RegistryError  # requests: for a run only

        if role not in self.registries:
            configured = ", ".join(self.roles()) or "none"
            raise RegistryError(
                f"registry role '{role}' is not configured (configured: {configured}); set "
                f"NIGHTLY_REGISTRY_{role.upper()}_URL and its credentials"
            )
        return self.registries[role]

    def registry(self, role: str) -> OciRegistry:
        from nightly_assets.containers.registry import OciRegistry

        endpoint = self.endpoint(role)
        username, password = _credentials(role, endpoint)
        return OciRegistry(
            name=role,
            url=endpoint.url,
            username=username,
            password=password,
            verify=endpoint.ca_cert or True,
            retries=self.retries,
            backoff_s=float(self.backoff_s),
        )

    def repository(self, role: str, name: str) -> str:
        """`name` under the role's namespace (the path part of an image reference)."""
        return f"{self.endpoint(role).namespace}{name}"

    def host(self, role: str) -> str:
        """The role's `host[:port]` (no credentials needed to know it)."""
        from nightly_assets.containers.registry import registry_host

        return registry_host(self.endpoint(role).url)

    def reference(self, role: str, name: str, tag: str) -> str:
        return f"{self.host(role)}/{self.repository(role, name)}:{tag}"

    def engine_auth(self, role: str) -> dict[str, str] | None:
        """Credentials as the engine takes them (sent in a header, never logged)."""
        username, password = _credentials(role, self.endpoint(role))
        if username is None:
            return None
        return {"username": username, "password": password or "", "serveraddress": self.host(role)}


def _credentials(role: str, endpoint: RegistryEndpoint) -> tuple[str | None, str | None]:
    """Username and password for the role: configured, or ECR's short-lived token."""
    from nightly_assets.containers.registry import RegistryError

    if endpoint.auth == "ecr":
        if not endpoint.aws_region:
            raise RegistryError(f"registry role '{role}': auth 'ecr' needs aws_region")
        try:
            token = ecr_token(endpoint.aws_region, endpoint.aws_endpoint_url)
        except EcrTokenError as exc:
            raise RegistryError(f"registry role '{role}': {exc}") from None
        return token.username, token.password
    return endpoint.username, _password(role, endpoint)


def _password(role: str, endpoint: RegistryEndpoint) -> str | None:
    from nightly_assets.containers.registry import RegistryError

    if endpoint.password_env is None:
        return None
    value = os.environ.get(endpoint.password_env)
    if value is None:
        raise RegistryError(
            f"registry role '{role}': environment variable {endpoint.password_env} is not set"
        )
    return value
