"""Where Bazel builds and tests remotely (``RemoteSettings``): the endpoints, probed before a run to
choose between remote and local, and the options that reach them. Secrets are named, never held:
the settings carry environment variables' names, whose values go into a private rc file only."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
from pydantic import Field

from nightly_assets.rbe import bazel as bz
from nightly_assets.rbe.runs import Mode, RemoteUnavailableError


class RemoteSettings(dg.Config):
    """Where builds and tests run remotely. Secrets are named, never held: config carries the
    environment variables' names and their values are read when Bazel starts."""

    executor: str | None = Field(default=None, description="--remote_executor, e.g. grpcs://rbe.example:443")
    cache: str | None = Field(default=None, description="--remote_cache, e.g. grpc://127.0.0.1:50051")
    instance_name: str = Field(default="", description="--remote_instance_name")
    headers: dict[str, str] = Field(default_factory=dict, description="non-secret --remote_header K=V")
    header_envs: dict[str, str] = Field(
        default_factory=dict, description="header name -> environment variable holding its (secret) value"
    )
    google_credentials_env: str | None = Field(
        default=None, description="environment variable holding the --google_credentials JSON file path"
    )
    tls_certificate: str | None = Field(default=None, description="--tls_certificate: CA of a grpcs endpoint")
    timeout_s: int = Field(default=60, gt=0, description="--remote_timeout")
    probe_timeout_s: float = Field(default=3.0, gt=0, description="how long the endpoint probe waits")
    fallback_to_local: bool = Field(default=True, description="build locally when the endpoint is down")

    def endpoints(self) -> list[bz.Endpoint]:
        named = (("remote executor", self.executor), ("remote cache", self.cache))
        return [bz.parse_endpoint(setting, url) for setting, url in named if url]

    def choose_mode(self) -> tuple[Mode, str | None]:
        """Remote when every endpoint answers its probe; else local, with why (or an error when
        falling back is off)."""
        endpoints = self.endpoints()
        if not endpoints:
            return "local", None
        root_certs = _read_certificate(self.tls_certificate) if self.tls_certificate else None
        for endpoint in endpoints:
            reason = bz.probe(endpoint, self.instance_name, self.probe_timeout_s, root_certs)
            if reason is None:
                continue
            if not self.fallback_to_local:
                raise RemoteUnavailableError(f"{reason}; fallback_to_local is off")
            return "local-fallback", reason
        return "remote", None

    def bazel_options(self) -> tuple[list[str], list[str], list[str]]:
        """(options for argv, options for the private rc file, secret values to redact)."""
        public = [f"--remote_executor={self.executor}"] if self.executor else []
        public += [f"--remote_cache={self.cache}"] if self.cache else []
        public += [f"--remote_instance_name={self.instance_name}"] if self.instance_name else []
        public += [bz.header_flag(name, value) for name, value in self.headers.items()]
        public.append(f"--remote_timeout={self.timeout_s}")
        public += [f"--tls_certificate={self.tls_certificate}"] if self.tls_certificate else []
        private: list[str] = []
        secrets: list[str] = []
        for name, variable in self.header_envs.items():
            secrets.append(_secret(variable, f"remote header {name!r}"))
            private.append(bz.header_flag(name, secrets[-1]))
        if self.google_credentials_env:
            secrets.append(_secret(self.google_credentials_env, "google_credentials"))
            private.append(f"--google_credentials={secrets[-1]}")
        return public, private, secrets


def _read_certificate(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise bz.BazelConfigError(f"tls_certificate={path!r}: cannot read it ({exc.strerror})") from None


def _secret(variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise bz.BazelConfigError(f"{what}: environment variable {variable} is not set or empty")
    return value
