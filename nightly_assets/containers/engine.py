"""Docker engine work through the docker SDK: build (with cache sources), push with retries, pull.

The engine's streamed JSON is read line by line: errors inside the stream (the SDK does not raise
for them) become exceptions, the build log goes to a file, and the legacy builder's "Using cache"
lines give the cache-hit count.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped]
import docker.errors  # type: ignore[import-untyped]
import requests

# Instructions that do not make a layer of their own work (no cache hit to count).
_UNCOUNTED_STEPS = ("FROM", "ARG")


# Where the docker SDK looks when neither the runner pool nor DOCKER_HOST names an engine (Linux).
DEFAULT_DOCKER_SOCKET = "unix:///var/run/docker.sock"


def engine_unreachable(label: str, configured: str | None, exc: BaseException) -> str:
    """Why runner `label` has no engine, for a person: the address tried and where it came from,
    what went wrong there in words (not the SDK's nested exception), and what to do."""
    env = os.environ.get("DOCKER_HOST")
    if configured:
        where = f"{configured} (the runner pool's docker_host)"
    elif env:
        where = f"{env} (DOCKER_HOST)"
    else:
        where = f"{DEFAULT_DOCKER_SOCKET} (the default socket; DOCKER_HOST is unset)"
    return (
        f"runner '{label}': no Docker engine answers at {where}: {_cause(exc)}. "
        "Start Docker there, point DOCKER_HOST (or the runner pool's docker_host) at a running "
        "engine, or run the stage on a runner that has one"
    )


def _cause(exc: BaseException) -> str:
    """The innermost OS error of the SDK's chain of wrappers, said plainly."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    text = " ".join(str(e) for e in seen)
    if any(isinstance(e, FileNotFoundError) for e in seen) or "FileNotFoundError" in text:
        return "no socket exists at that path"
    if any(isinstance(e, ConnectionRefusedError) for e in seen) or "Connection refused" in text:
        return "nothing listens there (connection refused)"
    if any(isinstance(e, PermissionError) for e in seen) or "Permission denied" in text:
        return "permission denied on the socket (is this user in the docker group?)"
    if "timed out" in text.lower():
        return "it did not answer in time"
    return " ".join(str(exc).split())[:300] or type(exc).__name__


class ImageBuildError(RuntimeError):
    """The engine could not build the image; the message carries the failing step's output."""


class ImagePushError(RuntimeError):
    """The engine could not push the image after its retries."""


@dataclass
class BuildResult:
    image_id: str
    tags: list[str]
    duration_s: float
    steps: int
    cached_steps: int
    architecture: str
    size_bytes: int
    log_path: Path

    @property
    def cache_hit_share(self) -> float:
        return self.cached_steps / self.steps if self.steps else 0.0


@dataclass
class PushResult:
    reference: str
    digest: str
    attempts: int


@dataclass
class _BuildStream:
    steps: int = 0
    cached: int = 0
    counting: bool = False
    image_id: str | None = None
    tail: list[str] = field(default_factory=list)

    def feed(self, chunk: dict[str, Any]) -> None:
        text = chunk.get("stream", "")
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("Step "):
                instruction = stripped.split(":", 1)[1].strip().split(" ", 1)[0].upper()
                self.counting = instruction not in _UNCOUNTED_STEPS
                self.steps += self.counting
            elif stripped == "---> Using cache" and self.counting:
                self.cached += 1
                self.counting = False
            if stripped:
                self.tail = [*self.tail[-40:], stripped]
        if "aux" in chunk and "ID" in chunk["aux"]:
            self.image_id = chunk["aux"]["ID"]
        if "error" in chunk or "errorDetail" in chunk:
            message = chunk.get("error") or chunk["errorDetail"].get("message", "")
            raise ImageBuildError(f"{message.strip()}\n" + "\n".join(self.tail[-15:]))


def build_image(
    client: docker.DockerClient,
    context_dir: Path,
    tags: list[str],
    *,
    build_args: dict[str, str],
    cache_from: list[str],
    platform: str | None,
    log_path: Path,
    timeout_s: int,
    dockerfile: str = "Dockerfile",
) -> BuildResult:
    """Build `context_dir` with the legacy builder (the cache-from semantics the seeds rely on)."""
    started = time.monotonic()
    stream = _BuildStream()
    with log_path.open("w") as log:
        try:
            chunks = client.api.build(
                path=str(context_dir),
                dockerfile=dockerfile,
                tag=tags[0],
                buildargs=build_args,
                cache_from=cache_from or None,
                platform=platform,
                rm=True,
                forcerm=True,
                decode=True,
                timeout=timeout_s,
            )
            for chunk in chunks:
                log.write(chunk.get("stream", "") or json.dumps(chunk) + "\n")
                stream.feed(chunk)
        except ImageBuildError as exc:
            raise ImageBuildError(f"docker build of {tags[0]} failed (log: {log_path}): {exc}") from None
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"docker build of {tags[0]} failed: {exc.explanation or exc}") from exc
    if stream.image_id is None:
        raise ImageBuildError(f"docker build of {tags[0]} ended without an image id (log: {log_path})")
    image = client.images.get(stream.image_id)
    for tag in tags[1:]:
        repository, _, name = tag.rpartition(":")
        image.tag(repository, name)
    return BuildResult(
        image_id=stream.image_id,
        tags=tags,
        duration_s=time.monotonic() - started,
        steps=stream.steps,
        cached_steps=stream.cached,
        architecture=image.attrs.get("Architecture", ""),
        size_bytes=int(image.attrs.get("Size", 0)),
        log_path=log_path,
    )


def push_image(
    client: docker.DockerClient,
    reference: str,
    auth: dict[str, str] | None,
    *,
    retries: int = 4,
    backoff_s: float = 2.0,
) -> PushResult:
    """Push `repo:tag`; the whole push is retried (blobs already there are skipped by the engine)."""
    repository, _, tag = reference.rpartition(":")
    last_error = ""
    for attempt in range(1, retries + 2):
        digest = None
        last_error = ""
        try:
            for chunk in client.api.push(repository, tag, auth_config=auth, stream=True, decode=True):
                if "error" in chunk or "errorDetail" in chunk:
                    last_error = chunk.get("error") or chunk["errorDetail"].get("message", "")
                digest = chunk.get("aux", {}).get("Digest", digest)
        except docker.errors.APIError as exc:
            last_error = str(exc.explanation or exc)
        if not last_error and digest:
            return PushResult(reference, digest, attempt)
        if attempt <= retries:
            time.sleep(backoff_s * 2 ** (attempt - 1))
    raise ImagePushError(
        f"push of {reference} failed after {retries + 1} attempts: {last_error or 'no digest'}"
    )


def pull_image(client: docker.DockerClient, reference: str, auth: dict[str, str] | None) -> bool:
    """Pull `reference`; False when the registry does not have it (a first night has no cache)."""
    repository, _, tag = reference.rpartition(":")
    try:
        client.images.pull(repository, tag=tag, auth_config=auth)
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if "not found" in str(exc).lower() or "manifest unknown" in str(exc).lower():
            return False
        raise
    return True


class ImagePullError(RuntimeError):
    """The engine could not pull the image: not in its registry, refused, or still failing after retries."""


@dataclass(frozen=True)
class PulledImage:
    reference: str
    image_id: str
    repo_digest: str  # repo@sha256:...: what later stages can pin
    architecture: str
    size_bytes: int
    attempts: int


def reference_registry(reference: str) -> str | None:
    """The registry `host[:port]` an image reference names, None for Docker Hub's short names."""
    first, slash, _ = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def pull_pinned_image(
    client: docker.DockerClient,
    reference: str,
    auth: dict[str, str] | None,
    *,
    platform: str | None = None,
    retries: int = 4,
    backoff_s: float = 2.0,
) -> PulledImage:
    """Pull `reference` (repo[:tag] or repo@digest; no tag means `latest`) and resolve its digest.

    The engine's progress stream is read to its end: an error inside it (a layer download cut
    off) fails the attempt, so an older local image never passes for the pulled one. "Not
    found", "denied" and other 4xx answers fail at once; the rest (5xx, 429, connection errors)
    are retried with backoff.
    """
    repository, tag = docker.utils.parse_repository_tag(reference)
    last_error = ""
    for attempt in range(1, retries + 2):
        try:
            for chunk in client.api.pull(
                repository, tag or "latest", stream=True, decode=True, auth_config=auth, platform=platform
            ):
                if "error" in chunk or "errorDetail" in chunk:
                    raise _StreamError(chunk.get("error") or chunk["errorDetail"].get("message", ""))
        except (docker.errors.APIError, _StreamError) as exc:
            last_error = str(getattr(exc, "explanation", None) or exc)
            if _is_final(last_error, getattr(exc, "status_code", None)):
                raise ImagePullError(f"pull of {reference} failed: {last_error}") from None
        except requests.RequestException as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        else:
            image = client.images.get(
                f"{repository}@{tag}"
                if tag and tag.startswith("sha256:")
                else f"{repository}:{tag or 'latest'}"
            )
            digest = _repo_digest(repository, image.attrs.get("RepoDigests", []))
            if not digest:
                raise ImagePullError(
                    f"pull of {reference}: the engine has no digest of it under {repository} "
                    f"(RepoDigests: {image.attrs.get('RepoDigests')})"
                )
            return PulledImage(
                reference=reference,
                image_id=image.id,
                repo_digest=digest,
                architecture=image.attrs.get("Architecture", ""),
                size_bytes=int(image.attrs.get("Size", 0)),
                attempts=attempt,
            )
        if attempt <= retries:
            time.sleep(backoff_s * 2 ** (attempt - 1))
    raise ImagePullError(f"pull of {reference} failed after {retries + 1} attempts: {last_error}")


class _StreamError(RuntimeError):
    """An error the engine reported inside its progress stream."""


def _repo_digest(repository: str, repo_digests: list[str]) -> str:
    """`repository@sha256:…` among the engine's RepoDigests, which name Docker Hub images without
    `docker.io/` and official ones without `library/`."""
    wanted = _normalised(repository)
    return next((d for d in repo_digests if _normalised(d.partition("@")[0]) == wanted), "")


def _normalised(repository: str) -> str:
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        repository = repository.removeprefix(prefix)
    return repository.removeprefix("library/")


def _is_final(message: str, status: int | None = None) -> bool:
    """A client error a retry cannot mend: 4xx other than 408 and 429, or the registry's words."""
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return True
    lowered = message.lower()
    return any(word in lowered for word in ("not found", "manifest unknown", "denied", "unauthorized"))
